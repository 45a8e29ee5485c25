"""tests/warm_launcher.py: a command forked from the warm process is the command a fresh `python -m` runs (the same
output and exit code), in a process of its own (its pid, working directory, environment, argv, sys.path[0], a NumPy
generator of its own), and a request whose environment the warm process's imports would have read runs fresh."""

import json
import os
import subprocess
import sys
import time

import pytest
import warm_launcher

PROBE = r"""
import json, os, sys
import numpy
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "argv": sys.argv[1:],
                  "path0": sys.path[0], "probe": os.environ.get("PROBE_VALUE"), "stdin": sys.stdin.read(),
                  "random": float(numpy.random.random()), "name": __name__}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


def _probe(tmp_path, env_extra: dict, *args):
    (tmp_path / "probe_module.py").write_text(PROBE)
    env = {**os.environ, **env_extra}
    result = warm_launcher.run(list(args), cwd=tmp_path, env=env, module="probe_module", timeout=120)
    return result, json.loads(result.stdout)


@pytest.mark.skipif(os.environ.get("EVOTEAM_TESTS_FRESH") == "1", reason="EVOTEAM_TESTS_FRESH=1: nothing is forked")
def test_a_forked_command_has_its_own_process_folder_environment_argv_and_generator(tmp_path):
    first, one = _probe(tmp_path, {"PROBE_VALUE": "a", "PROBE_EXIT": "3"}, "x", "--y")
    second, two = _probe(tmp_path, {"PROBE_VALUE": "b"})
    assert first.returncode == 3 and second.returncode == 0
    assert first.stderr == second.stderr == "to stderr\n"
    assert one["ppid"] != os.getpid() and one["ppid"] == two["ppid"]  # forked by the warm process, not started here
    assert one["pid"] != two["pid"] and os.getpid() not in (one["pid"], two["pid"])
    assert one["cwd"] == two["cwd"] == one["path0"] == str(tmp_path)
    assert one["argv"] == ["x", "--y"] and two["argv"] == [] and one["name"] == "__main__"
    assert (one["probe"], two["probe"]) == ("a", "b") and one["stdin"] == ""
    assert one["random"] != two["random"]  # NumPy's global generator reseeded in each child


def test_an_environment_read_at_import_runs_fresh(tmp_path):
    _, forked = _probe(tmp_path, {})
    _, fresh = _probe(tmp_path, {"OMP_NUM_THREADS": "3"})
    assert fresh["ppid"] == os.getpid()  # subprocess.run's child: the warm process imported torch with another value
    assert os.environ.get("EVOTEAM_TESTS_FRESH") == "1" or forked["ppid"] != os.getpid()


@pytest.mark.parametrize("args", [("--cfg", "job", "hardware=cpu", "task=kda_prefill"), ("hardware=nonexist",),
                                  ("hardware=cpu", "tracking=none", "task.workloads=[ffffffff]")])
def test_evoteam_forked_says_what_it_says_started_afresh(tmp_path, args):
    warm = warm_launcher.run(list(args), cwd=tmp_path, timeout=300)
    fresh = subprocess.run([sys.executable, "-m", "evoteam", *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_command_past_its_timeout_is_killed(tmp_path):
    (tmp_path / "sleeper.py").write_text("import os, pathlib, time\n"
                                         "pathlib.Path('pid').write_text(str(os.getpid()))\ntime.sleep(600)\n")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        warm_launcher.run([], cwd=tmp_path, module="sleeper", timeout=3)
    assert time.monotonic() - started < 60
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # killed, then reaped by its parent
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process {pid} outlived its timeout")


@pytest.mark.skipif(os.environ.get("EVOTEAM_TESTS_FRESH") == "1", reason="EVOTEAM_TESTS_FRESH=1: nothing is forked")
def test_a_test_process_whose_own_environment_changed_gets_a_zygote_with_it(tmp_path, monkeypatch):
    _, before = _probe(tmp_path, {})
    monkeypatch.setenv("LC_EVOTEAM_PROBE", "1")  # a locale variable: read at import
    _, after = _probe(tmp_path, {})
    assert before["ppid"] != os.getpid() and after["ppid"] != os.getpid()
    assert after["ppid"] != before["ppid"]  # a new warm process, started with the changed environment
