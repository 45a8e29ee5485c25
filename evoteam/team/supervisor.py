"""The supervisor: watches the progress record, detects a stall, diagnoses it and redesigns the
team (add, remove, split or merge roles; change the order; change what is shared with whom;
split the workloads between agents; change models). Each redesign states what it expects to
change; the next review says whether it did. LLM-driven when a redesign function is given,
rule-based otherwise (and as the fallback when the LLM's proposal is invalid)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from evoteam.team.progress import Progress
from evoteam.team.spec import RoleSpec, SpecError, TeamSpec

FAILURE_STREAK = 3  # the same failure this many times in a row is a stall too


def stalled(spec: TeamSpec, progress: Progress, team_evaluations: int) -> str | None:
    """Why the team is stalled, or None."""
    if progress.failure_streak[1] >= FAILURE_STREAK:
        return f"the same failure ({progress.failure_streak[0]}) {progress.failure_streak[1]} times in a row"
    if team_evaluations >= spec.stall_evaluations and progress.since_improvement >= spec.stall_evaluations:
        return (f"no improvement beyond the noise ({100 * progress.noise:.1f}%) for "
                f"{progress.since_improvement} evaluations")
    return None


def verdict(spec: TeamSpec, start: Progress, now: Progress) -> str:
    gained = now.improvements - start.improvements
    new_failures = {k: now.failures[k] - start.failures.get(k, 0) for k in now.failures}
    before = "-" if start.best_geomean is None else f"{start.best_geomean:.3f}x"
    after = "-" if now.best_geomean is None else f"{now.best_geomean:.3f}x"
    evaluations = now.evaluations - start.evaluations
    if evaluations == 0:  # e.g. a redesign made just as the evaluation budget ran out
        return f"untested: no evaluation ran under this design; best {before} -> {after}"
    expected = spec.expected_effect.lower()
    if "fail" in expected:
        streak_type = start.failure_streak[0]
        repeats = new_failures.get(streak_type, 0) if streak_type else sum(new_failures.values())
        ok = repeats <= max(1, evaluations // 3)
        what = f"{repeats} further failures of type {streak_type or 'any'} in {evaluations} evaluations"
    else:
        ok = gained > 0
        rules = {k: now.rules[k] - start.rules.get(k, 0) for k in now.rules}
        by = " and ".join(f"{n} by the {k}" for k, n in sorted(rules.items()) if n) or "none"
        what = (f"{gained} improvements beyond the uncertainty ({by}) in {evaluations} evaluations; best {before} "
                f"-> {after}")
    return ("confirmed: " if ok else "refuted: ") + what


def worst_groups(progress: Progress, groups: list[str], n: int = 2) -> list[str]:
    ranked = sorted(groups, key=lambda g: progress.best_by_group.get(g, 0.0))
    return ranked[:n]


def rule_based_redesign(spec: TeamSpec, progress: Progress, why: str, groups: list[str],
                        tried: set[str], models: list[str]) -> TeamSpec | None:
    """The first rule whose design was not tried yet."""
    model = spec.roles[0].model
    candidates: list[tuple[str, str, TeamSpec]] = []
    names = {r.name for r in spec.roles}
    streak_type = progress.failure_streak[0]

    if streak_type:
        debugger = RoleSpec("debugger", "debugger", model=model, reads=("failure_log", "best_kernel"))
        roles = tuple(r for r in spec.roles if r.name != "debugger")
        roles = tuple(replace(r, reads=tuple(dict.fromkeys((*r.reads, "failure_log")))) for r in roles)
        candidates.append((
            f"{why}: add a debugger first in the order and share the failure log with every role",
            f"failures of type {streak_type} stop repeating (at most a third of the next evaluations)",
            TeamSpec(name="debug-first", roles=(debugger, *roles), order=("debugger", *[r.name for r in roles]),
                     topology="sequential", stall_evaluations=spec.stall_evaluations)))

    worst = worst_groups(progress, groups)
    if len(groups) > 1:
        tuners = tuple(RoleSpec(f"tuner-{g}", "tuner", model=model, reads=("best_kernel", "summaries"),
                                workload_group=g) for g in worst)
        explorer = RoleSpec("explorer", "explorer", model=model, reads=("summaries",))
        candidates.append((
            f"{why}: split the workloads: one tuner per weakest group ({', '.join(worst)}), one explorer",
            f"the speedup of {', '.join(worst)} improves beyond the noise",
            TeamSpec(name="split-" + "-".join(worst), roles=(*tuners, explorer), topology="parallel",
                     stall_evaluations=spec.stall_evaluations)))

    explorers = (RoleSpec("explorer-a", "explorer", model=model, reads=("summaries",)),
                 RoleSpec("explorer-b", "explorer", model=model, reads=("failure_log", "summaries")))
    candidates.append((
        f"{why}: the tuner's neighbourhood is exhausted; two explorers first, then the tuner",
        "a new family or region of parameters beats the best beyond the noise",
        TeamSpec(name="explore-wide", roles=(*explorers, RoleSpec("tuner", "tuner", model=model,
                                                                 reads=("best_kernel",))),
                 order=("explorer-a", "explorer-b", "tuner"), stall_evaluations=spec.stall_evaluations)))

    candidates.append((
        f"{why}: too many hand-offs for what they bring; merge into one agent that reads everything",
        "fewer wasted evaluations: an improvement beyond the noise within the next review",
        TeamSpec(name="merged", roles=(RoleSpec("agent", "generalist", model=model,
                                                reads=("summaries", "best_kernel", "failure_log")),),
                 stall_evaluations=spec.stall_evaluations)))

    if "reviewer" not in names:
        candidates.append((
            f"{why}: add a reviewer that verifies the best kernel on every workload, and an analyst's notes",
            "the best kernel holds on all workloads and the next tuning starts from verified numbers",
            TeamSpec(name="review-loop", roles=(RoleSpec("tuner", "tuner", model=model, reads=("best_kernel",)),
                                                RoleSpec("reviewer", "reviewer", model=model,
                                                         reads=("best_kernel", "summaries")),
                                                RoleSpec("analyst", "analyst", model=model, tools=("read_shared",),
                                                         reads=("full_logs",))),
                     topology="review_loop", stall_evaluations=spec.stall_evaluations)))

    for other in models:
        if other != model:
            candidates.append((
                f"{why}: change the model to {other}",
                "an improvement beyond the noise with the other model",
                TeamSpec(name=f"model-{other}", roles=tuple(replace(r, model=other) for r in spec.roles),
                         order=spec.order, topology=spec.topology, stall_evaluations=spec.stall_evaluations)))

    agent = spec.roles[0].agent  # a new design's roles are played as the current team's are (LLM or a CLI)
    for reason, effect, design in candidates:
        design = replace(design, roles=tuple(r if r.agent != "llm" else replace(r, agent=agent) for r in design.roles))
        if design.spec_id not in tried:
            return replace(design, reason=reason, expected_effect=effect, parent=spec.spec_id)
    return None


class Supervisor:
    def __init__(self, groups: list[str], models: list[str],
                 llm_redesign: Callable[[TeamSpec, str], TeamSpec | None] | None = None, max_redesigns: int = 10):
        self.groups = groups
        self.models = models
        self.llm_redesign = llm_redesign
        self.max_redesigns = max_redesigns

    @classmethod
    def from_config(cls, team_cfg, groups: list[str], model: str,
                    llm_redesign: Callable[[TeamSpec, str], TeamSpec | None] | None = None) -> Supervisor:
        """The supervisor of the `team` config group, over the run's workload groups."""
        return cls(groups=groups, models=[model], llm_redesign=llm_redesign, max_redesigns=team_cfg.max_redesigns)

    def redesign(self, spec: TeamSpec, progress: Progress, why: str, tried: set[str]) -> tuple[TeamSpec | None, str]:
        """A new team and who designed it ("llm" or "rules"); None when every design was tried."""
        if self.llm_redesign is not None:
            try:
                proposal = self.llm_redesign(spec, f"Stall: {why}.\nProgress: {progress.report()}")
            except SpecError:
                proposal = None
            if proposal is not None and proposal.spec_id not in tried:
                return proposal, "llm"
        return rule_based_redesign(spec, progress, why, self.groups, tried, self.models), "rules"
