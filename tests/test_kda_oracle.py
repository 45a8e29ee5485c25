"""kda_prefill's oracle (kernels/kda_prefill/oracle.py, a Triton kernel) computes reference.py's math, and
Task.reference uses it only where it should (CPU only; the full-size check on a GPU is in tests/test_gpu.py).

The oracle runs under Triton's interpreter, which must be chosen before triton is imported.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from evoteam.task import load_module_from_path, load_task  # noqa: E402

TASK = load_task("kda_prefill")
# Loaded afresh here: a copy loaded earlier in the session may have been decorated without the interpreter.
ORACLE = load_module_from_path(TASK.folder / "oracle.py", "test_kda_oracle_interpreted")
REFERENCE = TASK.reference_module  # the definition's reference code


def make_case(lengths, H=2, K=128, V=128, bounded_gate=False, has_initial_state=True, gate_spread=1.0, seed=0):
    """Random inputs drawn as kernels/kda_prefill/task.py draws them, for sequences of the given lengths;
    `gate_spread` widens the raw gate g (past softplus's threshold of 20, and to where log1p(exp(x)) underflows)."""
    g = torch.Generator().manual_seed(seed)
    T, N = sum(lengths), len(lengths)
    bf16 = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def uniform(*shape, low, high):
        return torch.rand(*shape, generator=g) * (high - low) + low

    dt = torch.exp(uniform(H * K, low=math.log(1e-3), high=math.log(1e-1)))
    return {
        "q": randn(T, H, K).to(bf16), "k": randn(T, H, K).to(bf16), "v": randn(T, H, V).to(bf16),
        "g": (randn(T, H, K) * gate_spread).to(bf16), "beta": randn(T, H).to(bf16),
        "A_log": torch.log(uniform(H, low=1.0, high=16.0)), "dt_bias": dt + torch.log(-torch.expm1(-dt)),
        # Without an initial state it must not be read: NaN there would show in the outputs.
        "initial_state": randn(N, H, K, V) * 0.1 if has_initial_state else torch.full((N, H, K, V), float("nan")),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32),
        "scale": K ** -0.5, "bounded_gate": bounded_gate, "lower_bound": -5.0,
        "has_initial_state": has_initial_state,
    }


def run(module, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's exp overflow inside the interpreter's sigmoid
        return module.run(*[inputs[n] for n in TASK.definition.inputs])


def assert_agree(out, ref):
    (o, fs), (o_ref, fs_ref) = out, ref
    assert o.dtype == torch.bfloat16 and o.shape == o_ref.shape
    assert fs.dtype == torch.float32 and fs.shape == fs_ref.shape
    assert torch.isfinite(o).all() and torch.isfinite(fs).all()
    # The state is fp32 both ways, only summed in another order: agreement to a few ulps.
    assert ((fs - fs_ref).norm() / fs_ref.norm()).item() < 1e-5
    assert (fs - fs_ref).abs().max().item() < 1e-4
    # o is rounded to bf16 once: at most about an ulp apart where the fp32 values straddle a rounding boundary.
    o, o_ref = o.double(), o_ref.double()
    assert torch.allclose(o, o_ref, atol=1e-2, rtol=1e-2)
    assert ((o - o_ref).norm() / o_ref.norm()).item() < 1e-3


@pytest.mark.parametrize("has_initial_state", [True, False], ids=["init", "no_init"])
@pytest.mark.parametrize("gate", ["softplus", "bounded", "softplus_wide"])
def test_oracle_matches_reference_under_interpreter(gate, has_initial_state):
    assert os.environ.get("TRITON_INTERPRET") == "1"
    # Sequences of uneven lengths, one of them empty (its final state is its initial state, or zeros).
    inputs = make_case([5, 32, 0, 27], bounded_gate=gate == "bounded", has_initial_state=has_initial_state,
                       gate_spread=12.0 if gate == "softplus_wide" else 1.0, seed=len(gate) + has_initial_state)
    if gate == "softplus_wide":
        x = inputs["g"].float() + inputs["dt_bias"].view(2, 128)
        assert (x > 20).any() and (x < -17).any()  # both ends of softplus are exercised
    snapshot = {n: x.clone() for n, x in inputs.items() if isinstance(x, torch.Tensor)}
    assert_agree(run(ORACLE, inputs), run(REFERENCE, inputs))
    for n, x in snapshot.items():
        assert torch.equal(x, inputs[n]) or (x.isnan().all() and inputs[n].isnan().all()), f"{n} modified"


def test_oracle_handles_other_head_sizes():
    # Not powers of two: the kernel pads its blocks and masks the padding.
    inputs = make_case([7, 12], H=3, K=48, V=80, seed=5)
    assert_agree(run(ORACLE, inputs), run(REFERENCE, inputs))


def test_task_reference_uses_reference_py_on_cpu(monkeypatch):
    assert TASK.oracle_module is not None

    def oracle_must_not_run(*args):
        raise AssertionError("the oracle ran on CPU inputs")

    monkeypatch.setattr(TASK.oracle_module, "run", oracle_must_not_run)
    monkeypatch.delenv("TRITON_INTERPRET")  # the inputs' device alone decides here
    inputs = make_case([3, 6], seed=7)
    out = TASK.reference(inputs)
    ref = REFERENCE.run(*[inputs[n] for n in TASK.definition.inputs])
    assert torch.equal(out["output"], ref[0]) and torch.equal(out["final_state"], ref[1])


def test_task_reference_uses_the_oracle_on_cuda_inputs(monkeypatch):
    """Stand-ins for CUDA tensors: the oracle answers, unless Triton runs interpreted (it would crawl)."""
    on_gpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))
    inputs = {n: on_gpu for n in TASK.definition.inputs}
    monkeypatch.setattr(TASK.oracle_module, "run", lambda *args: ("oracle o", "oracle state"))
    monkeypatch.setattr(TASK.reference_module, "run", lambda *args: ("reference o", "reference state"))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert TASK.reference(inputs) == {"output": "oracle o", "final_state": "oracle state"}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert TASK.reference(inputs) == {"output": "reference o", "final_state": "reference state"}
    # Output count is still checked.
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(TASK.oracle_module, "run", lambda *args: ("only o",))
    with pytest.raises(RuntimeError, match="returned 1 outputs"):
        TASK.reference(inputs)
