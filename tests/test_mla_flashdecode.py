"""The flashdecode family of the MLA decode task (kernels/mla_decode/flashdecode_triton.py) under the
Triton interpreter: the checker on the small workloads at several points, pieces and merges at the
edges (empty requests, one request in many pieces, more requests than one scan step), both merge
modes, and DISPATCH."""

import os

# The Triton interpreter must be chosen before triton is imported anywhere in the process.
os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from mla_inputs import assert_matches_reference, family_module, mla_family, mla_inputs  # noqa: E402

from evoteam.harness.check import check_kernel  # noqa: E402
from evoteam.task import load_module_from_path, load_task  # noqa: E402

MLA = load_task("mla_decode")
MLA_SMALL = MLA.scaled_workloads("small")


def family():
    return mla_family("flashdecode")


def variant(params, tmp_path, tag):
    return family_module("flashdecode", params, tmp_path, tag)


def pieces(module, kv_indptr, params):
    """Pieces per request at a point, on this CPU (the interpreter counts as CPU_MULTIPROCESSORS)."""
    lengths = np.diff(np.asarray(kv_indptr, dtype=np.int64))
    chunk, programs = module.plan(len(lengths), int(lengths.sum()), module.CPU_MULTIPROCESSORS, params)
    n = [max(1, -(-int(length) // chunk)) for length in lengths]
    assert sum(n) <= programs
    return chunk, n


@pytest.mark.parametrize("point", [
    {},  # the default: the last piece merges
    {"COMBINE": "launch", "MIN_CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 4},
    {"COMBINE": "last", "MIN_CHUNK_BLOCKS": 8, "PROGRAMS_PER_SM": 4, "num_warps": 8},
    {"COMBINE": "peers", "BLOCK_N": 16},  # tiles of 16 tokens: masked loads and merges at half the step
    {"COMBINE": "peers", "PARTIALS": "fp32"},  # unscaled partials (the champion's on batch 1)
], ids=["default", "launch", "last_min8", "peers_n16", "peers_fp32"])
def test_flashdecode_passes_the_checker(tmp_path, point):
    fam = family()
    module = variant(point, tmp_path, "_".join(f"{k}{v}" for k, v in point.items()) or "default")
    assert module.PARAMS == {**fam.default, **point} and fam.contains(module.PARAMS)
    counts = [pieces(module, MLA.module.kv_layout(w)[0], module.PARAMS)[1] for w in MLA_SMALL]
    assert max(max(n) for n in counts) >= 2  # some request is merged from pieces
    for i, w in enumerate(MLA_SMALL):
        result = check_kernel(MLA, w, module.run, trials=3, seed=5100 + i, device="cpu")
        assert result.passed, f"{w.uuid[:8]} at {module.PARAMS}: {result.summary()}"
        # fp16 (scaled) or fp32 partials (PARTIALS_DTYPE): bf16 partials took it to 2.2-2.8e-3, and an element now
        # and then past flashinfer-bench's tolerance on the H100
        assert result.errors["output"].rel_norm < 2e-3 and result.errors["lse"].rel_norm < 1e-5


def edge_inputs(lengths, seed=11, num_pages=900):
    return mla_inputs(lengths, seed, num_pages)


def check_against_reference(module, inputs, calls=2):
    """Run twice (the second call must find the merge counters reset) and compare every request."""
    lengths = np.diff(inputs["kv_indptr"].numpy())
    ref = MLA.reference(inputs)
    for _ in range(calls):
        output = torch.full((len(lengths), 16, 512), float("nan"), dtype=torch.bfloat16)
        lse = torch.full((len(lengths), 16), float("nan"))
        module.run(**inputs, output=output, lse=lse)
        assert_matches_reference(ref, lengths, output, lse)


@pytest.mark.parametrize("combine", ["last", "launch", "ctas", "pdl", "peers"])
def test_flashdecode_edges(tmp_path, combine):
    """Empty requests first, in the middle and last; a request of exactly one chunk, one a token
    longer, one of many pieces; 70 requests (more than one 64-entry scan step) in the second case."""
    module = variant({"COMBINE": combine, "MIN_CHUNK_BLOCKS": 2}, tmp_path, combine)
    lengths = [0, 1, 64, 65, 0, 300, 7, 0]
    chunk, n = pieces(module, np.concatenate(([0], np.cumsum(lengths))), module.PARAMS)
    assert chunk == 64 and max(n) >= 4 and n[0] == 1
    check_against_reference(module, edge_inputs(lengths))
    if combine == "peers":  # two calls: each request that its pieces merged moved its generation on twice
        (plan,) = module._PLANS.values()
        assert plan.generations.tolist() == [2 if k > 1 else 0 for k in n]
    many = [int(x) for x in np.random.default_rng(3).integers(0, 12, size=70)]
    many[0] = many[-1] = 0
    many[40] = 200
    chunk, n = pieces(module, np.concatenate(([0], np.cumsum(many))), module.PARAMS)
    assert len(many) > module.COUNT_B and max(n) >= 3
    check_against_reference(module, edge_inputs(many, seed=12), calls=1)


@pytest.mark.parametrize("combine", ["last", "launch", "peers"])
def test_partials_hold_outputs_past_what_fp16_holds(tmp_path, combine):
    """The pieces' partial outputs are fp16 (PARTIALS_DTYPE), each head's row scaled by a power of two: a bf16 cache
    with values of about 2^20 gives outputs past fp16's 65504, which unscaled fp16 partials would store as inf. The
    three merges that read partials: the last piece's ("last"), the merge kernel's tile ("launch"), the pieces'
    unrolled one ("peers"). q_nope is scaled down by the power of two that scales ckv up, so the logits are the same
    and the output is exactly 2^20 times that of the unscaled inputs: it is checked against their reference."""
    module = variant({"COMBINE": combine, "MIN_CHUNK_BLOCKS": 2}, tmp_path, f"big{combine}")
    assert module.PARAMS["PARTIALS"] == "fp16"
    lengths = [0, 300, 65, 7]
    inputs = edge_inputs(lengths, seed=21)
    assert max(pieces(module, inputs["kv_indptr"].numpy(), module.PARAMS)[1]) >= 3
    ref = MLA.reference(inputs)
    big = {**inputs, "ckv_cache": (inputs["ckv_cache"].float() * 2.0**20).bfloat16(),
           "q_nope": (inputs["q_nope"].float() * 2.0**-20).bfloat16()}
    output = torch.full((len(lengths), 16, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((len(lengths), 16), float("nan"))
    module.run(**big, output=output, lse=lse)
    assert output.float().abs().max() > 65504 and torch.isfinite(output).all()
    assert_matches_reference(ref, lengths, (output.float() * 2.0**-20).bfloat16(), lse)


@pytest.mark.parametrize("length,count", [(400, 7), (700, 11)])
def test_flashdecode_single_request_in_many_pieces(tmp_path, length, count):
    """Batch 1 in up to LAST_MAX_PIECES pieces: merged by the last piece; in more: by the merge kernel."""
    module = variant({"MIN_CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 4}, tmp_path, f"single{length}")
    inputs = edge_inputs([length], seed=13)
    chunk, n = pieces(module, inputs["kv_indptr"].numpy(), module.PARAMS)
    assert n == [count] and chunk == 64
    check_against_reference(module, inputs)
    (plan,) = module._PLANS.values()
    assert (plan.merge is None) == (count <= module.LAST_MAX_PIECES)


@pytest.mark.parametrize("length,count,multiprocessors",
                         [(400, 7, 8), (700, 11, 8), (700, 11, 16), (1300, 21, 32)])
def test_peers_single_request(tmp_path, length, count, multiprocessors):
    """COMBINE "peers" on batch 1: up to PEER_MAX pieces (the multiprocessors: CPU_MULTIPROCESSORS
    here) merged by the pieces, with the 8-piece tile (7 pieces), the 16-piece one (11 pieces, 16
    multiprocessors) or the 16-piece one in two steps (21 pieces, 32 multiprocessors); more pieces as
    at "last". No merge kernel either way; after each call the count is back at zero and, where the
    pieces merged, the request's generation word has moved on by one."""
    module = variant({"COMBINE": "peers", "MIN_CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 4}, tmp_path,
                     f"peers{length}_{multiprocessors}")
    module.CPU_MULTIPROCESSORS = multiprocessors
    inputs = edge_inputs([length], seed=15)
    chunk, n = pieces(module, inputs["kv_indptr"].numpy(), module.PARAMS)
    assert n == [count] and chunk == 64
    check_against_reference(module, inputs)
    (plan,) = module._PLANS.values()
    assert plan.piece[1]["PEER_MAX"] == multiprocessors and plan.merge is None and plan.piece[1]["PEERS"]
    assert (count <= multiprocessors) == (length == 400 or multiprocessors >= 16)
    assert int(plan.counters.abs().sum()) == 0 and plan.sync is plan.generations
    assert plan.generations.tolist() == ([2] if count <= multiprocessors else [0])  # check_against_reference: 2 calls


def test_flashdecode_dispatch(tmp_path):
    """DISPATCH entries pick points by shape: the nearest batch size, then the nearest token count."""
    module = load_module_from_path(family().path, "flashdecode_default")
    assert module.DISPATCH == [] and module.params_for(16, 1000) == module.PARAMS
    table = [[{"batch_size": 1, "num_kv_indices": 100}, {"COMBINE": "launch"}],
             [{"batch_size": 1, "num_kv_indices": 2000}, {"MIN_CHUNK_BLOCKS": 8}],
             [{"batch_size": 64, "num_kv_indices": 40000}, {"num_warps": 8}]]
    assert module.params_for(1, 90, table)["COMBINE"] == "launch"
    assert module.params_for(1, 1500, table)["MIN_CHUNK_BLOCKS"] == 8
    assert module.params_for(4, 1500, table)["MIN_CHUNK_BLOCKS"] == 8  # log scale: batch 4 is nearer 1 than 64
    assert module.params_for(32, 9000, table)["num_warps"] == 8
    assert module.params_for(64, 9000, table) == {**module.PARAMS, "num_warps": 8}
    # A file with DISPATCH written in runs each shape at its point.
    source = family().path.read_text().replace("DISPATCH = []", "DISPATCH = " + json.dumps(table), 1)
    path = tmp_path / "flashdecode_dispatched.py"
    path.write_text(source)
    dispatched = load_module_from_path(path, "flashdecode_dispatched")
    assert dispatched.params_for(1, 100)["COMBINE"] == "launch"
    result = check_kernel(MLA, MLA_SMALL[1], dispatched.run, trials=3, seed=5200, device="cpu")
    assert result.passed, result.summary()


def test_the_champion_is_built_from_the_family_file_and_passes(tmp_path):
    """kernels/mla_decode/champion_h200.json (the H200 sweep's choice) is data: the family's file with
    PARAMS and DISPATCH set to points of its space is the candidate, so the family's tests cover its code;
    it passes the checker here on a small workload of each batch size."""
    from evoteam.families import load_champion

    champion = load_champion(family().path.parent / "champion_h200.json")
    assert champion.family.name == "flashdecode" and len(champion.dispatch) == 47
    source = champion.source()
    assert source.replace(source[source.index("DISPATCH = "):source.index("\n]\n") + 3], "DISPATCH = []\n") == \
        family().path.read_text()
    path = tmp_path / "champion.py"
    path.write_text(source)
    module = load_module_from_path(path, "flashdecode_champion")
    assert [[axes, point] for axes, point in module.DISPATCH] == champion.dispatch
    for i, w in enumerate(MLA_SMALL[:2]):
        result = check_kernel(MLA, w, module.run, trials=3, seed=5300 + i, device="cpu")
        assert result.passed, f"{w.uuid[:8]}: {result.summary()}"


@pytest.mark.parametrize("lengths", [[700], [0, 1, 64, 65, 0, 300, 7, 0]], ids=["single", "batch"])
def test_flashdecode_merge_programs_share_the_launch(tmp_path, lengths):
    """COMBINE "ctas": one launch whose grid is the pieces' programs and then batch x column blocks of
    merge programs; both counters are back to zero after each call (checked against the reference,
    twice)."""
    module = variant({"COMBINE": "ctas", "MIN_CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 4}, tmp_path, f"ctas{len(lengths)}")
    inputs = edge_inputs(lengths, seed=14)
    chunk, n = pieces(module, inputs["kv_indptr"].numpy(), module.PARAMS)
    assert max(n) >= 5
    check_against_reference(module, inputs)
    (plan,) = module._PLANS.values()
    launch, constexprs = plan.piece
    assert plan.merge is None and constexprs["MERGE_PROGRAMS"]
    assert launch.grid[0] == plan.programs + len(lengths) * (512 // constexprs["COMBINE_D"])
    assert int(plan.counters.abs().sum()) == 0 and int(plan.merge_done.abs().sum()) == 0


def test_pdl_plan_launches_the_merge_kernel_as_a_programmatic_dependent():
    """COMBINE "pdl" for a GPU: the merge kernel gets launch_pdl (CUDA's programmatic stream
    serialization) and both kernels their griddepcontrol code; under the interpreter (no
    griddepcontrol) it is COMBINE "launch". A batch whose requests are all one piece has no merge."""
    module = load_module_from_path(family().path, "flashdecode_pdl_plan")
    module.PARAMS = {**module.PARAMS, "COMBINE": "pdl"}
    cpu = torch.device("cpu")
    for interpreted in (False, True):
        plan = module._make_plan(cpu, 64, 16, 512, 64, 75145, interpreted)
        (piece, piece_c), (merge, merge_c) = plan.piece, plan.merge
        assert piece_c["PDL"] is merge_c["PDL"] is (not interpreted)
        assert merge.options.get("launch_pdl", False) is (not interpreted) and "launch_pdl" not in piece.options
        assert merge.grid == (64, 512 // merge_c["COMBINE_D"], 1)
    short = module._make_plan(cpu, 64, 16, 512, 64, 60, False)  # the chunk (>= 64 tokens) holds the batch
    assert short.merge is None and not short.piece[1]["PDL"]


def test_peers_plan_merges_in_the_pieces_launch():
    """COMBINE "peers": one launch (no merge kernel, no extra programs; the merge's tile is chosen in
    the kernel from each request's piece count, so no tile constexprs), requests in more pieces than
    multiprocessors (PEER_MAX) merge as at "last". (Under the interpreter test_flashdecode_edges and
    test_peers_single_request run it: the last piece of a request to finish merges all its columns
    with the same code, at piece counts 2 to 21.)"""
    module = load_module_from_path(family().path, "flashdecode_peers_plan")
    module.PARAMS = {**module.PARAMS, "COMBINE": "peers"}
    cpu = torch.device("cpu")
    for batch, total in [(64, 75145), (16, 17257), (16, 457), (1, 2708)]:
        for interpreted in (False, True):
            plan = module._make_plan(cpu, batch, 16, 512, 64, total, interpreted)
            launch, c = plan.piece
            assert plan.merge is None and launch.grid == (plan.programs, 1, 1)
            assert c["PEERS"] and not c["LAST_MERGES"] and not c["MERGE_PROGRAMS"]
            assert c["PEER_MAX"] == module.CPU_MULTIPROCESSORS  # the device's multiprocessors (a CPU here)
            assert (c["COMBINE_S"], c["COMBINE_D"]) == (1, 512)
    short = module._make_plan(cpu, 64, 16, 512, 64, 60, False)  # the chunk holds the batch: nothing to merge
    assert not short.piece[1]["PEERS"] and short.merge is None


def test_merge_programs_tile_on_a_gpu():
    """About as many merge programs as piece programs, each with a tile of at most 4096 elements."""
    module = load_module_from_path(family().path, "flashdecode_tiles")
    for programs, batch, typical in [(264, 1, 264), (196, 16, 13), (278, 64, 5), (40, 64, 1)]:
        pieces_, columns = module._merge_programs_tile(programs, batch, typical, 16, 512, False)
        blocks = 512 // columns
        assert 512 % columns == 0 and columns >= 8 and pieces_ >= 1 and pieces_ * 16 * columns <= 4096
        assert batch * blocks <= max(programs, batch) * 2

