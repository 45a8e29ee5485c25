"""The built-in search policy (`llm=offline`): agents without an LLM that search the task's kernel
families (`kernels/<task>/families.json`) and their parameters. Each role kind behaves as its name
says; every candidate they produce is a real file that the harness really evaluates.

  explorer   an untried point of the least-explored family, far from what was tried, on the role's focus;
             families measured only at under a quarter of the best known speed come last, and so do families
             the target runs under an interpreter (Triton on a CPU) and the task's naive kernel (`"naive": true` in families.json) next to an inherited champion
  tuner      the best verified kernel of the focus with one parameter moved to a neighbouring value,
             starting from the point that runs on the focus's weakest workload; explores when every
             neighbour was tried. Where that kernel runs a point per workload (an inherited champion, or a
             tuner's earlier table) and the family has a DISPATCH table, it tunes every focus workload at
             once: each one's own point (of its kept kernel) moved to an untried neighbour, one kernel with
             those points in its table, so one evaluation compares a neighbour with each workload's best
  The focus is the role's workload group if it has one, else the weakest group (the lowest geometric mean
  of the best speedups measured on its workloads) once anything is measured, else the probe set. An
  inherited champion (workspace.inherit) runs a point per workload (its dispatch, `origin.points`): tuning
  starts from those points and they count as tried on their workloads.
  debugger   the family and parameters of the latest failure, moved back towards the family's
             default one parameter at a time, checked on the workloads that failed
  analyst    no evaluation: writes the team's notes (best per group, failure causes) to the workspace
  reviewer   re-benchmarks the best kernel on every workload (verification), then tunes
  generalist explores for its first turns, then tunes, and debugs after a failure
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from evoteam.families import Champion, Family, apply_params
from evoteam.harness.model import Status, geomean
from evoteam.team.agent import TurnContext
from evoteam.team.inherit import INHERITED_TEAM
from evoteam.team.progress import Progress, keep_inherited
from evoteam.team.spec import RoleSpec
from evoteam.team.toolbox import Toolbox, describe
from evoteam.team.workspace import Attempt


@dataclass(frozen=True)
class Point:
    family: str
    params: tuple[tuple[str, object], ...]

    @property
    def as_dict(self) -> dict:
        return dict(self.params)

    def origin(self) -> dict:
        return {"family": self.family, "params": self.as_dict}


class SearchSpace:
    def __init__(self, families: list[Family], interpreted: frozenset[str] = frozenset()):
        if not families:
            raise ValueError("the task has no kernel families to search (kernels/<task>/families.json)")
        self.families = {f.name: f for f in families}
        # families that run under an interpreter on the target (Triton on a CPU): correct there, but their
        # speed says nothing; explored after every other
        self.interpreted = frozenset(interpreted)
        self._sources = {f.name: f.path.read_text() for f in families}

    def default(self, family: str) -> Point:
        return Point(family, tuple(sorted(self.families[family].default.items())))

    def points(self, family: str) -> list[Point]:
        space = self.families[family].space
        keys = sorted(space)
        return [Point(family, tuple(zip(keys, values))) for values in itertools.product(*(space[k] for k in keys))]

    def neighbours(self, point: Point) -> list[Point]:
        space = self.families[point.family].space
        out = []
        params = point.as_dict
        for key in sorted(space):
            values = space[key]
            if params.get(key) not in values:
                continue
            i = values.index(params[key])
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    out.append(Point(point.family, tuple(sorted({**params, key: values[j]}.items()))))
        return out

    def source(self, point: Point) -> str:
        return apply_params(self._sources[point.family], point.as_dict)


def _distance(params: dict, seen: list[dict]) -> int:
    """How many parameters differ from the nearest of `seen`."""
    return min((sum(params[k] != q.get(k) for k in params) for q in seen), default=len(params))


def point_of(attempt: Attempt) -> Point | None:
    origin = attempt.origin or {}
    if "family" not in origin:
        return None
    return Point(origin["family"], tuple(sorted(origin["params"].items())))


def point_on(attempt: Attempt, workload: str) -> Point | None:
    """The point that ran on `workload` in this attempt: an inherited champion's dispatch point there
    (`origin.points`), else the attempt's one point where the attempt measured that workload."""
    origin = attempt.origin or {}
    if "family" not in origin:
        return None
    points = origin.get("points")
    if points:
        return Point(origin["family"], tuple(sorted(points[workload].items()))) if workload in points else None
    return point_of(attempt) if workload in attempt.workloads else None


def points_of(attempt: Attempt) -> set[Point]:
    origin = attempt.origin or {}
    if origin.get("points"):
        return {p for u in origin["points"] if (p := point_on(attempt, u)) is not None}
    point = point_of(attempt)
    return {point} if point is not None else set()


HOPELESS = 0.25  # a family measured only below this fraction of the best speed is explored last


class OfflineAgent:
    def __init__(self, role: RoleSpec, space: SearchSpace, rng: random.Random, group_workloads: dict[str, list[str]],
                 workloads: dict | None = None):
        self.role = role
        self.space = space
        self.rng = rng
        self.group_workloads = group_workloads
        self.workloads = workloads or {}  # uuid -> Workload (its axes): what a dispatch table is written for

    # ------------------------------------------------------------------ helpers
    def _workloads(self, toolbox: Toolbox) -> list[str] | None:
        group = self.role.workload_group
        if group and group in self.group_workloads:
            return self.group_workloads[group]
        return None  # the probe set

    def _tried(self, toolbox: Toolbox, workloads: list[str] | None = None) -> set[Point]:
        """Points already evaluated: anywhere, or (given workloads) on at least one of them."""
        if workloads is None:
            return {p for a in toolbox.workspace.attempts for p in points_of(a)}
        return {p for a in toolbox.workspace.attempts for u in workloads if (p := point_on(a, u)) is not None}

    def _measured(self, toolbox: Toolbox) -> list[Attempt]:
        return [a for a in toolbox.workspace.attempts if a.status == Status.PASSED and a.speedups and point_of(a) is not None]

    def _best_speedups(self, toolbox: Toolbox) -> dict[str, float]:
        """Each workload's best verified speedup so far (uuid -> speedup)."""
        best: dict[str, float] = {}
        for a in self._measured(toolbox):
            for u, s in a.speedups.items():
                best[u] = max(best.get(u, 0.0), s)
        return best

    def _focus(self, toolbox: Toolbox) -> list[str] | None:
        """The workloads this turn works on: the role's group, else the weakest measured group, else None (the
        probe set)."""
        own = self._workloads(toolbox)
        if own is not None or len(self.group_workloads) < 2:
            return own
        best = self._best_speedups(toolbox)
        if not best:
            return None
        # an unmeasured workload counts as the slowest, so a group nobody measured comes first
        weakest = min(sorted(self.group_workloads),
                      key=lambda g: geomean([best.get(u, 1e-9) for u in self.group_workloads[g]]))
        return self.group_workloads[weakest]

    def _best(self, toolbox: Toolbox, workloads: list[str] | None = None) -> Attempt | None:
        """The best verified kernel: on `workloads` (the mean speedup over those it measured), else by geomean."""
        candidates = self._measured(toolbox)
        if workloads is not None:
            wanted = set(workloads)

            def score(a: Attempt) -> float:
                vals = [s for u, s in a.speedups.items() if u in wanted]
                return sum(vals) / len(vals)
            candidates = [a for a in candidates if wanted & set(a.speedups)]
            return max(candidates, key=score) if candidates else None
        timed = [a for a in candidates if a.geomean is not None]
        return max(timed, key=lambda a: a.geomean) if timed else None

    def _starts(self, best: Attempt, workloads: list[str] | None) -> list[Point]:
        """Where tuning starts: the points `best` ran on these workloads (all it measured if None), the weakest
        workload's first."""
        measured = [u for u in (workloads if workloads is not None else best.speedups) if u in best.speedups]
        starts: list[Point] = []
        for u in sorted(measured, key=lambda u: best.speedups[u]):
            point = point_on(best, u)
            if point is not None and point not in starts:
                starts.append(point)
        return starts or [point_of(best)]

    def _evaluate(self, toolbox: Toolbox, point: Point, kind: str = "benchmark", workloads=None) -> str:
        attempt = toolbox.evaluate(self.space.source(point), {**point.origin(), "by": self.role.kind}, kind,
                                   workloads if workloads is not None else self._workloads(toolbox))
        return f"{self.role.name} ({self.role.kind}) tried {point.family} {point.as_dict}: {describe(attempt)}"

    # ------------------------------------------------------------------ behaviours
    def _hopeless(self, toolbox: Toolbox) -> set[str]:
        """Families whose every measured kernel ran at under HOPELESS times the best known speed of the same
        workloads (e.g. a token-by-token seed next to an inherited champion): explored last."""
        best = self._best_speedups(toolbox)
        ratio: dict[str, float] = {}
        for a in self._measured(toolbox):
            family = a.origin["family"]
            ratio[family] = max(ratio.get(family, 0.0), max(s / best[u] for u, s in a.speedups.items()))
        return {f for f, r in ratio.items() if r < HOPELESS}

    def explore(self, toolbox: Toolbox) -> str:
        focus = self._focus(toolbox)
        tried = self._tried(toolbox, focus)
        counts = {name: sum(1 for p in tried if p.family == name) for name in self.space.families}
        hopeless = self._hopeless(toolbox) | self.space.interpreted
        if any(a.team == INHERITED_TEAM for a in self._measured(toolbox)):
            # the naive kernel is where a team without inheritance starts: next to a champion it is known to be
            # far behind (0.07x on MLA, 2026-12-03), an evaluation spent for nothing
            hopeless |= {name for name, family in self.space.families.items() if family.naive}
        for family in sorted(counts, key=lambda n: (n in hopeless, counts[n], n)):
            if self.space.default(family) not in tried:
                return self._evaluate(toolbox, self.space.default(family), workloads=focus)
            untried = [p for p in self.space.points(family) if p not in tried]
            if untried:
                # Far from what was tried: the untried points that differ most from the nearest tried one.
                seen = [q.as_dict for q in tried if q.family == family]
                distance = {p: _distance(p.as_dict, seen) for p in untried}
                far = max(distance.values())
                return self._evaluate(toolbox, self.rng.choice([p for p in untried if distance[p] == far]),
                                      workloads=focus)
        return f"{self.role.name}: every point of every family was tried"

    def tune(self, toolbox: Toolbox) -> str:
        focus = self._focus(toolbox)
        best = self._best(toolbox, focus)
        if best is None:
            return self.explore(toolbox)
        if focus is not None and len(focus) > 1:
            moved = self._tune_table(toolbox, focus)
            if moved is not None:
                return moved
        tried = self._tried(toolbox, focus)
        for start in self._starts(best, focus):
            untried = [p for p in self.space.neighbours(start) if p not in tried]
            if untried:
                return self._evaluate(toolbox, self.rng.choice(untried), workloads=focus)
        return self.explore(toolbox)

    def _tune_table(self, toolbox: Toolbox, focus: list[str]) -> str | None:
        """Every focus workload's own point moved to an untried neighbour, as one kernel whose DISPATCH table
        runs each its moved point; None where no kernel kept on the focus runs a table (a point per workload),
        or that cannot be written (no shapes, no DISPATCH in the family, nothing left to move). The family is
        the one the weakest workload runs; workloads kept on another family's kernel sit out. Workloads of the
        same shape share a table entry, so they move together."""
        measured = self._measured(toolbox)
        current: dict[str, tuple[Point, float]] = {}
        tables = False
        for u in focus:
            own = [a for a in measured if u in a.speedups]
            if own and u in self.workloads:
                kept = keep_inherited(u, own)  # the kernel the final dispatch would run there
                tables |= bool((kept.origin or {}).get("points"))
                point = point_on(kept, u)
                if point is not None:
                    current[u] = (point, kept.speedups[u])
        if not current or not tables:
            return None
        family = current[min(current, key=lambda u: current[u][1])][0].family
        if not self.space.families[family].reads_dispatch:
            return None
        shapes: dict[tuple, list[str]] = {}
        for u in focus:
            if u in current and current[u][0].family == family:
                shapes.setdefault(tuple(sorted(self.workloads[u].axes.items())), []).append(u)
        table, moved = [], {}
        for same in shapes.values():
            tried = self._tried(toolbox, same)
            untried = [p for p in self.space.neighbours(current[same[0]][0]) if p not in tried]
            if untried:
                point = self.rng.choice(untried)
                table.append([dict(self.workloads[same[0]].axes), point.as_dict])
                moved.update({u: point for u in same})
        if not moved:
            return None
        champion = Champion(task="offline", family=self.space.families[family], hardware="", params={},
                            dispatch=table)
        # what the kernel's own rule runs on each workload, recorded as the attempt's points
        points = champion.points_by_workload([self.workloads[u] for u in moved])
        origin = {"family": family, "params": self.space.default(family).as_dict, "points": points,
                  "dispatch_entries": len(table), "by": self.role.kind}
        attempt = toolbox.evaluate(champion.source(), origin, "benchmark", list(moved))
        return (f"{self.role.name} ({self.role.kind}) tried {family} with a table: {len(moved)} workloads, each its "
                f"own point moved one step: {describe(attempt)}")

    def debug(self, toolbox: Toolbox) -> str:
        failed = [a for a in toolbox.workspace.attempts if a.status != Status.PASSED and point_of(a) is not None]
        if not failed:
            return self.tune(toolbox)
        last = failed[-1]
        point = point_of(last)
        default = self.space.default(point.family).as_dict
        tried = self._tried(toolbox)
        params = point.as_dict
        for key in sorted(params):
            if params[key] != default.get(key, params[key]):
                candidate = Point(point.family, tuple(sorted({**params, key: default[key]}.items())))
                if candidate not in tried:
                    bad = [u for u, s in last.statuses.items() if s != Status.PASSED] or None
                    return self._evaluate(toolbox, candidate, "benchmark", bad)
        return self.tune(toolbox)

    def analyse(self, toolbox: Toolbox, progress: Progress) -> str:
        toolbox.workspace.add_note(f"## {self.role.name} after {progress.evaluations} evaluations\n{progress.report()}")
        return f"{self.role.name} wrote notes: {progress.report()}"

    def review(self, toolbox: Toolbox) -> str:
        best = self._best(toolbox)
        all_workloads = toolbox.settings.all_workloads
        if best is not None and set(best.workloads) != set(all_workloads):
            return self._evaluate(toolbox, point_of(best), "benchmark", all_workloads)
        return self.tune(toolbox)

    def turn(self, toolbox: Toolbox, context: TurnContext) -> str:
        progress, turn_index = context.progress or Progress(), context.round
        kind = self.role.kind
        if kind == "explorer":
            return self.explore(toolbox)
        if kind == "tuner":
            return self.tune(toolbox)
        if kind == "debugger":
            return self.debug(toolbox)
        if kind == "analyst":
            return self.analyse(toolbox, progress)
        if kind == "reviewer":
            return self.review(toolbox)
        # generalist
        if progress.failure_streak[1] > 0:
            return self.debug(toolbox)
        return self.explore(toolbox) if turn_index < 2 or turn_index % 4 == 3 else self.tune(toolbox)
