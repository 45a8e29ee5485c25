"""Evaluation results as FlashInfer-Trace lines (readable by flashinfer-bench)."""

from __future__ import annotations

import datetime as dt

from evoteam.harness.model import WorkloadResult
from evoteam.schema import Correctness, Evaluation, Performance, Trace, Workload

# flashinfer-bench knows fewer statuses than our checks tell apart; the log keeps ours.
_STATUS = {
    "PASSED": "PASSED",
    "mismatch": "INCORRECT_NUMERICAL", "rel_norm": "INCORRECT_NUMERICAL", "nan_inf": "INCORRECT_NUMERICAL",
    "unwritten": "INCORRECT_NUMERICAL", "input_modified": "INCORRECT_NUMERICAL",
    "skipped_work": "INCORRECT_NUMERICAL",
    "output_replaced": "INCORRECT_SHAPE",
    "compile_error": "COMPILE_ERROR",
    "timeout": "TIMEOUT",
}


def libraries() -> dict[str, str]:
    import torch

    libs = {"torch": torch.__version__}
    try:
        import triton

        libs["triton"] = triton.__version__
    except ImportError:
        pass
    return libs


def to_trace(definition: str, workload: Workload, solution: str, result: WorkloadResult, hardware: str) -> Trace:
    status = _STATUS.get(result.status, "RUNTIME_ERROR")
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
    evaluation = Evaluation(status=status, environment={"hardware": hardware, "libs": libraries()},
                            timestamp=dt.datetime.now(dt.timezone.utc).isoformat(), log=log,
                            correctness=correctness, performance=performance)
    return Trace(definition=definition, workload=workload, solution=solution, evaluation=evaluation)
