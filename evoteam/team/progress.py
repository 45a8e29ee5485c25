"""The supervisor's progress record, derived from the workspace journal (so it survives a resume):
best verified speedup per workload group, measured noise, failure causes by type, evaluations
since the last improvement beyond noise, and tokens spent per improvement."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from evoteam.harness.model import geomean
from evoteam.team.workspace import Attempt

DEFAULT_NOISE = 0.02  # until a measurement says otherwise
FAILURE_TYPES = {
    "compile_error": "compile error", "rejected": "flagged cheat", "flagged_cheat": "flagged cheat",
    "skipped_work": "flagged cheat", "timeout": "timeout", "crash": "crash", "out_of_memory": "crash",
    "exception": "crash",
}


def failure_type(status: str) -> str:
    if status == "PASSED":
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
    """Replay the journal in order. An attempt improves the record when it beats the best of some
    workload group (geomean over that group's workloads it covered) by more than the noise."""
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
        if a.status == "PASSED" and a.speedups:
            by_group: dict[str, list[float]] = {}
            for uuid, s in a.speedups.items():
                by_group.setdefault(groups.get(uuid, "all"), []).append(s)
            for group, values in by_group.items():
                g = geomean(values)
                old = p.best_by_group.get(group)
                if old is None or g > old * (1 + p.noise):
                    improved = True
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
