"""The LLM supervisor's redesign step: given the current team and a progress report, the model
proposes a new team through one call of the tool `propose_team`, whose schema mirrors TeamSpec.

`propose_redesign` returns the new spec, derived with `current.evolve(...)` so its parent is the
current team, or None when the model gave no usable design (no tool call, arguments that are not
JSON, a spec that does not validate, a model outside `allowed_models`); the caller then falls back
to the rule-based supervisor. BudgetExceeded and LLMError propagate. The call's usage is recorded
under the current team's spec_id, role "supervisor".
"""

from __future__ import annotations

import json
import logging

from evoteam.llm import LLMClient
from evoteam.team.budget import Ledger
from evoteam.team.llm_agent import KIND_BRIEFS
from evoteam.team.spec import AGENTS, ROLE_KINDS, SHARING, TOOLS, TOPOLOGIES, RoleSpec, SpecError, TeamSpec

log = logging.getLogger(__name__)

SUPERVISOR_ROLE = "supervisor"

SHARING_BRIEFS = {
    "full_logs": "every attempt's full record",
    "summaries": "one line per attempt plus the analysts' notes",
    "best_kernel": "the source of the best verified kernel",
    "failure_log": "the failed attempts and their causes",
}
TOPOLOGY_BRIEFS = {
    "sequential": "roles take turns in `order`, each seeing what the previous ones did",
    "parallel": "roles work at the same time on their own drafts; results meet in the shared workspace",
    "review_loop": "a producer's kernels go to a reviewer/debugger before the next round",
}


def propose_team_schema(allowed_models: list[str]) -> dict:
    """The `propose_team` tool (OpenAI function format); its fields mirror TeamSpec and RoleSpec."""
    model: dict = {"type": "string", "description": "the LLM that plays this role"}
    if allowed_models:
        model["enum"] = list(allowed_models)
    role = {"type": "object", "properties": {
        "name": {"type": "string", "description": "unique role name, e.g. explorer1"},
        "kind": {"type": "string", "enum": list(ROLE_KINDS)},
        "model": model,
        "instructions": {"type": "string", "description": "what this role should concentrate on"},
        "tools": {"type": "array", "items": {"type": "string", "enum": list(TOOLS)}},
        "reads": {"type": "array", "items": {"type": "string", "enum": list(SHARING)},
                  "description": "what it may read from the shared workspace"},
        "workload_group": {"type": "string", "description": "\"\" for all workloads, else a group name"},
        "agent": {"type": "string", "enum": list(AGENTS),
                  "description": "who plays the role: llm (a function-calling agent) or a coding-agent CLI"}},
        "required": ["name", "kind", "instructions", "tools", "reads"]}
    return {"type": "function", "function": {
        "name": "propose_team",
        "description": "Propose the next team: its roles, how they collaborate, what they share, when to review "
                       "again, why, and what effect you expect.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string", "description": "a short name for the team"},
            "roles": {"type": "array", "items": role, "minItems": 1},
            "topology": {"type": "string", "enum": list(TOPOLOGIES)},
            "order": {"type": "array", "items": {"type": "string"},
                      "description": "role names in collaboration order (empty: as listed)"},
            "stall_evaluations": {"type": "integer", "minimum": 1,
                                  "description": "evaluations without improvement before the next review"},
            "reason": {"type": "string", "description": "why this design, given the progress report"},
            "expected_effect": {"type": "string", "description": "what should change; checked at the next review"}},
            "required": ["name", "roles", "topology", "reason", "expected_effect"]}}}


def _system_message(current: TeamSpec, allowed_models: list[str]) -> str:
    kinds = "\n".join(f"- {k}: {KIND_BRIEFS.get(k, '')}" for k in ROLE_KINDS)
    sharing = "\n".join(f"- {k}: {SHARING_BRIEFS.get(k, '')}" for k in SHARING)
    topologies = "\n".join(f"- {k}: {TOPOLOGY_BRIEFS.get(k, '')}" for k in TOPOLOGIES)
    return "\n\n".join([
        "You supervise a team of LLM coding agents that optimise a GPU kernel. The team has stalled or reached a "
        "review point. Read the progress report, diagnose why progress stopped (failure causes, repeated ideas, "
        "missing skills, too much or too little shared context) and redesign the team: roles, collaboration "
        "order, what each role reads, and when to review again. Call the tool propose_team exactly once.",
        f"Role kinds:\n{kinds}",
        f"Tools a role may have: {', '.join(TOOLS)}.",
        f"What a role may read from the shared workspace:\n{sharing}",
        f"Topologies:\n{topologies}",
        f"Models a role may use: {', '.join(allowed_models) if allowed_models else 'any'}.",
        f"The current team ({current.summary()}):\n{json.dumps(current.to_json(), indent=1)}",
    ])


def _role(obj: dict, allowed_models: list[str], default_model: str) -> RoleSpec:
    if not isinstance(obj, dict):
        raise SpecError(f"a role must be an object, got {obj!r:.80}")
    model = obj.get("model") or default_model
    if allowed_models and model not in allowed_models:
        raise SpecError(f"role {obj.get('name')}: model {model!r} is not one of {', '.join(allowed_models)}")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError("every role needs a name")
    tools, reads = obj.get("tools", list(TOOLS)), obj.get("reads", ["summaries"])
    if not isinstance(tools, list) or not isinstance(reads, list):
        raise SpecError(f"role {name}: tools and reads must be lists")
    return RoleSpec(name=name.strip(), kind=str(obj.get("kind", "")), model=str(model),
                    instructions=str(obj.get("instructions") or ""), tools=tuple(str(t) for t in tools),
                    reads=tuple(str(r) for r in reads), workload_group=str(obj.get("workload_group") or ""),
                    agent=str(obj.get("agent") or "llm"))


def build_spec(current: TeamSpec, args: dict, allowed_models: list[str]) -> TeamSpec:
    """The proposed TeamSpec (parent = current); raises SpecError when the proposal cannot run."""
    if not isinstance(args, dict):
        raise SpecError("propose_team arguments must be a JSON object")
    roles = args.get("roles")
    if not isinstance(roles, list) or not roles:
        raise SpecError("roles must be a non-empty list")
    default_model = allowed_models[0] if allowed_models else current.roles[0].model
    order = args.get("order") or []
    if not isinstance(order, list):
        raise SpecError("order must be a list of role names")
    try:
        stall = int(args.get("stall_evaluations", current.stall_evaluations))
    except (TypeError, ValueError):
        raise SpecError(f"stall_evaluations must be an integer, got {args.get('stall_evaluations')!r}") from None
    if stall < 1:
        raise SpecError(f"stall_evaluations must be at least 1, got {stall}")
    return current.evolve(
        name=str(args.get("name") or current.name), roles=tuple(_role(r, allowed_models, default_model) for r in roles),
        topology=str(args.get("topology") or current.topology), order=tuple(str(n) for n in order),
        stall_evaluations=stall, reason=str(args.get("reason") or ""),
        expected_effect=str(args.get("expected_effect") or ""))


def propose_redesign(client: LLMClient, ledger: Ledger, current: TeamSpec, progress_report: str,
                     allowed_models: list[str]) -> TeamSpec | None:
    """Ask the model for a new team design; None when it gave no valid one (use the rule-based
    supervisor then). A proposal identical in design to `current` is returned as it is (same spec_id)."""
    if not current.evolvable:
        return None
    max_tokens = ledger.allow_call()
    messages = [{"role": "system", "content": _system_message(current, allowed_models)},
                {"role": "user", "content": f"Progress report:\n{progress_report}"}]
    reply = client.complete(messages, [propose_team_schema(allowed_models)], max_tokens=max_tokens)
    ledger.record_llm(current.spec_id, SUPERVISOR_ROLE, reply.usage)
    calls = [c for c in reply.tool_calls if c.name == "propose_team"]
    if not calls:
        log.warning("LLM supervisor gave no propose_team call (finish_reason %s); falling back", reply.finish_reason)
        return None
    try:
        args = json.loads(calls[0].arguments or "{}")
        return build_spec(current, args, allowed_models)
    except (json.JSONDecodeError, SpecError, TypeError, ValueError) as exc:
        log.warning("LLM supervisor's proposal rejected: %s", " ".join(str(exc).split())[:300])
        return None


__all__ = ["propose_redesign", "propose_team_schema", "build_spec", "SUPERVISOR_ROLE"]
