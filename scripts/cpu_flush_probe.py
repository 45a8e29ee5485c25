"""How much a CPU target's judge must write between timed calls so that no call finds its data in a cache.

The judge fills a buffer before every CPU interval (`evoteam.harness.cache_flush`). This probe measures, on this
machine, the time to read a working set W after filling F bytes, for F from nothing up to four times the last-level
cache the system reports: once F evicts W, the read time stops rising. It prints one table (median of 15 per cell,
one CPU) and the smallest F whose read is within 5% of the coldest, and what one fill of each F costs.

    python scripts/cpu_flush_probe.py [--cpu N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy

from evoteam.harness.cache_flush import last_level_cache_bytes

MIB = 1 << 20


def read_ms(work: numpy.ndarray) -> float:
    t0 = time.perf_counter()
    work.view(numpy.int64).sum()
    return (time.perf_counter() - t0) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    llc = last_level_cache_bytes()
    fills = [0, llc // 8, llc // 4, llc // 2, llc, 2 * llc, 4 * llc]
    flusher = numpy.empty(max(fills), dtype=numpy.uint8)
    print(f"last-level cache reported: {llc // MIB} MiB; CPU {args.cpu}; median of {args.reps} reads (ms)")
    print("working set  " + "  ".join(f"F={f // MIB:>4} MiB" for f in fills))
    for work_bytes in (llc // 8, llc // 2):
        work = numpy.ones(work_bytes, dtype=numpy.uint8)
        row = []
        for fill in fills:
            times = []
            for r in range(args.reps):
                read_ms(work)  # warm: the working set in the caches
                if fill:
                    flusher[:fill].fill(r & 0xFF)
                times.append(read_ms(work))
            row.append(statistics.median(times))
        coldest = max(row)
        enough = next(f for f, ms in zip(fills, row) if ms >= 0.95 * coldest)
        print(f"{work_bytes // MIB:>6} MiB  " + "  ".join(f"{ms:>10.3f}" for ms in row)
              + f"   evicted from F = {enough // MIB} MiB")
    for fill in fills[1:]:
        t0 = time.perf_counter()
        for r in range(5):
            flusher[:fill].fill(r)
        print(f"one fill of {fill // MIB} MiB: {(time.perf_counter() - t0) / 5 * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
