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


PRESETS = {"single": single, "fixed4": fixed4, "evolving": evolving}


def from_config(team_cfg, model: str) -> TeamSpec:
    """The starting team of the `team` config group: its preset, with its stall rule."""
    return replace(PRESETS[team_cfg.preset.value](model), stall_evaluations=team_cfg.stall_evaluations)
