"""The team's tracking server: `mlflow/server.sh` starts a real `mlflow server` on 127.0.0.1 (a free
port, its sqlite store and artifacts in tmp_path), a real offline CPU run logs to it over HTTP and
reads back, and headless Chromium opens the MLflow UI it serves and finds the run and its speedup.

The browser test is skipped when Chromium is not installed (`make browser` installs Debian's
package); CI installs it and sets EVOTEAM_REQUIRE_BROWSER=1, which turns that skip into a failure.
"""

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"

from mlflow import MlflowClient  # noqa: E402

from evoteam import tracking  # noqa: E402

from conftest import ROUNDS, mlflow_server, run_evoteam  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the file, as deployed (two workers over its sqlite store): its start is most of a test's time."""
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server"), workers=2) as running:
        yield running


@pytest.fixture(scope="module")
def logged_run(server, tmp_path_factory):
    """A real offline CPU run (one workload, 2 evaluations) logged to the server."""
    cwd = tmp_path_factory.mktemp("run")
    proc = run_evoteam("hardware=cpu", "task.workloads=[00cb2bc2]", "budget.max_evaluations=2", "seed=2", ROUNDS,
                       "team=fixed4", f"tracking.tracking_uri={server['url']}", "tracking.experiment=team-server",
                       f"run_dir={cwd / 'run'}", cwd=cwd, env={"EVOTEAM_CACHE_DIR": str(cwd / "cache")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = MlflowClient(server["url"])
    experiment = client.get_experiment_by_name("team-server")
    runs = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'run'")
    assert len(runs) == 1
    return {"client": client, "run": runs[0], "experiment": experiment, "cwd": cwd}


def test_a_run_logged_to_the_server_reads_back(server, logged_run, tmp_path):
    client, run = logged_run["client"], logged_run["run"]
    assert run.info.status == "FINISHED" and run.data.tags["evoteam.team_preset"] == "fixed4"
    assert run.data.params["tracking.tracking_uri"] == server["url"]
    assert run.data.metrics["final_workloads"] == 1 and run.data.metrics["final_evaluations"] == 2
    assert "final_geomean_speedup" in run.data.metrics
    evaluations = client.get_metric_history(run.info.run_id, "evaluations")
    assert sorted(m.step for m in evaluations) == [1, 2]
    teams = client.search_runs([logged_run["experiment"].experiment_id],
                               f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert len(teams) == 1 and teams[0].data.params["roles"].startswith("explorer:explorer")
    # Artifacts go through the server (proxied) into its data folder.
    assert logged_run["experiment"].artifact_location.startswith("mlflow-artifacts:")
    plots = Path(client.download_artifacts(run.info.run_id, "plots", str(tmp_path)))
    assert sorted(p.name for p in plots.glob("*.png")) == ["best_speedup_vs_evaluations.png",
                                                           "best_speedup_vs_tokens.png"]
    assert all(p.read_bytes().startswith(PNG) for p in plots.glob("*.png"))
    stored = list((server["data"] / "artifacts").rglob("table.txt"))
    assert len(stored) == 1 and "geomean speedup" in stored[0].read_text()
    assert (logged_run["cwd"] / "run" / tracking.RUN_FILE).is_file()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _page_text(browser: str, url: str, profile: Path) -> list[str]:
    """The UI page's text after its scripts ran (virtual time), one line per text node."""
    profile.mkdir(parents=True, exist_ok=True)
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}",
            # Every host name but the loopback server's fails to resolve: the page reaches nothing else.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--virtual-time-budget=15000", "--dump-dom", url]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = re.sub(r"<(script|style)\b.*?</\1>", "", proc.stdout, flags=re.S)
    return [html.unescape(t.strip()) for t in re.split(r"<[^>]+>", text) if t.strip()]


def test_the_mlflow_ui_shows_the_run_and_its_speedup(server, logged_run, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("EVOTEAM_REQUIRE_BROWSER") == "1":
            pytest.fail("EVOTEAM_REQUIRE_BROWSER=1 but chromium is not installed (make browser)")
        pytest.skip("chromium is not installed (make browser installs Debian's package)")
    run = logged_run["run"]
    experiment_id = logged_run["experiment"].experiment_id
    name = run.data.tags["mlflow.runName"]

    runs_page = _page_text(browser, f"{server['url']}/#/experiments/{experiment_id}/runs", tmp_path / "p1")
    assert name in runs_page, runs_page[:80]
    # Newcomer defect 4: the experiment's own page (what a click on it opens) is the runs table, not
    # MLflow 3's GenAI overview with "No data available".
    landing = _page_text(browser, f"{server['url']}/#/experiments/{experiment_id}?workflowType=machine_learning",
                         tmp_path / "p0")
    assert name in landing and "No data available" not in landing, " | ".join(landing)[:3000]

    run_page = _page_text(browser, f"{server['url']}/#/experiments/{experiment_id}/runs/{run.info.run_id}",
                          tmp_path / "p2")
    assert name in run_page
    shown = run_page[run_page.index("final_geomean_speedup") + 1]
    assert float(shown) == pytest.approx(run.data.metrics["final_geomean_speedup"], rel=1e-6)
    assert "best_geomean_speedup" in run_page and "evoteam.team_preset" in run_page


WRITER = """
import sys, mlflow
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name("writers")
experiment_id = experiment.experiment_id if experiment else None
if experiment_id is None:
    try:
        experiment_id = client.create_experiment("writers")
    except mlflow.exceptions.MlflowException:  # another writer created it first
        experiment_id = client.get_experiment_by_name("writers").experiment_id
run = client.create_run(experiment_id, tags={"writer": sys.argv[2]})
for step in range(40):
    client.log_metric(run.info.run_id, "speedup", step * 0.1, step=step)
client.log_batch(run.info.run_id, params=[mlflow.entities.Param(f"p{i}", str(i)) for i in range(10)])
client.set_terminated(run.info.run_id)
"""


def test_concurrent_writers_lose_nothing(server):
    """Drivers on a cluster log to one server: eight processes at once (a sweep's jobs), each a run with 40
    metric steps and 10 params, through the server as deployed (two workers over its sqlite store)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    writers = [subprocess.Popen([os.sys.executable, "-c", WRITER, server["url"], str(i)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(8)]
    outputs = [w.communicate(timeout=300)[0].decode() for w in writers]
    assert [w.returncode for w in writers] == [0] * 8, outputs
    client = MlflowClient(server["url"])
    experiments = [e for e in client.search_experiments() if e.name == "writers"]
    assert len(experiments) == 1
    runs = client.search_runs([experiments[0].experiment_id])
    assert sorted(int(r.data.tags["writer"]) for r in runs) == list(range(8))
    for run in runs:
        assert run.info.status == "FINISHED" and len(run.data.params) == 10
        history = client.get_metric_history(run.info.run_id, "speedup")
        assert sorted(m.step for m in history) == list(range(40))
