"""Judges forked by the judge server (evoteam/harness/judge_server.py): one server per calling process serves
every evaluation, each judge sees the caller's environment as of its request, and nothing outlives a caller
that is killed."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from planted import variant

from evoteam.harness.executor import LocalExecutor, evaluate
from evoteam.harness.guard import descendants
from evoteam.harness.judge_server import JudgeServer
from evoteam.harness.model import EvalRequest, Status
from evoteam.task import load_task

from conftest import REPO

CANDIDATES = REPO / "tests" / "data" / "candidates"


@pytest.fixture(scope="module")
def uuid():
    return load_task("mla_decode").scaled_workloads("small")[0].uuid


def _request(uuid: str, candidate: Path = CANDIDATES / "mla_torch.py") -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=str(candidate), workloads=[uuid], scale="small",
                       warmup=0, reps=2)


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_one_server_forks_every_judge_of_a_process_each_with_the_callers_environment_then(uuid, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.delenv("EVOTEAM_JUDGE_SERVER", raising=False)
    first = evaluate(_request(uuid), timeout_s=120)
    server = JudgeServer.get(sys.executable)
    assert server.proc.poll() is None and not server.gone
    # the judge reads EVOTEAM_JUDGE_PROFILE as it runs: set now, after the server started, it must reach the judge
    profile = tmp_path / "judge-profile.txt"
    monkeypatch.setenv("EVOTEAM_JUDGE_PROFILE", str(profile))
    second = evaluate(_request(uuid), timeout_s=120)
    assert [r.status for r in first.results + second.results] == [Status.PASSED] * 2, second.log_tail
    assert JudgeServer.get(sys.executable) is server  # the same server, still running
    assert "cumulative" in profile.read_text()
    # the judge's own start: forked, not a PyTorch import (1.5 s and more)
    assert second.phases["judge start"] < 1.0, second.phases


def test_switched_off_each_judge_is_a_process_of_its_own(uuid, monkeypatch):
    monkeypatch.setenv("EVOTEAM_JUDGE_SERVER", "0")
    result = evaluate(_request(uuid), timeout_s=120)
    assert result.results[0].status == Status.PASSED, result.log_tail


CALLER = """
import json, sys, time
from pathlib import Path
from evoteam.harness.executor import LocalExecutor
from evoteam.harness.model import EvalRequest
request = EvalRequest(**json.loads(sys.argv[1]))
judge = LocalExecutor().start(request, Path(sys.argv[2]))
print(json.dumps({"server": judge.forked.server.proc.pid, "judge": judge.forked.pid}), flush=True)
time.sleep(600)
"""


def test_a_killed_caller_takes_its_server_its_judges_and_their_runners_with_it(uuid, tmp_path):
    """SIGKILL leaves no clean-up to the caller: its server sees the socket close and ends, and its judges (its
    children, PR_SET_PDEATHSIG) end their runners on the way out."""
    from dataclasses import asdict

    hang = tmp_path / "hang.py"
    hang.write_text(variant("hangs", "", "    while True:\n        pass\n"))
    request = asdict(_request(uuid, hang))
    workdir = tmp_path / "judge"
    workdir.mkdir()
    caller = subprocess.Popen([sys.executable, "-c", CALLER, json.dumps(request), str(workdir)],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "EVOTEAM_JUDGE_SERVER": "1"})
    pids = json.loads(caller.stdout.readline())
    progress = workdir / "progress.jsonl"
    deadline = time.monotonic() + 120
    while not (progress.exists() and '"start"' in progress.read_text()):  # the judge is on the workload
        assert time.monotonic() < deadline and caller.poll() is None, (workdir / "judge.log").read_text()[-2000:]
        time.sleep(0.1)
    time.sleep(2)  # its runners are in the hanging call
    group = set(descendants(pids["judge"]))
    assert pids["judge"] in group and len(group) > 2, "the judge's runners run under it"
    caller.send_signal(signal.SIGKILL)
    caller.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in group | {pids["server"]}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in group | {pids["server"]} if _alive(p)]


def test_a_bench_that_returned_left_no_server_or_judge_running(uuid, tmp_path, monkeypatch):
    """`evoteam.bench` (here called as a function, as a script driving it would) leaves nothing running once it has
    returned: its judge server and the judges it forked have ended (on a shared GPU host a server still there after
    every bench had returned was taken for a leak, 2026-12-06). The server is not the caller's child: it is found by
    its command line."""
    from evoteam import bench

    monkeypatch.delenv("EVOTEAM_JUDGE_SERVER", raising=False)
    before = _servers_of(os.getpid())
    code = bench.main([str(CANDIDATES / "mla_torch.py"), "--task", "mla_decode", "--hardware", "cpu", "--scale",
                       "small", "--workloads", uuid, "--warmup", "0", "--reps", "2", "--json", str(tmp_path / "r.json")])
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["status"] == "PASSED"
    assert _servers_of(os.getpid()) <= before, "a judge server outlived the bench that started it"


def _servers_of(parent: int) -> set[int]:
    """The judge servers this process started that are still running."""
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"evoteam.harness.judge_server" in cmdline and _alive(int(proc.name)) and _parent_is(int(proc.name), parent):
            found.add(int(proc.name))
    return found


def _parent_is(pid: int, parent: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1]) == parent
    except OSError:
        pass
    return False


def test_a_server_that_ended_is_replaced(uuid, monkeypatch):
    monkeypatch.delenv("EVOTEAM_JUDGE_SERVER", raising=False)
    server = JudgeServer.get(sys.executable)
    server.proc.kill()
    server.proc.wait()
    deadline = time.monotonic() + 10
    while not server.gone and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.gone
    result = LocalExecutor()(_request(uuid), timeout_s=120)
    assert result.results[0].status == Status.PASSED, result.log_tail
    assert JudgeServer.get(sys.executable) is not server


def test_a_forked_judge_leaves_the_folder_the_server_started_in_out_of_the_sandbox(uuid, tmp_path, monkeypatch):
    """The server's sys.path starts with the folder it started in; a judge's must start with its own caller's working
    directory, as a fresh `python -m` judge's does, or the sandbox mounts the server's folder for the candidate (the
    red team's escape_read_other_agents read a file there)."""
    monkeypatch.delenv("EVOTEAM_JUDGE_SERVER", raising=False)
    started_in, caller_in = tmp_path / "server-cwd", tmp_path / "caller-cwd"
    started_in.mkdir()
    caller_in.mkdir()
    secret = started_in / "secret.txt"
    secret.write_text("another agent's notes\n")
    peek = tmp_path / "peek.py"
    peek.write_text(variant("raises where it sees the file", "import os\n",
                            f"    if os.path.exists({str(secret)!r}):\n        raise RuntimeError('saw it')\n"))
    monkeypatch.setattr(JudgeServer, "_servers", {})
    monkeypatch.chdir(started_in)
    server = JudgeServer.get(sys.executable)
    try:
        monkeypatch.chdir(caller_in)
        result = evaluate(dataclasses.replace(_request(uuid, peek), static_scan=False), timeout_s=120)
        assert JudgeServer.get(sys.executable) is server
        assert result.results[0].status == Status.PASSED, result.results[0].detail
    finally:
        server.proc.kill()
        server.proc.wait()


def test_a_forked_judge_runs_on_the_cpus_its_caller_may_use_at_its_request(uuid, monkeypatch):
    monkeypatch.delenv("EVOTEAM_JUDGE_SERVER", raising=False)
    JudgeServer.get(sys.executable)  # started with every CPU allowed
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        result = evaluate(_request(uuid), timeout_s=120)
    finally:
        os.sched_setaffinity(0, allowed)
    assert result.results[0].status == Status.PASSED, result.log_tail
    assert result.sandbox["cpus"].split(" ")[0] == str(min(allowed)), result.sandbox


PRESTARTER = """
import atexit, json, os, sys, threading
import torch
from evoteam.harness import judge_server
from evoteam.harness.executor import LocalExecutor
from evoteam.harness.model import EvalRequest
atexit.register(lambda: open(sys.argv[2], "a").write(f"{os.getpid()}\\n"))  # the caller's, at its end alone
judge_server.prestart()
(server,) = judge_server.JudgeServer._servers.values()
result = LocalExecutor()(EvalRequest(**json.loads(sys.argv[1])), timeout_s=120)
threading.Thread(target=threading.Event().wait, daemon=True).start()
print(json.dumps({"pid": os.getpid(), "forked": server.forked, "status": result.results[0].status.value,
                  "refusal": judge_server.fork_refusal(sys.executable),
                  "cpu_build": torch.version.cuda is None and torch.version.hip is None}), flush=True)
"""


def test_a_command_forks_its_server_from_itself_where_nothing_stands_in_the_way(uuid, tmp_path):
    """`python -m evoteam` forks its judge server from itself (judge_server.prestart): no second import of PyTorch and the
    harness. Its judges evaluate as a started server's do, none of them runs the caller's exit callbacks, and a
    caller with a thread running (or a GPU build of PyTorch) is refused: its server would start afresh."""
    ended = tmp_path / "exit-callbacks.txt"
    done = subprocess.run([sys.executable, "-c", PRESTARTER, json.dumps(dataclasses.asdict(_request(uuid))), str(ended)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EVOTEAM_JUDGE_SERVER": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == "PASSED" and seen["forked"] == seen["cpu_build"], seen
    assert seen["refusal"] == ("threads are running" if seen["cpu_build"] else "a GPU build of PyTorch"), seen
    assert ended.read_text().split() == [str(seen["pid"])]  # not the server's, nor a judge's
