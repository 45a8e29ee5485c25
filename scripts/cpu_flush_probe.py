"""How much a CPU target's judge must write between timed calls so that no call finds its data in a cache.

The judge fills a buffer before every CPU interval (evoteam.harness.cache_flush measures the size once per machine).
This probe prints the measurement in full: the time to read a working set W after filling F bytes, for F doubling
up to four times the last-level cache the system reports (at least 512 MiB); once F evicts W, the read time stops
rising. Median of 15 per cell, on one CPU; then what one fill of each F costs.

    python scripts/cpu_flush_probe.py [--cpu N]
"""

from __future__ import annotations

import argparse
import os
import time

from evoteam.harness.cache_flush import (
    MIB,
    CpuFlusher,
    candidate_fills,
    cold_reads,
    last_level_cache_bytes,
    smallest_evicting,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    llc = last_level_cache_bytes()
    fills = candidate_fills(llc)
    print(f"last-level cache reported: {llc // MIB} MiB; CPU {args.cpu}; median read time (ms) after a fill of F")
    print("working set  " + "  ".join(f"F={f // MIB:>4} MiB" for f in fills))
    for work_bytes in (4 * MIB, 16 * MIB):
        reads = cold_reads(fills, work_bytes)
        print(f"{work_bytes // MIB:>6} MiB  " + "  ".join(f"{ms:>10.3f}" for ms in reads)
              + f"   evicted from F = {smallest_evicting(fills, reads) // MIB} MiB")
    flusher = CpuFlusher(max(fills))
    for fill in fills:
        t0 = time.perf_counter()
        for r in range(5):
            flusher.fill(r, fill)
        print(f"one fill of {fill // MIB} MiB: {(time.perf_counter() - t0) / 5 * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
