"""One workload's timed rounds: the sides (the protocol alone, the baseline, the candidate twice), each round timing
every side once in an order drawn afresh, until the figures are settled; what the rounds found.

The rounds reach the judge through a small interface (`Judging`): time one side's batch, check a candidate batch's
outputs and inputs, check the baseline's own output once, freeze the candidate, draw a seed. How a side's batch is
timed, how many rounds an evaluation takes, when the figures are settled and how the samples become figures and flags
is its clock's (evoteam.harness.timing): the rounds name no timing mode.

A round times every side once, in an order drawn afresh; the candidate's two batches are labelled speedup and noise
by a coin after the round, so the candidate cannot tell which of its batches counts. Time per call = the side's batch
/ its calls - the protocol alone's batch / its calls. The calls of the candidate's batches that are checked in full
are picked at random by the judge, at one rate over every round, so no round is safer to skip work in.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from evoteam.harness.calls import CallSets
from evoteam.harness.interval import Interval
from evoteam.harness.model import Status
from evoteam.harness.runners import RunnerHandle, claimed_failure
from evoteam.harness.timing import median, median_interval, quantile, ratios

VERIFY_BUDGET_S = 0.05  # per workload: the full check of timed calls picked at random (all where cheap)
MIN_VERIFIED = 8


@dataclass(frozen=True)
class Side:
    """One timed side of a round: whose runner, which call sets, how it is timed, and the protocol-alone side whose
    time per call is subtracted from its own (None: it is a protocol-alone side)."""

    name: str  # null, null_candidate, baseline, candidate, candidate_repeat
    runner: RunnerHandle
    calls: CallSets
    sets: tuple[int, ...]
    clock: Any  # timing.Clock
    against: str | None = None

    @property
    def null(self) -> bool:
        return self.against is None

    @property
    def candidate(self) -> bool:
        return self.name.startswith("candidate")


@dataclass(frozen=True)
class Figure:
    """A side's time per call over the timed rounds, in ms."""

    median: float
    p10: float
    p90: float
    samples: int


@dataclass
class Outcome:
    """What the rounds found: each reported side's figure, the speedup's paired median (CPU) and 95% interval, the
    flags its clock raised, and the batches that were timed (their numbers: the runner's own report is matched by
    them)."""

    figures: dict[str, Figure]
    paired: float | None = None
    interval: tuple[float, float] | None = None
    flags: list[str] = field(default_factory=list)
    timed_batches: set[int] = field(default_factory=set)


class Failed(Exception):
    """A timed batch failed: the workload's verdict is `status`, said by `detail`."""

    def __init__(self, status: Status, detail: str, flag: bool = False):
        super().__init__(detail)
        self.status, self.detail, self.flag = status, detail, flag


class Judging(Protocol):
    """What the rounds need of the judge."""

    reference_s: float  # the slowest full check of one call so far (the verification budget divides by it)

    def time(self, side: Side, deadline: float, write: Callable[[], None]) -> tuple[Interval, int]:
        """One interval of the side (its batch number beside it); raises Failed where the GPU was busy."""

    def check_batch(self, side: Side, sample, rnd: int, verify: list[int]) -> Any:
        """The checks after a candidate batch: the first CheckFailure, or None."""

    def baseline_wrong(self, calls: CallSets, rnd: int) -> str | None:
        """Why the baseline's own output is no reference (None: it is right)."""

    def freeze_candidate(self) -> None: ...

    def seed(self, *parts: object) -> int: ...


def _picked(rng: random.SystemRandom, total: int, extra: int, budget: int) -> set[int]:
    """The candidate calls checked in full: `budget` of the first `total` (the least rounds' calls), and the calls
    of the extra rounds at the same rate."""
    picked = set(rng.sample(range(total), budget))
    if extra:
        rate = budget / total
        picked |= {total + i for i in range(extra) if rng.random() < rate}
    return picked


def run(judging: Judging, sides: dict[str, Side], *, warmup: int, reps: int, repeat: bool, verify_budget: bool,
        deadline: float, cached: float | None, workload_uuid: str) -> Outcome:
    """Timed rounds of `sides` (see the module's docstring): per reported side its figure, or Failed where a
    candidate batch failed (its verdict) or the baseline's did (harness_error)."""
    cand = sides["candidate"]
    clock, n = cand.clock, len(cand.sets)
    min_reps, max_reps, step = clock.rounds(reps)
    batches_a_round = 2 if repeat else 1
    total = (warmup + min_reps) * n * batches_a_round
    budget = total
    if verify_budget and judging.reference_s > 0:
        budget = min(total, max(MIN_VERIFIED, int(VERIFY_BUDGET_S / judging.reference_s)))
    elif not verify_budget:
        budget = min(total, 2)
    rng = random.SystemRandom()
    picked = _picked(rng, total, (max_reps - min_reps) * n * batches_a_round, budget)
    reported = [name for name, side in sides.items() if not side.null]
    samples: dict[str, list[float]] = {name: [] for name in reported}
    walls: dict[str, list[float]] = {name: [] for name in sides}  # CPU targets: the host clock beside CPU time
    outcome = Outcome(figures={})
    candidate_call = 0
    baseline_checked = cached is not None
    limit, started = warmup + min_reps, time.monotonic()
    for rnd in itertools.count():
        if rnd >= limit:
            elapsed = time.monotonic() - started
            more = step * elapsed / max(rnd, 1)  # what the next extra rounds would take
            settled = clock.settled(samples, cached) and clock.above_protocol(samples, walls, sides, warmup)
            if (limit >= warmup + max_reps or settled or (clock.extend_s is not None and elapsed + more > clock.extend_s)
                    or time.monotonic() + 2 * more > deadline):
                break
            limit = min(warmup + max_reps, limit + step)
        intervals: dict[str, float] = {}
        turn = list(sides)
        rng.shuffle(turn)
        for name in turn:
            side = sides[name]
            seed = judging.seed(workload_uuid, clock.mode.value, name, rnd)
            if not side.candidate:
                judging.freeze_candidate()  # nothing of the candidate runs while the other side is timed
            write = (lambda c=side.calls, s=list(side.sets): c.poison(s)) if side.null else \
                (lambda c=side.calls, s=list(side.sets), seed=seed: c.refresh(s, seed))
            out, batch = judging.time(side, deadline, write)
            if not side.candidate:
                if not out.reply.get("ok"):
                    raise Failed(Status.HARNESS_ERROR, f"the baseline runner failed a timed call: "
                                                       f"{out.reply.get('detail', '')}")
                if name == "baseline" and not baseline_checked:
                    baseline_checked = True
                    wrong = judging.baseline_wrong(side.calls, rnd)
                    if wrong:
                        raise Failed(Status.HARNESS_ERROR, wrong)
            else:
                if rnd >= warmup:
                    outcome.timed_batches.add(batch)
                if not out.reply.get("ok"):
                    raise Failed(claimed_failure(out.reply, Status.EXCEPTION),
                                 f"a timed call failed: {out.reply.get('detail', '')}")
                verify = [j for j in side.sets if candidate_call + j in picked]
                candidate_call += n
                failure = judging.check_batch(side, out.sample, rnd, verify)
                if failure is not None:
                    status = Status(failure.check)
                    if status in (Status.MISMATCH, Status.NAN_INF, Status.REL_NORM, Status.UNWRITTEN):
                        status = Status.SKIPPED_WORK
                    raise Failed(status, f"a timed call (round {rnd}) failed the check: {failure.check}: "
                                         f"{failure.detail}")
            intervals[name] = out.ms
            walls[name].append(out.wall_ms)
        if repeat and rng.random() < 0.5:  # which of its two batches is the speedup's: a coin, after the fact
            intervals["candidate"], intervals["candidate_repeat"] = (intervals["candidate_repeat"],
                                                                     intervals["candidate"])
        if rnd >= warmup:
            for name in reported:
                side = sides[name]
                # the protocol's cost is per call (each call is released on its own)
                samples[name].append(intervals[name] / len(side.sets)
                                     - intervals[side.against] / len(sides[side.against].sets))
    finish = clock.finish(samples, walls, sides, warmup, cached)
    outcome.figures = {name: Figure(finish.medians.get(name, median(v)), quantile(v, 0.1), quantile(v, 0.9), len(v))
                       for name, v in samples.items()}
    outcome.paired, outcome.flags = finish.paired, list(finish.flags)
    # the speedup's 95% interval: the order statistics around the median of the per-round ratios (the two sides
    # timed moments apart in each round; against a cached baseline time, the candidate's rounds alone)
    found = (ratios(samples, "baseline", "candidate") if cached is None
             else [cached / c for c in samples["candidate"] if c > 0])
    if found:
        outcome.interval = median_interval(found)
    if cached is not None:
        outcome.figures["baseline"] = Figure(cached, cached, cached, 0)
    return outcome
