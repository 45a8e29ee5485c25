"""Team specs, the budget ledger, the progress record and the supervisor's stall detection and redesign."""

import pytest

from evoteam.harness.model import Placement
from evoteam.llm import Usage
from evoteam.team import presets
from evoteam.team.budget import BudgetExceeded, Ledger, token_budget
from evoteam.team.progress import progress_of
from evoteam.team.spec import RoleSpec, SpecError, TeamSpec
from evoteam.team.supervisor import Supervisor, rule_based_redesign, stalled, verdict
from evoteam.team.workspace import Attempt, Workspace, evaluation_key


def _attempt(i, status="PASSED", speedups=None, noise=0.01, team="t"):
    speedups = speedups if speedups is not None else {}
    geomean = None
    if speedups and status == "PASSED":
        prod = 1.0
        for s in speedups.values():
            prod *= s
        geomean = prod ** (1 / len(speedups))
    return Attempt(attempt_id=f"{i:04d}", key=f"k{i}", team=team, role="r", kind="benchmark",
                   origin={"family": "f", "params": {"x": i}}, workloads=list(speedups) or ["a"], status=status,
                   failure="" if status == "PASSED" else "boom", speedups=speedups if status == "PASSED" else {},
                   statuses={u: status for u in (speedups or {"a": 0})}, noise=noise, geomean=geomean)


def test_spec_ids_hash_the_design_and_keep_lineage():
    a = presets.evolving("offline")
    b = TeamSpec.from_json(a.to_json())
    assert a == b and a.spec_id == b.spec_id and hash(a) == hash(b)
    same_design = a.evolve(reason="another reason", expected_effect="x")
    assert same_design.spec_id == a.spec_id and same_design.parent == a.spec_id
    other = a.evolve(topology="parallel")
    assert other.spec_id != a.spec_id
    assert "explorer(explorer; reads summaries)" in a.summary()
    for preset in ("single", "fixed4", "evolving"):
        spec = presets.PRESETS[preset]("openai/gpt-4o-mini")
        assert all(r.model == "openai/gpt-4o-mini" for r in spec.roles)
    assert not presets.fixed4("offline").evolvable and presets.evolving("offline").evolvable


@pytest.mark.parametrize("bad, message", [
    (dict(roles=()), "needs at least one role"),
    (dict(roles=(RoleSpec("a", "explorer"), RoleSpec("a", "tuner"))), "role names must be unique"),
    (dict(roles=(RoleSpec("a", "wizard"),)), "kind 'wizard'"),
    (dict(roles=(RoleSpec("a", "tuner", tools=("rm_rf",)),)), "unknown tool"),
    (dict(roles=(RoleSpec("a", "tuner", reads=("secrets",)),)), "unknown sharing"),
    (dict(roles=(RoleSpec("a", "tuner"),), topology="mesh"), "topology 'mesh'"),
    (dict(roles=(RoleSpec("a", "tuner"),), order=("b",)), "order names unknown role"),
])
def test_invalid_specs_are_refused(bad, message):
    with pytest.raises(SpecError, match=message):
        TeamSpec(name="x", **bad)


def test_ledger_caps_tokens_evaluations_and_time():
    ledger = Ledger(token_budget=100, max_evaluations=2, max_wall_time_s=3600, max_output_tokens=50)
    assert ledger.allow_call() == 50
    ledger.record_llm("team", "tuner", Usage(prompt_tokens=60, completion_tokens=45, cached_tokens=5, calls=1))
    assert ledger.total.total_tokens == 105 and ledger.by_role["team/tuner"].cached_tokens == 5
    with pytest.raises(BudgetExceeded, match="token budget spent: 105 of 100"):
        ledger.allow_call()
    ledger.allow_evaluation()
    ledger.record_evaluation("team")
    ledger.record_evaluation("team")
    with pytest.raises(BudgetExceeded, match="evaluation budget spent: 2 of 2"):
        ledger.allow_evaluation()
    late = Ledger(token_budget=10, max_evaluations=5, max_wall_time_s=1, wall_time_s=5)
    with pytest.raises(BudgetExceeded, match="wall-time budget spent"):
        late.allow_evaluation()
    assert token_budget("equal", 1000, 4) == 1000 and token_budget("extra", 1000, 4) == 4000


def test_evaluations_in_flight_count_and_queueing_for_a_gpu_is_not_charged():
    ledger = Ledger(token_budget=10, max_evaluations=2, max_wall_time_s=3600)
    ledger.reserve_evaluation()
    ledger.reserve_evaluation()  # two in flight: the budget is spent although none has finished
    with pytest.raises(BudgetExceeded, match=r"2 in flight"):
        ledger.reserve_evaluation()
    ledger.release_evaluation()  # its executor failed: the reservation comes back
    ledger.reserve_evaluation()
    before = ledger.elapsed_s()
    # two evaluations submitted together: one waited 10 s for a GPU while the other ran 4 s, then ran 2 s
    ledger.record_evaluation("team", Placement("local", submitted=100.0, started=100.0, ended=104.0, gpu="0"))
    ledger.record_evaluation("team", Placement("local", submitted=100.0, started=110.0, ended=112.0, gpu="0"))
    assert ledger.evaluations == 2 and ledger.in_flight == 0
    assert ledger.queue_s == pytest.approx(6.0)  # 104..110: nothing ran, the team only waited
    assert ledger.elapsed_s() == pytest.approx(before - 6.0, abs=0.5)


def test_progress_record_counts_improvements_beyond_noise_and_failures():
    groups = {"a": "g1", "b": "g2"}
    attempts = [_attempt(1, speedups={"a": 1.0, "b": 1.0}), _attempt(2, speedups={"a": 1.01, "b": 1.0}),
                _attempt(3, "compile_error"), _attempt(4, "compile_error"), _attempt(5, speedups={"a": 1.5})]
    p = progress_of(attempts, groups)
    assert p.evaluations == 5 and p.passed == 3
    assert p.best_by_group == {"g1": 1.5, "g2": 1.0}
    assert p.failures["compile error"] == 2
    assert p.improvements == 2  # the first result and the 1.5x; 1.01x is within the 2% noise
    assert p.since_improvement == 0 and p.failure_streak == ("", 0)
    assert "best per group: g1 1.500x, g2 1.000x" in p.report()


def test_stall_triggers_a_rule_based_redesign_that_records_its_expectation():
    spec = presets.evolving("offline")
    flat = [_attempt(i, speedups={"a": 1.0}) for i in range(8)]
    p = progress_of(flat, {"a": "g1", "b": "g2"})
    why = stalled(spec, p, team_evaluations=8)
    assert why and "no improvement beyond the noise" in why
    new, designer = Supervisor(groups=["g1", "g2"], models=["offline"]).redesign(spec, p, why, {spec.spec_id})
    assert designer == "rules" and new.parent == spec.spec_id and new.spec_id != spec.spec_id
    assert new.reason.startswith(why) and new.expected_effect
    # Repeated failures call for a debugger first and the failure log shared with everyone.
    failing = flat + [_attempt(10 + i, "compile_error") for i in range(3)]
    p2 = progress_of(failing, {"a": "g1"})
    why2 = stalled(spec, p2, team_evaluations=11)
    assert "the same failure (compile error) 3 times in a row" in why2
    fix = rule_based_redesign(spec, p2, why2, ["g1"], {spec.spec_id}, ["offline"])
    assert fix.order[0] == "debugger" and all("failure_log" in r.reads for r in fix.roles)
    assert "compile error stop repeating" in fix.expected_effect
    # The next review says whether it worked.
    after = failing + [_attempt(20, speedups={"a": 1.2})]
    assert verdict(fix, p2, progress_of(after, {"a": "g1"})).startswith("confirmed")
    assert verdict(new, p, progress_of(flat + [_attempt(30, speedups={"a": 1.0})], {"a": "g1"})).startswith("refuted")
    # A design that never ran (the budget ended at the redesign) is neither confirmed nor refuted.
    assert verdict(new, p, p).startswith("untested: no evaluation ran")


def test_no_stall_while_improving_and_every_design_tried_once():
    spec = presets.evolving("offline")
    rising = [_attempt(i, speedups={"a": 1.0 + 0.1 * i}) for i in range(10)]
    assert stalled(spec, progress_of(rising, {"a": "g"}), 10) is None
    p = progress_of([_attempt(i, speedups={"a": 1.0}) for i in range(8)], {"a": "g"})
    tried = {spec.spec_id}
    designs = []
    while (new := rule_based_redesign(spec, p, "stall", ["g"], tried, ["offline"])) is not None:
        tried.add(new.spec_id)
        designs.append(new.name)
    assert len(designs) == len(set(designs)) >= 3


def test_workspace_journal_survives_a_cut_line(tmp_path):
    ws = Workspace(tmp_path / "ws")
    attempt_id, folder = ws.new_attempt_dir("print(1)")
    a = _attempt(1)
    a.attempt_id = attempt_id
    ws.record(a, {"results": []})
    with open(ws.journal, "a") as fh:
        fh.write('{"attempt_id": "0002", "ke')  # killed while writing
    again = Workspace(tmp_path / "ws")
    assert [x.attempt_id for x in again.attempts] == [attempt_id]
    # A resumed run appends after the cut line; what it appends is read back too.
    later = _attempt(2)
    later.attempt_id, _ = again.new_attempt_dir("print(2)")
    again.record(later, {"results": []})
    assert [x.attempt_id for x in Workspace(tmp_path / "ws").attempts] == [attempt_id, later.attempt_id]
    assert again.find("k1") is not None and evaluation_key("s", ["b", "a"], "check") == evaluation_key(
        "s", ["a", "b"], "check")
    assert "no verified kernel" in again.view("best_kernel") or again.best() is not None


def test_time_spent_measuring_what_is_inherited_is_not_charged():
    """A run whose wall time went to measuring the inherited champion (`uncharged_s`, added by the team runner)
    still has its budget: only the rest counts, and it is what a resumed run carries on from."""
    ledger = Ledger(token_budget=10, max_evaluations=2, max_wall_time_s=5, wall_time_s=8)
    with pytest.raises(BudgetExceeded, match="wall-time budget spent"):
        ledger.check_time()
    ledger.uncharged_s = 6.0  # the champion's measurement took 6 of those seconds
    ledger.check_time()
    assert 2.0 <= ledger.elapsed_s() < 3.0 and ledger.to_json()["wall_time_s"] == pytest.approx(ledger.elapsed_s(), abs=0.5)


def test_each_progress_line_shows_the_elapsed_time_and_an_estimate_of_what_is_left():
    from evoteam.team.runner import clock

    ledger = Ledger(token_budget=1000, max_evaluations=16, max_wall_time_s=3600, max_output_tokens=10)
    assert clock(ledger).startswith("[0:0") and "left" not in clock(ledger)  # no pace yet: no estimate
    ledger.wall_time_s, ledger.evaluations = 60.0, 4  # 15 s an evaluation so far, 12 left
    assert clock(ledger) == "[1:00, ~3:00 left]"
    ledger.max_wall_time_s = 100.0  # the wall-time budget ends the search sooner than the evaluations would
    assert clock(ledger) == "[1:00, ~0:40 left]"
    assert clock(ledger, final_s=25.0) == "[1:00, ~1:05 left]"  # and the final measurement comes after it
