"""Evaluation results as FlashInfer-Trace lines (readable by flashinfer-bench)."""

from __future__ import annotations

import datetime as dt
import hashlib

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


def solution_name(task: str, source: str) -> str:
    """A kernel's solution name: unique across tasks, the same for the same source in any run."""
    return f"{task}_evoteam_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


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
        correctness = Correctness(max_relative_error=float(corr.get("max_relative_error", 0.0)),
                                  max_absolute_error=float(corr.get("max_absolute_error", 0.0)),
                                  extra={k: v for k, v in corr.get("extra", {}).items()
                                         if k in ("max_rel_norm", "trials", "base_seed")} or None)
    performance = None
    if status == "PASSED":  # flashinfer-bench requires performance on PASSED; 0 means "not timed"
        performance = Performance(latency_ms=result.candidate_ms or 0.0, reference_latency_ms=result.baseline_ms or 0.0,
                                  speedup_factor=result.speedup or 0.0)
    log = f"{result.status}: {result.detail}"
    if result.timing_mode:
        log += f" | baseline {result.baseline}, timing {result.timing_mode}"
    # The device's own name where the judge recorded it (as flashinfer-bench writes it), else the target's
    evaluation = Evaluation(status=status, environment={"hardware": result.device or hardware, "libs": libraries()},
                            timestamp=dt.datetime.now(dt.timezone.utc).isoformat(), log=log,
                            correctness=correctness, performance=performance)
    return Trace(definition=definition, workload=workload, solution=solution, evaluation=evaluation)
