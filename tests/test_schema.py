"""FlashInfer-Trace data model: round trips on real files, and validation by flashinfer-bench's own models."""

import json

import pytest

from evoteam import schema
from evoteam.task import available_tasks, load_task

from conftest import REPO

MLA_JSONL = REPO / "kernels" / "mla_decode" / "workloads.jsonl"
# sha256 of flashinfer-trace's mla_paged_decode_h16_ckv512_kpe64_ps1.workloads.jsonl, the file this copy is
MLA_JSONL_SHA256 = "ab11c7059b848fa35fcdb72c8d523a4c7a47190c808c1dc9e3a9be67941042b2"


def test_repository_copy_is_the_published_file_byte_for_byte():
    import hashlib

    assert hashlib.sha256(MLA_JSONL.read_bytes()).hexdigest() == MLA_JSONL_SHA256


def test_47_workloads_round_trip_unchanged():
    objects = list(schema.read_jsonl(MLA_JSONL))
    traces = [schema.Trace.from_json(o) for o in objects]
    assert len(traces) == 47
    assert {t.definition for t in traces} == {"mla_paged_decode_h16_ckv512_kpe64_ps1"}
    for obj, trace in zip(objects, traces):
        assert trace.to_json() == obj  # nothing lost or added
    assert traces[0].workload.inputs["kv_indices"].type == "safetensors"
    assert traces[0].workload.inputs["sm_scale"].value == pytest.approx(0.1352337747812271)


def test_trace_file_append_and_reload(tmp_path):
    traces = schema.load_traces(MLA_JSONL)[:3]
    evaluation = schema.Evaluation(
        status="PASSED", environment={"hardware": "cpu", "libs": {"torch": "2.13.0"}}, timestamp="2026-11-30T00:00:00Z",
        correctness=schema.Correctness(max_relative_error=1e-3, max_absolute_error=2e-3, extra={"rel_norm": 1e-4}),
        performance=schema.Performance(latency_ms=1.0, reference_latency_ms=2.0, speedup_factor=2.0))
    written = [schema.Trace(definition=t.definition, workload=t.workload, solution="seed", evaluation=evaluation)
               for t in traces]
    path = tmp_path / "traces.jsonl"
    schema.append_traces(path, written[:2])
    schema.append_traces(path, written[2:])
    assert schema.load_traces(path) == written


@pytest.mark.parametrize("task_name", available_tasks())
def test_definitions_round_trip(task_name):
    definition = load_task(task_name).definition
    assert schema.Definition.from_json(json.loads(json.dumps(definition.to_json()))) == definition
    assert "def run(" in definition.reference


def test_errors_name_the_problem():
    with pytest.raises(schema.SchemaError, match="missing field 'uuid'"):
        schema.Workload.from_json({"axes": {}, "inputs": {}})
    with pytest.raises(schema.SchemaError, match="axis batch_size must be a non-negative integer"):
        schema.Workload.from_json({"axes": {"batch_size": -1}, "inputs": {}, "uuid": "x"})
    with pytest.raises(schema.SchemaError, match="uses undefined axis 'n'"):
        schema.Definition.from_json({"name": "d", "op_type": "t", "axes": {}, "reference": "def run(): pass",
                                     "inputs": {"x": {"shape": ["n"], "dtype": "float32"}}, "outputs": {}})
    with pytest.raises(schema.SchemaError, match="entry_point must be"):
        schema.BuildSpec.from_json({"language": "triton", "target_hardware": ["h200"], "entry_point": "main"})
    with pytest.raises(schema.SchemaError, match=r"not valid JSON"):
        bad = REPO / "tests" / "data" / "_bad.jsonl"
        try:
            bad.write_text('{"a": 1}\n{oops\n')
            list(schema.read_jsonl(bad))
        finally:
            bad.unlink()


# ---------------------------------------------------------------- flashinfer-bench reads what we write
@pytest.fixture
def fib():
    return pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench's data model comes with `make test`")


@pytest.mark.parametrize("task_name", available_tasks())
def test_flashinfer_bench_accepts_our_definitions_and_workloads(fib, task_name):
    task = load_task(task_name)
    parsed = fib.Definition.model_validate(task.definition.to_json())
    assert parsed.name == task.definition.name
    assert list(parsed.inputs) == list(task.definition.inputs)
    for line in schema.read_jsonl(task.folder / "workloads.jsonl"):
        trace = fib.Trace.model_validate(line)
        assert trace.definition == task.definition.name


@pytest.mark.parametrize("task_name", available_tasks())
def test_the_committed_definition_is_complete_and_its_constraints_are_python_that_holds(fib, task_name):
    """kernels/<task>/definition.json as committed is a definition flashinfer-bench loads as it is (its reference the
    task's Python source, no pointer to a file), and every constraint is a Python expression over the axes and inputs
    that holds on the task's workloads (their inputs as the task makes them)."""
    import torch

    task = load_task(task_name)
    committed = (task.folder / "definition.json").read_text()
    parsed = fib.Definition.model_validate_json(committed)
    assert parsed.reference == task.definition.reference and "def run(" in parsed.reference
    assert parsed.constraints == list(task.definition.constraints)
    for workload in task.scaled_workloads("small"):
        inputs = task.make_inputs(workload, torch.Generator().manual_seed(0), "cpu")
        scope = {**task.definition.const_axes(), **task.var_axes(workload, inputs), **inputs}
        for constraint in parsed.constraints:
            assert eval(constraint, {"__builtins__": {"bool": bool, "int": int, "abs": abs}}, scope) is True, (  # noqa: S307
                workload.uuid, constraint)


def test_flashinfer_bench_accepts_our_solutions_and_traces(fib):
    task = load_task("mla_decode")
    solution = schema.Solution.from_file(task.folder / "seed_triton.py", definition=task.definition.name,
                                         target_hardware=("h200", "cpu"))
    parsed = fib.Solution.model_validate(solution.to_json())
    assert parsed.spec.entry_point == "seed_triton.py::run"
    assert schema.Solution.from_json(solution.to_json()) == solution
    workload = task.workloads[0]
    ok = schema.Trace(definition=task.definition.name, workload=workload, solution=solution.name,
                      evaluation=schema.Evaluation(
                          status="PASSED", environment={"hardware": "h200", "libs": {"torch": "2.11"}},
                          timestamp="2026-11-30T10:00:00+00:00", correctness=schema.Correctness(1e-3, 1e-3),
                          performance=schema.Performance(0.02, 0.03, 1.5)))
    failed = schema.Trace(definition=task.definition.name, workload=workload, solution=solution.name,
                          evaluation=schema.Evaluation(status="RUNTIME_ERROR", environment={"hardware": "h200"},
                                                       timestamp="2026-11-30T10:00:00+00:00", log="boom"))
    for trace in (ok, failed):
        theirs = fib.Trace.model_validate(json.loads(json.dumps(trace.to_json())))
        assert theirs.evaluation.status.value == trace.evaluation.status
