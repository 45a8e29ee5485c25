"""Wall time of one CPU evaluation (a kernel on the default job's 4 workloads, small scale) with two trees of the
harness, side by side in one run: each tree's evaluations in a process of its own (its judge server warm, as in a
team run), the two taking turns, one evaluation at a time.

    python scripts/cpu_eval_ab.py BEFORE_TREE [AFTER_TREE] [--solution FILE] [--rounds N]

BEFORE_TREE: a folder holding an older tree's evoteam/ and kernels/ (e.g. `git worktree add /tmp/before <commit>`);
AFTER_TREE: default this repository. Prints each evaluation's wall time, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
from evoteam.harness.executor import evaluate
from evoteam.target import Target
target = Target.resolve("mla_decode", "cpu", scale="small", workloads=[], timing_mode="graph", executor="local")
request = target.request(sys.argv[1])
evaluate(request, timeout_s=600)  # the judge server's own start, and the first imports: not counted
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    t = time.monotonic()
    result = evaluate(request, timeout_s=600)
    wall = time.monotonic() - t
    passed = sum(str(r.status) == "PASSED" for r in result.results)
    print(json.dumps({"wall": wall, "passed": passed, "phases": result.phases}), flush=True)
"""


def worker(tree: Path, solution: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(solution)], cwd=tree, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ready = json.loads(proc.stdout.readline())
    assert ready.get("ready"), ready
    return proc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path, nargs="?", default=REPO)
    p.add_argument("--solution", type=Path, default=REPO / "kernels" / "mla_decode" / "torch_cpu.py")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    procs = {"before": worker(args.before.resolve(), args.solution.resolve()),
             "after": worker(args.after.resolve(), args.solution.resolve())}
    walls: dict[str, list[float]] = {name: [] for name in procs}
    for rnd in range(args.rounds):
        for name in (("before", "after") if rnd % 2 == 0 else ("after", "before")):
            proc = procs[name]
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out = json.loads(proc.stdout.readline())
            walls[name].append(out["wall"])
            top = sorted(out["phases"].items(), key=lambda kv: -kv[1])[:5]
            print(f"{name:<7} {out['wall']:6.2f} s  {out['passed']}/4 passed  "
                  + ", ".join(f"{k} {v:.2f}" for k, v in top), flush=True)
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
    print(f"median wall: before {before:.2f} s, after {after:.2f} s: {before / after:.2f}x faster")


if __name__ == "__main__":
    main()
