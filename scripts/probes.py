"""What the GPU probes (scripts/mla_probe.py, scripts/kda_probe.py) share: their common options, the
deadline that turns a hung kernel into a stack dump, and the host time of one call."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def parser(description: str, default_workloads: list[str], reps: int) -> argparse.ArgumentParser:
    """A parser with the options every probe takes; the caller adds its kernel argument and its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--points", default="[{}]",
                   help='JSON list of PARAMS overrides, one variant of each kernel file per point, e.g. \'[{}, {"BV": 16}]\'')
    p.add_argument("--workloads", nargs="*", default=default_workloads)
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--json", type=Path)
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds after which every thread's stack is printed and the probe exits (a hung kernel)")
    return p


def arm_deadline(seconds: float) -> None:
    """After `seconds` (if > 0), print every thread's stack and exit: a hung kernel shows where."""
    if seconds > 0:
        import faulthandler

        faulthandler.dump_traceback_later(seconds, exit=True)


def host_us(fn: Callable[[int], None], reps: int) -> float:
    """Median host time (us) of one call whose launches queue behind a busy GPU (no wait inside)."""
    import torch

    samples = []
    for _ in range(reps):
        torch.cuda._sleep(2_000_000)  # keep the GPU busy so that launches never wait
        t0 = time.perf_counter()
        fn(0)
        samples.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)
