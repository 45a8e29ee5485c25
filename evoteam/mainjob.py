"""The main job until the agent team lands: evaluate the task's seed kernel on every workload of the
selected scale against the task's baseline on the selected hardware, in isolated worker processes.

Results are appended per workload to `<run dir>/results.jsonl` and FlashInfer-Trace lines to
`<run dir>/traces.jsonl` as they arrive, so an interrupted run keeps what it finished and
`resume=<run dir>` continues with the workloads that are left.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from evoteam import hardware, report
from evoteam.errors import UserError
from evoteam.schema import append_traces
from evoteam.worker import EvalRequest, WorkloadResult, evaluate_isolated

SEED_SOLUTION = "seed_triton"
CPU_REPS = (1, 3)  # (warm-up, timed) rounds: the Triton interpreter takes seconds per call
GPU_REPS = (10, 100)


def finished_results(path: Path) -> dict[str, WorkloadResult]:
    if not path.is_file():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = WorkloadResult.from_json(json.loads(line))
            done[result.uuid] = result
    return done


def run(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from evoteam.task import load_task, select_workloads, shape_label
    from evoteam.trace_writer import to_trace

    hw = hardware.resolve(cfg.hardware.name, remote=cfg.executor.kind.value == "docker")
    if cfg.executor.kind.value != "local":
        raise UserError(f"executor={cfg.executor.kind.value} is not available yet; use executor=local")
    task = load_task(cfg.task.name)
    scale = cfg.task.scale or hw.problem_scale
    workloads = select_workloads(task.scaled_workloads(scale), list(cfg.task.workloads))
    labels = {w.uuid: shape_label(w) for w in workloads}

    run_dir = Path(cfg.resume) if cfg.resume else Path(HydraConfig.get().runtime.output_dir)
    if cfg.resume and not (run_dir / "config.yaml").is_file():
        raise UserError(f"resume={cfg.resume} is not an evoteam run directory (no config.yaml); "
                        f"give the folder of an earlier run")
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path, traces_path = run_dir / "results.jsonl", run_dir / "traces.jsonl"
    done = finished_results(results_path)
    if not cfg.resume:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    base_seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31)
    warmup, reps = GPU_REPS if hw.is_gpu else CPU_REPS
    todo = [w for w in workloads if w.uuid not in done]

    print(f"evoteam: task {task.name}, {len(workloads)} workloads at scale {scale}, on {hw.name}; "
          f"candidate {SEED_SOLUTION}; baseline {cfg.task.baseline}; seed {base_seed}; run dir {run_dir}", flush=True)
    if done:
        print(f"evoteam: resuming: {len(done)} of {len(workloads)} workloads already finished", flush=True)

    by_uuid = {w.uuid: w for w in workloads}
    counter = {"n": len(done)}

    def record(result: WorkloadResult) -> None:
        with open(results_path, "a") as fh:
            fh.write(json.dumps(result.to_json()) + "\n")
        append_traces(traces_path, [to_trace(task.definition.name, by_uuid[result.uuid], SEED_SOLUTION, result,
                                             hw.name)])
        counter["n"] += 1
        speed = f" {result.speedup:.3f}x" if result.speedup else ""
        print(f"[{counter['n']}/{len(workloads)}] {result.uuid[:8]} {labels[result.uuid]}: {result.status}{speed}",
              flush=True)

    if todo:
        request = EvalRequest(task=task.name, hardware=hw.name, solution=str(task.seed_kernel_path),
                              workloads=[w.uuid for w in todo], scale=scale, trials=cfg.task.check_trials,
                              seed=base_seed, timing_mode=cfg.timing_mode.value, baseline=cfg.task.baseline,
                              warmup=warmup, reps=reps)
        evaluate_isolated(request, timeout_s=cfg.executor.timeout_s, on_result=record)

    finished = finished_results(results_path)
    results = [finished[w.uuid] for w in workloads if w.uuid in finished]
    print()
    print(report.format_table(results, labels, SEED_SOLUTION, hw.bandwidth_ceiling_tbs))
    return report.summarize(results).geomean_speedup
