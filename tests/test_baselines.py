"""Baseline adapters: selection, and `unavailable: <reason>` instead of a crash."""

import pytest
import torch

from evoteam import hardware
from evoteam.harness import baselines
from evoteam.task import load_task


@pytest.fixture(scope="module")
def cpu():
    return hardware.load_spec("cpu")


def test_cpu_baseline_is_the_reference(cpu):
    for name in ("mla_decode", "kda_prefill"):
        assert baselines.create("auto", load_task(name), cpu).name == "reference"


def test_gpu_adapters_say_why_they_are_unavailable(cpu):
    mla, kda = load_task("mla_decode"), load_task("kda_prefill")
    h200 = hardware.load_spec("h200")
    def reason(name, task):
        return baselines.ADAPTERS[name]().unavailable_reason(task, cpu)

    assert reason("reference", mla) is None
    assert reason("flashinfer", mla) == "flashinfer does not run on cpu"
    assert reason("fla", mla) == "fla does not implement task mla_decode"
    assert reason("fla", kda) == "fla does not run on cpu"
    # On a CUDA target without the library installed here, the reason is the import.
    reason = baselines.FlashInferMLA().unavailable_reason(mla, h200)
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        assert reason.startswith("flashinfer.mla does not import")
    assert baselines.AiterMLA().unavailable_reason(mla, h200) == "aiter does not run on cuda"
    with pytest.raises(baselines.BaselineUnavailable, match="baseline fla is unavailable: fla does not run on cpu"):
        baselines.create("fla", kda, cpu)
    with pytest.raises(baselines.BaselineUnavailable, match="baseline 'nope' is not known"):
        baselines.create("nope", kda, cpu)
    with pytest.raises(baselines.BaselineUnavailable, match="backend=fa9"):
        baselines.FlashInferMLA(backend="fa9")


def test_reference_adapter_writes_into_the_outputs(cpu):
    task = load_task("mla_decode")
    workload = task.scaled_workloads("small")[0]
    gen = torch.Generator().manual_seed(0)
    inputs = task.make_inputs(workload, gen, "cpu")
    shapes = task.output_shapes(workload, inputs)
    outputs = {"output": torch.full(shapes["output"], float("nan"), dtype=torch.bfloat16),
               "lse": torch.full(shapes["lse"], float("nan"))}
    baselines.create("reference", task, cpu).prepare(task, workload, inputs)(**inputs, **outputs)
    expected = task.reference(inputs)
    assert torch.equal(outputs["output"], expected["output"]) and torch.equal(outputs["lse"], expected["lse"])


def test_the_flashkda_adapter_calls_flash_kda_itself_with_its_layouts(cpu, monkeypatch):
    """The adapter calls `flash_kda.fwd` (not fla's chunk_kda, which runs its own Triton path outside inference
    mode): here a stand-in for FlashKDA's documented API (state [N, H, V, K], B = 1, int64 cu_seqlens, raw gate
    and beta logits, output written in place) computes the task's reference. A missed transpose of either
    state, or any argument in the wrong place, changes the outputs."""
    import types

    task = load_task("kda_prefill")
    workload = next(w for w in task.scaled_workloads("small")
                    if w.inputs["bounded_gate"].value and w.inputs["has_initial_state"].value)
    inputs = task.make_inputs(workload, torch.Generator().manual_seed(5), "cpu")
    calls = []

    def fwd(q, k, v, g, beta, scale, out, A_log, dt_bias, lower_bound, initial_state=None, final_state=None,
            cu_seqlens=None):
        assert q.shape[0] == 1 and cu_seqlens.dtype == torch.int64 and out.is_contiguous()
        assert initial_state.shape == final_state.shape and initial_state.shape[-2:] == (v.shape[-1], q.shape[-1])
        calls.append(cu_seqlens)
        ref = task.reference({**inputs, "q": q[0], "k": k[0], "v": v[0], "g": g[0], "beta": beta[0],
                              "scale": scale, "A_log": A_log, "dt_bias": dt_bias, "lower_bound": lower_bound,
                              "initial_state": initial_state.transpose(-1, -2), "cu_seqlens": cu_seqlens.int()})
        out[0].copy_(ref["output"])
        final_state.copy_(ref["final_state"].transpose(-1, -2))

    monkeypatch.setitem(__import__("sys").modules, "flash_kda", types.SimpleNamespace(fwd=fwd))
    shapes = task.output_shapes(workload, inputs)
    outputs = {"output": torch.full(shapes["output"], float("nan"), dtype=torch.bfloat16),
               "final_state": torch.full(shapes["final_state"], float("nan"))}
    baselines.FlashKDA().prepare(task, workload, inputs)(**inputs, **outputs)
    expected = task.reference(inputs)
    assert len(calls) == 1
    # the same arithmetic up to summation order (the stand-in's state arrives as a transposed view)
    torch.testing.assert_close(outputs["output"], expected["output"], rtol=0, atol=1e-2)
    torch.testing.assert_close(outputs["final_state"], expected["final_state"], rtol=1e-5, atol=1e-6)
    softplus = next(w for w in task.scaled_workloads("small") if not w.inputs["bounded_gate"].value)
    with pytest.raises(baselines.BaselineUnavailable, match="only the bounded gate"):
        baselines.FlashKDA().prepare(task, softplus, task.make_inputs(softplus, torch.Generator(), "cpu"))


def test_the_solution_adapter_runs_a_kernel_file_as_the_baseline(cpu, tmp_path):
    """baseline=solution (the A/A control): a kernel file of the task's calling convention, loaded once, named by
    its file and versioned by its content (a baseline cache entry serves that exact file only)."""
    from conftest import REPO

    task = load_task("mla_decode")
    workload = task.scaled_workloads("small")[0]
    kernel = tmp_path / "kernel.py"
    kernel.write_text((REPO / "tests/data/candidates/mla_torch.py").read_text())
    adapter = baselines.create("solution", task, cpu, path=str(kernel))
    assert adapter.label == "solution[kernel.py]"
    version = adapter.version
    inputs = task.make_inputs(workload, torch.Generator().manual_seed(0), "cpu")
    shapes = task.output_shapes(workload, inputs)
    outputs = {"output": torch.full(shapes["output"], float("nan"), dtype=torch.bfloat16),
               "lse": torch.full(shapes["lse"], float("nan"))}
    adapter.prepare(task, workload, inputs)(**inputs, **outputs)
    expected = task.reference(inputs)
    assert torch.allclose(outputs["output"].float(), expected["output"].float(), atol=1e-2, rtol=1e-2)
    kernel.write_text(kernel.read_text() + "\n# changed\n")
    assert adapter.version != version
    with pytest.raises(baselines.BaselineUnavailable, match="needs path=FILE"):
        baselines.create("solution", task, cpu, path=str(tmp_path / "missing.py"))
