"""`python -m evoteam.export` writes datasets that flashinfer-bench's own loader reads (version pinned in
the dev extra), with every blob a workload points to and a solution for every traced name."""

import json
import subprocess
import sys

import pytest
import torch

from evoteam.export import main as export_main
from evoteam.schema import load_traces
from evoteam.task import load_task, scaled_uuid

from conftest import REPO

fib_data = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench comes with `make test`")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="flashinfer-bench's loader needs safetensors")

CANDIDATE = REPO / "tests" / "data" / "candidates" / "mla_torch.py"


def _check_blobs(root, trace_set):
    """Every safetensors input of every workload exists and holds what the task uses (read by the
    safetensors package, as flashinfer-bench reads it)."""
    checked = 0
    for definition, workloads in trace_set.workloads.items():
        task = next(load_task(n) for n in ("mla_decode", "kda_prefill") if load_task(n).definition.name == definition)
        ours = {w.uuid: w for scale in ("full", "small") for w in task.scaled_workloads(scale)}
        for trace in workloads:
            want = task.blob_tensors(ours[trace.workload.uuid])
            for name, spec in trace.workload.inputs.items():
                if spec.type == "safetensors":
                    got = safetensors_torch.load_file(root / spec.path)[spec.tensor_key]
                    assert torch.equal(got, want[name]), (trace.workload.uuid, name)
                    checked += 1
    return checked


def test_task_export_loads_in_flashinfer_bench_with_every_blob(tmp_path):
    out = tmp_path / "dataset"
    assert export_main([str(out), "--task", "mla_decode", "--task", "kda_prefill"]) == 0
    assert export_main([str(out), "--task", "mla_decode", "--task", "kda_prefill", "--scale", "small"]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    mla, kda = load_task("mla_decode"), load_task("kda_prefill")
    assert set(trace_set.definitions) == {mla.definition.name, kda.definition.name}
    assert "def run(" in trace_set.definitions[mla.definition.name].reference  # the reference code inline
    counts = {d: len(w) for d, w in trace_set.workloads.items()}
    assert counts == {mla.definition.name: 47 + 4, kda.definition.name: len(kda.workloads) + len(kda.scaled_workloads("small"))}
    assert _check_blobs(out, trace_set) == 2 * 51 + counts[kda.definition.name]
    # Honest identities: a scaled-down workload has its own uuid, derived from the published one
    published = {w.uuid: w for w in mla.workloads}
    for w in mla.scaled_workloads("small"):
        assert w.uuid not in published
        origin = next(u for u in published if scaled_uuid(u, "small") == w.uuid)
        assert published[origin].axes["num_pages"] != w.axes["num_pages"]
    # exporting again adds nothing
    before = sorted(p.read_bytes() for p in out.rglob("*.jsonl"))
    assert export_main([str(out), "--task", "mla_decode"]) == 0
    assert sorted(p.read_bytes() for p in out.rglob("*.jsonl")) == before


def test_a_bench_output_exports_with_its_solution_and_loads(tmp_path):
    traces = tmp_path / "bench.jsonl"
    mla = load_task("mla_decode")
    uuids = [w.uuid[:8] for w in mla.scaled_workloads("small")[:2]]
    bench = subprocess.run([sys.executable, "-m", "evoteam.bench", str(CANDIDATE), "--task", "mla_decode",
                            "--hardware", "cpu", "--scale", "small", "--workloads", *uuids, "--warmup", "0",
                            "--reps", "2", "--traces", str(traces)], capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    out = tmp_path / "dataset"
    missing = subprocess.run([sys.executable, "-m", "evoteam.export", str(out), "--traces", str(traces)],
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "--solution mla_torch=PATH" in missing.stderr and not out.exists()  # nothing half-written
    assert export_main([str(out), "--traces", str(traces), "--solution", str(CANDIDATE)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    name = mla.definition.name
    assert [s.name for s in trace_set.solutions[name]] == ["mla_torch"]
    assert trace_set.get_solution("mla_torch").sources[0].content == CANDIDATE.read_text()
    assert len(trace_set.traces[name]) == 2 and len(trace_set.workloads[name]) == 2
    for trace in trace_set.traces[name]:
        assert trace.evaluation.status.value == "PASSED", trace.evaluation.log
        assert trace.evaluation.environment.hardware not in ("cpu", "")  # the device's own name
        assert trace_set.get_solution(trace.solution) is not None
        workload = next(w for w in trace_set.workloads[name] if w.workload.uuid == trace.workload.uuid)
        assert workload.workload == trace.workload  # one uuid, one workload, in both files
    assert _check_blobs(out, trace_set) == 2 * 2
    # the traces as bench wrote them keep evoteam's own paths; the export's point into the dataset
    assert load_traces(traces)[0].workload.inputs["kv_indices"].path != trace_set.traces[name][0].workload.inputs[
        "kv_indices"].path
    json.loads((out / "definitions" / mla.definition.op_type / f"{name}.json").read_text())


FP8_DEFINITION = {
    "name": "scale_fp8_n", "op_type": "toy", "description": "y = 2 x, x in float8_e4m3fn",
    "axes": {"n": {"type": "var"}}, "inputs": {"x": {"shape": ["n"], "dtype": "float8_e4m3fn"},
                                                "offsets": {"shape": ["n"], "dtype": "int32"}},
    "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, offsets):\n    return x.float() * 2 + offsets.float()\n",
}
FP8_SOLUTION = {
    "name": "scale_fp8_torch", "definition": "scale_fp8_n", "author": "tests",
    "spec": {"language": "python", "target_hardware": ["cpu"], "entry_point": "main.py::run",
             "destination_passing_style": True},
    "sources": [{"path": "main.py", "content": "import torch\n\n\ndef run(x, offsets, y):\n"
                                               "    y.copy_(x.float() * 2 + offsets.float())\n"}],
}


def test_a_flashinfer_bench_dataset_runs_in_evoteam_with_its_dtypes_blobs_and_solutions(tmp_path):
    """Import: a dataset folder as flashinfer-bench lays it out (a float8_e4m3fn input, an index input
    from a blob, a Python solution) loads in its loader and runs in evoteam's harness; so does an
    exported evoteam task with a solution added."""
    from evoteam.blobs import write_safetensors
    from evoteam.run_dataset import main as run_dataset

    root = tmp_path / "fib"
    (root / "definitions" / "toy").mkdir(parents=True)
    (root / "definitions" / "toy" / "scale_fp8_n.json").write_text(json.dumps(FP8_DEFINITION))
    write_safetensors(root / "blob" / "w1.safetensors", {"offsets": torch.arange(300, dtype=torch.int32)})
    workload = {"axes": {"n": 300}, "uuid": "7f0c1a52-0000-4000-8000-000000000001",
                "inputs": {"x": {"type": "random"},
                           "offsets": {"type": "safetensors", "path": "./blob/w1.safetensors", "tensor_key": "offsets"}}}
    (root / "workloads" / "toy").mkdir(parents=True)
    (root / "workloads" / "toy" / "scale_fp8_n.jsonl").write_text(json.dumps(
        {"definition": "scale_fp8_n", "workload": workload, "solution": None, "evaluation": None}) + "\n")
    (root / "solutions" / "toy").mkdir(parents=True)
    (root / "solutions" / "toy" / "scale_fp8_torch.json").write_text(json.dumps(FP8_SOLUTION))
    wrong = {**FP8_SOLUTION, "name": "scale_fp8_wrong", "sources": [
        {"path": "main.py", "content": "def run(x, offsets, y):\n    y.copy_(x.float() * 2)\n"}]}
    (root / "solutions" / "toy" / "scale_fp8_wrong.json").write_text(json.dumps(wrong))
    assert set(fib_data.TraceSet.from_path(str(root)).definitions) == {"scale_fp8_n"}  # theirs loads it
    mla = load_task("mla_decode")
    assert export_main([str(root), "--task", "mla_decode", "--scale", "small"]) == 0
    solution = {**FP8_SOLUTION, "name": "mla_torch_solution", "definition": mla.definition.name,
                "spec": {**FP8_SOLUTION["spec"], "entry_point": "mla_torch.py::run"},
                "sources": [{"path": "mla_torch.py", "content": CANDIDATE.read_text()}]}
    (root / "solutions" / "mla.json").write_text(json.dumps(solution))
    traces = tmp_path / "traces.jsonl"
    assert run_dataset([str(root), "--hardware", "cpu", "--traces", str(traces), "--warmup", "0", "--reps", "2"]) == 0
    by_solution = {}
    for trace in load_traces(traces):
        by_solution.setdefault(trace.solution, []).append(trace.evaluation.status)
    assert by_solution == {"scale_fp8_torch": ["PASSED"], "scale_fp8_wrong": ["INCORRECT_NUMERICAL"],
                           "mla_torch_solution": ["PASSED"] * 4}
