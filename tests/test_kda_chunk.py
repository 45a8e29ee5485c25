"""The kda_prefill chunk family (kernels/kda_prefill/chunk_triton.py) under the Triton interpreter: the full
checker at one point per workload and every other point against the reference, extreme gates (the exact fallback
of the intra-chunk pass), empty sequences and chunk edges against the fp32 reference."""

import os

# The Triton interpreter must be chosen before triton is imported anywhere in the process.
os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from evoteam.families import apply_params, load_families  # noqa: E402
from evoteam.harness.check import check_kernel  # noqa: E402
from evoteam.task import load_module_from_path, load_task  # noqa: E402

KDA = load_task("kda_prefill")
SMALL = {w.origin[:8]: w for w in KDA.scaled_workloads("small")}  # by the published uuid


def chunk_variant(tmp_path, point):
    fam = next(f for f in load_families("kda_prefill") if f.name == "chunk")
    path = tmp_path / f"chunk_{abs(hash(str(sorted(point.items()))))}.py"
    path.write_text(apply_params(fam.path.read_text(), point))  # BK 128: off the space, faster here
    return fam, load_module_from_path(path)


# The full checker (three trials, poisoned outputs, inputs verified unchanged) at one point per workload; the
# checker's own rules are tested in test_check.py. Each point is a kernel of its own under the Triton interpreter
# (6 CPU-s a trial on a 2-core machine), so the other points are checked on one trial of a workload's inputs.
CHECKED = [
    ("5237e6bd", {}),  # bounded gate, initial state, lengths 96 and 65
    ("8cfd1d8d", {"BV": 16, "FUSE_O": False, "intra_maxnreg_bounded": None}),  # bounded, 4 sequences, output pass
    ("15208288", {"BT": 32, "merge": "launch", "segments": 4}),  # softplus gate, merged 32-token halves, runs of chunks
]
POINTS = [
    ("15208288", {"store_early": False}),  # softplus gate, the state pass's operands written after A (v1.4; slower)
    ("5237e6bd", {"BT": 32}),  # chunks of 32 tokens (two 16-row blocks), lengths 96 and 65: a chunk of one token
    ("15208288", {"BT": 32, "FUSE_O": False}),  # softplus gate, 32-token chunks through the output pass
    ("5237e6bd", {"BT": 32, "intra_warps": 2, "intra_maxnreg_bounded": None}),  # the champion's point on batches
    # halves of 32 merged into 64-token steps: lengths 96 (a last chunk of one half) and 65 (a half of one token)
    ("5237e6bd", {"BT": 32, "merge": "launch"}),
    ("15208288", {"BT": 32, "merge": "launch"}),  # softplus gate
    ("8cfd1d8d", {"BT": 32, "merge": "launch", "FUSE_O": False, "BV": 16}),  # 4 sequences, through the output pass
    # the same merge at the end of an intra program that did both halves (measured slower: outside the space)
    ("5237e6bd", {"BT": 32, "merge": "fused"}),
    ("8cfd1d8d", {"BT": 32, "merge": "fused", "FUSE_O": False}),
    # one sequence cut into runs of chunks (160 tokens: 3 runs of one 64-token step; 5 chunks of 32 in runs of 2, 2, 1)
    ("15208288", {"segments": 4}),
    ("15208288", {"BT": 32, "segments": 4}),
    ("15208288", {"BT": 32, "merge": "fused", "segments": 2, "FUSE_O": False}),
]


def _outside(point) -> bool:
    return point.get("merge") == "fused" or point.get("store_early") is False  # measured slower, still run


@pytest.mark.parametrize("uuid,point", CHECKED)
def test_chunk_passes_the_checker(tmp_path, uuid, point):
    fam, module = chunk_variant(tmp_path, point)
    assert fam.contains(module.PARAMS) != _outside(point)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = check_kernel(KDA, SMALL[uuid], module.run, trials=3, seed=4400, device="cpu")
    assert result.passed, result.summary()
    # bf16 operands on tensor cores, like fla's chunk_kda (5e-3 there): well inside the 1e-2 bounds
    assert result.errors["output"].rel_norm < 7e-3 and result.errors["final_state"].rel_norm < 7e-3


@pytest.mark.parametrize("uuid,point", POINTS)
def test_chunk_points_match_the_reference_on_a_workload(tmp_path, uuid, point):
    fam, module = chunk_variant(tmp_path, point)
    assert fam.contains(module.PARAMS) != _outside(point)
    inp = KDA.make_inputs(SMALL[uuid], torch.Generator().manual_seed(4400), "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        err_o, err_s = rel_errors(module, inp)  # outputs start as NaN: one left unwritten fails
    assert err_o < 7e-3 and err_s < 7e-3, (err_o, err_s)


def inputs(lengths, heads, bounded, has_h0, seed, gate_mean=0.0, gate_std=1.0):
    g = torch.Generator().manual_seed(seed)
    T, N, K = sum(lengths), len(lengths), 128
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    dt = torch.exp(torch.rand(heads, K, generator=g) * (math.log(1e-1) - math.log(1e-3)) + math.log(1e-3))
    return {
        "q": randn(T, heads, K).to(bf), "k": randn(T, heads, K).to(bf), "v": randn(T, heads, K).to(bf),
        "g": (randn(T, heads, K) * gate_std + gate_mean).to(bf), "beta": randn(T, heads).to(bf),
        "A_log": torch.log(torch.rand(heads, generator=g) * 15 + 1), "dt_bias": dt + torch.log(-torch.expm1(-dt)),
        "initial_state": randn(N, heads, K, K) * 0.5 if has_h0 else torch.full((N, heads, K, K), float("nan")),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32),
        "scale": K ** -0.5, "bounded_gate": bounded, "lower_bound": -5.0, "has_initial_state": has_h0,
    }


def rel_errors(module, inp):
    T, H, K = inp["q"].shape
    N = inp["cu_seqlens"].numel() - 1
    o = torch.full((T, H, K), float("nan"), dtype=torch.bfloat16)
    final_state = torch.full((N, H, K, K), float("nan"))
    module.run(**inp, output=o, final_state=final_state)
    ref = KDA.reference(inp)
    return tuple(((out.double() - ref[name].double()).norm() / ref[name].double().norm()).item()
                 for name, out in (("output", o), ("final_state", final_state)))


@pytest.mark.parametrize("bounded", [False, True])
@pytest.mark.parametrize("gate_mean,gate_std", [(20.0, 0.1), (2.0, 3.0)])
def test_chunk_extreme_gates(tmp_path, bounded, gate_mean, gate_std):
    """Gates that decay by far more than 2^-240 over a chunk (every token at the bounded gate's
    lower bound; softplus gates of hundreds): the intra pass redoes such chunks exactly."""
    _, module = chunk_variant(tmp_path, {"BK": 128})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        err_o, err_s = rel_errors(module, inputs([100, 40], 1, bounded, True, 5, gate_mean, gate_std))
    assert err_o < 7e-3 and err_s < 7e-3, (err_o, err_s)


@pytest.mark.parametrize("bounded,gate_mean,gate_std,fast_path", [
    (True, 20.0, 0.1, True),  # every token at the lower bound: 231 per block of 32 rows, 462 per chunk (log2)
    (False, 20.0, 0.1, False),  # softplus gates of 20 x A per token: blocks decay far past 2^-240
])
def test_chunk_fast_path_covers_a_chunk_decaying_past_2_pow_240(tmp_path, bounded, gate_mean, gate_std, fast_path):
    """The fast intra pass is exact while each block of 32 rows decays by at most 2^-240 (the cross
    block is taken relative to the boundary between the blocks), so a chunk decaying by twice that
    needs no exact fallback: with the fallback sabotaged (NaN) the first case still passes and the
    second, which needs the fallback, fails."""
    _, module = chunk_variant(tmp_path, {"BK": 128})
    source = Path(module.__file__).read_text()
    call = "            q, k, g_raw, dt_bias, tok0, tok1, m0, m1, i_h, b_a, lower_bound, H, K, BC, BK, BOUNDED, A_LOWP, INTERP)\n"
    assert source.count(call) == 1
    sabotaged = tmp_path / "chunk_sabotaged.py"
    sabotaged.write_text(source.replace(call, call + "        a10q = a10q + float('nan')\n"))
    module = load_module_from_path(sabotaged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        err_o, err_s = rel_errors(module, inputs([100, 40], 1, bounded, True, 5, gate_mean, gate_std))
    passed = err_o < 7e-3 and err_s < 7e-3
    assert passed == fast_path, (err_o, err_s)


def test_chunk_empty_sequences_and_chunk_edges(tmp_path):
    _, module = chunk_variant(tmp_path, {"BK": 128, "BV": 64})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        err_o, err_s = rel_errors(module, inputs([0, 1, 64, 0, 65, 63, 0], 1, False, True, 6))
    assert err_o < 7e-3 and err_s < 7e-3, (err_o, err_s)


@pytest.mark.parametrize("point", [{}, {"BT": 32, "merge": "launch"}, {"BT": 32, "merge": "fused"}, {"BT": 32}])
@pytest.mark.parametrize("has_h0", [False, True])
def test_runs_of_chunks_are_bit_identical_to_one_pass(tmp_path, point, has_h0):
    """`segments` cuts one sequence's chunks into runs, each state pass starting from the previous run's final
    state: the same arithmetic in the same order, so the outputs equal one pass's bit for bit (uneven runs: 5
    steps of 64 tokens in runs of 2, 2, 1; 10 of 32 in 4, 4, 2)."""
    plan = assert_runs_change_no_bit(tmp_path, point, 3, inputs([300], 1, True, has_h0, 7))
    chunks = 5 if point.get("merge", "off") != "off" or "BT" not in point else 10  # 64-token steps, or 32
    assert [(s.i0, s.i1) for s in plan.steps] == {5: [(0, 2), (2, 4), (4, 5)], 10: [(0, 4), (4, 8), (8, 10)]}[chunks]


def assert_runs_change_no_bit(tmp_path, point, segments, inp):
    """The outputs of `point` with `segments` runs equal one pass's bit for bit, and none is left poisoned; the
    plan of the runs."""
    _, whole = chunk_variant(tmp_path, {"BK": 128, **point})
    _, cut = chunk_variant(tmp_path, {"BK": 128, **point, "segments": segments})
    (T, H, K), N = inp["q"].shape, inp["cu_seqlens"].numel() - 1
    outs = []
    for module in (whole, cut):
        o = torch.full((T, H, K), float("nan"), dtype=torch.bfloat16)
        final_state = torch.full((N, H, K, K), float("nan"))
        module.run(**inp, output=o, final_state=final_state)
        outs.append((o, final_state))
    assert not torch.isnan(outs[1][0]).any() and not torch.isnan(outs[1][1]).any()
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    (plan,) = cut._PLANS.values()
    return plan


def test_runs_of_chunks_only_on_one_sequence(tmp_path):
    """Runs of the global chunk order on a batch serialize its sequences' state passes (1.03-1.9x slower on the H200,
    DESIGN.md 6.6): a batch is one pass."""
    _, module = chunk_variant(tmp_path, {"segments": 4})
    shape = dict(T=1024, H=2, K=128, V=128, bounded=True, has_h0=False, interpreted=True)
    assert len(module._make_plan(torch.device("cpu"), N=1, **shape).steps) == 4
    assert len(module._make_plan(torch.device("cpu"), N=3, **shape).steps) == 1  # batches: one pass


def test_intra_register_cap_follows_the_gate_form(tmp_path):
    """The GPU launch options of the intra pass: the bounded gate's cap, or the softplus gate's (each a
    family parameter; measured on the H200 to pull in opposite directions)."""
    _, module = chunk_variant(tmp_path, {"intra_maxnreg_softplus": None, "intra_maxnreg_bounded": 128})
    shape = dict(T=256, H=4, N=2, K=128, V=128, has_h0=False, interpreted=False)
    bounded = module._make_plan(torch.device("cpu"), bounded=True, **shape)
    softplus = module._make_plan(torch.device("cpu"), bounded=False, **shape)
    assert bounded.steps[0].intra.options == {"num_warps": 8, "maxnreg": 128}
    assert softplus.steps[0].intra.options == {"num_warps": 8}
    _, swapped = chunk_variant(tmp_path, {"intra_maxnreg_softplus": 128, "intra_maxnreg_bounded": None})
    assert swapped._make_plan(torch.device("cpu"), bounded=False, **shape).steps[0].intra.options["maxnreg"] == 128
    assert "maxnreg" not in swapped._make_plan(torch.device("cpu"), bounded=True, **shape).steps[0].intra.options
