"""Where a test run's CPU goes, by process: every process that ended while Linux's process accounting was on, the
candidates' sandboxed runners and the daemons the tests start among them (tests/timeline.py sees only the pytest
workers' own process trees, about half of the machine's busy CPU).

    accton /tmp/pacct && make test; accton off && .venv/bin/python tests/census.py /tmp/pacct

`accton` is Debian's `acct` package, run as root; the kernel writes one record per process as it ends (format v3,
CONFIG_BSD_PROCESS_ACCT_V3): its pid and parent's, whether it forked without exec, its user and system CPU time, and
its command name. That name is the last of the process's threads to end, so a Python process may be recorded under a
thread's name (`jemalloc_bg_thd`, `main2`). The roles below go by the tree, the fork flag and the names a role's
processes have; a Ray daemon recorded under one of its gRPC threads' names (`default-executo`) counts as started afresh,
since a test worker that imported Ray has those threads too.
"""

from __future__ import annotations

import collections
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

# struct acct_v3 (include/uapi/linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01  # forked, never exec'd
AHZ = 100  # the unit of the times

COMPILERS = {"cc1plus", "cc1", "as", "ld", "collect2", "c++", "g++", "gcc", "ninja", "nvcc"}
CONTAINERS = {"podman", "conmon", "crun", "runc", "catatonit", "podman-init", "dpkg-query"}
RAY = {"raylet", "gcs_server"}
NODE = {"node", "claude", "codex", "npm"}
RUNNERS = "the candidates' runners (sandboxed, started afresh)"
IN_SANDBOX = "the rest in a sandbox (its probes, a candidate's children, a coding-agent CLI)"
FORKED = "forked without exec (judges, forked commands, the CPU baseline's runners)"
AFRESH = "started afresh (the test workers, commands, servers)"
RAY_CLUSTER = "a Ray cluster's daemons and workers"
CONTAINER = "containers and their engine"
BUILDS = "C++ builds"
CHROMIUM = "Chromium"
NODE_CLIS = "Node (the coding-agent CLIs)"
OTHER = "other"


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    forked: bool
    cpu_s: float
    comm: str


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read(path: Path) -> list[Process]:
    data = path.read_bytes()
    if len(data) % RECORD.size or (data and data[1] != 3):
        raise SystemExit(f"census: {path} is not a Linux process-accounting file of format v3 (a kernel with "
                         f"CONFIG_BSD_PROCESS_ACCT_V3 writes one with `accton {path}`)")
    out = []
    for fields in RECORD.iter_unpack(data):
        out.append(Process(pid=fields[6], ppid=fields[7], forked=bool(fields[0] & AFORK),
                           cpu_s=(_comp(fields[10]) + _comp(fields[11])) / AHZ,
                           comm=fields[18].split(b"\0")[0].decode(errors="replace")))
    return out


def _totals(processes: list[Process], key) -> dict[str, tuple[int, float]]:
    """key(process) -> (processes, CPU-s), the costliest first."""
    count: collections.Counter = collections.Counter()
    cpu: collections.Counter = collections.Counter()
    for p in processes:
        name = key(p)
        count[name] += 1
        cpu[name] += p.cpu_s
    return {name: (count[name], cpu[name]) for name, _ in cpu.most_common()}


def roles(processes: list[Process]) -> dict[str, tuple[int, float]]:
    """Role -> (processes, CPU-s). A process recorded twice (its pid reused) is matched to the later parent."""
    by_pid = {p.pid: p for p in processes}

    def ancestors(p: Process):
        seen = set()
        while p.ppid in by_pid and p.ppid not in seen:
            seen.add(p.ppid)
            p = by_pid[p.ppid]
            yield p

    def role(p: Process) -> str:
        chain = list(ancestors(p))
        names = {a.comm for a in chain}
        parent = chain[0].comm if chain else ""
        if p.comm == "bwrap":
            return OTHER
        if p.comm in COMPILERS:  # a C++ solution's build, in its sandbox or not
            return BUILDS
        if "bwrap" in names:
            return RUNNERS if parent == "bwrap" and not p.forked and p.comm.startswith("python") else IN_SANDBOX
        if p.comm in RAY or p.comm.startswith("ray::") or names & RAY:
            return RAY_CLUSTER
        if p.comm in CONTAINERS or names & {"conmon", "podman-init"}:
            return CONTAINER
        if p.comm == "chromium" or "chromium" in names:
            return CHROMIUM
        if p.comm in NODE or parent in NODE:
            return NODE_CLIS
        if p.forked:
            return FORKED
        return AFRESH if p.cpu_s >= 0.05 or "python" in p.comm else OTHER

    return _totals(processes, role)


def report(path: Path, top: int = 15) -> str:
    processes = read(path)
    lines = [f"{len(processes)} processes ended, {sum(p.cpu_s for p in processes):.0f} CPU-s (user and system)",
             "by role:  CPU-s  processes"]
    lines += [f"  {cpu:9.1f} {n:6d}  {role}" for role, (n, cpu) in roles(processes).items()]
    by_name = _totals(processes, lambda p: p.comm + (" (forked)" if p.forked else ""))
    lines.append(f"the {top} costliest names:  CPU-s  processes")
    lines += [f"  {cpu:9.1f} {n:6d}  {name}" for name, (n, cpu) in list(by_name.items())[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/census.py PACCT_FILE (written by `accton PACCT_FILE` as the tests ran)")
    if not Path(sys.argv[1]).is_file():
        raise SystemExit(f"census: no file {sys.argv[1]}; turn process accounting on first: accton {sys.argv[1]}")
    print(report(Path(sys.argv[1])))
