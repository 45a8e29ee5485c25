"""The supervisor's progress record, derived from the workspace journal (so it survives a resume):
best verified speedup per workload group, measured noise, failure causes by type, evaluations
since the last improvement beyond noise, and tokens spent per improvement."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from evoteam.harness.model import Status, geomean
from evoteam.team.inherit import INHERITED_TEAM
from evoteam.team.workspace import Attempt

DEFAULT_NOISE = 0.02  # until a measurement says otherwise
FAILURE_TYPES = {
    "compile_error": "compile error", "rejected": "flagged cheat", "flagged_cheat": "flagged cheat",
    "skipped_work": "flagged cheat", "timeout": "timeout", "crash": "crash", "out_of_memory": "crash",
    "exception": "crash",
}


def failure_type(status: str) -> str:
    if status == Status.PASSED:
        return ""
    return FAILURE_TYPES.get(status, "wrong result")


@dataclass
class Progress:
    evaluations: int = 0
    best_geomean: float | None = None
    best_attempt: str | None = None
    best_by_group: dict[str, float] = field(default_factory=dict)
    noise: float = DEFAULT_NOISE
    failures: Counter = field(default_factory=Counter)
    since_improvement: int = 0
    improvements: int = 0
    failure_streak: tuple[str, int] = ("", 0)
    passed: int = 0
    rules: Counter = field(default_factory=Counter)  # improvements by the rule that called them: intervals, noise

    @property
    def correct_rate(self) -> float:
        return self.passed / self.evaluations if self.evaluations else 0.0

    def report(self) -> str:
        groups = ", ".join(f"{g} {s:.3f}x" for g, s in sorted(self.best_by_group.items())) or "none"
        fails = ", ".join(f"{k} {v}" for k, v in self.failures.most_common()) or "none"
        best = "none" if self.best_geomean is None else f"{self.best_geomean:.3f}x ({self.best_attempt})"
        return (f"evaluations {self.evaluations}; correct {self.passed}; best geomean {best}; best per group: "
                f"{groups}; noise {100 * self.noise:.1f}%; failures: {fails}; evaluations since the last "
                f"improvement {self.since_improvement}; repeated failure {self.failure_streak[0] or '-'} "
                f"x{self.failure_streak[1]}")


def progress_of(attempts: list[Attempt], groups: dict[str, str]) -> Progress:
    """Replay the journal in order. An attempt improves the record when it beats the best of some workload group
    (geomean over that group's workloads it covered) beyond its uncertainty: the geomean of its figures' 95% interval
    lower ends above the best, where every figure has its interval; else by more than the noise."""
    p = Progress()
    noises: list[float] = []
    for a in attempts:
        p.evaluations += 1
        if a.noise is not None:
            noises.append(a.noise)
        p.noise = max(DEFAULT_NOISE, max(noises)) if noises else DEFAULT_NOISE
        ftype = failure_type(a.status)
        if ftype:
            p.failures[ftype] += 1
            p.failure_streak = (ftype, p.failure_streak[1] + 1 if p.failure_streak[0] == ftype else 1)
        else:
            p.passed += 1
            p.failure_streak = ("", 0)
        improved = False
        if a.status == Status.PASSED and a.speedups:
            by_group: dict[str, list[float]] = {}
            for uuid, s in a.speedups.items():
                by_group.setdefault(groups.get(uuid, "all"), []).append(s)
            for group, values in by_group.items():
                g = geomean(values)
                old = p.best_by_group.get(group)
                members = [u for u in a.speedups if groups.get(u, "all") == group]
                lows = [a.intervals[u][0] for u in members if u in a.intervals]
                if len(lows) == len(members):  # every figure with its interval: its lower end must beat the best
                    beyond, rule = old is None or geomean(lows) > old, "intervals"
                else:
                    beyond, rule = old is None or g > old * (1 + p.noise), "noise"
                if beyond:
                    improved = True
                    p.rules[rule] += 1
                if old is None or g > old:
                    p.best_by_group[group] = g
            if a.geomean is not None and (p.best_geomean is None or a.geomean > p.best_geomean):
                p.best_geomean, p.best_attempt = a.geomean, a.attempt_id
        if improved:
            p.improvements += 1
            p.since_improvement = 0
        else:
            p.since_improvement += 1
    return p


def beats(a: Attempt, b: Attempt, uuid: str) -> tuple[bool, str]:
    """Whether `a`'s kernel is faster than `b`'s on `uuid` beyond the uncertainty of both figures, and by which rule:
    "intervals" where both measurements carry the 95% interval of their speedup (from their timing rounds: a's lower
    end above b's upper end), else "noise" (a's figure above b's by more than the larger relative gap between either
    candidate's two timings, at least DEFAULT_NOISE)."""
    ia, ib = a.intervals.get(uuid), b.intervals.get(uuid)
    if ia and ib:
        return ia[0] > ib[1], "intervals"

    def noise(x: Attempt) -> float:
        return x.noises.get(uuid, x.noise if x.noise is not None else DEFAULT_NOISE)

    return a.speedups[uuid] > b.speedups[uuid] * (1 + max(DEFAULT_NOISE, noise(a), noise(b))), "noise"


def keep_inherited(uuid: str, measured: list[Attempt]) -> Attempt:
    return keep_inherited_why(uuid, measured)[0]


def keep_inherited_why(uuid: str, measured: list[Attempt]) -> tuple[Attempt, str]:
    """The kernel for `uuid` among the attempts that measured it, and why: the fastest, except that an inherited
    kernel stays unless a team's kernel beats it beyond the uncertainty of both measurements (`beats`); the fastest
    of those that do is taken. The fastest of many noisy figures is the luckiest: on the H200 (2026-12-02) a kernel
    picked at 1.27x there, its two timings 47% apart, measured 1.03x in the final table where the inherited kernel
    had measured 1.11x."""
    inherited = [a for a in measured if a.team == INHERITED_TEAM]
    if not inherited:
        return max(measured, key=lambda a: a.speedups[uuid]), "fastest (nothing inherited)"
    kept = max(inherited, key=lambda a: a.speedups[uuid])
    verdicts = [(a, *beats(a, kept, uuid)) for a in measured if a.team != INHERITED_TEAM]
    beyond = [(a, rule) for a, won, rule in verdicts if won]
    if beyond:
        a, rule = max(beyond, key=lambda x: x[0].speedups[uuid])
        return a, f"beats the inherited kernel beyond the {rule}"
    rules = sorted({rule for _, _, rule in verdicts}) or ["-"]
    return kept, f"inherited kept: no team's kernel beat it beyond the {' or '.join(rules)}"
