"""The one interface of a team member: `turn(toolbox, context) -> str`, the offline policy's agents
and the LLM agents alike. The toolbox is how the member acts (and holds the ledger); the context is
what it is told; the string is the turn's full account, which goes to the run's log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from evoteam.team.progress import Progress
from evoteam.team.toolbox import Toolbox


@dataclass(frozen=True)
class TurnContext:
    brief: str = ""  # the task and the progress, as text (what an LLM member reads)
    progress: Progress | None = None  # the same, as data (what the offline policy reads)
    round: int = 0  # the team's round, from 0


class Agent(Protocol):
    def turn(self, toolbox: Toolbox, context: TurnContext) -> str: ...
