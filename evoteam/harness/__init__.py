"""The evaluation harness: one candidate kernel, checked and timed against a baseline, such that
nothing the candidate can reach (its process, its files, its environment) can change a verdict or a time.

Layers, each importing only those below it:
  model        the data model: EvalRequest, WorkloadResult, EvalResult, the Status and TimingMode enums
  check        the correctness rules (poison, tolerances, NaN/Inf, inputs bit for bit)
  scan         the static scan of a source: a fast first filter, never a guarantee
  cudadrv      the CUDA driver calls torch lacks (VMM memory shared by file descriptor, stream memory ops)
  shared       buffers the judge owns and a runner maps; the page of flag words
  protocol     the judge <-> runner messages
  scratch      the evaluations' scratch folders (one root per user; a killed run's are removed by the next)
  sandbox      bubblewrap + cgroups: the runner's view, limits and end
  runner       the untrusted side: the candidate (or, trusted, the baseline library) and nothing else
  runners      the judge's handle on a runner (deadlines, faults)
  calls        one side's inputs and outputs on a workload: fresh values, decoys, samples, checks
  interval     one timed batch through the protocol, the runner frozen from its answer to its next clock
  baselines    the library adapters (FlashInfer, fla, FlashKDA, vLLM, AITER, the reference)
  timing       in-process timing of trusted code (probes) and its statistics
  judge        the trusted process of one evaluation: checks, timed rounds, flags, verdicts
  executor     where the judge runs, and `evaluate(request)`: the one entry point
  container    executor=docker: the judge in the target's container

What it does not (yet) rule out, by construction or by a check:
- In graph mode (GPUs) the calls of one timed batch (up to 16 independent calls) see their late inputs together: one
  call could compute every set of the batch (a CPU and events mode release them one call at a time).
- While a GPU runner enqueues its batch (after its inputs are written, before the clock) its other threads run.
- On a GPU the runner could write its input buffers (the judge compares them after every call).
- GPU work a frozen candidate left running is waited out before a trusted side is timed (the judge's own flush
  would wait behind it); work that only waits on a word holds the GPU and stalls the judge until the evaluation's
  time limit.
- Inside a container the runner shares the container's memory and process limits with the judge.
"""
