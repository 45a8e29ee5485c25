"""TeamSpec as data: roles, collaboration order, information sharing, stop conditions, and the
supervisor's stated reason and expected effect. Specs are frozen and hashable; `spec_id` hashes
the design (not the reason), so the same design proposed twice is recognised."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

ROLE_KINDS = ("generalist", "explorer", "tuner", "debugger", "analyst", "reviewer")
TOOLS = ("write_kernel", "run_check", "run_benchmark", "read_shared", "submit")
SHARING = ("full_logs", "summaries", "best_kernel", "failure_log")
TOPOLOGIES = ("sequential", "parallel", "review_loop")
AGENTS = ("llm", "claude_code", "codex", "command")  # the function-calling loop (or offline policy), or a CLI


class SpecError(ValueError):
    """A team spec that cannot run; the message names the field."""


@dataclass(frozen=True)
class RoleSpec:
    name: str
    kind: str  # one of ROLE_KINDS: how an offline agent behaves, and the LLM agent's brief
    model: str = "offline"  # a litellm model name, or "offline" for the built-in policy
    instructions: str = ""
    tools: tuple[str, ...] = TOOLS
    token_cap: int = 0  # per turn; 0 means the team's per-turn share
    reads: tuple[str, ...] = ("summaries",)  # what it reads from the shared workspace (SHARING)
    workload_group: str = ""  # "" = all workloads, else a group name of the task (e.g. "batch64")
    agent: str = "llm"  # AGENTS: who plays the role (evoteam.team.cli_agent for the CLIs)

    def validate(self) -> None:
        if self.agent not in AGENTS:
            raise SpecError(f"role {self.name}: agent {self.agent!r} is not one of {', '.join(AGENTS)}")
        if self.kind not in ROLE_KINDS:
            raise SpecError(f"role {self.name}: kind {self.kind!r} is not one of {', '.join(ROLE_KINDS)}")
        bad = [t for t in self.tools if t not in TOOLS]
        if bad:
            raise SpecError(f"role {self.name}: unknown tool(s) {bad}; allowed: {', '.join(TOOLS)}")
        bad = [r for r in self.reads if r not in SHARING]
        if bad:
            raise SpecError(f"role {self.name}: unknown sharing {bad}; allowed: {', '.join(SHARING)}")


@dataclass(frozen=True)
class TeamSpec:
    name: str
    roles: tuple[RoleSpec, ...]
    topology: str = "sequential"  # TOPOLOGIES
    order: tuple[str, ...] = ()  # role names in collaboration order (empty: as listed)
    stall_evaluations: int = 6  # evaluations without improvement beyond noise before a review
    reason: str = ""  # why the supervisor chose this design
    expected_effect: str = ""  # what it should change, checked at the next review
    parent: str | None = None  # spec_id of the team it replaced
    evolvable: bool = True  # False for presets whose roles never change

    def __post_init__(self) -> None:
        if not self.roles:
            raise SpecError(f"team {self.name}: needs at least one role")
        names = [r.name for r in self.roles]
        if len(set(names)) != len(names):
            raise SpecError(f"team {self.name}: role names must be unique, got {names}")
        if self.topology not in TOPOLOGIES:
            raise SpecError(f"team {self.name}: topology {self.topology!r} is not one of {', '.join(TOPOLOGIES)}")
        unknown = [n for n in self.order if n not in names]
        if unknown:
            raise SpecError(f"team {self.name}: order names unknown role(s) {unknown}")
        for role in self.roles:
            role.validate()

    @property
    def turn_order(self) -> tuple[RoleSpec, ...]:
        by_name = {r.name: r for r in self.roles}
        names = self.order or tuple(by_name)
        return tuple(by_name[n] for n in names)

    def design(self) -> dict:
        """The parts that make the design (what spec_id hashes)."""
        d = asdict(self)
        for key in ("name", "reason", "expected_effect", "parent"):
            d.pop(key)
        for role in d["roles"]:
            if role["agent"] == "llm":
                role.pop("agent")  # the default leaves the designs of earlier runs (and their ids) as they were
        return d

    @property
    def spec_id(self) -> str:
        blob = json.dumps(self.design(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def to_json(self) -> dict:
        return {**asdict(self), "spec_id": self.spec_id}

    @classmethod
    def from_json(cls, obj: dict) -> TeamSpec:
        obj = {k: v for k, v in obj.items() if k != "spec_id"}
        roles = tuple(RoleSpec(**{**r, "tools": tuple(r["tools"]), "reads": tuple(r["reads"])}) for r in obj["roles"])
        return cls(**{**obj, "roles": roles, "order": tuple(obj.get("order", ()))})

    def evolve(self, **changes) -> TeamSpec:
        """A new spec derived from this one; the lineage is kept."""
        return replace(self, parent=self.spec_id, **changes)

    def summary(self) -> str:
        roles = ", ".join(f"{r.name}({r.kind}{'; ' + r.workload_group if r.workload_group else ''}; reads "
                          f"{'+'.join(r.reads)})" for r in self.turn_order)
        return f"{self.name} [{self.spec_id}] {self.topology}: {roles}"
