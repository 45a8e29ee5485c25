import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_evoteam(*args: str, cwd: Path | None = None, env: dict | None = None, python: str = sys.executable,
                timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m evoteam ARGS` in a fresh process, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([python, "-m", "evoteam", *args], cwd=cwd or REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def evoteam_cli():
    return run_evoteam


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Baseline-timing caches and run folders of the tests stay out of the user's home."""
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def seed_kernel(task):
    """The `run` of a task's seed kernel (kernels/<task>/seed_triton.py)."""
    from evoteam.task import load_module_from_path

    return load_module_from_path(task.folder / "seed_triton.py").run
