"""The LLM layer against a real local OpenAI-compatible server (tests/fake_openai.py) through litellm:
usage accounting, retries, the budget cap, malformed tool calls, the replay journal, preflight and
the LLM supervisor's redesign."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from fake_openai import FakeOpenAI, delay, error, reply, tool_call

from evoteam.errors import UserError
from evoteam.harness.model import EvalResult, WorkloadResult
from evoteam.llm import LLMClient, LLMConfigError, LLMError
from evoteam.team.agent import TurnContext
from evoteam.team.budget import BudgetExceeded, Ledger
from evoteam.team.llm_agent import LLMAgent
from evoteam.team.llm_supervisor import propose_redesign
from evoteam.team.spec import RoleSpec, TeamSpec
from evoteam.team.toolbox import HarnessSettings, Toolbox
from evoteam.team.workspace import Workspace

WORKLOADS = ["aaaa1111-0000", "bbbb2222-0000"]
KERNEL = "import torch\n\ndef run(x, out):\n    out.copy_(x)\n"
TEAM = "team0"


@dataclass
class Cfg:
    """The fields of evoteam.config.LLMConfig that the client reads."""

    model: str = "openai/fake-model"
    api_base: str | None = None
    api_key_env: str | None = "EVOTEAM_TEST_LLM_KEY"
    provider: str = "litellm"
    temperature: float = 0.2
    max_output_tokens: int = 256
    timeout_s: float = 5.0
    max_retries: int = 4


@pytest.fixture
def server(monkeypatch):
    for var in ("NO_PROXY", "no_proxy"):  # an HTTP proxy in the environment must not see these requests
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    with FakeOpenAI() as s:
        yield s


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("EVOTEAM_TEST_LLM_KEY", "dummy-key")


def make_client(server, journal=None, **cfg) -> LLMClient:
    return LLMClient(Cfg(api_base=server.url, **cfg), journal=journal, backoff_base_s=0.001, backoff_cap_s=0.01)


def stub_evaluator(calls: list):
    def evaluate(request, timeout_s):
        calls.append(request)
        return EvalResult(results=[WorkloadResult(uuid=u, status="PASSED", baseline_ms=2.0, candidate_ms=1.0,
                                                  candidate_repeat_ms=1.02) for u in request.workloads])
    return evaluate


def make_toolbox(tmp_path, ledger, role, evaluations=None) -> Toolbox:
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", all_workloads=WORKLOADS, probe_workloads=WORKLOADS[:1])
    return Toolbox(Workspace(tmp_path / "workspace"), settings, ledger, TEAM, role,
                   evaluator=stub_evaluator(evaluations if evaluations is not None else []))


def make_ledger(tokens=1_000_000, max_output=256) -> Ledger:
    return Ledger(token_budget=tokens, max_evaluations=20, max_wall_time_s=600, max_output_tokens=max_output)


CODER = RoleSpec(name="coder", kind="generalist", model="openai/fake-model")


def write_and_submit_script():
    return [
        reply("let me write", tool_call("write_kernel", {"name": "v1.py", "source": KERNEL}, "c1"),
              prompt_tokens=120, completion_tokens=40, cached_tokens=0, reasoning_tokens=10),
        reply(None, tool_call("run_benchmark", {"name": "v1.py"}, "c2"),
              prompt_tokens=200, completion_tokens=30, cached_tokens=100, reasoning_tokens=5),
        reply(None, tool_call("submit", {"name": "v1.py", "note": "copy"}, "c3"),
              prompt_tokens=260, completion_tokens=20, cached_tokens=180, reasoning_tokens=0),
    ]


# ----------------------------------------------------------------------------- usage and the agent loop


def test_usage_in_ledger_is_what_the_server_reported(server, key, tmp_path):
    server.add(*write_and_submit_script())
    ledger = make_ledger()
    evaluations = []
    toolbox = make_toolbox(tmp_path, ledger, CODER, evaluations)
    summary = LLMAgent(CODER, make_client(server), task_brief="copy x to out").turn(toolbox, TurnContext(brief="state: empty"))

    assert len(server.requests) == 3 and server.steps_left == 0
    for role_usage in (ledger.total, ledger.by_team[TEAM], ledger.by_role[f"{TEAM}/coder"]):
        assert (role_usage.prompt_tokens, role_usage.completion_tokens) == (580, 90)
        assert (role_usage.cached_tokens, role_usage.reasoning_tokens, role_usage.calls) == (280, 15, 3)
        assert role_usage.cost_usd == 0.0  # litellm has no price for "fake-model"
    assert "submitted" in summary and "submit x1" in summary
    assert len(evaluations) == 1 and len(toolbox.submitted) == 1  # benchmark and submit: the same evaluation

    # What the client sent: the model, the key, max_tokens, the role's tools, and the tool results.
    first = server.requests[0]
    assert first["model"] == "fake-model" and first["max_tokens"] == 256
    assert server.headers[0]["authorization"] == "Bearer dummy-key"
    assert {t["function"]["name"] for t in first["tools"]} == {"write_kernel", "run_check", "run_benchmark",
                                                               "read_shared", "submit"}
    assert first["messages"][0]["role"] == "system" and "generalist" in first["messages"][0]["content"]
    assert "copy x to out" in first["messages"][0]["content"]
    assert first["messages"][1] == {"role": "user", "content": "state: empty"}
    third = server.requests[2]["messages"]
    tool_msgs = [m for m in third if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2"]
    assert tool_msgs[0]["content"].startswith("written v1.py")
    assert "PASSED" in tool_msgs[1]["content"] and "2.000x" in tool_msgs[1]["content"]
    assert third[2]["tool_calls"][0]["function"]["name"] == "write_kernel"


def test_cost_comes_from_litellm_for_a_known_model(server, key):
    server.add(reply("hi", prompt_tokens=1000, completion_tokens=100))
    got = make_client(server, model="openai/gpt-4o-mini").complete([{"role": "user", "content": "x"}], max_tokens=100)
    assert got.usage.cost_usd > 0 and got.usage.prompt_tokens == 1000 and got.content == "hi"
    assert got.finish_reason == "stop" and not got.replayed


def test_token_cap_of_a_role_limits_the_call(server, key, tmp_path):
    server.add(reply("done", prompt_tokens=50, completion_tokens=500))
    role = RoleSpec(name="lean", kind="analyst", model="openai/fake-model", token_cap=100, tools=("read_shared",))
    ledger = make_ledger()
    LLMAgent(role, make_client(server)).turn(make_toolbox(tmp_path, ledger, role), TurnContext(brief="go"))
    assert server.requests[0]["max_tokens"] == 100
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["read_shared"]
    assert ledger.by_role[f"{TEAM}/lean"].completion_tokens == 100  # the server honours max_tokens


def test_budget_cap_stops_a_loop_that_would_run_forever(server, key, tmp_path):
    server.add(*[reply(None, tool_call("read_shared", {"what": "summaries"}), prompt_tokens=50,
                       completion_tokens=1000) for _ in range(100)])
    ledger = make_ledger(tokens=1000, max_output=256)
    agent = LLMAgent(CODER, make_client(server))
    with pytest.raises(BudgetExceeded):
        agent.turn(make_toolbox(tmp_path, ledger, CODER), TurnContext(brief="go"), max_steps=1000)
    # Calls at 0, 306, 612 and 918 tokens spent are allowed; the fifth is refused before it is sent.
    assert len(server.requests) == 4
    assert all(r["max_tokens"] == 256 for r in server.requests)
    assert ledger.total.total_tokens == 4 * 306
    assert ledger.total.total_tokens <= ledger.token_budget + ledger.max_output_tokens


def test_max_steps_ends_the_turn(server, key, tmp_path):
    server.add(*[reply(None, tool_call("read_shared", {"what": "summaries"})) for _ in range(10)])
    ledger = make_ledger()
    summary = LLMAgent(CODER, make_client(server)).turn(make_toolbox(tmp_path, ledger, CODER), TurnContext(brief="go"),
                                                        max_steps=3)
    assert len(server.requests) == 3 and "max_steps=3" in summary and ledger.total.calls == 3


def test_malformed_tool_calls_get_an_error_and_the_loop_goes_on(server, key, tmp_path):
    server.add(
        reply(None, tool_call("rm_rf", {"path": "/"}, "bad1"), tool_call("write_kernel", "{not json", "bad2")),
        reply(None, tool_call("write_kernel", {"name": "v1.py"}, "bad3"),
              tool_call("run_check", {"name": "v1.py", "workloads": "zz"}, "bad4")),
        reply("giving up for now"),
    )
    ledger = make_ledger()
    summary = LLMAgent(CODER, make_client(server)).turn(make_toolbox(tmp_path, ledger, CODER), TurnContext(brief="go"))
    assert len(server.requests) == 3 and "answered" in summary and "giving up" in summary
    results = {m["tool_call_id"]: m["content"] for r in server.requests for m in r["messages"] if m["role"] == "tool"}
    assert results["bad1"].startswith("error:") and "rm_rf" in results["bad1"]
    assert results["bad2"].startswith("error:") and "JSON" in results["bad2"]
    assert results["bad3"].startswith("error: bad arguments for write_kernel")
    assert results["bad4"].startswith("error:")
    # The malformed call went back to the model exactly as it was sent.
    sent = server.requests[1]["messages"][2]["tool_calls"][1]["function"]
    assert sent == {"name": "write_kernel", "arguments": "{not json"}


# ----------------------------------------------------------------------------- retries and errors


def test_retries_on_429_500_503_and_timeout_then_success(server, key):
    sleeps = []
    server.add(error(429, retry_after=0), error(500), error(503), delay(2.0, reply("late")),
               reply("ok", prompt_tokens=7, completion_tokens=3))
    client = make_client(server, timeout_s=0.3, max_retries=4)
    client._sleep = sleeps.append
    got = client.complete([{"role": "user", "content": "x"}], max_tokens=64)
    assert got.content == "ok" and (got.usage.prompt_tokens, got.usage.completion_tokens) == (7, 3)
    assert len(server.requests) == 5 and client.requests_sent == 5
    assert len(sleeps) == 4 and all(0 < s <= 0.01 for s in sleeps)


def test_retries_run_out_with_one_line_llm_error(server, key):
    server.add(error(500), error(503), error(429, retry_after=0))
    with pytest.raises(LLMError) as info:
        make_client(server, max_retries=2).complete([{"role": "user", "content": "x"}], max_tokens=64)
    assert len(server.requests) == 3
    msg = str(info.value)
    assert "\n" not in msg and "fake-model" in msg and "after 3 attempts" in msg and "RateLimitError" in msg


@pytest.mark.parametrize("status", [400, 401])
def test_non_retryable_errors_fail_at_once(server, key, status):
    server.add(error(status, "nope"), reply("never reached"))
    with pytest.raises(LLMError) as info:
        make_client(server).complete([{"role": "user", "content": "x"}], max_tokens=64)
    assert len(server.requests) == 1
    msg = str(info.value)
    assert "\n" not in msg and "not retried" in msg and "nope" in msg
    if status == 401:
        assert "EVOTEAM_TEST_LLM_KEY" in msg


# ----------------------------------------------------------------------------- the journal


def test_journal_replays_a_conversation_without_the_server(server, key, tmp_path):
    journal = tmp_path / "llm_journal.jsonl"
    server.add(*write_and_submit_script())
    ledger1 = make_ledger()
    summary1 = LLMAgent(CODER, make_client(server, journal)).turn(make_toolbox(tmp_path, ledger1, CODER), TurnContext(brief="go"))
    assert len(server.requests) == 3 and len(journal.read_text().splitlines()) == 3

    # A resumed run: same workspace, new ledger, client and server (which would fail every request).
    with FakeOpenAI() as fresh:
        ledger2 = make_ledger()
        evaluations = []
        client2 = make_client(fresh, journal)
        summary2 = LLMAgent(CODER, client2).turn(make_toolbox(tmp_path, ledger2, CODER, evaluations), TurnContext(brief="go"))
        assert fresh.requests == [] and client2.requests_sent == 0
        assert evaluations == []  # the evaluation comes from the workspace journal too
    assert summary2 == summary1
    assert ledger2.total.to_json() == ledger1.total.to_json()
    assert ledger2.by_role == ledger1.by_role


def test_journal_survives_a_cut_last_line_and_replays_in_order(server, key, tmp_path):
    journal = tmp_path / "j.jsonl"
    msgs = [{"role": "user", "content": "same question"}]
    server.add(reply("first", prompt_tokens=11), reply("second", prompt_tokens=12))
    client = make_client(server, journal)
    assert [client.complete(msgs, max_tokens=64).content for _ in range(2)] == ["first", "second"]
    with open(journal, "a") as fh:
        fh.write('{"request_hash": "abc", "reply": {"cont')  # a process killed mid-write

    server.add(reply("third", prompt_tokens=13))
    again = make_client(server, journal)
    replies = [again.complete(msgs, max_tokens=64) for _ in range(3)]
    assert [r.content for r in replies] == ["first", "second", "third"]
    assert [r.replayed for r in replies] == [True, True, False]
    assert [r.usage.prompt_tokens for r in replies] == [11, 12, 13]
    assert len(server.requests) == 3
    lines = journal.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["request_hash"] for line in lines)
    # A different request (other max_tokens) is not answered from the journal.
    server.add(reply("fourth"))
    assert not again.complete(msgs, max_tokens=32).replayed


def test_resume_after_skips_the_calls_of_the_restored_ledger(server, key, tmp_path):
    journal = tmp_path / "j.jsonl"
    msgs = [{"role": "user", "content": "state unchanged"}]
    server.add(reply("A"), reply("B"), reply("C"))
    first = make_client(server, journal)
    assert [first.complete(msgs, max_tokens=64).content for _ in range(3)] == ["A", "B", "C"]
    resumed = make_client(server, journal)
    resumed.resume_after(1)  # the checkpoint's ledger had counted the first call
    server.add(reply("D"))
    got = [resumed.complete(msgs, max_tokens=64) for _ in range(3)]
    assert [(r.content, r.replayed) for r in got] == [("B", True), ("C", True), ("D", False)]
    assert len(server.requests) == 4


# ----------------------------------------------------------------------------- preflight


def test_preflight_missing_key_is_one_line(monkeypatch):
    monkeypatch.delenv("EVOTEAM_TEST_LLM_KEY", raising=False)
    client = LLMClient(Cfg(model="openai/gpt-4o-mini"))
    with pytest.raises(LLMConfigError) as info:
        client.preflight()
    msg = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in msg
    assert "EVOTEAM_TEST_LLM_KEY" in msg and "export" in msg
    monkeypatch.setenv("EVOTEAM_TEST_LLM_KEY", "")
    with pytest.raises(LLMConfigError):
        client.preflight()
    # A local server needs no key.
    LLMClient(Cfg(model="openai/gpt-4o-mini", api_base="http://127.0.0.1:8000/v1")).preflight()
    monkeypatch.setenv("EVOTEAM_TEST_LLM_KEY", "k")
    client.preflight()
    # No api_key_env: the provider's own variable must be set.
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMConfigError, match=r"\$ANTHROPIC_API_KEY") as info:
        LLMClient(Cfg(model="anthropic/claude-3-5-sonnet-20240620", api_key_env=None)).preflight()
    assert "\n" not in str(info.value) and "llm.api_key_env" in str(info.value)


def test_preflight_unknown_model_is_one_line(key, capsys):
    with pytest.raises(LLMConfigError) as info:
        LLMClient(Cfg(model="definitely-not-a-model")).preflight()
    msg = str(info.value)
    assert "\n" not in msg and "definitely-not-a-model" in msg and "openai/" in msg
    with pytest.raises(LLMConfigError, match="llm.model is empty"):
        LLMClient(Cfg(model="")).preflight()
    assert capsys.readouterr().out == ""  # litellm's provider list is not printed


def test_local_server_without_key_variable(server, monkeypatch):
    server.add(reply("ok"))
    client = LLMClient(Cfg(api_base=server.url, api_key_env=None))
    client.preflight()
    assert client.complete([{"role": "user", "content": "x"}], max_tokens=8).content == "ok"
    assert server.headers[0]["authorization"] == "Bearer EMPTY"


# ----------------------------------------------------------------------------- the LLM supervisor


CURRENT = TeamSpec(name="fixed2", roles=(RoleSpec("coder", "generalist", model="openai/fake-model"),
                                         RoleSpec("fixer", "debugger", model="openai/fake-model")))
PROPOSAL = {
    "name": "explore-then-tune",
    "roles": [
        {"name": "explorer1", "kind": "explorer", "model": "openai/fake-model", "instructions": "try split-K",
         "tools": ["write_kernel", "run_check", "run_benchmark", "read_shared"], "reads": ["failure_log"],
         "workload_group": ""},
        {"name": "tuner1", "kind": "tuner", "model": "openai/other-model", "instructions": "tune block sizes",
         "tools": ["write_kernel", "run_benchmark", "read_shared", "submit"], "reads": ["best_kernel", "summaries"]},
    ],
    "topology": "sequential", "order": ["explorer1", "tuner1"], "stall_evaluations": 4,
    "reason": "the generalist repeats one design", "expected_effect": "a new design family within 4 evaluations",
}
MODELS = ["openai/fake-model", "openai/other-model"]


def test_the_supervisor_may_give_a_role_to_a_coding_agent_cli(server, key):
    roles = [{**PROPOSAL["roles"][0], "agent": "claude_code"}, PROPOSAL["roles"][1]]
    server.add(reply(None, tool_call("propose_team", {**PROPOSAL, "roles": roles})))
    spec = propose_redesign(make_client(server), make_ledger(), CURRENT, "stalled", MODELS)
    assert [r.agent for r in spec.roles] == ["claude_code", "llm"]
    agent_schema = server.requests[0]["tools"][0]["function"]["parameters"]["properties"]["roles"]["items"]
    assert agent_schema["properties"]["agent"]["enum"] == ["llm", "claude_code", "codex", "command"]
    assert TeamSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_propose_redesign_builds_an_evolved_spec(server, key):
    server.add(reply(None, tool_call("propose_team", PROPOSAL), prompt_tokens=900, completion_tokens=150,
                     cached_tokens=300, reasoning_tokens=50))
    ledger = make_ledger()
    spec = propose_redesign(make_client(server), ledger, CURRENT, "12 evaluations, best 1.02x, 5 mismatches", MODELS)
    assert spec is not None and spec.parent == CURRENT.spec_id and spec.spec_id != CURRENT.spec_id
    assert spec.name == "explore-then-tune" and [r.name for r in spec.turn_order] == ["explorer1", "tuner1"]
    assert spec.roles[0].reads == ("failure_log",) and spec.roles[1].model == "openai/other-model"
    assert spec.roles[1].tools == ("write_kernel", "run_benchmark", "read_shared", "submit")
    assert spec.stall_evaluations == 4 and spec.reason.startswith("the generalist")
    assert TeamSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    usage = ledger.by_role[f"{CURRENT.spec_id}/supervisor"]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == (
        900, 150, 300, 50)
    sent = server.requests[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["propose_team"]
    assert "5 mismatches" in sent["messages"][-1]["content"] and CURRENT.spec_id in sent["messages"][0]["content"]


@pytest.mark.parametrize("bad", [
    {**PROPOSAL, "roles": [{**PROPOSAL["roles"][0], "kind": "wizard"}]},
    {**PROPOSAL, "roles": [{**PROPOSAL["roles"][0], "model": "openai/gpt-9"}]},
    {**PROPOSAL, "topology": "mesh"},
    {**PROPOSAL, "order": ["nobody"]},
    {**PROPOSAL, "roles": []},
    {**PROPOSAL, "roles": [PROPOSAL["roles"][0], PROPOSAL["roles"][0]]},
    {**PROPOSAL, "stall_evaluations": 0},
    {**PROPOSAL, "roles": [{**PROPOSAL["roles"][0], "agent": "cursor"}]},
    "{not json",
    None,  # no tool call at all
])
def test_propose_redesign_returns_none_for_an_invalid_proposal(server, key, bad):
    step = reply("I would keep the team") if bad is None else reply(None, tool_call("propose_team", bad))
    server.add(step)
    ledger = make_ledger()
    assert propose_redesign(make_client(server), ledger, CURRENT, "report", MODELS) is None
    assert ledger.by_role[f"{CURRENT.spec_id}/supervisor"].calls == 1  # the call was spent all the same


# ----------------------------------------------------------------------------- the context limit


def test_a_conversation_over_its_context_limit_has_older_steps_summarised_never_code_cut():
    from evoteam.team.llm_agent import ContextTooSmall, fit

    source = "\n".join(f"    x{i} = {i}  # line {i}" for i in range(200))
    table = "\n".join(f"row {i} | 1.00x" for i in range(300))

    def call(name, args, cid):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    messages = [{"role": "system", "content": "brief " * 200}, {"role": "user", "content": "state"},
                {"role": "assistant", "content": None, "tool_calls": [call("write_kernel", {"name": "v1.py",
                                                                                            "source": source}, "a")]},
                {"role": "tool", "tool_call_id": "a", "content": "written v1.py\n" + table},
                {"role": "assistant", "content": None, "tool_calls": [call("write_kernel", {"name": "v2.py",
                                                                                            "source": source}, "b")]},
                {"role": "tool", "tool_call_id": "b", "content": "written v2.py\n" + table}]

    def count(msgs):
        return len(json.dumps(msgs)) // 4

    before = count(messages)
    fit(messages, before, count)  # within the limit: nothing changes
    assert count(messages) == before
    fit(messages, count(messages[:2]) + count(messages[4:]) + 200, count)
    assert count(messages) <= count(messages[:2]) + count(messages[4:]) + 200
    old_args = json.loads(messages[2]["tool_calls"][0]["function"]["arguments"])
    assert old_args["source"] == "<200 lines of v1.py, as written then; summarised>"  # replaced whole
    assert messages[3]["content"].startswith("written v1.py [an older result, summarised: 300 more lines]")
    latest = json.loads(messages[4]["tool_calls"][0]["function"]["arguments"])
    assert latest["source"] == source and messages[5]["content"].endswith(table)  # the latest step stays whole
    assert messages[0]["content"] == "brief " * 200  # the brief stays whole
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in messages)  # nothing extra sent
    with pytest.raises(ContextTooSmall, match="llm.context_tokens") as info:
        fit(messages, 50, count)
    assert "\n" not in str(info.value)


def test_the_runs_seed_is_the_sampling_seed_where_the_provider_takes_one(server, key):
    """Repeated runs of one configuration differ in their seed; an OpenAI-protocol server is sent it as `seed`."""
    server.add(reply("a"))
    server.add(reply("b"))
    client = LLMClient(Cfg(api_base=server.url), backoff_base_s=0.001, backoff_cap_s=0.01, seed=7)
    client.complete([{"role": "user", "content": "x"}], max_tokens=10)
    make_client(server).complete([{"role": "user", "content": "x"}], max_tokens=10)
    assert server.requests[0]["seed"] == 7 and "seed" not in server.requests[1]
