"""The judge's own hold on a runner's memory and process count, beside the cgroup's.

A cgroup limit is only as good as the kernel that enforces it. Some hosts accept `memory.max` and
`pids.max` and do not enforce them: gVisor (the lent H200's runtime, by KINDS.md) leaves memory
limiting to the host kernel outside the whole sandbox, so a candidate that takes 64 GiB takes the
machine with it. The guard does not trust that: a thread of the judge reads what the runner's
processes hold (their resident memory, from /proc) a few times a second and ends the runner as soon
as it is over its limit. Where the kernel does enforce, it acts first and the guard never fires.

The same thread holds the runner's writable folders (its scratch and its compiled-kernel cache) to a
size: they lie on the host's disk, and a full disk fails every later workload and evaluation.

The poll costs the judge about a hundred microseconds per round; on a CPU target the thread stays off
the CPU that the candidate is timed on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

POLL_S = 0.05  # an allocation at 10 GB/s gets 0.5 GB past the limit before the guard sees it
DISK_EVERY = 5  # rounds between two walks of the writable folders
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (by the kernel's children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                pass
    return out


def threads(pids: Iterable[int]) -> list[int]:
    """The thread ids of these processes (of those still there)."""
    out: list[int] = []
    for pid in pids:
        try:
            out += [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:  # ended
            pass
    return out


def resident_bytes(pids: Iterable[int]) -> int:
    """Resident memory of these processes (anonymous, file-backed and shared pages they map)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
        except (OSError, ValueError, IndexError):
            pass
    return total


def proportional_bytes(pids: Iterable[int]) -> int | None:
    """Memory of these processes with each shared page counted once among its sharers (the kernel's
    proportional set size): the forked children of one process share its pages, and their resident sizes
    would count them once per child. None where the kernel does not say (then the resident sum stands)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
        except OSError:
            return None
        line = next((x for x in text.splitlines() if x.startswith("Pss:")), None)
        if line is None:
            return None
        total += int(line.split()[1]) << 10
    return total


def folder_bytes(folders: Iterable[Path], stop_over: int) -> int:
    """Disk space (allocated blocks) of everything under these folders; the walk stops once past
    `stop_over` (a folder of millions of files is not walked to its end on every round)."""
    total, todo = 0, [str(f) for f in folders]
    while todo and total <= stop_over:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        pass
        except OSError:
            pass
    return total


class ResourceGuard:
    """Polls a runner and calls `kill` once when it holds more than `memory_bytes`, runs more than
    `max_processes` processes, or has written more than `disk_bytes` under `folders` (0: no such limit).
    `pids` lists the runner's processes (its cgroup's, where it has one: one read, and it sees detached
    children too)."""

    def __init__(self, pids: Callable[[], Iterable[int]], kill: Callable[[], None], memory_bytes: int,
                 max_processes: int, folders: Iterable[Path] = (), disk_bytes: int = 0,
                 avoid_cpus: frozenset[int] | None = None, poll_s: float = POLL_S):
        self._pids, self._kill = pids, kill
        self.memory_bytes, self.max_processes = memory_bytes, max_processes
        self.folders, self.disk_bytes = tuple(folders), disk_bytes
        self._avoid, self.poll_s = avoid_cpus or frozenset(), poll_s
        self.reason = ""  # why it ended the runner; empty while it has not
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evoteam-resource-guard", daemon=True)
        self._thread.start()

    @property
    def out_of_memory(self) -> bool:
        return self.reason.startswith("memory")

    def _watch(self) -> None:
        if self._avoid:  # a thread inherits its creator's affinity: the judge's may be the timed CPU
            others = set(range(os.cpu_count() or 1)) - self._avoid
            try:
                if others:
                    os.sched_setaffinity(0, others)
            except OSError:
                pass
        rounds = 0
        while not self._stop.wait(self.poll_s):
            rounds += 1
            if self.disk_bytes and self.folders and rounds % DISK_EVERY == 0:
                written = folder_bytes(self.folders, self.disk_bytes)
                if written > self.disk_bytes:
                    self.reason = (f"disk: the runner wrote over {written >> 20} MiB to its folders, over its "
                                   f"limit of {self.disk_bytes >> 20} MiB (ended by the judge's guard)")
                    self._kill()
                    return
            pids = list(self._pids())
            if not pids:
                continue
            held = resident_bytes(pids)  # cheap, and never less than what the processes hold
            if self.memory_bytes and held > self.memory_bytes:
                exact = proportional_bytes(pids)  # costlier: only when the cheap bound is over
                held = held if exact is None else exact
            if self.memory_bytes and held > self.memory_bytes:
                self.reason = (f"memory: the runner held {held >> 20} MiB, over its limit of "
                               f"{self.memory_bytes >> 20} MiB (ended by the judge's guard)")
            elif self.max_processes and len(pids) > self.max_processes:
                self.reason = (f"processes: the runner ran {len(pids)} processes, over its limit of "
                               f"{self.max_processes} (ended by the judge's guard)")
            if self.reason:
                self._kill()
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
