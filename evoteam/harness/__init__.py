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
  baselines    the library adapters (FlashInfer, fla, FlashKDA, vLLM, AITER, the reference)
  timing       in-process timing of trusted code (probes) and its statistics
  judge        the trusted process of one evaluation: checks, timed rounds, flags, verdicts
  executor     where the judge runs, and `evaluate(request)`: the one entry point
  container    executor=docker: the judge in the target's container

What it does not (yet) rule out, by construction or by a check:
- A candidate that merges the calls of one timed batch (up to 16 independent calls, enqueued together
  in graph mode) into fewer launches is timed as it ran; every call's outputs are still checked.
- A persistent GPU kernel left running between batches would be time-sliced against the baseline's
  batches (its host threads are frozen then); nothing measures that interference yet.
- On a GPU the runner could write its input buffers (the judge compares them after every call) and
  could warm the L2 cache between the judge's flush and the start mark with data it can locate before
  the late inputs arrive (MLA: none, its pages are late; KDA: q, k, v, g of short sequences).
- Inside a container the runner shares the container's memory and process limits with the judge.
"""
