"""Tests that need a GPU (skipped elsewhere): device timing modes, the profiler, and the library
baselines held to our own checker (so a baseline that computes something else cannot pass)."""

import pytest
import torch

from evoteam import hardware
from evoteam.harness import baselines, timing
from evoteam.harness.check import check_kernel
from evoteam.task import load_module_from_path, load_task

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


@pytest.fixture(scope="module")
def hw():
    return hardware.resolve("auto")


def _adapter_as_kernel(adapter, task, workload):
    def kernel(**kw):
        inputs = {n: kw[n] for n in task.definition.inputs}
        adapter.prepare(task, workload, inputs)(**kw)
    return kernel


def test_event_and_graph_timing_agree_on_a_copy():
    src = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    fns = {"copy": lambda i: dst.copy_(src)}
    events = timing.measure(fns, device="cuda", mode="events", warmup=3, reps=20)["copy"]
    graph = timing.measure(fns, device="cuda", mode="graph", warmup=3, reps=20)["copy"]
    assert events.mode == "events" and graph.mode == "graph"
    # 128 MB moved: tens of microseconds on any datacenter GPU; both modes within a factor of 2.
    assert 0.005 < graph.median_ms < 1.0
    assert 0.5 < events.median_ms / graph.median_ms < 2.0


def test_profiler_sees_the_kernels():
    x = torch.randn(1 << 20, device="cuda")
    names = timing.kernel_names(lambda: torch.exp(x), "cuda")
    assert names and any("exp" in n.lower() or "elementwise" in n.lower() for n in names)


@pytest.mark.parametrize("plan", ["cached", "per_call"])
def test_flashinfer_passes_our_checker(hw, plan):
    task = load_task("mla_decode")
    adapter = baselines.FlashInferMLA(backend="auto", plan=plan)
    reason = adapter.unavailable_reason(task, hw)
    if reason:
        pytest.skip(reason)
    for workload in (task.workloads[0], task.workloads[-1]):
        result = check_kernel(task, workload, _adapter_as_kernel(adapter, task, workload), seed=1, device="cuda")
        assert result.passed, result.summary()


def test_fla_chunk_kda_passes_our_checker(hw):
    task = load_task("kda_prefill")
    adapter = baselines.FlaChunkKDA()
    reason = adapter.unavailable_reason(task, hw)
    if reason:
        pytest.skip(reason)
    # The smallest workload of each kind: both gate forms, with and without initial state, varlen.
    picked = {}
    for w in sorted(task.workloads, key=lambda w: w.axes["seq_len"] * w.axes["num_v_heads"]):
        kind = (w.inputs["bounded_gate"].value, w.inputs["has_initial_state"].value, w.axes["num_sequences"] > 1)
        picked.setdefault(kind, w)
    for workload in picked.values():
        result = check_kernel(task, workload, _adapter_as_kernel(adapter, task, workload), seed=2, device="cuda")
        assert result.passed, (workload.uuid, result.summary())


@pytest.mark.parametrize("uuid", ["81ef577b", "6c261a07"])  # 4096 tokens x 8 heads; 8192 x 16 heads in 5 sequences
def test_kda_oracle_matches_reference_and_is_faster(monkeypatch, uuid):
    """kernels/kda_prefill/oracle.py, which Task.reference uses on GPU inputs, against reference.py at full size
    (the side-by-side timing of scripts/kda_oracle_speed.py)."""
    from conftest import REPO

    task = load_task("kda_prefill")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # this copy compiled, whatever other test files chose
    oracle = load_module_from_path(task.folder / "oracle.py", f"test_gpu_kda_oracle_{uuid}")
    workload = next(w for w in task.workloads if w.uuid.startswith(uuid))
    speed = load_module_from_path(REPO / "scripts" / "kda_oracle_speed.py", "test_gpu_kda_oracle_speed")
    r = speed.compare(task, workload, oracle)
    (o, fs), (o_ref, fs_ref), oracle_s, reference_s = r["oracle"], r["reference"], r["oracle_s"], r["reference_s"]
    assert o.dtype == torch.bfloat16 and fs.dtype == torch.float32 and torch.isfinite(o).all()
    assert ((fs - fs_ref).norm() / fs_ref.norm()).item() < 1e-5 and (fs - fs_ref).abs().max().item() < 1e-4
    o, o_ref = o.double(), o_ref.double()
    assert torch.allclose(o, o_ref, atol=1e-2, rtol=1e-2) and ((o - o_ref).norm() / o_ref.norm()).item() < 1e-3
    assert oracle_s < reference_s, (oracle_s, reference_s)


def test_fla_is_timed_by_graph_replay_with_more_input_sets_than_its_index_cache_held(hw):
    """fla memoises chunk indices per cu_seqlens tensor, 4 by default: with 16 input sets each call rebuilt
    them on the host, so its graph capture failed and events timed its host work (H200, 2026-12-02)."""
    from evoteam.harness.executor import evaluate
    from evoteam.harness.model import EvalRequest

    from conftest import REPO

    task = load_task("kda_prefill")
    if baselines.FlaChunkKDA().unavailable_reason(task, hw):
        pytest.skip("fla is not installed")
    smallest = min(task.workloads, key=lambda w: w.axes["seq_len"] * w.axes["num_v_heads"])
    request = EvalRequest(task="kda_prefill", hardware=hw.name, workloads=[smallest.uuid],
                          solution=str(REPO / "kernels" / "kda_prefill" / "chunk_triton.py"),
                          baseline="fla", timing_mode="graph", warmup=2, reps=5)
    (result,) = evaluate(request, timeout_s=600).results
    assert result.status == "PASSED", (result.status, result.detail)
    assert result.timing_mode == "graph" and result.spread["calls_per_batch"] > 4, (result.timing_mode,
                                                                                    result.spread)


def test_the_baseline_library_is_out_of_the_candidates_reach(hw):
    """Past the static scan, the sandbox: flashinfer is not there for the candidate to import."""
    from evoteam.harness.executor import evaluate
    from evoteam.harness.model import EvalRequest

    from conftest import REPO

    task = load_task("mla_decode")
    if baselines.FlashInferMLA().unavailable_reason(task, hw):
        pytest.skip("flashinfer is not installed")
    request = EvalRequest(task="mla_decode", hardware=hw.name, workloads=[task.workloads[0].uuid],
                          solution=str(REPO / "tests" / "data" / "candidates" / "flashinfer_in_disguise.py"),
                          baseline="flashinfer", warmup=2, reps=5, static_scan=False)
    (result,) = evaluate(request, timeout_s=300).results
    assert result.status == "compile_error" and "flashinfer" in result.detail, (result.status, result.detail)
    assert "baseline_kernels" in result.detail
    assert result.speedup is None


@pytest.mark.parametrize("mode", ["graph", "events"])
def test_the_same_kernel_as_candidate_and_baseline_comes_out_even(hw, tmp_path, mode):
    """The A/A control: the MLA champion as the candidate and as the baseline (baseline=solution), every one of the
    47 workloads 1.00x within 2% by graph replay (5% by events). scripts/gpu_integrity_report.sh aa runs the same."""
    import subprocess
    import sys

    from evoteam.harness.executor import evaluate
    from evoteam.harness.model import EvalRequest

    from conftest import REPO

    kernel = tmp_path / "champion.py"
    subprocess.run([sys.executable, "-m", "evoteam.sweep", "--build", str(REPO / "kernels/mla_decode/champion_h200.json"),
                    "--emit-kernel", str(kernel)], check=True, cwd=REPO)
    request = EvalRequest(task="mla_decode", hardware=hw.name, solution=str(kernel), baseline="solution",
                          baseline_options={"path": str(kernel)}, timing_mode=mode, second_figure=False)
    results = evaluate(request, timeout_s=600).results
    bound = 0.02 if mode == "graph" else 0.05
    off = {r.uuid[:8]: r.speedup for r in results if r.status != "PASSED" or abs(r.speedup - 1) > bound}
    assert not off, off
