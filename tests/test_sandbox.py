"""The runner's sandbox on its own (evoteam.harness.sandbox): what a process inside sees, what it
can write, reach and leave behind."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evoteam.harness import guard, sandbox
from evoteam.harness.sandbox import SandboxedProcess, SandboxSpec, SandboxUnavailable

REPO = Path(__file__).resolve().parent.parent

PROBE = r'''
import json, os, socket, sys
out = {"uid": os.getuid(), "pid": os.getpid(), "interfaces": sorted(n for _, n in socket.if_nameindex())}
def can_write(folder):
    try:
        with open(os.path.join(folder, "probe.txt"), "w") as f:
            f.write("x")
        return "ok"
    except OSError as exc:
        return exc.strerror
for label, folder in {"scratch": "/scratch", "tmp": "/tmp", "root": "/", "package": sys.argv[1],
                      "checkout": sys.argv[2], "candidate": "/candidate"}.items():
    out["write_" + label] = can_write(folder)
out["kernels_visible"] = os.path.exists(os.path.join(sys.argv[2], "kernels"))
# the host's scheduling: its cgroup tree (the runner's own CPU count and freezer state) and system-wide counters
out["cgroup_tree"] = sorted(os.listdir("/sys/fs/cgroup")) if os.path.isdir("/sys/fs/cgroup") else []
out["host_counters"] = {p: len(open(p).read()) for p in ("/proc/stat", "/proc/loadavg", "/proc/interrupts")
                        if os.path.exists(p)}
out["home"] = os.environ.get("HOME")
out["env_keys"] = sorted(os.environ)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=2).close()
    out["connect"] = "connected"
except OSError as exc:
    out["connect"] = exc.strerror or str(exc)
if os.fork() == 0:  # a detached grandchild that would outlive its parent
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep-" + sys.argv[4], "600"])
    os._exit(0)
os.wait()
print("PROBE " + json.dumps(out), flush=True)
'''


def _available():
    caps = sandbox.capabilities()
    if caps.missing():
        pytest.skip("no sandbox here: " + "; ".join(caps.missing()))


def test_what_a_sandboxed_process_sees_and_can_do(tmp_path, monkeypatch):
    _available()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    scratch, cache = tmp_path / "scratch", tmp_path / "cache"
    scratch.mkdir()
    cache.mkdir()
    os.chmod(scratch, 0o777)
    candidate = tmp_path / "candidate"  # the candidate's sources, as the judge writes them
    candidate.mkdir()
    (candidate / "cand.py").write_text("x = 1\n")
    token = f"sbx{os.getpid()}"
    spec = SandboxSpec(scratch=scratch, cache=cache, candidate=candidate, device="cpu", memory_bytes=2 << 30,
                       max_pids=64)
    os.environ["EVOTEAM_TEST_SECRET"] = "the judge's"
    # a device setting the baseline's trusted runner inherits with the judge's environment: the candidate's sees it too
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    proc = SandboxedProcess([sys.executable, "-c", PROBE, str(REPO / "evoteam"), str(REPO), str(port), token],
                            spec, [], tmp_path / "log.txt")
    assert proc.proc.wait(timeout=60) == 0, proc.logs()
    line = next(x for x in proc.logs().splitlines() if x.startswith("PROBE "))
    seen = json.loads(line.removeprefix("PROBE "))
    assert seen["uid"] == 65534 and seen["pid"] < 10  # an unprivileged user in its own PID namespace
    assert seen["interfaces"] == ["lo"] and seen["connect"] != "connected"
    assert seen["write_scratch"] == "ok" and seen["write_tmp"] == "ok"
    for place in ("root", "package", "candidate"):
        assert seen[f"write_{place}"] in ("Read-only file system", "Permission denied"), (place, seen)
    # The checkout is not there at all: a write at its path (possible where it lies under /tmp, the
    # sandbox's own memory) lands nowhere on the host.
    assert not (REPO / "probe.txt").exists() and not (REPO / "evoteam" / "probe.txt").exists()
    assert not seen["kernels_visible"]  # the task's reference is not there to read
    # nothing of the host's scheduling: the cgroup tree empty, the system-wide counters read as empty files
    assert seen["cgroup_tree"] == [] and set(seen["host_counters"].values()) <= {0}, seen
    assert "cpu weight" in proc.record["cgroup"] or "no cpu" in proc.record["cgroup"], proc.record
    assert "EVOTEAM_TEST_SECRET" not in seen["env_keys"] and seen["home"] == "/scratch/home"
    assert "PYTORCH_CUDA_ALLOC_CONF" in seen["env_keys"]
    assert not (REPO / "probe.txt").exists() and not (REPO / "evoteam" / "probe.txt").exists()
    proc.close()  # ends what the runner left: the detached grandchild too
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", f"sleep-{token}"], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes outlived the sandbox: {left}"
    server.close()


def test_a_missing_layer_refuses_a_strict_evaluation_and_is_recorded_when_weak(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOTEAM_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.capabilities.cache_clear()
    try:
        spec = SandboxSpec(scratch=tmp_path, cache=None, candidate=None, device="cpu", memory_bytes=1 << 30,
                           max_pids=64)
        with pytest.raises(SandboxUnavailable, match=r"\(executor.sandbox=weak, bench --sandbox weak\)"):
            SandboxedProcess([sys.executable, "-c", "pass"], spec, [], tmp_path / "log.txt")
        spec.mode = "weak"
        proc = SandboxedProcess([sys.executable, "-c", "pass"], spec, [], tmp_path / "log.txt")
        assert proc.proc.wait(timeout=60) == 0
        assert proc.record["mode"].startswith("weak: no namespaces")
        proc.close()
    finally:
        sandbox.capabilities.cache_clear()


HOG = r'''
import sys, time
held = []
for _ in range(64):  # up to 2 GiB, 32 MiB at a time, each page touched
    held.append(bytearray(32 << 20))
    print("held", len(held) * 32, "MiB", flush=True)
    time.sleep(0.02)
print("NOT STOPPED", flush=True)
'''


def _unenforced_cgroup(monkeypatch):
    """A host like gVisor: the runner's cgroup takes its memory limit and does not enforce it."""
    made = sandbox.Cgroup.__init__

    def lifted(self, version, name, memory_bytes, max_pids, cpus=None):
        made(self, version, name, memory_bytes, max_pids, cpus)
        if version == "v2":
            (self.dirs[0] / "memory.max").write_text("max")
        for d in self.dirs:
            if (d / "memory.limit_in_bytes").exists():
                (d / "memory.limit_in_bytes").write_text("-1")

    monkeypatch.setattr(sandbox.Cgroup, "__init__", lifted)


@pytest.mark.parametrize("host", ["limit_not_enforced", "no_cgroup"])
def test_the_judge_holds_a_runner_to_its_memory_limit_where_the_kernel_does_not(tmp_path, monkeypatch, host):
    if host == "limit_not_enforced":
        _available()
        _unenforced_cgroup(monkeypatch)
        mode = "strict"
    else:
        monkeypatch.setattr(sandbox, "_cgroup_support", lambda: (None, "none on this host (test)"))
        sandbox.capabilities.cache_clear()
        mode = "weak"
    try:
        spec = SandboxSpec(scratch=tmp_path, cache=None, candidate=None, device="cpu", memory_bytes=384 << 20,
                           max_pids=64, mode=mode)
        t0 = time.monotonic()
        proc = SandboxedProcess([sys.executable, "-c", HOG], spec, [], tmp_path / "log.txt")
        code = proc.proc.wait(timeout=60)
        logs = proc.logs()
        assert code != 0 and "NOT STOPPED" not in logs, logs
        assert proc.out_of_memory() and proc.guard.reason.startswith("memory: the runner held"), proc.guard.reason
        held = max(int(line.split()[1]) for line in logs.splitlines() if line.startswith("held"))
        assert held < 1024, f"it reached {held} MiB before the guard ended it"  # 384 MiB + a poll's worth
        assert time.monotonic() - t0 < 30
        assert "guard" in proc.record
        proc.close()
    finally:
        sandbox.capabilities.cache_clear()


def test_the_guard_ends_a_runner_that_starts_too_many_processes(tmp_path):
    from evoteam.harness.guard import ResourceGuard, descendants

    spawn = "import subprocess, time\nkids = [subprocess.Popen(['sleep', '60']) for _ in range(40)]\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", spawn], start_new_session=True)
    guard = ResourceGuard(lambda: descendants(child.pid), lambda: os.killpg(child.pid, 9), memory_bytes=0,
                          max_processes=10)
    try:
        assert child.wait(timeout=30) == -9
        assert guard.reason.startswith("processes: the runner ran") and not guard.out_of_memory
    finally:
        guard.stop()
        if child.poll() is None:
            os.killpg(child.pid, 9)


def test_a_runners_processes_share_one_cpu_weight_however_many_sessions_they_start(tmp_path):
    """Eight busy processes in sessions of their own, started by a runner, beside one busy process outside it on the
    same CPU: the outside one keeps about half the CPU (per-session autogroups gave it a ninth)."""
    _available()
    if not sandbox.capabilities().cgroup or sandbox.capabilities().cgroup == "container":
        pytest.skip("no cgroup for the runner here")
    cpu = max(os.sched_getaffinity(0))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o777)
    crowd = ("import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n        os.setsid()\n"
             "        while True:\n            pass\ntime.sleep(60)\n")
    spec = SandboxSpec(scratch=scratch, cache=None, candidate=None, device="cpu", memory_bytes=2 << 30, max_pids=64,
                       cpus=frozenset({cpu}))
    proc = SandboxedProcess([sys.executable, "-c", crowd], spec, [], tmp_path / "log.txt")
    if "no cpu weight" in proc.record["cgroup"]:
        proc.close()
        pytest.skip(f"no cpu controller here: {proc.record['cgroup']}")
    burn = (f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.monotonic() + 2\n"
            "while time.monotonic() < end:\n    pass\nprint(time.process_time())")
    outside = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        share = float(outside.communicate(timeout=30)[0]) / 2.0
    finally:
        proc.close()
    assert share > 0.3, f"the process outside the runner got {share:.0%} of its CPU"


def test_a_frozen_runner_whose_judge_was_killed_is_ended_by_the_next_judge(tmp_path):
    """A runner is frozen between messages; a judge killed outright (SIGKILL: no unwinding) leaves it frozen, and a
    frozen process cannot die on its own. The next judge's reaper ends it and removes its cgroup."""
    _available()
    if not sandbox.capabilities().cgroup or sandbox.capabilities().cgroup == "container":
        pytest.skip("no cgroup for the runner here")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o777)
    judge = (
        "import sys, os, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from evoteam.harness.sandbox import SandboxedProcess, SandboxSpec\n"
        f"spec = SandboxSpec(scratch=Path({str(scratch)!r}), cache=None, candidate=None, device='cpu',\n"
        "                   memory_bytes=1 << 30, max_pids=16)\n"
        "proc = SandboxedProcess([sys.executable, '-c', 'import time; time.sleep(600)'], spec, [],\n"
        f"                       Path({str(tmp_path / 'log.txt')!r}))\n"
        "time.sleep(1)\n"
        "proc.freeze(True)\n"
        "print(' '.join(map(str, proc.cgroup.pids())), proc.cgroup.dirs[0].name, flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", judge], capture_output=True, text=True, timeout=60).stdout.split()
    *pids, name = out
    assert pids, "the runner did not start"
    assert all(os.path.exists(f"/proc/{p}") for p in pids), "the runner should outlive its killed judge, frozen"
    assert sandbox.reap_orphans() >= 1
    time.sleep(0.5)
    assert not any(os.path.exists(f"/proc/{p}") and "zombie" not in open(f"/proc/{p}/status").read().lower()
                   for p in pids)
    assert not any(d.name == name for d in (sandbox.CGROUP_ROOT / "freezer" / "evoteam").glob("runner-*")) \
        if (sandbox.CGROUP_ROOT / "freezer").is_dir() else True


@pytest.mark.parametrize("cpuset", [True, False])
def test_a_runner_starts_on_the_judges_cpus_and_pin_holds_it_to_its_one(tmp_path, monkeypatch, cpuset):
    """A CPU target's runner starts (imports PyTorch: trusted code alone) on the judge's CPUs, and `pin` holds every
    thread of it to the evaluation's CPU: by its cpuset, or by each thread's affinity where it has none."""
    _available()
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    if not cpuset:
        monkeypatch.setattr(sandbox.Cgroup, "_confine_cpus", lambda *a: (_ for _ in ()).throw(OSError("none here")))
    cpu = max(allowed)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o777)
    threads = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(60)\n"
    spec = SandboxSpec(scratch=scratch, cache=None, candidate=None, device="cpu", memory_bytes=2 << 30, max_pids=64,
                       cpus=frozenset({cpu}), start_cpus=frozenset(allowed))
    proc = SandboxedProcess([sys.executable, "-c", threads], spec, [], tmp_path / "log.txt")
    try:
        assert ("(cpuset)" in proc.record["cpus"]) == cpuset, proc.record

        def affinities():
            return {tid: os.sched_getaffinity(tid) for tid in guard.threads(proc._pids())}

        deadline = time.monotonic() + 30
        while len(guard.threads(proc._pids())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(cpus == allowed for cpus in affinities().values())
        proc.pin()
        pinned = affinities()
        assert len(pinned) >= 2 and all(cpus == {cpu} for cpus in pinned.values()), pinned
    finally:
        proc.close()


def test_a_trusted_runner_forked_from_the_judge_gets_what_a_started_one_gets(tmp_path):
    """The baseline's runner on a CPU target is forked from the judge (evoteam.harness.fork), not started afresh: it
    still gets a session of its own, its cgroup and start CPUs, the out-of-memory killer's first choice, its log,
    only the descriptors passed to it, the environment it was given, its scratch folder, a default SIGTERM; and its
    exit code is its main's."""
    _available()
    import forked_probe  # noqa: F401 - imported already, as the judge has imported the runner's modules

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    held = os.open(tmp_path / "held.txt", os.O_CREAT | os.O_WRONLY)  # a descriptor of the judge's: not the runner's
    parent, child = socket.socketpair()
    passed = child.fileno()
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # the judge's handler: not the runner's
    allowed = frozenset(os.sched_getaffinity(0))
    spec = SandboxSpec(scratch=scratch, cache=None, candidate=None, device="cpu", memory_bytes=0, max_pids=64,
                       trusted=True, fork=True, env={"EVOTEAM_PROBE": "1"}, cpus=frozenset({max(allowed)}),
                       start_cpus=allowed)
    report = tmp_path / "report.json"
    try:
        proc = SandboxedProcess([sys.executable, "-m", "forked_probe", str(report)], spec, [passed], tmp_path / "log.txt")
        try:
            assert proc.forked and proc.record["started"] == "forked from the judge"
            assert proc.proc.wait(30) == 7
            seen = json.loads(report.read_text())
        finally:
            proc.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
        os.close(held)
        parent.close()
        child.close()
    assert seen["pid"] == proc.proc.pid and seen["sid"] == seen["pid"]  # its own session
    assert seen["cwd"] == str(scratch) and seen["env"]["EVOTEAM_PROBE"] == "1"
    assert seen["env"]["PYTHONUNBUFFERED"] == "1" and seen["env"].get("PATH") == os.environ.get("PATH")
    assert {0, 1, 2, passed} < set(seen["fds"]) and len(seen["fds"]) == 5, seen["fds"]  # and the listing's
    if proc.cgroup is not None:
        assert proc.cgroup.dirs[0].name in seen["cgroup"], seen["cgroup"]
    assert set(seen["cpus"]) == allowed and seen["oom_score_adj"] == "1000"
    assert seen["sigterm"] == str(signal.SIG_DFL) and seen["argv"] == ["forked_probe", str(report)]
    assert (tmp_path / "log.txt").read_text() == "probe: written\n"
