"""MLflow tracking against a real sqlite store in tmp_path (no mocks of MLflow):

- a team run with a stand-in evaluator (fast, deterministic): the team evolves, every team is a
  nested run with its reason, expected effect and verdict, the metrics have one step per
  evaluation, an interrupted run resumes into the same MLflow run, and the artifacts are there;
- a real offline CPU sweep `python -m evoteam -m budget=equal,extra` into one store: two runs with
  their tags, params and artifacts, ended by the Hydra callback's summary run, and the compare
  command reads the runs back into the right table row;
- an LLM call through litellm to a real local OpenAI-compatible server becomes an MLflow trace
  with its token usage.
"""

import json
import math
import os
import shlex
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest

# Before mlflow is imported anywhere in this process: traces are written synchronously, no telemetry,
# and litellm reads its price list from the package, not the network.
os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from fake_openai import FakeOpenAI, reply  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from evoteam import compare, tracking  # noqa: E402
from evoteam.errors import UserError  # noqa: E402
from evoteam.families import load_families  # noqa: E402
from evoteam.harness.model import EvalResult, WorkloadResult, geomean  # noqa: E402
from evoteam.task import load_task  # noqa: E402
from evoteam.team import presets  # noqa: E402
from evoteam.team.budget import Ledger  # noqa: E402
from evoteam.team.offline import SearchSpace  # noqa: E402
from evoteam.team.runner import TeamRun  # noqa: E402
from evoteam.team.supervisor import Supervisor  # noqa: E402
from evoteam.team.toolbox import (
    HarnessSettings,  # noqa: E402
    probe_workloads,  # noqa: E402
)

from conftest import ROUNDS, run_evoteam, run_module  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _artifacts(client, run_id, path=None) -> set[str]:
    """Every artifact file of a run, as paths relative to its root."""
    out = set()
    for f in client.list_artifacts(run_id, path):
        out |= _artifacts(client, run_id, f.path) if f.is_dir else {f.path}
    return out


def _history(client, run_id, key) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


# ---------------------------------------------------------------------- a team run with a stand-in evaluator
class _Evaluator:
    """Speedups rise 0.50x, 0.60x, 0.70x, 0.80x, then stay at 0.80x (the team stalls and is redesigned);
    every fifth call fails its check, so the correct-candidate rate drops below 1."""

    def __init__(self):
        self.calls = 0

    def __call__(self, request, timeout_s):
        self.calls += 1
        if self.calls % 5 == 0:
            return EvalResult(results=[WorkloadResult(uuid=u, status="mismatch", detail="stand-in failure")
                                       for u in request.workloads])
        speed = min(0.5 + 0.1 * (self.calls - 1), 0.8)
        return EvalResult(results=[WorkloadResult(uuid=u, status="PASSED", baseline="reference",
                                                  timing_mode="wallclock", baseline_ms=speed, candidate_ms=1.0,
                                                  candidate_repeat_ms=1.0) for u in request.workloads])


def _team_run(run_dir: Path, evaluator, on_turn, max_evaluations=12):
    task = load_task("mla_decode")
    workloads = [w for w in task.scaled_workloads("small") if w.origin.startswith("00cb2bc2")]
    groups = {w.uuid: task.workload_group(w) for w in workloads}
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", probe_workloads=probe_workloads(workloads, groups, 1),
                                       all_workloads=[w.uuid for w in workloads])
    ledger = Ledger(token_budget=1000, max_evaluations=max_evaluations, max_wall_time_s=600)
    spec = replace(presets.evolving("offline"), stall_evaluations=3)
    return TeamRun(run_dir=run_dir, task=task, workloads=workloads, settings=settings, ledger=ledger, preset=spec,
                   space=SearchSpace(load_families(task)), supervisor=Supervisor(sorted(set(groups.values())),
                                                                                 ["offline"]),
                   seed=1, log=lambda line: None, evaluator=evaluator, on_turn=on_turn)


TAGS = {"hardware": "cpu", "task": "mla_decode", "budget_mode": "equal", "team_preset": "evolving", "llm": "offline",
        "timing_mode": "wallclock", "sweep_id": "none"}


def test_team_evolution_metrics_artifacts_and_resume(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("budget:\n  mode: equal\n")
    config = {"budget": {"mode": "equal", "tokens": 1000}, "task": {"workloads": ["00cb2bc2"]}, "resume": None}
    evaluator = _Evaluator()

    # First session: interrupted (Ctrl-C) after the turn that reaches 5 evaluations.
    tracker = tracking.Tracker(uri, "evoteam", run_dir, config=config, tags=TAGS, run_name="stand-in")
    tracker.start(config_file=run_dir / "config.yaml")
    run_id = tracker.run_id

    def interrupt_after_five(team_run):
        tracker.sync(team_run)
        if team_run.ledger.evaluations >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _team_run(run_dir, evaluator, interrupt_after_five).run()
    tracker.stop("KILLED")
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "KILLED"
    first = len(_history(client, run_id, "evaluations"))
    assert 5 <= first < 12

    # Second session: resume=<run dir> continues the same MLflow run to the end of the budget.
    tracker = tracking.Tracker(uri, "evoteam", run_dir, config=config, tags=TAGS, run_name="stand-in")
    tracker.start(config_file=run_dir / "config.yaml")
    assert tracker.run_id == run_id
    team_run = _team_run(run_dir, evaluator, tracker.sync)
    assert team_run.run() == "evaluation budget spent: 12 of 12"
    tracker.sync(team_run)
    results = team_run.final_measurement(timeout_s=60)
    tracker.finish(team_run, results, "stand-in table", {results[0].uuid: "batch_size=1"})

    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[tracking.KIND] == "run" and run.data.tags["mlflow.runName"] == "stand-in"
    assert {k: run.data.tags[f"evoteam.{k}"] for k in TAGS} == TAGS
    assert run.data.params["budget.tokens"] == "1000" and run.data.params["task.workloads"] == '["00cb2bc2"]'
    assert "resume" not in run.data.params

    # One step per evaluation, none repeated by the resume; the best is a running maximum.
    assert [s for s, _ in _history(client, run_id, "evaluations")] == list(range(1, 13))
    best = _history(client, run_id, "best_geomean_speedup")
    assert [s for s, _ in best] == list(range(1, 13))
    assert all(b >= a for (_, a), (_, b) in zip(best, best[1:]))
    assert best[0][1] == pytest.approx(0.5) and best[-1][1] == pytest.approx(0.8)
    rates = dict(_history(client, run_id, "correct_rate"))
    assert rates[4] == 1.0 and rates[5] == pytest.approx(0.8)
    for key in ("tokens_total", "tokens_prompt", "tokens_completion", "cost_usd", "tokens_role/explorer"):
        assert _history(client, run_id, key), key
    m = run.data.metrics
    assert m["final_geomean_speedup"] == pytest.approx(0.8) and m["final_passed"] == 1
    assert m["final_wins"] == 0 and m["final_workloads"] == 1 and m["final_evaluations"] == 12

    # Team evolution: one nested run per team configuration, in the journal's order.
    records = team_run.workspace.teams()  # the typed journal: one record per team, with its outcome
    assert len(records) >= 2 and all(r.outcome is not None for r in records)  # the stall made a redesign
    teams = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    teams = sorted(teams, key=lambda r: int(r.data.tags["evoteam.team_index"]))
    assert [int(t.data.tags["evoteam.team_index"]) for t in teams] == [r.index for r in records]
    for team, record in zip(teams, records):
        spec, end = record.spec, record.outcome
        assert team.data.tags[tracking.KIND] == "team"
        assert team.data.params["spec_id"] == spec.spec_id
        assert team.data.params["topology"] == spec.topology
        assert team.data.params["roles"] == ", ".join(f"{r.name}:{r.kind}" for r in spec.roles)
        assert team.data.tags["evoteam.reason"] == spec.reason and spec.reason
        assert team.data.tags["evoteam.expected_effect"] == spec.expected_effect
        assert team.info.status == "FINISHED"
        assert team.data.tags["evoteam.verdict"] == end.verdict
        ran = end.evaluations > 0  # a design made as the budget ran out never ran
        assert team.data.tags["evoteam.verdict"].startswith(("confirmed", "refuted") if ran else ("untested",))
        assert "team_spec.json" in _artifacts(client, team.info.run_id)
    assert teams[1].data.tags["evoteam.designed_by"] == "rules"
    assert teams[1].data.params["parent"] == records[0].spec.spec_id
    assert "no improvement beyond the noise" in teams[1].data.tags["evoteam.reason"]
    assert teams[0].data.metrics["team_evaluations"] == records[0].outcome.evaluations

    files = _artifacts(client, run_id)
    assert "config.yaml" in files and "teams/teams.jsonl" in files
    assert {f for f in files if f.startswith("kernels/")} and all(f.endswith(".py") for f in files
                                                                   if f.startswith("kernels/"))
    assert {"results/table.txt", "results/table.json", "results/results.json", "results/dispatch.json"} <= files
    assert {"plots/best_speedup_vs_evaluations.png", "plots/best_speedup_vs_tokens.png"} <= files
    local = Path(client.download_artifacts(run_id, "plots", str(tmp_path / "dl")))
    assert all(p.read_bytes().startswith(PNG) for p in local.glob("*.png"))
    table = json.loads(Path(client.download_artifacts(run_id, "results/table.json", str(tmp_path / "dl"))).read_text())
    assert table["rows"][0]["shape"] == "batch_size=1" and table["summary"]["final_passed"] == 1
    # Artifacts of a sqlite store live beside the database, not in the working directory.
    assert (tmp_path / "mlartifacts" / "evoteam").is_dir()


def test_tracking_none_and_an_unreachable_server(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"tracking": {"backend": "none", "tracking_uri": "x", "experiment": "e"}})
    tracker = tracking.open_tracker(cfg, tmp_path, TAGS)
    assert not tracker.enabled
    tracker.start()
    tracker.sync(None)
    tracker.stop()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match="no MLflow server answers there"):
        tracking.Tracker(f"http://127.0.0.1:{port}", "evoteam", tmp_path).start()


def test_a_new_sqlite_store_is_a_copy_of_mlflows_empty_one_and_an_existing_store_is_left_alone(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "cache"))

    def schema(db):
        """Each table's and index's definition, its items as a set: MLflow's migrations rebuild tables with their
        constraints in no fixed order (two stores it made itself differ so)."""
        with sqlite3.connect(db) as con:
            return (sorted((kind, name, frozenset((sql or "").split(", \n")))
                           for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master")),
                    con.execute("SELECT version_num FROM alembic_version").fetchall())

    made, seeded, again = (f"sqlite:///{tmp_path / name}.db" for name in ("made", "seeded", "again"))
    MlflowClient(tracking_uri=made).search_experiments()  # a store MLflow builds itself
    tracking.seed_sqlite_store(seeded)
    template = next((tmp_path / "cache" / "mlflow").glob("empty-*.db"))
    assert schema(tmp_path / "seeded.db") == schema(tmp_path / "made.db")
    stamp = template.stat().st_mtime_ns
    tracking.seed_sqlite_store(again)  # the template is made once
    assert template.stat().st_mtime_ns == stamp and (tmp_path / "again.db").stat().st_size == template.stat().st_size
    # opened, the copy is a store like the one MLflow made: its Default experiment is its own
    for uri in (made, seeded):
        client = MlflowClient(tracking_uri=uri)
        assert [(e.experiment_id, e.name) for e in client.search_experiments()] == [("0", "Default")]
        assert client.get_experiment("0").artifact_location == str(tmp_path / "mlruns" / "0")
        experiment_id = tracking.get_or_create_experiment(client, "evoteam", uri)
        client.create_run(experiment_id)
    # a store that is there is never replaced
    before = (tmp_path / "seeded.db").read_bytes()
    tracking.seed_sqlite_store(seeded)
    assert (tmp_path / "seeded.db").read_bytes() == before
    # where the cache cannot be used, nothing is made and nothing fails: MLflow builds the store
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "made.db"))  # a file, not a folder
    tracking.seed_sqlite_store(f"sqlite:///{tmp_path / 'later.db'}")
    assert not (tmp_path / "later.db").exists() and not list(tmp_path.glob(".later.db.*"))


# ---------------------------------------------------------------------- a real offline CPU sweep
@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """`python -m evoteam -m budget=equal,extra` (team single, one workload, 2 and 3 evaluations)."""
    root = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{root}/m.db"
    sweep_dir = root / "multirun" / "sweep-a"
    proc = run_evoteam("-m", "hardware=cpu", "task.workloads=[00cb2bc2]", "budget.max_evaluations=2", ROUNDS,
                       "budget.extra_multiplier=1.5", "budget=equal,extra", "team=single", "seed=3",
                       f"tracking.tracking_uri={uri}", f"hydra.sweep.dir={sweep_dir}", cwd=root,
                       env={"EVOTEAM_CACHE_DIR": str(root / "cache"), "DOCKER_HOST": f"unix://{root}/no-engine.sock"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"uri": uri, "root": root, "sweep_dir": sweep_dir, "stdout": proc.stdout}


def test_a_sweep_logs_one_run_per_job_and_ends_with_the_summary(sweep):
    client = MlflowClient(sweep["uri"])
    experiment = client.get_experiment_by_name("evoteam")
    runs = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'run'")
    assert sorted(r.data.tags["evoteam.budget_mode"] for r in runs) == ["equal", "extra"]
    # Newcomer defect 4: the UI opens the experiment on its runs table, and every job says where its run is.
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    for run in runs:
        t, p, m = run.data.tags, run.data.params, run.data.metrics
        assert (f"mlflow: see the run: {shlex.quote(sys.executable)} -m mlflow ui --backend-store-uri {sweep['uri']} "
                f"--port 5000, then "
                f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}"
                f"?workflowType=machine_learning") in sweep["stdout"]
        assert run.info.status == "FINISHED"
        assert t["evoteam.sweep_id"] == "sweep-a" and t["evoteam.hardware"] == "cpu"
        assert t["evoteam.task"] == "mla_decode" and t["evoteam.team_preset"] == "single"
        assert t["evoteam.llm"] == "offline" and t["evoteam.timing_mode"] == "cputime"
        assert p["budget.mode"] == t["evoteam.budget_mode"] and p["hardware.name"] == "cpu" and p["seed"] == "3"
        assert t["evoteam.seed"] == "3"  # repeated runs of a configuration differ in it (repeat=N: seeds 1..N)
        # executor=auto (the default) ran here, and the run says why: no engine answers at DOCKER_HOST
        assert t["evoteam.executor"] == "local" and t["evoteam.executor_reason"].startswith("auto: no container engine")
        assert {"final_fast_p_1", "final_fast_p_1.1", "final_fast_p_1.25"} <= set(m)  # KernelBench's fast_p
        assert m["final_evaluations"] == {"equal": 2, "extra": 3}[t["evoteam.budget_mode"]]
        assert m["final_workloads"] == 1 and "final_geomean_speedup" in m and m["final_tokens_total"] == 0
        best = _history(client, run.info.run_id, "best_geomean_speedup")
        assert best and all(b >= a for (_, a), (_, b) in zip(best, best[1:]))
        files = _artifacts(client, run.info.run_id)
        assert {"config.yaml", "results/table.txt", "results/table.json", "traces/traces.jsonl",
                "teams/teams.jsonl", "plots/best_speedup_vs_tokens.png",
                "plots/best_speedup_vs_evaluations.png"} <= files
        assert any(f.startswith("kernels/") and f.endswith(".py") for f in files)
        # The run id is kept in the run directory, for resume.
        saved = json.loads((Path(t["evoteam.run_dir"]) / tracking.RUN_FILE).read_text())
        assert saved["run_id"] == run.info.run_id
        team = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert len(team) == 1 and team[0].data.params["name"] == "single"

    # The Hydra callback's summary of this sweep.
    summaries = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'summary'")
    assert len(summaries) == 1 and summaries[0].data.tags["evoteam.sweep_id"] == "sweep-a"
    assert {"compare.md", "compare.csv", "compare_speedup.png", "compare_speedup_vs_tokens.png", "pairs.json",
            "compare_best_vs_evaluations.png"} <= _artifacts(
        client, summaries[0].info.run_id)
    assert "equal vs extra budget" in sweep["stdout"] and "| single | cpu" in sweep["stdout"].replace("  ", " ")


def test_compare_reads_the_runs_back_into_the_table(sweep):
    client = MlflowClient(sweep["uri"])
    experiment = client.get_experiment_by_name("evoteam")
    final = {r.data.tags["evoteam.budget_mode"]: r.data.metrics for r in
             client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'run'")}
    lines = []
    result = compare.compare(sweep["uri"], "evoteam", sweep_id="sweep-a", log_summary=False, out=lines.append)
    assert len(result.runs) == 2 and len(result.table) == 1  # the team and summary runs are not read
    row = result.table[0]
    assert (row.team, row.hardware, row.task) == ("single", "cpu", "mla_decode")
    for mode in ("equal", "extra"):
        cell = row.cells[mode]
        assert cell.runs == 1 and cell.geomean == pytest.approx(final[mode]["final_geomean_speedup"])
        assert cell.wins == final[mode]["final_wins"] and cell.workloads == 1 and cell.tokens == 0
    assert row.ratio == pytest.approx(row.cells["extra"].geomean / row.cells["equal"].geomean)
    assert f"{row.cells['equal'].geomean:.3f}x" in lines[0] and "| single" in lines[0]
    assert "single,cpu,mla_decode,1," in compare.csv_text(result.table)
    # Without a sweep id every run of the experiment counts (the same two here).
    assert len(compare.compare(sweep["uri"], "evoteam", log_summary=False, out=lambda s: None).runs) == 2


def test_compare_command_and_its_bad_input(sweep, tmp_path):
    def cli(*args):
        return run_module(list(args), module="evoteam.compare", cwd=tmp_path, timeout=120)

    ok = cli("--tracking-uri", sweep["uri"], "--sweep-id", "sweep-a", "--no-log")
    assert ok.returncode == 0, ok.stderr
    assert "| single" in ok.stdout and "extra/equal" in ok.stdout
    for args, says in ((["--tracking-uri", f"sqlite:///{tmp_path}/missing.db"], "no MLflow store"),
                       (["--tracking-uri", sweep["uri"], "--experiment", "nope"], "no experiment 'nope'"),
                       (["--tracking-uri", sweep["uri"], "--sweep-id", "nope"], "no finished evoteam runs"),
                       (["--frobnicate"], "unrecognized arguments")):
        bad = cli(*args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1 and says in bad.stderr, bad.stderr
    assert not (tmp_path / "missing.db").exists()


# ---------------------------------------------------------------------- LLM calls as traces
def test_an_llm_call_becomes_a_trace_with_token_usage(tmp_path):
    import mlflow
    from omegaconf import OmegaConf

    from evoteam.config import LLMConfig, LLMProvider
    from evoteam.llm import LLMClient

    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = tracking.Tracker(uri, "evoteam", tmp_path, tags={**TAGS, "llm": "openai/fake"}, trace_llm=True)
    tracker.start()
    try:
        with FakeOpenAI([reply("hello", prompt_tokens=12, completion_tokens=7)]) as server:
            cfg = OmegaConf.structured(LLMConfig(provider=LLMProvider.litellm, model="openai/fake",
                                                 api_base=server.url, max_retries=0))
            answer = LLMClient(cfg).complete([{"role": "user", "content": "hi"}], max_tokens=50)
        assert answer.content == "hello" and answer.usage.total_tokens == 19
        traces = MlflowClient(uri).search_traces(locations=[tracker.experiment_id])
        assert len(traces) == 1
        info = traces[0].info
        assert info.token_usage == {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}
        assert info.request_metadata.get("mlflow.sourceRun") == tracker.run_id
    finally:
        tracker.stop("FINISHED")
        mlflow.litellm.autolog(disable=True)


def test_plots_are_pngs(tmp_path):
    tracking.plot_steps([(0, 0.5), (10, 0.7), (25, 1.2)], "tokens spent", "t", tmp_path / "a.png")
    tracking.plot_steps([], "evaluations", "t", tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes().startswith(PNG) and (tmp_path / "b.png").read_bytes().startswith(PNG)
    assert tracking.flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": "1", "a.c": "[1, 2]", "d": "null"}
    assert tracking.resolve_uri("sqlite:///x.db") == "sqlite:///" + str(Path("x.db").resolve())
    assert math.isclose(geomean([2.0, 0.5, None, 0.0]), 1.0)


def test_resume_continues_the_same_mlflow_run(sweep):
    """Last in this module: it adds a second final measurement to the equal-budget job's run."""
    client = MlflowClient(sweep["uri"])
    experiment = client.get_experiment_by_name("evoteam")
    run = client.search_runs([experiment.experiment_id],
                             "tags.`evoteam.kind` = 'run' and tags.`evoteam.budget_mode` = 'equal'")[0]
    run_dir = run.data.tags["evoteam.run_dir"]
    env = {"EVOTEAM_CACHE_DIR": str(sweep["root"] / "cache")}
    # A finished run only shows its table: nothing is measured or logged again.
    shown = run_evoteam(f"resume={run_dir}", cwd=sweep["root"], env=env)
    assert shown.returncode == 0 and "finished earlier" in shown.stdout, shown.stdout[-3000:] + shown.stderr[-3000:]
    assert len(client.get_metric_history(run.info.run_id, "final_geomean_speedup")) == 1
    proc = run_evoteam(f"resume={run_dir}", "remeasure=true", cwd=sweep["root"], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"mlflow: run {run.info.run_id} " in proc.stdout
    runs = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'run'")
    assert len(runs) == 2 and client.get_run(run.info.run_id).info.status == "FINISHED"
    assert len(client.get_metric_history(run.info.run_id, "final_geomean_speedup")) == 2
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "evaluations")) == [1, 2]
