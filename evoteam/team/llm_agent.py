"""An LLM agent in a team: one role, acting through its toolbox in a function-calling loop.

A turn starts a fresh conversation: the system message says what the role is for (its kind and
instructions), what its tools do, and gives the run's task brief (`evoteam.team.brief`: interface,
workloads, rules, hardware, reference); the user message is the state of the search (budget left,
progress, the best kernel or the seed with its table), given by the caller. A conversation that
outgrows `llm.context_tokens` has its older steps summarised (`fit`). Each step asks the ledger how many output tokens the call may use,
calls the model with the role's tools, records the usage (replayed calls too: they were spent in
the session that made them) and runs every tool call. The turn ends when the model answers without
tool calls, after a successful `submit`, after `max_steps` calls, or when the role's per-turn token
cap is used up; `BudgetExceeded` (tokens, evaluations, time) propagates to the caller.
"""

from __future__ import annotations

import json
from collections import Counter

from evoteam.errors import UserError
from evoteam.llm import LLMClient, LLMReply, ToolCall
from evoteam.team.agent import TurnContext
from evoteam.team.spec import RoleSpec
from evoteam.team.toolbox import Toolbox, schemas_for

KIND_BRIEFS = {
    "generalist": "You write GPU kernels end to end: write a draft, check it, benchmark it, improve it, and submit "
                  "your best verified kernel.",
    "explorer": "You explore structurally different kernel designs (work decomposition, tiling, memory layout, "
                "parallelisation over different axes), not small parameter tweaks. Check each idea for correctness "
                "before timing it, and submit the most promising verified design.",
    "tuner": "You take the best verified kernel and tune it for speed: block sizes, num_warps, num_stages, loop "
             "order, vector widths. Change one thing at a time, benchmark, keep what helps, submit the fastest.",
    "debugger": "You fix failing kernels: read the failure log, find the cause (indexing, masking, dtype, "
                "accumulation precision, unwritten outputs), make the kernel pass the check, then submit it.",
    "analyst": "You analyse the results so far: which designs worked, which failed and why, where the time goes, "
               "and what the team should try next. End your turn with a concise written analysis.",
    "reviewer": "You review the latest kernels for correctness risks and shortcuts (skipped work, wrong masking, "
                "reliance on input values): check them on more workloads and report what you found.",
}

CALLING = "Call tools with JSON arguments exactly as their schemas describe."


class ContextTooSmall(UserError):
    """The brief alone does not fit the configured context."""


class LLMAgent:
    def __init__(self, role: RoleSpec, client: LLMClient, task_brief: str = ""):
        self.role = role
        self.client = client
        self.task_brief = task_brief  # the task's definition / README; static over the run

    def system_message(self) -> str:
        role = self.role
        tools = "\n".join(f"- {s['function']['name']}: {s['function']['description']}" for s in schemas_for(role))
        parts = [f"You are {role.name}, the {role.kind} of a team of agents optimising a GPU kernel.",
                 KIND_BRIEFS.get(role.kind, "")]
        if role.instructions:
            parts.append(f"Instructions from the supervisor: {role.instructions}")
        parts.append(f"Your tools:\n{tools or '- none'}")
        if "read_shared" in role.tools:
            parts.append(f"With read_shared you may read: {', '.join(role.reads)}.")
        if role.workload_group:
            parts.append(f"Focus on the workload group {role.workload_group!r}.")
        parts.append(CALLING)
        if self.task_brief:
            parts.append(self.task_brief)
        return "\n\n".join(p for p in parts if p)

    def turn(self, toolbox: Toolbox, context: TurnContext, max_steps: int = 8) -> str:
        """One turn of this role; returns its account. BudgetExceeded propagates."""
        role, ledger = self.role, toolbox.ledger
        context = context.brief
        tools = schemas_for(role) or None
        messages: list[dict] = [{"role": "system", "content": self.system_message()},
                                {"role": "user", "content": context or "Start."}]
        used = Counter()
        spent = 0  # tokens of this turn (for the role's per-turn cap)
        steps = 0
        stop = f"max_steps={max_steps}"
        last_text = ""
        submitted_before = len(toolbox.submitted)
        for _ in range(max_steps):
            max_tokens = ledger.allow_call()
            if role.token_cap > 0:
                left = role.token_cap - spent
                if left <= 0:
                    stop = f"token cap {role.token_cap} reached"
                    break
                max_tokens = min(max_tokens, left)
            fit(messages, self.client.context_tokens - max_tokens, self.client.count_tokens)
            reply = self.client.complete(messages, tools, max_tokens=max_tokens)
            steps += 1
            ledger.record_llm(toolbox.team_id, role.name, reply.usage)
            spent += reply.usage.total_tokens
            messages.append(reply.assistant_message())
            last_text = reply.content or last_text
            if not reply.tool_calls:
                stop = "answered" if reply.finish_reason != "length" else "answer cut at max_tokens"
                break
            submitted = False
            for call in reply.tool_calls:
                used[call.name or "?"] += 1
                result = run_tool(toolbox, call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                submitted |= call.name == "submit" and result.startswith("submitted")
            if submitted:
                stop = "submitted"
                break
        return _summary(role, steps, used, toolbox.submitted[submitted_before:], stop, last_text)


def run_tool(toolbox: Toolbox, call: ToolCall) -> str:
    """Run one tool call of the model; its mistakes come back as an error text, never an exception
    (BudgetExceeded and failures of the harness itself still propagate)."""
    if not call.name:
        return "error: the tool call has no function name"
    try:
        result = toolbox.call(call.name, call.arguments or "{}")
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        result = f"error: {call.name} failed on these arguments: {type(exc).__name__}: {exc}"
    return str(result)


def fit(messages: list[dict], limit: int, count) -> None:
    """Keep a conversation within `limit` prompt tokens by summarising its older steps, oldest first:
    a tool result becomes its first line, a kernel source sent to a tool becomes a note naming it. Code
    is kept whole or replaced whole, never cut in the middle. The brief (the first two messages) and the
    latest step stay as they are; if they alone do not fit, the run stops with one line."""
    if count(messages) <= limit:
        return
    latest = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
    for i in range(2, latest):
        _summarise(messages[i])
        if count(messages) <= limit:
            return
    if count(messages[:2]) > limit:
        raise ContextTooSmall(f"llm.context_tokens: the brief alone takes {count(messages[:2])} tokens, more than "
                              f"the {limit} left for a prompt; raise llm.context_tokens or lower llm.max_output_tokens")


SUMMARISED = " [an older result, summarised"


def _summarise(message: dict) -> None:
    if message["role"] == "tool" and SUMMARISED not in str(message.get("content") or ""):
        lines = str(message.get("content") or "").splitlines()
        message["content"] = (lines[0] if lines else "") + f"{SUMMARISED}: {len(lines) - 1} more lines]"
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        try:
            args = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict) and isinstance(args.get("source"), str) and not args["source"].endswith("summarised>"):
            lines = args["source"].count("\n") + 1
            args["source"] = f"<{lines} lines of {args.get('name', 'the kernel')}, as written then; summarised>"
            function["arguments"] = json.dumps(args)


def _summary(role: RoleSpec, steps: int, used: Counter, submitted: list[str], stop: str, last_text: str) -> str:
    calls = ", ".join(f"{name} x{n}" for name, n in used.items()) or "no tool calls"
    out = f"{role.name} ({role.kind}): {steps} LLM call(s), {calls}; stopped: {stop}"
    if submitted:
        out += f"; submitted {', '.join(submitted)}"
    text = " ".join(last_text.split())
    if text:
        out += f"; said: {text[:300]}{'...' if len(text) > 300 else ''}"
    return out


__all__ = ["LLMAgent", "KIND_BRIEFS", "run_tool", "fit", "LLMReply"]
