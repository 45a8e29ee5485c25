"""Solutions in other languages than Python: a FlashInfer-Trace Solution with C++ sources (torch
binding) is compiled inside the sandboxed evaluation with the machine's compiler, checked and timed
like any candidate; a compile failure is a compile error with the compiler's words, a fault at run time
a runtime error; the build is cached by the sources' hash. (CUDA takes the same path with nvcc; it
needs a GPU to run.)"""

import json
import shutil
import time

import pytest

from evoteam.harness.executor import evaluate
from evoteam.harness.model import EvalRequest, Status
from evoteam.schema import BuildSpec, Solution, SourceFile
from evoteam.task import load_task
from evoteam.trace_writer import TRACE_STATUS

from conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="needs a C++ compiler (Debian's g++)")

SOURCE = (REPO / "tests" / "data" / "candidates" / "mla_ext.cpp").read_text()
TASK = load_task("mla_decode")


def _solution(tmp_path, name: str, planted: str = "") -> str:
    source = SOURCE.replace("  // PLANTED\n", planted)
    solution = Solution(name=name, definition=TASK.definition.name, author="tests",
                        spec=BuildSpec(language="cpp", target_hardware=("cpu",), entry_point="kernel.cpp::run",
                                       binding="torch"),
                        sources=(SourceFile(path="kernel.cpp", content=source),))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(solution.to_json()))
    return str(path)


def _request(solution: str, uuids, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=solution, workloads=list(uuids), scale="small",
                       warmup=0, reps=2, **kw)


@pytest.fixture(scope="module")
def uuids():
    return [w.uuid for w in TASK.scaled_workloads("small")]


def test_a_cpp_solution_compiles_in_the_sandbox_passes_and_is_timed(tmp_path, uuids, monkeypatch):
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "cache"))
    path = _solution(tmp_path, "mla_cpp")
    started = time.monotonic()
    first = evaluate(_request(path, uuids[:1] + uuids[2:3]), timeout_s=900)
    first_s = time.monotonic() - started
    assert [r.status for r in first.results] == [Status.PASSED, Status.PASSED], first.log_tail[-3000:]
    assert all(r.speedup and r.calls_checked > 3 for r in first.results)
    assert first.sandbox.get("tool") == "bubblewrap"  # built and run in the same sandbox as Python candidates
    built = list((tmp_path / "cache").rglob("*.so"))
    assert len(built) == 1, built  # compiled into the cache of these exact sources
    started = time.monotonic()
    again = evaluate(_request(path, uuids[:1]), timeout_s=900)
    assert again.results[0].status == Status.PASSED
    assert time.monotonic() - started < first_s / 2  # loaded from the cache, not compiled again
    assert list((tmp_path / "cache").rglob("*.so")) == built


def test_a_compile_error_and_a_runtime_fault_are_recorded_as_such(tmp_path, uuids, monkeypatch):
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "cache"))
    broken = evaluate(_request(_solution(tmp_path, "broken", "  int x = ;\n"), uuids[:2]), timeout_s=900)
    assert [r.status for r in broken.results] == [Status.COMPILE_ERROR] * 2
    detail = broken.results[0].detail
    assert "kernel.cpp" in detail and "error" in detail, detail  # the compiler's own message
    assert TRACE_STATUS[broken.results[0].status] == "COMPILE_ERROR"
    faulty = evaluate(_request(_solution(tmp_path, "faulty", '  TORCH_CHECK(false, "planted fault");\n'), uuids[:1]),
                      timeout_s=900)
    (r,) = faulty.results
    assert r.status == Status.EXCEPTION and "planted fault" in r.detail, r.detail
    assert TRACE_STATUS[r.status] == "RUNTIME_ERROR"


def test_a_solution_the_runner_cannot_build_says_why_in_one_line(tmp_path, uuids):
    path = tmp_path / "tvm.json"
    solution = json.loads(open(_solution(tmp_path, "tvm")).read())
    del solution["spec"]["binding"]  # flashinfer-bench's default binding, TVM-FFI
    path.write_text(json.dumps(solution))
    (r,) = evaluate(_request(str(path), uuids[:1]), timeout_s=300).results
    assert r.status == Status.COMPILE_ERROR and '"binding": "torch"' in r.detail and "\n" not in r.detail


def test_a_language_the_target_does_not_build_is_refused_by_its_spec_sheet(tmp_path, uuids):
    path = tmp_path / "cuda.json"
    solution = json.loads(open(_solution(tmp_path, "cuda")).read())
    solution["spec"]["language"] = "cuda"
    path.write_text(json.dumps(solution))
    (r,) = evaluate(_request(str(path), uuids[:1]), timeout_s=300).results
    assert r.status == Status.COMPILE_ERROR and "cpu does not build cuda solutions" in r.detail, r.detail
