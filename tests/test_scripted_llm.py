"""scripts/scripted_llm.py and its MLA turns (issue 42, item 3, the CPU part): the kernels the scripted model writes
pass evoteam's checker, and an LLM team run against the server ends with both kernels verified, a token ledger equal
to the usage the server reported and a transcript of every request; scripts/gpu_llm_team.sh runs the same on a CPU
with the run tracked in MLflow (its traces, the transcript as an artifact)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import importlib.util
import json
import math
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from conftest import REPO, ROUNDS

SCRIPTS = REPO / "scripts"
TURNS = SCRIPTS / "llm_turns" / "mla_decode"


def scripted_llm():
    """scripts/scripted_llm.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("scripted_llm", SCRIPTS / "scripted_llm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("scripted_llm", module)
    spec.loader.exec_module(module)
    return module


def kernel(name: str):
    from evoteam.task import load_module_from_path

    return load_module_from_path(TURNS / name, f"scripted_{Path(name).stem}").run


# --------------------------------------------------------------------------- the kernels


@pytest.mark.parametrize("name, picks", [("v1.py", (0, 1)), ("v2.py", (1, 3))])
def test_the_scripted_kernels_pass_the_checker_on_small_mla_workloads(name, picks):
    """v1 on batch 1 (8 and 108 tokens); v2 on batch 1 with 108 tokens (4 slices merged) and batch 16 with 1857
    (4 slices; short requests leave slices empty)."""
    from evoteam.harness.check import check_kernel
    from evoteam.task import load_task

    task = load_task("mla_decode")
    workloads = task.scaled_workloads("small")
    for i in picks:
        result = check_kernel(task, workloads[i], kernel(name), trials=3, seed=20261205 + i, device="cpu")
        assert result.passed, (name, workloads[i].uuid, result.failure)


@pytest.mark.parametrize("name", ["v1.py", "v2.py"])
def test_the_scripted_kernels_give_an_empty_request_output_zero_and_lse_minus_infinity(name):
    """Three requests of 70, 0 and 130 tokens (v2: 3 slices each, all empty for the second), against the reference."""
    from evoteam.task import load_task

    reference = load_task("mla_decode").reference_module.run
    g = torch.Generator().manual_seed(5)
    pages = 256
    q_nope = torch.randn(3, 16, 512, generator=g).to(torch.bfloat16)
    q_pe = torch.randn(3, 16, 64, generator=g).to(torch.bfloat16)
    ckv = torch.randn(pages, 1, 512, generator=g).to(torch.bfloat16)
    kpe = torch.randn(pages, 1, 64, generator=g).to(torch.bfloat16)
    indptr = torch.tensor([0, 70, 70, 200], dtype=torch.int32)
    indices = torch.randperm(pages, generator=g)[:200].to(torch.int32)
    scale = 1.0 / math.sqrt(192)
    output = torch.full((3, 16, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((3, 16), float("nan"), dtype=torch.float32)
    kernel(name)(q_nope, q_pe, ckv, kpe, indptr, indices, scale, output, lse)
    ref_out, ref_lse = reference(q_nope, q_pe, ckv, kpe, indptr, indices, scale)
    assert torch.equal(output[1], torch.zeros_like(output[1])) and torch.isneginf(lse[1]).all()
    torch.testing.assert_close(output.float(), ref_out.float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)


def test_v2_splits_long_requests_and_keeps_short_batches_whole():
    from evoteam.task import load_module_from_path

    v2 = load_module_from_path(TURNS / "v2.py", "scripted_v2_splits")
    assert v2.num_splits(1, 8) == 1 and v2.num_splits(1, 108) == 4 and v2.num_splits(3, 200) == 3
    assert v2.num_splits(1, 2708) == v2.MAX_SPLITS and v2.num_splits(64, 75145) == 5


# --------------------------------------------------------------------------- the server


def test_the_server_answers_from_its_script_counts_usage_and_logs_every_request(tmp_path):
    from evoteam.llm import _litellm

    litellm = _litellm()  # as evoteam calls it: offline price map, quiet

    module = scripted_llm()
    script = module.load_script("mla_decode")
    assert [c["name"] for r in script for c in r.tool_calls] == ["write_kernel", "run_check", "submit",
                                                                 "write_kernel", "run_check", "submit"]
    assert json.loads(script[0].tool_calls[0]["arguments"])["source"] == (TURNS / "v1.py").read_text()
    transcript = tmp_path / "t.jsonl"
    messages = [{"role": "user", "content": "x" * 400}, {"role": "tool", "tool_call_id": "c", "content": "check: ok\nmore"}]
    with module.ScriptedLLM(script[:1] + script[1:2], transcript) as server:
        first = litellm.completion(model="openai/scripted", api_base=server.url, api_key="k", messages=messages[:1],
                                   max_tokens=100)
        second = litellm.completion(model="openai/scripted", api_base=server.url, api_key="k", messages=messages,
                                    max_tokens=4096)
        with pytest.raises(litellm.InternalServerError):
            litellm.completion(model="openai/scripted", api_base=server.url, api_key="k", messages=messages,
                               max_tokens=10, max_retries=0)
        import urllib.request

        with urllib.request.urlopen(server.url + "/models", timeout=5) as response:
            assert json.loads(response.read())["data"][0]["id"] == "scripted"
    assert first.usage.prompt_tokens == math.ceil(len(json.dumps(messages[:1]) + "[]") / 4)
    assert first.usage.completion_tokens == 100  # clamped to max_tokens, as a real server does
    assert [c.function.name for c in first.choices[0].message.tool_calls] == ["write_kernel", "run_check"]
    assert second.choices[0].message.content.startswith("The check said: check: ok.")
    assert second.usage.completion_tokens == module.completion_tokens(
        module.Reply(second.choices[0].message.content, script[1].tool_calls))
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [(x["request"], x["reply"], x["status"]) for x in lines] == [(1, 1, 200), (2, 2, 200), (3, None, 500)]
    assert lines[1]["body"]["messages"] == messages
    usage = module.transcript_usage(transcript)
    assert usage == {"requests": 3, "answered": 2, "prompt_tokens": first.usage.prompt_tokens + second.usage.prompt_tokens,
                     "completion_tokens": first.usage.completion_tokens + second.usage.completion_tokens}


@pytest.mark.slow
def test_the_device_script_runs_an_llm_team_on_a_cpu_tracked_in_mlflow(tmp_path):
    """scripts/gpu_llm_team.sh as the device runs it, on this CPU (one small workload): the server on a free port,
    `python -m evoteam ... llm=litellm tracking=mlflow` against it, both kernels verified, the token ledger equal to
    the usage the server reported, a transcript of every request, the run's LLM traces and the transcript in MLflow,
    all packed into OUT_DIR."""
    out, root = tmp_path / "out", tmp_path / "root"
    env = {**os.environ, "HARDWARE": "cpu", "WORKLOADS": "[00cb2bc2]", "PYTHON": sys.executable, "ROOT": str(root),
           "EXTRA": ROUNDS}
    env.pop("TRITON_INTERPRET", None)  # the harness sets it for the candidates
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_llm_team.sh"), str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=400)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "=== the run finished (ledger check exit 0)" in said, said[-4000:]
    assert "stopped; 4 requests, 4 of 4 scripted replies used" in said, said[-3000:]
    run = root / "run"
    attempts = [json.loads(a) for a in (run / "workspace" / "attempts.jsonl").read_text().splitlines()]
    assert [(a["kind"], a["origin"]["llm_file"], a["status"]) for a in attempts] == [
        ("check", "v1.py", "PASSED"), ("benchmark", "v1.py", "PASSED"),
        ("check", "v2.py", "PASSED"), ("benchmark", "v2.py", "PASSED")], attempts
    # The transcript: every request, answered from the script in order, the brief first, the tools' words after.
    lines = [json.loads(line) for line in (out / "transcript.jsonl").read_text().splitlines()]
    assert [(x["request"], x["reply"], x["status"]) for x in lines] == [(i, i, 200) for i in (1, 2, 3, 4)]
    assert all(x["body"]["model"] == "scripted" for x in lines)
    assert (run / "brief.md").read_text() in lines[0]["body"]["messages"][0]["content"]
    assert "the task's seed kernel" in lines[0]["body"]["messages"][1]["content"]
    checked = lines[1]["body"]["messages"][-1]["content"].splitlines()[0]
    assert checked.startswith("check ") and checked.endswith(": PASSED"), checked
    assert f"The check said: {checked}." in lines[1]["response"]["choices"][0]["message"]["content"]
    assert "best verified kernel" in lines[2]["body"]["messages"][1]["content"]  # turn 2 starts from v1
    # The token ledger is the usage the server reported, call by call.
    served = scripted_llm().transcript_usage(out / "transcript.jsonl")
    total = json.loads((run / "state.json").read_text())["tokens_total"]
    assert (total["prompt_tokens"], total["completion_tokens"], total["calls"]) == (
        served["prompt_tokens"], served["completion_tokens"], 4)
    console = (out / "console.log").read_text()
    assert console.startswith("=== ") and "llm=litellm" in console.splitlines()[0]  # the command, first
    assert (f"tokens {served['prompt_tokens'] + served['completion_tokens']} (prompt {served['prompt_tokens']}, "
            f"completion {served['completion_tokens']})") in console
    assert "matches the server's usage" in console and "4 LLM trace(s) linked to the run" in console, console[-2000:]
    assert len((run / "llm_journal.jsonl").read_text().splitlines()) == 4
    assert json.loads((run / "token_ledger.json").read_text())["served"] == served
    # v2 beats v1 (about 10x under the interpreter): the final table's kernel is v2
    (final,) = (run / "final" / "kernels").iterdir()
    assert final.read_text() == (TURNS / "v2.py").read_text()
    # MLflow: the run, its artifacts (the transcript among them), all in the archive that comes back
    assert "llm/transcript.jsonl" in console and "llm/token_ledger.json" in console
    assert sorted(p.name for p in out.iterdir()) == ["console.log", "llm-team.tgz", "transcript.jsonl"]
    with tarfile.open(out / "llm-team.tgz") as archive:
        names = archive.getnames()
    assert "run/final/results.json" in names and "mlflow/evoteam-mlflow.db" in names, names[:20]
    assert any(n.startswith("mlflow/mlartifacts/") and n.endswith("/llm/transcript.jsonl") for n in names), names
