"""The main job until the agent team lands: check the task's seed kernel on every workload of the
selected scale and time it against the task's baseline on the selected hardware, side by side.

Results are appended per workload to `<run dir>/results.jsonl` and FlashInfer-Trace lines to
`<run dir>/traces.jsonl`, so an interrupted run keeps what it finished and `resume=<run dir>`
continues with the workloads that are left.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from evoteam import hardware, report
from evoteam.errors import UserError
from evoteam.schema import Evaluation, Performance, Trace, Workload, append_traces

SEED_SOLUTION = "seed_triton"
CPU_REPS = (1, 3)  # (warm-up, timed) rounds: the Triton interpreter takes seconds per call
GPU_REPS = (5, 50)


def select_workloads(all_workloads: list[Workload], wanted: list[str]) -> list[Workload]:
    if not wanted:
        return all_workloads
    chosen = []
    for prefix in wanted:
        matches = [w for w in all_workloads if w.uuid.startswith(prefix)]
        if len(matches) != 1:
            what = "matches no workload" if not matches else f"matches {len(matches)} workloads"
            raise UserError(f"task.workloads entry {prefix!r} {what} at this scale; give a unique uuid prefix "
                            f"(available: {', '.join(w.uuid[:8] for w in all_workloads)})")
        chosen.append(matches[0])
    return chosen


def shape_label(workload: Workload) -> str:
    skip = {"len_indptr", "num_pages", "len_cu_seqlens"}
    return " ".join(f"{k}={v}" for k, v in workload.axes.items() if k not in skip)


def _finished(path: Path) -> dict[str, dict]:
    if not path.is_file():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            done[row["workload"]] = row
    return done


def _libs() -> dict[str, str]:
    import torch

    libs = {"torch": torch.__version__}
    try:
        import triton

        libs["triton"] = triton.__version__
    except ImportError:
        pass
    return libs


def run(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    hw = hardware.resolve(cfg.hardware.name, remote=cfg.executor.kind.value == "docker")
    # Before anything imports Triton: on CPU the kernels run under Triton's interpreter.
    os.environ.update(hw.env)

    # Imported after the environment is set (these import Triton through the kernels).
    import torch

    from evoteam import baselines, timing
    from evoteam.check import check_kernel
    from evoteam.task import load_task

    task = load_task(cfg.task.name)
    scale = cfg.task.scale or hw.problem_scale
    workloads = select_workloads(task.scaled_workloads(scale), list(cfg.task.workloads))
    baseline = baselines.select(cfg.task.baseline, task, hw)
    seed_kernel = task.load_kernel(task.seed_kernel_path)
    device = hw.torch_device
    mode = cfg.timing_mode.value if hw.is_gpu else "wallclock"
    warmup, reps = GPU_REPS if hw.is_gpu else CPU_REPS

    run_dir = Path(cfg.resume) if cfg.resume else Path(HydraConfig.get().runtime.output_dir)
    if cfg.resume and not run_dir.is_dir():
        raise UserError(f"resume={cfg.resume} is not a run directory; give the folder of an earlier run")
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path, traces_path = run_dir / "results.jsonl", run_dir / "traces.jsonl"
    done = _finished(results_path)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    base_seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31)

    print(f"evoteam: task {task.name} ({len(workloads)} workloads, scale {scale}) on {hw.name}; "
          f"candidate {SEED_SOLUTION} vs baseline {baseline.name}; timing {mode}; seed {base_seed}; "
          f"run dir {run_dir}", flush=True)
    if done:
        print(f"evoteam: resuming: {len(done)} workloads already finished", flush=True)

    rows: list[report.ResultRow] = []
    for n, workload in enumerate(workloads, 1):
        if workload.uuid in done:
            row_json = dict(done[workload.uuid])
            row_json.pop("speedup", None)
            rows.append(report.ResultRow(**row_json))
            continue
        seed = base_seed + 7919 * n
        check = check_kernel(task, workload, seed_kernel, trials=cfg.task.check_trials, seed=seed, device=device)
        row = report.ResultRow(workload=workload.uuid, shape=shape_label(workload),
                               status="PASSED" if check.passed else check.failure.check,
                               baseline=baseline.name, timing_mode=mode, detail=check.summary())
        performance = None
        if check.passed:
            timings = _time_pair(task, workload, baseline, seed_kernel, device, mode, warmup, reps, seed, torch, timing)
            row.baseline_ms = timings["baseline"].median_ms
            row.candidate_ms = timings["candidate"].median_ms
            performance = Performance(latency_ms=row.candidate_ms, reference_latency_ms=row.baseline_ms,
                                      speedup_factor=row.speedup or 0.0)
        rows.append(row)
        _append(results_path, row.to_json())
        status = "PASSED" if check.passed else ("RUNTIME_ERROR" if check.failure.check == "exception"
                                               else "INCORRECT_NUMERICAL")
        evaluation = Evaluation(status=status, environment={"hardware": hw.name, "libs": _libs()},
                                timestamp=dt.datetime.now(dt.timezone.utc).isoformat(), log=check.summary(),
                                correctness=check.to_correctness() if status != "RUNTIME_ERROR" else None,
                                performance=performance)
        append_traces(traces_path, [Trace(definition=task.definition.name, workload=workload,
                                          solution=SEED_SOLUTION, evaluation=evaluation)])
        speed = f"{row.speedup:.3f}x" if row.speedup else "-"
        print(f"[{n}/{len(workloads)}] {workload.uuid[:8]} {row.shape}: {row.status} {speed}", flush=True)

    print()
    print(report.format_table(rows, SEED_SOLUTION))
    summary = report.summarize(rows)
    sys.stdout.flush()
    return summary.geomean_speedup


def _append(path: Path, obj: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(obj) + "\n")


def _time_pair(task, workload, baseline, kernel, device, mode, warmup, reps, seed, torch, timing) -> dict[str, Any]:
    """Baseline and candidate timed in one process, interleaved, over two rotating input sets."""
    sets = []
    for k in range(2):
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + 104729 * (k + 1))
        inputs = task.make_inputs(workload, gen, device)
        shapes = task.output_shapes(workload, inputs)
        outs = {name: [torch.empty(shapes[name], dtype=getattr(torch, spec.dtype), device=device) for _ in range(2)]
                for name, spec in task.definition.outputs.items()}
        sets.append((inputs, outs))
    base_fns = [baseline.prepare(task, workload, inputs) for inputs, _ in sets]

    def call_baseline(i: int) -> None:
        inputs, outs = sets[i % 2]
        base_fns[i % 2](**inputs, **{n: o[0] for n, o in outs.items()})

    def call_candidate(i: int) -> None:
        inputs, outs = sets[i % 2]
        kernel(**inputs, **{n: o[1] for n, o in outs.items()})

    return timing.measure_interleaved({"baseline": call_baseline, "candidate": call_candidate},
                                      device=device, mode=mode, warmup=warmup, reps=reps)
