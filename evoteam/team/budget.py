"""The budget ledger of a run: tokens (prompt, completion, cached, reasoning), cost, evaluations and
wall time, per team and per role. `allow_call` keeps a run within its token budget plus at most
one call's max output: a call is refused once the tokens spent reach the budget, and a call that
is allowed may not ask for more output than `max_output_tokens`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from evoteam.harness.model import Placement
from evoteam.llm import Usage


class BudgetExceeded(Exception):
    """The token, evaluation or time budget is spent: the team stops, the run ends cleanly."""


@dataclass
class Ledger:
    token_budget: int
    max_evaluations: int
    max_wall_time_s: float
    max_output_tokens: int = 4096
    total: Usage = field(default_factory=Usage)
    by_team: dict[str, Usage] = field(default_factory=dict)
    by_role: dict[str, Usage] = field(default_factory=dict)  # "team_id/role"
    evaluations: int = 0
    evaluations_by_team: dict[str, int] = field(default_factory=dict)
    wall_time_s: float = 0.0  # time of earlier sessions of a resumed run
    in_flight: int = 0  # evaluations dispatched and not finished: they count against the budget
    queue_s: float = 0.0  # wall time when the team's every evaluation in flight waited for an accelerator
    uncharged_s: float = 0.0  # wall time of work no team is charged for: measuring what the workspace inherits
    _started: float = field(default_factory=time.monotonic, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _queued: list = field(default_factory=list, repr=False, compare=False)  # (submitted, started) wall times
    _running: list = field(default_factory=list, repr=False, compare=False)  # (started, ended)

    # ------------------------------------------------------------------ tokens
    def tokens_left(self) -> int:
        return self.token_budget - self.total.total_tokens

    def allow_call(self) -> int:
        """The max output tokens the next LLM call may ask for; raises once the budget is spent."""
        if self.tokens_left() <= 0:
            raise BudgetExceeded(f"token budget spent: {self.total.total_tokens} of {self.token_budget}")
        self.check_time()
        return self.max_output_tokens

    def record_llm(self, team: str, role: str, usage: Usage) -> None:
        with self._lock:
            self.total.add(usage)
            self.by_team.setdefault(team, Usage()).add(usage)
            self.by_role.setdefault(f"{team}/{role}", Usage()).add(usage)

    # ------------------------------------------------------------------ evaluations and time
    def allow_evaluation(self) -> None:
        with self._lock:
            if self.evaluations + self.in_flight >= self.max_evaluations:
                raise BudgetExceeded(f"evaluation budget spent: {self.evaluations} of {self.max_evaluations}"
                                     + (f" ({self.in_flight} in flight)" if self.in_flight else ""))
            self.check_time()

    def reserve_evaluation(self) -> None:
        """At dispatch: the evaluation counts against the budget while it is in flight."""
        with self._lock:
            self.allow_evaluation()
            self.in_flight += 1

    def release_evaluation(self) -> None:
        """A dispatched evaluation that did not finish (its executor failed): its reservation is returned."""
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)

    def record_evaluation(self, team: str, placement: Placement | None = None) -> None:
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)
            self.evaluations += 1
            self.evaluations_by_team[team] = self.evaluations_by_team.get(team, 0) + 1
            if placement is not None:
                self._queued.append((placement.submitted, placement.started))
                self._running.append((placement.started, placement.ended))
                self.queue_s = _uncovered(self._queued, self._running)

    def elapsed_s(self) -> float:
        """Wall time charged to the team: the run's time less the time it could only wait for a GPU and the time
        spent measuring what it inherited."""
        return self.wall_time_s + (time.monotonic() - self._started) - self.queue_s - self.uncharged_s

    def check_time(self) -> None:
        if self.elapsed_s() > self.max_wall_time_s:
            raise BudgetExceeded(f"wall-time budget spent: {self.elapsed_s():.0f} s of {self.max_wall_time_s:.0f} s")

    @classmethod
    def from_config(cls, budget_cfg, llm_cfg) -> Ledger:
        """The run's limits from its `budget` and `llm` configuration, by the one budget rule."""
        mode = getattr(budget_cfg.mode, "value", budget_cfg.mode)
        factor = budget_factor(mode, budget_cfg.extra_multiplier)
        return cls(token_budget=int(budget_cfg.tokens * factor), max_evaluations=int(budget_cfg.max_evaluations * factor),
                   max_wall_time_s=budget_cfg.max_wall_time_s * factor, max_output_tokens=llm_cfg.max_output_tokens)

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict:
        return {
            "token_budget": self.token_budget, "max_evaluations": self.max_evaluations,
            "max_wall_time_s": self.max_wall_time_s, "max_output_tokens": self.max_output_tokens,
            "total": self.total.to_json(), "by_team": {k: v.to_json() for k, v in self.by_team.items()},
            "by_role": {k: v.to_json() for k, v in self.by_role.items()}, "evaluations": self.evaluations,
            "evaluations_by_team": self.evaluations_by_team, "wall_time_s": self.elapsed_s(),
        }


def _uncovered(spans: list[tuple[float, float]], covers: list[tuple[float, float]]) -> float:
    """Seconds inside the union of `spans` that no span of `covers` overlaps."""
    def union(intervals):
        out: list[list[float]] = []
        for a, b in sorted(intervals):
            if b <= a:
                continue
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out
    total = 0.0
    busy = union(covers)
    for a, b in union(spans):
        length = b - a
        for c, d in busy:
            length -= max(0.0, min(b, d) - max(a, c))
        total += max(0.0, length)
    return total


def budget_factor(mode: str, extra_multiplier: float) -> float:
    """The one budget rule: `equal` gives every team preset the same budget; `extra` (the paper's
    extra-budget mode) multiplies all of it (tokens, evaluations, wall time) by `extra_multiplier`."""
    if mode == "equal":
        return 1.0
    if mode == "extra":
        return float(extra_multiplier)
    raise ValueError(f"unknown budget mode {mode!r}; allowed: equal, extra")


def token_budget(mode: str, equal_tokens: int, extra_multiplier: float) -> int:
    return int(equal_tokens * budget_factor(mode, extra_multiplier))
