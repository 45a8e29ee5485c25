"""The red-team suite's CPU cases through the real harness (tests/redteam/): every cheat caught,
every fault kept to its workload, every escape blocked. One test per case; the table a run prints
is `python tests/redteam/run.py --hardware cpu` (the GPU's: scripts/gpu_integrity_report.sh OUT redteam)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from cases import CASES, cases_for  # noqa: E402
from run import HONEST, _escape_traces, _won, make_context, run_case  # noqa: E402

CPU_CASES = cases_for("cpu")


def test_the_suite_covers_every_class_with_thirty_cases_or_more():
    classes = {c.cls for c in CASES}
    assert len(CASES) >= 30 and len(CPU_CASES) >= 30
    assert classes == {"baseline/reference", "reuse", "partial work", "escaped work", "tampering",
                       "predicting inputs", "faults", "sandbox escape", "control"}


def test_under_cpu_time_a_no_gain_or_escape_case_wins_only_below_half_the_honest_controls_own_time():
    """CPU time does not count the honest path's deliberate wait: there the bar is the honest control's time as that
    clock counted it (CI's case: 11.4 ms PASSED beside a control of 4 ms is no gain); on the other clocks, half the
    deliberate delay, as before."""
    from types import SimpleNamespace

    from evoteam.harness.model import Status

    def result(ms, mode, status=Status.PASSED):
        return SimpleNamespace(status=status, candidate_ms=ms, timing_mode=mode)

    ctx = SimpleNamespace(delay_s=0.03, control_baseline_ms=[1.0, 1.0], control_candidate_ms=[3.0, 4.0])
    assert _won(HONEST, [result(4.6, "cputime", Status.FLAGGED), result(11.4, "cputime")], ctx, None) == [False, False]
    assert _won(HONEST, [result(1.0, "cputime"), result(1.9, "cputime")], ctx, None) == [True, True]
    assert _won(HONEST, [result(11.4, "graph"), result(16.0, "events")], ctx, None) == [True, False]
    # an escape case's honest path sleeps too (CI, 2026-12-07: escape_network's 13.2 ms of CPU was called a leak)
    escape = next(c for c in CASES if c.name == "escape_network")
    assert _won(escape, [result(1.64, "cputime", Status.FLAGGED), result(13.2, "cputime")], ctx, None) == [False, False]
    assert _won(escape, [result(13.2, "graph")], ctx, None) == [True]


def test_an_escape_that_time_cannot_show_is_read_from_what_the_host_sees(tmp_path):
    """Under CPU time an escape's gain (a skipped sleep) does not show, so every escape case leaves evidence on the host
    side: reading another agent's file is what its runner logs (a read from a folder the sandbox shows, /opt, made
    the real case a LEAK with this trace, 2026-12-07)."""
    from types import SimpleNamespace

    case = next(c for c in CASES if c.name == "escape_read_other_agents")
    assert case.evidence and all(c.evidence for c in CPU_CASES if c.expect == "escape")
    assert 'print("redteam-" + TOKEN + " read "' in case.body
    ctx = SimpleNamespace(token="abc123", secret_file=tmp_path / "notes.txt", listener=SimpleNamespace(accepted=0))
    assert _escape_traces(case, ctx, 0, "=== candidate runner ===\n") == []
    log = f"=== candidate runner ===\nredteam-abc123 read {ctx.secret_file}\n"
    assert _escape_traces(case, ctx, 0, log) == [f"read {ctx.secret_file} (its runner's log says so)"]


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    ctx = make_context("cpu", tmp_path_factory.mktemp("redteam"))
    yield ctx
    ctx.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_case_is_caught(case, context):
    row = run_case(case, context)
    assert row.caught, row.line() + "\n" + row.log


@pytest.mark.slow
def test_a_sudden_oom_stays_with_its_workload_where_the_kernel_ignores_the_memory_limit(context):
    """gVisor (the lent H200's runtime) accepts a cgroup's memory limit and does not enforce it; there a
    candidate's 8 GiB took the machine. Here the limit is lifted as soon as a runner's cgroup appears: the
    judge's own guard must still end the runner at its limit."""
    import threading
    import time

    from evoteam.harness.sandbox import CGROUP_ROOT

    stop = threading.Event()
    lifted: set[str] = set()

    def lift():
        while not stop.is_set():
            for limit in [*CGROUP_ROOT.glob("evoteam/runner-*/memory.max"),
                          *CGROUP_ROOT.glob("memory/evoteam/runner-*/memory.limit_in_bytes")]:
                if str(limit) not in lifted:
                    try:
                        limit.write_text("max" if limit.name == "memory.max" else "-1")
                        lifted.add(str(limit))
                    except OSError:
                        pass
            time.sleep(0.005)

    case = next(c for c in CPU_CASES if c.name == "fault_sudden_oom")
    lifter = threading.Thread(target=lift, daemon=True)
    lifter.start()
    try:
        row = run_case(case, context)
    finally:
        stop.set()
        lifter.join()
    if not lifted:
        pytest.skip("no runner cgroup to lift the limit of on this host")
    assert row.caught and row.statuses[0] == "out_of_memory", row.line()
