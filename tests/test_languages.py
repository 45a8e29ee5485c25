"""Solutions in other languages than Python: a FlashInfer-Trace Solution with C++ sources (torch
binding) is compiled inside the sandboxed evaluation with the machine's compiler, checked and timed
like any candidate; a compile failure is a compile error with the compiler's words, a fault at run time
a runtime error; the build is cached by the sources' hash. (CUDA takes the same path with nvcc; it
needs a GPU to run.)"""

import json
import shutil
import time

import pytest
import torch

from evoteam import hardware
from evoteam.harness.candidate import Candidate, solution_of_path
from evoteam.harness.executor import evaluate
from evoteam.harness.model import EvalRequest, Status
from evoteam.task import load_task
from evoteam.team.budget import Ledger
from evoteam.team.spec import RoleSpec
from evoteam.team.toolbox import HarnessSettings, Toolbox
from evoteam.team.workspace import Workspace
from evoteam.trace_writer import TRACE_STATUS

from conftest import REPO, write_solution

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="needs a C++ compiler (Debian's g++)")

SOURCE = (REPO / "tests" / "data" / "candidates" / "mla_ext.cpp").read_text()
TASK = load_task("mla_decode")


def _solution(tmp_path, name: str, planted: str = "", first_line: str = "") -> str:
    return write_solution(tmp_path, name, TASK.definition.name,
                          {"kernel.cpp": first_line + SOURCE.replace("  // PLANTED\n", planted)},
                          language="cpp", target_hardware=("cpu",), entry_point="kernel.cpp::run", binding="torch")


def _request(solution: str, uuids, **kw) -> EvalRequest:
    return EvalRequest(task="mla_decode", hardware="cpu", solution=solution, workloads=list(uuids), scale="small",
                       warmup=0, reps=2, **kw)


@pytest.fixture(scope="module")
def uuids():
    return [w.uuid for w in TASK.scaled_workloads("small")]


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    """One cache folder for the tests that build the C++ solution of SOURCE: the first test compiles it there (and proves that
    it did, and that the second evaluation loads it); the team member's draft of the same sources then loads that
    build, as a later evaluation of a run would (a compile of torch's headers is about 30 CPU-s). tests/conftest.py
    keeps this file on one worker, in this order."""
    return tmp_path_factory.mktemp("cpp-cache")


@needs_compiler
def test_a_cpp_solution_compiles_in_the_sandbox_passes_and_is_timed(tmp_path, uuids, monkeypatch, build_cache):
    cache = build_cache
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(cache))
    assert not list(cache.rglob("*.so"))  # first: nothing built yet
    path = _solution(tmp_path, "mla_cpp")
    started = time.monotonic()
    first = evaluate(_request(path, uuids[:1] + uuids[2:3]), timeout_s=900)
    first_s = time.monotonic() - started
    assert [r.status for r in first.results] == [Status.PASSED, Status.PASSED], first.log_tail[-3000:]
    assert all(r.speedup and r.calls_checked > 3 for r in first.results)
    assert first.sandbox.get("tool") == "bubblewrap"  # built and run in the same sandbox as Python candidates
    built = list(cache.rglob("*.so"))
    assert len(built) == 1, built  # compiled into the cache of these exact sources
    started = time.monotonic()
    again = evaluate(_request(path, uuids[:1]), timeout_s=900)
    assert again.results[0].status == Status.PASSED
    assert time.monotonic() - started < first_s / 2  # loaded from the cache, not compiled again
    assert list(cache.rglob("*.so")) == built


@needs_compiler
def test_a_build_killed_midway_does_not_hold_up_the_next_evaluation(tmp_path, uuids, monkeypatch, build_cache):
    """A runner killed while it built (a timeout, Ctrl-C, a lost node) leaves torch's lock file in the build folder;
    torch's loader then waited for it up to the runner's load limit (an honest CUDA candidate, on the H100 through
    three device calls, 2026-12-06). The next evaluation of the same sources builds, or loads, as if it were not
    there."""
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(build_cache))
    (folder,) = [p for p in build_cache.rglob("torch_extensions/*") if p.is_dir()]  # the first test's build
    (folder / "lock").touch()  # what the killed builder left
    started = time.monotonic()
    result = evaluate(_request(_solution(tmp_path, "mla_cpp"), uuids[:1]), timeout_s=240)
    assert result.results[0].status == Status.PASSED, (result.results[0].detail, result.log_tail[-2000:])
    assert time.monotonic() - started < 200
    assert not (folder / "lock").exists()


@needs_compiler
def test_a_compile_error_and_a_runtime_fault_are_recorded_as_such(tmp_path, uuids, monkeypatch):
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "cache"))
    # a header that is not there: the compiler stops at once (an error in the body came after ~10 CPU-s of torch's
    # headers, on every run of the suite)
    broken = evaluate(_request(_solution(tmp_path, "broken", first_line='#include "planted_missing.h"\n'), uuids[:2]),
                      timeout_s=900)
    assert [r.status for r in broken.results] == [Status.COMPILE_ERROR] * 2
    detail = broken.results[0].detail
    assert "kernel.cpp" in detail and "error" in detail, detail  # the compiler's own message
    assert TRACE_STATUS[broken.results[0].status] == "COMPILE_ERROR"
    faulty = evaluate(_request(_solution(tmp_path, "faulty", '  TORCH_CHECK(false, "planted fault");\n'), uuids[:1]),
                      timeout_s=900)
    (r,) = faulty.results
    assert r.status == Status.EXCEPTION and "planted fault" in r.detail, r.detail
    assert TRACE_STATUS[r.status] == "RUNTIME_ERROR"


@needs_compiler
def test_a_solution_the_runner_cannot_build_says_why_in_one_line(tmp_path, uuids):
    path = tmp_path / "tvm.json"
    solution = json.loads(open(_solution(tmp_path, "tvm")).read())
    del solution["spec"]["binding"]  # flashinfer-bench's default binding, TVM-FFI
    path.write_text(json.dumps(solution))
    (r,) = evaluate(_request(str(path), uuids[:1]), timeout_s=300).results
    assert r.status == Status.COMPILE_ERROR and '"binding": "torch"' in r.detail and "\n" not in r.detail


@needs_compiler
def test_a_language_the_target_does_not_build_is_refused_by_its_spec_sheet(tmp_path, uuids):
    path = tmp_path / "cuda.json"
    solution = json.loads(open(_solution(tmp_path, "cuda")).read())
    solution["spec"]["language"] = "cuda"
    path.write_text(json.dumps(solution))
    (r,) = evaluate(_request(str(path), uuids[:1]), timeout_s=300).results
    assert r.status == Status.COMPILE_ERROR and "cpu does not build cuda solutions" in r.detail, r.detail


@needs_compiler
def test_a_team_member_writes_and_runs_a_cpp_kernel_through_its_tools(tmp_path, uuids, monkeypatch, build_cache):
    """The agents' write tool takes the language from the file's suffix: a .cpp draft is compiled and checked
    by the harness, its attempt keeps its suffix (kernel.cpp) for the final measurement and the solution files,
    and a suffix that names no language is refused."""
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(build_cache))
    source = SOURCE.replace("  // PLANTED\n", "")  # the text _solution() writes: the same sources, the same build
    built_before = sorted(build_cache.rglob("*.so"))  # the solution file's build of these sources, where it ran first
    settings = HarnessSettings.for_run("mla_decode", "cpu", "small", warmup=0, reps=2, all_workloads=uuids,
                                       probe_workloads=uuids[:1])
    ledger = Ledger(token_budget=1000, max_evaluations=5, max_wall_time_s=3600, max_output_tokens=100)
    workspace = Workspace(tmp_path / "workspace")
    role = RoleSpec(name="coder", kind="generalist", model="offline")
    toolbox = Toolbox(workspace, settings, ledger, "t1", role)
    assert toolbox.write_kernel("v1.txt", source).startswith("error: v1.txt: the suffix names the language")
    assert "compiled with the target's compiler" in toolbox.write_kernel("v1.cpp", source)
    reply = toolbox.run_check("v1.cpp")
    assert reply.startswith("check 0001-") and "PASSED" in reply.splitlines()[0], reply
    (attempt,) = workspace.attempts
    assert workspace.kernel_path(attempt.attempt_id).name == "kernel.cpp"
    assert workspace.kernel_path(attempt.attempt_id).read_text() == source
    if built_before:  # the draft's sources are the solution's: its build was loaded, not compiled again
        assert sorted(build_cache.rglob("*.so")) == built_before
    # the same text as Python is another kernel, not an answer from the journal
    toolbox.drafts["v1.py"] = source
    toolbox.run_check("v1.py")
    assert len(workspace.attempts) == 2 and ledger.evaluations == 2
    assert workspace.attempts[1].status != "PASSED" and workspace.kernel_path(workspace.attempts[1].attempt_id).suffix == ".py"


def test_a_bare_source_file_is_a_solution_of_its_language(tmp_path):
    cpp = Candidate.from_path(REPO / "tests" / "data" / "candidates" / "mla_ext.cpp")
    assert (cpp.language, cpp.solution.spec.binding, cpp.keywords) == ("cpp", "torch", False)
    assert (cpp.entry_file, cpp.symbol, cpp.compiled_sources()) == ("mla_ext.cpp", "run", ["mla_ext.cpp"])
    cuda = solution_of_path(CUDA_KERNEL, TASK.definition.name)
    assert (cuda.spec.language, cuda.spec.entry_point, cuda.definition) == ("cuda", "splitkv_wmma.cu::run",
                                                                          TASK.definition.name)
    py = Candidate.from_path(REPO / "tests" / "data" / "candidates" / "mla_torch.py")
    assert py.keywords and py.language == "python"  # plain PyTorch; a file that imports Triton is triton
    assert Candidate.from_path(REPO / "kernels" / "mla_decode" / "seed_triton.py").language == "triton"
    solution = solution_of_path(_solution(tmp_path, "mla_cpp"))  # a Solution JSON stays as written
    assert (solution.name, solution.spec.language, solution.sources[0].path) == ("mla_cpp", "cpp", "kernel.cpp")


# ----------------------------------------------------------------------- CUDA (on a GPU host)
CUDA_KERNEL = REPO / "kernels" / "mla_decode" / "splitkv_wmma.cu"
FAULT_AT = "  Smem& sm = *reinterpret_cast<Smem*>(raw);\n"


def _cuda_file(tmp_path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    return str(path)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_cuda_solution_passes_on_the_gpu_and_its_faults_get_their_statuses(tmp_path, monkeypatch):
    """The CUDA C++ MLA kernel compiles with the machine's nvcc inside the sandbox and passes the checker on
    a batch-1, a mid-size and the largest workload; a compile error is COMPILE_ERROR with nvcc's words; an
    illegal address is a runtime error of its workload only, and the next workload is still evaluated."""
    monkeypatch.setenv("EVOTEAM_CACHE_DIR", str(tmp_path / "cache"))
    target = hardware.resolve("auto")
    workloads = sorted(TASK.workloads, key=lambda w: (w.axes["batch_size"], w.axes["num_kv_indices"]))
    uuids = [workloads[0].uuid, workloads[len(workloads) // 2].uuid, workloads[-1].uuid]

    def run(path, chosen):
        return evaluate(EvalRequest(task="mla_decode", hardware=target.name, solution=path, workloads=chosen,
                                    warmup=1, reps=3), timeout_s=900)

    good = run(str(CUDA_KERNEL), uuids)
    assert [r.status for r in good.results] == [Status.PASSED] * 3, [r.detail for r in good.results]
    source = CUDA_KERNEL.read_text()
    broken = run(_cuda_file(tmp_path, "broken", source + "\nint broken = ;\n"), uuids[:1])
    (r,) = broken.results
    assert r.status == Status.COMPILE_ERROR and "broken.cu" in r.detail and "error" in r.detail, r.detail
    assert FAULT_AT in source
    fault = "  if (threadIdx.x == 0 && blockIdx.y == 0) *(volatile int*)nullptr = 1;  // planted\n"
    faulty = run(_cuda_file(tmp_path, "faulty", source.replace(FAULT_AT, FAULT_AT + fault)), uuids[:2])
    assert [TRACE_STATUS[r.status] for r in faulty.results] == ["RUNTIME_ERROR"] * 2, [r.detail for r in faulty.results]
    assert "illegal" in faulty.results[0].detail.lower(), faulty.results[0].detail
