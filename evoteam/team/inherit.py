"""What a new run's shared workspace starts from (`workspace.inherit`), as in the paper, where earlier teams'
results and code stay on the shared filesystem for the next team:

- `champion`: the task's best known kernel for the target, a committed champion (`kernels/<task>/
  champion_<hardware>.json`: a family's point per workload shape), measured once at the start;
- a path to a champion file: the same with that file;
- a path to an earlier run's directory: its finished evaluations (code, results), copied as they are; the run
  must have measured the same task, target and scale;
- `none`: an empty workspace;
- `auto` (the default): the target's champion where one exists and its family is verified on the target, else none.

Inherited attempts belong to the team `inherited`: they are not charged to any team's budget, every preset of
an equal-budget comparison starts from the same ones, and the final dispatch, which takes each workload's best
verified kernel, keeps an inherited kernel wherever no team's kernel beat it by more than the noise of both
measurements (evoteam/team/progress.py `keep_inherited`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from evoteam.errors import UserError
from evoteam.schema import append_journal, read_journal

INHERITED_TEAM = "inherited"


@dataclass(frozen=True)
class Inheritance:
    kind: str  # none, champion or run
    source: str = ""  # the champion file or the earlier run's directory

    def describe(self) -> str:
        return self.kind if self.kind == "none" else f"{self.kind}:{self.source}"


def resolve(value: str, task, hw) -> Inheritance:
    """`workspace.inherit` as a checked Inheritance, or one line saying what is wrong."""
    from evoteam.families import load_champion

    value = str(value or "auto")
    if value == "none":
        return Inheritance("none")
    own = task.folder / f"champion_{hw.name}.json"
    if value in ("auto", "champion"):
        if not own.is_file():
            if value == "auto":
                return Inheritance("none")
            raise UserError(f"workspace.inherit=champion: task {task.name} has no champion for {hw.name} ({own} is "
                            f"missing); give a champion file or an earlier run's directory, or workspace.inherit=none")
        champion = load_champion(own)
        if value == "auto" and not champion.family.usable_on(hw.name):
            return Inheritance("none")
        return Inheritance("champion", str(own))
    path = Path(value)
    if path.is_file() and path.suffix == ".json":
        try:
            champion = load_champion(path)
        except ValueError as exc:
            raise UserError(f"workspace.inherit={value}: {exc}") from None
        if champion.task != task.name:
            raise UserError(f"workspace.inherit={value}: a champion of task {champion.task}, not {task.name}")
        return Inheritance("champion", str(path.resolve()))
    if (path / "workspace" / "attempts.jsonl").is_file() and (path / "config.yaml").is_file():
        _same_measurement(path, task, hw)
        return Inheritance("run", str(path.resolve()))
    raise UserError(f"workspace.inherit={value}: neither a champion file nor a run directory with "
                    f"workspace/attempts.jsonl; give champion, none, auto, a champion .json or an earlier run's directory")


def _same_measurement(run_dir: Path, task, hw) -> None:
    from omegaconf import OmegaConf

    earlier = OmegaConf.load(run_dir / "config.yaml")
    theirs = (earlier.task.name, earlier.hardware.name)
    if theirs != (task.name, hw.name):
        raise UserError(f"workspace.inherit={run_dir}: that run measured {theirs[0]} on {theirs[1]}, this one "
                        f"{task.name} on {hw.name}; inherit from a run of the same task and target")


def copy_run(source: Path, workspace_root: Path, workloads: list[str]) -> int:
    """An earlier run's finished evaluations of these workloads into a new workspace (before the run opens it):
    each attempt's folder and journal line, as the team `inherited`. Returns how many."""
    wanted = set(workloads)
    copied = 0
    journal = workspace_root / "attempts.jsonl"
    workspace_root.mkdir(parents=True, exist_ok=True)
    for entry in read_journal(source / "workspace" / "attempts.jsonl"):
        if not set(entry["workloads"]) <= wanted:
            continue  # measured on workloads this run does not have
        folder = source / "workspace" / "attempts" / entry["attempt_id"]
        shutil.copytree(folder, workspace_root / "attempts" / entry["attempt_id"], dirs_exist_ok=True)
        append_journal(journal, {**entry, "team": INHERITED_TEAM, "role": f"inherited:{entry['role']}",
                                 "origin": {**entry.get("origin", {}), "inherited": str(source)}})
        copied += 1
    return copied


def champion_origin(champion, path: str, workloads: list) -> dict:
    """The champion as an attempt's origin: its family, its default point, and the point its dispatch runs on
    each workload (`points`, uuid -> params), where the offline tuner starts from per workload group."""
    params = {**champion.family.default, **champion.params}
    return {"inherited": Path(path).name, "family": champion.family.name, "params": params,
            "dispatch_entries": len(champion.dispatch), "points": champion.points_by_workload(workloads)}


def describe_for_log(inheritance: Inheritance, copied: int | None = None) -> str:
    if inheritance.kind == "champion":
        return (f"the workspace starts from the champion {inheritance.source} (measured once on every workload, "
                f"not charged to any team)")
    if inheritance.kind == "run":
        return f"the workspace starts from {copied} finished evaluation(s) of {inheritance.source} (not charged)"
    return "the workspace starts empty"

