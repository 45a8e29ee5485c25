"""executor=docker on a real engine: podman serving the Docker API, the CPU worker image built offline
from docker/Dockerfile.cpu (tests/container_engine.py), real evaluations of MLA decode at small scale.

Skipped when podman is not installed (`python tests/container_engine.py prepare` installs it, as root);
CI installs it and sets EVOTEAM_REQUIRE_ENGINE=1, which turns that skip into a failure.
"""

import json
import os
import shutil
import socket
import sys
import threading
import time

import pytest
from container_engine import serving, worker_image
from planted import variant, write_planted

from evoteam import hardware
from evoteam.harness.container import ContainerExecutor, EngineError, host_config
from evoteam.harness.model import EvalRequest
from evoteam.task import load_task

from conftest import REPO, ROUNDS, run_evoteam, run_module

CANDIDATES = REPO / "tests" / "data" / "candidates"


def _unavailable(reason: str):
    if os.environ.get("EVOTEAM_REQUIRE_ENGINE") == "1":
        pytest.fail(f"EVOTEAM_REQUIRE_ENGINE=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engine():
    """(engine URL, worker image, docker client)."""
    if not shutil.which("podman"):
        _unavailable("podman is not installed (python tests/container_engine.py prepare installs it; CI does)")
    try:
        image = worker_image()
    except Exception as exc:  # noqa: BLE001 - reported as the reason
        _unavailable(f"the CPU worker image could not be built: {type(exc).__name__}: {exc}")
    import docker

    with serving() as url:
        yield url, image, docker.DockerClient(base_url=url)


@pytest.fixture(scope="module")
def small_uuids():
    return [w.uuid for w in load_task("mla_decode").scaled_workloads("small")]  # batch 1, 1, 16, 16


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("planted")
    write_planted(directory)
    return directory


def _executor(engine, tmp_path, **kw) -> ContainerExecutor:
    url, image, _ = engine
    return ContainerExecutor(hardware.load_spec("cpu"), image=image, docker_host=url, cache_dir=str(tmp_path / "cache"),
                             **{"memory_gib": 4, "pids_limit": 512, **kw})


def _request(solution, uuids, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=str(solution), workloads=list(uuids),
                       scale="small", seed=11, warmup=0, reps=2, **kw)


def _workers_left(engine) -> list:
    return engine[2].containers.list(all=True, filters={"label": "evoteam.role=judge"})


def test_correct_candidate_passes_in_the_container(engine, small_uuids, tmp_path):
    result = _executor(engine, tmp_path)(_request(CANDIDATES / "mla_torch.py", small_uuids[:2]), 120)
    assert [r.status for r in result.results] == ["PASSED", "PASSED"], ([r.detail for r in result.results],
                                                                        [r.spread for r in result.results])
    for r in result.results:
        assert r.baseline == "reference" and r.timing_mode.startswith("wallclock (no cgroup")  # none inside a container
        assert r.baseline_ms > 0 and r.candidate_ms > 0 and r.candidate_repeat_ms > 0
    assert result.restarts == 0
    # The baseline's time went to the cache folder mounted at /cache: the worker ran in the container.
    assert (tmp_path / "cache" / "evoteam" / "baseline_timings.jsonl").is_file()
    assert _workers_left(engine) == []


def test_hanging_candidate_is_killed_at_the_time_limit_and_removed(engine, small_uuids, planted_dir, tmp_path):
    uuids = [small_uuids[0], small_uuids[2], small_uuids[1]]  # the batch-16 one in the middle hangs
    started = time.monotonic()
    result = _executor(engine, tmp_path)(_request(planted_dir / "hang_on_batch16.py", uuids), 8)
    elapsed = time.monotonic() - started
    assert [r.status for r in result.results] == ["PASSED", "timeout", "PASSED"], ([r.detail for r in result.results],
                                                                                  result.log_tail)
    assert "time limit" in result.results[1].detail
    assert result.restarts == 1
    assert elapsed < 60, elapsed
    assert _workers_left(engine) == []


def test_crashing_candidate_is_recorded_with_its_logs(engine, small_uuids, tmp_path):
    path = tmp_path / "crash_with_a_word.py"
    path.write_text(variant("prints a line, then aborts on batch 16", "import os\n",
                            "    if q_nope.shape[0] == 16:\n        print('last words before the abort', flush=True)\n"
                            "        os.abort()\n"))
    result = _executor(engine, tmp_path)(_request(path, small_uuids[1:3]), 120)
    assert [r.status for r in result.results] == ["PASSED", "crash"], result.log_tail
    assert "SIGABRT" in result.results[1].detail
    assert "last words before the abort" in result.log_tail  # the container's logs, kept with the result
    assert _workers_left(engine) == []


def test_memory_limit_kills_a_candidate_that_exceeds_it(engine, small_uuids, tmp_path):
    path = tmp_path / "eats_memory.py"
    path.write_text(variant("touches 3 GiB", "", "    torch.ones(3 << 30, dtype=torch.uint8)\n"))
    before = set(os.listdir(REPO))
    result = _executor(engine, tmp_path, memory_gib=1)(_request(path, small_uuids[:1]), 120)
    (r,) = result.results
    assert r.status == "out_of_memory", (r.status, r.detail, result.log_tail)
    # nothing of the kill lands in the checkout (conmon writes a file `oom` where the engine was started)
    assert set(os.listdir(REPO)) - before == set()


PROBE = '''
import json
import os
import socket

import torch

HOST_PORT = {port}


def _probe():
    out = {{"uid": os.getuid(), "interfaces": sorted(name for _, name in socket.if_nameindex())}}
    try:
        socket.create_connection(("127.0.0.1", HOST_PORT), timeout=3).close()
        out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = f"failed: {{exc}}"
    places = {{"candidate": os.path.dirname(os.path.abspath(__file__)), "harness": os.path.dirname(torch.__file__),
              "root": "/", "tmp": "/tmp"}}
    for label, folder in places.items():
        try:
            with open(os.path.join(folder, "probe.txt"), "w") as f:
                f.write("x")
            out["write_" + label] = "ok"
        except OSError as exc:
            out["write_" + label] = exc.strerror
    for label, files in (("pids", ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")),
                         ("memory", ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"))):
        for name in files:
            if os.path.exists(name):
                with open(name) as f:
                    out[label] = f.read().strip()
                break
    return out


def run(**kw):
    print("PROBE " + json.dumps(_probe()), flush=True)
    raise RuntimeError("probe done")
'''


@pytest.fixture
def host_listener():
    """A TCP listener on this machine's loopback; counts the connections it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def test_sandbox_no_network_read_only_candidate_limits(engine, small_uuids, tmp_path, host_listener):
    port, accepted = host_listener
    path = tmp_path / "probe.py"
    path.write_text(PROBE.format(port=port))
    # static_scan off: the scan would reject the socket and open() before anything ran.
    result = _executor(engine, tmp_path, memory_gib=2, pids_limit=300)(
        _request(path, small_uuids[:1], static_scan=False), 120)
    assert result.results[0].status == "exception", result.results[0].detail
    assert "PROBE " in result.log_tail, (result.results[0].detail, result.log_tail)
    line = next(x for x in result.log_tail.splitlines() if x.startswith("PROBE "))
    probe = json.loads(line.removeprefix("PROBE "))
    assert probe["interfaces"] == ["lo"], probe  # no network but the container's own loopback
    assert probe["connect"].startswith("failed"), probe
    assert accepted == []
    assert probe["write_candidate"] == "Read-only file system", probe
    assert probe["write_harness"] in ("Read-only file system", "Permission denied"), probe
    assert probe["write_root"] in ("Read-only file system", "Permission denied"), probe
    assert probe["write_tmp"] == "ok", probe
    assert probe["uid"] != 0, probe  # the image's own user, not root
    # the limits are the container's, shared with the judge; the candidate sees no cgroup file (the sandbox masks the
    # host's cgroup tree: a runner's own CPU count and freezer state would tell it when it is timed)
    assert "pids" not in probe and "memory" not in probe, probe
    assert result.sandbox["cgroup"] == "the container's (memory 2 GiB, 300 pids), shared with the judge", result.sandbox
    assert path.read_text() == PROBE.format(port=port)  # the candidate file untouched
    assert _workers_left(engine) == []


def test_the_probe_would_see_a_network(engine, host_listener):
    """The control: the same connect from the same image, given the host's network, gets through."""
    port, accepted = host_listener
    _, image, client = engine
    code = (f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3).close(); "
            "print(sorted(n for _, n in socket.if_nameindex()))")
    out = client.containers.run(image, ["python3", "-c", code], network_mode="host", remove=True)
    assert b"lo" in out
    deadline = time.monotonic() + 5
    while not accepted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(accepted) == 1


def test_missing_image_is_one_line_that_says_how_to_build_it(engine, tmp_path):
    url = engine[0]
    with pytest.raises(EngineError) as info:
        ContainerExecutor(hardware.load_spec("cpu"), image="localhost/evoteam/absent:none", docker_host=url)
    message = str(info.value)
    assert "\n" not in message
    assert "image localhost/evoteam/absent:none is not on the engine" in message
    assert "docker build -f docker/Dockerfile.cpu -t localhost/evoteam/absent:none ." in message

    result = run_evoteam("hardware=cpu", "executor=docker", f"executor.docker_host={url}",
                         "executor.image=localhost/evoteam/absent:none", "tracking=none", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "docker build -f docker/Dockerfile.cpu" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_main_job_runs_its_evaluations_in_containers(engine, tmp_path):
    url, image, _ = engine
    run_dir = tmp_path / "run"
    cache = tmp_path / "container-cache"
    proc = run_evoteam("hardware=cpu", "executor=docker", f"executor.docker_host={url}", f"executor.image={image}",
                       f"executor.cache_dir={cache}", "executor.memory_gib=4", "task.workloads=[00cb2bc2]",
                       "budget.max_evaluations=2", "seed=2", "team=single", "tracking=none", ROUNDS, f"run_dir={run_dir}",
                       cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((run_dir / "final" / "results.json").read_text())
    assert [r["status"] for r in results] == ["PASSED"]
    assert (cache / "evoteam" / "baseline_timings.jsonl").is_file()  # written inside the containers
    assert _workers_left(engine) == []


def test_bench_runs_its_workers_in_containers(engine, tmp_path):
    url, image, _ = engine
    report = tmp_path / "report.json"
    result = run_module([str(CANDIDATES / "mla_torch.py"), "--task", "mla_decode", "--hardware", "cpu", "--scale",
                         "small", "--workloads", "00cb2bc2", "--executor", "docker", "--docker-host", url, "--image",
                         image, "--json", str(report)], module="evoteam.bench", cwd=tmp_path, timeout=300,
                        env={**os.environ, "EVOTEAM_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert [r["status"] for r in json.loads(report.read_text())["results"]] == ["PASSED"]
    assert (tmp_path / "cache" / "container" / "evoteam" / "baseline_timings.jsonl").is_file()
    assert _workers_left(engine) == []


# ----------------------------------------------------------------------------- no engine needed


def test_no_engine_is_one_line_that_says_how_to_start_one(tmp_path):
    absent = f"unix://{tmp_path}/no-engine.sock"
    result = run_evoteam("hardware=cpu", "executor=docker", f"executor.docker_host={absent}", "tracking=none",
                         cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"no container engine answers at {absent}" in result.stderr
    assert "DOCKER_HOST" in result.stderr and "Traceback" not in result.stderr


def test_printing_the_config_needs_no_engine(tmp_path):
    result = run_evoteam("--cfg", "job", "executor=docker", "executor.docker_host=unix:///nowhere.sock", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "kind: docker" in result.stdout


@pytest.mark.parametrize("target, requests, devices, groups", [
    ("h200", [("nvidia", 1, [["gpu"]])], [], []),
    ("b200", [("nvidia", 1, [["gpu"]])], [], []),
    ("mi350x", [], ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"], ["video", "render"]),
    ("cpu", [], [], []),
])
def test_devices_come_from_the_spec_sheet(target, requests, devices, groups):
    kw = host_config(hardware.load_spec(target), memory_gib=8, pids_limit=100)
    assert [(r["Driver"], r["Count"], r["Capabilities"]) for r in kw["device_requests"]] == requests
    assert kw["devices"] == devices and kw["group_add"] == groups
    assert kw["network_mode"] == "none" and kw["read_only"] and kw["cap_drop"] == ["ALL"]
    assert kw["mem_limit"] == kw["memswap_limit"] == "8192m" and kw["pids_limit"] == 100


def test_the_container_gets_the_gpu_the_scheduler_assigned(monkeypatch):
    """Under Ray (or the local device pool) the evaluation's GPU is named by CUDA_VISIBLE_DEVICES: the container
    gets that one by id, not the engine's first free GPU; on AMD only that GPU's render node."""
    from evoteam.harness.container import assigned_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert assigned_gpu() == "3"
    kw = host_config(hardware.load_spec("h200"), memory_gib=8, pids_limit=100, gpu=assigned_gpu())
    assert [(r["Driver"], r["Count"], r["DeviceIDs"]) for r in kw["device_requests"]] == [("nvidia", 0, ["3"])]
    kw = host_config(hardware.load_spec("mi350x"), memory_gib=8, pids_limit=100, gpu="2")
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri/renderD130:/dev/dri/renderD130:rwm"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert assigned_gpu() is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def test_auto_runs_in_the_container_where_the_engine_has_the_image_and_says_why(engine, tmp_path):
    from evoteam.config import ExecutorConfig
    from evoteam.target import Target

    url, image, _ = engine
    cpu = hardware.load_spec("cpu")
    found = Target.resolve("mla_decode", "cpu", executor="auto",
                           executor_cfg=ExecutorConfig(image=image, docker_host=url, cache_dir=str(tmp_path / "c")))
    assert found.executor.kind == "docker" and isinstance(found.executor.evaluator, ContainerExecutor)
    assert f"the engine at {url} has the target's image {image}" in found.executor.reason
    from evoteam.harness.executor_registry import auto_kind

    kind, reason = auto_kind(ExecutorConfig(image="localhost/evoteam/absent:none", docker_host=url), cpu)
    assert kind == "local" and "has no image localhost/evoteam/absent:none" in reason and "docker build" in reason
