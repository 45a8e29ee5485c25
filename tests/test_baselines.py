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


def test_flashinfer_kda_refuses_every_target_but_blackwell_in_one_line(cpu):
    """FlashInfer 0.7.4's KDA prefill backends are Blackwell (sm_100/sm_103) kernels: on any other CUDA target the
    adapter says so in one line, before it imports flashinfer."""
    kda = load_task("kda_prefill")
    for name in ("h100", "h200"):
        reason = baselines.FlashInferKDA().unavailable_reason(kda, hardware.load_spec(name))
        assert reason == f"FlashInfer's KDA prefill runs on Blackwell (sm_100, sm_103) only; {name} is sm_90", reason
        with pytest.raises(baselines.BaselineUnavailable) as err:
            baselines.create("flashinfer_kda", kda, hardware.load_spec(name))
        assert len(str(err.value).splitlines()) == 1
    assert baselines.FlashInferKDA().unavailable_reason(kda, cpu) == "flashinfer_kda does not run on cpu"
    b200 = hardware.load_spec("b200")
    assert b200.arch_target == "sm_100"
    reason = baselines.FlashInferKDA().unavailable_reason(kda, b200)  # past the arch: the import decides
    assert reason is None or reason.startswith("flashinfer does not import"), reason
    with pytest.raises(baselines.BaselineUnavailable, match="backend=fa3 is not one of auto"):
        baselines.FlashInferKDA(backend="fa3")
    assert baselines.FlashInferKDA(backend="cake").label == "flashinfer_kda(cake)"


@pytest.mark.parametrize("bounded", [True, False])
def test_the_flashinfer_kda_adapter_maps_the_arguments(cpu, monkeypatch, bounded):
    """A stand-in for `flashinfer.recurrent_kda` (0.7.4's documented contract: q, k, v, g [1, T, H, 128], raw gate
    with use_gate_in_kernel, beta logits with beta_is_logit, state [N, H, V, K] updated in place, int64 cu_seqlens,
    output written into `output`) computes the task's reference from what it receives; the adapter's outputs must
    be the reference's. A state the library updates in place must never be the caller's initial_state."""
    import types

    task = load_task("kda_prefill")
    workload = next(w for w in task.scaled_workloads("small")
                    if w.inputs["bounded_gate"].value == bounded and w.inputs["has_initial_state"].value)
    inputs = task.make_inputs(workload, torch.Generator().manual_seed(7), "cpu")
    caller_state = inputs["initial_state"].clone()
    calls = []

    def recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                      output_final_state=False, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=False,
                      lower_bound=None, cu_seqlens=None, output=None, beta_is_logit=False, backend="auto", **rest):
        assert not rest, rest
        assert q.shape[0] == 1 and q.shape[-1] == 128 and cu_seqlens.dtype == torch.int64
        assert use_gate_in_kernel and use_qk_l2norm_in_kernel and beta_is_logit and output_final_state
        assert backend == "cake" and initial_state.dtype == torch.float32
        assert initial_state.data_ptr() != inputs["initial_state"].data_ptr()
        assert (lower_bound is not None) == bounded and (lower_bound is None or lower_bound < 0)
        n, h = cu_seqlens.numel() - 1, q.shape[2]
        assert initial_state.shape == (n, h, v.shape[-1], q.shape[-1]) and A_log.shape == (h,)
        calls.append(1)
        ref = task.reference({**inputs, "q": q[0], "k": k[0], "v": v[0], "g": g[0], "beta": beta[0],
                              "scale": scale, "A_log": A_log, "dt_bias": dt_bias,
                              "bounded_gate": lower_bound is not None,
                              "lower_bound": lower_bound if lower_bound is not None else inputs["lower_bound"],
                              "initial_state": initial_state.transpose(-1, -2), "has_initial_state": True,
                              "cu_seqlens": cu_seqlens.int()})
        output[0].copy_(ref["output"])
        initial_state.copy_(ref["final_state"].transpose(-1, -2))  # in place, as FlashInfer does
        return output, initial_state

    monkeypatch.setitem(__import__("sys").modules, "flashinfer", types.SimpleNamespace(recurrent_kda=recurrent_kda))
    shapes = task.output_shapes(workload, inputs)
    run = baselines.FlashInferKDA(backend="cake").prepare(task, workload, inputs)
    expected = task.reference(inputs)
    for _ in range(2):  # the second call starts again from the caller's state, not the updated buffer
        outputs = {"output": torch.full(shapes["output"], float("nan"), dtype=torch.bfloat16),
                   "final_state": torch.full(shapes["final_state"], float("nan"))}
        run(**inputs, **outputs)
        torch.testing.assert_close(outputs["output"], expected["output"], rtol=0, atol=1e-2)
        torch.testing.assert_close(outputs["final_state"], expected["final_state"], rtol=1e-5, atol=1e-6)
    assert len(calls) == 2 and torch.equal(inputs["initial_state"], caller_state)
    # without an initial state the library gets zeros, never the caller's (NaN-filled, must not be read) tensor
    inputs = {**inputs, "has_initial_state": False}
    outputs = {"output": torch.empty(shapes["output"], dtype=torch.bfloat16), "final_state": torch.empty(shapes["final_state"])}
    run(**inputs, **outputs)
    expected = task.reference({**inputs, "initial_state": torch.zeros_like(caller_state), "has_initial_state": True})
    torch.testing.assert_close(outputs["final_state"], expected["final_state"], rtol=1e-5, atol=1e-6)


def test_own_kernel_names_prove_which_code_ran():
    """Each KDA adapter names the kernels only its library launches; a profile proves the library ran only when all
    of them are in it (a C++ kernel as the profiler shows it: `void name<...>(...)`), and an adapter that names none
    proves nothing."""
    fk, fla, vllm = baselines.FlashKDA(), baselines.FlaChunkKDA(), baselines.VllmKDA()
    flashkda_profile = ["void _flash_kda_fwd_prepare<Copy, 16, 128>(TmaDesc, float, int)",
                        "void _flash_kda_fwd_recurrence<Copy, 16, 128, 3>(TmaDesc)", "void at::native::copy_kernel"]
    assert baselines.own_kernels_ran(fk, flashkda_profile)[0]
    # the same kernels as torch's profiler named them on an H100 (2026-12-06): mangled
    mangled = ["_Z22_flash_kda_fwd_prepareIN4cute5tupleIJEEELi16ELi128EEv7TmaDescfi",
               "_Z25_flash_kda_fwd_recurrenceIN4cute5tupleIJEEELi16ELi128ELi3EEv7TmaDesc",
               "_flash_kda_build_tile_prefix(long, int)", "at::native::elementwise_kernel<128, 4>"]
    assert baselines.own_kernels_ran(fk, mangled)[0]
    assert not baselines.own_kernels_ran(fk, mangled[:1])[0]
    # a length that is not the name's (a longer name ending in it) is another function
    assert not baselines._kernel_matches("fwd_prepare", mangled[0])
    assert not baselines._kernel_matches("_flash_kda_fwd_prepare", "_Z23x_flash_kda_fwd_prepareIiEvv")
    proven, account = baselines.own_kernels_ran(fla, flashkda_profile)  # fla's name, FlashKDA's kernels
    assert not proven and "chunk_gla_fwd_kernel_o" in account and "NOT" in account
    fla_profile = [*fla.kernel_names, "l2norm_fwd_kernel", "fused_beta_sigmoid_fwd_kernel"]
    assert baselines.own_kernels_ran(fla, fla_profile)[0] and not baselines.own_kernels_ran(fk, fla_profile)[0]
    # vLLM's recompute_w_u_fwd_kernel is not fla's recompute_w_u_fwd_kda_kernel
    assert not baselines.own_kernels_ran(vllm, fla_profile)[0]
    proven, account = baselines.own_kernels_ran(baselines.FlashInferKDA(), flashkda_profile)
    assert not proven and "no kernel names recorded" in account
