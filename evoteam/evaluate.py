"""One candidate on a set of workloads, inside the (isolated) worker process: anti-cheat scan,
correctness check, then baseline and candidate timed side by side in this process, interleaved.

Run it through `evoteam.worker.evaluate_isolated`, which gives each evaluation its own process,
time limit and crash recovery; calling it directly runs untrusted code in the caller's process.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from evoteam import anticheat, baselines, timing
from evoteam.baseline_cache import BaselineCache, Key, hardware_fingerprint
from evoteam.check import check_kernel, poison_outputs, verify_outputs
from evoteam.hardware import HardwareSpec
from evoteam.task import Task, load_module_from_path, load_task
from evoteam.worker import PASSED, EvalRequest, WorkloadResult

INPUT_SETS = 2  # rotating input sets: no timed call sees the inputs of the call before it


def _all_failed(uuids: list[str], status: str, detail: str) -> Iterator[WorkloadResult]:
    for uuid in uuids:
        yield WorkloadResult(uuid=uuid, status=status, detail=detail)


def evaluate_in_process(request: EvalRequest, hw: HardwareSpec,
                        on_start: Callable[[str], None] = lambda uuid: None) -> Iterator[WorkloadResult]:
    task = load_task(request.task)
    by_uuid = {w.uuid: w for w in task.scaled_workloads(request.scale)}
    uuids = request.workloads or list(by_uuid)
    unknown = [u for u in uuids if u not in by_uuid]
    if unknown:
        raise ValueError(f"workloads not in task {task.name} at scale {request.scale}: {unknown}")

    source_path = Path(request.solution)
    source = source_path.read_text()
    violations = anticheat.scan_source(source, str(source_path)) if request.static_scan else []
    if violations:
        yield from _all_failed(uuids, "rejected", "; ".join(str(v) for v in violations[:5]))
        return
    try:
        module = load_module_from_path(source_path.resolve(), f"evoteam_candidate_{abs(hash(source))}")
        kernel = getattr(module, request.entry)
    except Exception as exc:  # noqa: BLE001 - the candidate's own failure, reported as such
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        yield from _all_failed(uuids, "compile_error", detail)
        return
    own_kernels = anticheat.jit_function_names(source)

    baseline = None
    baseline_note = ""
    if not request.check_only:
        try:
            baseline = baselines.create(request.baseline, task, hw, **request.baseline_options)
        except baselines.BaselineUnavailable as exc:
            baseline_note = str(exc)

    device = hw.torch_device
    for n, uuid in enumerate(uuids):
        on_start(uuid)
        workload = by_uuid[uuid]
        seed = request.seed + 7919 * (n + 1)
        try:
            yield _evaluate_workload(task, workload, kernel, baseline, baseline_note, request, hw, device,
                                     seed, own_kernels)
        except torch.cuda.OutOfMemoryError as exc:
            yield WorkloadResult(uuid=uuid, status="out_of_memory", detail=str(exc).splitlines()[0])
            return


def _evaluate_workload(task: Task, workload: Any, kernel: Callable, baseline: baselines.Baseline | None,
                       baseline_note: str, request: EvalRequest, hw: HardwareSpec, device: str, seed: int,
                       own_kernels: list[str]) -> WorkloadResult:
    check = check_kernel(task, workload, kernel, trials=request.trials, seed=seed, device=device)
    result = WorkloadResult(uuid=workload.uuid, status=PASSED if check.passed else check.failure.check,
                            detail=check.summary(), correctness=check.to_correctness().to_json())
    if not check.passed or request.check_only:
        return result
    if baseline is None:
        result.baseline = f"unavailable: {baseline_note}" if baseline_note else "none"
        return result

    # Rotating input sets, each with its own output buffers for the baseline and the candidate.
    sets = []
    for k in range(INPUT_SETS):
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + 104729 * (k + 1))
        inputs = task.make_inputs(workload, gen, device)
        sets.append({"inputs": inputs, "base": _alloc(task, workload, inputs, device),
                     "cand": _alloc(task, workload, inputs, device),
                     "base_fn": baseline.prepare(task, workload, inputs)})

    def call_baseline(i: int) -> None:
        s = sets[i % INPUT_SETS]
        s["base_fn"](**s["inputs"], **s["base"])

    def call_candidate(i: int) -> None:
        s = sets[i % INPUT_SETS]
        kernel(**s["inputs"], **s["cand"])

    def before_call(name: str, i: int) -> None:
        # Timed calls get the same poisoned buffers as checked calls: a kernel cannot tell them apart.
        s = sets[i % INPUT_SETS]
        poison_outputs(s["cand"] if name.startswith("candidate") else s["base"])

    mode = request.timing_mode if hw.is_gpu else "wallclock"
    mode = baseline.timing_mode_override or mode
    cache = BaselineCache()
    key = Key(hardware_fingerprint(device), baseline.version, mode, baseline.label, workload.uuid)
    cached_ms = cache.get(key) if request.use_baseline_cache else None
    callables = {"candidate": call_candidate, "candidate_repeat": call_candidate}
    if cached_ms is None:
        callables = {"baseline": call_baseline, **callables}
    timings = timing.measure(callables, device=device, mode=mode, warmup=request.warmup, reps=request.reps,
                             before_call=before_call)
    result.timing_mode = timings["candidate"].mode
    if cached_ms is None:
        result.baseline, result.baseline_ms = baseline.label, timings["baseline"].median_ms
        cache.put(key, result.baseline_ms)
    else:
        result.baseline, result.baseline_ms = f"{baseline.label} (cached)", cached_ms
    result.candidate_ms = timings["candidate"].median_ms
    result.candidate_repeat_ms = timings["candidate_repeat"].median_ms
    result.spread = {name: {"p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "samples": t.samples}
                     for name, t in timings.items()}

    # The last timed call of each input set must have produced the right answer: no skipped work.
    for k, s in enumerate(sets):
        failure = verify_outputs(task, workload, s["inputs"], s["cand"])
        if failure is not None:
            result.status = "skipped_work"
            result.detail = f"output of a timed call (input set {k}) is wrong: {failure.check}: {failure.detail}"
            return result

    min_bytes = task.min_bytes(workload, sets[0]["inputs"])
    if min_bytes:
        result.floor_ms = anticheat.physical_floor_ms(min_bytes, hw.peak_memory_bandwidth_tbs)
        result.bandwidth_tbs = min_bytes / (result.candidate_ms * 1e-3) / 1e12
        if result.floor_ms and result.candidate_ms < result.floor_ms:
            result.flags.append(f"faster_than_floor: {result.candidate_ms:.4g} ms < physical floor "
                                f"{result.floor_ms:.4g} ms")
    if hw.is_gpu and request.profile:
        try:
            names = timing.kernel_names(lambda: call_candidate(0), device)
        except Exception as exc:  # noqa: BLE001 - a profiler that cannot start is noted, not a verdict
            result.detail += f"; profiler unavailable ({type(exc).__name__})"
            names = None
    else:
        names = None
    if names is not None:
        result.kernels = sorted(set(names))
        foreign = anticheat.foreign_kernels(names, own_kernels)
        if foreign:
            result.flags.append(f"baseline_kernels: {', '.join(sorted(set(foreign))[:3])}")
        if not names:
            result.flags.append("no_kernels: the candidate launched no device kernel")
    if result.flags:
        result.status = "flagged_cheat"  # not counted as a win; the detail says why
        result.detail = "; ".join(result.flags)
    return result


def _alloc(task: Task, workload: Any, inputs: dict, device: str) -> dict[str, torch.Tensor]:
    from evoteam.check import torch_dtype

    shapes = task.output_shapes(workload, inputs)
    return {name: torch.empty(shapes[name], dtype=torch_dtype(spec.dtype), device=device)
            for name, spec in task.definition.outputs.items()}
