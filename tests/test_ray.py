"""executor=ray on a real local Ray cluster (`ray start`: a head and worker nodes on this machine, with fake
accelerator resources per target and token authentication on): routing by target, the error for a target no
node offers, never two evaluations on one GPU, the same verdicts as executor=local, a node killed during an
evaluation, a driver killed with SIGKILL and resumed, and a sweep through Hydra's Ray launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TOKEN = "evoteam-test-token-0123456789abcdef"
TOKEN_ENV = "EVOTEAM_TEST_RAY_TOKEN"
# Ray reads its authentication settings when it is imported (a trap: set later, they are ignored)
os.environ.update({TOKEN_ENV: TOKEN, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN})
ray = pytest.importorskip("ray", reason="Ray comes with `make test` (the dev extra)")

from evoteam.errors import UserError  # noqa: E402
from evoteam.harness.executor import evaluate  # noqa: E402
from evoteam.harness.model import EvalRequest, Status  # noqa: E402
from evoteam.harness.ray_executor import RayExecutor  # noqa: E402
from evoteam.schema import read_journal  # noqa: E402
from evoteam.task import load_task  # noqa: E402

from conftest import REPO, ROUNDS, free_port, mlflow_server  # noqa: E402

RAY = str(Path(sys.executable).parent / "ray")
CANDIDATE = str(REPO / "tests" / "data" / "candidates" / "mla_torch.py")
# Fast node-death detection, for the node-loss test (seconds instead of a minute)
CLUSTER_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN, "RAY_health_check_period_ms": "1000",
               "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000"}


class Cluster:
    """No dashboard and no log monitor (which streams the workers' output to drivers: every driver here has
    log_to_driver off, and the logs stay in the session folder): 3.5-3.9 s of CPU per run of this file saved."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, **CLUSTER_ENV}
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.blocking: list[subprocess.Popen] = []

    def start_head(self) -> None:
        # The head offers a GPU target only (a fake h200): CPU evaluations must be routed to the workers.
        subprocess.run([RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(self.port),
                        "--num-cpus", "1", "--num-gpus", "0", "--resources", json.dumps({"evoteam_h200": 1}),
                        "--include-dashboard", "false", "--include-log-monitor", "false", "--temp-dir", str(self.root),
                        "--disable-usage-stats"],
                       env=self.env, check=True, capture_output=True, timeout=120)

    def add_node(self, resources: dict, gpus: int = 0) -> subprocess.Popen:
        """A worker node as a blocking `ray start` in its own process group (SIGKILL to it kills the node)."""
        proc = subprocess.Popen([RAY, "start", "--address", self.address, "--node-ip-address", "127.0.0.1",
                                 "--num-cpus", "2", "--num-gpus", str(gpus), "--resources", json.dumps(resources),
                                 "--include-log-monitor", "false", "--disable-usage-stats", "--block"],
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self.blocking.append(proc)
        return proc

    def wait_for(self, resource: str, amount: float, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while ray.available_resources().get(resource, 0) < amount:
            assert time.monotonic() < deadline, f"no {amount} {resource} in time: {ray.available_resources()}"
            time.sleep(0.3)

    def stop(self) -> None:
        for proc in self.blocking:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run([RAY, "stop", "--force"], env=self.env, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(Path(f"/tmp/evoray-{os.getpid()}"))  # short: Ray's socket paths live under it
    c.start_head()
    c.add_node({"evoteam_cpu": 2}, gpus=2)  # two fake GPUs: one evaluation each at a time
    executor = RayExecutor(hardware="cpu", gpu=False, address=c.address, wait_s=60, auth_token_env=TOKEN_ENV,
                           gpus_per_evaluation=1)
    executor.connect()
    c.wait_for("evoteam_cpu", 2)
    c.executor = executor
    yield c
    ray.shutdown()
    c.stop()


def _request(uuids, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=CANDIDATE, workloads=list(uuids), scale="small",
                       warmup=0, reps=2, **kw)


@pytest.fixture(scope="module")
def uuids():
    return [w.uuid for w in load_task("mla_decode").scaled_workloads("small")]


def test_cpu_evaluations_go_to_the_node_offering_cpu_with_local_verdicts(cluster, uuids):
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "evoteam_h200" in n["Resources"])
    remote = cluster.executor(_request(uuids[:2], seed=7), timeout_s=600)
    local = evaluate(_request(uuids[:2], seed=7), timeout_s=600)
    assert [r.status for r in remote.results] == [r.status for r in local.results] == [Status.PASSED] * 2
    for a, b in zip(remote.results, local.results):  # same inputs (seed), same errors
        assert a.correctness == b.correctness
    placement = remote.placement
    assert placement.executor == "ray" and placement.node != head and placement.gpu in ("0", "1")
    assert placement.ended >= placement.started >= placement.submitted - 1
    # the harness pins the thread settings whatever Ray put in its worker's environment, and records them
    assert remote.sandbox["threads"] == local.sandbox["threads"] == 1


def test_a_target_no_node_offers_is_one_line_after_a_short_wait(cluster):
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        RayExecutor(hardware="mi350x", gpu=True, address=cluster.address, wait_s=2,
                    auth_token_env=TOKEN_ENV).connect()
    message = str(err.value)
    assert "\n" not in message and "offers hardware mi350x" in message and "evoteam_mi350x" in message
    assert "cpu" in message and "h200" in message  # what the nodes do offer
    assert time.monotonic() - started < 30


def test_never_two_evaluations_on_one_gpu(cluster, uuids):
    placements = []

    def one(i):
        placements.append(cluster.executor(_request(uuids[i % 2:i % 2 + 1]), timeout_s=600).placement)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(placements) == 4
    by_gpu: dict[tuple, list] = {}
    for p in placements:
        by_gpu.setdefault((p.node, p.gpu), []).append((p.started, p.ended))
    assert {gpu for _, gpu in by_gpu} <= {"0", "1"}
    for spans in by_gpu.values():
        spans.sort()
        assert all(a[1] <= b[0] + 0.05 for a, b in zip(spans, spans[1:])), spans  # one after another
    # and they did run side by side on the two GPUs, the later ones waiting (queue time recorded)
    assert len(by_gpu) == 2 and max(p.queue_s for p in placements) > 0


def test_a_node_lost_during_an_evaluation_is_retried_once_and_journaled_once(cluster, uuids, tmp_path):
    from evoteam.team.budget import Ledger
    from evoteam.team.spec import RoleSpec
    from evoteam.team.toolbox import HarnessSettings, Toolbox
    from evoteam.team.workspace import Workspace

    @ray.remote(resources={"evoteam_cpu": 2}, num_cpus=0)
    def hold(seconds):  # keeps the healthy node's cpu target busy until the doomed node has the evaluation
        time.sleep(seconds)

    blocker = hold.remote(25)
    _wait_until(lambda: ray.available_resources().get("evoteam_cpu", 0) == 0)  # the healthy node is held
    doomed = cluster.add_node({"evoteam_cpu": 1}, gpus=1)
    _wait_until(lambda: [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("evoteam_cpu") == 1])
    doomed_id = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("evoteam_cpu") == 1)
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", warmup=0, reps=2, all_workloads=uuids,
                                       probe_workloads=uuids[:1])
    ledger = Ledger(token_budget=10, max_evaluations=3, max_wall_time_s=3600)
    workspace = Workspace(tmp_path / "workspace")
    toolbox = Toolbox(workspace, settings, ledger, "t1", RoleSpec("coder", "generalist", model="offline"),
                      evaluator=cluster.executor)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(a=toolbox.evaluate(
        Path(CANDIDATE).read_text(), {"by": "test"}, "benchmark")))
    worker.start()
    # the only free unit of the target is the doomed node's: once it is taken, the evaluation runs there
    _wait_until(lambda: ray.available_resources().get("evoteam_cpu", 0) == 0)
    time.sleep(3)
    os.killpg(doomed.pid, signal.SIGKILL)  # the node, its raylet and its workers, mid-evaluation
    ray.get(blocker)
    worker.join(timeout=600)
    attempt = outcome["a"]
    assert attempt.status == "PASSED"
    assert len(workspace.attempts) == 1 and len(read_journal(workspace.journal)) == 1 and ledger.evaluations == 1
    result = workspace.result_json(attempt.attempt_id)
    assert result["placement"]["node"] != doomed_id  # retried on the healthy node


def _wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not in time: {ray.available_resources()}"
        time.sleep(0.3)


def test_a_driver_killed_with_sigkill_resumes_the_evaluations_in_flight(cluster, tmp_path):
    """A parallel team's evaluations are in flight together on the cluster; the driver dies with SIGKILL;
    `resume=` runs exactly the ones in flight again and nothing else, and the budget holds."""
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "evoteam", "hardware=cpu", "executor=ray", f"executor.ray.address={cluster.address}",
            f"executor.ray.auth_token_env={TOKEN_ENV}", "executor.ray.gpus_per_evaluation=1", "team=fixed4",
            "team.topology=parallel", "task.workloads=[2eac5b85]", "budget.max_evaluations=5", "seed=3", ROUNDS,
            "tracking=none", f"run_dir={run_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", TOKEN_ENV: TOKEN}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    dispatched = run_dir / "workspace" / "dispatched.jsonl"
    deadline = time.monotonic() + 300
    while len(read_journal(dispatched)) < 2:  # two of the round's roles have their evaluations in flight
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no evaluations were dispatched in time"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {a["attempt_id"] for a in read_journal(run_dir / "workspace" / "attempts.jsonl")}
    in_flight = [d["attempt_id"] for d in read_journal(dispatched) if d["attempt_id"] not in finished]
    assert in_flight, "the kill came after every dispatched evaluation finished"

    resumed = subprocess.run([sys.executable, "-m", "evoteam", f"resume={run_dir}"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resuming: {len(in_flight)} evaluation(s) were in flight" in resumed.stdout
    attempts = read_journal(run_dir / "workspace" / "attempts.jsonl")
    ids = [a["attempt_id"] for a in attempts]
    assert set(in_flight) <= set(ids) and finished <= set(ids)  # the in-flight ones ran, under their ids
    keys = [a["key"] for a in attempts]
    assert len(keys) == len(set(keys)) and len(ids) == len(set(ids)) <= 5  # nothing twice; the budget holds
    dispatched_ids = [d["attempt_id"] for d in read_journal(dispatched)]
    assert len(dispatched_ids) == len(set(dispatched_ids))  # no id given twice
    assert (run_dir / "final" / "dispatch.json").is_file()


def test_a_sweep_runs_its_jobs_on_the_cluster_through_hydras_ray_launcher(cluster, tmp_path):
    """`python -m evoteam -m hydra/launcher=ray_cluster ...`: each job a driver task on the cluster (its
    evaluations Ray tasks too), the sweep folder absolute under the launching directory, repeat=2 as two jobs on
    seeds 1 and 2, and the jobs' runs with their comparison in one MLflow store."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

    # Jobs on a cluster log to one tracking server (mlflow/server.sh): several processes opening one sqlite file
    # directly race on its schema migration (seen here: "table _alembic_tmp_experiments already exists").
    (tmp_path / "mlflow").mkdir()
    with mlflow_server(tmp_path / "mlflow") as server:
        _ray_sweep(cluster, tmp_path, server["url"])


def _ray_sweep(cluster, tmp_path, uri):
    from mlflow import MlflowClient

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": cluster.address, "MLFLOW_DISABLE_TELEMETRY": "true",
           "EVOTEAM_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "evoteam", "-m", "hydra/launcher=ray_cluster", "hardware=cpu",
                           "executor=ray", f"executor.ray.auth_token_env={TOKEN_ENV}", "executor.ray.gpus_per_evaluation=1",
                           "task.workloads=[2eac5b85]", "budget.max_evaluations=1", "budget.extra_multiplier=2",
                           "budget=equal", "team=single", "repeat=2", ROUNDS, f"tracking.tracking_uri={uri}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()  # absolute, under the launching directory, once
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        assert (sweep / job / "final" / "dispatch.json").is_file()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("evoteam")
    runs = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'run'")
    # repeat=2 through the Ray launcher: the configuration twice, on seeds 1 and 2
    assert sorted(r.data.tags["evoteam.seed"] for r in runs) == ["1", "2"]
    assert {r.data.tags["evoteam.budget_mode"] for r in runs} == {"equal"}
    assert {r.data.tags["evoteam.sweep_id"] for r in runs} == {sweep.name}
    (summary,) = client.search_runs([experiment.experiment_id], "tags.`evoteam.kind` = 'summary'")
    assert summary.data.tags.get("evoteam.sweep_id") == sweep.name
