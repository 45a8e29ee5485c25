"""The evaluation harness: one candidate kernel, checked and timed against a baseline, such that
nothing the candidate can reach (its process, its files, its environment) can change a verdict or a time.

Layers, each importing only those below it:
  model        the data model: EvalRequest, WorkloadResult, EvalResult, the Status and TimingMode enums
  check        the correctness rules (poison, tolerances, NaN/Inf, inputs bit for bit)
  scan         the static scan of a source: a fast first filter, never a guarantee
  candidate    what a candidate is (a Python file, a FlashInfer-Trace solution in any language the runner builds)
  cudadrv      the CUDA driver calls torch lacks (VMM memory shared by file descriptor, stream memory ops)
  gpu_ops      the device operations the GPU protocol orders (the real device), every judge's wait bounded
  gpu_model    a model of the device with the ordering rules the GPU has shown, for tests on CPU
  shared       buffers the judge owns and a runner maps; the page of flag words
  protocol     the judge <-> runner messages
  scratch      the evaluations' scratch folders (one root per user; a killed run's are removed by the next)
  guard        the judge's own watch on a runner's memory, processes and disk
  fork         a trusted process forked from this one (the baseline's runner on a CPU target, a command's judge server):
               no interpreter start or imports of its own
  sandbox      bubblewrap + cgroups: the runner's view, limits and end
  runner       the untrusted side: the candidate (or, trusted, the baseline library) and nothing else
  runners      the judge's handle on a runner (deadlines, faults, its stacks)
  calls        one side's inputs and outputs on a workload: fresh values, decoys, the chain, samples, checks
  interval     one timed batch through the protocol, the runner frozen from its answer to its next clock
  cache_flush  the CPU's cache flush before every timed interval
  baselines    the library adapters (FlashInfer, fla, FlashKDA, vLLM, AITER, the reference)
  baseline_cache  baseline times of earlier side-by-side runs, keyed by hardware, library, mode and workload
  timing       the judge's clocks (one per timing mode: every decision that is a mode's) and in-process timing of
               trusted code (probes)
  rounds       one workload's timed rounds (the sides, their order, the checks of timed calls), through a small
               interface to the judge
  judge        the trusted process of one evaluation: checks, timed rounds, flags, verdicts
  judge_server judges forked from a process that imported the harness once
  executor     where the judge runs, and `evaluate(request)`: the one entry point
  executor_registry  the executors by name (local, docker, ray)
  container    executor=docker: the judge in the target's container
  ray_executor executor=ray: an evaluation a Ray task on a node that offers the target

What it does not (yet) rule out, by construction or by a check:
- In graph mode (GPUs) the calls of one timed batch are released together; one call cannot compute another's set
  only where the task chains them (CHAINED_INPUTS: call k+1's input is call k's output, poisoned until written). It
  can still read ahead what the chain leaves known (MLA: the pages every call of the batch will read) and prefetch it.
  A task without a chain is timed one call a graph batch.
- While a GPU runner enqueues its batch (after its inputs are written, before the clock) its other threads run.
- On a GPU the runner could write its input buffers (the judge compares them after every call).
- Inside a container the runner shares the container's memory and process limits with the judge.
"""
