"""The shared workspace on disk: every attempt's code, result and failure cause, the team specs,
a strategy ledger and notes. Later teams (and resumed runs) read it; nothing is deleted.

    <run>/workspace/attempts/<attempt_id>/kernel.py, result.json
    <run>/workspace/attempts.jsonl   one line per finished evaluation (the evaluation journal)
    <run>/workspace/dispatched.jsonl one line per evaluation when it is dispatched (its id reserved): those
                                     without a line in attempts.jsonl were in flight when a run stopped
    <run>/workspace/teams.jsonl      each team: spec, reason, expected effect, outcome, verdict
    <run>/workspace/strategy.jsonl   what was tried and what it gave, in order
    <run>/workspace/notes.md         the analysts' notes
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evoteam.harness.model import Status
from evoteam.schema import append_journal, read_journal
from evoteam.team.journal import TeamOutcome, TeamRecord, read_teams


@dataclass
class Attempt:
    """One finished evaluation of one candidate on some workloads."""

    attempt_id: str
    key: str  # hash of (source, workloads, kind): the same evaluation is never run twice
    team: str  # spec_id
    role: str
    kind: str  # "check" or "benchmark"
    origin: dict  # family and params, or the LLM's description
    workloads: list[str]
    status: str  # Status.PASSED when every workload passed, else the first failure's status
    failure: str  # "" or the first failure's detail
    speedups: dict[str, float] = field(default_factory=dict)  # uuid -> speedup (benchmark, passed)
    statuses: dict[str, str] = field(default_factory=dict)  # uuid -> status
    noise: float | None = None  # the largest of `noises` (journals before them have this alone)
    geomean: float | None = None
    noises: dict[str, float] = field(default_factory=dict)  # uuid -> the candidate timed twice: relative gap
    # uuid -> [low, high]: the speedup's 95% interval from the timing rounds (journals before them have none)
    intervals: dict[str, list[float]] = field(default_factory=dict)
    # "search": a team's quick evaluation (the baseline's time may come from the cache); "final": measured as the
    # final table is (HarnessSettings.final_request), so the final table may take its figures as they are
    grade: str = "search"

    def to_json(self) -> dict:
        return asdict(self)


def _short(origin: dict) -> dict:
    """An origin for a summary line: an inherited champion's per-workload points (dozens) as their count."""
    if not isinstance(origin, dict) or "points" not in origin:
        return origin
    return {**{k: v for k, v in origin.items() if k != "points"}, "points": f"{len(origin['points'])} workloads"}


GRADES = ("search", "final")  # Attempt.grade
KERNEL_SUFFIXES = (".py", ".cu", ".cpp")  # Python/Triton, CUDA C++, C++ (torch binding): the file's language


def evaluation_key(source: str, workloads: list[str], kind: str, suffix: str = ".py") -> str:
    what = {"source": source, "workloads": sorted(workloads), "kind": kind}
    if suffix != ".py":  # the same text in another language is another kernel (.py keys stay as they were)
        what["suffix"] = suffix
    blob = json.dumps(what, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "attempts").mkdir(parents=True, exist_ok=True)
        self.journal = self.root / "attempts.jsonl"
        self.teams_path = self.root / "teams.jsonl"
        self.strategy_path = self.root / "strategy.jsonl"
        self.notes_path = self.root / "notes.md"
        self.dispatched_path = self.root / "dispatched.jsonl"
        self._attempts: list[Attempt] = [Attempt(**entry) for entry in read_journal(self.journal)]
        self._dispatched: dict[str, dict] = {d["attempt_id"]: d for d in read_journal(self.dispatched_path)}
        numbers = [int(i.split("-", 1)[0]) for i in [a.attempt_id for a in self._attempts] + list(self._dispatched)]
        self._next = max(numbers, default=0) + 1
        # One writer: the run's threads (roles of a parallel team) share this object; keys being evaluated
        # make a second asker wait for the first one's result instead of running it again.
        self._lock = threading.Condition()
        self._pending: set[str] = set()

    def _append(self, path: Path, obj: dict) -> None:
        with self._lock:  # one writer of every journal, whichever thread of the run calls
            append_journal(path, obj)

    # ------------------------------------------------------------------ attempts
    @property
    def attempts(self) -> list[Attempt]:
        return list(self._attempts)

    def find(self, key: str) -> Attempt | None:
        return next((a for a in self._attempts if a.key == key), None)

    def claim(self, key: str) -> Attempt | None:
        """The finished attempt of this evaluation key, waiting for it while another thread runs it; None:
        the caller runs it (and must end with `record` or `release`)."""
        with self._lock:
            self._lock.wait_for(lambda: key not in self._pending)
            known = self.find(key)
            if known is None:
                self._pending.add(key)
            return known

    def release(self, key: str) -> None:
        with self._lock:
            self._pending.discard(key)
            self._lock.notify_all()

    def new_attempt_dir(self, source: str, suffix: str = ".py", dispatch: dict | None = None) -> tuple[str, Path]:
        """A new attempt id (reserved: never given again, also after a resume) with its kernel file; with
        `dispatch`, the journal of dispatched evaluations records it before it runs."""
        with self._lock:
            attempt_id = f"{self._next:04d}-{hashlib.sha256(source.encode()).hexdigest()[:8]}"
            self._next += 1
            path = self.root / "attempts" / attempt_id
            path.mkdir(parents=True, exist_ok=True)
            for stale in path.glob("kernel.*"):  # an interrupted attempt of another language under this id
                stale.unlink()
            (path / f"kernel{suffix}").write_text(source)
            if dispatch is not None:
                entry = {"attempt_id": attempt_id, "suffix": suffix, **dispatch}
                self._dispatched[attempt_id] = entry
                self._append(self.dispatched_path, entry)
            return attempt_id, path

    def in_flight(self) -> list[dict]:
        """Dispatched evaluations with no finished attempt (in flight when the run last stopped), in order."""
        done = {a.attempt_id for a in self._attempts}
        return [d for i, d in sorted(self._dispatched.items()) if i not in done]

    def kernel_path(self, attempt_id: str) -> Path:
        """The attempt's kernel file: kernel.py, kernel.cu or kernel.cpp."""
        folder = self.root / "attempts" / attempt_id
        return next((folder / f"kernel{s}" for s in KERNEL_SUFFIXES if (folder / f"kernel{s}").is_file()),
                    folder / "kernel.py")

    def result_json(self, attempt_id: str) -> dict | None:
        """The harness's full result of an attempt, as recorded."""
        path = self.root / "attempts" / attempt_id / "result.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def record(self, attempt: Attempt, full_result: dict) -> None:
        with self._lock:
            (self.root / "attempts" / attempt.attempt_id / "result.json").write_text(json.dumps(full_result, indent=1))
            self._append(self.journal, attempt.to_json())  # last: the journal line marks it finished
            self._attempts.append(attempt)
            self._pending.discard(attempt.key)
            self._lock.notify_all()

    # ------------------------------------------------------------------ teams, strategy, notes
    def record_team_start(self, record: TeamRecord) -> None:
        self._append(self.teams_path, record.start_json())

    def record_team_end(self, outcome: TeamOutcome) -> None:
        self._append(self.teams_path, outcome.to_json())

    def teams(self) -> list[TeamRecord]:
        return read_teams(read_journal(self.teams_path))

    def record_strategy(self, entry: dict) -> None:
        self._append(self.strategy_path, entry)

    def add_note(self, text: str) -> None:
        with self._lock, open(self.notes_path, "a") as fh:
            fh.write(text.rstrip() + "\n\n")

    def notes(self) -> str:
        return self.notes_path.read_text() if self.notes_path.is_file() else ""

    # ------------------------------------------------------------------ views for the agents
    def best(self) -> Attempt | None:
        timed = [a for a in self._attempts if a.geomean is not None and a.status == Status.PASSED]
        return max(timed, key=lambda a: a.geomean) if timed else None

    def view(self, what: str, limit: int = 20) -> str:
        """What a role may read: full_logs, summaries, best_kernel or failure_log."""
        if what == "best_kernel":
            best = self.best()
            if best is None:
                return "no verified kernel yet"
            return f"# attempt {best.attempt_id}, geomean {best.geomean:.3f}x\n" + self.kernel_path(
                best.attempt_id).read_text()
        if what == "failure_log":
            failed = [a for a in self._attempts if a.status != Status.PASSED][-limit:]
            return "\n".join(f"{a.attempt_id} {_short(a.origin)} {a.status}: {a.failure[:300]}" for a in failed) or "none"
        if what == "summaries":
            rows = [f"{a.attempt_id} {a.role} {_short(a.origin)} {a.kind} {a.status} "
                    f"{'' if a.geomean is None else f'{a.geomean:.3f}x'}" for a in self._attempts[-limit:]]
            return "\n".join(rows) + ("\n\nnotes:\n" + self.notes()[-2000:] if self.notes() else "")
        if what == "full_logs":
            return "\n".join(json.dumps(a.to_json()) for a in self._attempts[-limit:])
        raise ValueError(f"unknown view {what!r}")
