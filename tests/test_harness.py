"""The harness end to end on CPU, with real processes: a trusted judge, the candidate in a sandboxed
runner. Recovery from crashes, hangs, bad code and out-of-memory; the static filter; timed calls
that skip work; the physical floor; what every result records."""

import dataclasses
import time
from pathlib import Path

import pytest
from planted import variant, write_planted

from evoteam import hardware
from evoteam.harness import timing
from evoteam.harness.executor import evaluate
from evoteam.harness.judge import Judge
from evoteam.harness.model import EvalRequest, Status
from evoteam.harness.timing import CPU_MAX_FACTOR, median_interval
from evoteam.task import load_task

from conftest import REPO, run_module

CANDIDATES = REPO / "tests" / "data" / "candidates"
# (module code, run() prologue) of a candidate that burns 30 ms of CPU in each of its three checks: too slow for
# more than one call per timed interval on a CPU target
SLOW_CHECKS = ("import time as _time\n\n_calls = []\n",
               "    _calls.append(1)\n    if len(_calls) <= 3:\n        end = _time.process_time() + 0.03\n"
               "        while _time.process_time() < end:\n            pass\n")


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("planted")
    write_planted(directory)
    return directory


@pytest.fixture(scope="module")
def small_uuids():
    workloads = load_task("mla_decode").scaled_workloads("small")
    return [w.uuid for w in workloads]  # batch 1, 1, 16, 16


def _request(candidate: str, uuids, directory=CANDIDATES, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=str(directory / candidate),
                       workloads=list(uuids), scale="small", warmup=0, reps=2, **kw)


def test_correct_candidate_is_timed_against_the_reference(small_uuids):
    started = time.monotonic()
    result = evaluate(_request("mla_torch.py", small_uuids[:2]), timeout_s=120)
    wall = time.monotonic() - started
    assert [r.status for r in result.results] == ["PASSED", "PASSED"], result.log_tail
    for r in result.results:
        assert r.baseline == "reference" and r.timing_mode == "cputime"
        assert r.baseline_ms > 0 and r.candidate_ms > 0 and r.candidate_repeat_ms > 0
        # CPU: the median of per-round baseline / candidate ratios (paired), near the ratio of the medians
        assert r.speedup == r.paired_speedup == pytest.approx(r.baseline_ms / r.candidate_ms, rel=0.3)
        # the two rounds asked for, and more (up to CPU_MAX_FACTOR times) while the ratio is not settled
        rounds = r.spread["candidate"]["samples"]
        assert r.noise is not None and 2 <= rounds <= CPU_MAX_FACTOR * 2
        # short CPU calls are timed in batches (CPU_BATCH_MS); the checks, then timed calls checked too
        n = r.spread["calls_per_batch"]
        assert n > 1 and r.calls_timed == 2 * rounds * n and 3 < r.calls_checked <= 3 + r.calls_timed
    assert result.restarts == 0
    # The sandbox it ran in, and the secret that drew the inputs (revealed only now).
    assert result.sandbox["mode"] == "strict" and result.sandbox["tool"] == "bubblewrap"
    assert result.sandbox["uid"] == 65534 and result.sandbox["network"].startswith("none")
    assert result.seed_secret and isinstance(result.seed, int)
    # where the evaluation's time went: every phase positive or zero, the timing phase split by what it did, and
    # the table summing to the evaluation's wall time (measured here around it)
    phases = result.phases
    for part in ("judge start", "runner start", "checks", "timing: inputs", "timing: batches",
                 "timing: checks of timed calls", "timing: freezing", "timing: baseline setup",
                 "timing: report and flags", "timing: other", "workload end (buffers freed)", "judge: other"):
        assert part in phases and phases[part] >= 0, (part, phases)
    assert phases["timing: batches"] > 0
    assert sum(phases.values()) == pytest.approx(wall, abs=0.2)
    again = evaluate(_request("mla_torch.py", small_uuids[:1]), timeout_s=120)
    assert again.seed != result.seed  # no seed is shared between evaluations


def test_crash_is_recorded_and_the_run_goes_on(small_uuids, planted_dir):
    seen = []
    result = evaluate(_request("crash_on_batch16.py", directory=planted_dir, uuids=small_uuids), timeout_s=120,
                      on_result=seen.append)
    statuses = [r.status for r in result.results]
    assert statuses == ["PASSED", "PASSED", "crash", "crash"], result.log_tail
    assert "SIGABRT" in result.results[2].detail
    assert result.restarts == 2  # one replaced runner per crash
    assert [r.uuid for r in seen] == small_uuids  # reported as they happened, each once


def test_hang_times_out_and_the_run_goes_on(small_uuids, planted_dir):
    uuids = [small_uuids[0], small_uuids[2], small_uuids[1]]  # the batch-16 one in the middle
    result = evaluate(_request("hang_on_batch16.py", uuids, planted_dir), timeout_s=8)
    assert [r.status for r in result.results] == ["PASSED", "timeout", "PASSED"], result.log_tail
    assert "time limit" in result.results[1].detail


def test_total_time_limit_fails_what_is_left(small_uuids, planted_dir):
    result = evaluate(_request("hang_on_batch16.py", directory=planted_dir, uuids=small_uuids[2:]), timeout_s=60,
                      total_timeout_s=8)
    assert [r.status for r in result.results] == ["timeout", "timeout"]


@pytest.mark.parametrize("candidate, status, words", [
    ("imports_flashinfer.py", "rejected", "imports the baseline library 'flashinfer'"),
    ("uses_evoteam.py", "rejected", "harness_import"),
    ("reads_reference.py", "rejected", "calls open()"),
    ("syntax_error.py", "rejected", "not valid Python"),
])
def test_static_filter_rejects_before_running(small_uuids, planted_dir, candidate, status, words):
    directory = CANDIDATES if candidate == "syntax_error.py" else planted_dir
    result = evaluate(_request(candidate, small_uuids[:2], directory), timeout_s=60)
    assert [r.status for r in result.results] == [status, status]
    assert words in result.results[0].detail


@pytest.mark.parametrize("candidate, status", [
    ("imports_flashinfer.py", "compile_error"),  # not installed here, and hidden where it is
    ("calls_the_reference.py", "exception"),  # the package is there, its data folders (the task) are not
    ("reads_reference.py", "exception"),  # no repository in the sandbox
])
def test_without_the_filter_the_sandbox_holds(small_uuids, planted_dir, candidate, status):
    (planted_dir / "calls_the_reference.py").write_text(variant(
        "hands the work to the task's reference", "from evoteam.task import load_task\n",
        "    ref = load_task('mla_decode').reference_module\n"
        "    out, l = ref.run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale)\n"
        "    output.copy_(out)\n    lse.copy_(l)\n    return\n"))
    result = evaluate(_request(candidate, small_uuids[:1], planted_dir, static_scan=False), timeout_s=60)
    (r,) = result.results
    assert r.status == status, (r.status, r.detail, result.log_tail)


def test_skipping_work_in_timed_calls_is_caught(small_uuids, planted_dir):
    result = evaluate(_request("skips_work_when_timed.py", directory=planted_dir, uuids=small_uuids[:1]),
                      timeout_s=120)
    (r,) = result.results
    assert r.status == "skipped_work", (r.status, r.detail)
    assert "never written" in r.detail


def test_out_of_memory_is_a_failure_not_a_crash_of_the_run(small_uuids, planted_dir):
    result = evaluate(_request("out_of_memory.py", directory=planted_dir, uuids=small_uuids[:2]), timeout_s=120)
    assert all(r.status in ("exception", "out_of_memory") for r in result.results), result.results
    assert "memory" in result.results[0].detail.lower() or "alloc" in result.results[0].detail.lower()


def test_faster_than_the_physical_floor_is_flagged_not_a_win(small_uuids):
    # Pretend the CPU moves one byte per second: every real time is then faster than the floor.
    hw = dataclasses.replace(hardware.load_spec("cpu"), peak_memory_bandwidth_tbs=1e-12)
    (r,) = Judge(_request("mla_torch.py", small_uuids[:1]), hw).run().results
    assert r.status == Status.FLAGGED
    assert r.flags and r.flags[0].startswith("faster_than_floor")
    assert r.speedup is None  # not counted as a win


def test_unknown_workload_is_an_error_of_the_caller():
    with pytest.raises(ValueError, match="not in task mla_decode"):
        Judge(_request("mla_torch.py", ["nope"]), hardware.load_spec("cpu")).run()


def test_bench_exit_code_says_whether_every_workload_passed(tmp_path, small_uuids):

    def bench(candidate):
        return run_module([str(candidate), "--task", "mla_decode", "--hardware", "cpu", "--scale", "small",
                           "--workloads", small_uuids[0][:8], "--reps", "1", "--warmup", "0"], module="evoteam.bench",
                          timeout=300)

    good = bench(CANDIDATES / "mla_torch.py")
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    bad = bench(CANDIDATES / "syntax_error.py")
    assert bad.returncode == 1 and "rejected" in bad.stdout, bad.stdout[-2000:]
    missing = bench(tmp_path / "absent.py")
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0, missing.stderr


def test_bench_output_paths_are_checked_before_the_evaluation_and_a_measurement_is_never_lost(
        tmp_path, small_uuids, capsys, monkeypatch):
    """Issue 54: --json or --traces into a folder that did not exist or could not be written ran the evaluation to its
    end, then lost it to a traceback. Now a missing folder is made, a bad path is one line before anything runs, and a
    write that fails after all (/dev/full: the disk full) keeps what was measured in a file of its own."""
    import json
    import os
    import tempfile

    from evoteam import bench

    one = [str(CANDIDATES / "mla_torch.py"), "--task", "mla_decode", "--hardware", "cpu", "--scale", "small",
           "--workloads", small_uuids[0][:8], "--reps", "1", "--warmup", "0"]
    (tmp_path / "afile").write_text("data\n")
    for path, words in ((tmp_path / "afile" / "r.json", "afile: it is a file, not a folder"),
                        (tmp_path, "it is a folder; give the path of a file"),
                        ("/proc/nope/r.json", "cannot create /proc/nope")):
        assert bench.main([*one, "--json", str(path)]) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith(f"evoteam.bench: error: --json {path}: ") and words in err, err
        assert out == "", out  # refused before the evaluation started
    assert (tmp_path / "afile").read_text() == "data\n"

    if not os.access("/dev", os.W_OK):
        pytest.skip("the disk-full case writes to /dev/full, whose folder only root may write")
    kept_dir = tmp_path / "tmp"
    kept_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(kept_dir))
    report, traces = tmp_path / "new" / "deeper" / "r.json", tmp_path / "other" / "t.jsonl"
    for json_path, traces_path in ((report, "/dev/full"), ("/dev/full", traces)):
        assert bench.main([*one, "--json", str(json_path), "--traces", str(traces_path)]) == 2
        out, err = capsys.readouterr()
        what, flag = ("traces", "--traces") if traces_path == "/dev/full" else ("report", "--json")
        assert err.count("\n") == 1 and err.startswith(
            f"evoteam.bench: error: {flag} /dev/full: cannot write it (No space left on device); the {what} is kept "
            f"in {kept_dir}/"), err
        kept = Path(err.split(" is kept in ")[1].split(":")[0])
        assert "1/1 passed" in out  # the table was shown, and what it measured is on disk:
        lines = (traces if what == "report" else kept).read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["workload"]["uuid"] == small_uuids[0]
        written = json.loads((report if what == "traces" else kept).read_text())
        assert written["summary"]["passed"] == 1 and written["results"][0]["uuid"] == small_uuids[0]
        assert {"geomean_ci_low", "geomean_ci_high"} <= set(written["summary"])  # MLflow's names, less final_
        kept.unlink()


def test_bench_help_describes_the_command_in_whole_sentences(capsys):
    """Issue 54: the description was the docstring's first line, cut mid-sentence ("... on a task and")."""
    from evoteam import bench

    with pytest.raises(SystemExit) as done:
        bench.parse_args(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "evaluate one solution file on a task and hardware target with the harness" in text, text
    assert "write FlashInfer-Trace lines and a JSON report. positional arguments:" in text, text


def test_a_killed_caller_leaves_no_evaluation_running_and_no_folder_behind(tmp_path, small_uuids, monkeypatch):
    """Newcomer defect 3: killed runs left evoteam-worker-* folders in the temp directory. Now the judge
    ends with its caller, removes its own folder, and the next evaluation removes the caller's."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from evoteam.harness import scratch

    hang = tmp_path / "hang.py"
    hang.write_text("import time\n\ndef run(**kwargs):\n    time.sleep(3600)\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    root = scratch.root()
    caller = subprocess.Popen([sys.executable, "-m", "evoteam.bench", str(hang), "--task", "mla_decode",
                               "--hardware", "cpu", "--scale", "small", "--workloads", small_uuids[0][:8],
                               "--no-static-scan", "--timeout", "600"],
                              env={**os.environ, "TMPDIR": str(tmpdir)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (root.is_dir() and any(p.name.startswith("judge-") for p in root.iterdir())):
        assert time.monotonic() < deadline and caller.poll() is None, "the judge never started"
        time.sleep(0.2)
    judge_pid = int(next(p for p in root.iterdir() if p.name.startswith("judge-")).name.split("-")[1])
    caller.send_signal(signal.SIGKILL)
    caller.wait()
    while time.monotonic() < deadline and scratch._alive(judge_pid):
        time.sleep(0.2)
    assert not scratch._alive(judge_pid), "the judge outlived its caller"
    assert not any(p.name.startswith("judge-") for p in root.iterdir())  # it removed its own folder
    assert [p.name.split("-")[0] for p in root.iterdir()] == ["eval"]  # the killed caller's
    scratch.remove_orphans()  # what the next evaluation does first
    assert list(root.iterdir()) == []


def test_the_median_interval_is_the_order_statistics_around_the_median():
    """CPU rounds stop once this interval is narrow: it must widen with spread and narrow with samples."""
    assert median_interval([1.0, 3.0, 2.0]) == (1.0, 3.0)  # below 6 values: the whole range
    tight = [1.0 + 0.001 * i for i in range(60)]
    low, high = median_interval(tight)
    assert tight[20] <= low < 1.03 < high <= tight[40]  # ranks 30 -+ 0.98 sqrt(60)
    wide = [1.0 + 0.01 * i for i in range(60)]
    assert median_interval(wide)[1] - median_interval(wide)[0] > 9 * (high - low)  # ten times the spread
    assert median_interval(wide[:15])[1] - median_interval(wide[:15])[0] > 0.6 * (wide[14] - wide[0])


def test_the_same_kernel_measured_again_lands_within_20_percent_on_cpu(small_uuids):
    """Newcomer defect 6: one CPU baseline ranged 2.3-275 ms within a run, and a kernel scored 1.60x in
    the search and 0.026x in the final table. CPU targets are timed by each side's single-threaded CPU
    time (the kernel's count of the runner's cgroup) on one CPU, caches flushed there before each call,
    and the speedup is the median of the per-round ratios (the sides timed moments apart).
    Before the pinning, CI runs saw 1.10x against 1.36x (a batch-1 workload, calls of 0.1 ms) and 1.06x
    against 1.45x (batch 16, calls of 3 ms)."""
    from evoteam.harness.model import CPU_ROUNDS

    warmup, reps = CPU_ROUNDS
    uuids = small_uuids[0::2]  # one of each regime above: batch 1 (8 tokens) and batch 16 (457 tokens)
    speedups = {u: [] for u in uuids}
    for _ in range(3):
        request = dataclasses.replace(_request("mla_torch.py", uuids), warmup=warmup, reps=reps)
        result = evaluate(request, timeout_s=300)
        for r in result.results:
            assert r.status == "PASSED" and r.timing_mode == "cputime", r.detail
            speedups[r.uuid].append(r.speedup)
    for uuid, values in speedups.items():
        assert max(values) / min(values) < 1.2, (uuid[:8], values)


class _FixedPlanning:
    """timing.Planning with a baseline that probes at `probe_ms` and a candidate whose checked call took `check_ms`."""

    def __init__(self, probe_ms: float, check_ms: float, n_sets: int = 64):
        self.probe_ms, self.check_ms, self.n_sets = probe_ms, check_ms, n_sets

    def baseline_probe_ms(self) -> float:
        return self.probe_ms

    def cached_batches(self) -> list[int]:
        return []


def test_a_cpu_baseline_batch_is_a_function_of_the_baseline_alone():
    """The rule behind the red team's slow_down_the_baseline, as the CPU clock plans it: the baseline's calls per
    interval follow its own probe whatever the candidate's checks took; a slow candidate gets fewer of its own."""
    clock = timing.for_workload(False, "graph", False, True)
    for probe_ms, n_base in ((0.3, 32), (1.2, 8), (2.6, 2), (40.0, 1)):
        plans = [clock.plan(_FixedPlanning(probe_ms, check_ms)) for check_ms in (0.01, 1.0, 30.0, 500.0)]
        assert [p.n_base for p in plans] == [n_base] * 4, (probe_ms, plans)
        assert [p.n for p in plans] == [n_base, min(n_base, 20), 1, 1], (probe_ms, plans)


def test_a_cpu_baseline_is_batched_by_its_own_calls_not_the_candidates(tmp_path, small_uuids):
    """A CPU target times short calls in batches (calls per interval). When that batch followed the candidate's
    check time, a candidate that looked slow in its checks had the baseline timed one call per interval, where a
    lone call pays a cold interpreter and cache: the baseline at 1.7-1.9x its time (the red team's
    slow_down_the_baseline, 2026-12-03). The baseline's batch now comes from its own untimed calls, the
    candidate frozen; a candidate that looks slow only gets fewer calls of its own per interval."""
    (tmp_path / "slow_checks.py").write_text(variant(
        "burns 30 ms of CPU in each of its three checks, then runs at its honest speed", *SLOW_CHECKS))
    honest, slow = [], []
    for _ in range(3):  # in alternation: one evaluation's baseline is a poor measure of another's (below)
        (h,) = evaluate(_request("mla_torch.py", small_uuids[:1]), timeout_s=120).results
        (s,) = evaluate(_request("slow_checks.py", small_uuids[:1], tmp_path, static_scan=False),
                        timeout_s=120).results
        assert h.status == s.status == "PASSED", (h.detail, s.detail)
        assert h.spread["calls_per_batch"] == h.spread["baseline_calls_per_batch"] > 1
        assert s.spread["calls_per_batch"] == 1  # 30 ms per call looked too slow for more than one per interval
        # the baseline's batch is the workload's on this machine, chosen once from the baseline's own calls (the
        # first evaluation's, the candidate frozen) and kept in the cache: never the single call the fault gave it
        assert s.spread["baseline_calls_per_batch"] == h.spread["baseline_calls_per_batch"] >= 2
        honest.append(h.baseline_ms)
        slow.append(s.baseline_ms)
    # The fault put the baseline at 1.7-1.9x. One pair of evaluations is no measure of that: their baselines (two
    # samples each) differed by 0.83-1.56x on this VM (2026-12-06, nine pairs, a busy core beside some) and 1.63x
    # in a CI run, while each evaluation still chose its own batch. The median of three each, in alternation, is.
    assert timing.median(slow) < 1.55 * timing.median(honest), (slow, honest)


def test_a_cpu_target_times_both_sides_on_one_cpu_the_candidate_cannot_leave(tmp_path, small_uuids):
    """The judge flushes the caches of one CPU before each call; a candidate that moved to another core
    would find its data in that core's private cache. A cpuset holds the runner: asking the kernel for
    every CPU leaves it with the one it was given. The runner starts (imports) on the judge's CPUs and is held to the
    one before the candidate's module is loaded: its first line already sees one CPU."""
    import os

    from evoteam.harness.sandbox import capabilities

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    widen = ("import os\nAT_LOAD = os.sched_getaffinity(0)\n",
             "    assert len(AT_LOAD) == 1, AT_LOAD\n"
             "    os.sched_setaffinity(0, range(os.cpu_count()))\n"
             "    assert len(os.sched_getaffinity(0)) == 1, os.sched_getaffinity(0)\n")
    path = tmp_path / "widens.py"
    path.write_text(variant("asks for every CPU", *widen))
    result = evaluate(_request("widens.py", small_uuids[:1], directory=tmp_path, static_scan=False), timeout_s=120)
    (r,) = result.results
    assert r.status == "PASSED", r.detail
    # the highest CPU no other evaluation on the machine holds (another test's evaluation may hold one)
    assert result.sandbox["cpus"] in {f"{cpu} (cpuset)" for cpu in os.sched_getaffinity(0)}, result.sandbox
    assert capabilities().cgroup, "the machine gives the runner a cgroup"


def test_a_call_that_waits_instead_of_working_is_flagged_on_cpu(tmp_path, small_uuids):
    """CPU time counts the work wherever the runner does it; a call that mostly waits (for work done
    where CPU time does not see it) is flagged, not a win."""
    source = (CANDIDATES / "mla_torch.py").read_text().replace(
        "def run(q_nope,", "import time as _time\n\n\ndef run(q_nope,", 1)
    source = source.replace("    bounds = kv_indptr.tolist()", "    _time.sleep(0.05)\n    bounds = kv_indptr.tolist()", 1)
    (tmp_path / "waits.py").write_text(source)
    result = evaluate(_request("waits.py", small_uuids[:1], directory=tmp_path, static_scan=False), timeout_s=300)
    (r,) = result.results
    assert r.status == Status.FLAGGED and "cpu_idle" in r.detail, (r.status, r.detail)


def test_a_runner_cannot_choose_its_own_verdict(tmp_path, small_uuids):
    """The runner's process holds the candidate, which can rewrite every reply it sends (here: the json module the
    protocol writes with). A candidate that raised on every call and had each failure go out as "PASSED" was
    recorded PASSED with no time, and the geomean counted only the workloads it won. The judge now reads a runner's
    word only as a choice among the failures a runner may have."""
    from redteam.cases import CASES

    forge = next(c for c in CASES if c.name == "forge_verdict").extra  # the red team's forgery
    (tmp_path / "forges.py").write_text(variant("raises, and forges PASSED into every failure it reports",
                                                forge, "    raise RuntimeError('no work at all')\n"))
    result = evaluate(_request("forges.py", small_uuids[:2], tmp_path, static_scan=False), timeout_s=120)
    assert [r.status for r in result.results] == ["exception", "exception"], result.log_tail[-2000:]
    assert "no work at all" in result.results[0].detail


def test_a_message_the_runner_was_not_asked_for_is_caught(tmp_path, small_uuids):
    """The red team's forge_done_message (a forged "done" sent on the runner's channel before the call) is honest
    work otherwise. On an H100 (2026-12-06) it PASSED: the forgery was read as the answer, the real answer as the
    next message's, and the judge never noticed; on a CPU only the case's slow, idle path was flagged. Every answer
    now carries its message's number: here, with the correct candidate's work after the forgery, only that check
    can catch it."""
    forge = ("    import sys as _sys\n    frame = _sys._getframe()\n    while frame is not None:\n"
             "        me = frame.f_locals.get('self')\n        if type(me).__name__ == 'Runner':\n"
             "            me.channel.send({'ok': True})\n            break\n        frame = frame.f_back\n")
    (tmp_path / "forges_done.py").write_text(variant("sends a forged answer, then computes honestly", "", forge))
    result = evaluate(_request("forges_done.py", small_uuids[:2], tmp_path, static_scan=False), timeout_s=180)
    for r in result.results:
        assert r.status == Status.FLAGGED and "out of turn" in r.detail, (r.status, r.detail)


def test_work_a_cpu_candidates_thread_does_on_new_inputs_before_its_call_is_counted(tmp_path, small_uuids):
    """On a CPU target the judge writes a batch's inputs and fills the caches (2.5-6.5 ms on CI's machine) before
    the candidate's CPU time starts to count: a thread of the candidate that watched its input buffers could work
    on them there, unseen. The candidate is now frozen from before its inputs are written until its count has
    started. Here a thread burns 3 ms of CPU on each new input it sees and the call waits for it; beside it, the
    same 3 ms burnt inside the call. One call per interval (slow checks), so every interval's inputs are new."""
    common = (SLOW_CHECKS[0] + "import threading as _threading\n\nBURN_S = 0.003\n\n\n"
              "def _burn():\n    end = _time.thread_time() + BURN_S\n    while _time.thread_time() < end:\n"
              "        pass\n\n\n"
              "def _fingerprint(t):\n    return t.reshape(-1)[:32].tolist()\n")
    watcher = ("_watched, _ready = {}, {}\n_cond = _threading.Condition()\n\n\n"
               "def _watch():\n"
               "    while True:\n"
               "        for ptr, t in list(_watched.items()):\n"
               "            fp = _fingerprint(t)\n"
               "            if _ready.get(ptr) != fp:\n"
               "                _burn()  # the work done on these inputs, before the call if it can\n"
               "                with _cond:\n"
               "                    _ready[ptr] = fp\n"
               "                    _cond.notify_all()\n"
               "        _time.sleep(0.0002)  # polls cost next to nothing\n\n\n"
               "_threading.Thread(target=_watch, daemon=True).start()\n")
    slow_checks = SLOW_CHECKS[1]  # every timed interval holds one call
    waits = ("    ptr = q_nope.data_ptr()\n"
             "    if ptr not in _watched:\n        _watched[ptr] = q_nope\n"
             "    with _cond:  # waiting costs no CPU: the thread's burn is this call's work\n"
             "        _cond.wait_for(lambda: _ready.get(ptr) == _fingerprint(q_nope), timeout=5)\n")
    (tmp_path / "watches.py").write_text(variant("a thread works on new inputs as they appear", common + watcher,
                                                 slow_checks + waits))
    (tmp_path / "burns.py").write_text(variant("burns in the call", common, slow_checks + "    _burn()\n"))
    ms = {}
    for name in ("burns.py", "watches.py"):
        request = dataclasses.replace(_request(name, small_uuids[:1], tmp_path, static_scan=False), reps=6)
        (r,) = evaluate(request, timeout_s=120).results
        assert r.status == "PASSED" and r.spread["calls_per_batch"] == 1, (name, r.status, r.detail)
        ms[name] = r.candidate_ms
    # Before: the watcher at 0.55-0.71 ms against the burner's 3.4-3.5 (its 3 ms hidden in the fill, three runs)
    assert ms["watches.py"] > 0.85 * ms["burns.py"], ms



def test_a_runner_not_frozen_in_time_fails_its_workload_and_the_next_goes_on(small_uuids, monkeypatch):
    """A runner runs only while the judge talks to it or its clock runs; a freeze that does not complete in time
    (here: the kernel never reports the candidate's cgroup frozen) fails the workload instead of letting the runner go
    on unseen, and the next workload gets a fresh runner."""
    from evoteam.harness import sandbox

    real = sandbox.SandboxedProcess.freeze
    # the first candidate runner's first freeze within a workload never completes (its first two: after its hello
    # and its load, before any workload)
    stuck = {"skip": 2, "left": 1}

    def freeze(self, frozen):
        if frozen and self.guard is not None and stuck["left"]:  # the guard holds candidate runners only
            if stuck["skip"]:
                stuck["skip"] -= 1
                return real(self, frozen)
            stuck["left"] -= 1
            raise sandbox.FreezeFailed("the runner's processes were not all frozen within 2 s (simulated)")
        return real(self, frozen)

    monkeypatch.setattr(sandbox.SandboxedProcess, "freeze", freeze)
    result = Judge(_request("mla_torch.py", small_uuids[:2]), hardware.load_spec("cpu")).run()
    first, second = result.results
    assert first.status == Status.TIMEOUT and "not all frozen" in first.detail, (first.status, first.detail)
    assert second.status == Status.PASSED, (second.status, second.detail)


def test_a_time_of_zero_is_a_flag_and_never_skips_the_floor_check(small_uuids):
    """A per-call time at or below the protocol alone is flagged, not divided by (or passed over, as a zero used to
    pass over the physical floor's check)."""
    from evoteam.harness.calls import CallSets
    from evoteam.harness.model import WorkloadResult

    hw = dataclasses.replace(hardware.load_spec("cpu"), peak_memory_bandwidth_tbs=0.1)
    judge = Judge(_request("mla_torch.py", small_uuids[:1]), hw)
    workload = next(w for w in judge.task.scaled_workloads("small") if w.uuid == small_uuids[0])
    calls = CallSets(judge.task, workload, "cpu", 1)
    judge.kernel_names = []
    for ms in (0.0, -0.001):
        result = WorkloadResult(uuid=workload.uuid, status=Status.PASSED, candidate_ms=ms, baseline_ms=1.0)
        judge._flags(result, workload, calls, None, 0.0)
        assert any(f.startswith("no_time") for f in result.flags), result.flags
        assert result.floor_ms, "the floor is computed whatever the time"
    calls.close()


def test_the_pages_a_batch_rewrites_do_not_give_away_the_ones_its_calls_read():
    """MLA: a batch rewrites the rows of a random set of pages twice as large as its calls read (at least an eighth of
    the pool), and draws the calls' pages from it: a diff of the pool does not name the late kv_indices."""
    import torch

    task = load_task("mla_decode")
    workload = task.scaled_workloads("small")[2]  # batch 16
    gen = torch.Generator().manual_seed(0)
    sets = [task.make_inputs(workload, gen, "cpu") for _ in range(2)]
    for s in sets[1:]:
        s["ckv_cache"], s["kpe_cache"] = sets[0]["ckv_cache"], sets[0]["kpe_cache"]
    before = sets[0]["ckv_cache"].clone()
    task.refresh_inputs(workload, sets, torch.Generator().manual_seed(1))
    changed = set(torch.nonzero((sets[0]["ckv_cache"] != before).any(-1).any(-1)).flatten().tolist())
    named = set(torch.cat([s["kv_indices"] for s in sets]).tolist())
    assert named <= changed  # every page a call reads holds fresh rows
    assert len(changed) >= max(2 * len(named), before.shape[0] // 8) * 0.99, (len(changed), len(named))


def test_a_batch_is_checked_whole_and_a_finding_still_names_its_set():
    """CallSets lay every set out alike: one comparison covers a batch's inputs, one its outputs' poison; a change
    or an unwritten element in any one set is found, and named."""
    import torch

    from evoteam.harness.calls import CallSets

    task = load_task("mla_decode")
    workload = task.scaled_workloads("small")[2]
    calls = CallSets(task, workload, "cpu", 4)
    sets = list(range(calls.n_sets))
    assert calls.n_sets == 4
    calls.refresh(sets, seed=7)
    # the runner's inputs are the judge's, bit for bit; the late ones hold decoys until released
    assert calls.inputs_unchanged(sets, 0) is not None  # decoys differ from the truth
    calls.release_late()
    assert calls.inputs_unchanged(sets, 0) is None
    for j in sets:  # fresh values per set: no two sets share their queries or their pages
        assert not torch.equal(calls.inputs[j]["q_nope"], calls.inputs[(j + 1) % 4]["q_nope"])
        assert torch.equal(calls.inputs[j]["kv_indices"], calls.pristine[j]["kv_indices"])
    calls.inputs[2]["q_pe"].view(-1)[5] += 1  # (the judge's own view: a runner's would be read-only on a CPU)
    failure = calls.inputs_unchanged(sets, 0)
    assert failure is not None and failure.check == "input_modified" and "q_pe" in failure.detail
    # outputs: poisoned whole, and an element left unwritten in set 3 is named
    assert calls.unwritten(sets).startswith("output:")
    reference = [task.reference(calls.pristine[j]) for j in sets]
    for j in sets:
        for name, value in reference[j].items():
            calls.outputs[j][name].copy_(value)
    assert calls.unwritten(sets) is None
    calls.poison([3])
    assert calls.unwritten([0, 1, 2]) is None and "(call 3 of the batch)" in calls.unwritten(sets)
    calls.close()


def test_gpu_rounds_stop_once_the_ratios_are_settled_whatever_moves_every_side_alike():
    """A GPU's rounds stop on the per-round ratios (speedup and noise), not on each side's own times: a drift that
    moves every side of a round alike (the GPU's clock) cancels; a candidate whose two batches disagree goes on."""
    drift = [1.0 + 0.1 * (i % 5) for i in range(12)]  # every side 0-40% slower, round by round
    steady = {"baseline": [2.0 * d for d in drift], "candidate": [1.0 * d for d in drift],
              "candidate_repeat": [1.0 * d for d in drift]}
    graph = timing.clock("graph")  # the rounds stop when the clock says so (its width: 2%)
    assert graph.settled(steady, None)
    noisy = dict(steady, candidate_repeat=[d * (1.0 + 0.05 * (-1) ** i) for i, d in enumerate(drift)])
    assert not graph.settled(noisy, None)
    cached = {k: v for k, v in steady.items() if k != "baseline"}  # the baseline's time from the cache
    assert graph.settled(cached, 1.0)


def test_the_cpu_flush_is_the_smallest_fill_measured_to_evict_and_measured_once(tmp_path, monkeypatch):
    """A CPU target's fill before every interval is sized by what evicts a small working set on this machine (a
    read after it within COLD_SHARE of the coldest), not by the cache size sysfs reports; measured once a machine."""
    from evoteam.harness import cache_flush

    mib = cache_flush.MIB
    fills = [8 * mib, 16 * mib, 32 * mib, 64 * mib, 128 * mib]
    assert cache_flush.smallest_evicting(fills, [0.05, 0.1, 0.2, 0.28, 0.30]) == 64 * mib
    calls = []

    def reads(fills, *a, **k):
        calls.append(1)
        return [0.1 + 0.05 * i for i in range(len(fills))][:len(fills) - 2] + [0.5, 0.5]

    monkeypatch.setattr(cache_flush, "cold_reads", reads)
    size, source = cache_flush.flush_bytes(tmp_path)
    assert size == cache_flush.candidate_fills(cache_flush.last_level_cache_bytes())[-2] and source == "measured now"
    assert cache_flush.flush_bytes(tmp_path) == (size, f"measured before ({tmp_path / 'cpu_flush.json'})")
    assert len(calls) == 1
    # a figure measured with another way of filling (one memset, as before) is not taken for this one
    import json

    known = json.loads((tmp_path / "cpu_flush.json").read_text())
    (key,) = known
    assert key.endswith(f"|{cache_flush.METHOD}")
    (tmp_path / "cpu_flush.json").write_text(json.dumps({key.rsplit("|", 1)[0]: known[key]}))
    assert cache_flush.flush_bytes(tmp_path)[1] == "measured now" and len(calls) == 2


def test_the_cpu_flush_sizes_tried_reach_four_times_the_cache_and_at_least_256_mib():
    from evoteam.harness import cache_flush

    mib = cache_flush.MIB
    assert cache_flush.candidate_fills(32 * mib) == [8 * mib * 2 ** i for i in range(6)]  # 8 MiB .. 256 MiB
    assert cache_flush.candidate_fills(480 * mib)[-1] == 1024 * mib  # a large reported cache: to four times it


def test_the_cpu_flush_writes_every_byte_a_slice_at_a_time():
    """glibc's memset of a large block uses non-temporal stores, which go around the caches: the flusher writes slices
    of FILL_CHUNK (under the threshold on any x86 with an L3 of 4 MiB or more), all of its buffer or the first n bytes."""
    from evoteam.harness import cache_flush

    chunk = cache_flush.FILL_CHUNK
    assert chunk <= 2 * cache_flush.MIB
    flusher = cache_flush.CpuFlusher(3 * chunk + 5)
    flusher.buffer[:] = 0
    flusher.fill(7, 2 * chunk + 3)  # the last slice short
    assert (flusher.buffer[:2 * chunk + 3] == 7).all() and not flusher.buffer[2 * chunk + 3:].any()
    flusher.fill(9)
    assert (flusher.buffer == 9).all()
