"""`python -m evoteam.export` writes datasets that flashinfer-bench's own loader reads (version pinned in
the dev extra), with every blob a workload points to and a solution for every traced name."""

import json
import math
import uuid

import pytest
import torch

from evoteam.export import exported_uuid
from evoteam.export import main as export_main
from evoteam.harness.candidate import solution_of_path
from evoteam.harness.model import Status, WorkloadResult
from evoteam.schema import append_traces, load_traces
from evoteam.task import load_task, scaled_uuid
from evoteam.trace_writer import solution_name, solution_name_of_file, to_trace

from conftest import REPO, run_module

fib_data = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench comes with `make test`")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="flashinfer-bench's loader needs safetensors")

CANDIDATE = REPO / "tests" / "data" / "candidates" / "mla_torch.py"
MLA_SEED = REPO / "kernels" / "mla_decode" / "seed_triton.py"
KDA_SEED = REPO / "kernels" / "kda_prefill" / "seed_triton.py"
# pinned: an export's uuid of a workload whose data evoteam made anew for a published uuid
REGENERATED = uuid.uuid5(uuid.NAMESPACE_URL, "evoteam/export/regenerated-workload-data")


def _task_of(definition):
    return next(load_task(n) for n in ("mla_decode", "kda_prefill") if load_task(n).definition.name == definition)


def _ours(task):
    """The task's workloads at every scale, by the uuid an export gives them."""
    return {exported_uuid(task, w): w for scale in ("full", "small") for w in task.scaled_workloads(scale)}


def _check_blobs(root, trace_set):
    """Every safetensors input of every workload exists and holds what the task uses (read by the
    safetensors package, as flashinfer-bench reads it), bit for bit (a NaN fill included)."""
    checked = 0
    for definition, workloads in trace_set.workloads.items():
        task = _task_of(definition)
        ours = _ours(task)
        for trace in workloads:
            want = task.module.blob_tensors(ours[trace.workload.uuid])
            for name, spec in trace.workload.inputs.items():
                if spec.type == "safetensors":
                    got = safetensors_torch.load_file(root / spec.path)[spec.tensor_key]
                    assert got.dtype == want[name].dtype and torch.equal(
                        got.view(torch.uint8), want[name].contiguous().view(torch.uint8)), (trace.workload.uuid, name)
                    checked += 1
    return checked


def _bench_traces(path, task_name, workloads, name, result=None):
    """Traces as bench writes them for a kernel that bench named `name` (trace_writer.to_trace), without running it:
    by default a pass timed 1 ms against a 2 ms baseline."""
    task = load_task(task_name)
    result = result or {"status": Status.PASSED, "detail": "PASSED (3 trials, max rel-norm 1.0e-03)",
                        "baseline": "reference", "timing_mode": "cputime", "baseline_ms": 2.0, "candidate_ms": 1.0,
                        "correctness": {"max_relative_error": 1e-3, "max_absolute_error": 1e-4}, "fib": FIB_PASSED}
    append_traces(path, [to_trace(task.definition.name, w, name, WorkloadResult(uuid=w.uuid, **result), "cpu")
                         for w in workloads])
    return path


# flashinfer-bench's verdict as the checker records it beside evoteam's (check.fib_verdict): a pass
FIB_PASSED = {"status": "PASSED", "elements_failed": 0, "max_absolute_error": 1e-4, "max_relative_error": 1e-3,
              "atol": 1e-2, "rtol": 1e-2}


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


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
    # MLA: kv_indptr, kv_indices; KDA: cu_seqlens, A_log, dt_bias, initial_state
    assert _check_blobs(out, trace_set) == 2 * 51 + 4 * counts[kda.definition.name]
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
    bench = run_module([str(CANDIDATE), "--task", "mla_decode", "--hardware", "cpu", "--scale", "small",
                        "--workloads", *uuids, "--warmup", "0", "--reps", "2", "--traces", str(traces)],
                       module="evoteam.bench", timeout=600)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    out = tmp_path / "dataset"
    missing = run_module([str(out), "--traces", str(traces)], module="evoteam.export", timeout=300)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    # bench names the kernel by its task and content, unique across tasks
    named = solution_name("mla_decode", CANDIDATE.read_text())
    assert {t.solution for t in load_traces(traces)} == {named}
    assert "--solution PATH" in missing.stderr and "=PATH" not in missing.stderr  # a content name: by content alone
    assert not out.exists()  # nothing half-written
    assert export_main([str(out), "--traces", str(traces), "--solution", str(CANDIDATE)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    name = mla.definition.name
    assert [s.name for s in trace_set.solutions[name]] == [named]
    assert trace_set.get_solution(named).sources[0].content == CANDIDATE.read_text()
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


MLA_RETURNS = REPO / "tests" / "data" / "candidates" / "mla_torch_returns.py"
MLA_ZEROS = ("def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
             "    output.zero_()\n    lse.zero_()\n")


def test_a_dataset_flashinfer_bench_writes_round_trips_through_evoteam(tmp_path, capsys):
    """Round trip: flashinfer-bench writes a dataset with its own API (save_json_file; TraceSet's blob and workload
    methods), three solutions of one definition (destination-passing, value-returning, a wrong one); evoteam runs it
    and exports the traces with the folder's solution JSONs as their sources; flashinfer-bench loads the export with
    every solution under its own name and sources, one trace per solution and workload, each of a workload there."""
    from evoteam.run_dataset import main as run_dataset

    # evoteam's definition and small-scale workloads, as flashinfer-bench reads them
    staged = tmp_path / "staged"
    assert export_main([str(staged), "--task", "mla_decode", "--scale", "small"]) == 0
    source = fib_data.TraceSet.from_path(str(staged))
    name = load_task("mla_decode").definition.name
    definition = source.definitions[name]

    # flashinfer-bench writes the dataset: its models, its save functions, its TraceSet methods
    root = tmp_path / "fib"
    theirs = fib_data.TraceSet(root=root, definitions={name: definition})
    fib_data.save_json_file(definition, theirs.definitions_path / definition.op_type / f"{name}.json")
    workloads = []
    for w in (t.workload for t in source.workloads[name][:2]):
        blobs = {n: spec for n, spec in w.inputs.items() if spec.type == "safetensors"}
        assert blobs  # MLA's index tensors
        path = theirs.add_workload_blob_tensor(name, w.uuid, {n: source.get_workload_blob_tensor(spec.path)[
            spec.tensor_key] for n, spec in blobs.items()})
        inputs = {n: fib_data.SafetensorsInput(path=path, tensor_key=n) if n in blobs else spec
                  for n, spec in w.inputs.items()}
        workloads.append(fib_data.Workload(axes=w.axes, inputs=inputs, uuid=w.uuid))
    theirs.add_workload_traces([fib_data.Trace(definition=name, workload=w) for w in workloads])

    def solution(solution_name, path, content, destination_passing_style):
        spec = fib_data.BuildSpec(language="python", target_hardware=["cpu"], entry_point=f"{path}::run",
                                  destination_passing_style=destination_passing_style)
        return fib_data.Solution(name=solution_name, definition=name, author="a flashinfer-bench user", spec=spec,
                                 sources=[fib_data.SourceFile(path=path, content=content)],
                                 description=f"{solution_name}, written by flashinfer-bench")

    solutions = [solution("mla_torch_dps", "mla_torch.py", CANDIDATE.read_text(), True),
                 solution("mla_torch_returns", "mla_torch_returns.py", MLA_RETURNS.read_text(), False),
                 solution("mla_zeros", "main.py", MLA_ZEROS, True)]
    given = []
    for s in solutions:
        path = theirs.solutions_path / definition.op_type / name / f"{s.name}.json"
        fib_data.save_json_file(s, path)
        given += ["--solution", str(path)]
    written = fib_data.TraceSet.from_path(str(root))
    assert len(written.solutions[name]) == 3 and len(written.workloads[name]) == 2

    # evoteam runs it and exports the traces, the solution JSONs given as they are
    traces = tmp_path / "traces.jsonl"
    assert run_dataset([str(root), "--hardware", "cpu", "--traces", str(traces), "--warmup", "0", "--reps", "2"]) == 0
    out = tmp_path / "export"
    capsys.readouterr()
    assert export_main([str(out), "--traces", str(traces), *given[:4]]) == 2  # the wrong one's source not given
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'mla_zeros'" in err and not out.exists(), err
    assert export_main([str(out), "--traces", str(traces), *given]) == 0

    # flashinfer-bench loads the export: nothing lost or renamed
    exported = fib_data.TraceSet.from_path(str(out))
    assert {n: d.model_dump() for n, d in exported.definitions.items()} == {name: definition.model_dump()}
    assert {s.name: s.model_dump() for s in exported.solutions[name]} == {s.name: s.model_dump() for s in solutions}
    assert {s.name: s.spec.destination_passing_style for s in exported.solutions[name]} == {
        "mla_torch_dps": True, "mla_torch_returns": False, "mla_zeros": True}
    ours = {t.workload.uuid: t.workload for t in exported.workloads[name]}
    assert sorted(ours) == sorted(w.uuid for w in workloads)
    for w in workloads:
        assert ours[w.uuid].axes == w.axes and ours[w.uuid].inputs.keys() == w.inputs.keys()
        for n, spec in w.inputs.items():
            got = ours[w.uuid].inputs[n]
            if spec.type != "safetensors":
                assert got.model_dump() == spec.model_dump(), (w.uuid, n)
                continue
            assert got.type == "safetensors"  # in the export's own blob, bit for bit
            want = written.get_workload_blob_tensor(spec.path)[spec.tensor_key]
            have = exported.get_workload_blob_tensor(got.path)[got.tensor_key]
            assert have.dtype == want.dtype and torch.equal(have.view(torch.uint8), want.view(torch.uint8)), (w.uuid, n)
    traced = exported.traces[name]
    assert sorted((t.solution, t.workload.uuid) for t in traced) == sorted(
        (s.name, w.uuid) for s in solutions for w in workloads)
    for t in traced:
        assert t.workload.model_dump() == ours[t.workload.uuid].model_dump()
        assert exported.get_solution(t.solution) is not None
        if t.solution == "mla_zeros":
            assert t.evaluation.status.value == "INCORRECT_NUMERICAL" and t.evaluation.performance is None
        else:
            assert t.evaluation.status.value == "PASSED", t.evaluation.log
            assert t.evaluation.performance.latency_ms > 0 and t.evaluation.performance.reference_latency_ms > 0


def test_the_mla_and_kda_seed_kernels_export_together_as_two_solutions(tmp_path):
    """Both seeds are files named seed_triton.py: bench names each by its task and content, `--solution PATH` gives
    each the traces of its own task, and the dataset loads with two solutions, each with its own source."""
    mla, kda = load_task("mla_decode"), load_task("kda_prefill")
    mla_traces = _bench_traces(tmp_path / "mla.jsonl", "mla_decode", mla.scaled_workloads("small")[:2],
                               solution_name_of_file("mla_decode", MLA_SEED))
    kda_traces = _bench_traces(tmp_path / "kda.jsonl", "kda_prefill", kda.scaled_workloads("small")[:2],
                               solution_name_of_file("kda_prefill", KDA_SEED))
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(mla_traces), "--traces", str(kda_traces),
                        "--solution", str(KDA_SEED), "--solution", str(MLA_SEED)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    names = set()
    for task, seed in ((mla, MLA_SEED), (kda, KDA_SEED)):
        (solution,) = trace_set.solutions[task.definition.name]
        assert solution.sources[0].content == seed.read_text() and solution.definition == task.definition.name
        assert {t.solution for t in trace_set.traces[task.definition.name]} == {solution.name}
        names.add(solution.name)
    assert len(names) == 2


def test_older_traces_naming_a_stem_export_per_task_and_change_nothing_there(tmp_path, capsys):
    """Older bench traces name a kernel by its file's stem: `--solution NAME=PATH` matches them and the solution is
    exported under its content name, so a folder whose `seed_triton` other traces name keeps it as it is. One NAME
    for the traces of two tasks says nothing of which source is whose: refused."""
    mla, kda = load_task("mla_decode"), load_task("kda_prefill")
    mla_old = _bench_traces(tmp_path / "mla.jsonl", "mla_decode", mla.scaled_workloads("small")[:1], "seed_triton")
    kda_old = _bench_traces(tmp_path / "kda.jsonl", "kda_prefill", kda.scaled_workloads("small")[:1], "seed_triton")
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(mla_old), "--traces", str(kda_old),
                        "--solution", f"seed_triton={MLA_SEED}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mla_decode and of kda_prefill" in err and not out.exists()
    # a folder an older export wrote: its seed_triton is the KDA seed
    older = out / "solutions" / kda.definition.op_type / kda.definition.name / "seed_triton.json"
    older.parent.mkdir(parents=True)
    older.write_text(json.dumps(solution_of_path(KDA_SEED, kda.definition.name, name="seed_triton").to_json()))
    assert export_main([str(out), "--traces", str(mla_old), "--solution", f"seed_triton={MLA_SEED}"]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    assert trace_set.get_solution("seed_triton").sources[0].content == KDA_SEED.read_text()  # unchanged
    (trace,) = trace_set.traces[mla.definition.name]
    assert trace.solution == solution_name("mla_decode", MLA_SEED.read_text())
    assert trace_set.get_solution(trace.solution).sources[0].content == MLA_SEED.read_text()


def test_a_different_solution_of_a_name_already_in_the_folder_is_refused_and_nothing_changes(tmp_path, capsys):
    """A solution JSON keeps its own name: a different one of that name is refused (one line, exit 2) before anything
    is written, whether the folder holds it or the same export gives both."""
    mla = load_task("mla_decode")

    def solution_json(kernel):
        path = tmp_path / kernel.stem / "my_mla.json"
        path.parent.mkdir()
        path.write_text(json.dumps(solution_of_path(kernel, mla.definition.name, name="my_mla").to_json()))
        return path

    ours, theirs = solution_json(MLA_SEED), solution_json(CANDIDATE)
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:2], "my_mla")
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(traces), "--solution", str(ours)]) == 0
    before = _files(out)
    capsys.readouterr()
    assert export_main([str(out), "--task", "kda_prefill", "--scale", "small", "--traces", str(traces),
                        "--solution", str(theirs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'my_mla'" in err and "new folder" in err, err
    assert _files(out) == before  # not even the workloads of --task
    assert fib_data.TraceSet.from_path(str(out)).get_solution("my_mla").sources[0].content == MLA_SEED.read_text()
    other = tmp_path / "other"
    assert export_main([str(other), "--traces", str(traces), "--solution", str(ours), "--solution", str(theirs)]) == 2
    assert not other.exists()
    assert export_main([str(out), "--traces", str(traces), "--solution", str(ours)]) == 0 and _files(out) == before


def test_a_nan_output_is_recorded_with_nan_errors(tmp_path):
    """The checker's verdict on a kernel that writes one NaN, as bench's trace records it: errors NaN (strict JSON,
    as flashinfer-bench writes them), not 0.0 (Python's max(0.0, nan) is 0.0); an older trace that lost the NaN is
    exported with it."""
    from evoteam.harness.check import check_kernel
    from evoteam.task import load_task_folder

    toy = load_task_folder(REPO / "tests" / "data" / "toy_task")
    workload = toy.workloads[0]

    def nan_kernel(**kwargs):
        ref = toy.reference({n: kwargs[n] for n in toy.definition.inputs})
        for name in toy.definition.outputs:
            kwargs[name].copy_(ref[name])
        kwargs["out"].view(-1)[0] = float("nan")

    check = check_kernel(toy, workload, nan_kernel, seed=1)
    assert not check.passed and check.failure.check == "nan_inf"
    result = WorkloadResult(uuid=workload.uuid, status=Status.NAN_INF, detail=check.summary(),
                            correctness=check.to_correctness().to_json())
    line = json.dumps(to_trace(toy.definition.name, workload, "toy_nan", result, "cpu").to_json(), allow_nan=False)
    correctness = fib_data.Trace.model_validate_json(line).evaluation.correctness
    assert math.isnan(correctness.max_absolute_error) and math.isnan(correctness.max_relative_error)
    # an older bench trace: nan_inf with errors 0.0
    mla = load_task("mla_decode")
    older = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:1], "seed_triton",
                          {"status": Status.MISMATCH, "detail": "FAILED mismatch", "correctness": {}})
    text = older.read_text().replace('"log":"mismatch:', '"log":"nan_inf:')
    older.write_text(text)
    assert load_traces(older)[0].evaluation.correctness.max_absolute_error == 0.0
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(older), "--solution", f"seed_triton={MLA_SEED}"]) == 0
    (trace,) = fib_data.TraceSet.from_path(str(out)).traces[mla.definition.name]
    assert trace.evaluation.status.value == "INCORRECT_NUMERICAL"
    assert math.isnan(trace.evaluation.correctness.max_absolute_error)
    assert math.isnan(trace.evaluation.correctness.max_relative_error)


def test_kda_inputs_of_evoteam_distributions_are_exported_as_blobs_of_its_values(tmp_path, monkeypatch):
    """A_log, dt_bias and initial_state come from distributions of the task's own (flashinfer-bench's "random" is a
    standard normal): exported as safetensors of one draw from the function the input maker draws them with."""
    kda = load_task("kda_prefill")
    module = kda.module
    out = tmp_path / "dataset"
    assert export_main([str(out), "--task", "kda_prefill", "--scale", "small"]) == 0
    exported = {t.workload.uuid: t.workload for t in fib_data.TraceSet.from_path(str(out)).workloads[kda.definition.name]}
    owns = ("A_log", "dt_bias", "initial_state")
    for w in kda.scaled_workloads("small"):
        inputs = exported[w.uuid].inputs  # evoteam's own uuids: kept
        got = {}
        for name in owns:
            assert inputs[name].type == "safetensors", name
            got[name] = safetensors_torch.load_file(out / inputs[name].path)[inputs[name].tensor_key]
        want = module.state_inputs(w, torch.Generator().manual_seed(module.blob_seed(w)), "cpu")
        for name in owns:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, equal_nan=True)
        assert ((got["A_log"] >= 0) & (got["A_log"] <= math.log(16.0))).all()
        gate = torch.nn.functional.softplus(got["dt_bias"])
        assert ((gate > 0.99e-3) & (gate < 1.01e-1)).all()
        if w.inputs["has_initial_state"].value:
            assert torch.isfinite(got["initial_state"]).all() and abs(got["initial_state"].std().item() - 0.5) < 0.02
        else:
            assert torch.isnan(got["initial_state"]).all()  # the fill a kernel must not read
    # the input maker takes these three from that function
    sentinel = {name: torch.full((1,), float(i)) for i, name in enumerate(owns)}
    monkeypatch.setattr(module, "state_inputs", lambda *args: sentinel)
    made = module.make_inputs(kda.scaled_workloads("small")[0], torch.Generator().manual_seed(0), "cpu")
    assert all(made[name] is sentinel[name] for name in owns)


def test_workloads_with_regenerated_data_have_uuids_of_their_own_in_workloads_and_traces(tmp_path):
    """MLA's published uuids name the published index data; evoteam makes its own: exported under uuid5 of the
    published uuid (pinned namespace), the same in the workloads file and the traces, pointing back at it."""
    mla = load_task("mla_decode")
    published = {w.uuid for w in mla.workloads}
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.workloads[:2],
                           solution_name_of_file("mla_decode", CANDIDATE))
    out = tmp_path / "dataset"
    assert export_main([str(out), "--task", "mla_decode", "--traces", str(traces), "--solution", str(CANDIDATE)]) == 0
    d = mla.definition
    lines = [json.loads(line) for line in (out / "workloads" / d.op_type / f"{d.name}.jsonl").read_text().splitlines()]
    by_origin = {line["workload"]["origin"]: line["workload"]["uuid"] for line in lines}
    assert by_origin == {u: str(uuid.uuid5(REGENERATED, u)) for u in published}
    traced = [json.loads(line)["workload"] for line in (out / "traces" / d.op_type / f"{d.name}.jsonl").open()]
    assert [t["uuid"] for t in traced] == [by_origin[w.uuid] for w in mla.workloads[:2]]
    assert all(t["origin"] in published for t in traced)
    trace_set = fib_data.TraceSet.from_path(str(out))
    workloads = {t.workload.uuid: t.workload for t in trace_set.workloads[d.name]}
    assert not set(workloads) & published
    for trace in trace_set.traces[d.name]:
        assert workloads[trace.workload.uuid] == trace.workload
    assert _check_blobs(out, trace_set) == 2 * 47


def test_check_only_traces_carry_no_performance_and_go_where_flashinfer_bench_does_not_count_them(tmp_path):
    """bench --check-only times nothing (the judge's result has no times): flashinfer-bench requires performance of a
    PASSED evaluation, so the trace's evaluation is null and the check's verdict is in its "check" field. Exported, it
    goes to checks/, which flashinfer-bench does not read: in traces/ it loaded, but summary() counted it failed and
    Trace.is_successful() raised. evoteam reads it back there."""
    mla = load_task("mla_decode")
    name = solution_name_of_file("mla_decode", CANDIDATE)
    checked = {"status": Status.PASSED, "detail": "PASSED (3 trials, max rel-norm 0.0e+00)",
               "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0}, "fib": FIB_PASSED}
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:1], name, checked)
    timed = _bench_traces(tmp_path / "timed.jsonl", "mla_decode", mla.scaled_workloads("small")[1:2], name)
    (line,) = [json.loads(text) for text in traces.read_text().splitlines()]
    assert line["evaluation"] is None and line["check"]["status"] == "PASSED" and line["check"]["performance"] is None
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(traces), "--traces", str(timed), "--solution", str(CANDIDATE)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    summary = trace_set.summary()
    assert (summary["total"], summary["passed"], summary["failed"]) == (1, 1, 0), summary
    assert all(t.is_successful() for t in trace_set.traces[mla.definition.name])
    (ours,) = load_traces(out / "checks" / mla.definition.op_type / f"{mla.definition.name}.jsonl")
    assert ours.solution == name and ours.evaluation is None and ours.check.status == "PASSED"
    assert ours.check.performance is None and trace_set.get_solution(name) is not None


def test_exported_kernel_files_build_in_flashinfer_bench(tmp_path):
    """A kernel file is exported as a solution flashinfer-bench's own builder builds and runs: a dot in its stem
    (its builder imports `a.b.py` as a submodule of a package `a`) is not in the exported file's name; plain PyTorch
    is language python (its dependencies have no Triton), a Triton kernel triton; the packages it imports are its
    dependencies. The same bytes under two file names are one source."""
    from flashinfer_bench.compile import BuilderRegistry

    mla = load_task("mla_decode")
    dotted = tmp_path / "mla.torch.v2.py"
    dotted.write_text(CANDIDATE.read_text())
    twin = tmp_path / "copy" / "mla_torch_copy.py"
    twin.parent.mkdir()
    twin.write_text(CANDIDATE.read_text())
    workloads = mla.scaled_workloads("small")[:1]
    torch_traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", workloads,
                                 solution_name_of_file("mla_decode", dotted))
    triton_traces = _bench_traces(tmp_path / "s.jsonl", "mla_decode", workloads,
                                  solution_name_of_file("mla_decode", MLA_SEED))
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(torch_traces), "--traces", str(triton_traces), "--solution",
                        str(dotted), "--solution", str(twin), "--solution", str(MLA_SEED)]) == 0
    trace_set = fib_data.TraceSet.from_path(str(out))
    solutions = {s.sources[0].content: s for s in trace_set.solutions[mla.definition.name]}
    plain, triton = solutions[CANDIDATE.read_text()], solutions[MLA_SEED.read_text()]
    assert plain.sources[0].path == "mla_torch_v2.py" and plain.spec.entry_point == "mla_torch_v2.py::run"
    assert plain.spec.language.value == "python" and plain.spec.dependencies == ["torch"]
    assert triton.spec.language.value == "triton" and "triton" in triton.spec.dependencies
    # flashinfer-bench builds it and runs it (destination-passing, inputs then outputs in the definition's order)
    definition = trace_set.definitions[mla.definition.name]
    runnable = BuilderRegistry.get_instance().build(definition, plain)
    inputs = mla.make_inputs(workloads[0], torch.Generator().manual_seed(0), "cpu")
    ref = mla.reference(inputs)
    outputs = {n: torch.empty_like(t) for n, t in ref.items()}
    runnable(*inputs.values(), *outputs.values())
    torch.testing.assert_close(outputs["output"].float(), ref["output"].float(), atol=1e-2, rtol=1e-2)


def test_a_name_that_is_a_path_is_refused_and_nothing_is_written_outside_the_folder(tmp_path, capsys):
    """A Solution's name is any string, from JSON anyone writes: one that is a path (`../`) would put its file outside
    the dataset folder, over what is there. Refused in one line before anything is written; so is a folder whose
    solutions/ is a link that leads out of it."""
    mla = load_task("mla_decode")
    victim = tmp_path / "victim.json"
    victim.write_text("not yours")
    name = "../../../../victim"  # solutions/<op_type>/<definition>/<name>.json: tmp_path/victim.json
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(solution_of_path(CANDIDATE, mla.definition.name, name=name).to_json()))
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:1], name)
    out = tmp_path / "dataset"
    capsys.readouterr()
    assert export_main([str(out), "--traces", str(traces), "--solution", str(evil)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot name a file" in err and "path separator" in err, err
    assert victim.read_text() == "not yours" and not out.exists()
    # a link in the folder that leads out of it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "solutions").symlink_to(elsewhere)
    honest = _bench_traces(tmp_path / "h.jsonl", "mla_decode", mla.scaled_workloads("small")[:1],
                           solution_name_of_file("mla_decode", CANDIDATE))
    assert export_main([str(out), "--traces", str(honest), "--solution", str(CANDIDATE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leads out of" in err, err
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == ["solutions"]


def test_the_folders_definitions_are_read_as_flashinfer_bench_reads_them(tmp_path, capsys):
    """flashinfer-bench reads definitions/ at any depth and refuses a name defined twice: the same definition saved
    under another path is not written again (the folder still loads), and another definition of the name is
    refused before anything is written (its traces would be read against a definition they were not judged by)."""
    mla = load_task("mla_decode")
    staged = tmp_path / "staged"
    assert export_main([str(staged), "--task", "mla_decode", "--scale", "small"]) == 0
    definition = fib_data.TraceSet.from_path(str(staged)).definitions[mla.definition.name]
    root = tmp_path / "fib"
    fib_data.save_json_file(definition, root / "definitions" / "mine" / "mla.json")  # not evoteam's path
    assert export_main([str(root), "--task", "mla_decode", "--scale", "small"]) == 0
    trace_set = fib_data.TraceSet.from_path(str(root))
    assert list(trace_set.definitions) == [mla.definition.name] and len(trace_set.workloads[mla.definition.name]) == 4
    assert not (root / "definitions" / mla.definition.op_type).exists()
    # another definition of the name: its reference doubles the output
    other = root.parent / "other"
    changed = definition.model_copy(update={"reference": definition.reference + "\n# another definition\n"})
    fib_data.save_json_file(changed, other / "definitions" / "theirs.json")
    before = _files(other)
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:1],
                           solution_name_of_file("mla_decode", CANDIDATE))
    capsys.readouterr()
    assert export_main([str(other), "--traces", str(traces), "--solution", str(CANDIDATE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another definition named" in err and "theirs.json" in err, err
    assert _files(other) == before


def test_a_content_name_is_credited_only_to_the_file_of_that_content(tmp_path, capsys):
    """bench names a kernel file by its content's hash: traces of that name are the measurements of that content. Given
    another file for the name (a kernel that writes zeros, or the kernel edited since), `--solution NAME=PATH` is
    refused in one line, and the refusal for a missing source never suggests that form for a content name."""
    mla = load_task("mla_decode")
    named = solution_name_of_file("mla_decode", CANDIDATE)
    traces = _bench_traces(tmp_path / "t.jsonl", "mla_decode", mla.scaled_workloads("small")[:2], named)
    zeros = tmp_path / "mla_torch.py"
    zeros.write_text(MLA_ZEROS)
    out = tmp_path / "dataset"
    capsys.readouterr()
    assert export_main([str(out), "--traces", str(traces), "--solution", f"{named}={zeros}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "unchanged" in err and not out.exists(), err
    # the file edited since, given as PATH: not the source of the name, and the refusal says what is
    edited = tmp_path / "edited" / CANDIDATE.name
    edited.parent.mkdir()
    edited.write_text(CANDIDATE.read_text() + "\n# edited\n")
    assert export_main([str(out), "--traces", str(traces), "--solution", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--solution PATH" in err and f"{named}=PATH" not in err and not out.exists(), err
    # the file itself, either way
    assert export_main([str(out), "--traces", str(traces), "--solution", f"{named}={CANDIDATE}"]) == 0
    (solution,) = fib_data.TraceSet.from_path(str(out)).solutions[mla.definition.name]
    assert solution.name == named and solution.sources[0].content == CANDIDATE.read_text()


# KDA: the reference's own math, then one element of final_state moved 0.02 (the one nearest zero): within evoteam's
# atol 3e-2 for final_state (fla's own kernel needs it), past flashinfer-bench's atol = rtol = 1e-2
KDA_OFF_BY_002 = """

def planted(output, final_state, **inputs):
    out, state = run(**inputs)
    output.copy_(out)
    final_state.copy_(state)
    flat = final_state.view(-1)
    flat[int(flat.abs().argmin())] += 0.02
"""


def test_a_pass_flashinfer_bench_would_not_give_is_exported_as_its_verdict(tmp_path, capsys):
    """bench judges by evoteam's rule and records flashinfer-bench's verdict on the same outputs beside it; the export
    gives flashinfer-bench's verdict (INCORRECT_NUMERICAL, no time) where the two differ, and refuses a PASSED trace
    that records no verdict of flashinfer-bench's; `bench --fib-rule` judges by its rule outright."""
    kda = load_task("kda_prefill")
    kernel = tmp_path / "kda_off.py"
    kernel.write_text(kda.definition.reference + KDA_OFF_BY_002)
    workload = kda.scaled_workloads("small")[0]
    traces = {}
    for rule, flags in (("evoteam", []), ("flashinfer-bench", ["--fib-rule"])):
        traces[rule] = tmp_path / f"{rule}.jsonl"
        bench = run_module([str(kernel), "--entry", "planted", "--task", "kda_prefill", "--hardware", "cpu",
                            "--scale", "small", "--workloads", workload.uuid[:8], "--warmup", "0", "--reps", "2",
                            "--traces", str(traces[rule]), *flags], module="evoteam.bench", timeout=600)
        assert bench.returncode == (0 if rule == "evoteam" else 1), bench.stdout[-2000:] + bench.stderr[-2000:]
    (own,), (fib,) = load_traces(traces["evoteam"]), load_traces(traces["flashinfer-bench"])
    assert own.evaluation.status == "PASSED" and fib.evaluation.status == "INCORRECT_NUMERICAL", fib.evaluation.log
    verdict = own.evaluation.correctness.extra["flashinfer-bench"]
    assert verdict["status"] == "INCORRECT_NUMERICAL" and verdict["elements_failed"] >= 1, verdict
    assert 0.019 < verdict["max_absolute_error"] < 0.021 and "flashinfer-bench's rule: INCORRECT_NUMERICAL" in \
        own.evaluation.log
    assert fib.evaluation.correctness.extra["flashinfer-bench"]["status"] == "INCORRECT_NUMERICAL"
    out = tmp_path / "dataset"
    assert export_main([str(out), "--traces", str(traces["evoteam"]), "--solution", str(kernel)]) == 0
    (exported,) = fib_data.TraceSet.from_path(str(out)).traces[kda.definition.name]
    assert exported.evaluation.status.value == "INCORRECT_NUMERICAL" and exported.evaluation.performance is None
    assert 0.019 < exported.evaluation.correctness.max_absolute_error < 0.021
    assert "exported with flashinfer-bench's verdict" in exported.evaluation.log
    # a PASSED trace of an older evoteam: no record of flashinfer-bench's verdict
    older = tmp_path / "older.jsonl"
    line = json.loads(traces["evoteam"].read_text())
    del line["evaluation"]["correctness"]["extra"]["flashinfer-bench"]
    older.write_text(json.dumps(line) + "\n")
    capsys.readouterr()
    assert export_main([str(tmp_path / "other"), "--traces", str(older), "--solution", str(kernel)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no record of flashinfer-bench's verdict" in err, err
    assert not (tmp_path / "other").exists()
    # a record not written by evoteam (a verdict without its errors): one line too, not a traceback
    line = json.loads(traces["evoteam"].read_text())
    line["evaluation"]["correctness"]["extra"]["flashinfer-bench"] = {"status": "INCORRECT_NUMERICAL"}
    older.write_text(json.dumps(line) + "\n")
    assert export_main([str(tmp_path / "other"), "--traces", str(older), "--solution", str(kernel)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no errors" in err and not (tmp_path / "other").exists(), err


def _solution_json(path, name, definition, kernel_source, file="main.py"):
    spec = {"language": "python", "target_hardware": ["cpu"], "entry_point": f"{file}::run",
            "destination_passing_style": True}
    path.write_text(json.dumps({"name": name, "definition": definition, "author": "tests", "spec": spec,
                                "sources": [{"path": file, "content": kernel_source}]}))
    return path


def test_the_round_trip_works_for_a_full_scale_export_and_a_datasets_own_workloads(tmp_path, capsys):
    """run_dataset -> export: the traces of evoteam's own full-scale MLA export (its workloads under uuids of their
    own) export as they are; so do the traces of a dataset flashinfer-bench wrote with workloads of its own and a
    definition evoteam does not have, taken with their blobs from `--dataset`, the folder they were run on. Without
    it, one line says to give it."""
    from evoteam import dataset
    from evoteam.blobs import write_safetensors
    from evoteam.run_dataset import main as run_dataset

    mla = load_task("mla_decode")
    name = mla.definition.name
    # 1. evoteam's full-scale export: its traces (as run_dataset writes them) name the export's uuids
    full = tmp_path / "full"
    assert export_main([str(full), "--task", "mla_decode"]) == 0
    held = load_task(dataset.task_name(full, name)).workloads[:2]
    assert all(w.uuid not in {u.uuid for u in mla.workloads} for w in held)
    traces = _bench_traces(tmp_path / "full.jsonl", "mla_decode", held, "mla_torch_solution")
    solution = _solution_json(tmp_path / "mla.json", "mla_torch_solution", name, CANDIDATE.read_text(), "mla_torch.py")
    for out, given in ((tmp_path / "from_full", []), (tmp_path / "from_full_dataset", ["--dataset", str(full)])):
        assert export_main([str(out), "--traces", str(traces), "--solution", str(solution), *given]) == 0
        trace_set = fib_data.TraceSet.from_path(str(out))
        assert sorted(t.workload.uuid for t in trace_set.traces[name]) == sorted(w.uuid for w in held)
        assert _check_blobs(out, trace_set) == 2 * 2  # the index tensors evoteam makes, bit for bit
    # 2. a dataset of its own: workloads flashinfer-bench wrote, a definition evoteam lacks, both run by run_dataset
    root = tmp_path / "fib"
    (root / "definitions").mkdir(parents=True)
    (root / "definitions" / "scale_fp8_n.json").write_text(json.dumps(FP8_DEFINITION))
    write_safetensors(root / "blob" / "w1.safetensors", {"offsets": torch.arange(300, dtype=torch.int32)})
    (root / "workloads").mkdir()
    (root / "workloads" / "scale_fp8_n.jsonl").write_text(json.dumps(
        {"definition": "scale_fp8_n", "solution": None, "evaluation": None,
         "workload": {"axes": {"n": 300}, "uuid": "7f0c1a52-0000-4000-8000-000000000001",
                      "inputs": {"x": {"type": "random"}, "offsets": {"type": "safetensors", "path": "./blob/w1.safetensors",
                                                                      "tensor_key": "offsets"}}}}) + "\n")
    small = tmp_path / "small"
    assert export_main([str(small), "--task", "mla_decode", "--scale", "small"]) == 0
    source = fib_data.TraceSet.from_path(str(small))
    theirs = fib_data.TraceSet(root=root, definitions={name: source.definitions[name]})
    fib_data.save_json_file(source.definitions[name], root / "definitions" / "mla.json")
    w = source.workloads[name][0].workload
    own_uuid = "0b5e2c3a-1111-4222-8333-944455556666"  # the dataset's own workload
    blobs = {n: spec for n, spec in w.inputs.items() if spec.type == "safetensors"}
    path = theirs.add_workload_blob_tensor(name, own_uuid, {n: source.get_workload_blob_tensor(spec.path)[
        spec.tensor_key] for n, spec in blobs.items()})
    inputs = {n: fib_data.SafetensorsInput(path=path, tensor_key=n) if n in blobs else spec for n, spec in w.inputs.items()}
    theirs.add_workload_traces([fib_data.Trace(definition=name, workload=fib_data.Workload(axes=w.axes, inputs=inputs,
                                                                                          uuid=own_uuid))])
    solutions = [_solution_json(tmp_path / "fp8.json", "scale_fp8_torch", "scale_fp8_n",
                                FP8_SOLUTION["sources"][0]["content"]), solution]
    for s in solutions:
        (root / "solutions").mkdir(exist_ok=True)
        (root / "solutions" / s.name).write_text(s.read_text())
    run = tmp_path / "run.jsonl"
    assert run_dataset([str(root), "--hardware", "cpu", "--traces", str(run), "--warmup", "0", "--reps", "2"]) == 0
    given = [arg for s in solutions for arg in ("--solution", str(s))]
    out = tmp_path / "export"
    capsys.readouterr()
    assert export_main([str(out), "--traces", str(run), *given]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dataset DIR" in err and not out.exists(), err
    assert export_main([str(out), "--traces", str(run), *given, "--dataset", str(root)]) == 0
    exported, written = fib_data.TraceSet.from_path(str(out)), fib_data.TraceSet.from_path(str(root))
    assert set(exported.definitions) == {name, "scale_fp8_n"}
    for definition in (name, "scale_fp8_n"):
        (mine,) = exported.workloads[definition]
        (there,) = written.workloads[definition]
        assert mine.workload.uuid == there.workload.uuid and mine.workload.axes == there.workload.axes
        for n, spec in there.workload.inputs.items():
            if spec.type == "safetensors":  # in the export's own blob, bit for bit
                want = written.get_workload_blob_tensor(spec.path)[spec.tensor_key]
                got = exported.get_workload_blob_tensor(mine.workload.inputs[n].path)[mine.workload.inputs[n].tensor_key]
                assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (definition, n)
        (trace,) = exported.traces[definition]
        assert trace.evaluation.status.value == "PASSED" and trace.workload == mine.workload, trace.evaluation.log
    # into the folder it ran on: its own workloads stay where they are, the traces are added
    assert export_main([str(root), "--traces", str(run), *given]) == 0
    again = fib_data.TraceSet.from_path(str(root))
    assert {d: len(t) for d, t in again.traces.items()} == {name: 1, "scale_fp8_n": 1}
    assert {d: len(w) for d, w in again.workloads.items()} == {name: 1, "scale_fp8_n": 1}
