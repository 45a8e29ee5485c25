"""Where a parallel test run's CPU goes, by test and by file.

With EVOTEAM_TESTS_TIMELINE=DIR set, tests/conftest.py has every pytest-xdist worker append a line per test to
DIR/<worker>.tsv: its node id, its start and end (wall clock, setup and teardown included), and at both the CPU
seconds of the worker's process tree, of the kernel's threads and of the whole machine. `python tests/timeline.py DIR`
prints two figures per file and per test:
- own: the CPU of the worker's process tree during the test: the worker and every living descendant, each with what
  its reaped children spent (the commands the warm launcher forks, the judges). A lower bound: a process whose parent
  ended first is reparented to init and its CPU leaves the tree (a candidate's sandbox outlives its judge for a
  moment at every evaluation's end, and takes the runner's CPU with it), as do the daemons a test starts (a Ray
  cluster's, the container engine's). On this suite it sees about half of the machine's busy CPU.
- share: the machine's busy CPU between consecutive marks, split evenly among the tests running then. It sees every
  process, but charges a test that waits as much as one that works beside it.
The suite's wall time on a saturated machine is its busy CPU over the cores; a file high in both columns is where
the time goes.

    EVOTEAM_TESTS_TIMELINE=/tmp/tl make test && .venv/bin/python tests/timeline.py /tmp/tl
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

ENV = "EVOTEAM_TESTS_TIMELINE"
TICK = os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds so far (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]) / TICK


def trees_cpu_s(*roots: int) -> list[float]:
    """CPU seconds of each root and its living descendants, each with what its reaped children spent (utime, stime,
    cutime, cstime); root 2 (kthreadd) gives the kernel's own threads."""
    parent, cpu = {}, {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / TICK
    children = collections.defaultdict(list)
    for pid, ppid in parent.items():
        children[ppid].append(pid)
    totals = []
    for root in roots:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += cpu.get(pid, 0.0)
            todo += children.get(pid, [])
        totals.append(total)
    return totals


class Recorder:
    """The pytest hooks of one worker (registered by tests/conftest.py where ENV is set)."""

    def __init__(self, folder: Path, worker: str):
        self.folder, self.worker, self.started = folder, worker, {}
        folder.mkdir(parents=True, exist_ok=True)

    def pytest_runtest_logstart(self, nodeid, location):
        self.started[nodeid] = (time.time(), *trees_cpu_s(os.getpid(), 2), busy_cpu_s())

    def pytest_runtest_logfinish(self, nodeid, location):
        t0, c0, k0, b0 = self.started.pop(nodeid)
        c1, k1 = trees_cpu_s(os.getpid(), 2)
        with open(self.folder / f"{self.worker}.tsv", "a") as f:
            f.write(f"{nodeid}\t{t0:.3f}\t{time.time():.3f}\t{c0:.2f}\t{c1:.2f}\t{b0:.2f}\t{busy_cpu_s():.2f}\t"
                    f"{k0:.2f}\t{k1:.2f}\n")


def read(folder: Path) -> list[tuple]:
    """(worker, node id, start, end, CPU-s of the worker's tree in the test, machine busy at start, at end, the
    kernel threads' CPU-s at start, at end)."""
    rows = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text().splitlines():
            node, t0, t1, c0, c1, b0, b1, k0, k1 = line.split("\t")
            rows.append((path.stem, node, float(t0), float(t1), max(0.0, float(c1) - float(c0)), float(b0),
                         float(b1), float(k0), float(k1)))
    return rows


def shares(rows) -> collections.Counter:
    """The machine's busy CPU between consecutive marks, split evenly among the tests running through them."""
    marks = sorted([(r[2], r[5]) for r in rows] + [(r[3], r[6]) for r in rows])
    share: collections.Counter = collections.Counter()
    for (ta, ba), (tb, bb) in zip(marks, marks[1:]):
        running = [r[1] for r in rows if r[2] <= ta and r[3] >= tb] if tb > ta else []
        for node in running:
            share[node] += max(0.0, bb - ba) / len(running)
    return share


def report(folder: Path, top: int = 30) -> str:
    rows = read(folder)
    # under pytest-xdist the controller sees each test too, later than its worker: counted once, by the worker
    rows = [r for r in rows if r[0] != "main"] or rows
    if not rows:
        raise SystemExit(f"timeline: no records in {folder}; run the tests with {ENV}={folder} first")
    own = collections.Counter()
    for row in rows:
        own[row[1]] += row[4]
    share = shares(rows)
    wall = {r[1]: r[3] - r[2] for r in rows}
    file_share, file_own = collections.Counter(), collections.Counter()
    for node in wall:
        file_share[node.split("::")[0]] += share[node]
        file_own[node.split("::")[0]] += own[node]
    start, end = min(r[2] for r in rows), max(r[3] for r in rows)
    busy = max(r[6] for r in rows) - min(r[5] for r in rows)
    kernel = max(r[8] for r in rows) - min(r[7] for r in rows)
    lines = [f"span {end - start:.0f} s on {os.cpu_count()} cores; the machine busy {busy:.0f} CPU-s: the tests' own "
             f"{sum(own.values()):.0f}, the kernel's threads {kernel:.0f}",
             "by file:  share   own  (CPU-s)"]
    by_share = sorted(file_share.items(), key=lambda kv: (-kv[1], kv[0]))
    lines += [f"  {cpu:7.1f} {file_own[f]:6.1f}  {f}" for f, cpu in by_share]
    lines.append(f"the {top} costliest tests:  share   own  wall (s)")
    lines += [f"  {share[node]:7.1f} {own[node]:6.1f} {wall[node]:6.1f}  {node}"
              for node in sorted(wall, key=lambda n: -share[n])[:top]]
    for worker in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == worker]
        lines.append(f"{worker}: {len(mine)} tests, ended at {max(r[3] for r in mine) - start:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        raise SystemExit("usage: python tests/timeline.py DIR (the folder EVOTEAM_TESTS_TIMELINE named)")
    print(report(Path(sys.argv[1])))
