"""What a process forked by evoteam.harness.fork finds itself in, written as JSON to argv[0] (tests/test_sandbox.py):
`main(argv)` is what fork.spawn runs in the child."""

import json
import os
import signal
import sys


def main(argv: list[str]) -> int:
    report = {"pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(), "env": dict(os.environ),
              "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
              "cgroup": open("/proc/self/cgroup").read(), "cpus": sorted(os.sched_getaffinity(0)),
              "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
              "sigterm": str(signal.getsignal(signal.SIGTERM)), "argv": sys.argv}
    print("probe: written", flush=True)
    with open(argv[0], "w") as f:
        json.dump(report, f)
    return 7
