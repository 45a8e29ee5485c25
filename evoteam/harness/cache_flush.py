"""What the judge writes before every timed interval so that no call finds its data in a cache.

A GPU's L2 is flushed by writing twice its size with the judge's own kernel. On a CPU target the judge fills a buffer
on the CPU the evaluation times on (numpy's fill: glibc's memset). How much must be filled is measured, not read
from sysfs: on the development VM (sysfs: a 32 MiB L3), a 4 MiB working set read after a fill of twice that still
read 15% faster than cold, and reached cold only after 256 MiB (scripts/cpu_flush_probe.py, 2026-12-04); another VM
reported 480 MiB, which made every fill 960 MB. `flush_bytes` measures once per machine (the CPU model and its
reported cache) and keeps the answer in the machine's temporary folder, beside the judges' CPU locks: a fact of the
machine, shared by every user and evaluation on it.

The fill is written in slices of FILL_CHUNK (CpuFlusher.fill), never as one memset: glibc's memset writes a block
larger than about three quarters of the shared cache with non-temporal stores, which go around the caches and evict
little. On the development VM (a 32 MiB L3) a 4 MiB working set read in 0.10 ms after one 512 MiB memset and in
0.12-0.18 ms after 64 MiB written in 1 MiB slices. The size is chosen among fills up to four times the cache
(candidate_fills): slices of 256 MiB leave it colder there (0.32 ms) than the 512 MiB memset did."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy

MIB = 1 << 20
WORKING_SET = 4 * MIB  # a small call's data: the case a too-small fill leaves warm
COLD_SHARE = 0.9  # a fill evicts once a read after it takes this share of the coldest read's time
REPS = 15
FILL_CHUNK = 1 * MIB  # well under any x86 glibc's non-temporal threshold: each slice goes through the caches
MAX_FILL_FLOOR = 256 * MIB  # twice a 96 MiB L3 (3D V-cache parts), in case a VM reports less than the core shares
# part of a measurement's key: one made with another fill or other sizes says nothing about this one
METHOD = "slices of 1 MiB, fills to max(4 x LLC, 256 MiB)"


class CpuFlusher:
    """A buffer the judge writes before every timed interval, on the CPU the evaluation times on."""

    def __init__(self, nbytes: int):
        self.buffer = numpy.empty(nbytes, dtype=numpy.uint8)

    def fill(self, value: int, nbytes: int | None = None) -> None:
        """Write `value` into the first `nbytes` (all by default), a slice at a time (see the module's docstring)."""
        end = self.buffer.nbytes if nbytes is None else nbytes
        for start in range(0, end, FILL_CHUNK):
            self.buffer[start:min(start + FILL_CHUNK, end)].fill(value)


def last_level_cache_bytes() -> int:
    """The CPU's largest cache (Linux sysfs), else 32 MiB."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            pass
    return max(sizes, default=32 << 20)


def candidate_fills(llc: int) -> list[int]:
    """Fill sizes tried: doubling from 8 MiB to four times the reported cache, at least MAX_FILL_FLOOR. Written a slice
    at a time, four times a cache evicts all of its data; what a read after a larger fill still loses (on the
    development VM it slowed on to 1 GiB) is the address translation's caches, which the flush does not aim at (nor
    does a GPU's L2 flush)."""
    fills, f = [], 8 * MIB
    while f <= max(4 * llc, MAX_FILL_FLOOR):
        fills.append(f)
        f *= 2
    return fills


def read_ms(work: numpy.ndarray) -> float:
    t0 = time.perf_counter()
    work.view(numpy.int64).sum()
    return (time.perf_counter() - t0) * 1e3


def cold_reads(fills: list[int], work_bytes: int = WORKING_SET, reps: int = REPS) -> list[float]:
    """Per fill size: the median time (ms) to read a working set that was just read (warm), after that fill."""
    flusher = CpuFlusher(max(fills))
    work = numpy.ones(work_bytes, dtype=numpy.uint8)
    out = []
    for fill in fills:
        times = []
        for r in range(reps):
            read_ms(work)
            flusher.fill(r & 0xFF, fill)
            times.append(read_ms(work))
        out.append(statistics.median(times))
    return out


def smallest_evicting(fills: list[int], reads: list[float]) -> int:
    coldest = max(reads)
    return next(f for f, ms in zip(fills, reads) if ms >= COLD_SHARE * coldest)


def flush_bytes(cache_root: Path | None = None) -> tuple[int, str]:
    """The fill that evicts on this machine (measured on the calling thread's CPU, once per machine), and where the
    figure came from."""
    import fcntl
    import platform
    import tempfile

    cache_root = cache_root or Path(tempfile.gettempdir()) / "evoteam-machine"
    llc = last_level_cache_bytes()
    key = f"{platform.processor() or platform.machine()}|{cpu_model() or '?'}|llc={llc}|{METHOD}"
    cache_root.mkdir(parents=True, exist_ok=True)
    path = cache_root / "cpu_flush.json"
    with open(cache_root / "cpu_flush.lock", "a") as lock:  # one measurement at a time: fills disturb each other
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if key in known:
            return int(known[key]["bytes"]), f"measured before ({path})"
        fills = candidate_fills(llc)
        reads = cold_reads(fills)
        chosen = smallest_evicting(fills, reads)
        known[key] = {"bytes": chosen, "reads_ms": dict(zip(map(str, fills), reads)), "llc": llc}
        path.write_text(json.dumps(known, indent=1))
        return chosen, "measured now"


def cpu_model() -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
