"""The run loop: the current team's roles take turns (each turn ends in at most a few evaluations
through the isolated harness), the supervisor reviews after every round and redesigns an
evolving team when it stalls, until the token, evaluation or time budget is spent. Then the best
verified kernels (one per workload, a dispatch table) are re-measured against the baseline on all
workloads, side by side; a workload where no team measured a kernel keeps the inherited kernel and the
inherited measurement (taken at the final table's grade; nothing was chosen there).

State is checkpointed at the start of every turn (`state.json`) and every finished evaluation is
in the workspace journal, so `resume=<run dir>` continues without losing or repeating finished
evaluations; turns are deterministic given their position (the offline policy's random choices
are seeded by it), and LLM calls of an interrupted turn are replayed from the LLM journal.
Ctrl-C stops cleanly at that checkpoint.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from evoteam.harness.model import Status, WorkloadResult
from evoteam.llm import Usage
from evoteam.task import shape_label
from evoteam.team.agent import TurnContext
from evoteam.team.brief import state_brief
from evoteam.team.budget import BudgetExceeded, Ledger
from evoteam.team.inherit import INHERITED_TEAM
from evoteam.team.journal import TeamOutcome, TeamRecord
from evoteam.team.offline import OfflineAgent, SearchSpace
from evoteam.team.progress import Progress, keep_inherited_why, progress_of
from evoteam.team.shared_measurements import SharedMeasurements
from evoteam.team.spec import TeamSpec
from evoteam.team.supervisor import Supervisor, stalled, verdict
from evoteam.team.toolbox import (
    HarnessSettings,
    Toolbox,
    default_evaluator,
    evaluate_in_pieces,
    pieces_to_run,
    split_in_pieces,
    summarize_result,
)
from evoteam.team.workspace import Workspace


@dataclass
class RunState:
    spec: TeamSpec
    team_index: int = 0
    round: int = 0
    role_index: int = 0
    team_start_evaluations: int = 0
    tried: list[str] = field(default_factory=list)  # spec ids
    tokens_total: dict = field(default_factory=dict)  # Usage json at the start of the turn
    tokens_by_team: dict = field(default_factory=dict)
    tokens_by_role: dict = field(default_factory=dict)
    wall_time_s: float = 0.0
    finished: bool = False

    def to_json(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "spec"}, "spec": self.spec.to_json()}

    @classmethod
    def from_json(cls, obj: dict) -> RunState:
        return cls(**{**obj, "spec": TeamSpec.from_json(obj["spec"])})


RUN_LOG = "run.log"  # in the run directory: every turn's full account

# The share of an evaluation's wall time taken as fixed (the judge's and the runners' start and end) rather than
# growing with its workloads, for the final measurement's estimate: 35-50% of a search evaluation of 2 workloads on the
# 2-core CPU machine, by the phases its result records (2026-12-06).
FIXED_SHARE = 0.4


class TeamRun:
    def __init__(self, *, run_dir: Path, task, workloads: list, settings: HarnessSettings, ledger: Ledger,
                 preset: TeamSpec, space: SearchSpace, supervisor: Supervisor, seed: int,
                 llm_agent_factory: Callable | None = None, cli_agent_factory: Callable | None = None, log: Callable[[str], None] = print,
                 evaluator: Callable | None = None, on_turn: Callable[[TeamRun], None] | None = None,
                 bandwidth_ceiling_tbs: float | None = None, shared: SharedMeasurements | None = None):
        self.run_dir = Path(run_dir)
        self.task = task
        self.workloads = workloads
        self.groups = {w.uuid: task.workload_group(w) for w in workloads}
        self.labels = {w.uuid: shape_label(w) for w in workloads}
        self.bandwidth_ceiling_tbs = bandwidth_ceiling_tbs
        self.group_workloads: dict[str, list[str]] = {}
        for uuid, g in self.groups.items():
            self.group_workloads.setdefault(g, []).append(uuid)
        self.settings = settings
        self.ledger = ledger
        self.space = space
        self.supervisor = supervisor
        self.seed = seed
        self.llm_agent_factory = llm_agent_factory
        self.cli_agent_factory = cli_agent_factory  # roles played by a coding-agent CLI
        self.log = log
        self.evaluator = evaluator  # None: the isolated harness on this machine (executor=docker, tests: others)
        self.shared = shared  # where the inherited kernel's measurement is shared with other runs (None: not)
        self.on_turn = on_turn  # called after every turn (tracking: metrics, team runs)
        self.workspace = Workspace(self.run_dir / "workspace")
        self.state_path = self.run_dir / "state.json"
        if self.state_path.is_file():
            self.state = RunState.from_json(json.loads(self.state_path.read_text()))
            self._restore_ledger()
            self.log(f"resuming: team {self.state.spec.name} [{self.state.spec.spec_id}], "
                     f"{len(self.workspace.attempts)} finished evaluations kept")
        else:
            self.state = RunState(spec=preset, tried=[preset.spec_id])
            self.workspace.record_team_start(TeamRecord(0, "preset", 0, preset))

    # ------------------------------------------------------------------ checkpoints
    def _restore_ledger(self) -> None:
        s = self.state
        self.ledger.total = Usage.from_json(s.tokens_total) if s.tokens_total else Usage()
        self.ledger.by_team = {k: Usage.from_json(v) for k, v in s.tokens_by_team.items()}
        self.ledger.by_role = {k: Usage.from_json(v) for k, v in s.tokens_by_role.items()}
        attempts = [a for a in self.workspace.attempts if a.team != INHERITED_TEAM]  # inherited: never charged
        self.ledger.evaluations = len(attempts)
        self.ledger.evaluations_by_team = {}
        for a in attempts:
            self.ledger.evaluations_by_team[a.team] = self.ledger.evaluations_by_team.get(a.team, 0) + 1
        self.ledger.wall_time_s = s.wall_time_s

    def checkpoint(self) -> None:
        s = self.state
        s.tokens_total = self.ledger.total.to_json()
        s.tokens_by_team = {k: v.to_json() for k, v in self.ledger.by_team.items()}
        s.tokens_by_role = {k: v.to_json() for k, v in self.ledger.by_role.items()}
        s.wall_time_s = self.ledger.elapsed_s()
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(s.to_json(), indent=1))
        tmp.replace(self.state_path)  # atomic: a kill leaves the old or the new state, never half

    # ------------------------------------------------------------------ the loop
    def progress(self, upto: int | None = None) -> Progress:
        attempts = self.workspace.attempts
        return progress_of(attempts if upto is None else attempts[:upto], self.groups)

    def _agent(self, role, turn_position: str):
        if role.agent != "llm":
            if self.cli_agent_factory is None:
                raise ValueError(f"role {role.name} is played by a {role.agent} CLI, and this run has none")
            return self.cli_agent_factory(role)
        if role.model == "offline" or self.llm_agent_factory is None:
            rng = random.Random(f"{self.seed}/{turn_position}")
            return OfflineAgent(role, self.space, rng, self.group_workloads,
                                {w.uuid: w for w in self.workloads})
        return self.llm_agent_factory(role)

    def _toolbox(self, team_id: str, role) -> Toolbox:
        extra = {"evaluator": self.evaluator} if self.evaluator is not None else {}
        # what is inherited is measured outside every team's budget, once for the runs of the same settings
        ledger = Ledger(0, 10**9, float("inf")) if team_id == INHERITED_TEAM else self.ledger
        if team_id == INHERITED_TEAM and self.shared is not None:
            extra["evaluator"] = self.shared.reusing(extra.get("evaluator", default_evaluator), str(self.run_dir),
                                                     self.log)
        return Toolbox(self.workspace, self.settings, ledger, team_id, role, labels=self.labels,
                       ceiling_tbs=self.bandwidth_ceiling_tbs, **extra)

    def inherit_champion(self, path: str) -> None:
        """A new run's first attempt: the champion on every workload of the run, as the team `inherited`."""
        from evoteam.families import load_champion
        from evoteam.team.inherit import champion_origin
        from evoteam.team.spec import RoleSpec

        champion = load_champion(Path(path))
        toolbox = self._toolbox(INHERITED_TEAM, RoleSpec("inherited", "generalist", model="offline"))
        started = time.monotonic()
        # measured as the final table measures: where no team's kernel competes with it, the final table takes it
        attempt = toolbox.evaluate(champion.source(), champion_origin(champion, path, self.workloads), "benchmark",
                                   [w.uuid for w in self.workloads], grade="final")
        self.ledger.uncharged_s += time.monotonic() - started  # nor is its time: every preset inherits the same
        self.log(progress_line(attempt, self.ledger, attempt.geomean, final_s=self.final_estimate_s()))

    def _context(self) -> TurnContext:
        progress = self.progress()
        brief = state_brief(self.task, self.workspace, self.ledger, progress,
                            {g: len(u) for g, u in self.group_workloads.items()}, self.labels,
                            self.bandwidth_ceiling_tbs)
        return TurnContext(brief=brief, progress=progress, round=self.state.round)

    def _turn(self, role, role_index: int | None = None, context: TurnContext | None = None) -> str:
        s = self.state
        position = f"{s.team_index}/{s.round}/{s.role_index if role_index is None else role_index}"
        agent = self._agent(role, position)
        return agent.turn(self._toolbox(s.spec.spec_id, role), context or self._context())

    def _parallel_round(self, roles) -> None:
        """A parallel team's round: every role takes its turn at once from the same state (the brief and
        progress at the round's start), so their evaluations are in flight together; an executor with
        several accelerators (executor=ray, or local with several GPUs) runs them side by side."""
        context = self._context()
        before = len(self.workspace.attempts)
        with ThreadPoolExecutor(max_workers=len(roles), thread_name_prefix="evoteam-role") as pool:
            futures = [pool.submit(self._turn, role, i, context) for i, role in enumerate(roles)]
            outcomes = []
            for future in futures:
                try:
                    outcomes.append(future.result())
                except BudgetExceeded as exc:
                    outcomes.append(exc)
        for role, outcome in zip(roles, outcomes):
            self._record_turn(role, str(outcome), len(self.workspace.attempts), quiet=True)
        new = self.workspace.attempts[before:]
        first = self.ledger.evaluations - len(new) + 1  # the round's evaluations, numbered in the order they ended
        for i, attempt in enumerate(new):
            self.log(progress_line(attempt, self.ledger, self.progress().best_geomean, number=first + i,
                                   final_s=self.final_estimate_s()))
        spent = next((o for o in outcomes if isinstance(o, BudgetExceeded)), None)
        if spent is not None:
            raise spent

    def _finish_in_flight(self) -> None:
        """A resumed run first runs the evaluations that were in flight when it stopped (they were
        dispatched, never journaled as finished), together, each once, under its reserved id."""
        pending = [d for d in self.workspace.in_flight() if self.workspace.claim(d["key"]) is None]
        if not pending:
            return
        self.log(f"resuming: {len(pending)} evaluation(s) were in flight; running them again")
        role = self.state.spec.turn_order[0]
        for d in pending:
            if d["team"] != INHERITED_TEAM:
                self.ledger.in_flight += 1  # reserved when they were dispatched: counted before they run
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(pending), thread_name_prefix="evoteam-resume") as pool:
            for attempt in pool.map(lambda d: self._toolbox(d["team"], role).run_dispatched(d), pending):
                self.log(progress_line(attempt, self.ledger, self.progress().best_geomean,
                                       final_s=self.final_estimate_s()))
        if all(d["team"] == INHERITED_TEAM for d in pending):  # the inherited measurement, stopped part way
            self.ledger.uncharged_s += time.monotonic() - started  # is not charged when it finishes either

    def run(self) -> str:
        """Run until a budget is spent. Returns why it stopped."""
        s = self.state
        if s.finished:
            return "finished earlier"
        try:
            self._finish_in_flight()
            while True:
                roles = s.spec.turn_order
                if s.spec.topology == "parallel" and len(roles) > 1 and s.role_index == 0:
                    self.checkpoint()
                    self.ledger.allow_evaluation()
                    self._parallel_round(roles)
                    s.role_index = len(roles)
                    if self.on_turn is not None:
                        self.on_turn(self)
                while s.role_index < len(roles):
                    self.checkpoint()
                    # A turn is there to produce an evaluation: with none left, no tokens are spent on one.
                    self.ledger.allow_evaluation()
                    before = len(self.workspace.attempts)
                    account = self._turn(roles[s.role_index])
                    self._record_turn(roles[s.role_index], account, before)
                    s.role_index += 1
                    if self.on_turn is not None:
                        self.on_turn(self)
                s.role_index = 0
                s.round += 1
                self._review()
        except BudgetExceeded as exc:
            s.finished = True
            self._close_team()
            self.checkpoint()
            return str(exc)
        except KeyboardInterrupt:
            self.checkpoint()
            raise

    def _record_turn(self, role, account: str, before: int, quiet: bool = False) -> None:
        """The turn's full account goes to the run's log file; the console gets one short line per
        evaluation it made (or one line saying what it did; `quiet`: nothing, the caller logs)."""
        s = self.state
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(self.run_dir / RUN_LOG, "a") as fh:
            fh.write(f"{stamp} team {s.team_index} round {s.round} {role.name} ({role.kind}) "
                     f"[{self.ledger.evaluations} evaluations, {self.ledger.total.total_tokens} tokens]: {account}\n")
        if quiet:
            return
        new = self.workspace.attempts[before:]
        best = self.progress().best_geomean
        for i, attempt in enumerate(new):  # a turn of several evaluations: each its own number, not the turn's last
            self.log(progress_line(attempt, self.ledger, best, number=self.ledger.evaluations - len(new) + i + 1,
                                   final_s=self.final_estimate_s()))
        if not new:
            first = account.strip().splitlines()[0] if account.strip() else "no action"
            self.log(f"  {role.name}: {first[:100]}{'...' if len(first) > 100 else ''}")

    def _review(self) -> None:
        s = self.state
        progress = self.progress()
        team_evaluations = progress.evaluations - s.team_start_evaluations
        why = stalled(s.spec, progress, team_evaluations)
        if why is None or not s.spec.evolvable:
            return
        if self.ledger.evaluations >= self.ledger.max_evaluations:
            return  # no evaluation is left for a new design to use: the run ends with this team
        if s.team_index >= self.supervisor.max_redesigns:
            return  # team.max_redesigns reached: the current team goes on
        new_spec, designer = self.supervisor.redesign(s.spec, progress, why, set(s.tried))
        if new_spec is None:
            return  # every design was tried: the current team goes on
        self._close_team()
        s.team_index += 1
        s.round = 0
        s.spec = new_spec
        s.tried.append(new_spec.spec_id)
        s.team_start_evaluations = progress.evaluations
        self.workspace.record_team_start(TeamRecord(s.team_index, designer, progress.evaluations, new_spec))
        self.log(f"supervisor ({designer}): {new_spec.reason}\n  -> {new_spec.summary()}\n"
                 f"  expects: {new_spec.expected_effect}")

    def _close_team(self) -> None:
        s = self.state
        start = self.progress(s.team_start_evaluations)
        now = self.progress()
        self.workspace.record_team_end(TeamOutcome(
            index=s.team_index, spec_id=s.spec.spec_id, evaluations=now.evaluations - start.evaluations,
            best_before=start.best_geomean, best_after=now.best_geomean, correct_rate=now.correct_rate,
            failures=dict(now.failures), tokens=self.ledger.by_team.get(s.spec.spec_id, Usage()),
            verdict=verdict(s.spec, start, now)))

    # ------------------------------------------------------------------ the result
    def dispatch(self) -> dict[str, str]:
        """Workload uuid -> attempt id of the best verified kernel for it (its own measurement, else
        its group's best, else the best overall, else the default of the first family); an inherited
        kernel gives way only as `keep_inherited` says."""
        attempts = [a for a in self.workspace.attempts if a.status == Status.PASSED and a.speedups]
        table: dict[str, str] = {}
        self.dispatch_reasons: dict[str, str] = {}  # uuid -> why its kernel was chosen where several measured it
        group_best: dict[str, tuple[float, str]] = {}
        for a in attempts:
            for uuid, s in a.speedups.items():
                g = self.groups.get(uuid, "all")
                if s > group_best.get(g, (0.0, ""))[0]:
                    group_best[g] = (s, a.attempt_id)
        overall = max((a for a in attempts if a.geomean), key=lambda a: a.geomean, default=None)
        for w in self.workloads:
            own = [a for a in attempts if w.uuid in a.speedups]
            if own:
                kept, why = keep_inherited_why(w.uuid, own)
                table[w.uuid] = kept.attempt_id
                self.dispatch_reasons[w.uuid] = why
            elif self.groups[w.uuid] in group_best:
                table[w.uuid] = group_best[self.groups[w.uuid]][1]
            elif overall is not None:
                table[w.uuid] = overall.attempt_id
            else:
                table[w.uuid] = ""
        return table

    def uncontested(self, table: dict[str, str]) -> dict[str, WorkloadResult]:
        """The final table's figures that need no new measurement: workloads whose kernel is an inherited one
        measured at final grade, where no team's kernel was measured at all (nothing was chosen there, so its
        first figure carries no winner's bias), with that measurement's result (uuid -> result)."""
        by_id = {a.attempt_id: a for a in self.workspace.attempts}
        measured_by_team = {u for a in self.workspace.attempts if a.team != INHERITED_TEAM for u in a.speedups}
        out: dict[str, WorkloadResult] = {}
        results: dict[str, dict] = {}
        for uuid, attempt_id in table.items():
            a = by_id.get(attempt_id)
            if a is None or a.team != INHERITED_TEAM or a.grade != "final" or uuid in measured_by_team:
                continue
            if attempt_id not in results:
                full = self.workspace.result_json(attempt_id) or {}
                results[attempt_id] = {r["uuid"]: r for r in full.get("results", [])}
            r = results[attempt_id].get(uuid)
            if r is not None and r.get("status") == Status.PASSED:
                out[uuid] = WorkloadResult.from_json(r)
        return out

    # ------------------------------------------------------------------ how long the final table takes
    def evaluation_estimate_s(self, workloads: int) -> float | None:
        """An evaluation of `workloads` workloads, estimated from the search's pace: its time per evaluation so far
        (the agents' turns included, and the evaluations of a parallel round overlapping as they did), of which
        FIXED_SHARE is taken as fixed and the rest as growing with the workloads (None: no evaluation yet)."""
        searched = [len(a.workloads) for a in self.workspace.attempts if a.team != INHERITED_TEAM and a.workloads]
        if not self.ledger.evaluations or not searched:
            return None
        pace = self.ledger.elapsed_s() / self.ledger.evaluations
        return pace * (FIXED_SHARE + (1 - FIXED_SHARE) * workloads / (sum(searched) / len(searched)))

    def final_estimate_s(self) -> float | None:
        """The final measurement's time as the dispatch table stands now: an evaluation per kernel and piece."""
        table = self.dispatch()
        reused = self.uncontested(table)
        by_kernel: dict[str, int] = {}
        for uuid, attempt_id in table.items():
            if uuid not in reused:
                by_kernel[attempt_id] = by_kernel.get(attempt_id, 0) + 1
        estimates = [self.evaluation_estimate_s(len(piece)) for n in by_kernel.values()
                     for piece in split_in_pieces(["w"] * n)]
        return None if any(e is None for e in estimates) else sum(estimates)

    def final_measurement(self, timeout_s: float) -> list[WorkloadResult]:
        table = self.dispatch()
        final_dir = self.run_dir / "final"
        # measured to the end before: measured afresh, every workload (remeasure)
        remeasure = (final_dir / "results.json").is_file()
        if remeasure:
            for journal in final_dir.glob("pieces-*.jsonl"):
                journal.unlink()
            (final_dir / "results.json").unlink()
        (final_dir / "kernels").mkdir(parents=True, exist_ok=True)
        results: dict[str, WorkloadResult] = {} if remeasure else self.uncontested(table)
        (final_dir / "reused.json").write_text(json.dumps({u: table[u] for u in results}, indent=1))
        if results:
            self.log(f"final: {len(results)} workload(s) keep the inherited measurement (no team measured a kernel "
                     f"there), {len(table) - len(results)} measured again")
        default_source = self.space.source(self.space.default(next(iter(self.space.families))))
        paths: dict[str, Path] = {}  # every final kernel's file, whether its workloads are measured again or not
        for attempt_id in sorted(set(table.values())):
            kernel = self.workspace.kernel_path(attempt_id) if attempt_id else None
            path = final_dir / "kernels" / f"{attempt_id or 'default'}{kernel.suffix if kernel else '.py'}"
            path.write_text(kernel.read_text() if kernel else default_source)
            paths[attempt_id] = path
        by_kernel: dict[str, list[str]] = {}
        for uuid, attempt_id in table.items():
            if uuid not in results:
                by_kernel.setdefault(attempt_id, []).append(uuid)
        journals = {a: final_dir / f"pieces-{a or 'default'}.jsonl" for a in by_kernel}
        # the evaluations to run (a final table interrupted part way resumes where it stopped), each estimated
        plan = [(a, len(piece)) for a, uuids in by_kernel.items() for piece in pieces_to_run(uuids, journals[a])]
        estimates = [self.evaluation_estimate_s(n) or 0.0 for _, n in plan]
        self.log(f"final: {len(plan)} evaluation(s): {len(by_kernel)} kernel(s) on {sum(n for _, n in plan)} "
                 f"workload(s){', ~' + _minutes(sum(estimates)) if any(estimates) else ''}")
        started, done = time.monotonic(), [0]

        def progress(attempt_id: str, piece) -> None:  # one line per evaluation, with what is left of the final
            done[0] += 1
            spent, expected = time.monotonic() - started, sum(estimates[:done[0]])
            left = sum(estimates[done[0]:]) * (spent / expected if expected else 1.0)  # at the pace so far
            summary = summarize_result(piece)
            verdict = (f"PASSED {summary['geomean']:.3f}x" if summary["status"] == Status.PASSED and summary["geomean"]
                       else f"{summary['status']}")
            self.log(f"  final {done[0]}/{len(plan)} [{_minutes(self.ledger.elapsed_s())}, ~{_minutes(left)} left]  "
                     f"{attempt_id or 'default'}  {len(piece.results)} wl  {verdict}")

        for attempt_id, uuids in by_kernel.items():
            request = self.settings.final_request(str(paths[attempt_id]), uuids)
            evaluate = self.evaluator or default_evaluator
            # in pieces, journaled: a final table interrupted part way resumes where it stopped
            for r in evaluate_in_pieces(evaluate, request, timeout_s, journals[attempt_id],
                                        on_piece=lambda piece, a=attempt_id: progress(a, piece)).results:
                results[r.uuid] = r
        (final_dir / "dispatch.json").write_text(json.dumps(table, indent=1))
        (final_dir / "dispatch_reasons.json").write_text(json.dumps(self.dispatch_reasons, indent=1))
        ordered = [results[w.uuid] for w in self.workloads]
        (final_dir / "results.json").write_text(json.dumps([r.to_json() for r in ordered], indent=1))
        return ordered

    def history(self) -> str:
        lines = []
        for team in self.workspace.teams():
            spec, end = team.spec, team.outcome
            lines.append(f"team {team.index} ({team.designed_by}, from evaluation {team.at_evaluation}): "
                         f"{spec.summary()}")
            if spec.reason:
                lines.append(f"    why: {spec.reason}")
            if spec.expected_effect:
                lines.append(f"    expected: {spec.expected_effect}")
            if end:
                before = "-" if end.best_before is None else f"{end.best_before:.3f}x"
                after = "-" if end.best_after is None else f"{end.best_after:.3f}x"
                lines.append(f"    outcome: {end.evaluations} evaluations, best {before} -> {after}, "
                             f"{end.tokens.total_tokens} tokens; {end.verdict}")
        return "\n".join(lines)


def progress_line(attempt, ledger: Ledger, best: float | None, number: int | None = None,
                  final_s: float | None = None) -> str:
    """One evaluation in under 120 characters: its number, the time so far and left (the final measurement's
    `final_s` included), attempt, role, kernel, workloads, verdict."""
    origin = attempt.origin or {}
    kernel = str(origin.get("family") or origin.get("name") or "llm-written")[:14]
    if attempt.status != Status.PASSED:
        verdict = f"{attempt.status} {attempt.failure.split(':', 1)[-1].strip()[:30]}"
    elif attempt.geomean is None:
        verdict = "PASSED (checked)"
    else:
        verdict = f"PASSED {attempt.geomean:.3f}x" + (f" (best {best:.3f}x)" if best else "")
    tokens = ledger.total.total_tokens
    number = ledger.evaluations if number is None else number
    return (f"  eval {number}/{ledger.max_evaluations} {clock(ledger, final_s)}  {attempt.attempt_id}  "
            f"{attempt.role[:10]:<10} {kernel:<14} {len(attempt.workloads)} wl  {verdict}"
            + (f"  {tokens / 1000:.1f}k tok" if tokens else ""))


def clock(ledger: Ledger, final_s: float | None = None) -> str:
    """The run's elapsed time and an estimate of what is left of it: the search's evaluations left at the pace so far,
    within the wall-time budget, and then the final measurement (`final_s`: TeamRun.final_estimate_s), which took
    13-29 s after a "~0:00 left" on a 2-core CPU before it was counted here."""
    elapsed = ledger.elapsed_s()
    done, left = ledger.evaluations, max(0, ledger.max_evaluations - ledger.evaluations)
    if not done:
        return f"[{_minutes(elapsed)}]"  # no pace yet
    estimate = min(elapsed / done * left, max(0.0, ledger.max_wall_time_s - elapsed)) + (final_s or 0.0)
    return f"[{_minutes(elapsed)}, ~{_minutes(estimate)} left]"


def _minutes(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def stop_cleanly(run_dir: Path) -> None:
    from evoteam.resources import python_command  # the command runs as printed, outside the venv too

    print(f"\nevoteam: interrupted; state saved. Continue with: {python_command('-m', 'evoteam', f'resume={run_dir}')}",
          file=sys.stderr)
