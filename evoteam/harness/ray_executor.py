"""executor=ray: each evaluation is a Ray task on a node that offers the run's target.

A node offers a target through a custom resource named `evoteam_<hardware>` (evoteam_h200, evoteam_cpu, ...),
one unit per accelerator it lends to evaluations:

    ray start --head --num-gpus 8 --resources '{"evoteam_h200": 8}'
    ray start --address HEAD:6379 --num-gpus 8 --resources '{"evoteam_h200": 8}'

An evaluation asks for one unit of its target and, on a GPU target, one GPU, so Ray never runs two on one
GPU and sets CUDA_VISIBLE_DEVICES of the task to the GPU it assigned; the task runs the same isolated judge
and sandboxed runner as executor=local on that node (`evoteam.harness.executor.evaluate`), which take the
assigned GPU. The candidate's file travels by value (no shared filesystem); the nodes need evoteam installed
at the same version. A task is retried once if its node or worker is lost, never for what the candidate did
(that is a verdict). A target no node offers gives one line after `wait_s`, not a task pending forever.

The engine's address comes from `executor.ray.address`, else RAY_ADDRESS; with neither, a local Ray instance
starts with this machine's accelerators as the target's resource. Token authentication (Ray >= 2.52,
RAY_AUTH_MODE=token): the token is read from the variable `executor.ray.auth_token_env` names.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from evoteam.errors import UserError
from evoteam.harness.model import EvalRequest, EvalResult

RESOURCE_PREFIX = "evoteam_"
RETRIES_ON_NODE_LOSS = 1


def target_resource(hardware: str) -> str:
    return f"{RESOURCE_PREFIX}{hardware}"


def _evaluate_on_node(request: dict, file_name: str, source: str, timeout_s: float | None, submitted: float) -> dict:
    """The Ray task: the candidate written to a private folder of this node, evaluated here."""
    import ray

    from evoteam.harness.executor import evaluate, placement

    started = time.time()
    gpus = [str(g) for g in ray.get_gpu_ids()]
    with tempfile.TemporaryDirectory(prefix="evoteam-ray-") as folder:
        path = Path(folder) / file_name
        path.write_text(source)
        result = evaluate(replace(EvalRequest(**request), solution=str(path)), timeout_s=timeout_s)
    context = ray.get_runtime_context()
    where = {"node": context.get_node_id(), "gpu": ",".join(gpus) or None, "pid": os.getpid()}
    return replace(result, placement=placement("ray", submitted, started, **where)).to_json()


@dataclass
class RayExecutor:
    """The evaluator of executor=ray: `executor(request, timeout_s) -> EvalResult`, safe to call from
    several threads at once (each call is one task in flight)."""

    hardware: str
    gpu: bool  # the target is a GPU: each evaluation takes one
    address: str | None = None
    wait_s: float = 30.0  # how long to wait for a node that offers the target (an autoscaler may add one)
    auth_token_env: str | None = None
    gpus_per_evaluation: float | None = None  # None: 1 on a GPU target, 0 on a CPU
    _connected: bool = False

    def __post_init__(self):
        self._lock = threading.Lock()

    kind = "ray"

    @classmethod
    def from_config(cls, executor_cfg, hw) -> RayExecutor:
        """Connected: the cluster and a node of the target, or one line, before a run writes anything."""
        ray_cfg = executor_cfg.ray
        executor = cls(hardware=hw.name, gpu=hw.is_gpu, address=ray_cfg.address, wait_s=float(ray_cfg.wait_s),
                       auth_token_env=ray_cfg.auth_token_env, gpus_per_evaluation=ray_cfg.gpus_per_evaluation)
        executor.connect()
        return executor

    @property
    def resource(self) -> str:
        return target_resource(self.hardware)

    def connect(self) -> None:
        """Joins the cluster (or starts a local instance) once, and waits until a node offers the target."""
        with self._lock:
            if self._connected:
                return
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if self.auth_token_env:
                token = os.environ.get(self.auth_token_env)
                if not token:
                    raise UserError(f"executor.ray.auth_token_env={self.auth_token_env}: that variable is not set; "
                                    f"export it with the cluster's token (ray get-auth-token)")
                # Ray reads its authentication settings once, when it is imported: set them before that.
                if "ray" in sys.modules and os.environ.get("RAY_AUTH_TOKEN") != token:
                    raise UserError("executor.ray.auth_token_env: Ray was imported before the token was set; export "
                                    "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN before starting this process")
                os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
            import ray

            if not ray.is_initialized():
                kwargs: dict = {"logging_level": "warning", "log_to_driver": False}
                if address:
                    kwargs["address"] = address
                else:  # a local instance: this machine's accelerators are the target's
                    count = self._local_devices()
                    kwargs.update(resources={self.resource: count}, num_gpus=count if self.gpu else 0)
                try:
                    ray.init(**kwargs)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    raise UserError(f"executor=ray: cannot join the Ray cluster at {address or 'a new local instance'} "
                                    f"({first[:200]}); check executor.ray.address / RAY_ADDRESS and, where the cluster "
                                    f"uses token authentication, executor.ray.auth_token_env") from None
            self._wait_for_target(address)
            gpus = self.gpus_per_evaluation if self.gpus_per_evaluation is not None else (1 if self.gpu else 0)
            self._task = ray.remote(_evaluate_on_node).options(
                resources={self.resource: 1}, num_gpus=gpus, num_cpus=1, max_retries=RETRIES_ON_NODE_LOSS,
                retry_exceptions=False, name="evoteam-evaluation")
            self._connected = True

    def _local_devices(self) -> int:
        if not self.gpu:
            return 1
        from evoteam.harness.executor import DevicePool

        pool = DevicePool.visible(True)
        return len(pool.ids) if pool else 1

    def _wait_for_target(self, address: str | None) -> None:
        import ray

        deadline = time.monotonic() + self.wait_s
        while True:
            offered = ray.cluster_resources()
            if offered.get(self.resource, 0) > 0:
                return
            if time.monotonic() > deadline:
                targets = sorted(k[len(RESOURCE_PREFIX):] for k in offered if k.startswith(RESOURCE_PREFIX))
                raise UserError(
                    f"executor=ray: no node of the Ray cluster at {address or 'this machine'} offers hardware "
                    f"{self.hardware} after {self.wait_s:.0f} s (nodes offer: {', '.join(targets) or 'no target'}); "
                    f"start one with ray start --address <head> --resources '{{\"{self.resource}\": <accelerators>}}'")
            time.sleep(0.5)

    def __call__(self, request: EvalRequest, timeout_s: float | None = None) -> EvalResult:
        import ray

        self.connect()
        path = Path(request.solution)
        try:
            source = path.read_text()
        except OSError as exc:
            raise UserError(f"executor=ray: the candidate {path} cannot be read ({exc.strerror})") from None
        ref = self._task.remote(asdict(request), path.name, source, timeout_s, time.time())
        try:
            return EvalResult.from_json(ray.get(ref))
        except ray.exceptions.RayError as exc:
            # the node died twice, or the task raised (the harness's own error, e.g. no sandbox on that node)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, UserError):
                raise UserError(f"executor=ray, on a node of {self.hardware}: {cause}") from None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"executor=ray: the evaluation of {path.name} failed on the cluster ({first[:300]}); "
                            f"see the Ray logs of its node") from None
