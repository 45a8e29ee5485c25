"""Evaluation workers in the hardware target's container, through the Docker API (executor=docker).

The contract of `evoteam.worker.evaluate_isolated` is kept (a fresh worker per evaluation, a new one
after a crash or a timeout, the same EvalRequest and EvalResult); only the worker process runs in a
container of the target's image instead of on this machine:

- devices from the spec sheet's `container:` section (hardware/<name>.yaml), the one source of them:
  NVIDIA GPUs through device requests, AMD GPUs through /dev/kfd and /dev/dri with the video and
  render groups;
- no network, a read-only root filesystem, no capabilities, no new privileges; memory (no swap),
  process-count and time limits;
- mounts: the candidate's file alone, read-only, at /candidate; a scratch folder (the request, the
  progress file the harness follows) at /scratch; a cache folder kept between evaluations (Triton,
  FlashInfer JIT, baseline timings) at /cache; a tmpfs at /tmp;
- a container past the time limit is killed; every container is removed, its logs kept in the result.

The engine is the one at executor.docker_host, else DOCKER_HOST, else the local default socket.
A missing engine or image is a UserError whose one line says how to start, build or pull it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from evoteam.errors import UserError
from evoteam.hardware import HardwareSpec
from evoteam.worker import LOG_TAIL_CHARS, EvalRequest, EvalResult, _describe_exit, evaluate_isolated

CANDIDATE_DIR = "/candidate"
SCRATCH_DIR = "/scratch"
CACHE_DIR = "/cache"
# Where libraries keep what they compile or measure, redirected to the kept cache folder.
CACHE_ENV = {"XDG_CACHE_HOME": CACHE_DIR, "EVOTEAM_CACHE_DIR": f"{CACHE_DIR}/evoteam",
             "TRITON_HOME": f"{CACHE_DIR}/triton", "TRITON_CACHE_DIR": f"{CACHE_DIR}/triton/cache",
             "FLASHINFER_WORKSPACE_BASE": CACHE_DIR, "HOME": "/tmp", "PYTHONUNBUFFERED": "1",
             "PYTHONDONTWRITEBYTECODE": "1"}
POLL_S = 0.25  # how often the engine is asked whether the container still runs


class EngineError(UserError):
    """No engine answers, or the image is not there."""


def engine_address(docker_host: str | None) -> str:
    return docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(docker_host: str | None):
    """A docker.DockerClient for the configured engine, checked with a ping; EngineError otherwise."""
    import docker

    address = engine_address(docker_host)
    try:
        client = docker.DockerClient(base_url=address, timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - whatever the transport says, the fix is the same
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise EngineError(f"executor=docker: no container engine answers at {address} ({reason}); start Docker, "
                          f"or podman's Docker API (podman system service --time=0 unix:///run/podman/podman.sock), "
                          f"and point executor.docker_host or DOCKER_HOST at it") from None
    return client


def build_hint(image: str, hw: HardwareSpec) -> str:
    return f"docker build -f {hw.container.dockerfile} -t {image} . (in an evoteam checkout), or docker pull {image}"


def check_image(client, image: str, hw: HardwareSpec, address: str) -> None:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise EngineError(f"executor=docker: image {image} is not on the engine at {address}; build it: "
                          f"{build_hint(image, hw)}") from None


@dataclass
class ContainerWorkers:
    """Starts each worker of an evaluation in a fresh container (see the module docstring)."""

    hw: HardwareSpec
    image: str
    docker_host: str | None = None
    memory_gib: float = 16
    pids_limit: int = 4096
    cache_dir: Path | None = None  # None: ~/.cache/evoteam/container
    extra_env: dict = field(default_factory=dict)
    client: Any = None

    def __post_init__(self) -> None:
        if self.client is None:
            self.client = connect(self.docker_host)
        check_image(self.client, self.image, self.hw, engine_address(self.docker_host))
        root = os.environ.get("EVOTEAM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "evoteam")
        self.cache_dir = Path(self.cache_dir or Path(root) / "container")
        _shared_dir(self.cache_dir)

    def start(self, request: EvalRequest, workdir: Path, attempt: int) -> ContainerWorker:
        return ContainerWorker(self, request, workdir, attempt)


def host_config(hw: HardwareSpec, memory_gib: float, pids_limit: int) -> dict[str, Any]:
    """Keyword arguments of containers.create() for the target's devices, the sandbox and the limits."""
    from docker.types import DeviceRequest

    c = hw.container
    memory = f"{int(memory_gib * 1024)}m"
    return dict(
        device_requests=[DeviceRequest(**request) for request in c.device_requests],
        devices=[f"{d}:{d}:rwm" for d in c.devices], group_add=list(c.group_add),
        network_mode="none", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
        mem_limit=memory, memswap_limit=memory, pids_limit=pids_limit,
        init=True,  # the worker is not PID 1: a signal that kills it gives exit code 128 + N
        tmpfs={"/tmp": "rw,exec,size=4g"}, shm_size="1g",
    )


class ContainerWorker:
    """One worker in one container; the interface of evoteam.worker's local worker."""

    def __init__(self, workers: ContainerWorkers, request: EvalRequest, workdir: Path, attempt: int):
        from docker.types import Mount

        self.client = workers.client
        self.memory_gib = workers.memory_gib
        scratch = _shared_dir(workdir / f"scratch{attempt}")
        candidate = workdir / f"candidate{attempt}"
        candidate.mkdir(mode=0o755)
        source = Path(request.solution)
        shutil.copyfile(source, candidate / source.name)
        (candidate / source.name).chmod(0o644)
        self.progress_path = scratch / "progress.jsonl"
        inside = replace(request, solution=f"{CANDIDATE_DIR}/{source.name}")
        (scratch / "request.json").write_text(json.dumps(asdict(inside)))
        mounts = [Mount(CANDIDATE_DIR, str(candidate.resolve()), type="bind", read_only=True),
                  Mount(SCRATCH_DIR, str(scratch.resolve()), type="bind"),
                  Mount(CACHE_DIR, str(Path(workers.cache_dir).resolve()), type="bind")]
        self.container = self.client.containers.create(
            workers.image, ["python3", "-m", "evoteam.worker", f"{SCRATCH_DIR}/request.json",
                            f"{SCRATCH_DIR}/progress.jsonl"],
            environment={**CACHE_ENV, **workers.extra_env}, working_dir=SCRATCH_DIR, mounts=mounts,
            labels={"evoteam.role": "worker", "evoteam.task": request.task}, detach=True,
            **host_config(workers.hw, workers.memory_gib, workers.pids_limit))
        self.container.start()
        self.state: dict = {}
        self.last_poll = 0.0
        self.log_text: str | None = None

    def poll(self) -> int | None:
        now = time.monotonic()
        if self.state.get("Status") != "exited" and now - self.last_poll >= POLL_S:
            self.last_poll = now
            self.container.reload()
            self.state = self.container.attrs.get("State", {})
        if self.state.get("Status") in ("exited", "dead"):
            return int(self.state.get("ExitCode", -1))
        return None

    def kill(self) -> None:
        import docker

        try:
            self.container.kill()
        except docker.errors.APIError:
            pass  # it ended meanwhile
        deadline = time.monotonic() + 30
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def exit_cause(self, code: int) -> tuple[str, str]:
        # The engine flags an out-of-memory kill of the container's first process; the worker is its
        # child, and nothing in the container but the kernel's OOM killer sends SIGKILL (the harness
        # kills for a timeout, which is recorded before this is asked).
        if self.state.get("OOMKilled") or code == 128 + signal.SIGKILL:
            return "out_of_memory", f"out of memory: killed at the container's limit of {self.memory_gib:g} GiB"
        # A process killed by signal N leaves exit code 128 + N (the container's init passes it on).
        return _describe_exit(-(code - 128) if 128 < code < 160 else code, self.logs())

    def logs(self) -> str:
        if self.log_text is None or self.state.get("Status") != "exited":
            raw = self.container.logs(stdout=True, stderr=True)
            self.log_text = raw.decode(errors="replace")[-LOG_TAIL_CHARS:]
        return self.log_text

    def close(self) -> None:
        import docker

        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass


def _shared_dir(path: Path) -> Path:
    """A folder the container's own (non-root) user may write into: the container runs as the
    image's user, whose id need not be ours. Its parent (a private temporary folder or the
    user's cache) keeps other users out."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


class ContainerExecutor:
    """executor=docker: the Evaluator (request, timeout_s) -> EvalResult of the team's toolbox."""

    def __init__(self, hw: HardwareSpec, *, image: str | None = None, docker_host: str | None = None,
                 memory_gib: float = 16, pids_limit: int = 4096, cache_dir: str | None = None):
        self.workers = ContainerWorkers(hw, image or hw.container.image, docker_host, memory_gib, pids_limit,
                                        Path(cache_dir) if cache_dir else None)

    @classmethod
    def from_config(cls, executor_cfg: Any, hw: HardwareSpec) -> ContainerExecutor:
        return cls(hw, image=executor_cfg.image, docker_host=executor_cfg.docker_host,
                   memory_gib=executor_cfg.memory_gib, pids_limit=executor_cfg.pids_limit,
                   cache_dir=executor_cfg.cache_dir)

    def __call__(self, request: EvalRequest, timeout_s: float) -> EvalResult:
        return evaluate_isolated(request, timeout_s=timeout_s, workers=self.workers)
