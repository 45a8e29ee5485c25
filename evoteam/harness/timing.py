"""Timing of trusted callables side by side in this process, interleaved, in a named mode: the
probes' and scripts' tool for kernels they wrote themselves, and the statistics every figure uses.
Untrusted candidates are never timed here: the judge times them from outside their process
(`evoteam.harness.interval`).

Modes (every result says which produced it):
  events     device events around one call, the L2 flushed before each call (GPU)
  graph      graph replay: `GRAPH_CALLS` x [flush, call] captured in one CUDA graph, minus a graph of
             the flushes alone, divided by the calls; hides the host's launch cost (GPU, capturable
             callables only; a callable that cannot be captured falls back to events, and says so)
  wallclock  host clock around one call with device synchronisation before and after: the mode on
             CPU, and the right one for callables that do host work (FlashInfer's plan())
Each callable is called as fn(i) with the call's index, so it can rotate among input sets; a
`before_call(name, i)` hook (outside the timed region, with the L2 flush) resets its buffers.
The median of `reps` rounds is reported with its 10th and 90th percentiles; the callables take
turns every round and the order flips every other round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from evoteam.harness.model import TIMING_MODES as MODES

GRAPH_CALLS = 20


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
            l2_bytes = int(getattr(props, "L2_cache_size", 0) or (64 << 20))
        self.buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def _no_hook(name: str, i: int) -> None:
    return None


def measure(callables: dict[str, Callable[[int], None]], *, device: str, mode: str, warmup: int = 3,
            reps: int = 20, before_call: Callable[[str, int], None] = _no_hook) -> dict[str, Timing]:
    """One Timing per callable name; see the module docstring for the modes."""
    if mode not in MODES:
        raise ValueError(f"unknown timing mode {mode!r}; allowed: {', '.join(MODES)}")
    is_gpu = str(device).startswith("cuda")
    if mode in ("events", "graph") and not is_gpu:
        raise ValueError(f"timing mode {mode!r} needs a GPU; use 'wallclock' on CPU")
    if mode == "graph":
        return _measure_graph(callables, device, warmup, reps, before_call)
    flush = L2Flusher(device) if is_gpu else None
    names = list(callables)
    samples: dict[str, list[float]] = {n: [] for n in names}
    call_index = 0
    for rnd in range(warmup + reps):
        for name in names if rnd % 2 == 0 else names[::-1]:
            fn = callables[name]
            before_call(name, call_index)
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


def _measure_graph(callables: dict[str, Callable[[int], None]], device: str, warmup: int, reps: int,
                   before_call: Callable[[str, int], None]) -> dict[str, Timing]:
    flush = L2Flusher(device)
    stream = torch.cuda.Stream(device=device)

    def capture(body: Callable[[int], None]) -> torch.cuda.CUDAGraph:
        # Warm-up on a side stream first, as graph capture requires.
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for j in range(2):
                body(j)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for j in range(GRAPH_CALLS):
                body(j)
        torch.cuda.synchronize()
        return graph

    def flush_only(j: int) -> None:
        flush()

    graphs: dict[str, torch.cuda.CUDAGraph] = {}
    fallback: list[str] = []
    for name, fn in callables.items():
        def body(j: int, name: str = name, fn: Callable[[int], None] = fn) -> None:
            before_call(name, j)
            flush()
            fn(j)
        try:
            graphs[name] = capture(body)
        except Exception:  # noqa: BLE001 - a callable that cannot be captured is timed with events
            torch.cuda.synchronize()
            fallback.append(name)
    baseline_graph = capture(lambda j: (before_call(next(iter(callables)), j), flush_only(j)))

    def replay_ms(graph: torch.cuda.CUDAGraph) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    samples: dict[str, list[float]] = {n: [] for n in graphs}
    names = list(graphs)
    for rnd in range(warmup + reps):
        overhead = replay_ms(baseline_graph)
        for name in names if rnd % 2 == 0 else names[::-1]:
            elapsed = (replay_ms(graphs[name]) - overhead) / GRAPH_CALLS
            if rnd >= warmup:
                samples[name].append(max(elapsed, 0.0))
    out = {n: summarize("graph", samples[n]) for n in names}
    if fallback:
        events = measure({n: callables[n] for n in fallback}, device=device, mode="events", warmup=warmup,
                         reps=reps, before_call=before_call)
        out.update({n: Timing("events (graph capture failed)", t.median_ms, t.p10_ms, t.p90_ms, t.samples)
                    for n, t in events.items()})
    return {n: out[n] for n in callables}


def kernel_names(fn: Callable[[], None], device: str) -> list[str]:
    """Names of the device kernels `fn` launches, read with the PyTorch profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for event in prof.events():
        device_type = getattr(event, "device_type", None)
        if device_type is not None and "CUDA" in str(device_type) and event.name:
            names.append(event.name)
    return [n for n in names if not n.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset"))]
