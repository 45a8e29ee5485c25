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
