"""Ray's per-evaluation cost on one machine (issue 22, when no 2-GPU machine is lent): the same evaluations
through executor=local and executor=ray (a local Ray instance offering this machine's accelerators), run in
alternation so that both see the same machine state; wall time per evaluation, evaluations per hour, and the
candidate's geomean speedup under each (the verdicts must not depend on the executor).

    python scripts/ray_overhead.py --task mla_decode --candidate kernels/mla_decode/seed_triton.py \
        --workloads 00cb2bc2 5bef8d88 --evaluations 6 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from evoteam import hardware
from evoteam.harness.executor import LocalExecutor
from evoteam.harness.model import EvalRequest, geomean
from evoteam.harness.ray_executor import RayExecutor
from evoteam.task import load_task, select_workloads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="mla_decode")
    p.add_argument("--candidate", required=True)
    p.add_argument("--hardware", default="auto")
    p.add_argument("--workloads", nargs="*", default=[])
    p.add_argument("--evaluations", type=int, default=6, help="per executor")
    p.add_argument("--baseline", default="reference")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json")
    args = p.parse_args()

    hw = hardware.resolve(args.hardware)
    task = load_task(args.task)
    uuids = [w.uuid for w in select_workloads(task.scaled_workloads(hw.problem_scale), args.workloads)]
    request = EvalRequest(task=args.task, hardware=hw.name, solution=args.candidate, workloads=uuids,
                          scale=hw.problem_scale, baseline=args.baseline, warmup=2, reps=args.reps,
                          second_figure=False)
    ray_executor = RayExecutor(hardware=hw.name, gpu=hw.is_gpu)
    started = time.monotonic()
    ray_executor.connect()
    connect_s = time.monotonic() - started
    executors = {"local": LocalExecutor(), "ray": ray_executor}
    rows: dict[str, list[dict]] = {"local": [], "ray": []}
    for i in range(args.evaluations):
        for name in (("local", "ray") if i % 2 == 0 else ("ray", "local")):
            t0 = time.monotonic()
            result = executors[name](request, 600)
            wall = time.monotonic() - t0
            statuses = [str(r.status) for r in result.results]
            speedup = geomean(r.speedup for r in result.results)
            rows[name].append({"wall_s": wall, "speedup": speedup, "statuses": statuses,
                               "queue_s": result.placement.queue_s, "gpu": result.placement.gpu})
            print(f"{name:5} evaluation {i + 1}: {wall:.2f} s, geomean {speedup or 0:.3f}x, {statuses}", flush=True)
    print(f"\nRay: local instance started and joined in {connect_s:.1f} s (once per run)")
    print("executor  evaluations  median s  mean s  evaluations/hour  geomean speedup (median of evaluations)")
    summary = {}
    for name, data in rows.items():
        walls = [d["wall_s"] for d in data]
        speed = statistics.median(d["speedup"] for d in data if d["speedup"])
        summary[name] = {"median_s": statistics.median(walls), "mean_s": statistics.mean(walls),
                         "per_hour": 3600 / statistics.mean(walls), "speedup": speed}
        print(f"{name:8}  {len(walls):11}  {summary[name]['median_s']:8.2f}  {summary[name]['mean_s']:6.2f}  "
              f"{summary[name]['per_hour']:16.0f}  {speed:.3f}x")
    overhead = summary["ray"]["median_s"] - summary["local"]["median_s"]
    print(f"Ray's cost per evaluation (median ray - median local): {overhead:+.2f} s "
          f"({100 * overhead / summary['local']['median_s']:+.1f}%); speedup ray/local "
          f"{summary['ray']['speedup'] / summary['local']['speedup']:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"connect_s": connect_s, "rows": rows, "summary": summary, "request": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
