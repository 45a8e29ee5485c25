"""What a run or an evaluation measures, resolved once for every front door (the main job, bench, sweep,
run_dataset, the brief): the hardware spec, the task and its workloads at the problem scale, the timing
mode the target really uses, and the executor that evaluates there, with the reason it was chosen.

Everything that can refuse a target (an unknown task or workload, hardware that is not this machine's,
no container engine or cluster) does so here, in one line, before a front door writes anything. Every
evaluation request of a front door is built by `Target.request`, so the rounds, the scale and the
timing mode of a target are decided in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoteam import hardware
from evoteam.dataset import is_dataset_task
from evoteam.errors import UserError
from evoteam.harness.executor_registry import REMOTE, ExecutorChoice, choose
from evoteam.harness.model import CPU_ROUNDS, EvalRequest, TimingMode
from evoteam.schema import Workload
from evoteam.task import Task, available_tasks, load_task, select_workloads, shape_label


@dataclass(frozen=True)
class Target:
    hw: hardware.HardwareSpec
    task: Task
    scale: str  # the problem scale ("full" or "small"): the run's, else the hardware's
    workloads: tuple[Workload, ...]
    timing_mode: str  # the clock the judge uses: graph or events (or wallclock) on a GPU, cputime on a CPU
    executor: ExecutorChoice | None = field(default=None, compare=False)  # None: the target only describes

    @classmethod
    def resolve(cls, task: str, hardware_name: str = "auto", *, scale: str | None = None,
                workloads: list[str] | tuple[str, ...] = (), timing_mode: str = TimingMode.graph.value,
                executor: str | None = "local", executor_cfg: Any = None) -> Target:
        """The target of `task` on `hardware_name`, evaluated by `executor` (a kind of
        evoteam.harness.executor_registry, configured by `executor_cfg`, the `executor` group of the
        configuration); `executor=None` for a target that is only described (a brief), whose hardware
        need not be this machine's."""
        if task not in available_tasks() and not is_dataset_task(task):
            raise UserError(f"task {task} is not a known task; allowed: {', '.join(available_tasks())}, or "
                            f"<flashinfer-bench dataset folder>::<definition>")
        if executor == "ray" and hardware_name == "auto":
            raise UserError("executor=ray: name the target the cluster's nodes offer (hardware=h200, say); "
                            "hardware=auto detects this machine's device, not theirs")
        hw = hardware.resolve(hardware_name, remote=executor is None or executor in REMOTE)
        loaded = load_task(task)
        scale = scale or hw.problem_scale
        chosen = select_workloads(loaded.scaled_workloads(scale), list(workloads))
        mode = TimingMode.on(timing_mode, hw.is_gpu)
        evaluator = None if executor is None else choose(executor, executor_cfg, hw)
        return cls(hw, loaded, scale, tuple(chosen), mode, evaluator)

    # ------------------------------------------------------------------ what front doors read
    @property
    def uuids(self) -> list[str]:
        return [w.uuid for w in self.workloads]

    @property
    def by_uuid(self) -> dict[str, Workload]:
        return {w.uuid: w for w in self.workloads}

    @property
    def labels(self) -> dict[str, str]:
        """uuid -> the workload's shape, as tables show it."""
        return {w.uuid: shape_label(w) for w in self.workloads}

    @property
    def groups(self) -> list[str]:
        return sorted({self.task.workload_group(w) for w in self.workloads})

    @property
    def rounds(self) -> tuple[int, int]:
        """(warm-up, timed) rounds of a full evaluation: a GPU's settle early (the judge stops them), a CPU's
        are few, since a CPU call is slow."""
        return (EvalRequest.warmup, EvalRequest.reps) if self.hw.is_gpu else CPU_ROUNDS

    def request(self, solution: str | Path, **fields: Any) -> EvalRequest:
        """An evaluation request of this target for one candidate file: every workload of the target, its
        timing mode and rounds, unless `fields` (EvalRequest's, by name) say otherwise."""
        warmup, reps = self.rounds
        defaults = {"workloads": self.uuids, "timing_mode": self.timing_mode, "warmup": warmup, "reps": reps}
        given = {k: v for k, v in fields.items() if v is not None or k == "seed"}
        return EvalRequest(task=self.task.name, hardware=self.hw.name, solution=str(solution), scale=self.scale,
                           **{**defaults, **given})

    def describe(self) -> str:
        where = f"; executor {self.executor.describe()}" if self.executor else ""
        n = len(self.workloads)
        return (f"{self.task.name} ({n} workload{'' if n == 1 else 's'}, scale {self.scale}) on {self.hw.name}; "
                f"timing {self.timing_mode}{where}")


def baseline_options(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE options of a baseline adapter (e.g. backend=fa3; path=FILE for the A/A control, made absolute
    so that the baseline's runner, in another folder, finds it)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"--baseline-option {pair!r} is not KEY=VALUE (e.g. backend=fa3)")
        key, value = pair.split("=", 1)
        if key == "path":
            if not Path(value).is_file():
                raise UserError(f"--baseline-option path={value}: no such file; give a kernel file's path")
            value = str(Path(value).resolve())
        out[key] = value
    return out
