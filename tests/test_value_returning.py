"""Value-returning solutions (`destination_passing_style: false`), as flashinfer-bench runs them: called with the
inputs alone, what they return (a tensor, a tuple or list in the definition's order) copied by the runner into the
judge's output buffers within the call, then checked and timed as any candidate; what flashinfer-bench does not take
(a dict, a wrong count) fails as it fails there. The pass rule (evoteam's or flashinfer-bench's, `fib_rule`) is
recorded in every result and trace."""

import json

import pytest
import torch

from evoteam.harness.candidate import Candidate
from evoteam.harness.executor import evaluate
from evoteam.harness.model import EvalRequest, Status
from evoteam.harness.runner import WrongOutputs, deliver
from evoteam.task import load_task
from evoteam.trace_writer import to_trace

from conftest import REPO, write_solution

CANDIDATES = REPO / "tests" / "data" / "candidates"
SOURCE = (CANDIDATES / "mla_torch_returns.py").read_text()
RETURN = "    return output, lse\n"
TASK = load_task("mla_decode")
SEED = 20261204  # both twins see the same inputs


@pytest.fixture(scope="module")
def uuids():
    return [w.uuid for w in TASK.scaled_workloads("small")]  # batch 1, 1, 16, 16


def _solution(tmp_path, name: str, returns: str = RETURN) -> str:
    return write_solution(tmp_path, name, TASK.definition.name, {"main.py": SOURCE.replace(RETURN, returns)},
                          language="python", target_hardware=("cpu",), entry_point="main.py::run",
                          destination_passing_style=False)


def _request(solution: str, uuids, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=solution, workloads=list(uuids), scale="small",
                       warmup=0, reps=2, seed=SEED, **kw)


def test_a_value_returning_solution_is_called_with_its_inputs_alone(tmp_path):
    cand = Candidate.from_path(_solution(tmp_path, "returns"))
    assert (cand.keywords, cand.returns) == (False, True)
    assert cand.load_message("/candidate")["returns"] is True
    assert not Candidate.from_path(CANDIDATES / "mla_torch.py").returns  # evoteam's own form writes its outputs


def test_it_passes_and_is_timed_with_the_figures_of_its_destination_passing_twin(tmp_path, uuids):
    picked = [uuids[0], uuids[2]]
    returning = evaluate(_request(_solution(tmp_path, "returns"), picked), timeout_s=300)
    twin = evaluate(_request(str(CANDIDATES / "mla_torch.py"), picked), timeout_s=300)
    assert [r.status for r in returning.results] == [Status.PASSED] * 2, returning.log_tail[-3000:]
    assert [r.status for r in twin.results] == [Status.PASSED] * 2, twin.log_tail[-3000:]
    for mine, theirs in zip(returning.results, twin.results):
        assert mine.correctness == theirs.correctness  # the same inputs, outputs and errors, element for element
        assert mine.candidate_ms > 0 and mine.calls_timed > 0 and mine.calls_checked > 3
        assert mine.rule["rule"] == "evoteam" and set(mine.rule["tolerances"]) == {"output", "lse"}


@pytest.mark.parametrize("returns, status, words", [
    ("    return {'lse': lse, 'output': output}\n", Status.EXCEPTION, "returned a dict"),  # RUNTIME_ERROR there
    ("    return [output, lse]\n", Status.PASSED, ""),
    ("    return output[:, :, :-1], lse\n", Status.OUTPUT_REPLACED, "shape"),
    ("    return output\n", Status.EXCEPTION, "2 outputs"),
    ("    return output, lse, lse\n", Status.EXCEPTION, "3 values for 2 outputs"),
    ("    return output.float(), lse\n", Status.OUTPUT_DTYPE, "dtype"),
    ("    return {'output': output}\n", Status.EXCEPTION, "returned a dict"),
    ("    output[0, 0, 0] = float('nan')\n    return output, lse\n", Status.NAN_INF, "output[0, 0, 0] = nan"),
])
def test_what_it_returns_is_judged_as_a_destination_passing_solutions_outputs(tmp_path, uuids, returns, status,
                                                                              words):
    (r,) = evaluate(_request(_solution(tmp_path, "variant", returns), uuids[:1], check_only=True),
                    timeout_s=120).results
    assert r.status == status and words in r.detail, r.detail


def test_the_copy_refuses_what_copy_would_broadcast_or_convert():
    outputs = {"output": torch.zeros(2, 3), "lse": torch.zeros(2)}
    deliver((torch.ones(2, 3), torch.full((2,), 2.0)), outputs)
    assert outputs["output"].sum() == 6 and outputs["lse"].sum() == 4
    for value, status in (((torch.ones(1, 3), torch.ones(2)), "output_replaced"),
                          ((torch.ones(2, 3), torch.ones(2, dtype=torch.float64)), "output_dtype"),
                          ((torch.ones(2, 3), "lse"), "exception"), (torch.ones(2, 3), "exception"),
                          ({"output": torch.ones(2, 3), "lse": torch.ones(2)}, "exception")):
        with pytest.raises(WrongOutputs) as raised:
            deliver(value, outputs)
        assert raised.value.status == status, value
    scalar = {"total": torch.zeros(())}
    deliver(3.5, scalar)  # a Python scalar for a 0-d output, as flashinfer-bench takes it
    assert scalar["total"].item() == 3.5


def test_fib_rule_is_requested_recorded_and_written_to_the_trace(tmp_path, uuids):
    fib_data = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench comes with `make test`")
    path = _solution(tmp_path, "returns")
    (fib,) = evaluate(_request(path, uuids[:1], fib_rule=True), timeout_s=120).results
    assert fib.status == Status.PASSED and fib.rule == {"rule": "flashinfer-bench", "atol": 1e-2, "rtol": 1e-2}
    (own,) = evaluate(_request(path, uuids[:1]), timeout_s=120).results
    workload = {w.uuid: w for w in TASK.scaled_workloads("small")}[uuids[0]]
    for result, rule in ((fib, "flashinfer-bench"), (own, "evoteam")):
        trace = to_trace(TASK.definition.name, workload, "returns", result, "cpu").to_json()
        theirs = fib_data.Trace.model_validate(json.loads(json.dumps(trace)))  # their loader takes it
        assert theirs.evaluation.correctness.extra["rule"] == rule and f"rule {rule}" in theirs.evaluation.log
    assert theirs.evaluation.correctness.extra["tolerances"]["lse"] == {"atol": 1e-2, "rtol": 1e-2,
                                                                        "max_rel_norm": 1e-2}
    # a trace without a correctness record (a runtime error) still names its rule
    (failed,) = evaluate(_request(_solution(tmp_path, "raises", "    raise ValueError('planted')\n"), uuids[:1],
                                  check_only=True, fib_rule=True), timeout_s=120).results
    trace = to_trace(TASK.definition.name, workload, "raises", failed, "cpu").to_json()
    assert trace["evaluation"]["status"] == "RUNTIME_ERROR" and "rule flashinfer-bench" in trace["evaluation"]["log"]


def test_run_dataset_takes_fib_rule():
    from evoteam.run_dataset import parse_args

    assert parse_args(["ds", "--fib-rule"]).fib_rule and not parse_args(["ds"]).fib_rule


WRAPPER = """import torch
from seed_triton import run as seed


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    output = torch.empty(*q_nope.shape[:2], ckv_cache.shape[-1], dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(q_nope.shape[:2], dtype=torch.float32, device=q_nope.device)
    seed(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse)
    return output, lse
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_the_copy_is_captured_with_the_call(tmp_path):
    """Graph mode: the seed kernel wrapped to allocate and return its outputs is captured whole (its allocation,
    the kernel, the runner's copy into the judge's buffers) and passes, timed in graph mode and by events."""
    from evoteam import hardware

    target = hardware.resolve("auto")
    path = write_solution(tmp_path, "seed_returns", TASK.definition.name,
                          {"main.py": WRAPPER,
                           "seed_triton.py": (REPO / "kernels" / "mla_decode" / "seed_triton.py").read_text()},
                          language="triton", target_hardware=(target.name,), entry_point="main.py::run",
                          destination_passing_style=False)
    workloads = sorted(TASK.workloads, key=lambda w: w.axes["batch_size"])
    result = evaluate(EvalRequest(task="mla_decode", hardware=target.name, solution=path,
                                  workloads=[workloads[0].uuid, workloads[-1].uuid], warmup=1, reps=3), timeout_s=900)
    for r in result.results:
        assert r.status == Status.PASSED, r.detail
        assert r.timing_mode == "graph" and r.second.get("mode") == "events", r.timing_mode


SCALE_DEFINITION = {
    "name": "scale_n", "op_type": "toy", "description": "y = 2 x",
    "axes": {"n": {"type": "var"}}, "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
    "reference": "def run(x):\n    return x * 2\n",
}
# value-returning, 0.5% off everywhere: within flashinfer-bench's rtol 1e-2, past evoteam's relative-norm bound
SCALE_SOLUTION = {
    "name": "scale_returns", "definition": "scale_n", "author": "tests",
    "spec": {"language": "python", "target_hardware": ["cpu"], "entry_point": "main.py::run",
             "destination_passing_style": False},
    "sources": [{"path": "main.py", "content": "def run(x):\n    return x * 2.01\n"}],
}


def test_run_dataset_runs_a_value_returning_solution_by_either_rule(tmp_path):
    from evoteam.run_dataset import main as run_dataset
    from evoteam.schema import load_traces

    root = tmp_path / "fib"
    for folder, name, text in (("definitions", "scale_n.json", json.dumps(SCALE_DEFINITION)),
                               ("solutions", "scale_returns.json", json.dumps(SCALE_SOLUTION)),
                               ("workloads", "scale_n.jsonl", json.dumps(
                                   {"definition": "scale_n", "solution": None, "evaluation": None,
                                    "workload": {"axes": {"n": 4096}, "uuid": "7f0c1a52-0000-4000-8000-0000000000aa",
                                                 "inputs": {"x": {"type": "random"}}}}) + "\n")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_text(text)
    traces = {}
    for rule, flags in (("evoteam", []), ("flashinfer-bench", ["--fib-rule"])):
        traces[rule] = tmp_path / f"{rule}.jsonl"
        run_dataset([str(root), "--hardware", "cpu", "--traces", str(traces[rule]), "--warmup", "0", "--reps", "2",
                     *flags])
    (own,), (fib,) = load_traces(traces["evoteam"]), load_traces(traces["flashinfer-bench"])
    assert own.evaluation.status == "INCORRECT_NUMERICAL" and fib.evaluation.status == "PASSED", fib.evaluation.log
    assert own.evaluation.correctness.extra["rule"] == "evoteam"
    # a dataset's task takes flashinfer-bench's element-wise bounds; evoteam's rule adds the relative-norm bound
    assert own.evaluation.correctness.extra["tolerances"] == {"y": {"atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-4}}
    assert "rel_norm" in own.evaluation.log and "rule evoteam" in own.evaluation.log
    assert fib.evaluation.correctness.extra["rule"] == "flashinfer-bench"


def test_a_solution_imports_its_own_modules_past_the_static_scan(tmp_path):
    """A multi-file solution imports its sibling files (the runner puts its folder first on sys.path): the static
    scan reads them as the solution's own modules, not as foreign imports (the GPU test above, a wrapper importing
    the seed kernel's file, was rejected so on the H100, 2026-12-06). A sibling named after a blocked module stays
    rejected."""
    main = "from mla_torch import run as kernel\n\n\ndef run(*args):\n    kernel(*args)\n"
    own = {"main.py": main, "mla_torch.py": (REPO / "tests" / "data" / "candidates" / "mla_torch.py").read_text()}
    path = write_solution(tmp_path, "siblings", TASK.definition.name, own, language="python",
                          target_hardware=("cpu",), entry_point="main.py::run")
    uuid = TASK.scaled_workloads("small")[0].uuid
    (result,) = evaluate(_request(path, [uuid], check_only=True), timeout_s=120).results
    assert result.status == Status.PASSED, result.detail
    assert Candidate.from_path(path).own_modules() == ("main", "mla_torch")
    (tmp_path / "sneaky").mkdir()
    sneaky = write_solution(tmp_path / "sneaky", "sneaky", TASK.definition.name,
                            {"main.py": "from subprocess import run as kernel\n\n\ndef run(*args):\n    kernel(*args)\n",
                             "subprocess.py": "def run(*args):\n    pass\n"},
                            language="python", target_hardware=("cpu",), entry_point="main.py::run")
    (refused,) = evaluate(_request(sneaky, [uuid], check_only=True), timeout_s=120).results
    assert refused.status == Status.REJECTED, refused.detail


TWO_OUTPUTS = {
    "name": "two_outputs", "op_type": "toy", "description": "y = 2 x in bfloat16, z = x + 1",
    "axes": {"n": {"type": "var"}}, "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["n"], "dtype": "bfloat16"}, "z": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x):\n    return (x * 2).bfloat16(), x + 1\n",
}
RETURNS = {  # what a value-returning solution returns
    "tuple": "(x * 2).bfloat16(), x + 1",
    "list": "[(x * 2).bfloat16(), x + 1]",
    "dict": "{'y': (x * 2).bfloat16(), 'z': x + 1}",
    "float32_for_bfloat16": "x * 2, x + 1",
    "one_for_two": "(x * 2).bfloat16()",
    "three_for_two": "(x * 2).bfloat16(), x + 1, x",
    "short": "(x * 2).bfloat16()[:-1], x + 1",
    "a_string": "(x * 2).bfloat16(), 'z'",
}


def test_fib_rule_verdicts_are_flashinfer_benchs_status_for_status(tmp_path, monkeypatch):
    """What a value-returning solution returns is judged as flashinfer-bench 0.1.2's own checker judges it
    (DefaultEvaluator.check_correctness, called here on the same solution, built by its own builder): a dict is its
    RUNTIME_ERROR, a float32 output where the definition says bfloat16 its INCORRECT_DTYPE, status for status."""
    fib_data = pytest.importorskip("flashinfer_bench.data", reason="flashinfer-bench comes with `make test`")
    from flashinfer_bench.bench.config import BenchmarkConfig
    from flashinfer_bench.bench.evaluators.default import DefaultEvaluator
    from flashinfer_bench.compile import BuilderRegistry

    from evoteam import dataset

    root = tmp_path / "fib"
    (root / "definitions").mkdir(parents=True)
    (root / "definitions" / "two_outputs.json").write_text(json.dumps(TWO_OUTPUTS))
    (root / "workloads").mkdir()
    (root / "workloads" / "two_outputs.jsonl").write_text(json.dumps(
        {"definition": "two_outputs", "solution": None, "evaluation": None,
         "workload": {"axes": {"n": 1000}, "uuid": "7f0c1a52-0000-4000-8000-0000000000bb",
                      "inputs": {"x": {"type": "random"}}}}) + "\n")
    task = dataset.task_name(root, "two_outputs")
    definition = fib_data.Definition.model_validate(TWO_OUTPUTS)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    reference = [[(x * 2).bfloat16(), x + 1]]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)  # its checker syncs a GPU; a CPU here
    theirs, ours = {}, {}
    for case, value in RETURNS.items():
        path = write_solution(tmp_path, case, "two_outputs", {"main.py": f"import torch\n\n\ndef run(x):\n"
                                                                          f"    return {value}\n"},
                              language="python", target_hardware=("cpu",), entry_point="main.py::run",
                              destination_passing_style=False)
        solution = fib_data.Solution.model_validate_json(open(path).read())
        runnable = BuilderRegistry.get_instance().build(definition, solution)
        _, evaluation = DefaultEvaluator.check_correctness(definition, runnable, [[x]], reference, BenchmarkConfig(),
                                                           log_path=str(tmp_path / "log"), device="cpu")
        theirs[case] = "PASSED" if evaluation is None else evaluation.status.value
        request = EvalRequest(task=task, hardware="cpu", solution=path, scale="full", warmup=0, reps=2, seed=SEED,
                              check_only=True, fib_rule=True)
        (result,) = evaluate(request, timeout_s=120).results
        ours[case] = to_trace("two_outputs", dataset.load_parts(task)["workloads"][0], case, result,
                              "cpu").to_json()["check" if result.status == Status.PASSED else "evaluation"]["status"]
    assert theirs["dict"] == "RUNTIME_ERROR" and theirs["float32_for_bfloat16"] == "INCORRECT_DTYPE"
    assert ours == theirs
