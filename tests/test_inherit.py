"""workspace.inherit: a new run's shared workspace starts from the task's champion or an earlier run's
finished evaluations, measured outside every team's budget, recorded in MLflow, and kept by the final
dispatch wherever no team does better."""

import json
import os

import pytest

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"

from evoteam import hardware  # noqa: E402
from evoteam.errors import UserError  # noqa: E402
from evoteam.schema import read_journal  # noqa: E402
from evoteam.task import load_task  # noqa: E402
from evoteam.team.inherit import INHERITED_TEAM, resolve  # noqa: E402
from evoteam.team.progress import keep_inherited  # noqa: E402
from evoteam.team.workspace import Attempt  # noqa: E402

from conftest import REPO, ROUNDS, run_evoteam  # noqa: E402

CHAMPION = REPO / "kernels" / "mla_decode" / "champion_h200.json"
# The runs below inherit a champion of the torch_cpu family (tests/data/champion_cpu.json, a point per batch size):
# what they test is the inheritance, not the H200 champion, whose Triton kernels run under the interpreter on a CPU,
# about 3x longer per measurement (16 s against 6 s on the two workloads of the first run below, on the 2-core
# development VM).
# That the H200 champion builds and passes on a CPU is test_mla_flashdecode's; resolving it is tested here.
CPU_CHAMPION = REPO / "tests" / "data" / "champion_cpu.json"


def test_what_inherit_resolves_to_and_its_one_line_errors(tmp_path):
    task, cpu, h200 = load_task("mla_decode"), hardware.load_spec("cpu"), hardware.load_spec("h200")
    assert resolve("auto", task, cpu).kind == "none"  # no champion for a CPU
    auto = resolve("auto", task, h200)  # the H200 champion, its family verified there
    assert (auto.kind, auto.source) == ("champion", str(CHAMPION))
    assert resolve("none", task, h200).kind == "none"
    for bad, words in (("champion", "no champion for cpu"), (str(tmp_path), "neither a champion file nor a run"),
                       (str(REPO / "pyproject.toml"), "neither a champion file")):
        with pytest.raises(UserError) as err:
            resolve(bad, task, cpu)
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(UserError, match="a champion of task mla_decode, not kda_prefill"):
        resolve(str(CHAMPION), load_task("kda_prefill"), cpu)


def _attempts(run_dir):
    return read_journal(run_dir / "workspace" / "attempts.jsonl")


def test_a_run_inherits_an_earlier_runs_evaluations_and_keeps_the_better_kernels(tmp_path):
    common = ["hardware=cpu", "task.workloads=[00cb2bc2]", "team=single", "tracking=none", ROUNDS]
    first = tmp_path / "first"
    proc = run_evoteam(*common, "budget.max_evaluations=2", "seed=3", f"run_dir={first}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    earlier = _attempts(first)
    second = tmp_path / "second"
    proc = run_evoteam(*common, "budget.max_evaluations=1", "seed=4", f"workspace.inherit={first}",
                       f"run_dir={second}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the workspace starts from {len(earlier)} finished evaluation(s) of {first}" in proc.stdout
    attempts = _attempts(second)
    inherited = attempts[:len(earlier)]
    assert [a["attempt_id"] for a in inherited] == [a["attempt_id"] for a in earlier]
    assert all(a["team"] == INHERITED_TEAM for a in inherited)
    own = attempts[len(earlier):]
    assert len(own) == 1  # the team's budget (1 evaluation) is its own: the inherited ones are not charged
    assert own[0]["attempt_id"] not in {a["attempt_id"] for a in earlier}  # no id given twice
    dispatch = json.loads((second / "final" / "dispatch.json").read_text())
    (uuid,) = dispatch
    passed = [a for a in attempts if a["status"] == "PASSED" and uuid in a["speedups"]]
    kept = keep_inherited(uuid, [Attempt(**a) for a in passed])  # the fastest, unless within noise of inherited
    assert list(dispatch.values()) == [kept.attempt_id]
    assert all(a["noises"].keys() <= set(a["speedups"]) for a in own)  # per-workload noise journaled


def _attempt(attempt_id, team, speedup, noise, uuid="w1"):
    return Attempt(attempt_id=attempt_id, key=attempt_id, team=team, role="r", kind="benchmark", origin={},
                   workloads=[uuid], status="PASSED", failure="", speedups={uuid: speedup},
                   noises={uuid: noise} if noise is not None else {}, noise=noise)


def test_a_team_kernel_displaces_the_inherited_one_only_when_faster_beyond_the_noise():
    inherited = _attempt("0001", INHERITED_TEAM, 1.106, 0.02)
    lucky = _attempt("0010", "t1", 1.273, 0.466)  # the H200 run of 2026-12-02: 1.03x in its final table
    assert keep_inherited("w1", [inherited, lucky]).attempt_id == "0001"
    assert keep_inherited("w1", [inherited, _attempt("0011", "t1", 1.12, 0.01)]).attempt_id == "0001"  # 1.3% < 2%
    clear = _attempt("0012", "t1", 1.20, 0.03)  # 8.5% faster, its two timings 3% apart
    assert keep_inherited("w1", [inherited, clear]).attempt_id == "0012"
    assert keep_inherited("w1", [inherited, lucky, clear]).attempt_id == "0012"  # the fastest figure one can trust
    # no per-workload noise journaled (an older run): the attempt's largest noise stands in
    old = _attempt("0013", "t1", 1.20, None)
    old.noise = 0.2
    assert keep_inherited("w1", [inherited, old]).attempt_id == "0001"
    # without an inherited kernel the fastest is taken
    assert keep_inherited("w1", [_attempt("0002", "t0", 1.0, 0.01), lucky]).attempt_id == "0010"


def test_a_run_starts_from_a_champion_measured_once_and_recorded(tmp_path):
    """The champion is measured once, at the final table's grade; the final table takes that measurement as it is
    where no team measured a kernel (recorded in final/reused.json and MLflow) and measures the rest again;
    remeasure=true measures every workload again."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    run_dir = tmp_path / "run"
    proc = run_evoteam("hardware=cpu", "task.workloads=[00cb2bc2,a128f96f]", "team=single", ROUNDS,
                       "budget.max_evaluations=1", "seed=5", f"workspace.inherit={CPU_CHAMPION}",
                       f"tracking.tracking_uri={uri}", f"run_dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    attempts = _attempts(run_dir)
    first = attempts[0]
    assert first["team"] == INHERITED_TEAM and first["origin"]["inherited"] == CPU_CHAMPION.name
    assert first["origin"]["family"] == "torch_cpu" and first["status"] == "PASSED"
    assert first["grade"] == "final" and all(a["grade"] == "search" for a in attempts[1:])
    # the point the champion's dispatch runs on each workload: where the offline tuner starts from (the two
    # workloads have the batch sizes of the file's two entries, so each runs its own)
    assert set(first["origin"]["points"]) == set(first["workloads"]) and len(first["workloads"]) == 2
    table = {axes["batch_size"]: point for axes, point in json.loads(CPU_CHAMPION.read_text())["dispatch"]}
    batch = {w.uuid: w.axes["batch_size"] for w in load_task("mla_decode").scaled_workloads("small")}
    assert first["origin"]["points"] == {u: table[batch[u]] for u in first["workloads"]}
    assert len(attempts) == 2  # the champion, then the team's one evaluation
    # the team measured a kernel on one workload only (seed 5): the other keeps the champion's first figure
    (untouched,) = set(first["workloads"]) - set(attempts[1]["workloads"])
    reused = json.loads((run_dir / "final" / "reused.json").read_text())
    assert reused == {untouched: first["attempt_id"]}
    inherited = {r["uuid"]: r for r in
                 json.loads((run_dir / "workspace" / "attempts" / first["attempt_id"] / "result.json").read_text())[
                     "results"]}
    final = {r["uuid"]: r for r in json.loads((run_dir / "final" / "results.json").read_text())}
    assert final[untouched] == inherited[untouched]
    (contested,) = attempts[1]["workloads"]
    assert final[contested]["candidate_ms"] != inherited[contested]["candidate_ms"]  # measured again
    assert "1 workload(s) keep the inherited measurement" in proc.stdout
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("evoteam").experiment_id],
                                "tags.`evoteam.kind` = 'run'")
    assert run.data.tags["evoteam.inherit"] == f"champion:{CPU_CHAMPION}"
    assert run.data.metrics["final_reused_workloads"] == 1

    again = run_evoteam(f"resume={run_dir}", "remeasure=true", cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads((run_dir / "final" / "reused.json").read_text()) == {}
    final = {r["uuid"]: r for r in json.loads((run_dir / "final" / "results.json").read_text())}
    assert final[untouched]["candidate_ms"] != inherited[untouched]["candidate_ms"]


def test_the_presets_of_an_equal_budget_sweep_start_from_the_same_inheritance(tmp_path):
    """`-m team=single,fixed4,evolving` from a champion: each preset's workspace starts from the same inherited
    kernel (same source, workloads and dispatch points), tagged in MLflow, and each spends its own equal budget."""
    from pathlib import Path

    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    proc = run_evoteam("-m", "hardware=cpu", "task.workloads=[00cb2bc2]", "team=single,fixed4,evolving", ROUNDS,
                       "budget=equal", "budget.max_evaluations=1", "seed=6", f"workspace.inherit={CPU_CHAMPION}",
                       f"tracking.tracking_uri={uri}", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("evoteam").experiment_id], "tags.`evoteam.kind` = 'run'")
    assert sorted(r.data.tags["evoteam.team_preset"] for r in runs) == ["evolving", "fixed4", "single"]
    firsts, measured = [], []
    for run in runs:
        assert run.data.tags["evoteam.inherit"] == f"champion:{CPU_CHAMPION}"
        run_dir = Path(run.data.tags["evoteam.run_dir"])
        attempts = _attempts(run_dir)
        assert attempts[0]["team"] == INHERITED_TEAM
        assert [a for a in attempts if a["team"] != INHERITED_TEAM] and len(attempts) <= 2  # its own budget: 1
        firsts.append((attempts[0]["key"], attempts[0]["workloads"], attempts[0]["origin"]["points"]))
        result = json.loads((run_dir / "workspace" / "attempts" / attempts[0]["attempt_id"] / "result.json").read_text())
        measured.append((result["results"], "[shared measurement" in result["log_tail"]))
    assert firsts[0] == firsts[1] == firsts[2]
    # the champion was measured once, by the first preset to run; the others start from the very same figures
    assert sorted(shared for _, shared in measured) == [False, True, True]
    assert measured[0][0] == measured[1][0] == measured[2][0]
    assert "shared measurement: 1 workload(s)" in proc.stdout


def test_a_run_stopped_while_it_measures_the_champion_measures_it_on_resume_uncharged(tmp_path):
    """Stopped as by Ctrl-C (SIGINT, what scripts/gpu_default_run.sh sends when a lent-GPU call ends) while the
    champion is measured: the resumed run measures it then, as the team `inherited`, before the team's turns."""
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "evoteam", "hardware=cpu", "task.workloads=[00cb2bc2]", "team=single", ROUNDS,
            "budget.max_evaluations=1", "seed=5", f"workspace.inherit={CPU_CHAMPION}", "tracking=none", f"run_dir={run_dir}"]
    # SIGINT at its default in the child: a shell without job control starts its background commands with SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler (pytest run with `&` lost the signal)
    proc = subprocess.Popen(args, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    dispatched = run_dir / "workspace" / "dispatched.jsonl"
    deadline = time.monotonic() + 120
    # a whole line: the file is created an instant before its record is written, and a Ctrl-C in between stops a
    # run before anything was dispatched (which the resumed run then measures without a word of anything in flight)
    while not (dispatched.is_file() and dispatched.read_bytes().endswith(b"\n")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    lines = []
    for line in proc.stdout:  # once the state is saved, a second Ctrl-C changes nothing: still 130 (not killed by it)
        lines.append(line)
        if b"interrupted; state saved" in line:
            proc.send_signal(signal.SIGINT)
            break
    out = b"".join(lines).decode() + proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, out[-2000:]
    assert _attempts(run_dir) == []  # stopped before the champion's evaluation ended

    resumed = run_evoteam(f"resume={run_dir}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "1 evaluation(s) were in flight" in resumed.stdout
    attempts = _attempts(run_dir)
    assert [a["team"] for a in attempts][:1] == [INHERITED_TEAM] and len(attempts) == 2  # and the team's one
    assert attempts[0]["origin"]["inherited"] == CPU_CHAMPION.name and attempts[0]["status"] == "PASSED"


def test_where_both_figures_carry_intervals_the_dispatch_decides_by_them_and_says_so():
    """A team's kernel displaces the inherited one only if its speedup's 95% interval lies above the inherited
    one's; where either figure lacks an interval, the noise rule decides. The reason names the rule."""
    from evoteam.team.progress import keep_inherited_why

    inherited = _attempt("0001", INHERITED_TEAM, 1.106, 0.01)
    inherited.intervals = {"w1": [1.09, 1.12]}
    overlapping = _attempt("0014", "t1", 1.20, 0.01)  # 8.5% faster by its figure, but its rounds spread wide
    overlapping.intervals = {"w1": [1.05, 1.30]}
    kept, why = keep_inherited_why("w1", [inherited, overlapping])
    assert kept.attempt_id == "0001" and why == "inherited kept: no team's kernel beat it beyond the intervals"
    clear = _attempt("0015", "t1", 1.20, 0.01)
    clear.intervals = {"w1": [1.17, 1.23]}
    kept, why = keep_inherited_why("w1", [inherited, overlapping, clear])
    assert kept.attempt_id == "0015" and why == "beats the inherited kernel beyond the intervals"
    no_interval = _attempt("0016", "t1", 1.20, 0.03)  # an older journal: the noise rule
    kept, why = keep_inherited_why("w1", [inherited, no_interval])
    assert kept.attempt_id == "0016" and why == "beats the inherited kernel beyond the noise"
