"""Timing of callables, baseline and candidate side by side in the same process, interleaved.

Modes (named in every result):
  events     device events around one call, the L2 flushed before each call (CUDA/ROCm)
  wallclock  host clock around one call with device synchronisation before and after; the only
             mode on CPU, and the right one for callables that do host work (FlashInfer's plan())
Each callable is called as fn(i) with the call's index, so it can rotate among several input sets
and no call can reuse the previous call's result from cache.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Timing:
    mode: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    def to_json(self) -> dict:
        return asdict(self)


def _quantile(sorted_values: list[float], q: float) -> float:
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


def summarize(mode: str, samples_ms: list[float]) -> Timing:
    values = sorted(samples_ms)
    return Timing(mode=mode, median_ms=statistics.median(values), p10_ms=_quantile(values, 0.1),
                  p90_ms=_quantile(values, 0.9), samples=len(values))


class L2Flusher:
    """Overwrites a buffer twice the L2 size so that no input stays cached between timed calls."""

    def __init__(self, device: str, l2_bytes: int | None = None):
        if l2_bytes is None:
            props = torch.cuda.get_device_properties(torch.device(device))
            l2_bytes = int(getattr(props, "L2_cache_size", 64 << 20) or (64 << 20))
        self.buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def measure_interleaved(
    callables: dict[str, Callable[[int], None]],
    *,
    device: str,
    mode: str,
    warmup: int = 3,
    reps: int = 20,
) -> dict[str, Timing]:
    """Time each callable `reps` times, alternating between them (and their order) every round,
    after `warmup` untimed rounds. Returns one Timing per name."""
    names = list(callables)
    is_gpu = device.startswith("cuda")
    if mode == "events" and not is_gpu:
        raise ValueError("timing mode 'events' needs a GPU; use 'wallclock' on CPU")
    if mode not in ("events", "wallclock"):
        raise ValueError(f"unknown timing mode {mode!r}; allowed: events, wallclock")
    flush = L2Flusher(device) if is_gpu else None
    samples: dict[str, list[float]] = {n: [] for n in names}

    call_index = 0
    for rnd in range(warmup + reps):
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            fn = callables[name]
            if flush is not None:
                flush()
            if mode == "events":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(call_index)
                end.record()
                end.synchronize()
                elapsed = start.elapsed_time(end)
            else:
                if is_gpu:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn(call_index)
                if is_gpu:
                    torch.cuda.synchronize()
                elapsed = (time.perf_counter() - t0) * 1e3
            call_index += 1
            if rnd >= warmup:
                samples[name].append(elapsed)
    return {n: summarize(mode, samples[n]) for n in names}
