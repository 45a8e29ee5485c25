"""Wall time of sequential CPU evaluations with judges forked by the judge server and started as processes of their
own, alternated in one run: python scripts/judge_server_ab.py [EVALUATIONS_PER_SIDE]"""

import os
import statistics
import sys
import time
from pathlib import Path

from evoteam.harness.executor import evaluate
from evoteam.harness.model import EvalRequest
from evoteam.task import load_task

REPO = Path(__file__).resolve().parent.parent


def main(n: int) -> None:
    uuid = load_task("mla_decode").scaled_workloads("small")[0].uuid
    request = EvalRequest(task="mla_decode", hardware="cpu", solution=str(REPO / "tests/data/candidates/mla_torch.py"),
                          workloads=[uuid], scale="small", warmup=0, reps=2)
    walls: dict[str, list[float]] = {"server": [], "process": []}
    starts: dict[str, list[float]] = {"server": [], "process": []}
    evaluate(request, timeout_s=120)  # the server's own start is not counted
    for _ in range(n):
        for side, switch in (("server", "1"), ("process", "0")):
            os.environ["EVOTEAM_JUDGE_SERVER"] = switch
            t = time.monotonic()
            result = evaluate(request, timeout_s=120)
            walls[side].append(time.monotonic() - t)
            starts[side].append(result.phases["judge start"])
            assert result.results[0].status == "PASSED", result.log_tail
    print("judge     evaluation s (median)  judge start s (median)")
    for side in walls:
        print(f"{side:<9} {statistics.median(walls[side]):>22.2f}  {statistics.median(starts[side]):>22.3f}")
    print(f"ratio process/server: {statistics.median(walls['process']) / statistics.median(walls['server']):.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
