"""Evaluation results as FlashInfer-Trace lines (readable by flashinfer-bench)."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from dataclasses import replace
from pathlib import Path

from evoteam.harness.candidate import solution_label
from evoteam.harness.model import Status, WorkloadResult
from evoteam.schema import Correctness, Evaluation, Performance, Trace, Workload

# flashinfer-bench knows fewer statuses than our checks tell apart; the log keeps ours. Every status
# has its line (a test checks): a new one must say what flashinfer-bench would call it.
TRACE_STATUS = {
    Status.PASSED: "PASSED",
    Status.REJECTED: "COMPILE_ERROR",  # refused before it was loaded, as a build that fails
    Status.COMPILE_ERROR: "COMPILE_ERROR",
    Status.EXCEPTION: "RUNTIME_ERROR",
    Status.CRASH: "RUNTIME_ERROR",
    Status.OUT_OF_MEMORY: "RUNTIME_ERROR",
    Status.OUTPUT_REPLACED: "INCORRECT_SHAPE",
    Status.OUTPUT_DTYPE: "INCORRECT_DTYPE",
    Status.INPUT_MODIFIED: "INCORRECT_NUMERICAL",  # checks flashinfer-bench does not make
    Status.UNWRITTEN: "INCORRECT_NUMERICAL",
    Status.NAN_INF: "INCORRECT_NUMERICAL",
    Status.MISMATCH: "INCORRECT_NUMERICAL",
    Status.REL_NORM: "INCORRECT_NUMERICAL",
    Status.SKIPPED_WORK: "INCORRECT_NUMERICAL",
    Status.TIMEOUT: "TIMEOUT",
    Status.FLAGGED: "RUNTIME_ERROR",  # correct, but its time is not trusted: not a pass anywhere
    Status.HARNESS_ERROR: "RUNTIME_ERROR",
}


# The key of a trace's correctness `extra` that holds flashinfer-bench's verdict on the outputs (WorkloadResult.fib)
FIB_VERDICT = "flashinfer-bench"


def solution_name(task: str, source: str) -> str:
    """A kernel's solution name: unique across tasks, the same for the same source in any run."""
    task = task.rsplit("::", 1)[-1]  # a dataset's task (<folder>::<definition>) by its definition: no folder path
    return f"{task}_evoteam_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


_CONTENT_NAME = re.compile(r".+_evoteam_[0-9a-f]{12}")


def is_content_name(name: str) -> bool:
    """Whether a name is of the form `solution_name` gives (its source's hash in it): a file can be checked to be the
    source of such a name; a stem (older traces) or a solution JSON's own name says nothing of the content."""
    return bool(_CONTENT_NAME.fullmatch(name))


def solution_name_of_file(task: str, path: Path) -> str:
    """The name traces give a kernel file: a FlashInfer-Trace solution JSON keeps its own (its author's, the name
    flashinfer-bench knows it by); any other file is named by its task and content (`solution_name`)."""
    return solution_label(path) if path.suffix == ".json" else solution_name(task, path.read_text())


def non_finite_errors(status: str, correctness: Correctness | None) -> Correctness | None:
    """A nan_inf verdict's errors as non-finite, for results and traces recorded before the checker kept them
    (check.worst: its worst over trials was Python's max, and max(0.0, nan) is 0.0): finite errors under a nan_inf
    verdict are a NaN that was lost. The checker's own results come through unchanged. `status` is evoteam's
    (Status), as the trace's log begins with it."""
    if correctness is None or status != Status.NAN_INF.value:
        return correctness
    return replace(correctness, **{k: math.nan for k in ("max_relative_error", "max_absolute_error")
                                   if math.isfinite(getattr(correctness, k))})


def libraries() -> dict[str, str]:
    import torch

    libs = {"torch": torch.__version__}
    try:
        import triton

        libs["triton"] = triton.__version__
    except ImportError:
        pass
    if getattr(torch.version, "cuda", None):
        libs["cuda"] = torch.version.cuda
    return libs


def to_trace(definition: str, workload: Workload, solution: str, result: WorkloadResult, hardware: str) -> Trace:
    status = TRACE_STATUS[Status(result.status)]
    corr = result.correctness or {}
    correctness = None
    if status in ("PASSED", "INCORRECT_NUMERICAL"):
        # the pass rule used (rule, its tolerances) and flashinfer-bench's verdict on the same outputs (FIB_VERDICT):
        # an export gives its verdict where evoteam's rule passed what flashinfer-bench's does not
        correctness = Correctness(max_relative_error=float(corr.get("max_relative_error", 0.0)),
                                  max_absolute_error=float(corr.get("max_absolute_error", 0.0)),
                                  extra={**{k: v for k, v in corr.get("extra", {}).items()
                                            if k in ("max_rel_norm", "trials", "base_seed")},
                                         **result.rule, **({FIB_VERDICT: result.fib} if result.fib else {})} or None)
    correctness = non_finite_errors(str(result.status), correctness)
    performance = None
    if status == "PASSED" and result.candidate_ms is not None:  # None: checked, not timed (bench --check-only)
        performance = Performance(latency_ms=result.candidate_ms, reference_latency_ms=result.baseline_ms or 0.0,
                                  speedup_factor=result.speedup or 0.0)
    log = f"{result.status}: {result.detail}"
    if result.timing_mode:
        log += f" | baseline {result.baseline}, timing {result.timing_mode}"
    if result.rule:  # every trace names its pass rule; a correctness record has its tolerances as well
        log += f" | rule {result.rule['rule']}"
    if result.fib and status == "PASSED" and result.fib["status"] != "PASSED":
        log += (f" | flashinfer-bench's rule: {result.fib['status']} ({result.fib['elements_failed']} elements, max "
                f"|err| {result.fib['max_absolute_error']})")
    # The device's own name where the judge recorded it (as flashinfer-bench writes it), else the target's
    evaluation = Evaluation(status=status, environment={"hardware": result.device or hardware, "libs": libraries()},
                            timestamp=dt.datetime.now(dt.timezone.utc).isoformat(), log=log,
                            correctness=correctness, performance=performance)
    if status == "PASSED" and performance is None:
        # Checked, not timed: flashinfer-bench requires performance of a PASSED evaluation and has no status for
        # "correct, not timed", so the evaluation is null (the trace loads there and claims no time) and the verdict
        # is in `check`, a field its loader ignores
        return Trace(definition=definition, workload=workload, solution=solution, evaluation=None, check=evaluation)
    return Trace(definition=definition, workload=workload, solution=solution, evaluation=evaluation)
