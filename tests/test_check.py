"""Tests of evoteam.check: planted kernels, written generically from each task's reference, must be
caught by the right check, and correct ones must pass. Runs on the toy task (tests/data/toy_task)
and on each real task under kernels/ at its "small" scale (first workload only)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from functools import cache
from pathlib import Path

import pytest
import torch

from evoteam.harness.check import (
    POISON_BITS,
    CheckResult,
    _allocate_outputs,
    _bits_view,
    check_kernel,
    poison_outputs,
    trial_seed,
)
from evoteam.schema import Correctness
from evoteam.task import available_tasks, load_task, load_task_folder

from conftest import seed_kernel

TOY_FOLDER = Path(__file__).parent / "data" / "toy_task"
REAL_TASKS = sorted({"mla_decode", "kda_prefill", *available_tasks()})
TASK_FILES = ("definition.json", "workloads.jsonl", "task.py")
SEED = 1234


class _CachedReference:
    """A task's reference module whose `run` remembers results by input content.

    The fixed SEED gives every test the same trial inputs, and a planted kernel computes the same
    reference as the checker, so a slow CPU reference (a per-token recurrence, say) runs once per
    distinct input set instead of twice per trial per test. Results are deterministic functions of
    the inputs, so this changes no outcome; clones are returned so no caller can alter the cache.
    """

    def __init__(self, module):
        self.module = module
        self.results = {}

    @staticmethod
    def _key(args) -> str:
        h = hashlib.sha256()
        for a in args:
            if isinstance(a, torch.Tensor):
                t = a.detach().cpu().contiguous()
                h.update(f"{a.device}{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            else:
                h.update(repr(a).encode())
        return h.hexdigest()

    def run(self, *args):
        key = self._key(args)
        if key not in self.results:
            self.results[key] = self.module.run(*args)
        result = self.results[key]
        if isinstance(result, tuple):
            return tuple(r.clone() if isinstance(r, torch.Tensor) else r for r in result)
        return result.clone() if isinstance(result, torch.Tensor) else result


@cache
def _task_and_workload(name: str):
    task = load_task_folder(TOY_FOLDER) if name == "toy" else load_task(name)
    if name != "toy":
        task = dataclasses.replace(task, reference_module=_CachedReference(task.reference_module))
    return task, task.scaled_workloads("small")[0]


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm device")
    return request.param


@pytest.fixture(params=["toy", *REAL_TASKS])
def task_wl(request):
    name = request.param
    if name != "toy":
        folder = Path(__file__).resolve().parents[1] / "kernels" / name
        if not all((folder / f).is_file() for f in TASK_FILES):
            pytest.skip(f"task {name} is not in kernels/ yet")
    return _task_and_workload(name)


@pytest.fixture
def toy():
    return _task_and_workload("toy")


# --------------------------------------------------------------------------- planted kernel helpers


def _split(task, kwargs):
    inputs = {n: kwargs[n] for n in task.definition.inputs}
    outputs = {n: kwargs[n] for n in task.definition.outputs}
    return inputs, outputs


def _write_reference(task, kwargs):
    inputs, outputs = _split(task, kwargs)
    ref = task.reference(inputs)
    for name, out in outputs.items():
        out.copy_(ref[name])
    return inputs, outputs, ref


def _float_outputs(task):
    return [n for n, s in task.definition.outputs.items() if s.dtype in ("float32", "float16", "bfloat16")]


def _finite_element(ref: torch.Tensor) -> tuple[int, ...] | None:
    """Index of the finite reference element with the smallest magnitude (None if none)."""
    r = ref.detach().to(torch.float64).reshape(-1)
    mag = torch.where(torch.isfinite(r), r.abs(), math.inf)
    if r.numel() == 0 or not math.isfinite(float(mag.min())):
        return None
    flat = int(torch.argmin(mag))
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(ref.shape)))


def _correct(task):
    def kernel(**kwargs):
        _write_reference(task, kwargs)
    return kernel


def _check(task, workload, kernel, **kw):
    kw.setdefault("seed", SEED)
    kw.setdefault("device", "cpu")
    return check_kernel(task, workload, kernel, **kw)


# --------------------------------------------------------------------------- generic planted kernels


def test_correct_kernel_passes(task_wl, device):
    task, wl = task_wl
    result = _check(task, wl, _correct(task), device=device)
    assert result.passed, result.summary()
    assert result.failure is None
    assert result.trials == 3 and result.base_seed == SEED
    assert set(result.errors) == set(task.definition.outputs)
    assert result.summary().startswith("PASSED (3 trials, max rel-norm")


def test_one_wrong_element_fails_mismatch(task_wl, device):
    task, wl = task_wl
    info = {}

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        for name in _float_outputs(task):
            idx = _finite_element(ref[name])
            if idx is None:
                continue
            tol = task.tolerance(name)
            r = float(ref[name][idx])
            outputs[name][idx] = r + 4 * (tol.atol + tol.rtol * abs(r))
            info.setdefault("where", (name, idx))
            return
        raise AssertionError("no finite float output element to corrupt")

    result = _check(task, wl, kernel, device=device)
    f = result.failure
    assert not result.passed and f is not None
    assert f.check == "mismatch", result.summary()
    assert (f.tensor, f.index) == info["where"]
    assert f.count == 1 and f.trial == 0
    assert "mismatch" in result.summary() and f.tensor in result.summary()


def test_scaled_output_fails(task_wl, device):
    task, wl = task_wl

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        # Scale the float output with the largest finite magnitude by 1.05.
        name = max(_float_outputs(task), key=lambda n: float(
            torch.nan_to_num(ref[n].double(), posinf=0, neginf=0).abs().max()) if ref[n].numel() else 0.0)
        outputs[name].copy_(ref[name].double() * 1.05)

    result = _check(task, wl, kernel, device=device)
    assert not result.passed
    assert result.failure.check in ("mismatch", "rel_norm"), result.summary()


def test_unwritten_slice_fails_with_index(task_wl, device):
    task, wl = task_wl
    info = {}

    def kernel(**kwargs):
        inputs, outputs = _split(task, kwargs)
        ref = task.reference(inputs)
        skipped = False
        for name, out in outputs.items():
            dims = [d for d in range(out.dim()) if out.shape[d] > 1]
            if skipped or not dims:
                out.copy_(ref[name])
                continue
            dim, size = dims[0], out.shape[dims[0]]
            out.narrow(dim, 0, size - 1).copy_(ref[name].narrow(dim, 0, size - 1))
            index = [0] * out.dim()
            index[dim] = size - 1
            info.update(tensor=name, index=tuple(index), count=out.numel() // size)
            skipped = True

    result = _check(task, wl, kernel, device=device)
    f = result.failure
    assert not result.passed and f is not None
    assert f.check == "unwritten", result.summary()
    assert (f.tensor, f.index, f.count) == (info["tensor"], info["index"], info["count"])
    index_text = ", ".join(str(i) for i in info["index"])
    assert result.summary() == (f"FAILED unwritten: {info['tensor']}[{index_text}] and {info['count'] - 1} "
                                f"more elements never written (trial 0)")


def test_nan_output_fails_nan_inf(task_wl, device):
    task, wl = task_wl
    info = {}

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        name = _float_outputs(task)[0]
        idx = _finite_element(ref[name])
        outputs[name][idx] = float("nan")
        info["where"] = (name, idx)

    result = _check(task, wl, kernel, device=device)
    f = result.failure
    assert not result.passed and f is not None
    assert f.check == "nan_inf", result.summary()
    assert (f.tensor, f.index, f.count) == (*info["where"], 1)
    assert "nan" in f.detail


def test_input_modified_fails(task_wl, device):
    task, wl = task_wl
    info = {}

    def kernel(**kwargs):
        inputs, _, _ = _write_reference(task, kwargs)
        name, x = next((n, v) for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.numel() > 0)
        idx = tuple(s - 1 for s in x.shape)
        if x.dtype == torch.bool:
            x[idx] = ~x[idx]
        elif x.dtype.is_floating_point:
            x[idx] = 12345.0 if float(x[idx]) != 12345.0 else 0.0
        else:
            x[idx] = x[idx] + 1
        info["where"] = (name, idx)

    result = _check(task, wl, kernel, device=device)
    f = result.failure
    assert not result.passed and f is not None
    assert f.check == "input_modified", result.summary()
    assert (f.tensor, f.index, f.count) == (*info["where"], 1)


def test_exception_fails(task_wl, device):
    task, wl = task_wl

    def kernel(**kwargs):
        raise ValueError("planted boom")

    result = _check(task, wl, kernel, device=device)
    f = result.failure
    assert not result.passed and f is not None
    assert f.check == "exception" and f.trial == 0
    assert f.detail.startswith("ValueError: planted boom")
    assert "kernel" in f.detail  # traceback tail names the raising function
    assert result.summary() == "FAILED exception: ValueError: planted boom (trial 0)"


def test_replayed_outputs_fail(task_wl, device):
    task, wl = task_wl
    saved = {}

    def kernel(**kwargs):
        inputs, outputs = _split(task, kwargs)
        if not saved:
            ref = task.reference(inputs)
            saved.update({n: r.clone() for n, r in ref.items()})
        for name, out in outputs.items():
            out.copy_(saved[name])

    result = _check(task, wl, kernel, device=device)
    assert not result.passed, "a kernel replaying its first outputs must fail on fresh inputs"
    assert result.failure.trial == 1, result.summary()
    assert result.failure.check in ("mismatch", "nan_inf", "rel_norm")


# --------------------------------------------------------------------------- toy-task specifics


def test_toy_seed_kernel_passes(toy):
    task, _ = toy
    kernel = seed_kernel(task)
    for wl in task.scaled_workloads("full"):
        result = check_kernel(task, wl, kernel)
        assert result.passed, result.summary()


def test_toy_reference_has_neg_inf_and_it_is_matched(toy):
    task, wl = toy
    gen = torch.Generator().manual_seed(0)
    ref = task.reference(task.make_inputs(wl, gen, torch.device("cpu")))
    assert torch.isneginf(ref["lse"][1]), "row 1 is empty: its lse must be -inf"
    result = _check(task, wl, _correct(task))
    assert result.passed, result.summary()
    assert math.isfinite(result.errors["lse"].max_absolute_error)


def _toy_with_lse_edit(task, row, value):
    def kernel(**kwargs):
        _, outputs, _ = _write_reference(task, kwargs)
        outputs["lse"][row] = value
    return kernel


def test_neg_inf_where_reference_finite_fails(toy):
    task, wl = toy
    result = _check(task, wl, _toy_with_lse_edit(task, 0, float("-inf")))
    f = result.failure
    assert f is not None and (f.check, f.tensor, f.index, f.count) == ("nan_inf", "lse", (0,), 1), result.summary()
    assert "-inf" in f.detail


def test_finite_where_reference_neg_inf_fails(toy):
    task, wl = toy
    result = _check(task, wl, _toy_with_lse_edit(task, 1, -1e30))
    f = result.failure
    assert f is not None and (f.check, f.tensor, f.index) == ("mismatch", "lse", (1,)), result.summary()


def test_pos_inf_where_reference_neg_inf_fails(toy):
    task, wl = toy
    result = _check(task, wl, _toy_with_lse_edit(task, 1, float("inf")))
    f = result.failure
    assert f is not None and (f.check, f.tensor, f.index) == ("nan_inf", "lse", (1,)), result.summary()


def test_small_uniform_bias_fails_rel_norm(toy):
    task, wl = toy
    tol = task.tolerance("out")
    bias = 0.009  # every |err| = 0.009 <= atol (0.01): each element passes, but values p <= 1 put the
    # relative norm at about 0.009 / rms(p) > 1e-2

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        outputs["out"].copy_(ref["out"].double() + bias)

    result = _check(task, wl, kernel)
    f = result.failure
    assert f is not None and (f.check, f.tensor) == ("rel_norm", "out"), result.summary()
    assert result.errors["out"].rel_norm > tol.max_rel_norm
    assert "relative L2 error" in result.summary()


def test_output_replaced_fails(toy):
    task, wl = toy

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        outputs["out"].set_(ref["out"].clone())

    result = _check(task, wl, kernel)
    assert result.failure is not None and result.failure.check == "output_replaced", result.summary()


def test_system_exit_is_an_exception_failure(toy):
    task, wl = toy

    def kernel(**kwargs):
        raise SystemExit(3)

    result = _check(task, wl, kernel)
    assert result.failure is not None and result.failure.check == "exception"
    assert result.failure.detail.startswith("SystemExit")


def test_return_value_is_ignored(toy):
    task, wl = toy

    def kernel(**kwargs):
        _, outputs, _ = _write_reference(task, kwargs)
        return outputs["out"], outputs["lse"]

    assert _check(task, wl, kernel).passed


def test_kernel_nan_is_not_taken_for_unwritten(toy):
    task, wl = toy

    def kernel(**kwargs):
        _, outputs, _ = _write_reference(task, kwargs)
        outputs["out"][2, 3] = torch.tensor(float("nan")).to(torch.bfloat16)
        outputs["out"][3, 4] = -outputs["out"][2, 3]

    result = _check(task, wl, kernel)
    f = result.failure
    assert f is not None and (f.check, f.tensor, f.index, f.count) == ("nan_inf", "out", (2, 3), 2), result.summary()


def test_poison_is_a_distinctive_quiet_nan(toy):
    task, wl = toy
    inputs = task.make_inputs(wl, torch.Generator().manual_seed(0), torch.device("cpu"))
    outputs = _allocate_outputs(task, wl, inputs, torch.device("cpu"))
    poison_outputs(outputs)
    for name, out in outputs.items():
        assert out.shape == task.output_shapes(wl, inputs)[name]
        assert torch.isnan(out).all()
        canonical = torch.tensor(float("nan"), dtype=torch.float32).to(out.dtype).reshape(1)
        assert not torch.equal(_bits_view(out)[:1], _bits_view(canonical))
        assert int(_bits_view(out).reshape(-1)[0]) & ((1 << 8 * out.element_size()) - 1) == POISON_BITS[out.dtype]


def test_fresh_inputs_per_trial_and_reproducible_seed(toy):
    task, wl = toy

    def recorder(store):
        def kernel(**kwargs):
            store.append(kwargs["x"].clone())
            _write_reference(task, kwargs)
        return kernel

    first, second = [], []
    r1 = check_kernel(task, wl, recorder(first), seed=99)
    r2 = check_kernel(task, wl, recorder(second), seed=99)
    assert r1.base_seed == r2.base_seed == 99
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert len(first) == 3 and not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    assert len({trial_seed(99, t) for t in range(3)}) == 3
    r3 = check_kernel(task, wl, _correct(task))
    r4 = check_kernel(task, wl, _correct(task))
    assert r3.base_seed != r4.base_seed  # seed=None draws a fresh base seed


def test_too_few_trials_rejected(toy):
    task, wl = toy
    with pytest.raises(ValueError):
        check_kernel(task, wl, _correct(task), trials=1)


def test_json_and_correctness(toy):
    task, wl = toy

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        outputs["out"][0, :2] = torch.tensor(float("nan"))

    failed = _check(task, wl, kernel)
    passed = _check(task, wl, _correct(task))
    for result in (failed, passed):
        text = json.dumps(result.to_json(), allow_nan=False)
        back = CheckResult.from_json(json.loads(text))
        assert back.to_json() == result.to_json()  # (NaN errors: NaN != NaN, so compared as written)
        corr = result.to_correctness()
        assert isinstance(corr, Correctness)
        json.dumps(corr.to_json(), allow_nan=False)
        assert set(corr.extra["rel_norm"]) == set(result.errors)
    assert failed.to_json()["failure"]["index"] == [0, 0]
    assert failed.to_correctness().extra["failure"]["check"] == "nan_inf"
    assert math.isnan(failed.to_correctness().max_absolute_error)  # a NaN output's error is NaN, not 0.0
    assert passed.to_correctness().max_absolute_error == max(e.max_absolute_error for e in passed.errors.values())


def test_chunk_boundaries_keep_first_index_and_count(toy, monkeypatch):
    import evoteam.harness.check as check_mod

    monkeypatch.setattr(check_mod, "CPU_CHUNK_ELEMENTS", 7)
    task, wl = toy

    def kernel(**kwargs):
        _, outputs, ref = _write_reference(task, kwargs)
        outputs["out"][3, 5:20] = ref["out"][3, 5:20].float() + 0.5

    result = _check(task, wl, kernel)
    f = result.failure
    assert f is not None and (f.check, f.tensor, f.index, f.count) == ("mismatch", "out", (3, 5), 15), result.summary()
    assert result.errors["out"].max_absolute_error == pytest.approx(0.5, abs=1e-2)


# --------------------------------------------------------------------------- _compare_output on other dtypes


def _poisoned(shape, dtype):
    out = torch.empty(shape, dtype=dtype)
    poison_outputs({"o": out})
    return out


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_integer_outputs_exact(dtype):
    from evoteam.harness.check import _compare_output
    from evoteam.task import Tolerance

    exact = Tolerance(0.0, 0.0, 0.0)
    ref = torch.arange(24, dtype=dtype).reshape(4, 6)
    out = _poisoned((4, 6), dtype)
    out[:3].copy_(ref[:3])
    failure, _ = _compare_output("o", out, ref, exact, 0)
    assert (failure.check, failure.index, failure.count) == ("unwritten", (3, 0), 6)
    out.copy_(ref)
    assert _compare_output("o", out, ref, exact, 0)[0] is None
    out[2, 1] += 1
    failure, err = _compare_output("o", out, ref, exact, 0)
    assert (failure.check, failure.index, failure.count) == ("mismatch", (2, 1), 1)
    assert err.max_absolute_error == 1.0


def test_float16_poison_and_tolerance():
    from evoteam.harness.check import _compare_output
    from evoteam.task import DTYPE_TOLERANCES

    tol = DTYPE_TOLERANCES["float16"]
    ref = torch.linspace(-2, 2, 50, dtype=torch.float32)
    out = _poisoned((50,), torch.float16)
    out[1:].copy_(ref[1:])
    failure, _ = _compare_output("o", out, ref, tol, 0)
    assert (failure.check, failure.index, failure.count) == ("unwritten", (0,), 1)
    out.copy_(ref)
    assert _compare_output("o", out, ref, tol, 0)[0] is None


# --------------------------------------------------------------------------- GPU only


ASYNC_ERROR_SCRIPT = """
import sys, torch
from evoteam.harness.check import check_kernel
from evoteam.task import load_task_folder
from conftest import seed_kernel
task = load_task_folder(sys.argv[1])
wl = task.scaled_workloads("small")[0]
def kernel(x, lengths, scale, out, lse):
    bad = torch.tensor([10**9], device=x.device)
    out.view(-1)[bad] = 1.0  # out-of-bounds index: a device-side assert, raised asynchronously
result = check_kernel(task, wl, kernel, device="cuda", seed=1)
print(result.summary())
assert result.failure is not None and result.failure.check == "exception", result.summary()
"""


@pytest.mark.gpu
def test_async_cuda_error_is_the_kernels_exception(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm device")
    import subprocess
    import sys

    # In a subprocess: a device-side assert leaves the CUDA context unusable.
    proc = subprocess.run([sys.executable, "-c", ASYNC_ERROR_SCRIPT, str(TOY_FOLDER)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED exception" in proc.stdout


# --------------------------------------------------------------------------- flashinfer-bench's verdicts
def test_the_element_rule_and_recorded_errors_are_flashinfer_benchs():
    """What passes here passes flashinfer-bench at the same tolerances, element by element, and the
    recorded max errors are the numbers it records (its `compute_error_stats`, version pinned in dev)."""
    utils = pytest.importorskip("flashinfer_bench.bench.utils", reason="flashinfer-bench comes with `make test`")
    from flashinfer_bench.bench.config import BenchmarkConfig

    from evoteam.harness.check import _compare_output
    from evoteam.task import Tolerance

    gen = torch.Generator().manual_seed(7)
    ref = torch.cat([torch.rand(3000, generator=gen) * 4 - 2, torch.rand(1000, generator=gen) * 1e-3,
                     torch.zeros(50)]).double()
    # errors straddling both bounds: some elements fail only atol, some only rtol, some both
    out = ref + (torch.rand(ref.shape, generator=gen) * 2 - 1) * (0.012 + 0.012 * ref.abs())
    for atol, rtol in ((1e-2, 1e-2), (3e-2, 1e-2), (1e-3, 5e-2)):
        cfg = BenchmarkConfig(atol=atol, rtol=rtol)
        tol = Tolerance(atol=atol, rtol=rtol, max_rel_norm=math.inf)
        passed_there = [not utils.compute_error_stats(out[i:i + 1], ref[i:i + 1], cfg)[2] for i in range(len(ref))]
        passed_here = [_compare_output("x", out[i:i + 1].float(), ref[i:i + 1].float(), tol, 0)[0] is None
                       for i in range(len(ref))]
        assert 0 < sum(passed_here) < len(ref), "the cases straddle the bound"
        assert passed_here == passed_there, (atol, rtol)
        max_abs, max_rel, _, _ = utils.compute_error_stats(out.float(), ref.float(), cfg)
        _, errors = _compare_output("x", out.float(), ref.float(), tol, 0)
        assert errors.max_absolute_error == pytest.approx(max_abs, rel=1e-5)
        assert errors.max_relative_error == pytest.approx(max_rel, rel=1e-5)
    nan_out, inf_out = out.float().clone(), out.float().clone()
    nan_out[5] = math.nan
    inf_out[5], inf_out[6] = math.inf, math.nan
    for bad, recorded in ((nan_out, "NaN"), (inf_out, "Infinity")):
        failure, errors = _compare_output("x", bad, ref.float(), Tolerance(1e-2, 1e-2, 1e-2), 0)
        assert failure.check == "nan_inf"
        assert errors.to_json()["max_absolute_error"] == recorded == errors.to_json()["max_relative_error"]
        assert json.loads(json.dumps(errors.to_json(), allow_nan=False))  # strict JSON


def test_a_baselines_own_check_widens_only_the_element_wise_bounds():
    """`own_check_factor` (a library baseline's own output, e.g. FlashKDA at lower precision): a few elements past
    atol pass at 2x, the relative-norm bound is the task's whatever the factor, and a candidate's check is unchanged."""
    from evoteam.harness.check import compare_with_reference

    task = load_task("kda_prefill")
    tol = task.tolerance("final_state")
    ref = {"output": torch.zeros(4, 2, 128, dtype=torch.bfloat16), "final_state": torch.full((1, 2, 128, 128), 1.0)}
    out = {k: v.clone() for k, v in ref.items()}
    out["final_state"][0, 1, 7, 3] += 1.5 * (tol.atol + tol.rtol)  # one element 1.5x past the bound
    assert compare_with_reference(task, out, ref, 0)[0].check == "mismatch"
    assert compare_with_reference(task, out, ref, 0, elementwise_factor=2.0)[0] is None
    out["final_state"] += 2 * tol.max_rel_norm  # every element off by twice the relative-norm bound
    failure, _ = compare_with_reference(task, out, ref, 0, elementwise_factor=10.0)
    assert failure is not None and failure.check == "rel_norm"


def _fib_passes(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """flashinfer-bench's verdict on one output (its DefaultEvaluator.check_correctness: any NaN or Inf fails, then
    compute_error_stats at its BenchmarkConfig's defaults)."""
    utils = pytest.importorskip("flashinfer_bench.bench.utils", reason="flashinfer-bench comes with `make test`")
    from flashinfer_bench.bench.config import BenchmarkConfig

    if bool(torch.isinf(out).any()) or bool(torch.isnan(out).any()):
        return False
    return not utils.compute_error_stats(out, ref, BenchmarkConfig())[2]


def test_fib_rule_gives_flashinfer_benchs_verdict_where_evoteams_differs():
    """KDA's final_state has atol 3e-2 in evoteam's rule: an element 2e-2 off passes there and fails
    flashinfer-bench's rule (atol = rtol = 1e-2 for every output), as flashinfer-bench itself judges it."""
    from evoteam.harness.check import compare_with_reference, rule_record

    task = load_task("kda_prefill")
    ref = {"output": torch.zeros(4, 2, 128, dtype=torch.bfloat16), "final_state": torch.full((1, 2, 128, 128), 1.0)}
    out = {k: v.clone() for k, v in ref.items()}
    out["final_state"][0, 1, 7, 3] = 1.02  # |err| 2e-2: within evoteam's atol 3e-2, past both of flashinfer-bench's
    assert compare_with_reference(task, out, ref, 0)[0] is None
    failure, _ = compare_with_reference(task, out, ref, 0, fib=True)
    assert failure is not None and failure.check == "mismatch" and failure.index == (0, 1, 7, 3), failure
    assert not _fib_passes(out["final_state"], ref["final_state"]) and _fib_passes(out["output"], ref["output"])
    assert rule_record(task)["tolerances"]["final_state"] == {"atol": 3e-2, "rtol": 1e-2, "max_rel_norm": 1e-2}
    assert rule_record(task, fib=True) == {"rule": "flashinfer-bench", "atol": 1e-2, "rtol": 1e-2}
    # no relative-norm bound under flashinfer-bench's rule: every element of a small state 9e-3 off (within atol)
    ref["final_state"].fill_(0.1)
    out = {k: v.clone() for k, v in ref.items()}
    out["final_state"] += 9e-3
    assert compare_with_reference(task, out, ref, 0)[0].check == "rel_norm"
    assert compare_with_reference(task, out, ref, 0, fib=True)[0] is None
    assert _fib_passes(out["final_state"], ref["final_state"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fib_rules_verdict_is_flashinfer_benchs_element_by_element(dtype):
    """Under fib_rule, each element's verdict is compute_error_stats's, at the bound too (both in float32), and
    non-finite values are judged as flashinfer-bench judges them: any NaN or Inf in the output fails (a -inf equal
    to the reference's too, which evoteam's rule passes), a finite output where the reference is not passes."""
    from evoteam.harness.check import _compare_output
    from evoteam.task import Tolerance
    from evoteam.tolerance import FIB_TOLERANCE

    gen = torch.Generator().manual_seed(11)
    ref = torch.cat([torch.rand(2000, generator=gen) * 4 - 2, torch.rand(500, generator=gen) * 1e-3,
                     torch.zeros(20)]).to(dtype)
    noise = (torch.rand(ref.shape, generator=gen) * 2 - 1) * (0.012 + 0.012 * ref.float().abs())
    out = (ref.float() + noise).to(dtype)
    # at the bound: |err| just past 1e-2 in float64, not in flashinfer-bench's float32 arithmetic (it passes them)
    edge = torch.tensor([[-0.004400730133056641, 0.005599270109087229], [-0.013297557830810547, -0.0032975575886666775],
                         [-0.008830547332763672, 0.0011694526765495539]])
    if dtype == torch.float32:
        ref[-3:], out[-3:] = edge[:, 0], edge[:, 1]
        assert _compare_output("x", out[-3:], ref[-3:], FIB_TOLERANCE, 0)[0].count == 3  # evoteam's arithmetic
    here = [_compare_output("x", out[i:i + 1], ref[i:i + 1], FIB_TOLERANCE, 0, fib=True)[0] is None
            for i in range(len(ref))]
    there = [_fib_passes(out[i:i + 1], ref[i:i + 1]) for i in range(len(ref))]
    assert 0 < sum(here) < len(ref) and here == there
    whole = _compare_output("x", out, ref, FIB_TOLERANCE, 0, fib=True)[0]
    assert (whole is None) == _fib_passes(out, ref)
    # judged by evoteam's rule (a looser atol here, as KDA's final_state has), the same pass records flashinfer-bench's
    # verdict on every element: its verdict too, element by element, at the bound included
    loose = Tolerance(3e-2, 1e-2, math.inf)
    recorded = [_compare_output("x", out[i:i + 1], ref[i:i + 1], loose, 0)[1].fib_failures == 0
                for i in range(len(ref))]
    assert recorded == there
    assert sum(_compare_output("x", out[i:i + 1], ref[i:i + 1], loose, 0)[0] is None for i in range(len(ref))) > sum(
        there), "evoteam's looser rule passes elements flashinfer-bench's fails"
    tol = Tolerance(1e-2, 1e-2, 1e-2)
    cases = [(-math.inf, -math.inf, True, False), (math.inf, 1.0, False, False), (math.nan, math.nan, True, False),
             (0.5, math.inf, False, True), (0.5, math.nan, False, True)]
    for seen, expected, evoteam_passes, fib_passes in cases:
        o, r = torch.tensor([seen, 1.0], dtype=dtype), torch.tensor([expected, 1.0], dtype=dtype)
        assert (_compare_output("x", o, r, tol, 0)[0] is None) == evoteam_passes, (seen, expected)
        failure = _compare_output("x", o, r, FIB_TOLERANCE, 0, fib=True)[0]
        assert (failure is None) == fib_passes == _fib_passes(o, r), (seen, expected, failure)
        assert failure is None or failure.check == "nan_inf"
        assert (_compare_output("x", o, r, tol, 0)[1].fib_failures == 0) == fib_passes, (seen, expected)
