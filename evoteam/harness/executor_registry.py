"""Executors by name: where an evaluation's judge runs, chosen by `executor=<kind>`.

    local   the judge on this machine, the candidate under bubblewrap (with several GPUs, each evaluation
            of a parallel round on a free one)
    docker  the judge in a fresh container of the target's image, through the Docker API
    ray     each evaluation a Ray task on a node that offers the target
    auto    docker where a container engine answers and has the target's image, else local

Every executor is one class with the same two entries: `from_config(executor_cfg, hw)`, ready to
evaluate (or a UserError of one line: no engine, no image, no cluster), and
`executor(request, timeout_s) -> EvalResult`, whose `placement` says where it ran. `choose` is the one
place a front door gets its executor; the choice and its reason are recorded with the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from evoteam.errors import UserError
from evoteam.hardware import HardwareSpec
from evoteam.harness.model import EvalRequest, EvalResult

Evaluator = Callable[[EvalRequest, float], EvalResult]
KINDS = ("local", "docker", "ray")
AUTO = "auto"
REMOTE = ("docker", "ray")  # their target is named, not detected on this machine
AUTO_PROBE_S = 5.0  # how long auto waits for an engine to answer before it runs locally


def executor_class(kind: str) -> type:
    """The class of an executor kind (imported on demand: docker and ray are heavy and optional)."""
    if kind == "local":
        from evoteam.harness.executor import LocalExecutor

        return LocalExecutor
    if kind == "docker":
        from evoteam.harness.container import ContainerExecutor

        return ContainerExecutor
    if kind == "ray":
        from evoteam.harness.ray_executor import RayExecutor

        return RayExecutor
    raise UserError(f"executor={kind} is not an executor; allowed: {', '.join((AUTO, *KINDS))}")


def local_evaluator() -> Evaluator:
    """executor=local with nothing configured: what evaluates where a caller names no executor (tests, tools)."""
    return executor_class("local")()


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str  # local, docker or ray: what evaluates
    reason: str  # why this one (asked for by name, or what auto found)
    evaluator: Evaluator

    def describe(self) -> str:
        return f"{self.kind} ({self.reason})"


def choose(requested: str, executor_cfg, hw: HardwareSpec) -> ExecutorChoice:
    """The executor `requested` names (auto: decided here), from the `executor` configuration."""
    if requested == AUTO:
        kind, reason = auto_kind(executor_cfg, hw)
    else:
        kind, reason = requested, f"executor={requested}"
    return ExecutorChoice(kind, reason, executor_class(kind).from_config(executor_cfg, hw))


def auto_kind(executor_cfg, hw: HardwareSpec) -> tuple[str, str]:
    """docker where an engine answers (executor.docker_host, else DOCKER_HOST, else the default socket) and has
    the target's image (executor.image, else the spec sheet's); else local, saying what was missing."""
    from evoteam.harness import container

    image = executor_cfg.image or hw.container.image
    address = container.engine_address(executor_cfg.docker_host)
    try:
        import docker  # noqa: F401 - the Docker API's client (a dependency; a bare host may lack it)
    except ImportError:
        return "local", "auto: the docker package (the Docker API's client) is not installed"
    try:
        client = container.connect(executor_cfg.docker_host, timeout_s=AUTO_PROBE_S)
    except UserError:
        return "local", f"auto: no container engine answers at {address}"
    try:
        container.check_image(client, image, hw, address)
    except UserError:
        return "local", (f"auto: the engine at {address} has no image {image}; to run in the target's container, "
                         f"build it: {container.build_hint(image, hw)}")
    finally:
        client.close()
    return "docker", f"auto: the engine at {address} has the target's image {image}"
