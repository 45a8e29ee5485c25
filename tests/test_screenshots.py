"""scripts/mlflow_screenshots.py: a real tracking store (a team run that evolves, logged by evoteam's tracker
with a stand-in evaluator, and its compare summary), moved to another folder as a store brought back from a
device is, then screenshotted in the MLflow UI by headless Chromium: small valid PNGs, and the pages they are
taken of (read back with --dump-dom) show the run, its team runs with the supervisor's reasons, and the summary.

The browser tests skip when Chromium is not installed (`make browser`); EVOTEAM_REQUIRE_BROWSER=1 (CI) makes that
skip a failure. The bad-input tests need no browser.
"""

import html
import importlib.util
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"

from mlflow import MlflowClient  # noqa: E402

from evoteam import compare, tracking  # noqa: E402
from evoteam.families import load_families  # noqa: E402
from evoteam.harness.model import EvalResult, WorkloadResult  # noqa: E402
from evoteam.task import load_task  # noqa: E402
from evoteam.team import presets  # noqa: E402
from evoteam.team.budget import Ledger  # noqa: E402
from evoteam.team.offline import SearchSpace  # noqa: E402
from evoteam.team.runner import TeamRun  # noqa: E402
from evoteam.team.supervisor import Supervisor  # noqa: E402
from evoteam.team.toolbox import HarnessSettings, probe_workloads  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "mlflow_screenshots.py"
PNG = b"\x89PNG\r\n\x1a\n"
SHOTS = ("runs_table.png", "run_page.png", "team_evolution.png", "team_run.png", "speedup_vs_tokens.png",
         "compare_summary.png")
TAGS = {"hardware": "cpu", "task": "mla_decode", "budget_mode": "equal", "team_preset": "evolving", "llm": "offline",
        "timing_mode": "wallclock", "sweep_id": "sweep-s", "seed": "1"}


def _script():
    spec = importlib.util.spec_from_file_location("mlflow_screenshots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})


def _browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("EVOTEAM_REQUIRE_BROWSER") == "1":
            pytest.fail("EVOTEAM_REQUIRE_BROWSER=1 but chromium is not installed (make browser)")
        pytest.skip("chromium is not installed (make browser installs Debian's package)")
    return browser


# ---------------------------------------------------------------------- a store with a team run that evolves
class _Evaluator:
    """Speedups 0.50x, 0.60x, 0.70x, then 0.70x on: the team stalls and the supervisor redesigns it."""

    def __init__(self):
        self.calls = 0

    def __call__(self, request, timeout_s):
        self.calls += 1
        speed = min(0.5 + 0.1 * (self.calls - 1), 0.7)
        return EvalResult(results=[WorkloadResult(uuid=u, status="PASSED", baseline="reference",
                                                  timing_mode="wallclock", baseline_ms=speed, candidate_ms=1.0,
                                                  candidate_repeat_ms=1.0) for u in request.workloads])


def _log_a_run(uri: str, run_dir: Path) -> str:
    task = load_task("mla_decode")
    workloads = [w for w in task.scaled_workloads("small") if w.origin.startswith("00cb2bc2")]
    groups = {w.uuid: task.workload_group(w) for w in workloads}
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", probe_workloads=probe_workloads(workloads, groups, 1),
                                       all_workloads=[w.uuid for w in workloads])
    tracker = tracking.Tracker(uri, "evoteam", run_dir, config={"budget": {"mode": "equal"}}, tags=TAGS,
                               run_name="mla_decode-cpu-evolving-equal")
    tracker.start()
    team_run = TeamRun(run_dir=run_dir, task=task, workloads=workloads, settings=settings,
                       ledger=Ledger(token_budget=1000, max_evaluations=10, max_wall_time_s=600),
                       preset=replace(presets.evolving("offline"), stall_evaluations=3),
                       space=SearchSpace(load_families(task)),
                       supervisor=Supervisor(sorted(set(groups.values())), ["offline"]), seed=1,
                       log=lambda line: None, evaluator=_Evaluator(), on_turn=tracker.sync)
    team_run.run()
    results = team_run.final_measurement(timeout_s=60)
    tracker.finish(team_run, results, "stand-in table", {results[0].uuid: "batch_size=1"})
    return tracker.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The store (evoteam-mlflow.db, mlartifacts/ beside it) logged in one folder, then moved to another: the
    artifact locations it names no longer exist, as in a store brought back from a device."""
    root = tmp_path_factory.mktemp("device")
    run_dir = root / "run"
    run_dir.mkdir()
    uri = f"sqlite:///{root}/evoteam-mlflow.db"
    run_id = _log_a_run(uri, run_dir)
    compare.compare(uri, "evoteam", sweep_id="sweep-s", out=lambda line: None)
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    teams = sorted(client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'"),
                   key=lambda t: int(t.data.tags["evoteam.team_index"]))
    assert len(teams) >= 2, "the stall should have made the supervisor redesign the team"
    back = tmp_path_factory.mktemp("back") / "store"
    back.mkdir()
    for name in ("evoteam-mlflow.db", tracking.ARTIFACTS_DIR):
        shutil.move(str(root / name), str(back / name))
    return {"folder": back, "run": run, "teams": teams}


@pytest.fixture(scope="module")
def shots(store, tmp_path_factory):
    _browser()
    out = tmp_path_factory.mktemp("shots") / "pngs"
    proc = _cli(store["folder"], out, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "stdout": proc.stdout}


def test_the_screenshots_are_small_pngs(shots, store):
    from PIL import Image

    lines = shots["stdout"].strip().splitlines()
    assert [line.split()[1] for line in lines] == [str(shots["out"] / name) for name in
                                                  ("speedup_vs_tokens.png", *SHOTS[:4], "compare_summary.png")], lines
    assert sorted(p.name for p in shots["out"].iterdir()) == sorted(SHOTS)
    for name in SHOTS:
        path = shots["out"] / name
        data = path.read_bytes()
        assert data.startswith(PNG) and 5_000 < len(data) < 200_000, (name, len(data))
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.width >= 600 and image.height >= 400, (name, image.size)
            # a page, not a blank or a spinner: many distinct colours (text, links, icons)
            assert len(image.convert("RGB").getcolors(1 << 16) or range(1 << 16)) > 20, name
    with Image.open(shots["out"] / "speedup_vs_tokens.png") as image:  # the tracker's own plot, copied
        assert image.size == (640, 400)
    assert f"team run '{store['teams'][-1].info.run_name}'" in shots["stdout"]  # the last redesign


def _page_text(browser: str, url: str, args: list[str]) -> list[str]:
    """The page's text after its scripts ran (virtual time), one line per text node."""
    proc = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = re.sub(r"<(script|style)\b.*?</\1>", "", proc.stdout, flags=re.S)
    return [html.unescape(t.strip()) for t in re.split(r"<[^>]+>", text) if t.strip()]


def test_the_pages_show_the_run_its_team_runs_and_the_summary(store, tmp_path):
    """The same pages the script shoots, opened the same way, read back as text."""
    browser = _browser()
    shots = _script()
    db = shots.find_store(str(store["folder"]))
    copy = shots.copy_store(db, tmp_path)
    with shots.mlflow_server(copy, shots.artifacts_root(db), tmp_path / "server.log") as url:
        client = MlflowClient(url)
        experiment = shots.pick_experiment(client, None)
        run = shots.pick_run(client, experiment, None)
        assert run.info.run_id == store["run"].info.run_id
        teams = shots.children_of(client, experiment.experiment_id, run.info.run_id)
        summary = shots.pick_summary(client, experiment, run)
        assert summary is not None and summary.data.tags[tracking.SWEEP] == "sweep-s"
        pages = {name: (page, window) for name, page, window, _ in shots.pages(client, experiment, run, teams, summary)}
        assert set(pages) == set(SHOTS) - {"speedup_vs_tokens.png"}  # the plot is the artifact itself

        def text(name, expected):
            """The page's text once `expected` shows in it. On a loaded machine the server's answers can come after
            the virtual-time budget has run out (CI once read a run page with its menu drawn but not the run), so a
            page without it is read again with a longer budget; a page that never shows it fails the assert."""
            page, (width, height) = pages[name]  # the table draws only the columns within the window
            for budget_ms in (15000, 45000, 90000):
                lines = _page_text(browser, f"{shots.ui_url(url)}/{page}",
                                   shots.browser_args(browser, tmp_path / name, budget_ms)
                                   + [f"--window-size={width},{height}"])
                if expected in lines or expected in " ".join(lines):
                    break
            return lines

        name = run.info.run_name
        assert name in text("runs_table.png", name)
        run_page = text("run_page.png", "Child runs")
        assert name in run_page and "Child runs" in run_page
        assert {t.info.run_name for t in teams} <= set(run_page), run_page[:200]
        redesigned = teams[-1]
        assert redesigned.data.tags["evoteam.designed_by"] == "rules"
        reason = redesigned.data.tags["evoteam.reason"]
        assert reason.startswith("no improvement beyond the noise")
        evolution = text("team_evolution.png", reason)
        assert {t.info.run_name for t in teams} <= set(evolution) and name not in evolution
        assert reason in evolution and redesigned.data.tags["evoteam.verdict"] in evolution
        assert reason in text("team_run.png", reason)
        summary_title = "equal vs extra budget (sweep sweep-s)"
        assert summary_title in text("compare_summary.png", summary_title)
    # the store itself was never written (the views are shared on the copy)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        assert not con.execute("select count(*) from experiment_tags where key like 'mlflow.sharedViewState.%'"
                               ).fetchone()[0]


def test_the_run_chosen_and_the_pages_without_a_plot(store, tmp_path):
    """--run picks by name or id; a run without team runs or a plot (a team run, here) gets its artifact page."""
    shots = _script()
    db = shots.find_store(f"sqlite:///{store['folder'] / 'evoteam-mlflow.db'}")
    assert db == shots.find_store(str(store["folder"]))
    client = MlflowClient(f"sqlite:///{shots.copy_store(db, tmp_path)}")
    experiment = shots.pick_experiment(client, None)
    assert shots.pick_experiment(client, "evoteam").experiment_id == experiment.experiment_id
    team = store["teams"][0]
    for wanted in (team.info.run_name, team.info.run_id):
        assert shots.pick_run(client, experiment, wanted).info.run_id == team.info.run_id
    for call, says in ((lambda: shots.pick_experiment(client, "nope"), "no experiment 'nope'"),
                       (lambda: shots.pick_run(client, experiment, "nope"), "no run 'nope'")):
        with pytest.raises(shots.BadInput, match=says):
            call()
    run = client.get_run(team.info.run_id)
    pages = {name: page for name, page, _, _ in shots.pages(client, experiment, run, [], None)}
    assert set(pages) == {"runs_table.png", "run_page.png", "team_evolution.png", "speedup_vs_tokens.png"}
    assert pages["speedup_vs_tokens.png"].startswith(f"#/experiments/{experiment.experiment_id}/runs/"
                                                     f"{team.info.run_id}/artifacts")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "empty.db"
    MlflowClient(f"sqlite:///{empty}").search_experiments()  # the schema and the Default experiment, no runs
    (tmp_path / "notes.db").write_text("not a database\n")
    (tmp_path / "two").mkdir()
    for name in ("a.db", "b.db"):
        shutil.copyfile(empty, tmp_path / "two" / name)
    for store, says in ((tmp_path / "missing", "no MLflow store at"), (empty, "the store holds no runs"),
                        (tmp_path / "notes.db", "not an MLflow store"), (tmp_path / "two", "2 *.db files there")):
        proc = _cli(store, tmp_path / "out", cwd=tmp_path)
        assert proc.returncode == 2, (store, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, (store, proc.stderr)
        assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
