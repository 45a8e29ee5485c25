"""An LLM agent in a team: one role, acting through its toolbox in a function-calling loop.

A turn starts a fresh conversation: the system message says what the role is for (its kind and
instructions), what its tools do and what the task is; the user message is the current state of the
search, given by the caller. Each step asks the ledger how many output tokens the call may use,
calls the model with the role's tools, records the usage (replayed calls too: they were spent in
the session that made them) and runs every tool call. The turn ends when the model answers without
tool calls, after a successful `submit`, after `max_steps` calls, or when the role's per-turn token
cap is used up; `BudgetExceeded` (tokens, evaluations, time) propagates to the caller.
"""

from __future__ import annotations

from collections import Counter

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

RULES = ("Rules: a kernel is a Python file defining run(**inputs, **outputs) that writes every element of the "
         "outputs; it may import only torch, triton and math (never the baseline libraries, the reference or "
         "evoteam). Every check and benchmark counts against the team's evaluation budget, so do not re-run the "
         "same file on the same workloads. Call tools with JSON arguments exactly as their schemas describe.")

MAX_TOOL_RESULT_CHARS = 12_000


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
        parts.append(RULES)
        if self.task_brief:
            parts.append(f"The task:\n{self.task_brief}")
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
    result = str(result)
    if len(result) > MAX_TOOL_RESULT_CHARS:
        result = result[:MAX_TOOL_RESULT_CHARS] + f"\n... [cut: {len(result) - MAX_TOOL_RESULT_CHARS} more chars]"
    return result


def _summary(role: RoleSpec, steps: int, used: Counter, submitted: list[str], stop: str, last_text: str) -> str:
    calls = ", ".join(f"{name} x{n}" for name, n in used.items()) or "no tool calls"
    out = f"{role.name} ({role.kind}): {steps} LLM call(s), {calls}; stopped: {stop}"
    if submitted:
        out += f"; submitted {', '.join(submitted)}"
    text = " ".join(last_text.split())
    if text:
        out += f"; said: {text[:300]}{'...' if len(text) > 300 else ''}"
    return out


__all__ = ["LLMAgent", "KIND_BRIEFS", "run_tool", "LLMReply"]
