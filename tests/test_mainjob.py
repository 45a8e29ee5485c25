"""The main job as a newcomer meets it: what a run records, what resume= does with overrides and
with a finished run, what a failed start leaves behind, and the supervisor's redesign limit."""

import json
import re

import pytest
import yaml

TINY = ("tracking=none", "task.workloads=[00cb2bc2]", "budget.max_evaluations=2", "team=single", "seed=5")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One small finished run (CPU): its folder and the CLI's output."""
    from conftest import run_evoteam

    cwd = tmp_path_factory.mktemp("job")
    run_dir = cwd / "runs" / "one"
    result = run_evoteam(*TINY, f"run_dir={run_dir}", cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir, result


def test_progress_is_one_short_line_per_evaluation_and_the_log_file_has_the_rest(finished_run):
    """Newcomer defect 8: progress lines were 250-300 characters of raw Python dicts."""
    run_dir, result = finished_run
    lines = [line for line in result.stdout.splitlines() if line.startswith("  eval ")]
    assert len(lines) == 2, result.stdout
    assert all(len(line) <= 120 and "{" not in line for line in lines), lines
    assert " left] " in lines[1]  # the time so far, and an estimate of what is left
    assert "PASSED" in lines[0] and " 1 wl " in lines[0]
    log = (run_dir / "run.log").read_text()
    assert log.count("\n") >= 2 and "{'" in log  # the full account of each turn: the point tried, every figure
    assert f"full account: {run_dir / 'run.log'}" in result.stdout


def test_the_estimate_counts_the_final_measurement_and_the_final_shows_its_progress(finished_run):
    """Issue 54: after "~0:00 left" the final measurement ran 13-29 s with no output. Now the last evaluation's
    estimate includes it, and it prints a line per evaluation with what is left of it."""
    _, result = finished_run
    out = result.stdout
    last = [line for line in out.splitlines() if line.startswith("  eval ")][-1]
    left = re.search(r", ~(\d+):(\d\d) left\]", last)
    assert left and int(left[1]) * 60 + int(left[2]) > 0, last  # the final measurement is still to come
    plan = re.search(r"\nfinal: 1 evaluation\(s\): 1 kernel\(s\) on 1 workload\(s\), ~\d+:\d\d\n", out)
    line = re.search(r"\n  final 1/1 \[\d+:\d\d, ~0:00 left\]  \S+  1 wl  PASSED \d\.\d{3}x\n", out)
    assert plan and line and plan.start() < line.start() < out.index("\nworkload  shape"), out[-3000:]


def test_the_saved_configuration_records_what_the_run_resolved_to(finished_run):
    run_dir, _ = finished_run
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["hardware"]["name"] == "cpu"  # not "auto"
    assert saved["timing_mode"] == "cputime"  # what a CPU run measures with, not the GPU default
    assert saved["task"]["scale"] == "small" and saved["seed"] == 5


def test_resume_refuses_an_override_that_changes_what_the_run_measures(finished_run, evoteam_cli):
    run_dir, _ = finished_run
    result = evoteam_cli(f"resume={run_dir}", "task=kda_prefill", cwd=run_dir.parent)
    assert result.returncode == 2, result.stdout[-2000:]
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, line
    assert "task=kda_prefill differs from the run's task.name=mla_decode, " in line, line
    assert "{" not in line and len(line) < 400, line  # the differing keys, not both configuration sections whole
    result = evoteam_cli(f"resume={run_dir}", "budget.max_evaluations=50", cwd=run_dir.parent)
    assert result.returncode == 2 and "budget.max_evaluations" in result.stderr, result.stderr


def test_resuming_a_finished_run_shows_its_table_and_measures_nothing(finished_run, evoteam_cli):
    run_dir, _ = finished_run
    before = (run_dir / "final" / "results.json").read_text()
    attempts = (run_dir / "workspace" / "attempts.jsonl").read_text()
    result = evoteam_cli(f"resume={run_dir}", "tracking=none", cwd=run_dir.parent)  # a safe override
    assert result.returncode == 0, result.stderr[-2000:]
    assert "finished earlier" in result.stdout and "remeasure=true" in result.stdout
    # the table as measured, its shape column filled (the run's scaled-down workload, not the full-scale list's)
    assert re.search(r"\n[0-9a-f]{8}  batch_size=1 num_kv_indices=\d+ +PASSED", result.stdout), result.stdout
    assert (run_dir / "final" / "results.json").read_text() == before
    assert (run_dir / "workspace" / "attempts.jsonl").read_text() == attempts


@pytest.mark.parametrize("args, words", [
    (("task.workloads=[ffffffff]",), "matches no workload"),  # refused inside the job, after Hydra made its folder
    (("executor=docker", "executor.docker_host=unix:///nowhere/no-engine.sock"), "no container engine answers"),
    (("llm=litellm", "llm.model=openai/gpt-4o-mini", "llm.api_key_env=EVOTEAM_NO_SUCH_KEY"), "EVOTEAM_NO_SUCH_KEY"),
    # The README's own example: the key's variable follows the model's provider, not OpenAI's.
    (("llm=litellm", "llm.model=anthropic/claude-sonnet-4-5"), "$ANTHROPIC_API_KEY"),
])
def test_a_run_that_cannot_start_leaves_no_folder(tmp_path, evoteam_cli, args, words):
    result = evoteam_cli("hardware=cpu", "tracking=none", *args, cwd=tmp_path,
                         env={"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": "set-but-not-asked-for"})
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "OPENAI_API_KEY" not in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert not (tmp_path / "runs").exists(), sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


def test_an_llm_team_runs_end_to_end_against_a_server_speaking_the_provider_protocol(tmp_path, evoteam_cli):
    """The LLM side built from the llm config group (client, agents, journal, brief): a real HTTP server
    answers one agent's turn that checks a wrong kernel, then writes the seed kernel and submits it. The
    first request carries the whole brief; tool results carry the checker's words and the per-workload
    table; every token is counted; with the evaluation budget spent no further call is made."""
    from fake_openai import FakeOpenAI, reply, tool_call

    from conftest import REPO

    seed = (REPO / "kernels" / "mla_decode" / "seed_triton.py").read_text()
    zeros = ("def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
             "    output.zero_()\n    lse.zero_()\n")
    script = [reply(None, tool_call("write_kernel", {"name": "zeros.py", "source": zeros}),
                    tool_call("run_check", {"name": "zeros.py"}), prompt_tokens=100, completion_tokens=20),
              reply(None, tool_call("write_kernel", {"name": "v1.py", "source": seed}),
                    prompt_tokens=200, completion_tokens=30),
              reply(None, tool_call("submit", {"name": "v1.py", "note": "the seed, as a start"}),
                    prompt_tokens=300, completion_tokens=10)]
    with FakeOpenAI(script) as server:
        result = evoteam_cli("tracking=none", "task.workloads=[00cb2bc2]", "budget.max_evaluations=2", "team=single",
                             "seed=5", "llm=litellm", "llm.model=openai/fake-model", f"llm.api_base={server.url}",
                             "llm.api_key_env=EVOTEAM_TEST_KEY", f"run_dir={tmp_path / 'run'}", cwd=tmp_path,
                             env={"EVOTEAM_TEST_KEY": "dummy"})
        requests = list(server.requests)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(requests) == 3 and all(r["model"] == "fake-model" for r in requests), requests
    assert "LiteLLM" not in result.stdout + result.stderr  # litellm's own INFO lines stay out of the run's output
    assert "llm openai/fake-model" in result.stdout and "tokens) " not in result.stdout
    assert "tokens 660 (prompt 600, completion 60)" in result.stdout, result.stdout[-2000:]
    # The brief: the interface with every argument, the rules, the reference, the seed to start from, the budget.
    system, user = requests[0]["messages"][0]["content"], requests[0]["messages"][1]["content"]
    for words in ("def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse)",
                  "- kpe_cache: bfloat16 [num_pages, page_size=1, head_dim_kpe=64]", "Outputs (preallocated",
                  "- lse: float32 [batch_size, num_qo_heads=16]", "atol 0.01", "2eac5b85", "Counted as cheating",
                  "## The reference implementation", "Triton kernels run under TRITON_INTERPRET=1"):
        assert words in system, words
    assert "Budget left:" in user and "2 of 2 evaluations" in user and "the task's seed kernel" in user
    assert "@triton.jit" in user  # the seed's source, whole
    assert (tmp_path / "run" / "brief.md").read_text() in system
    # Tool results: the checker's own words for a failure, the per-workload table for a benchmark.
    check = requests[1]["messages"][-1]["content"]
    assert check.startswith("check ") and ": mismatch" in check.splitlines()[0], check
    assert check.splitlines()[1].split()[:3] == ["workload", "shape", "status"], check  # the per-workload table
    assert len(re.findall(r"expected -?[0-9.]+ ", check)) == 1 and "atol 0.01 and > rtol 0.01" in check, check  # the checker
    journal = [json.loads(line) for line in (tmp_path / "run" / "llm_journal.jsonl").read_text().splitlines()]
    assert len(journal) == 3
    attempts = [json.loads(a) for a in (tmp_path / "run" / "workspace" / "attempts.jsonl").read_text().splitlines()]
    assert [a["status"] for a in attempts] == ["mismatch", "PASSED"], attempts
    submitted = requests[2]["messages"][-1]["content"]  # the write_kernel result; the submit's is in the log
    assert submitted.startswith("written v1.py"), submitted


def test_a_finished_run_exports_to_a_dataset_flashinfer_bench_loads(finished_run, tmp_path):
    """Issue 21: every kernel the final traces name is a solution of the run (final/solutions), and the
    export of the run loads in flashinfer-bench's own loader with nothing rejected."""
    fib_data = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench comes with `make test`")
    from evoteam.export import main as export_main

    run_dir, _ = finished_run
    traces = [json.loads(line) for line in (run_dir / "final" / "traces.jsonl").read_text().splitlines()]
    assert export_main([str(tmp_path / "ds"), "--run", str(run_dir)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(tmp_path / "ds"))
    (definition,) = trace_set.definitions
    assert len(trace_set.traces[definition]) == len(traces) > 0
    named = {t["solution"] for t in traces}
    assert named == {s.name for s in trace_set.solutions[definition]}
    assert all(name.startswith("mla_decode_evoteam_") for name in named)  # unique across tasks
    assert {t.workload.uuid for t in trace_set.traces[definition]} <= {w.workload.uuid for w in trace_set.workloads[definition]}


def _readme_run_folder_table() -> dict[str, str]:
    """README.md's table of what lands in the run directory: path -> what it says of it."""
    from conftest import REPO

    text = (REPO / "README.md").read_text().split("Everything lands in the run directory", 1)[1]
    table = text.split("\n\n")[1]
    rows = {}
    for line in table.splitlines()[2:]:
        path, what = line.strip().strip("|").split("|", 1)
        rows[path.strip().strip("`")] = what.strip()
    return rows


def test_the_readme_names_every_file_a_run_writes_and_says_when_the_others_come(finished_run):
    """Issue 54: the README named files a default run does not write (llm_journal.jsonl, the strategy ledger,
    notes) as if every run did, and left out one it does (an empty __main__.log, now not written at all)."""
    run_dir, _ = finished_run
    rows = _readme_run_folder_table()

    def entries(folder):
        return {p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()}

    written = entries(run_dir)
    assert written <= set(rows), f"written but not in README.md's table: {written - set(rows)}"
    for path in set(rows) - written:  # tracking=none here: no mlflow_run.json; the offline policy: no LLM's files
        assert "only with" in rows[path], f"README.md lists {path} as if every run wrote it"
    named = set(re.findall(r"`([^`]+)`", rows["workspace/"]))
    conditional = set(re.findall(r"`([^`]+)`", rows["workspace/"].split("only with", 1)[1]))
    inside = entries(run_dir / "workspace")
    assert inside <= named, f"in workspace/ but not in its row: {inside - named}"
    assert named - inside <= conditional, f"named as always written, not written: {named - inside - conditional}"
