"""The LLM side of a team, built from the `llm` config group: one client (with its journal), the
agents it speaks for and the supervisor's redesign proposals. The offline policy has none."""

from __future__ import annotations

from pathlib import Path

from evoteam.llm import LLMClient
from evoteam.team.budget import Ledger
from evoteam.team.llm_agent import LLMAgent
from evoteam.team.llm_supervisor import propose_redesign
from evoteam.team.spec import RoleSpec, TeamSpec

JOURNAL = "llm_journal.jsonl"


class LLMTeam:
    def __init__(self, client: LLMClient, ledger: Ledger, model: str, task_brief: str = ""):
        self.client = client
        self.ledger = ledger
        self.model = model
        self.task_brief = task_brief  # what every member is told first (evoteam.team.brief.task_brief)

    @classmethod
    def from_config(cls, llm_cfg, run_dir: Path, ledger: Ledger, task_brief: str = "",
                    seed: int | None = None) -> LLMTeam | None:
        """None with the offline policy; else a client that has answered one preflight call (sampling with the
        run's `seed` where the provider takes one)."""
        if llm_cfg.provider.value == "offline":
            return None
        client = LLMClient(llm_cfg, journal=run_dir / JOURNAL, seed=seed)
        client.preflight()
        return cls(client, ledger, llm_cfg.model, task_brief)

    def continue_after_checkpoint(self) -> None:
        """Journal lines of calls made before the checkpoint (restored into the ledger) are not replayed."""
        self.client.resume_after(self.ledger.total.calls)

    def agent(self, role: RoleSpec) -> LLMAgent:
        return LLMAgent(role, self.client, self.task_brief)

    def redesign(self, spec: TeamSpec, progress_report: str) -> TeamSpec | None:
        return propose_redesign(self.client, self.ledger, spec, progress_report, [self.model])
