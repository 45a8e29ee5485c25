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
  wallclock  host clock around one call with device synchronisation before and after: the right one for
             callables that do host work (FlashInfer's plan())
  cputime    the CPU time this process (every thread of it) used over one call: what the work costs a CPU,
             whatever else runs on the machine; a call that waits costs nothing here
Each callable is called as fn(i) with the call's index, so it can rotate among input sets; a
`before_call(name, i)` hook (outside the timed region, with the L2 flush) resets its buffers.
The median of `reps` rounds is reported with its 10th and 90th percentiles; the callables take
turns every round and the order flips every other round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

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
# ... from CPU_MIN_REPS rounds on (as a GPU's from GPU_MIN_REPS): how many an evaluation takes is its figures' to say.
# With 15 always, three in four of an evaluation's intervals went to rounds past a figure already settled on an idle
# machine (2026-12-06)
CPU_MIN_REPS = 8
CPU_BATCH_MS = 10.0  # CPU targets: calls per timed interval so that one interval of the baseline takes about this long
CPU_SLOW_BATCH_MS = 20.0  # ... and the candidate the same calls, unless that would take longer than this (then fewer)
# CPU targets: how the baseline's batch is chosen, part of the baseline cache's key: times cached while the batch
# followed the candidate's check time (before 2026-12-04, no rule) never serve an evaluation
BATCH_RULE = "baseline-probe"
IDLE_FACTOR, IDLE_SLACK_MS = 3.0, 2.0  # CPU targets: host-clock time above this is waiting, not work
MAX_GRAPH_NODES = 1024  # a graph batch's nodes at most (GraphClock.plan; gpu_model.QUEUE_NODES)


@dataclass(frozen=True)
class Plan:
    """How a workload's sides are timed: calls per batch of each, each side's clock, the label the result records."""

    n: int  # the candidate's calls per batch
    n_base: int  # the baseline's (and the protocol alone's)
    baseline: Clock
    candidate: Clock
    label: str
    graph_nodes: int = 0  # the larger side's captured batch, where it was captured


class Planning(Protocol):
    """What a clock needs of the judge to plan a workload's batches."""

    n_sets: int  # the input sets both sides have
    check_ms: float  # the candidate's time of one checked call (its own clock's)

    def capture(self, side: str, n: int) -> tuple[str | None, int]:
        """The side's first n calls captured in a CUDA graph: (why it failed or None, its nodes)."""

    def baseline_probe_ms(self) -> float:
        """The baseline's quickest of two untimed calls, the candidate frozen."""

    def cached_batches(self) -> list[int]:
        """The baseline batches the cache holds times for, whether or not the request takes cached times."""


@dataclass
class Finish:
    """What a clock makes of the rounds' samples beyond their medians: medians it replaces, the paired speedup, flags."""

    medians: dict[str, float] = field(default_factory=dict)
    paired: float | None = None
    flags: list[str] = field(default_factory=list)


class Clock:
    """One timing mode of the judge, and every decision that is the mode's: how one side's batch is timed (`interval`:
    the runner frozen around it, see evoteam.harness.interval), how many input sets a workload's batches hold
    (`sets`), how many calls a batch and which clock each side (`plan`), how many rounds (`rounds`), when the figures
    are settled (`settled`, `above_protocol`), what the samples make beyond their medians (`finish`), and the figure
    beside it (`second`)."""

    mode: TimingMode
    captured = False  # the runner replays its batch captured in one CUDA graph (and reports its own device time)
    paired = False  # the rounds settle on the per-round speedup alone (CPU), else on the speedup and the noise
    width = EVENTS_CI_WIDTH  # the rounds stop once each settling ratio's 95% interval spans this share of it
    extend_s: float | None = None  # extra rounds stop once the rounds would pass this many seconds
    second: TimingMode | None = None  # the mode of the figure timed beside this one (fewer rounds)
    cache_rule = ""  # how the baseline's batch was chosen, part of the baseline cache's key
    plan_phase = "timing: baseline setup"  # the phase its planning's time goes to

    @property
    def label(self) -> str:
        return self.mode.value

    def rounds(self, reps: int) -> tuple[int, int, int]:
        """(the least timed rounds, the most, the rounds added at a time) for `reps` asked."""
        return min(GPU_MIN_REPS, reps), reps, 1

    def sets(self, task, workload, hw) -> int | Callable[[dict], int]:
        """Input sets for a workload's calls: a number, or a function of one set's inputs that gives it."""
        return min(MAX_SETS, task.max_sets(workload))

    def plan(self, planning: Planning) -> Plan:
        """One call a batch, both sides by this clock."""
        return Plan(1, 1, self, self, self.label)

    def interval(self, handle, calls, sets: list[int], batch: int, deadline: float, write, flusher,
                 null: bool) -> Interval:
        return run_gpu(handle, calls, sets, batch, deadline, write, flusher.zero_ if flusher is not None else None,
                       self.captured, null)

    def settled(self, samples: dict[str, list[float]], cached: float | None) -> bool:
        """Whether the figures are known closely enough to stop timing: the median of each per-round ratio within its
        95% interval spanning `width` of it. Ratios of sides timed moments apart, in one round, so that what moves
        every side alike (a clock, the machine's load) cancels: the speedup and the noise (the candidate against its
        repeat)."""
        series = [ratios(samples, "candidate", "candidate_repeat")]
        if "baseline" in samples:
            series.append(ratios(samples, "baseline", "candidate"))
        return all(_within(values, self.width) for values in series if values)

    def above_protocol(self, samples: dict[str, list[float]], walls, sides, warmup: int) -> bool:
        """Whether the candidate's figure so far is above the protocol alone; until it is, the rounds go on (to the
        most allowed), and only a figure still at or below it then is flagged (no_time). An honest call that costs
        little beside the protocol's noise can come out at or below zero in a few rounds under load: a
        value-returning `x * 2.01` of 4096 elements, timed in two rounds by CPU time on a loaded CI machine, measured
        -0.04 ms and was flagged. A call that does no work stays at or below zero however long it is timed."""
        return bool(samples.get("candidate")) and median(samples["candidate"]) > 0

    def finish(self, samples: dict[str, list[float]], walls: dict[str, list[float]], sides, warmup: int,
               cached: float | None) -> Finish:
        return Finish()


def _within(values: list[float], width: float) -> bool:
    low, high = median_interval(values)
    return high - low <= width * median(values)


class GraphClock(Clock):
    """Device time: the batch's calls captured in one CUDA graph, enqueued before the judge's clock starts; the events
    figure beside it."""

    mode, captured, width, second = TimingMode.graph, True, GPU_CI_WIDTH, TimingMode.events
    plan_phase = "timing: graph capture"

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

    def plan(self, planning: Planning) -> Plan:
        """As many calls a batch as there are sets, both sides captured; at most MAX_GRAPH_NODES nodes a batch (fewer
        calls, both sides alike: a launch of many nodes behind the unwritten release word may hold its host,
        gpu_model's launch_may_block; the runner's count is a size to split by, never a time or a verdict). A side
        whose calls cannot be captured is timed by events: the baseline's, both sides; the candidate's alone, the
        candidate by events (its host's launches are its own cost) against the baseline's graph time: refusing the
        capture gains it nothing, since the baseline's mode is not the candidate's to choose."""
        n = planning.n_sets
        while True:
            failed, nodes = {}, 0
            for side in ("candidate", "baseline"):
                why, side_nodes = planning.capture(side, n)
                if why is not None:
                    failed[side] = why[:160]
                nodes = max(nodes, side_nodes)
            if failed or nodes <= MAX_GRAPH_NODES or n == 1:
                break
            n = max(1, n * MAX_GRAPH_NODES // nodes)
        events = CLOCKS[TimingMode.events]
        if "baseline" in failed:
            return Plan(1, 1, events, events,
                        f"events (graph capture failed: {'; '.join(f'{k}: {v}' for k, v in failed.items())})", nodes)
        if failed:
            return Plan(1, n, self, events, f"events for the candidate (its calls cannot be captured in a CUDA graph: "
                                            f"{failed['candidate']}), graph for the baseline", nodes)
        return Plan(n, n, self, self, self.label, nodes)


class EventsClock(Clock):
    """Per call: launched by the runner's host once the judge releases it, timed by the judge's device events."""

    mode = TimingMode.events


class WallclockClock(EventsClock):
    """A baseline that does host work per call (FlashInfer's plan per call): both sides launched by their hosts and
    timed as events time them, the host's work inside."""

    mode = TimingMode.wallclock


class CpuTimeClock(Clock):
    """CPUs: the CPU time of the runner's cgroup over its calls, read once it is frozen (evoteam.harness.interval);
    the speedup the median of the per-round ratios."""

    mode, paired, width, extend_s = TimingMode.cputime, True, CPU_CI_WIDTH, CPU_EXTEND_S
    cache_rule = BATCH_RULE

    def rounds(self, reps: int) -> tuple[int, int, int]:
        return min(CPU_MIN_REPS, reps), CPU_MAX_FACTOR * reps, CPU_EXTRA_ROUNDS

    def interval(self, handle, calls, sets, batch, deadline, write, flusher, null):
        return run_cpu(handle, calls, sets, batch, deadline, write, flusher, null)

    def plan(self, planning: Planning) -> Plan:
        """Short calls in batches, so the protocol's share shrinks: the baseline's calls per interval such that one
        interval takes about CPU_BATCH_MS, from two untimed calls of the baseline with the candidate frozen, never
        from anything the candidate does (when the batch followed the candidate's check time, a candidate that made
        itself look slow had the baseline timed in single calls, 1.7-1.9x slower: the red team's
        slow_down_the_baseline, 2026-12-03). A power of two, and once chosen the workload's on this machine: every
        evaluation takes the largest batch the baseline cache holds for it (all of them chosen so), whether or not it
        takes the cached time. Probed afresh each time, the batch moved one step between evaluations with the load of
        the moment (two calls at 0.8-1.3 ms against a step at 1.25 ms), a baseline timed at 4 calls an interval took
        1.3-1.45x its time at 8, and two candidates' speedups were measured a step apart. A candidate much slower
        than its baseline gets fewer calls of its own per interval, so that its evaluation does not grow with
        the baseline's batch (an agent's tool call has a time limit): a smaller batch only adds the interval's fixed
        cost to its own calls, so making itself look slow gains it nothing."""
        limit = planning.n_sets
        cached = [b for b in planning.cached_batches() if b <= limit]
        if cached:
            n_base = max(cached)
        else:
            probe_ms = planning.baseline_probe_ms()
            fit = CPU_BATCH_MS / probe_ms if probe_ms > 0 else float(limit)
            n_base = max(1, min(limit, 1 << int(math.log2(max(1.0, fit)))))
        n = n_base
        if planning.check_ms > 0 and n * planning.check_ms > CPU_SLOW_BATCH_MS:
            n = max(1, min(n_base, int(CPU_SLOW_BATCH_MS / planning.check_ms)))
        return Plan(n, n_base, self, self, self.label)

    def settled(self, samples, cached):
        """On a CPU the per-round speedup alone (the candidate's time where the baseline's is cached)."""
        values = samples["candidate"] if cached is not None else ratios(samples, "baseline", "candidate")
        return not values or _within(values, self.width)

    def finish(self, samples, walls, sides, warmup, cached):
        """The paired speedup (the median of the per-round ratios), and cpu_idle: CPU time counts work wherever the
        runner does it; a call that mostly waits did its work somewhere CPU time does not see. Legitimate work on a
        single thread takes about its CPU time."""
        out = Finish()
        found = ratios(samples, "baseline", "candidate")
        if found and cached is None:
            out.paired = median(found)
        if samples.get("candidate"):
            cand_calls, null_calls = len(sides["candidate"].sets), len(sides["null"].sets)
            wall = median(walls["candidate"][warmup:]) / cand_calls - median(walls["null"][warmup:]) / null_calls
            cpu = median(samples["candidate"])
            if wall > IDLE_FACTOR * cpu + IDLE_SLACK_MS:
                out.flags.append(f"cpu_idle: the candidate's calls took {wall:.3g} ms on the host clock but "
                                 f"{cpu:.3g} ms of CPU time")
        return out


class HostClock(CpuTimeClock):
    """CPUs where a runner has no cgroup of its own (inside a container): the host clock stands in for CPU time.
    The machine's load only ever adds to an interval, and a few ms of it in the protocol's own intervals outweigh an
    honest call of 0.3 ms: on a loaded CI machine the median of the per-round differences flagged one honest batch-1
    call in a container, reported another's as -0.05 ms, and the least disturbed intervals alone (two rounds) flagged
    a third. So each side's time is the larger of the two estimates, and the rounds go on (to the most allowed) while
    the candidate's least disturbed figure is not above the protocol's: a call that does no work stays there however
    long it is timed. The speedup stays the median of the per-round ratios, which the load moves alike on both
    sides. (cpu_idle needs CPU time: there is none to compare.)"""

    @property
    def label(self) -> str:
        return "wallclock (no cgroup of the runner's own: the host clock)"

    def above_protocol(self, samples, walls, sides, warmup):
        return _least(sides, walls, "candidate", warmup) > 0

    def finish(self, samples, walls, sides, warmup, cached):
        out = Finish()
        found = ratios(samples, "baseline", "candidate")
        if found and cached is None:
            out.paired = median(found)
        if samples.get("candidate"):
            out.medians = {name: max(median(values), _least(sides, walls, name, warmup))
                           for name, values in samples.items() if values}
        return out


def _least(sides, walls: dict[str, list[float]], name: str, warmup: int) -> float:
    """The host clock's least disturbed time per call of side `name`: its quickest timed batch less the quickest
    batch of the protocol it is measured against (warm-up rounds included: the protocol's quickest is what load
    never added to), per call; -inf before a timed round."""
    side = sides[name]
    if len(walls[name]) <= warmup or not walls[side.against]:
        return -math.inf
    return min(walls[name][warmup:]) / len(side.sets) - min(walls[side.against]) / len(sides[side.against].sets)


CLOCKS: dict[TimingMode, Clock] = {c.mode: c() for c in (GraphClock, EventsClock, WallclockClock, CpuTimeClock)}
HOST_CLOCK = HostClock()


def clock(mode: TimingMode | str) -> Clock:
    """The judge's clock for a timing mode."""
    return CLOCKS[TimingMode(mode)]


def for_target(is_gpu: bool, requested: str) -> Clock:
    """The clock a target times with for a requested mode: a CPU always by CPU time (the mode asked is a GPU's)."""
    return clock(TimingMode.on(requested, is_gpu))


def for_checks(is_gpu: bool) -> Clock:
    """The clock of the checked calls (and of a CPU's batch probe): one call an interval, launched by the runner's
    host."""
    return clock(TimingMode.events if is_gpu else TimingMode.cputime)


def for_workload(is_gpu: bool, requested: str, baseline_host_work: bool, runners_have_cgroups: bool) -> Clock:
    """The clock a workload's rounds are planned by: the requested mode's; on a GPU wallclock where the baseline does
    host work per call (FlashInfer's plan per call: both sides launched by their hosts); on a CPU whose runners have
    no cgroup of their own, the host clock."""
    chosen = for_target(is_gpu, requested)
    if is_gpu and baseline_host_work:
        return CLOCKS[TimingMode.wallclock]
    if not is_gpu and not runners_have_cgroups:
        return HOST_CLOCK
    return chosen


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


def ratios(samples: dict[str, list[float]], top: str, bottom: str) -> list[float]:
    """top / bottom per round, where both are positive."""
    return [a / b for a, b in zip(samples.get(top, []), samples.get(bottom, [])) if a > 0 and b > 0]


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
            elif mode == "cputime":  # the CPU time this process used over the call (every thread of it)
                t0 = time.process_time()
                fn(call_index)
                elapsed = (time.process_time() - t0) * 1e3
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
