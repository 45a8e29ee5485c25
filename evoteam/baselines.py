"""Baseline adapters: the library kernels every candidate is measured against.

An adapter declares what it supports and says `unavailable: <reason>` instead of crashing when
its library is missing. `prepare(task, workload, inputs)` does any per-workload set-up outside the
timed region and returns a destination-passing callable `fn(**inputs, **outputs)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evoteam.errors import UserError
from evoteam.hardware import HardwareSpec
from evoteam.task import Task


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""

    def __str__(self) -> str:
        return "available" if self.available else f"unavailable: {self.reason}"


class Baseline:
    name: str = "baseline"
    tasks: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()

    def availability(self, task: Task, hw: HardwareSpec) -> Availability:
        if task.name not in self.tasks:
            return Availability(False, f"{self.name} does not implement task {task.name}")
        if hw.backend not in self.backends:
            return Availability(False, f"{self.name} does not run on {hw.backend}")
        return Availability(True)

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        raise NotImplementedError


class ReferenceBaseline(Baseline):
    """The task's own PyTorch reference (fp32 accumulate): the baseline on CPU."""

    name = "reference"
    backends = ("cpu", "cuda", "rocm")

    def availability(self, task: Task, hw: HardwareSpec) -> Availability:
        return Availability(True)

    def prepare(self, task: Task, workload: Any, inputs: dict[str, Any]) -> Callable[..., None]:
        def run(**kwargs: Any) -> None:
            result = task.reference({n: kwargs[n] for n in task.definition.inputs})
            for name, value in result.items():
                kwargs[name].copy_(value)

        return run


ADAPTERS: dict[str, Baseline] = {"reference": ReferenceBaseline()}

# Preference order per backend for baseline=auto: the library kernels first, the reference last.
AUTO_ORDER = {"cpu": ["reference"], "cuda": ["reference"], "rocm": ["reference"]}


def select(name: str, task: Task, hw: HardwareSpec) -> Baseline:
    if name == "auto":
        for candidate in AUTO_ORDER[hw.backend]:
            adapter = ADAPTERS.get(candidate)
            if adapter is not None and adapter.availability(task, hw).available:
                return adapter
        raise UserError(f"no baseline available for task {task.name} on {hw.name}")
    adapter = ADAPTERS.get(name)
    if adapter is None:
        raise UserError(f"task.baseline={name} is not a known baseline; allowed: auto, {', '.join(ADAPTERS)}")
    status = adapter.availability(task, hw)
    if not status.available:
        raise UserError(f"task.baseline={name} is {status}")
    return adapter
