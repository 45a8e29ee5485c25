"""The tools agents act through, bound to one role of one team: write a kernel file in the role's
own drafts, run the correctness check, run the benchmark on chosen workloads, read the shared
workspace, submit. Every check and benchmark goes through the isolated harness
(`evoteam.harness`: a trusted judge, the candidate sandboxed, fresh secret inputs), counts against the
ledger and lands in the workspace journal; the same evaluation (same source, workloads and kind)
is answered from the journal instead of being run again, also after a resume.

`TOOL_SCHEMAS` describes the tools for LLM function calling (OpenAI format); `call(name, args)`
dispatches such a call and always returns a string for the model (errors included).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from evoteam.harness import scan
from evoteam.harness.executor_registry import Evaluator, local_evaluator
from evoteam.harness.model import CPU_ROUNDS, EvalRequest, EvalResult, Status, geomean
from evoteam.schema import append_journal, read_journal
from evoteam.target import Target
from evoteam.team.budget import Ledger
from evoteam.team.spec import RoleSpec
from evoteam.team.workspace import GRADES, KERNEL_SUFFIXES, Attempt, Workspace, evaluation_key


@dataclass
class HarnessSettings:
    """How the team asks for evaluations: one request template (the harness's EvalRequest: the one
    home of those fields and their defaults) and the workloads of a quick benchmark and of the final table."""

    template: EvalRequest
    probe_workloads: list[str] = field(default_factory=list)  # default workloads of a quick benchmark
    all_workloads: list[str] = field(default_factory=list)

    @property
    def timeout_s(self) -> float:
        return self.template.workload_timeout_s

    @property
    def timing_mode(self) -> str:
        return self.template.timing_mode

    def request(self, solution: str, workloads: list[str], **overrides) -> EvalRequest:
        """An evaluation request of these settings for one candidate file."""
        return replace(self.template, solution=solution, workloads=list(workloads), **overrides)

    def final_request(self, solution: str, workloads: list[str]) -> EvalRequest:
        """A request of final-table grade: the baseline timed side by side (never from the cache), at least 3 timed
        rounds, the second timing mode's figure too. The final table and the inherited measurement use it."""
        return self.request(solution, workloads, reps=max(self.template.reps, 3), use_baseline_cache=False,
                            second_figure=True)

    @classmethod
    def for_run(cls, task: str, hardware: str, scale: str, **fields) -> HarnessSettings:
        """Settings of a described target (no executor chosen): the request's fields by name, the workloads as
        keywords."""
        probe, every = fields.pop("probe_workloads", []), fields.pop("all_workloads", [])
        target = Target.resolve(task, hardware, scale=scale, executor=None, **(
            {"timing_mode": fields["timing_mode"]} if "timing_mode" in fields else {}))
        return cls(target.request("", **{"workloads": [], **fields}), probe, every)

    @classmethod
    def from_config(cls, cfg, target: Target) -> HarnessSettings:
        """From the run's configuration (task, executor) and its resolved target (its timing mode, its scale)."""
        workloads = list(target.workloads)
        groups = {w.uuid: target.task.workload_group(w) for w in workloads}
        gpu = target.hw.is_gpu
        warmup, reps = GPU_ROUNDS if gpu else CPU_ROUNDS
        reps = cfg.task.timed_rounds or reps
        template = target.request(
            "", baseline=cfg.task.baseline, trials=cfg.task.check_trials, fib_rule=cfg.task.fib_rule, warmup=warmup,
            reps=reps,
            workload_timeout_s=cfg.executor.timeout_s, sandbox=cfg.executor.sandbox.value,
            memory_limit_gib=cfg.executor.memory_gib, process_limit=cfg.executor.pids_limit, second_figure=False,
            # A CPU's timings move with its load: time the baseline side by side there.
            use_baseline_cache=gpu)
        # On CPU the interpreter makes each workload costly: probe the smallest only.
        return cls(template, probe_workloads(workloads, groups, 2 if gpu else 1), [w.uuid for w in workloads])


# (warm-up, timed) rounds of a search evaluation on a GPU: fewer than a final table's (EvalRequest's defaults)
GPU_ROUNDS = (1, 20)


def probe_workloads(workloads: list, groups: dict[str, str], per_group: int = 2) -> list[str]:
    """A representative subset for quick benchmarks: the smallest and largest of every group."""
    def size(w) -> int:
        total = 1
        for v in w.axes.values():
            total *= max(1, v)
        return total

    out: list[str] = []
    for group in sorted(set(groups.values())):
        members = sorted((w for w in workloads if groups[w.uuid] == group), key=size)
        picks = [members[0], members[-1]] if per_group >= 2 and len(members) > 1 else members[:1]
        out += [w.uuid for w in picks if w.uuid not in out]
    return out


# An evaluation of more workloads than this runs in pieces of equal size, each journaled when it ends, so that an
# interrupted run resumes inside a long evaluation instead of repeating it (the KDA champion on 24 workloads of an
# H200: about 8 minutes at the rate of an 11-workload bench, 215 s; most of a 10-minute lent-GPU call, which has more
# to do). Each piece is a judge of its own and pays its start, runners and profile again (about 20 s on an H200,
# 2026-12-03), so a team's 16-workload evaluation is one piece.
PIECE_WORKLOADS = 16


def split_in_pieces(workloads: list[str]) -> list[list[str]]:
    """Workloads in pieces of at most PIECE_WORKLOADS, of equal size: 47 as 16, 16 and 15; 24 as 12 and 12."""
    n_pieces = max(1, -(-len(workloads) // PIECE_WORKLOADS))
    size = max(1, -(-len(workloads) // n_pieces))
    return [workloads[start:start + size] for start in range(0, len(workloads), size)]


def _journaled_pieces(wanted: list[str], journal: Path) -> list[EvalResult]:
    pieces = [EvalResult.from_json(e) for e in read_journal(journal)]
    return [p for p in pieces if p.results and {r.uuid for r in p.results} <= set(wanted)]


def pieces_to_run(wanted: list[str], journal: Path) -> list[list[str]]:
    """The pieces evaluate_in_pieces will evaluate: those of the workloads no journaled piece holds."""
    done = {r.uuid for p in _journaled_pieces(wanted, journal) for r in p.results}
    return split_in_pieces([u for u in wanted if u not in done])


def evaluate_in_pieces(evaluator: Evaluator, request: EvalRequest, timeout_s: float, journal: Path,
                       on_piece: Callable[[EvalResult], None] | None = None) -> EvalResult:
    """`request` evaluated in pieces of at most PIECE_WORKLOADS workloads; each piece's result is appended to
    `journal`, and the workloads a journaled piece already holds are not evaluated again. `on_piece`: called with
    each piece's result as it ends (progress)."""
    wanted = list(request.workloads)
    pieces = _journaled_pieces(wanted, journal)
    for workloads in pieces_to_run(wanted, journal):
        piece = evaluator(replace(request, workloads=workloads), timeout_s)
        if len(wanted) > PIECE_WORKLOADS:
            append_journal(journal, piece.to_json())
        pieces.append(piece)
        if on_piece is not None:
            on_piece(piece)
    return EvalResult.merged(pieces, wanted)


# where a caller names no executor (tests; a run always passes its target's)
default_evaluator: Evaluator = local_evaluator()


def summarize_result(result: EvalResult) -> dict:
    """An evaluation as the Attempt fields it gives: status, failure, speedups, statuses, noise, noises, geomean,
    intervals."""
    statuses = {r.uuid: r.status for r in result.results}
    failed = [r for r in result.results if r.status != Status.PASSED]
    speedups = {r.uuid: r.speedup for r in result.results if r.speedup is not None}
    noises = {r.uuid: r.noise for r in result.results if r.noise is not None}
    intervals = {r.uuid: [r.speedup_low, r.speedup_high] for r in result.results
                 if r.speedup is not None and r.speedup_low is not None and r.speedup_high is not None}
    return {"status": failed[0].status if failed else Status.PASSED,
            "failure": f"{failed[0].uuid[:8]}: {failed[0].detail}" if failed else "",
            "speedups": speedups, "statuses": statuses, "noise": max(noises.values()) if noises else None,
            "noises": noises, "geomean": geomean(speedups.values()) if not failed else None,
            "intervals": intervals}


def _language_error(name: str) -> str:
    if Path(name).suffix in KERNEL_SUFFIXES:
        return ""
    return f"error: {name}: the suffix names the language; give {', '.join(KERNEL_SUFFIXES)} (Python/Triton, CUDA C++, C++)"


class Toolbox:
    def __init__(self, workspace: Workspace, settings: HarnessSettings, ledger: Ledger, team_id: str,
                 role: RoleSpec, evaluator: Evaluator = default_evaluator, labels: dict[str, str] | None = None,
                 ceiling_tbs: float | None = None):
        self.workspace = workspace
        self.labels = labels or {}  # uuid -> shape, for the per-workload tables of tool results
        self.ceiling_tbs = ceiling_tbs
        self.settings = settings
        self.ledger = ledger
        self.team_id = team_id
        self.role = role
        self.evaluator = evaluator
        self.drafts: dict[str, str] = {}
        self.submitted: list[str] = []  # attempt ids
        self.last_attempt: Attempt | None = None

    # ------------------------------------------------------------------ structured API (offline agents)
    def evaluate(self, source: str, origin: dict, kind: str = "benchmark",
                 workloads: list[str] | None = None, suffix: str = ".py", grade: str = "search") -> Attempt:
        """Check (kind="check") or check and time (kind="benchmark") a candidate's source, a file of the
        language its suffix names (KERNEL_SUFFIXES); grade "final" measures it as the final table does
        (HarnessSettings.final_request), "search" as a team's quick evaluation."""
        if kind not in ("check", "benchmark"):
            raise ValueError(f"kind must be check or benchmark, got {kind!r}")
        if grade not in GRADES:
            raise ValueError(f"grade must be one of {', '.join(GRADES)}, got {grade!r}")
        workloads = list(workloads or self.settings.probe_workloads or self.settings.all_workloads)
        key = evaluation_key(source, workloads, kind, suffix)
        known = self.workspace.claim(key)  # answered from the journal, or by the thread already running it
        if known is not None:
            self.last_attempt = known
            return known
        try:
            self.ledger.reserve_evaluation()
        except BaseException:
            self.workspace.release(key)
            raise
        dispatch = {"key": key, "team": self.team_id, "role": self.role.name, "kind": kind, "origin": origin,
                    "workloads": workloads, "grade": grade}
        attempt_id, _ = self.workspace.new_attempt_dir(source, suffix, dispatch)
        return self.run_dispatched({"attempt_id": attempt_id, "suffix": suffix, **dispatch})

    def run_dispatched(self, dispatch: dict) -> Attempt:
        """Evaluate a dispatched attempt (its kernel file already in its folder; its budget reserved) and
        journal it once; also what a resumed run does with the evaluations that were in flight."""
        s = self.settings
        kernel = self.workspace.root / "attempts" / dispatch["attempt_id"] / f"kernel{dispatch['suffix']}"
        grade = dispatch.get("grade", "search")  # dispatched before grades: a search evaluation
        if grade == "final":
            request = s.final_request(str(kernel), dispatch["workloads"])
        else:
            request = s.request(str(kernel), dispatch["workloads"], check_only=dispatch["kind"] == "check")
        try:
            result = evaluate_in_pieces(self.evaluator, request, s.timeout_s, kernel.parent / "pieces.jsonl")
        except BaseException:
            self.ledger.release_evaluation()
            self.workspace.release(dispatch["key"])
            raise
        attempt = Attempt(attempt_id=dispatch["attempt_id"], key=dispatch["key"], team=dispatch["team"],
                          role=dispatch["role"], kind=dispatch["kind"], origin=dispatch["origin"],
                          workloads=dispatch["workloads"], grade=grade, **summarize_result(result))
        self.ledger.record_evaluation(dispatch["team"], result.placement)
        self.workspace.record(attempt, result.to_json())
        self.last_attempt = attempt
        return attempt

    # ------------------------------------------------------------------ the tools
    def write_kernel(self, name: str, source: str) -> str:
        if not name or "/" in name or name.startswith("."):
            return "error: name must be a plain file name, e.g. v1.py"
        if error := _language_error(name):
            return error
        self.drafts[name] = source
        if not name.endswith(".py"):  # the sandbox is the guarantee; the static scan reads Python only
            return f"written {name} ({len(source.splitlines())} lines); compiled with the target's compiler when run"
        violations = scan.scan_source(source, name)
        if violations:
            return f"written {name}; the static scan will reject it: " + "; ".join(str(v) for v in violations[:3])
        return f"written {name} ({len(source.splitlines())} lines); static scan ok"

    def _source(self, name: str) -> str | None:
        return self.drafts.get(name)

    def run_check(self, name: str, workloads: list[str] | None = None) -> str:
        return self._run(name, "check", workloads)

    def run_benchmark(self, name: str, workloads: list[str] | None = None) -> str:
        return self._run(name, "benchmark", workloads)

    def _run(self, name: str, kind: str, workloads: list[str] | None) -> str:
        source = self._source(name)
        if source is None:
            return f"error: no kernel named {name}; write it first with write_kernel"
        if error := _language_error(name):
            return error
        chosen = self._resolve_workloads(workloads)
        if isinstance(chosen, str):
            return chosen
        attempt = self.evaluate(source, {"llm_file": name}, kind, chosen, Path(name).suffix)
        return self.report(attempt)

    def report(self, attempt: Attempt) -> str:
        """An evaluation as a member reads it: verdict, per-workload table, the checker's own words."""
        from evoteam.team.brief import attempt_report

        return attempt_report(attempt, self.workspace.result_json(attempt.attempt_id), self.labels, self.ceiling_tbs)

    def _resolve_workloads(self, prefixes: list[str] | None) -> list[str] | str:
        if not prefixes:
            return list(self.settings.probe_workloads or self.settings.all_workloads)
        out = []
        for p in prefixes:
            matches = [u for u in self.settings.all_workloads if u.startswith(p)]
            if len(matches) != 1:
                return f"error: workload {p!r} matches {len(matches)} workloads; use a unique uuid prefix"
            out.append(matches[0])
        return out

    def read_shared(self, what: str) -> str:
        if what not in self.role.reads:
            return f"error: role {self.role.name} may read {', '.join(self.role.reads)}, not {what}"
        return self.workspace.view(what)

    def submit(self, name: str, note: str = "") -> str:
        source = self._source(name)
        if source is None:
            return f"error: no kernel named {name}"
        if error := _language_error(name):
            return error
        attempt = self.evaluate(source, {"llm_file": name, "submitted": True}, "benchmark",
                                suffix=Path(name).suffix)
        self.submitted.append(attempt.attempt_id)
        self.workspace.record_strategy({"team": self.team_id, "role": self.role.name, "submitted": attempt.attempt_id,
                                        "note": note, "status": attempt.status, "geomean": attempt.geomean})
        return "submitted: " + self.report(attempt)

    def call(self, tool: str, arguments: str | dict) -> str:
        """Dispatch one function call of an LLM; never raises for the model's mistakes."""
        if tool not in self.role.tools:
            return f"error: role {self.role.name} has no tool {tool}; it has {', '.join(self.role.tools)}"
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not valid JSON ({exc.msg}); send a JSON object"
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object"
        handler = getattr(self, tool)
        try:
            return handler(**args)
        except TypeError as exc:
            return f"error: bad arguments for {tool}: {exc}"


def describe(attempt: Attempt) -> str:
    head = f"{attempt.kind} {attempt.attempt_id}: {attempt.status}"
    if attempt.status != Status.PASSED:
        return f"{head}; {attempt.failure[:500]}"
    if attempt.kind == "check":
        return f"{head} on {len(attempt.workloads)} workloads"
    per = ", ".join(f"{u[:8]} {s:.3f}x" for u, s in attempt.speedups.items())
    noise = "" if attempt.noise is None else f"; noise {100 * attempt.noise:.1f}%"
    return f"{head}; geomean {attempt.geomean:.3f}x{noise}; {per}"


TOOL_SCHEMAS = [
    {"type": "function", "function": {
        "name": "write_kernel", "description": "Write (or overwrite) a kernel file in your own drafts. A .py file "
        "(Python/Triton) defines run(**inputs, **outputs); a .cu (CUDA C++) or .cpp file is built with torch's "
        "extension loader and exports run(inputs..., outputs...) positionally, in the definition's order, through "
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m). Either writes every element of the outputs. It runs sandboxed: "
        "no network, no baseline libraries, only its own scratch folder writable.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string", "description": "file name; its suffix is the language: v1.py, v2.cu, v3.cpp"},
            "source": {"type": "string", "description": "the whole source file"}},
            "required": ["name", "source"]}}},
    {"type": "function", "function": {
        "name": "run_check", "description": "Check a draft's correctness against the reference (no timing).",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"},
            "workloads": {"type": "array", "items": {"type": "string"},
                          "description": "uuid prefixes; default: the probe set"}},
            "required": ["name"]}}},
    {"type": "function", "function": {
        "name": "run_benchmark", "description": "Check and time a draft against the baseline; returns speedups.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"},
            "workloads": {"type": "array", "items": {"type": "string"}}},
            "required": ["name"]}}},
    {"type": "function", "function": {
        "name": "read_shared", "description": "Read the team's shared workspace.",
        "parameters": {"type": "object", "properties": {
            "what": {"type": "string", "enum": ["full_logs", "summaries", "best_kernel", "failure_log"]}},
            "required": ["what"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Submit a draft as your result for this turn (it is benchmarked).",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"}, "note": {"type": "string"}}, "required": ["name"]}}},
]


def schemas_for(role: RoleSpec) -> list[dict]:
    return [s for s in TOOL_SCHEMAS if s["function"]["name"] in role.tools]
