"""executor=docker: the judge in the hardware target's container, through the Docker API.

The contract of `evoteam.harness.executor.evaluate` is kept (the same request and result, a new
judge after a fatal fault, the runner replaced after a crash or a timeout); only the judge process
runs in a container of the target's image:

- devices from the spec sheet's `container:` section (hardware/<name>.yaml), the one source of them:
  NVIDIA GPUs through device requests, AMD GPUs through /dev/kfd and /dev/dri with the video and
  render groups;
- no network, a read-only root filesystem, no capabilities, no new privileges; memory (no swap),
  process-count and time limits;
- mounts: the candidate's file alone, read-only, at /candidate; a scratch folder (the request, the
  progress file the harness follows) at /scratch; a cache folder kept between evaluations (Triton,
  FlashInfer JIT, baseline timings, the candidates' compiled kernels) at /cache; a tmpfs at /tmp.

Inside, the judge starts the candidate's runner under bubblewrap, as on a host: its own user, PID,
mount and network namespaces. For that the container's /proc is left unmasked (podman's
`unmask=ALL`, Docker's `systempaths=unconfined`: bubblewrap mounts a fresh procfs for the runner's
PID namespace); the default seccomp profile stays. No cgroup can be made inside, so the runner's
memory and process limits are the container's, shared with the judge (recorded in every result);
the runner is the kernel's first choice when memory runs out.

The engine is the one at executor.docker_host, else DOCKER_HOST, else the local default socket.
A missing engine or image is a UserError whose one line says how to start, build or pull it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from evoteam.errors import UserError
from evoteam.hardware import HardwareSpec
from evoteam.harness.executor import LOG_TAIL_CHARS, evaluate, placement, visible_devices
from evoteam.harness.model import EvalRequest, EvalResult
from evoteam.harness.sandbox import CONTAINER_LIMITS_ENV
from evoteam.resources import cache_root

CANDIDATE_DIR = "/candidate"
SCRATCH_DIR = "/scratch"
CACHE_DIR = "/cache"
# Where libraries keep what they compile or measure, redirected to the kept cache folder.
CACHE_ENV = {"XDG_CACHE_HOME": CACHE_DIR, "EVOTEAM_CACHE_DIR": f"{CACHE_DIR}/evoteam",
             "TRITON_HOME": CACHE_DIR, "TRITON_CACHE_DIR": f"{CACHE_DIR}/triton/cache",
             "FLASHINFER_WORKSPACE_BASE": CACHE_DIR, "HOME": "/tmp", "PYTHONUNBUFFERED": "1",
             "PYTHONDONTWRITEBYTECODE": "1"}
POLL_S = 0.25  # how often the engine is asked whether the container still runs


class EngineError(UserError):
    """No engine answers, or the image is not there."""


def engine_address(docker_host: str | None) -> str:
    return docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(docker_host: str | None, timeout_s: float = 60):
    """A docker.DockerClient for the configured engine, checked with a ping; EngineError otherwise."""
    import docker

    address = engine_address(docker_host)
    try:
        client = docker.DockerClient(base_url=address, timeout=timeout_s)
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


def _is_podman(client) -> bool:
    try:
        return any("podman" in str(c.get("Name", "")).lower() for c in client.version().get("Components", []))
    except Exception:  # noqa: BLE001 - assume Docker
        return False


def assigned_gpu() -> str | None:
    """The GPU a scheduler gave this process (Ray's task, the local device pool), as its visible-devices
    variable names it; None where none is named (the container then gets the target's default request)."""
    return next(iter(visible_devices()), None)


def host_config(hw: HardwareSpec, memory_gib: float, pids_limit: int, podman: bool = True,
                gpu: str | None = None) -> dict[str, Any]:
    """Keyword arguments of containers.create() for the target's devices, the sandbox and the limits. With
    `gpu` (the one the scheduler assigned), the container gets that GPU alone, not "any one GPU": NVIDIA by
    device id; AMD (UNVERIFIED: no AMD GPU was available) its render node only, beside /dev/kfd."""
    from docker.types import DeviceRequest

    c = hw.container
    requests = [dict(r) for r in c.device_requests]
    devices = list(c.devices)
    if gpu is not None:
        for r in requests:
            r.pop("count", None)
            r["device_ids"] = [gpu]
        if gpu.isdigit():
            devices = [f"/dev/dri/renderD{128 + int(gpu)}" if d == "/dev/dri" else d for d in devices]
    memory = f"{int(memory_gib * 1024)}m"
    # bubblewrap inside needs to mount a procfs for the runner: /proc unmasked (the default seccomp stays)
    unmask = "unmask=ALL" if podman else "systempaths=unconfined"
    return dict(
        device_requests=[DeviceRequest(**request) for request in requests],
        devices=[f"{d}:{d}:rwm" for d in devices], group_add=list(c.group_add),
        network_mode="none", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges", unmask],
        mem_limit=memory, memswap_limit=memory, pids_limit=pids_limit,
        init=True,  # the judge is not PID 1: a signal that kills it gives exit code 128 + N
        tmpfs={"/tmp": "rw,exec,size=4g"}, shm_size="1g",
    )


class ContainerJudge:
    """The judge of one evaluation in one container; the interface of evoteam.harness.executor's judges."""

    def __init__(self, executor: ContainerExecutor, request: EvalRequest, workdir: Path):
        from docker.types import Mount

        self.client = executor.client
        scratch = _shared_dir(workdir / "scratch")
        candidate = workdir / "candidate"
        candidate.mkdir(mode=0o755, exist_ok=True)
        source = Path(request.solution)
        shutil.copyfile(source, candidate / source.name)
        (candidate / source.name).chmod(0o644)
        self.progress_path = scratch / "progress.jsonl"
        inside = replace(request, solution=f"{CANDIDATE_DIR}/{source.name}")
        (scratch / "request.json").write_text(json.dumps(asdict(inside)))
        mounts = [Mount(CANDIDATE_DIR, str(candidate.resolve()), type="bind", read_only=True),
                  Mount(SCRATCH_DIR, str(scratch.resolve()), type="bind"),
                  Mount(CACHE_DIR, str(Path(executor.cache_dir).resolve()), type="bind")]
        limits = f"memory {executor.memory_gib:g} GiB, {executor.pids_limit} pids"
        self.container = self.client.containers.create(
            executor.image, ["python3", "-m", "evoteam.harness.judge", f"{SCRATCH_DIR}/request.json",
                             f"{SCRATCH_DIR}/progress.jsonl"],
            environment={**CACHE_ENV, CONTAINER_LIMITS_ENV: limits}, working_dir=SCRATCH_DIR, mounts=mounts,
            labels={"evoteam.role": "judge", "evoteam.task": request.task}, detach=True,
            **host_config(executor.hw, executor.memory_gib, executor.pids_limit, executor.podman, gpu=assigned_gpu()))
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
            self.container.kill(signal="SIGTERM")  # the judge ends its runners on the way out
        except docker.errors.APIError:
            pass  # it ended meanwhile
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.poll() is None:
            try:
                self.container.kill()
            except docker.errors.APIError:
                pass

    def out_of_memory(self) -> bool:
        return bool(self.state.get("OOMKilled"))

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
    """executor=docker: starts each evaluation's judge in a fresh container of the target's image."""

    kind = "docker"

    def __init__(self, hw: HardwareSpec, *, image: str | None = None, docker_host: str | None = None,
                 memory_gib: float = 16, pids_limit: int = 4096, cache_dir: str | None = None, client=None):
        self.hw = hw
        self.image = image or hw.container.image
        self.memory_gib, self.pids_limit = memory_gib, pids_limit
        self.client = client or connect(docker_host)
        check_image(self.client, self.image, hw, engine_address(docker_host))
        self.podman = _is_podman(self.client)
        self.cache_dir = Path(cache_dir or cache_root() / "container")
        _shared_dir(self.cache_dir)

    @classmethod
    def from_config(cls, executor_cfg: Any, hw: HardwareSpec) -> ContainerExecutor:
        return cls(hw, image=executor_cfg.image, docker_host=executor_cfg.docker_host,
                   memory_gib=executor_cfg.memory_gib, pids_limit=executor_cfg.pids_limit,
                   cache_dir=executor_cfg.cache_dir)

    def start(self, request: EvalRequest, workdir: Path) -> ContainerJudge:
        return ContainerJudge(self, request, workdir)

    def __call__(self, request: EvalRequest, timeout_s: float | None = None) -> EvalResult:
        started = time.time()
        result = evaluate(request, executor=self, timeout_s=timeout_s)
        return replace(result, placement=placement("docker", started, started, gpu=assigned_gpu()))
