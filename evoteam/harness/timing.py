"""The home of the timing modes.

1. The judge's clocks (`Clock`, one class per mode: graph, events, wallclock, cputime): how one side's batch of calls
   is timed (an interval through the judge <-> runner protocol, evoteam.harness.interval), how many input sets a
   workload's batches hold, and how many rounds an evaluation takes. A new mode is one new class in CLOCKS.
2. `measure`: trusted callables timed side by side in this process, interleaved, in a named mode: the probes' and
   scripts' tool for kernels they wrote themselves. Untrusted candidates are never timed here: the judge times them
   from outside their process.

Modes of `measure` (every result says which produced it):
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

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from evoteam.harness.interval import Interval, run_cpu, run_gpu
from evoteam.harness.model import TIMING_MODES as MODES
from evoteam.harness.model import TimingMode

GRAPH_CALLS = 20

# ------------------------------------------------------------------------------------------ the judge's clocks

MAX_SETS = 16  # calls per batch on a CPU, input sets on a GPU timed by events (one call an interval)
# Graph mode: a batch of calls takes about GRAPH_BATCH_US on the workload's physical floor (each call counted at
# least GRAPH_MIN_CALL_US, a small kernel's launch-bound time), at most MAX_GRAPH_CALLS calls (fewer where the task's
# pool or the memory budget holds fewer). The protocol's jitter per batch (tens of microseconds on the H200: a
# switch between the judge's and the runner's contexts) is divided by the calls: with 16 calls, batch-1 MLA
# workloads of 7 us measured up to 9.6% noise; with up to 128, at most 1.5% (2026-12-04). A fact of the workload,
# never of the candidate.
GRAPH_BATCH_US, GRAPH_MIN_CALL_US, MAX_GRAPH_CALLS = 1000.0, 5.0, 128
# GPU targets: rounds go on from GPU_MIN_REPS until the per-round ratios' medians are known within their 95% interval
# spanning GPU_CI_WIDTH of them (graph; events EVENTS_CI_WIDTH), or the request's reps are done
GPU_MIN_REPS, GPU_CI_WIDTH, EVENTS_CI_WIDTH = 8, 0.02, 0.05
# CPU targets: a shared host's cache and memory make one round's ratio vary by 20% or more (a batch-1
# workload on the CI machine: 0.74-2.03x within one evaluation, 2026-12-02), so rounds go on, up to
# CPU_MAX_FACTOR times the rounds asked for, until the median's 95% interval spans at most CPU_CI_WIDTH of it
# (on the 4 small MLA workloads, three or four evaluations each landed within 1-10% of each other, an evaluation
# taking 11-16 s; with 15 rounds always, CI saw 1.12x to 1.37x).
# Extra rounds stop once the rounds would pass CPU_EXTEND_S: a candidate 100x slower than its baseline (Triton's
# interpreter: 0.2-0.6 s a call) gains nothing from a closer figure, and took 3x the time with it.
CPU_MAX_FACTOR, CPU_CI_WIDTH, CPU_EXTRA_ROUNDS, CPU_EXTEND_S = 3, 0.12, 6, 10.0


class Clock:
    """One timing mode of the judge. `interval` times one side's batch (the runner frozen around it, see
    evoteam.harness.interval); `rounds` says how many rounds an evaluation takes; `sets` how many input sets a
    workload's batches hold."""

    mode: TimingMode
    graph = False  # the runner replays its batch captured in one CUDA graph
    paired = False  # the rounds settle on the per-round speedup alone (CPU), else on the speedup and the noise
    width = EVENTS_CI_WIDTH  # the rounds stop once each settling ratio's 95% interval spans this share of it
    extend_s: float | None = None  # extra rounds stop once the rounds would pass this many seconds

    def rounds(self, reps: int) -> tuple[int, int, int]:
        """(the least timed rounds, the most, the rounds added at a time) for `reps` asked."""
        return min(GPU_MIN_REPS, reps), reps, 1

    def sets(self, task, workload, hw) -> int | Callable[[dict], int]:
        """Input sets for a workload's calls: a number, or a function of one set's inputs that gives it."""
        return min(MAX_SETS, task.max_sets(workload))

    def interval(self, handle, calls, sets: list[int], batch: int, deadline: float, write, flusher,
                 null: bool) -> Interval:
        return run_gpu(handle, calls, sets, batch, deadline, write, flusher.zero_ if flusher is not None else None,
                       self.graph, null)


class GraphClock(Clock):
    """Device time: the batch's calls captured in one CUDA graph, enqueued before the judge's clock starts."""

    mode, graph, width = TimingMode.graph, True, GPU_CI_WIDTH

    def sets(self, task, workload, hw):
        # The calls of a graph batch are released together: only a chain (the task's CHAINED_INPUTS: call k+1's input
        # is call k's output) keeps one call from computing the others' sets. Without one, one call a batch.
        cap = task.max_sets(workload) if task.chained_inputs else 1

        def count(template: dict) -> int:
            from evoteam.harness.scan import physical_floor_ms

            floor_ms = physical_floor_ms(task.min_bytes(workload, template) or 0, hw.peak_memory_bandwidth_tbs) or 0.0
            per_call_us = max(GRAPH_MIN_CALL_US, 1e3 * floor_ms)
            return max(1, min(cap, MAX_GRAPH_CALLS, math.ceil(GRAPH_BATCH_US / per_call_us)))

        return count


class EventsClock(Clock):
    """Per call: launched by the runner's host once the judge releases it, timed by the judge's device events."""

    mode = TimingMode.events


class WallclockClock(EventsClock):
    """A baseline that does host work per call (FlashInfer's plan per call): both sides launched by their hosts and
    timed as events time them, the host's work inside."""

    mode = TimingMode.wallclock


class CpuTimeClock(Clock):
    """CPUs: the CPU time of the runner's cgroup over its calls, read once it is frozen (evoteam.harness.interval)."""

    mode, paired, width, extend_s = TimingMode.cputime, True, CPU_CI_WIDTH, CPU_EXTEND_S

    def rounds(self, reps: int) -> tuple[int, int, int]:
        return reps, CPU_MAX_FACTOR * reps, CPU_EXTRA_ROUNDS

    def interval(self, handle, calls, sets, batch, deadline, write, flusher, null):
        return run_cpu(handle, calls, sets, batch, deadline, write, flusher, null)


CLOCKS: dict[TimingMode, Clock] = {c.mode: c() for c in (GraphClock, EventsClock, WallclockClock, CpuTimeClock)}


def clock(mode: TimingMode | str) -> Clock:
    """The judge's clock for a timing mode."""
    return CLOCKS[TimingMode(mode)]


# ------------------------------------------------------------------------------------------ trusted callables


@dataclass(frozen=True)
class Timing:
    mode: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    def to_json(self) -> dict:
        return asdict(self)


def median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def quantile(values: list[float], q: float) -> float:
    """The value at rank q (0..1) of the sorted values, the nearest rank."""
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def median_interval(values: list[float]) -> tuple[float, float]:
    """The distribution-free 95% interval of the median: the order statistics whose ranks bound it
    (the binomial's normal approximation, n/2 -+ 0.98 sqrt(n)); the whole range below 6 values."""
    values = sorted(values)
    n = len(values)
    if n < 6:
        return (values[0], values[-1]) if values else (math.nan, math.nan)
    half = 0.98 * math.sqrt(n)
    return values[max(0, math.floor(n / 2 - half))], values[min(n - 1, math.ceil(n / 2 + half))]


def summarize(mode: str, samples_ms: list[float]) -> Timing:
    values = sorted(samples_ms)
    return Timing(mode=mode, median_ms=median(values), p10_ms=quantile(values, 0.1),
                  p90_ms=quantile(values, 0.9), samples=len(values))


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
