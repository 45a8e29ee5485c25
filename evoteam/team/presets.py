"""The three team presets. The same evaluation and budget rules hold for all of them."""

from __future__ import annotations

from dataclasses import replace

from evoteam.team.spec import RoleSpec, TeamSpec


def single(model: str) -> TeamSpec:
    """One agent with all tools (the paper's single-agent baseline)."""
    return TeamSpec(name="single", roles=(RoleSpec("agent", "generalist", model=model,
                                                   reads=("summaries", "best_kernel", "failure_log")),),
                    evolvable=False, reason="preset: one agent with all tools")


def fixed4(model: str) -> TeamSpec:
    """Four fixed roles in a fixed order that never change (the paper's fixed-role team)."""
    roles = (
        RoleSpec("explorer", "explorer", model=model, reads=("summaries",)),
        RoleSpec("tuner", "tuner", model=model, reads=("best_kernel", "summaries")),
        RoleSpec("debugger", "debugger", model=model, reads=("failure_log",)),
        RoleSpec("analyst", "analyst", model=model, tools=("read_shared",), reads=("full_logs",)),
    )
    return TeamSpec(name="fixed4", roles=roles, evolvable=False, reason="preset: four fixed roles")


def evolving(model: str) -> TeamSpec:
    """The starting team of the evolving preset: the supervisor redesigns it when it stalls."""
    roles = (
        RoleSpec("explorer", "explorer", model=model, reads=("summaries",)),
        RoleSpec("tuner", "tuner", model=model, reads=("best_kernel", "summaries")),
    )
    return TeamSpec(name="evolving-0", roles=roles, reason="initial team: explore kernel families, tune the best",
                    expected_effect="a first verified kernel and a rising best speedup")


def claude_code(model: str) -> TeamSpec:
    """One Claude Code CLI with all tools (the paper's single-agent baseline, as the paper ran it)."""
    return replace(single(model), name="claude_code", roles=(replace(single(model).roles[0], agent="claude_code"),),
                   reason="preset: one Claude Code agent")


def codex(model: str) -> TeamSpec:
    """One Codex CLI with all tools (the paper's Codex baseline)."""
    return replace(single(model), name="codex", roles=(replace(single(model).roles[0], agent="codex"),),
                   reason="preset: one Codex agent")


PRESETS = {"single": single, "fixed4": fixed4, "evolving": evolving, "claude_code": claude_code, "codex": codex}


def from_config(team_cfg, model: str, agent: str = "llm") -> TeamSpec:
    """The starting team of the `team` config group: its preset, with its stall rule; `agent` (the agent
    config group's kind) plays the roles that the preset leaves to the LLM layer."""
    spec = PRESETS[team_cfg.preset.value](model)
    roles = tuple(replace(r, agent=agent) if r.agent == "llm" else r for r in spec.roles)
    topology = getattr(team_cfg, "topology", None)
    spec = replace(spec, topology=topology.value) if topology is not None else spec
    return replace(spec, roles=roles, stall_evaluations=team_cfg.stall_evaluations)
