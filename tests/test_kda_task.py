"""The kda_prefill task: workloads, input maker, reference, seed kernel and tolerances (CPU only).

The seed kernel runs under Triton's interpreter, which must be chosen before triton is imported.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import math  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from evoteam.task import Tolerance, load_module_from_path, load_task, scaled_uuid  # noqa: E402

from conftest import REPO, seed_kernel

TASK = load_task("kda_prefill")
SMALL = TASK.scaled_workloads("small")
INPUT_NAMES = ["q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens",
               "scale", "bounded_gate", "lower_bound", "has_initial_state"]


def small_id(w):
    return w.inputs["cu_seqlens"].tensor_key.removeprefix("small/")


def lengths_of(cu):
    return (cu[1:] - cu[:-1]).tolist()


def within(out, ref, tol: Tolerance) -> bool:
    """|out - ref| <= atol or <= rtol (|ref| + 1e-8) everywhere (NaN fails; flashinfer-bench's rule) and
    ||out - ref|| / ||ref|| <= max_rel_norm."""
    out, ref = out.double(), ref.double()
    err = (out - ref).abs()
    elementwise = bool(((err <= tol.atol) | (err <= tol.rtol * (ref.abs() + 1e-8))).all())
    return elementwise and (err.norm() / ref.norm()).item() <= tol.max_rel_norm


# ----------------------------------------------------------------------------- an independent float64 KDA

def kda_float64(inputs, skip=None, read_before_update=False):
    """Per sequence and head, in float64 and matrix form: S_t = (I - b k k^T) diag(exp g) S_{t-1} + b k v^T,
    o_t = S_t^T q_t. `skip=(n, i)` leaves out token i of sequence n; `read_before_update` reads o_t
    from the decayed state before the delta update (two planted errors)."""
    d = torch.float64
    q, k, v = (inputs[n].to(d) for n in ("q", "k", "v"))
    T, H, K = q.shape
    V = v.shape[-1]
    x = inputs["g"].to(d) + inputs["dt_bias"].to(d).reshape(H, K)
    a = torch.exp(inputs["A_log"].to(d))
    cu = inputs["cu_seqlens"].tolist()
    o = torch.zeros(T, H, V, dtype=d)
    final = torch.zeros(len(cu) - 1, H, K, V, dtype=d)
    eye = torch.eye(K, dtype=d)
    for n in range(len(cu) - 1):
        for h in range(H):
            if inputs["has_initial_state"]:
                S = inputs["initial_state"][n, h].to(d).clone()
            else:
                S = torch.zeros(K, V, dtype=d)
            for i, t in enumerate(range(cu[n], cu[n + 1])):
                qt = q[t, h] / torch.sqrt(q[t, h] @ q[t, h] + 1e-6) * inputs["scale"]
                kt = k[t, h] / torch.sqrt(k[t, h] @ k[t, h] + 1e-6)
                if inputs["bounded_gate"]:
                    g = inputs["lower_bound"] / (1 + torch.exp(-a[h] * x[t, h]))
                else:
                    g = -a[h] * torch.log1p(torch.exp(x[t, h]))
                b = 1 / (1 + math.exp(-float(inputs["beta"][t, h])))
                if skip == (n, i):
                    o[t, h] = S.T @ qt
                    continue
                decayed = torch.diag(torch.exp(g)) @ S
                S = (eye - b * torch.outer(kt, kt)) @ decayed + b * torch.outer(kt, v[t, h])
                o[t, h] = (decayed if read_before_update else S).T @ qt
            final[n, h] = S
    return o, final


@pytest.fixture(scope="module")
def small_cases():
    """(workload, inputs, reference outputs, float64 outputs) for every small workload."""
    cases = []
    for w in SMALL:
        inputs = TASK.make_inputs(w, torch.Generator().manual_seed(7), "cpu")
        cases.append((w, inputs, TASK.reference(inputs), kda_float64(inputs)))
    return cases


# ----------------------------------------------------------------------------- workloads

def test_workloads_load_and_are_reproducible(tmp_path):
    d = TASK.definition
    assert d.name == "kda_prefill_d128" and d.op_type == "kda"
    assert list(d.inputs) == INPUT_NAMES and list(d.outputs) == ["output", "final_state"]
    assert d.const_axes() == {"head_dim": 128}
    assert "def run(" in d.reference  # inline in definition.json

    ws = TASK.workloads
    assert 20 <= len(ws) <= 30
    assert len({w.uuid for w in ws}) == len(ws)
    gen = load_module_from_path(TASK.folder / "make_workloads.py")
    for w in ws:
        key = w.inputs["cu_seqlens"].tensor_key
        assert w.uuid == gen.workload_uuid(key)
        cu = TASK.module.cu_seqlens_of(w)  # checks cu_seqlens against the axes
        assert cu.dtype == torch.int32 and min(lengths_of(cu)) >= 1
        assert w.axes["num_v_heads"] in (8, 16, 32)
        assert 1024 <= w.axes["seq_len"] <= 16384
    heads_by_total = {(w.axes["seq_len"], w.axes["num_v_heads"]) for w in ws}
    assert (16384, 32) in heads_by_total
    bounded = [w.inputs["bounded_gate"].value for w in ws]
    init = [w.inputs["has_initial_state"].value for w in ws]
    assert any(bounded) and not all(bounded) and any(init) and not all(init)
    varlen = [w for w in ws if len(set(lengths_of(TASK.module.cu_seqlens_of(w)))) > 1]
    assert 4 <= len(varlen) and max(w.axes["num_sequences"] for w in varlen) >= 8

    # Regenerating gives the same files, byte for byte.
    gen.write(tmp_path)
    for name in ("workloads.jsonl", "cu_seqlens.safetensors"):
        assert (tmp_path / name).read_bytes() == (TASK.folder / name).read_bytes(), name
    first = json.loads((TASK.folder / "workloads.jsonl").read_text().splitlines()[0])
    assert first["solution"] is None and first["evaluation"] is None


def test_small_scale():
    assert TASK.scaled_workloads("full") == TASK.workloads
    with pytest.raises(ValueError):
        TASK.scaled_workloads("medium")
    full = {w.uuid: w for w in TASK.workloads}
    assert 3 <= len(SMALL) <= 4
    for w in SMALL:
        assert w.uuid not in full and w.uuid == scaled_uuid(w.origin, "small") and w.axes != full[w.origin].axes
        assert w.axes["num_v_heads"] == 2 and w.axes["seq_len"] <= 256
        assert w.inputs["bounded_gate"] == full[w.origin].inputs["bounded_gate"]
        assert w.inputs["has_initial_state"] == full[w.origin].inputs["has_initial_state"]
        TASK.module.cu_seqlens_of(w)
    kinds = {(w.inputs["bounded_gate"].value, w.inputs["has_initial_state"].value) for w in SMALL}
    assert len(kinds) >= 3 and {b for b, _ in kinds} == {False, True} and {i for _, i in kinds} == {False, True}
    lengths = [lengths_of(TASK.module.cu_seqlens_of(w)) for w in SMALL]
    assert any(len(set(x)) > 1 for x in lengths) and any(1 in x for x in lengths)


def test_make_inputs_deterministic_and_well_formed():
    for w in SMALL + TASK.workloads[:1]:
        a = TASK.make_inputs(w, torch.Generator().manual_seed(3), "cpu")
        b = TASK.make_inputs(w, torch.Generator().manual_seed(3), "cpu")
        c = TASK.make_inputs(w, torch.Generator().manual_seed(4), "cpu")
        assert list(a) == INPUT_NAMES
        shapes = TASK.definition.input_shapes(TASK.var_axes(w, a))
        for name, spec in TASK.definition.inputs.items():
            if spec.shape is None:
                assert a[name] == b[name] == c[name] == w.inputs[name].value
                continue
            assert tuple(a[name].shape) == shapes[name] and str(a[name].dtype) == f"torch.{spec.dtype}"
            assert torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)), name
        assert torch.equal(a["cu_seqlens"], c["cu_seqlens"])
        assert not torch.equal(a["q"], c["q"]) and not torch.equal(a["dt_bias"], c["dt_bias"])
        if a["has_initial_state"]:
            assert torch.isfinite(a["initial_state"]).all()
        else:
            assert torch.isnan(a["initial_state"]).all()
        assert ((a["A_log"] >= 0) & (a["A_log"] <= math.log(16))).all()
        dt = torch.nn.functional.softplus(a["dt_bias"])
        assert ((dt > 0.99e-3) & (dt < 1.01e-1)).all()
    assert TASK.definition.output_shapes(TASK.var_axes(SMALL[0], a))  # all output axes are bound


def test_min_bytes():
    w = next(w for w in TASK.workloads if w.inputs["has_initial_state"].value and w.axes["num_sequences"] > 1)
    inputs = TASK.make_inputs(w, torch.Generator().manual_seed(0), "cpu")
    T, H, N = w.axes["seq_len"], w.axes["num_v_heads"], w.axes["num_sequences"]
    state = N * H * 128 * 128 * 4
    expected = T * H * 128 * 2 * 5 + T * H * 2 + H * 4 + H * 128 * 4 + (N + 1) * 4 + 2 * state
    assert TASK.min_bytes(w, inputs) == expected
    inputs["has_initial_state"] = False
    assert TASK.min_bytes(w, inputs) == expected - state


# ----------------------------------------------------------------------------- reference

def test_reference_matches_float64(small_cases):
    for w, _, ref, (o64, final64) in small_cases:
        assert ref["output"].dtype == torch.bfloat16 and ref["final_state"].dtype == torch.float32
        fs_err = (ref["final_state"].double() - final64).abs()
        assert fs_err.max().item() < 1e-4, small_id(w)
        assert (fs_err.norm() / final64.norm()).item() < 1e-5, small_id(w)
        # o is rounded to bf16 (8 significant bits) from a value that is ~1e-6 off.
        o_err = (ref["output"].double() - o64).abs()
        assert bool((o_err <= 2.0 ** -8 * o64.abs() + 1e-6).all()), small_id(w)
        assert torch.isfinite(ref["final_state"]).all()  # initial_state (NaN when absent) is not read


def test_planted_errors_fail_the_tolerances(small_cases):
    tol_o, tol_fs = TASK.tolerance("output"), TASK.tolerance("final_state")
    assert tol_o == Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=1e-2)
    for w, inputs, _, (o64, final64) in small_cases:
        ref = TASK.reference(inputs)
        assert within(o64, ref["output"], tol_o) and within(final64, ref["final_state"], tol_fs)
        first_len = int(inputs["cu_seqlens"][1])
        # One token of the first sequence left out, 8 before its end. (Much further back, the
        # decay and the delta rule can have overwritten a token's contribution to the final state.)
        _, final_skip = kda_float64(inputs, skip=(0, max(first_len - 8, first_len // 2)))
        assert not within(final_skip, ref["final_state"], tol_fs), small_id(w)
        # o read out before the delta update instead of after it.
        o_early, _ = kda_float64(inputs, read_before_update=True)
        assert not within(o_early, ref["output"], tol_o), small_id(w)


# ----------------------------------------------------------------------------- seed kernel

def test_seed_kernel_matches_reference_under_interpreter(small_cases):
    assert os.environ.get("TRITON_INTERPRET") == "1"
    kernel = seed_kernel(TASK)
    for w, inputs, ref, _ in small_cases:
        snapshot = {n: x.clone() for n, x in inputs.items() if isinstance(x, torch.Tensor)}
        shapes = TASK.output_shapes(w, inputs)
        outs = {n: torch.full(shapes[n], float("nan"), dtype=getattr(torch, spec.dtype))
                for n, spec in TASK.definition.outputs.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's exp overflow inside sigmoid
            assert kernel(**inputs, **outs) is None
        for n, x in snapshot.items():
            assert torch.equal(x.view(torch.uint8), inputs[n].view(torch.uint8)), f"{n} modified"
        for name, out in outs.items():
            assert torch.isfinite(out).all(), f"{small_id(w)}: {name} not fully written"
            assert within(out, ref[name], TASK.tolerance(name)), f"{small_id(w)}: {name}"
        # The seed keeps the recurrence in fp32 and rounds o to nearest: far inside the tolerances.
        # (Rounding o by truncation, as the interpreter's .to(tl.bfloat16) does, would give ~4e-3.)
        fs_err = (outs["final_state"] - ref["final_state"]).norm() / ref["final_state"].norm()
        o_err = (outs["output"].double() - ref["output"].double()).norm() / ref["output"].double().norm()
        assert fs_err.item() < 1e-5 and o_err.item() < 1e-3


def test_seed_kernel_passes_the_shared_checker():
    from evoteam.harness.check import check_kernel

    kernel = seed_kernel(TASK)
    w = next(w for w in SMALL if small_id(w) == "t8192_n2x4096_h32_bounded_init")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = check_kernel(TASK, w, kernel, seed=2024)
    assert result.passed, result.summary()
    assert result.errors["final_state"].rel_norm < 1e-5 and result.errors["output"].rel_norm < 1e-3

    def reads_absent_initial_state(**kw):
        kernel(**{**kw, "has_initial_state": True})

    w = next(w for w in SMALL if not w.inputs["has_initial_state"].value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = check_kernel(TASK, w, reads_absent_initial_state, seed=2024)
    assert not result.passed and result.failure.check == "nan_inf"


def test_reference_runs_on_task_folder_path():
    # The committed definition's reference is the code the task runs.
    assert TASK.definition.reference == json.loads((TASK.folder / "definition.json").read_text())["reference"]
    assert TASK.reference_module.__file__.endswith("definition.json:reference")


@pytest.mark.parametrize("has_initial_state", [True, False])
def test_sequences_walked_side_by_side_get_what_each_gets_alone(has_initial_state):
    """The reference steps all sequences at once (longest first); each sequence's outputs must be bit for bit those
    of the same sequence run alone, with an empty sequence and uneven lengths among them."""
    g = torch.Generator().manual_seed(11)
    lengths, H, K = [5, 0, 17, 1, 9], 2, 128
    T, N = sum(lengths), len(lengths)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    inputs = {"q": randn(T, H, K).bfloat16(), "k": randn(T, H, K).bfloat16(), "v": randn(T, H, K).bfloat16(),
              "g": randn(T, H, K).bfloat16(), "beta": randn(T, H).bfloat16(), "A_log": randn(H),
              "dt_bias": randn(H * K), "initial_state": randn(N, H, K, K), "cu_seqlens": cu, "scale": K ** -0.5,
              "bounded_gate": False, "lower_bound": -5.0, "has_initial_state": has_initial_state}
    together = TASK.reference(inputs)
    for n in range(N):
        a, b = int(cu[n]), int(cu[n + 1])
        alone = TASK.reference({**inputs, **{name: inputs[name][a:b] for name in ("q", "k", "v", "g", "beta")},
                                "initial_state": inputs["initial_state"][n:n + 1],
                                "cu_seqlens": torch.tensor([0, b - a], dtype=torch.int32)})
        assert torch.equal(together["output"][a:b], alone["output"]), n
        assert torch.equal(together["final_state"][n], alone["final_state"][0]), n


# ----------------------------------------------------------------------------- FlashInfer's recurrent_kda
# FlashInfer 0.7.4's trace template recurrent_kda (flashinfer/trace/templates/kda.py, as released on PyPI): its axes,
# and the dims of the tensors this definition shares with it (scalars: None)
TEMPLATE_AXES = {"batch_size", "seq_len", "num_q_heads", "num_v_heads", "head_dim", "state_pool_size",
                 "source_pool_size", "num_sequences", "num_checkpoints", "num_checkpoint_offsets", "kg_dim"}
TEMPLATE_TENSORS = {
    "q": ["batch_size", "seq_len", "num_q_heads", "head_dim"], "k": ["batch_size", "seq_len", "num_q_heads", "head_dim"],
    "v": ["batch_size", "seq_len", "num_v_heads", "head_dim"], "g": ["batch_size", "seq_len", "num_v_heads", "head_dim"],
    "beta": ["batch_size", "seq_len", "num_v_heads"], "scale": None, "lower_bound": None,
    "initial_state": ["state_pool_size", "num_v_heads", "head_dim", "head_dim"],
    "output": ["batch_size", "seq_len", "num_v_heads", "head_dim"],
    "final_state": ["state_pool_size", "num_v_heads", "head_dim", "head_dim"],
}
# recurrent_kda's own arguments that its template leaves out (A_log, dt_bias, cu_seqlens), and this definition's
# flags for what recurrent_kda says with an absent argument (bounded_gate: lower_bound given; has_initial_state:
# initial_state given); the axis of cu_seqlens
NOT_IN_TEMPLATE = {"A_log", "dt_bias", "cu_seqlens", "bounded_gate", "has_initial_state", "len_cu_seqlens"}


def test_the_definition_takes_recurrent_kdas_names_axes_and_dims_where_the_math_is_the_same():
    """Every axis, input and output has recurrent_kda's name where it has a counterpart there, with its dims: packed
    as its batch_size 1 (that leading axis dropped), one state per sequence (its state pool of num_sequences slots).
    The rest is the documented list (docs/interop.md)."""
    d = TASK.definition
    assert d.op_type == "kda" and set(d.axes) - TEMPLATE_AXES == {"len_cu_seqlens"}
    ours = {**d.inputs, **d.outputs}
    assert set(ours) - set(TEMPLATE_TENSORS) == NOT_IN_TEMPLATE - {"len_cu_seqlens"}
    for name, spec in ours.items():
        if name in TEMPLATE_TENSORS:
            theirs = TEMPLATE_TENSORS[name]
            theirs = None if theirs is None else [("num_sequences" if a == "state_pool_size" else a)
                                                  for a in theirs if a != "batch_size"]
            assert (None if spec.shape is None else list(spec.shape)) == theirs, name
    for name in ("initial_state", "final_state", "output"):  # the interop docs say what differs
        assert name in (REPO / "docs" / "interop.md").read_text()


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def test_a_recurrent_kda_call_and_this_definitions_inputs_convert_both_ways():
    """to_recurrent_kda gives recurrent_kda's arguments (its names, batch_size 1, [V, K] states, raw gate and beta),
    from_recurrent_kda takes them back, unchanged; a call of batch_size 2 without cu_seqlens (two rows, one sequence
    each) computes here what each sequence computes alone; a call of math this definition lacks is refused."""
    module = TASK.module
    for w in TASK.scaled_workloads("small")[:4]:
        inputs = TASK.make_inputs(w, torch.Generator().manual_seed(3), "cpu")
        call = module.to_recurrent_kda(inputs)
        assert call["q"].shape[0] == 1 and set(call) >= {"q", "k", "v", "g", "beta", "initial_state", "scale",
                                                          "lower_bound", "use_gate_in_kernel", "beta_is_logit"}
        if inputs["has_initial_state"]:
            assert torch.equal(call["initial_state"], inputs["initial_state"].transpose(-1, -2))
        back = module.from_recurrent_kda(call)
        for name, value in inputs.items():
            assert _same(back[name], value) if isinstance(value, torch.Tensor) else back[name] == value, (w.uuid, name)
    # two rows of 40 tokens, as a FlashInfer user's decode-shaped batch calls it: [B, T, H, K], states [B, H, V, K]
    g = torch.Generator().manual_seed(4)
    B, T, H, K = 2, 40, 2, 128

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    call = {"q": randn(B, T, H, K).bfloat16(), "k": randn(B, T, H, K).bfloat16(), "v": randn(B, T, H, K).bfloat16(),
            "g": randn(B, T, H, K).bfloat16(), "beta": randn(B, T, H).bfloat16(), "A_log": randn(H).abs(),
            "dt_bias": randn(H * K) * 0.1, "initial_state": randn(B, H, K, K) * 0.5, "lower_bound": -5.0,
            **module.RECURRENT_KDA_FLAGS}
    both = TASK.reference(module.from_recurrent_kda(call))
    for b in range(B):
        alone = TASK.reference(module.from_recurrent_kda(
            {**call, **{n: call[n][b:b + 1] for n in ("q", "k", "v", "g", "beta", "initial_state")}}))
        # the same arithmetic, the sequences side by side or alone (a batched product may round differently)
        torch.testing.assert_close(both["output"][b * T:(b + 1) * T], alone["output"], rtol=0, atol=1e-2)
        torch.testing.assert_close(both["final_state"][b], alone["final_state"][0], rtol=1e-5, atol=1e-6)
    for change, words in (({"use_gate_in_kernel": False}, "use_gate_in_kernel"), ({"beta_is_logit": False}, "beta"),
                          ({"v": call["v"][:, :, :1]}, "value heads"), ({"ssm_state_indices": torch.zeros(2)}, "pool")):
        with pytest.raises(ValueError, match=words):
            module.from_recurrent_kda({**call, **change})
