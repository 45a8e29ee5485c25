"""The MLA paged decode task: definition, workloads, index synthesis, reference and seed kernel."""

import os

# The Triton interpreter must be chosen before triton is imported anywhere in the process.
os.environ.setdefault("TRITON_INTERPRET", "1")

import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from mla_inputs import SM_SCALE, mla_inputs  # noqa: E402

from evoteam.task import Tolerance, load_task, scaled_uuid  # noqa: E402

from conftest import seed_kernel

FULL_NUM_PAGES = 989_669

# sha256 of kv_indptr ('<i4' bytes) followed by kv_indices ('<i4' bytes), as synthesized: pins
# the synthesis procedure (README.md) so every machine and every later version agrees.
GOLDEN_LAYOUT_SHA256 = {
    # full scale (989,669 pages): batch 1, batch 16, batch 64
    ("00cb2bc2-c7c7-43a1-b857-b516eb2ce061", FULL_NUM_PAGES):
        "5b569ac075500d2b74822bab3eef4cb923655188796a1255e6181dc9fc6afa15",
    ("5e86857b-bb94-4f2c-b9e6-6000c253dc10", FULL_NUM_PAGES):
        "3e82582a137d4f9eaf8ae8f4b540d62ce99a8139403cd177ccc0b74cc94f2044",
    ("d771f51c-9886-42bf-a55f-2ff996ba3725", FULL_NUM_PAGES):
        "9ad92ec92cd791e7e698bc46d85ac5cf8132d90acd2d12015656f16ec9494b55",
    # small scale (4,096 pages)
    ("a128f96f-583a-48cb-aceb-d70e0015aca3", 4096):
        "52bdc6134a0ece40af339c13057c6cb00fb44bae9c42ddb8a96c8448219cb5ff",
}


@pytest.fixture(scope="module")
def task():
    return load_task("mla_decode")


def layout_sha256(kv_indptr: np.ndarray, kv_indices: np.ndarray) -> str:
    return hashlib.sha256(kv_indptr.astype("<i4").tobytes() + kv_indices.astype("<i4").tobytes()).hexdigest()


def within(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> tuple[bool, str]:
    """Every element checked: NaN fails; infinities must match exactly; finite elements within
    atol or within rtol * (|ref| + 1e-8) (flashinfer-bench's rule); the relative norm over finite elements
    within max_rel_norm."""
    out = out.detach().cpu().double()
    ref = ref.detach().cpu().double()
    if out.shape != ref.shape:
        return False, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if torch.isnan(out).any():
        return False, f"{int(torch.isnan(out).sum())} NaN elements"
    finite = torch.isfinite(ref)
    if not torch.equal(out[~finite], ref[~finite]) or not torch.isfinite(out[finite]).all():
        return False, "infinities differ"
    diff = (out[finite] - ref[finite]).abs()
    if not bool(((diff <= tol.atol) | (diff <= tol.rtol * (ref[finite].abs() + 1e-8))).all()):
        return False, f"max abs error {diff.max().item():.3g} beyond atol/rtol"
    rel_norm = (diff.norm() / ref[finite].norm().clamp_min(1e-30)).item() if diff.numel() else 0.0
    if rel_norm > tol.max_rel_norm:
        return False, f"relative norm {rel_norm:.3g} > {tol.max_rel_norm}"
    return True, f"max abs {diff.max().item() if diff.numel() else 0.0:.3g}, rel norm {rel_norm:.3g}"


# --------------------------------------------------------------------------- definition and workloads


def test_definition(task):
    d = task.definition
    assert d.name == "mla_paged_decode_h16_ckv512_kpe64_ps1"
    assert d.op_type == "mla_paged"
    assert list(d.inputs) == ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices", "sm_scale"]
    assert list(d.outputs) == ["output", "lse"]
    assert d.const_axes() == {"num_qo_heads": 16, "head_dim_ckv": 512, "head_dim_kpe": 64, "page_size": 1}
    assert {k for k, a in d.axes.items() if a.type == "var"} == {
        "batch_size", "num_pages", "len_indptr", "num_kv_indices"}
    assert d.inputs["sm_scale"].shape is None and d.inputs["sm_scale"].dtype == "float32"
    assert d.inputs["kv_indptr"].dtype == d.inputs["kv_indices"].dtype == "int32"
    assert d.outputs["output"].dtype == "bfloat16" and d.outputs["lse"].dtype == "float32"
    assert "len_indptr == batch_size + 1" in d.constraints
    # The committed definition is complete: its reference is the code the task runs (no reference.py beside it)
    assert d.reference == json.loads((task.folder / "definition.json").read_text())["reference"]
    assert task.reference_module.__file__.endswith("definition.json:reference")
    assert not (task.folder / "reference.py").exists()
    assert d.output_shapes({"batch_size": 3}) == {"output": (3, 16, 512), "lse": (3, 16)}


def test_all_47_workloads_load(task):
    ws = task.scaled_workloads("full")
    assert len(ws) == 47
    assert len({w.uuid for w in ws}) == 47
    assert Counter(w.axes["batch_size"] for w in ws) == {1: 15, 16: 16, 64: 16}
    for w in ws:
        assert w.axes["len_indptr"] == w.axes["batch_size"] + 1
        assert w.axes["num_pages"] == FULL_NUM_PAGES
        assert w.axes["num_kv_indices"] <= w.axes["num_pages"]
        assert w.inputs["sm_scale"].type == "scalar" and w.inputs["sm_scale"].value == SM_SCALE
    tokens = {b: sorted(w.axes["num_kv_indices"] for w in ws if w.axes["batch_size"] == b) for b in (1, 16, 64)}
    assert (tokens[1][0], tokens[1][-1]) == (8, 2708)
    assert (tokens[16][0], tokens[16][-1]) == (457, 17257)
    assert (tokens[64][0], tokens[64][-1]) == (9945, 75145)
    with pytest.raises(ValueError):
        task.scaled_workloads("medium")


def test_small_scale(task):
    full = {w.uuid: w for w in task.workloads}
    small = task.scaled_workloads("small")
    assert 3 <= len(small) <= 4
    assert {w.axes["batch_size"] for w in small} == {1, 16}
    for w in small:  # other axes, so another identity: a uuid derived from the published one
        assert w.uuid not in full and w.uuid == scaled_uuid(w.origin, "small")
        assert w.axes["num_pages"] == task.module.SMALL_NUM_PAGES
        assert w.axes["num_kv_indices"] == full[w.origin].axes["num_kv_indices"] <= w.axes["num_pages"]
        assert {k: v for k, v in w.axes.items() if k != "num_pages"} == {
            k: v for k, v in full[w.origin].axes.items() if k != "num_pages"}
    # The task's workloads are left untouched.
    assert all(w.axes["num_pages"] == FULL_NUM_PAGES for w in task.workloads)


def test_tolerances(task):
    assert task.tolerance("lse") == Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=1e-2)
    assert task.tolerance("output") == Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=1e-2)


# --------------------------------------------------------------------------- index synthesis


def test_synthesis_valid_and_deterministic(task):
    layout = task.module.kv_layout
    for w in task.workloads + task.scaled_workloads("small"):
        kv_indptr, kv_indices = layout(w)
        b, n, pages = w.axes["batch_size"], w.axes["num_kv_indices"], w.axes["num_pages"]
        assert kv_indptr.dtype == np.int32 and kv_indices.dtype == np.int32
        assert kv_indptr.shape == (b + 1,) and kv_indices.shape == (n,)
        lengths = np.diff(kv_indptr)
        assert kv_indptr[0] == 0 and lengths.sum() == n and lengths.min() >= 1
        assert kv_indices.min() >= 0 and kv_indices.max() < pages
        assert np.unique(kv_indices).size == n
    # Identical when made again from scratch (bypassing the cache).
    w = task.workloads[-1]  # batch 64
    a = layout(w)
    task.module._kv_layout.cache_clear()
    b = layout(w)
    assert a is not b and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # The pages are scattered over the whole pool, not packed at its start.
    big = max(task.workloads, key=lambda w: w.axes["num_kv_indices"])
    assert layout(big)[1].max() > 0.9 * FULL_NUM_PAGES and layout(big)[1].min() < 0.1 * FULL_NUM_PAGES


def test_synthesis_golden_hashes(task):
    full = {w.uuid: w for w in task.workloads}
    small = {w.origin: w for w in task.scaled_workloads("small")}
    for (uuid, pages), digest in GOLDEN_LAYOUT_SHA256.items():
        w = full[uuid] if pages == FULL_NUM_PAGES else small[uuid]
        assert w.axes["num_pages"] == pages
        assert layout_sha256(*task.module.kv_layout(w)) == digest, uuid


def test_make_inputs(task):
    w = task.scaled_workloads("small")[2]
    g = torch.Generator("cpu").manual_seed(0)
    inputs = task.make_inputs(w, g, "cpu")
    b, n = w.axes["batch_size"], w.axes["num_kv_indices"]
    expect = {"q_nope": ((b, 16, 512), torch.bfloat16), "q_pe": ((b, 16, 64), torch.bfloat16),
              "ckv_cache": ((4096, 1, 512), torch.bfloat16), "kpe_cache": ((4096, 1, 64), torch.bfloat16),
              "kv_indptr": ((b + 1,), torch.int32), "kv_indices": ((n,), torch.int32)}
    for name, (shape, dtype) in expect.items():
        assert tuple(inputs[name].shape) == shape and inputs[name].dtype == dtype, name
    assert isinstance(inputs["sm_scale"], float) and inputs["sm_scale"] == SM_SCALE
    kv_indptr, kv_indices = task.module.kv_layout(w)
    assert np.array_equal(inputs["kv_indptr"].numpy(), kv_indptr)
    assert np.array_equal(inputs["kv_indices"].numpy(), kv_indices)
    assert task.var_axes(w, inputs) == w.axes
    # Fresh random data from the generator; the same index structure every time.
    again = task.make_inputs(w, g, "cpu")
    assert not torch.equal(inputs["q_nope"], again["q_nope"])
    assert torch.equal(inputs["kv_indices"], again["kv_indices"])
    same = task.make_inputs(w, torch.Generator("cpu").manual_seed(0), "cpu")
    assert all(torch.equal(inputs[k], same[k]) for k in expect)


# --------------------------------------------------------------------------- reference


def float64_mla(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    """Independent float64 MLA decode: per request and head, an explicit max-shifted softmax."""
    bsz, heads, d_ckv = q_nope.shape
    out = torch.zeros(bsz, heads, d_ckv, dtype=torch.float64)
    lse = torch.full((bsz, heads), -math.inf, dtype=torch.float64)
    for b in range(bsz):
        pages = [int(p) for p in kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])]]
        if not pages:
            continue
        keys_c = torch.stack([ckv_cache[p, 0].double() for p in pages])  # [L, 512]
        keys_p = torch.stack([kpe_cache[p, 0].double() for p in pages])  # [L, 64]
        for h in range(heads):
            scores = ((keys_c * q_nope[b, h].double()).sum(1) + (keys_p * q_pe[b, h].double()).sum(1)) * sm_scale
            top = scores.max()
            weights = torch.exp(scores - top)
            total = weights.sum()
            out[b, h] = (weights[:, None] * keys_c).sum(0) / total
            lse[b, h] = (top + torch.log(total)) / math.log(2.0)
    return out, lse


@pytest.mark.parametrize("lengths,num_pages", [([5, 0, 37, 1], 64), ([0], 8), ([130, 3], 200)])
def test_reference_matches_float64(task, lengths, num_pages):
    g = torch.Generator("cpu").manual_seed(sum(lengths) + num_pages)
    bsz = len(lengths)
    q_nope = (torch.randn(bsz, 16, 512, generator=g) * 0.5).to(torch.bfloat16)
    q_pe = torch.randn(bsz, 16, 64, generator=g).to(torch.bfloat16)
    ckv_cache = torch.randn(num_pages, 1, 512, generator=g).to(torch.bfloat16)
    kpe_cache = torch.randn(num_pages, 1, 64, generator=g).to(torch.bfloat16)
    kv_indptr = torch.tensor(np.concatenate(([0], np.cumsum(lengths))), dtype=torch.int32)
    kv_indices = torch.randperm(num_pages, generator=g)[: sum(lengths)].to(torch.int32)
    args = (q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, SM_SCALE)

    output, lse = task.reference_module.run(*args)
    exp_out, exp_lse = float64_mla(*args)
    assert output.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert output.shape == (bsz, 16, 512) and lse.shape == (bsz, 16)
    # bf16 output: at most one rounding of an fp32-accurate value.
    assert torch.allclose(output.double(), exp_out, atol=1e-5, rtol=2 ** -8)
    finite = torch.isfinite(exp_lse)
    assert torch.allclose(lse.double()[finite], exp_lse[finite], atol=1e-5, rtol=1e-5)
    for b, n in enumerate(lengths):
        if n == 0:
            assert torch.all(output[b] == 0) and torch.all(torch.isneginf(lse[b]))
    # Through the task, inputs by name.
    named = dict(zip(task.definition.inputs, args))
    via_task = task.reference(named)
    assert torch.equal(via_task["output"], output) and torch.equal(via_task["lse"], lse)


# --------------------------------------------------------------------------- seed kernel


@pytest.fixture(scope="module")
def seed(task):
    return seed_kernel(task)


def run_seed_and_check(task, seed, inputs, workload=None):
    bsz = inputs["q_nope"].shape[0]
    shapes = {"output": (bsz, 16, 512), "lse": (bsz, 16)}
    if workload is not None:
        assert task.output_shapes(workload, inputs) == shapes
    outputs = {
        "output": torch.full(shapes["output"], float("nan"), dtype=torch.bfloat16),
        "lse": torch.full(shapes["lse"], float("nan"), dtype=torch.float32),
    }
    assert seed(**inputs, **outputs) is None
    ref = task.reference(inputs)
    for name in ("output", "lse"):
        ok, why = within(outputs[name], ref[name], task.tolerance(name))
        assert ok, f"{name}: {why}"
    # lse is fp32 all the way: it should be far tighter than the tolerance.
    finite = torch.isfinite(ref["lse"])
    assert torch.allclose(outputs["lse"][finite], ref["lse"][finite], atol=1e-4, rtol=1e-5)
    return outputs, ref


def test_seed_kernel_small_workloads(task, seed):
    small = task.scaled_workloads("small")
    assert small
    for i, w in enumerate(small):
        inputs = task.make_inputs(w, torch.Generator("cpu").manual_seed(100 + i), "cpu")
        run_seed_and_check(task, seed, inputs, w)


def test_seed_kernel_empty_and_uneven_requests(task, seed):
    lengths = [0, 1, 33, 0, 64, 95]  # empty, one token, block edges (BLOCK_N = 32)
    inputs = mla_inputs(lengths, seed=7, num_pages=512)
    outputs, _ = run_seed_and_check(task, seed, inputs)
    for b, n in enumerate(lengths):
        if n == 0:
            assert torch.all(outputs["output"][b] == 0) and torch.all(torch.isneginf(outputs["lse"][b]))
