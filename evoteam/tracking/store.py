"""The MLflow store: where it is, whether it answers, its experiments, and the shapes evoteam's params
and metric names take there. mlflow is imported on first use only."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any

from evoteam.errors import UserError

# MLflow sends usage telemetry to its vendor unless told not to; nothing here may leave the machine.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

DEFAULT_URI = "sqlite:///evoteam-mlflow.db"
DEFAULT_EXPERIMENT = "evoteam"
RUN_FILE = "mlflow_run.json"
ARTIFACTS_DIR = "mlartifacts"
KIND = "evoteam.kind"
SWEEP = "evoteam.sweep_id"
PARAM_LIMIT = 500  # characters of a param value (MLflow allows 6000; the UI shows a few dozen)


def load_mlflow():
    """mlflow, imported on first use and kept quiet (its store migrations log at INFO)."""
    import mlflow

    for name in ("alembic", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return mlflow


def resolve_uri(uri: str) -> str:
    """A relative sqlite path made absolute (so a resumed run finds the same store from anywhere)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):].split("?", 1)[0])
    return None


def ui_hint(uri: str, experiment_id: str, run_id: str) -> str:
    """How to see a run in the MLflow UI: the page, and for a local store the command that serves it."""
    # MLflow 3's UI starts in its GenAI mode unless the page asks for model training (the runs table)
    page = f"#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    import shlex
    import sys

    # this interpreter's path: the command runs as printed where the virtual environment is not active
    return (f"{shlex.quote(sys.executable)} -m mlflow ui --backend-store-uri {shlex.quote(uri)} --port 5000, then "
            f"http://127.0.0.1:5000/{page}")


def check_reachable(uri: str, what: str = "tracking.tracking_uri") -> None:
    """One line (UserError) instead of minutes of retries when a tracking server is not there."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10) as response:
            response.read()
    except Exception as exc:  # any failure to talk to it means the same to the user
        raise UserError(f"{what}={uri}: no MLflow server answers there ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]}); start one (see mlflow/README.md) or use "
                        f"tracking=none") from None


def check_store_writable(uri: str, what: str = "tracking.tracking_uri") -> None:
    """One line (UserError) at once where a local store cannot be written: MLflow itself retries for minutes (106 s
    and 39 warning lines for a sqlite file on a read-only mount) before it gives up. The database's folder takes new
    files (its journal; `mlartifacts/` beside it), and the file, where it exists, opens for writing. A server is
    check_reachable's."""
    db = sqlite_path(resolve_uri(uri))
    if db is None:
        return
    from evoteam.outputs import unwritable_folder

    why = None
    if db.is_dir():
        why = f"{db} is a folder, not a database file"
    else:
        why = unwritable_folder(db.parent) or (unwritable_folder(db.parent / ARTIFACTS_DIR)
                                               if (db.parent / ARTIFACTS_DIR).exists() else None)
    if why is None and db.exists():
        try:
            with open(db, "r+b"):  # opened for writing, nothing written
                pass
        except OSError as exc:
            why = f"cannot write {db} ({exc.strerror or type(exc).__name__})"
    if why:
        raise UserError(f"{what}={uri}: {why}; give a store in a writable folder ({what}=sqlite:///<path>.db) or "
                        f"use tracking=none")


def seed_sqlite_store(uri: str) -> None:
    """A local SQLite store that does not exist yet starts as a copy of an empty one of this MLflow's schema, kept in
    evoteam's cache (`mlflow/empty-<version>.db`, made once): MLflow builds a new store by running its 60-odd schema
    migrations, 0.7 of a tracked main job's 10 CPU-s on the 2-core development VM, where opening a copy takes 0.02.
    The copy is the migrated store less its Default experiment, which MLflow adds on opening it, with this store's
    artifact location. The copy is linked into place, so a store some other process made first is never replaced.
    Where the cache cannot be used, nothing is copied and MLflow builds the store as before."""
    path = sqlite_path(uri)
    if path is None or path.exists():
        return
    try:
        template = _empty_store()
        part = path.with_name(f".{path.name}.{os.getpid()}.seed")
        shutil.copyfile(template, part)
        try:
            os.link(part, path)
        except FileExistsError:
            pass
        finally:
            part.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - the template is a shortcut only: without it MLflow makes the store
        return


def _empty_store() -> Path:
    """This MLflow's empty store in evoteam's cache, made where it is missing (in a scratch folder, then renamed into
    place: two processes making it at once each write a whole one)."""
    import sqlite3
    import tempfile

    from evoteam.resources import cache_root

    folder = cache_root() / "mlflow"
    template = folder / f"empty-{load_mlflow().__version__}.db"
    if template.is_file():
        return template
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # only to make the template

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        db = Path(scratch) / "store.db"
        store = SqlAlchemyStore(f"sqlite:///{db}", str(Path(scratch) / "artifacts"))
        store.engine.dispose()
        with contextlib.closing(sqlite3.connect(db)) as con, con:
            con.execute("DELETE FROM experiments WHERE experiment_id = 0")  # re-made by MLflow, with its location
        os.replace(db, template)
    return template


# MLflow 3's UI opens an experiment on its GenAI overview unless told what kind it is; ours is the
# runs table (runs, team runs, metrics, plots).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def get_or_create_experiment(client, name: str, uri: str) -> str:
    """The experiment's id (its kind set so that the UI opens on the runs table); a new one on a
    sqlite store keeps its artifacts beside the database."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        if experiment.tags.get(EXPERIMENT_KIND[0]) is None:
            client.set_experiment_tag(experiment.experiment_id, *EXPERIMENT_KIND)
        return experiment.experiment_id
    db = sqlite_path(uri)
    folder = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    location = (db.parent / ARTIFACTS_DIR / folder).resolve().as_uri() if db is not None else None
    try:
        return client.create_experiment(name, artifact_location=location, tags=dict([EXPERIMENT_KIND]))
    except Exception:  # created by a concurrent job in the meantime
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys; lists and scalars as strings (long values cut)."""
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    text = json.dumps(obj) if isinstance(obj, (list, tuple)) else ("null" if obj is None else str(obj))
    out[prefix.rstrip(".")] = text[:PARAM_LIMIT]
    return out


def metric_name(text: str) -> str:
    """MLflow metric names allow letters, digits, _ - . space : and /."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", text)


def current_sweep_id() -> str:
    """The multirun's sweep folder name (the same for all its jobs), or "none" for a single run."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return "none"
        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return Path(str(hc.sweep.dir)).name
    except Exception:  # outside Hydra (tests, library use)
        return "none"
    return "none"
