"""The team run loop: a stall triggers a redesign (stand-in evaluator, fast), and a real run killed
with SIGKILL mid-run resumes without repeating any finished evaluation."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

from evoteam.families import load_families
from evoteam.harness.model import EvalResult, WorkloadResult
from evoteam.schema import read_journal
from evoteam.task import load_task
from evoteam.team import presets
from evoteam.team.budget import Ledger
from evoteam.team.offline import SearchSpace
from evoteam.team.runner import TeamRun
from evoteam.team.supervisor import Supervisor
from evoteam.team.toolbox import HarnessSettings, probe_workloads

from conftest import ROUNDS


def _flat_evaluator(request, timeout_s):
    """Every candidate passes at exactly 1.0x: nothing ever improves, so the team must stall."""
    return EvalResult(results=[WorkloadResult(uuid=u, status="PASSED", baseline="reference", timing_mode="wallclock",
                                              baseline_ms=1.0, candidate_ms=1.0, candidate_repeat_ms=1.0)
                               for u in request.workloads])


def _stalling_run(tmp_path, max_redesigns: int = 10):
    """An evolving team of the offline policy whose every candidate is 1.0x (stall after 4), 12 evaluations."""
    task = load_task("mla_decode")
    workloads = task.scaled_workloads("small")
    groups = {w.uuid: task.workload_group(w) for w in workloads}
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", probe_workloads=probe_workloads(workloads, groups, 1),
                                       all_workloads=[w.uuid for w in workloads])
    ledger = Ledger(token_budget=1000, max_evaluations=12, max_wall_time_s=600)
    spec = replace(presets.evolving("offline"), stall_evaluations=4)
    logs = []
    # the supervisor as the main job builds it from the `team` config group
    supervisor = Supervisor.from_config(SimpleNamespace(max_redesigns=max_redesigns), sorted(set(groups.values())),
                                        "offline")
    run = TeamRun(run_dir=tmp_path, task=task, workloads=workloads, settings=settings, ledger=ledger, preset=spec,
                  space=SearchSpace(load_families(task)), supervisor=supervisor, seed=1, log=logs.append,
                  evaluator=_flat_evaluator)
    assert run.run() == "evaluation budget spent: 12 of 12"
    return run, spec, logs


def test_a_stall_triggers_a_redesign_and_the_history_records_it(tmp_path):
    run, spec, logs = _stalling_run(tmp_path)
    teams = run.workspace.teams()
    assert len(teams) >= 2, logs
    assert teams[1].designed_by == "rules" and teams[1].spec.parent == spec.spec_id
    assert "no improvement beyond the noise" in teams[1].spec.reason and teams[1].spec.expected_effect
    ends = [t.outcome for t in teams if t.outcome is not None]
    assert ends and ends[0].verdict.startswith(("confirmed", "refuted"))
    # No design is made once no evaluation is left for it: every team ran at least one.
    assert all(t.at_evaluation < 12 for t in teams), [t.at_evaluation for t in teams]
    assert all(e.evaluations > 0 for e in ends), ends
    assert "team 1 (rules" in run.history() and "expected:" in run.history()
    # Every evaluation is a distinct candidate: nothing was evaluated twice.
    keys = [a.key for a in run.workspace.attempts]
    assert len(keys) == len(set(keys)) == 12


def test_max_redesigns_zero_keeps_the_first_team(tmp_path):
    """team.max_redesigns=0: the same stall that redesigns the team above leaves it as it is, to the budget's end
    (tests/test_cli_config.py: the key composes into the config the supervisor is built from)."""
    run, _, logs = _stalling_run(tmp_path, max_redesigns=0)
    assert [t.index for t in run.workspace.teams()] == [0], logs
    assert len(run.workspace.attempts) == 12


def _journal(run_dir):
    return read_journal(run_dir / "workspace" / "attempts.jsonl")


def test_sigkill_mid_run_then_resume_repeats_no_finished_evaluation(tmp_path):
    run_dir = tmp_path / "run"
    # a budget of 3: killed once 2 evaluations are journaled (the third, seconds long, unfinished), the resumed run
    # has one to run and two not to repeat (a budget of 4 cost one evaluation more and tested nothing more)
    args = [sys.executable, "-m", "evoteam", "hardware=cpu", "task.workloads=[00cb2bc2]", "budget.max_evaluations=3",
            "seed=5", "tracking=none", ROUNDS, f"run_dir={run_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    while len(_journal(run_dir)) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no evaluation finished in time"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its worker, mid-run
    proc.wait()
    before = _journal(run_dir)
    assert len(before) == 2

    resumed = subprocess.run([sys.executable, "-m", "evoteam", f"resume={run_dir}"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = _journal(run_dir)
    assert after[:len(before)] == before  # nothing lost
    keys = [a["key"] for a in after]
    assert len(keys) == len(set(keys)) == 3  # nothing repeated, and the budget still holds
    assert "resuming: team" in resumed.stdout
    assert "team history:" in resumed.stdout and "geomean speedup" in resumed.stdout
    assert (run_dir / "final" / "dispatch.json").is_file()


def test_an_evaluation_or_final_table_interrupted_part_way_resumes_from_its_finished_pieces(tmp_path, monkeypatch):
    """A long evaluation (the KDA champion on 24 workloads of an H200: most of a 10-minute lent-GPU call) runs in
    journaled pieces: after an interrupt only the workloads of unfinished pieces are evaluated again."""
    import pytest

    from evoteam.harness.model import EvalRequest
    from evoteam.team import toolbox

    monkeypatch.setattr(toolbox, "PIECE_WORKLOADS", 2)
    calls = []

    def interrupted_once(request, timeout_s):
        calls.append(list(request.workloads))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _flat_evaluator(request, timeout_s)

    request = EvalRequest(task="mla_decode", hardware="cpu", solution="kernel.py", workloads=list("abcde"))
    journal = tmp_path / "pieces.jsonl"
    with pytest.raises(KeyboardInterrupt):
        toolbox.evaluate_in_pieces(interrupted_once, request, 60, journal)
    result = toolbox.evaluate_in_pieces(interrupted_once, request, 60, journal)
    assert calls == [["a", "b"], ["c", "d"], ["c", "d"], ["e"]]
    assert [r.uuid for r in result.results] == list("abcde") and len(read_journal(journal)) == 3

    # The final table of a run: the same, per kernel of the dispatch; a finished table is measured afresh.
    task = load_task("mla_decode")
    workloads = task.scaled_workloads("small")
    uuids = [w.uuid for w in workloads]
    groups = {w.uuid: task.workload_group(w) for w in workloads}
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", probe_workloads=uuids, all_workloads=uuids)
    calls.clear()

    def interrupted_at_the_fourth(request, timeout_s):
        calls.append(list(request.workloads))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return _flat_evaluator(request, timeout_s)

    run = TeamRun(run_dir=tmp_path / "run", task=task, workloads=workloads, settings=settings,
                  ledger=Ledger(token_budget=1000, max_evaluations=1, max_wall_time_s=600),
                  preset=presets.single("offline"), space=SearchSpace(load_families(task)),
                  supervisor=Supervisor(sorted(set(groups.values())), ["offline"]), seed=1, log=lambda line: None,
                  evaluator=interrupted_at_the_fourth)
    run.run()
    assert calls == [uuids[:2], uuids[2:]]  # the one evaluation, in two pieces
    with pytest.raises(KeyboardInterrupt):
        run.final_measurement(timeout_s=60)
    final = run.final_measurement(timeout_s=60)
    assert calls[2:] == [uuids[:2], uuids[2:], uuids[2:]] and [r.uuid for r in final] == uuids
    run.final_measurement(timeout_s=60)
    assert calls[5:] == [uuids[:2], uuids[2:]]
