"""What `make test` tells its reader: skipped tests end the run as one line per reason, with what would
run them (newcomer defect 7: 42 skips with no summary of why), and how the install reports itself
(newcomer defect 8)."""

import os
import shutil
import subprocess
import sys

from conftest import REPO

SUITE_FILES = ("conftest.py", "warm_launcher.py", "timeline.py")  # the suite's conftest and what it imports


def test_skips_end_the_run_summarised_by_reason_with_how_to_run_them(tmp_path):
    for name in SUITE_FILES:
        shutil.copy(REPO / "tests" / name, tmp_path / name)
    (tmp_path / "test_some.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('i', range(3))\n"
        "def test_gpu(i):\n    pytest.skip('needs a GPU')\n\n"
        "def test_browser():\n    pytest.skip('chromium is not installed')\n\n"
        "def test_plain():\n    pytest.skip('something else')\n\n"
        "def test_runs():\n    assert True\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout
    assert "5 skipped, by reason" in out, out
    lines = out[out.index("5 skipped, by reason"):].splitlines()[1:]
    assert lines[0].split() == ["3", "needs", "a", "GPU"] and "make test TORCH=torch" in lines[1]
    assert "chromium is not installed" in out and "to run them: make browser" in out
    assert any(line.split()[:3] == ["1", "something", "else"] for line in lines)


def test_the_install_says_what_it_does_and_leaves_pip_nothing_to_complain_about():
    """flashinfer-bench is installed without its dependencies (only its data model is used); installed
    before other packages, pip reported its missing dependencies as a resolver error on every install. (The
    installer is uv or pip: `$(INSTALL)`.)"""
    text = (REPO / "Makefile").read_text()
    recipe = text[text.index("$(VENV)/.installed-dev: $(VENV)/.installed"):].split("\n\n", 1)[0].splitlines()
    installs = [line for line in recipe if "pip install" in line or "$(INSTALL)" in line]
    assert "--no-deps flashinfer-bench" in installs[-1], installs
    assert sum('echo "make: ' in line for line in recipe) >= 3  # it says what it is doing
    assert all(line.lstrip().startswith("@") for line in recipe[1:] if line.strip())  # and only that


def test_make_run_installs_what_the_main_job_needs_and_make_test_adds_the_test_tools(tmp_path):
    """Issue 54: `make run` installed the dev extra (Ray, pytest, ruff, ...: a 3.3 GB .venv). Read from make's own
    dry run (-n) of each target in a fresh folder's terms (-B: as if nothing were installed)."""
    def installs(target: str) -> list[str]:
        out = subprocess.run(["make", "-n", "-B", f"VENV={tmp_path / 'venv'}", target], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [line for line in out.stdout.splitlines() if " install " in line and "apt-get" not in line]

    run, test = installs("run"), installs("test")
    # evoteam itself (with uv: beside the torch wheel pip chose, where the venv has no torch yet)
    assert any(("install --python " + str(tmp_path / "venv/bin/python") + " -q --compile-bytecode ") in line
               and line.endswith(" -e .") for line in run), run
    assert not any("[dev]" in line or "flashinfer-bench" in line or "ray" in line for line in run), run
    assert any(line.endswith('-e ".[dev]"') for line in test), test
    assert any("--no-deps flashinfer-bench==0.1.2" in line for line in test), test
    assert not list(tmp_path.iterdir())  # a dry run: nothing made


def test_the_timeline_gives_the_cpu_to_the_test_that_spent_it(tmp_path):
    """EVOTEAM_TESTS_TIMELINE=DIR and `python tests/timeline.py DIR`: two workers, one test burning a second of CPU
    beside one asleep for as long; the busy one's own CPU is that second, the sleeping one's next to none, and the
    machine's share is split between them."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in SUITE_FILES:
        shutil.copy(REPO / "tests" / name, suite / name)
    (suite / "test_busy.py").write_text(
        "import time\n\ndef test_burns():\n    end = time.process_time() + 1.0\n"
        "    while time.process_time() < end:\n        pass\n")
    (suite / "test_idle.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(1.0)\n")
    records = tmp_path / "tl"
    env = {**os.environ, "EVOTEAM_TESTS_TIMELINE": str(records)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    assert "2 passed" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in records.iterdir()) == ["gw0.tsv", "gw1.tsv", "main.tsv"]
    out = subprocess.run([sys.executable, str(REPO / "tests" / "timeline.py"), str(records)], capture_output=True,
                         text=True, timeout=60).stdout
    by_file = {line.split()[2]: (float(line.split()[0]), float(line.split()[1])) for line in
               out.split("by file:")[1].split("\nthe ")[0].splitlines()[1:]}
    # the busy test's own process spent its second; the sleeping one's spent next to nothing
    assert by_file["test_busy.py"][1] >= 0.9 and by_file["test_idle.py"][1] < 0.3, out
    # the machine's CPU in that second, split between the two running then
    assert by_file["test_busy.py"][0] >= 0.4 and by_file["test_idle.py"][0] >= 0.4, out
    assert sum(line.startswith("gw") for line in out.splitlines()) == 2, out
    missing = subprocess.run([sys.executable, str(REPO / "tests" / "timeline.py"), str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "no records in" in missing.stderr and "Traceback" not in missing.stderr


def test_the_census_gives_each_process_cpu_to_its_role(tmp_path):
    """`python tests/census.py PACCT`: the kernel's process-accounting records (format v3) summed by role. A runner is
    a Python started afresh under bubblewrap; what it forks stays in the sandbox's share; a judge forked from its
    server counts as forked; a compile counts as a build wherever it ran; the times are the kernel's comp_t."""
    import struct

    def record(pid, ppid, comm, cpu_ticks, forked=False):
        comp = cpu_ticks if cpu_ticks < 0x2000 else (cpu_ticks >> 3) | (1 << 13)  # past 13 bits, one octal exponent
        return struct.pack("<BBHIIIIIIf8H16s", int(forked), 3, 0, 0, 0, 0, pid, ppid, 0, 1.0, comp, 0, 0, 0, 0, 0,
                           0, 0, comm.encode())

    pacct = tmp_path / "pacct"
    pacct.write_bytes(b"".join([
        record(10, 1, "python", 150),  # a test worker (its comm may be a thread's: the role goes by the tree)
        record(11, 10, "bwrap", 1), record(12, 11, "bwrap", 1),
        record(13, 12, "python", 8800),  # a candidate's runner: 88 s of CPU, past comp_t's mantissa
        record(14, 13, "python", 20, forked=True), record(15, 13, "cc1plus", 300),
        record(16, 10, "jemalloc_bg_thd", 140, forked=True),  # a judge forked from its server
    ]))
    out = subprocess.run([sys.executable, str(REPO / "tests" / "census.py"), str(pacct)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    roles = {line.split(None, 2)[2].split(" (")[0]: float(line.split()[0]) for line in
             out.stdout.split("by role:")[1].split("\nthe ")[0].splitlines()[1:]}
    assert roles == {"the candidates' runners": 88.0, "started afresh": 1.5, "forked without exec": 1.4,
                     "C++ builds": 3.0, "the rest in a sandbox": 0.2, "other": 0.0}, out.stdout
    assert out.stdout.startswith("7 processes ended, 94 CPU-s"), out.stdout
    (tmp_path / "bad").write_bytes(b"\0" * 63)
    bad = subprocess.run([sys.executable, str(REPO / "tests" / "census.py"), str(tmp_path / "bad")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "not a Linux process-accounting file" in bad.stderr and "Traceback" not in bad.stderr
