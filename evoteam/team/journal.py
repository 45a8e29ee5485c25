"""The team journal (`workspace/teams.jsonl`) as typed records: the team writes them, the run's
history and tracking read them. A team's start line holds its design and why it was chosen; its end
line holds what it achieved and the verdict against what it was expected to change."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from evoteam.llm import Usage
from evoteam.team.spec import TeamSpec


@dataclass(frozen=True)
class TeamOutcome:
    """What one team achieved, written when it is replaced or the run ends."""

    index: int
    spec_id: str
    evaluations: int  # of this team
    best_before: float | None  # the run's best geomean when the team started
    best_after: float | None  # and when it ended
    correct_rate: float
    failures: dict[str, int] = field(default_factory=dict)  # failure type -> count, the run's so far
    tokens: Usage = field(default_factory=Usage)  # of this team
    verdict: str = ""  # what happened against what the design expected

    def to_json(self) -> dict:
        return {"event": "end", **asdict(self), "tokens": self.tokens.to_json()}

    @classmethod
    def from_json(cls, obj: dict) -> TeamOutcome:
        fields = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        return cls(**{**fields, "tokens": Usage.from_json(obj.get("tokens") or {})})


@dataclass(frozen=True)
class TeamRecord:
    """One team of the run: its design, who designed it and when, and its outcome once it ended."""

    index: int
    designed_by: str  # "preset", "rules" or the LLM supervisor
    at_evaluation: int  # the run's evaluations when it started
    spec: TeamSpec
    outcome: TeamOutcome | None = None

    def start_json(self) -> dict:
        return {"event": "start", "index": self.index, "designed_by": self.designed_by,
                "at_evaluation": self.at_evaluation, **self.spec.to_json()}

    @classmethod
    def from_start_json(cls, obj: dict) -> TeamRecord:
        spec = {k: v for k, v in obj.items() if k not in ("event", "index", "designed_by", "at_evaluation")}
        return cls(index=int(obj["index"]), designed_by=obj["designed_by"], at_evaluation=int(obj["at_evaluation"]),
                   spec=TeamSpec.from_json(spec))


def read_teams(lines: list[dict]) -> list[TeamRecord]:
    """The journal's lines as one record per team, in order, each with its outcome where it ended."""
    records = [TeamRecord.from_start_json(e) for e in lines if e.get("event") == "start"]
    outcomes = {int(e["index"]): TeamOutcome.from_json(e) for e in lines if e.get("event") == "end"}
    return [TeamRecord(r.index, r.designed_by, r.at_evaluation, r.spec, outcomes.get(r.index)) for r in records]
