import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The test processes' own math (the checker, the Triton interpreter, a main job's driver, and every process they
# start) runs on one thread: `make test` runs 3 workers on 2 cores, and a thread pool spinning at its barrier
# beside the other workers' evaluations took their CPU (test_kda_chunk and test_kda_task at -n 2: 137 CPU-s with
# torch's default threads, 110 with one). Set before torch is imported; the harness sets its runners' and judges'
# threads itself, whatever the caller's environment says (Judge.threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import timeline  # noqa: E402
import warm_launcher  # noqa: E402

from evoteam.tracking.server import free_port, running  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# The timed rounds of a main job whose test is about its flow (an agent's turns, inheritance, resume, tracking, Ray,
# containers), not its figures: 3 asked (a CPU evaluation then takes 3 to 9 until the speedup settles), where the
# CPU's default of 15 takes 8 to 45 a workload. On the loaded CI machine (2026-12-07) 29 of the 70 main-job workload
# timings took all 45, the rest 8 to 44, and theirs were 335 of the 584 s the suite spent in timed rounds.
# test_mainjob keeps the default.
ROUNDS = "task.timed_rounds=3"


@contextlib.contextmanager
def mlflow_server(data: Path, workers: int = 1):
    """`mlflow/server.sh` on 127.0.0.1 (a free port; its store and artifacts under `data`) until the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_DATA": str(data), "MLFLOW_HOST": "127.0.0.1", "MLFLOW_PORT": str(port),
           "MLFLOW_WORKERS": str(workers), "MLFLOW_BIN": str(Path(sys.executable).parent / "mlflow"),
           "MLFLOW_DISABLE_TELEMETRY": "true"}
    with running(["bash", str(REPO / "mlflow" / "server.sh")], url, data / "server.log", data, env):
        yield {"url": url, "data": data}


def write_solution(folder: Path, name: str, definition: str, sources: dict[str, str], **spec) -> str:
    """A FlashInfer-Trace Solution (author "tests") with these sources and BuildSpec fields, written to
    `folder/name.json`; its path."""
    from evoteam.schema import BuildSpec, Solution, SourceFile

    solution = Solution(name=name, definition=definition, author="tests", spec=BuildSpec(**spec),
                        sources=tuple(SourceFile(path=p, content=text) for p, text in sources.items()))
    path = folder / f"{name}.json"
    path.write_text(json.dumps(solution.to_json()))
    return str(path)


def run_evoteam(*args: str, cwd: Path | None = None, env: dict | None = None, python: str = sys.executable,
                timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m evoteam ARGS` to its end in a new process of its own, as a user would: forked from a process
    that has imported PyTorch, Hydra and matplotlib already, where nothing it is given is read at import
    (tests/warm_launcher.py; EVOTEAM_TESTS_FRESH=1: every one started afresh)."""
    full_env = {**os.environ, **(env or {})}
    return warm_launcher.run(list(args), cwd or REPO, full_env, python, timeout)


run_module = warm_launcher.run  # `python -m MODULE ARGS` the same way: run_module(args, cwd, env, module=...)


@pytest.fixture
def evoteam_cli():
    return run_evoteam


@pytest.fixture(scope="session")
def _mlflow_templates(tmp_path_factory):
    return tmp_path_factory.mktemp("mlflow-templates")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch, _mlflow_templates):
    """Baseline-timing caches and run folders of the tests stay out of the user's home, each test's its own; the
    empty MLflow store new stores are copied from (a fact of the installed MLflow, evoteam.tracking.store) is
    shared by the session's tests, as by a user's runs."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "mlflow").symlink_to(_mlflow_templates)
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(cache))


def seed_kernel(task):
    """The `run` of a task's seed kernel (kernels/<task>/seed_triton.py)."""
    from evoteam.task import load_module_from_path

    return load_module_from_path(task.folder / "seed_triton.py").run


# Files whose module-scoped fixtures are costly (a finished run, a sweep, an MLflow server, a Ray cluster, the
# container engine, a built wheel, a compiled C++ solution): under pytest-xdist (`make test` runs -n auto --dist loadgroup) each of these
# files runs whole on one worker, so its fixture is made once; every other test goes to whichever worker is free.
ONE_WORKER_FILES = ("test_mainjob.py", "test_tracking.py", "test_mlflow_server.py", "test_ray.py",
                    "test_container_executor.py", "test_install.py", "test_screenshots.py", "test_languages.py")


def pytest_configure(config):
    if os.environ.get(timeline.ENV):  # where the CPU goes, by test: tests/timeline.py
        worker = getattr(config, "workerinput", {}).get("workerid", "main")  # pytest-xdist's worker, or its controller
        config.pluginmanager.register(timeline.Recorder(Path(os.environ[timeline.ENV]), worker), "evoteam-timeline")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ONE_WORKER_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))


# What enables the tests a machine skips, by words of the skip's reason (the first match wins).
HOW_TO_RUN_SKIPPED = (
    ("flashinfer-bench", "make test (installs flashinfer-bench's data model)"),
    ("slim flashinfer", "bash scripts/fetch_wheels.sh (the slim FlashInfer 0.7.4 in .whl/), and apache-tvm-ffi and "
                        "nvidia-ml-py on PYTHONPATH"),
    ("gpu", "a CUDA or ROCm host: make test TORCH=torch (the cuda extra for the baselines: pip install -e '.[cuda]')"),
    ("cuda", "a CUDA or ROCm host: make test TORCH=torch (the cuda extra for the baselines: pip install -e '.[cuda]')"),
    ("flashinfer", "an NVIDIA host with the cuda extra: pip install -e '.[cuda]'"),
    ("fla ", "a GPU host with the cuda or rocm extra: pip install -e '.[cuda]'"),
    ("chromium", "make browser (Debian's chromium, as root)"),
    ("podman", "python tests/container_engine.py prepare (podman and the images, as root)"),
    ("image", "python tests/container_engine.py prepare (podman and the images, as root)"),
    ("sandbox", "make sandbox (bubblewrap) on a host with cgroups and user namespaces"),
    ("cli is not installed", "make clis (npm: the pinned Claude Code and Codex CLIs)"),
    ("hadolint", "pip install -e '.[dev]'"),
)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """End with one line per skip reason, its count and what would run those tests."""
    from collections import Counter

    reasons: Counter = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ").strip()] += 1
    if not reasons:
        return
    terminalreporter.section(f"{sum(reasons.values())} skipped, by reason")
    for reason, count in reasons.most_common():
        how = next((h for key, h in HOW_TO_RUN_SKIPPED if key in reason.lower()), "")
        terminalreporter.write_line(f"{count:4d}  {reason[:140]}" + (f"\n      to run them: {how}" if how else ""))


def pytest_sessionfinish(session, exitstatus):
    warm_launcher.close()
