"""Coding-agent CLIs as team members, with the real CLIs (npm, pinned in tests/clis/package.json,
installed by `make clis`) driven against loopback servers that speak their providers' protocols: the
Anthropic Messages API for Claude Code, the OpenAI Responses API for Codex. Scripted model turns write
a kernel file in the member's folder and call evoteam's tool; the harness evaluates it; the ledger's
tokens equal what the server reported; a CLI over budget is stopped and its work so far kept."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from conftest import REPO, ROUNDS

CLIS = REPO / "tests" / "clis" / "node_modules" / ".bin"
TINY = ("tracking=none", "task.workloads=[00cb2bc2]", "seed=5", ROUNDS)


def _cli(name: str) -> str:
    path = CLIS / name
    if not path.exists():
        if os.environ.get("EVOTEAM_REQUIRE_CLIS"):
            pytest.fail(f"{path} is missing and EVOTEAM_REQUIRE_CLIS is set: make clis")
        pytest.skip(f"the {name} CLI is not installed: make clis (npm)")
    return str(path)


def _write(name: str, source: str) -> str:
    return f"cat > {name} <<'EVOTEAM_KERNEL'\n{source}\nEVOTEAM_KERNEL"


def _tokens(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"tokens (\d+) \(prompt (\d+), completion (\d+)\)", stdout)
    assert m, stdout[-2000:]
    return int(m[1]), int(m[2]), int(m[3])


def _claude_code(evoteam_cli, server, run_dir: Path, *args: str):
    """The main job with one Claude Code agent (team=claude_code) talking to `server`."""
    return evoteam_cli(*TINY, "team=claude_code", f"agent.binary={_cli('claude')}", "agent.model=claude-sonnet-4-5",
                       f"agent.base_url={server.base_url}", f"run_dir={run_dir}", *args, cwd=run_dir.parent,
                       env={"ANTHROPIC_API_KEY": "sk-ant-test"}, timeout=900)


def _stopped_by_budget(evoteam_cli, tmp_path: Path, script, budget: str, why: str) -> tuple[Path, float]:
    """The job with a scripted Claude Code run until `budget` stops it: its run folder and its seconds."""
    from fake_anthropic import FakeAnthropic

    run_dir = tmp_path / "run"
    started = time.monotonic()
    with FakeAnthropic(script) as server:
        result = _claude_code(evoteam_cli, server, run_dir, budget)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert why in result.stdout, result.stdout[-2000:]
    return run_dir, time.monotonic() - started


def _member(run_dir: Path) -> Path:
    (member,) = (run_dir / "workspace" / "members").iterdir()
    return member


@pytest.fixture(scope="module")
def seed_source():
    return (REPO / "kernels" / "mla_decode" / "seed_triton.py").read_text()


def test_claude_code_writes_a_kernel_that_the_harness_evaluates_and_every_token_is_counted(
        tmp_path, evoteam_cli, seed_source):
    from fake_anthropic import FakeAnthropic, ToolUse, Turn, Usage

    script = [Turn(tool_uses=[ToolUse("Bash", {"command": _write("v1.py", seed_source)})],
                   usage=Usage(1200, 300, 100, 50)),
              Turn(tool_uses=[ToolUse("Bash", {"command": "./evoteam-tool bench v1.py"})], usage=Usage(1500, 40)),
              Turn(tool_uses=[ToolUse("Bash", {"command": "./evoteam-tool submit v1.py the seed as a start"})],
                   usage=Usage(1700, 30, 0, 200)),
              Turn(text="Submitted v1.py.", usage=Usage(1800, 10))]
    run_dir = tmp_path / "run"
    with FakeAnthropic(script) as server:
        result = _claude_code(evoteam_cli, server, run_dir, "budget.max_evaluations=1")
        sums = server.usage_sums(kinds=("main", "side"))
        main = server.main_requests()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(main) == 4, [r["path"] for r in server.requests]
    member = _member(run_dir)
    assert (member / "v1.py").read_text().strip() == seed_source.strip()  # the kernel landed in the workspace
    assert "evoteam-tool" in json.dumps(main[2]["body"])  # the tool's reply came back to the model
    bench_reply = json.dumps(main[2]["body"]["messages"][-1])
    assert "benchmark" in bench_reply and "PASSED" in bench_reply and "speedup" in bench_reply, bench_reply[:2000]
    attempts = [json.loads(a) for a in (run_dir / "workspace" / "attempts.jsonl").read_text().splitlines()]
    assert [(a["kind"], a["status"], a["role"]) for a in attempts] == [("benchmark", "PASSED", "agent")]
    prompt = sums["input_tokens"] + sums["cache_creation_input_tokens"] + sums["cache_read_input_tokens"]
    assert _tokens(result.stdout) == (prompt + sums["output_tokens"], prompt, sums["output_tokens"])
    # The CLI's own list price (sonnet-4-5: $3 in, $15 out, $3.75 cache write, $0.30 cache read per 1M): $0.02475
    assert re.search(r"cost \$0\.024[78]", result.stdout), result.stdout[-500:]
    brief = main[0]["body"]
    assert "BRIEF.md" in json.dumps(brief["messages"][0]) and (member / "BRIEF.md").is_file()
    assert "- kpe_cache: bfloat16" in (member / "BRIEF.md").read_text()
    assert "claude_code CLI" in (run_dir / "run.log").read_text()


def test_a_claude_code_run_over_its_token_budget_is_stopped_and_its_work_kept(tmp_path, evoteam_cli, seed_source):
    from fake_anthropic import FakeAnthropic, ToolUse, Turn, Usage

    script = [Turn(tool_uses=[ToolUse("Bash", {"command": _write("v1.py", seed_source)})], usage=Usage(400, 100)),
              Turn(tool_uses=[ToolUse("Bash", {"command": "sleep 30"})], usage=Usage(5000, 50), sleep_mid=20),
              Turn(text="never reached", usage=Usage(10, 1))]
    run_dir = tmp_path / "run"
    with FakeAnthropic(script) as server:
        result = _claude_code(evoteam_cli, server, run_dir, "budget.tokens=3000")
        served = len(server.main_requests())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert served == 2  # stopped inside the second call, long before its 20 s stall ended
    assert "token budget spent" in result.stdout, result.stdout[-2000:]
    assert (_member(run_dir) / "v1.py").read_text().strip() == seed_source.strip()  # its work so far stays
    total, _, _ = _tokens(result.stdout)
    assert total == 400 + 100 + 5000  # the stopped call's prompt was charged as it arrived


def test_a_cli_past_the_evaluation_budget_is_told_so_and_stopped(tmp_path, evoteam_cli, seed_source):
    from fake_anthropic import ToolUse, Turn, Usage

    two = _write("v1.py", seed_source) + "\n" + _write("v2.py", seed_source)
    script = [Turn(tool_uses=[ToolUse("Bash", {"command": two + "\necho '# v2' >> v2.py"})], usage=Usage(300, 50)),
              Turn(tool_uses=[ToolUse("Bash", {"command": "./evoteam-tool bench v1.py"})], usage=Usage(400, 20)),
              Turn(tool_uses=[ToolUse("Bash", {"command": "./evoteam-tool bench v2.py; sleep 20"})],
                   usage=Usage(500, 20)),
              Turn(text="never reached", usage=Usage(10, 1), sleep_before=20)]
    run_dir, seconds = _stopped_by_budget(evoteam_cli, tmp_path, script, "budget.max_evaluations=1",
                                          "evaluation budget spent: 1 of 1")
    assert seconds < 120  # stopped, not waiting out its sleeps
    attempts = (run_dir / "workspace" / "attempts.jsonl").read_text().splitlines()
    assert len(attempts) == 1  # v2 was refused, not evaluated
    assert (_member(run_dir) / "v2.py").is_file()  # and the CLI's work stays


def test_a_cli_still_running_when_the_wall_time_budget_ends_is_stopped(tmp_path, evoteam_cli, seed_source):
    from fake_anthropic import ToolUse, Turn, Usage

    script = [Turn(tool_uses=[ToolUse("Bash", {"command": _write("v1.py", seed_source)})], usage=Usage(300, 50)),
              Turn(text="still thinking", usage=Usage(400, 20), sleep_before=300)]
    # The test waits out the budget, so it is as short as leaves the CLI time to start and write v1.py first: that
    # took under a second of the budget on the 2-core development VM, beside four CPU hogs too (45 s made the test 51 s
    # long; 25 s leaves a loaded CI machine room)
    run_dir, seconds = _stopped_by_budget(evoteam_cli, tmp_path, script, "budget.max_wall_time_s=25",
                                          "wall-time budget spent")
    assert seconds < 200  # not the model's 300 s
    assert (_member(run_dir) / "v1.py").is_file()


def _until_the_command_ends(final: dict):
    """A scripted codex turn: while the last command's output says it is still running, poll its session again;
    then `final`."""
    from fake_openai_responses import make_usage

    def turn(body: dict) -> dict:
        outputs = [i for i in body.get("input", []) if i.get("type") == "function_call_output"]
        running = re.search(r"Process running with session ID (\d+)", json.dumps(outputs[-1:]))
        if running is None:
            return final
        return {"output": [{"call": "write_stdin", "args": {"session_id": int(running.group(1)), "chars": "",
                                                             "yield_time_ms": 300000}}],
                "usage": make_usage(2800, 1800, 10, 0), "again": True}

    return turn


def test_codex_writes_a_kernel_that_the_harness_evaluates_and_every_token_is_counted(
        tmp_path, evoteam_cli, seed_source):
    from fake_openai_responses import FakeResponsesServer, make_usage

    script = [{"output": [{"call": "exec_command", "args": {"cmd": _write("v1.py", seed_source), "login": False}}],
               "usage": make_usage(2000, 500, 300, 100)},
              # codex answers a command still running after yield_time_ms (at most 30 s) with "Process running" and
              # its session id; a loaded CI machine took longer than that, so the model then polls the session
              # (write_stdin with nothing to write waits up to 300 s) until the command's output is there
              {"output": [{"call": "exec_command", "args": {"cmd": "./evoteam-tool bench v1.py", "login": False,
                                                            "yield_time_ms": 30000}}],
               "usage": make_usage(2600, 1500, 40, 0)},
              _until_the_command_ends({"output": [{"text": "v1.py passes and is benchmarked."}],
                                       "usage": make_usage(3000, 2000, 20, 5)})]
    run_dir = tmp_path / "run"
    with FakeResponsesServer(script) as server:
        result = evoteam_cli(*TINY, "team=codex", f"agent.binary={_cli('codex')}", "agent.model=gpt-5.5",
                             f"agent.base_url={server.base_url}", "agent.api_key_env=EVOTEAM_TEST_CODEX_KEY",
                             "budget.max_evaluations=1", f"run_dir={run_dir}", cwd=tmp_path,
                             env={"EVOTEAM_TEST_CODEX_KEY": "sk-test"}, timeout=900)
        turns = server.turn_requests()
        delivered = server.delivered_usage()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(turns) >= 3, [r.get("path") for r in server.requests]
    assert (_member(run_dir) / "v1.py").read_text().strip() == seed_source.strip()
    outputs = [i for i in turns[-1]["body"]["input"] if i.get("type") == "function_call_output"]
    assert "benchmark" in json.dumps(outputs[-1]) and "PASSED" in json.dumps(outputs[-1]), outputs[-1]
    attempts = [json.loads(a) for a in (run_dir / "workspace" / "attempts.jsonl").read_text().splitlines()]
    assert [(a["kind"], a["status"]) for a in attempts] == [("benchmark", "PASSED")]
    prompt = sum(u["input_tokens"] for u in delivered)
    completion = sum(u["output_tokens"] for u in delivered)
    assert _tokens(result.stdout) == (prompt + completion, prompt, completion)


@pytest.mark.parametrize("binary, words, leaves_run", [
    ("/nonexistent/claude", "is not found; install it", False),  # refused before the run writes anything
    ("/bin/false", "failed before any model call", True),  # ends the run in one line, not a loop of failed turns
])
def test_a_cli_that_is_missing_or_cannot_start_stops_the_run_in_one_line(tmp_path, evoteam_cli, binary, words,
                                                                         leaves_run):
    run_dir = tmp_path / "runs" / "one"
    result = evoteam_cli(*TINY, "team=claude_code", f"agent.binary={binary}", f"run_dir={run_dir}", cwd=tmp_path,
                         timeout=300)
    assert result.returncode == 2 and words in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert run_dir.exists() == leaves_run


def test_any_cli_from_a_command_template_works_in_the_workspace_and_calls_the_tools(tmp_path, evoteam_cli,
                                                                                     seed_source):
    """agent=command: a stand-in CLI (a shell script) reads its prompt file, writes a kernel and benchmarks it
    with ./evoteam-tool, confined like the others: it cannot write outside its member folder."""
    cli = tmp_path / "cli"
    cli.mkdir()
    (cli / "seed.py").write_text(seed_source)
    script = cli / "mycli"
    script.write_text("#!/bin/bash\nset -u\ngrep -q evoteam-tool \"$1\" || exit 3\n"
                      f"cp {cli / 'seed.py'} v1.py\n./evoteam-tool bench v1.py > bench.txt\n"
                      f"touch {cli / 'escaped'} 2>/dev/null; touch ../outside 2>/dev/null; exit 0\n")
    script.chmod(0o755)
    run_dir = tmp_path / "run"
    result = evoteam_cli(*TINY, "team=single", "agent=command", f"agent.command='{script} {{prompt_file}}'",
                         "budget.max_evaluations=1", f"run_dir={run_dir}", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    member = _member(run_dir)
    assert "PASSED" in (member / "bench.txt").read_text()
    attempts = [json.loads(a) for a in (run_dir / "workspace" / "attempts.jsonl").read_text().splitlines()]
    assert [(a["kind"], a["status"]) for a in attempts] == [("benchmark", "PASSED")]
    assert not (cli / "escaped").exists() and not (member.parent / "outside").exists()  # read-only outside its folder
