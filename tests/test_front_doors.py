"""One target for every front door: the hardware, the task's workloads at the scale, the timing mode and the
executor are resolved by `evoteam.target.Target` alone, and every evaluation request is built there. A front
door (the main job, bench, sweep, run_dataset, the brief, the team's toolbox) that resolves any of these by
itself fails here, as does a status compared by its string instead of `Status`."""

import ast
from pathlib import Path

import pytest

from evoteam.errors import UserError
from evoteam.harness.model import CPU_ROUNDS, TimingMode
from evoteam.target import Target

PACKAGE = Path(__file__).resolve().parent.parent / "evoteam"
# Where a target is resolved and requests are built: the target itself, and the harness below it.
HOMES = ("target.py", "harness/")
# Calls that resolve a part of a target (the last attribute of the called name).
RESOLVING_CALLS = {"resolve": "hardware.resolve", "select_workloads": "select_workloads", "on": "TimingMode.on",
                   "EvalRequest": "EvalRequest(...)", "LocalExecutor": "LocalExecutor(...)",
                   "ContainerExecutor": "ContainerExecutor(...)", "RayExecutor": "RayExecutor(...)"}


def _called_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        owner = f.value.id if isinstance(f.value, ast.Name) else ""
        return f"{owner}.{f.attr}"
    return ""


def _violations(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node)
        last = name.rsplit(".", 1)[-1]
        if last not in RESOLVING_CALLS:
            continue
        if last == "resolve" and name != "hardware.resolve":
            continue  # other objects' resolve (inherit.resolve, Path.resolve)
        if last == "on" and name != "TimingMode.on":
            continue
        out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} calls {RESOLVING_CALLS[last]}")
    return out


def test_no_front_door_resolves_its_target_by_itself():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(HOMES) or relative in ("hardware.py", "task.py"):
            continue
        offenders += _violations(path)
    assert not offenders, "resolve these through evoteam.target.Target:\n" + "\n".join(offenders)


def test_the_check_sees_a_front_door_that_resolves_by_itself(tmp_path):
    door = tmp_path / "door.py"
    door.write_text("from evoteam import hardware\nfrom evoteam.harness.model import EvalRequest, TimingMode\n"
                    "hw = hardware.resolve('auto')\nmode = TimingMode.on('graph', hw.is_gpu)\n"
                    "r = EvalRequest(task='t', hardware=hw.name, solution='x.py')\n")
    door = door.rename(PACKAGE.parent / "tests" / "data" / f"_door_{tmp_path.name}.py")
    try:
        found = _violations(door)
    finally:
        door.unlink()
    assert [v.split(" calls ")[1] for v in found] == ["hardware.resolve", "TimingMode.on", "EvalRequest(...)"]


def test_statuses_are_compared_as_status_not_as_strings():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ("schema.py", "trace_writer.py"):  # flashinfer-bench's own status strings
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "PASSED" for c in [node.left, *node.comparators]):
                offenders.append(f"{relative}:{node.lineno}")
    assert not offenders, "compare with evoteam.harness.model.Status.PASSED: " + ", ".join(offenders)


def test_a_cpu_target_resolves_once_with_its_own_clock_and_rounds():
    target = Target.resolve("mla_decode", "cpu", workloads=["00cb2bc2"], timing_mode="graph")
    assert target.hw.name == "cpu" and target.scale == "small" and len(target.workloads) == 1
    assert "mla_decode (1 workload, scale small) on cpu" in target.describe()  # not "1 workloads"
    assert target.timing_mode == TimingMode.cputime.value  # a CPU is timed by CPU time, whatever was asked
    assert target.executor.kind == "local" and target.executor.reason == "executor=local"
    request = target.request("k.py", trials=4, warmup=None)
    assert (request.warmup, request.reps) == CPU_ROUNDS and request.trials == 4
    assert request.workloads == target.uuids and request.timing_mode == "cputime" and request.scale == "small"


def test_a_target_refuses_in_one_line():
    with pytest.raises(UserError, match="not a known task"):
        Target.resolve("nope", "cpu")
    with pytest.raises(UserError, match="matches no workload"):
        Target.resolve("mla_decode", "cpu", workloads=["zzzz"])
    with pytest.raises(UserError, match="name the target"):
        Target.resolve("mla_decode", "auto", executor="ray")


def test_auto_runs_here_where_no_engine_answers_and_says_why(tmp_path):
    from evoteam.config import ExecutorConfig
    from evoteam.harness.executor import LocalExecutor

    nowhere = f"unix://{tmp_path}/no-engine.sock"
    target = Target.resolve("mla_decode", "cpu", executor="auto", executor_cfg=ExecutorConfig(docker_host=nowhere))
    assert target.executor.kind == "local" and isinstance(target.executor.evaluator, LocalExecutor)
    assert target.executor.reason == f"auto: no container engine answers at {nowhere}"
    assert f"executor local (auto: no container engine answers at {nowhere})" in target.describe()
