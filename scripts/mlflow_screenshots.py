"""Screenshots of an evoteam MLflow store in the MLflow UI (headless Chromium), small PNGs to commit
beside a results table (issue 42 item 4: the device calls' runs brought back and opened here).

    python scripts/mlflow_screenshots.py STORE OUT_DIR [--experiment NAME] [--run RUN_NAME_OR_ID]

STORE is a tracking store as evoteam writes it: the sqlite file (`evoteam-mlflow.db`, or what
tracking.tracking_uri named; a `sqlite:///` URI works too) with its artifacts beside it in `mlartifacts/`,
or the folder that holds them (or `mlflow/server.sh`'s data folder: `mlflow.db` and `artifacts/`). The store
is never written: the script works on a copy whose artifact locations point at the folder beside the file
(a store brought back from another machine names that machine's paths), serves it with `mlflow server` on a
free 127.0.0.1 port, and writes into OUT_DIR:

  runs_table.png         the experiment's runs table (preset, budget, final speedup, evaluations, tokens)
  run_page.png           one run's page: its metrics, tags and child runs (one per team configuration)
  team_evolution.png     that run's team runs in a table: who designed each team, the supervisor's reason,
                         the verdict and the expected effect
  team_run.png           the last redesigned team's page: its spec, the whole reason (a param), its outcome
  speedup_vs_tokens.png  the run's own plot artifact (plots/best_speedup_vs_tokens.png), else its artifact page
  compare_summary.png    the sweep's summary run (evoteam.compare) on its compare.md; skipped when the store has
                         none

The run is --run (an id or a run name), else the evoteam run with the most team runs. Each PNG is cut to
256 colours (and narrowed if still over 200 KB). One line per file written; bad input is one line and exit 2.
Needs Chromium (`make browser`); the page reaches nothing but the local server. The tables' columns come from
views shared on the copy (the UI's Share: an experiment tag opened by ?viewStateShareKey=), so their pages say
"You're viewing a shared view".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from evoteam.tracking.server import free_port, running  # noqa: E402
from evoteam.tracking.store import ARTIFACTS_DIR, KIND, SWEEP  # noqa: E402

EXIT_BAD_INPUT = 2
WINDOW = (1400, 900)
MAX_BYTES = 200_000
SHARE_TAG = "mlflow.sharedViewState."  # the UI's shared view state: an experiment tag, opened by ?viewStateShareKey=
STORE_NAMES = ("evoteam-mlflow.db", "mlflow.db")
# The browser opens the UI under this name (mapped to 127.0.0.1): on 127.0.0.1 or localhost the UI opens its
# assistant panel over a third of the page.
UI_HOST = "mlflow-ui"
PLOT = "plots/best_speedup_vs_tokens.png"  # evoteam/tracking/tracker.py logs it at the end of a run


class BadInput(Exception):
    """One line for the user, exit 2."""


# ---------------------------------------------------------------------- the store
def find_store(store: str) -> Path:
    """The sqlite file of STORE (a file, a sqlite:/// URI, or the folder holding it)."""
    path = Path(store[len("sqlite:///"):].split("?", 1)[0]) if store.startswith("sqlite:///") else Path(store)
    if store.startswith(("http://", "https://")):
        raise BadInput(f"{store}: give the store itself (its sqlite file or folder), not a server")
    if path.is_dir():
        named = [path / n for n in STORE_NAMES if (path / n).is_file()]
        found = named or sorted(path.glob("*.db"))
        if len(found) != 1 and not named:
            raise BadInput(f"no MLflow store in {path}: " + ("no *.db file there" if not found else
                           f"{len(found)} *.db files there; give one"))
        path = found[0]
    if not path.is_file():
        raise BadInput(f"no MLflow store at {store}: no such file or folder")
    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise BadInput(f"{path}: not an MLflow store (not a sqlite file)")
    return path.resolve()


def artifacts_root(db: Path) -> Path:
    """Where the artifacts beside the store are: mlartifacts/ (evoteam's sqlite store) or artifacts/ (server.sh)."""
    for name in (ARTIFACTS_DIR, "artifacts"):
        if (db.parent / name).is_dir():
            return db.parent / name
    return db.parent / ARTIFACTS_DIR


def copy_store(db: Path, into: Path) -> Path:
    """A copy of the store to serve (the server may migrate its schema; the shared views are written there),
    its file:// artifact locations that do not exist on this machine pointed at the folder beside the store."""
    copy = into / "mlflow.db"
    root = artifacts_root(db)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as src, \
                contextlib.closing(sqlite3.connect(copy)) as con:
            src.backup(con)  # consistent even while a run still writes to the store
            for experiment_id, location in con.execute("select experiment_id, artifact_location from experiments"
                                                       ).fetchall():
                if not (location or "").startswith("file://"):
                    continue
                old = urllib.parse.unquote(urllib.parse.urlparse(location).path)
                new = root / Path(old).name  # evoteam's layout: mlartifacts/<experiment>/<run id>/artifacts
                if Path(old).is_dir() or not new.is_dir():
                    continue
                con.execute("update experiments set artifact_location = ? where experiment_id = ?",
                            (new.as_uri(), experiment_id))
                con.execute("update runs set artifact_uri = ? || substr(artifact_uri, ?) where experiment_id = ? "
                            "and substr(artifact_uri, 1, ?) = ?",
                            (new.as_uri(), len(location) + 1, experiment_id, len(location), location))
            con.commit()
            runs = con.execute("select count(*) from runs where lifecycle_stage = 'active'").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"{db}: not an MLflow store ({' '.join(str(exc).split())[:200]})") from None
    if not runs:
        raise BadInput(f"{db}: the store holds no runs")
    return copy


# ---------------------------------------------------------------------- the server
@contextlib.contextmanager
def mlflow_server(db: Path, artifacts: Path, log_path: Path, timeout_s: float = 180):
    """`mlflow server` over `db` on a free 127.0.0.1 port until the block ends (also on error)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    hosts = f"127.0.0.1:{port},localhost:{port},{UI_HOST}:{port}"
    # MLflow's server-side jobs off, as mlflow/server.sh has them: the pages need none, and their huey consumers took
    # more CPU than the server and the browser together (24 CPU-s of a 45 CPU-s shoot, 2-core development VM)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    args = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
            "--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--allowed-hosts", hosts, "--cors-allowed-origins", f"http://{UI_HOST}:{port}"]
    try:
        with running(args, url, log_path, db.parent, env, timeout_s):
            yield url
    except RuntimeError as exc:
        raise RuntimeError(f"mlflow {exc}") from None


# ---------------------------------------------------------------------- the browser
def ui_url(url: str) -> str:
    """The server's address as the browser opens it."""
    return url.replace("127.0.0.1", UI_HOST, 1)


def find_browser(given: str | None) -> str:
    browser = given or shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser or not shutil.which(browser):
        raise BadInput("chromium is not installed (make browser installs Debian's package), or give --browser PATH")
    return browser


def browser_args(browser: str, profile: Path, budget_ms: int) -> list[str]:
    """Headless Chromium that reaches nothing but 127.0.0.1 (as tests/test_mlflow_server.py runs it)."""
    profile.mkdir(parents=True, exist_ok=True)
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
            # every host name but the UI's fails to resolve: the page reaches nothing but the local server
            f"--host-resolver-rules=MAP {UI_HOST} 127.0.0.1 , MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            f"--virtual-time-budget={budget_ms}"]


def screenshot(browser: str, url: str, path: Path, profile: Path, budget_ms: int,
               window: tuple[int, int] = WINDOW) -> None:
    args = browser_args(browser, profile, budget_ms) + [f"--window-size={window[0]},{window[1]}",
                                                        f"--screenshot={path}", url]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0 or not path.is_file():
        raise RuntimeError(f"chromium could not take {url} ({proc.returncode}): {proc.stderr.strip()[-300:]}")


def shrink(path: Path) -> str:
    """The PNG cut to 256 colours (and narrowed until under MAX_BYTES); its size, as words."""
    try:
        from PIL import Image
    except ImportError:
        return f"{path.stat().st_size // 1024} KB"
    with Image.open(path) as image:
        image.load()
    image = image.convert("RGB")
    while True:
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        if path.stat().st_size <= MAX_BYTES or image.width <= 600:
            break
        image = image.resize((image.width * 4 // 5, image.height * 4 // 5), Image.LANCZOS)
    return f"{image.width}x{image.height}, {path.stat().st_size // 1024} KB"


# ---------------------------------------------------------------------- what to show
def pick_experiment(client, name: str | None):
    if name is not None:
        found = client.get_experiment_by_name(name)
        if found is None:
            names = [e.name for e in client.search_experiments(max_results=50)]
            raise BadInput(f"no experiment {name!r} in the store; experiments there: {', '.join(names) or 'none'}")
        return found
    with_runs = [e for e in client.search_experiments(max_results=200)
                 if client.search_runs([e.experiment_id], max_results=1)]
    for e in with_runs:
        if e.name == "evoteam":
            return e
    if not with_runs:
        raise BadInput("the store holds no runs")
    if len(with_runs) > 1:
        raise BadInput(f"the store holds runs in {len(with_runs)} experiments; give --experiment (one of "
                       f"{', '.join(e.name for e in with_runs)})")
    return with_runs[0]


def children_of(client, experiment_id: str, run_id: str) -> list:
    teams = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{run_id}'", max_results=1000)
    return sorted(teams, key=lambda r: (int(r.data.tags.get("evoteam.team_index", 0)), r.info.start_time))


def pick_run(client, experiment, wanted: str | None):
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    if not runs:
        raise BadInput(f"experiment {experiment.name!r} holds no runs")
    if wanted is not None:
        match = [r for r in runs if wanted in (r.info.run_id, r.data.tags.get("mlflow.runName"))]
        if not match:
            raise BadInput(f"no run {wanted!r} (an id or a run name) in experiment {experiment.name!r}")
        return max(match, key=lambda r: r.info.start_time)
    candidates = [r for r in runs if r.data.tags.get(KIND) == "run"] or \
                 [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    count = {r.info.run_id: 0 for r in candidates}
    for r in runs:
        parent = r.data.tags.get("mlflow.parentRunId")
        if parent in count:
            count[parent] += 1
    return max(candidates, key=lambda r: (count[r.info.run_id], r.info.start_time))


def pick_summary(client, experiment, run):
    """The summary run of `run`'s sweep, else the newest summary of the experiment, else None."""
    summaries = client.search_runs([experiment.experiment_id], f"tags.`{KIND}` = 'summary'",
                                   order_by=["attributes.start_time DESC"], max_results=100)
    sweep = run.data.tags.get(SWEEP)
    same = [s for s in summaries if s.data.tags.get(SWEEP) == sweep]
    return (same or summaries or [None])[0]


def has_artifact(client, run_id: str, path: str) -> bool:
    folder, _, _ = path.rpartition("/")
    try:
        return any(f.path == path for f in client.list_artifacts(run_id, folder or None))
    except Exception:  # no artifacts where the store says they are
        return False


def share_view(client, experiment_id: str, key: str, state: dict) -> str:
    """A view of the runs table (filter, order, columns), as the UI's Share button stores it; its key."""
    client.set_experiment_tag(experiment_id, SHARE_TAG + key, json.dumps(state))
    return key


def column(kind: str, key: str) -> str:
    """A column of the runs table, as the UI names it."""
    return f"{kind}.`{key}`"


RUN_NAME = column("attributes", "Run Name")


def pages(client, experiment, run, teams: list, summary) -> list[tuple[str, str, tuple[int, int], str]]:
    """(file, UI page under the server's root, window size, what it shows); the views are shared on the
    store's copy."""
    eid, rid, name = experiment.experiment_id, run.info.run_id, run.info.run_name
    ml = "workflowType=machine_learning"
    run_columns = [column("tags", "evoteam.kind"), column("tags", "evoteam.team_preset"),
                   column("tags", "evoteam.budget_mode"), column("tags", "evoteam.hardware"),
                   column("tags", "evoteam.task"), column("tags", "evoteam.seed"),
                   column("metrics", "final_geomean_speedup"), column("metrics", "final_evaluations"),
                   column("metrics", "final_tokens_total")]
    table = share_view(client, eid, "evoteam-runs", {
        "orderByKey": "attributes.start_time", "orderByAsc": False,  # newest first, team runs under their run
        # the widths apply to the columns named in columnOrder
        "selectedColumns": run_columns, "columnOrder": [RUN_NAME, *run_columns],
        "columnWidths": {RUN_NAME: 300, **dict(zip(run_columns, (90, 140, 140, 120, 110, 90, 170, 170, 170)))}})
    team_columns = [column("tags", "evoteam.designed_by"), column("tags", "evoteam.reason"),
                    column("tags", "evoteam.verdict"), column("tags", "evoteam.expected_effect"),
                    column("metrics", "team_evaluations"), column("metrics", "best_after")]
    widths = {column("tags", "evoteam.designed_by"): 110, column("tags", "evoteam.reason"): 720,
              column("tags", "evoteam.verdict"): 480, column("tags", "evoteam.expected_effect"): 360}
    team_view = share_view(client, eid, "evoteam-teams", {
        # ordered by anything but the start time, the UI lists the team runs flat instead of under their parent
        "searchFilter": f"tags.mlflow.parentRunId = '{rid}'", "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True, "selectedColumns": team_columns, "columnOrder": [RUN_NAME, *team_columns],
        "columnWidths": {RUN_NAME: 220, **widths}})
    out = [("runs_table.png", f"#/experiments/{eid}/runs?{ml}&viewStateShareKey={table}", (1920, 900),
            f"the runs table of experiment {experiment.name!r}"),
           ("run_page.png", f"#/experiments/{eid}/runs/{rid}?{ml}", WINDOW, f"run {name!r} and its team runs"),
           ("team_evolution.png", f"#/experiments/{eid}/runs?{ml}&viewStateShareKey={team_view}", (2200, 700),
            f"the {len(teams)} team runs of {name!r}: who designed each, the supervisor's reason, the verdict")]
    redesigned = [t for t in teams if t.data.tags.get("evoteam.designed_by", "preset") != "preset"]
    if redesigned or teams:
        team = (redesigned or teams)[-1]
        out.append(("team_run.png", f"#/experiments/{eid}/runs/{team.info.run_id}?{ml}", (1400, 1300),
                    f"team run {team.info.run_name!r}: its spec, the supervisor's reason, its outcome"))
    if not has_artifact(client, rid, PLOT):
        out.append(("speedup_vs_tokens.png", f"#/experiments/{eid}/runs/{rid}/artifacts?{ml}", WINDOW,
                    f"the artifacts of {name!r} (it logged no speedup-against-tokens plot)"))
    if summary is not None:
        out.append(("compare_summary.png", f"#/experiments/{eid}/runs/{summary.info.run_id}/artifacts/compare.md?{ml}",
                    (2200, 800), f"the compare summary {summary.info.run_name!r}"))
    return out


# ---------------------------------------------------------------------- main
def take(args, work: Path) -> int:
    from evoteam.tracking.store import load_mlflow

    db = find_store(args.store)
    copy = copy_store(db, work)
    browser = find_browser(args.browser)
    out = Path(args.out_dir)
    load_mlflow()
    from mlflow import MlflowClient

    with mlflow_server(copy, artifacts_root(db), work / "server.log") as url:
        client = MlflowClient(tracking_uri=url)
        experiment = pick_experiment(client, args.experiment)
        run = pick_run(client, experiment, args.run)
        teams = children_of(client, experiment.experiment_id, run.info.run_id)
        summary = pick_summary(client, experiment, run)
        out.mkdir(parents=True, exist_ok=True)
        if has_artifact(client, run.info.run_id, PLOT):
            got = Path(client.download_artifacts(run.info.run_id, PLOT, str(work)))
            shutil.copyfile(got, out / "speedup_vs_tokens.png")
            print(f"wrote {out / 'speedup_vs_tokens.png'} ({shrink(out / 'speedup_vs_tokens.png')}): the plot "
                  f"artifact of {run.info.run_name!r}", flush=True)
        for i, (name, page, window, what) in enumerate(pages(client, experiment, run, teams, summary)):
            path = out / name
            screenshot(browser, f"{ui_url(url)}/{page}", path, work / f"profile{i}", args.wait_ms, window)
            print(f"wrote {path} ({shrink(path)}): {what}", flush=True)
        if summary is None:
            print(f"no compare summary: experiment {experiment.name!r} holds no summary run (python -m "
                  f"evoteam.compare logs one); compare_summary.png not written", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/mlflow_screenshots.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("store", metavar="STORE", help="the sqlite file of the store, or the folder holding it")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="where the PNGs go")
    parser.add_argument("--experiment", default=None, help="the experiment (default evoteam, or the only one)")
    parser.add_argument("--run", default=None, help="the run to show, an id or a run name (the newest of that "
                                                     "name; default: the evoteam run with the most team runs)")
    parser.add_argument("--browser", default=None, help="Chromium's executable (default chromium on PATH)")
    parser.add_argument("--wait-ms", type=int, default=15000, help="virtual time a page gets to render (default "
                                                                   "15000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlflow-shots-") as tmp:
        try:
            return take(args, Path(tmp))
        except BadInput as exc:
            print(f"mlflow_screenshots: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except RuntimeError as exc:
            print(f"mlflow_screenshots: error: {exc}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
