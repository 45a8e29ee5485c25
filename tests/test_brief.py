"""The brief every LLM member starts from, for each task, as `python -m evoteam.team.brief` prints it:
the interface (every argument with shape and dtype, outputs named), the workloads, the correctness
and timing rules, the target's facts, the rules and the reference's source, in a few thousand tokens."""


import pytest

from evoteam.task import load_task

from conftest import run_module


@pytest.mark.parametrize("task_name, hardware", [("mla_decode", "h200"), ("kda_prefill", "h200"),
                                                 ("kda_prefill", "mi350x"), ("mla_decode", "cpu")])
def test_the_brief_gives_the_interface_the_rules_the_target_and_the_reference(task_name, hardware):
    out = run_module(["--task", task_name, "--hardware", hardware], module="evoteam.team.brief", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    task = load_task(task_name)
    d = task.definition
    assert f"def run({', '.join(list(d.inputs) + list(d.outputs))}) -> None" in text
    for name, spec in list(d.inputs.items()) + list(d.outputs.items()):
        assert f"- {name}: {spec.dtype} " in text, name
    for output in d.outputs:
        tol = task.tolerance(output)
        assert f"{output}: atol {tol.atol:g}, rtol {tol.rtol:g}" in text
    assert task.definition.reference.strip() in text
    workloads = task.scaled_workloads("small" if hardware == "cpu" else "full")
    assert all(w.uuid[:8] in text for w in workloads)
    assert "Counted as cheating" in text and "may import only: torch, triton" in text
    if hardware == "cpu":
        assert "TRITON_INTERPRET=1" in text
    else:
        assert "multiprocessors" in text and "TB/s" in text
    size = text.strip().splitlines()[-1]
    assert size.startswith(f"[the brief of {task_name} on {hardware}: ") and " tokens " in size
    assert 1000 < int(size.split(": ")[1].split()[0]) < 8000, size
