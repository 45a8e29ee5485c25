"""Kernel families (evoteam/families.py): each task's families.json, the PARAMS convention, and
variants made by rewriting PARAMS that import, pass the static scan and compute correct results
under the Triton interpreter."""

import os

# The Triton interpreter must be chosen before triton is imported anywhere in the process.
os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from mla_inputs import assert_matches_reference, mla_inputs  # noqa: E402

from evoteam.families import Family, apply_params, load_families, load_variants, read_params  # noqa: E402
from evoteam.harness.check import check_kernel  # noqa: E402
from evoteam.harness.scan import foreign_kernels, jit_function_names, scan_source  # noqa: E402
from evoteam.task import available_tasks, load_module_from_path, load_task  # noqa: E402

FAMILY_NAMES = {"mla_decode": {"seed", "splitkv"}, "kda_prefill": {"seed"}}


def family(task: str, name: str) -> Family:
    return next(f for f in load_families(task) if f.name == name)


def variant(fam: Family, params: dict, tmp_path, tag: str = ""):
    """The family's file with PARAMS rewritten to `params`, written to tmp_path and imported."""
    path = tmp_path / f"{fam.name}_{tag or abs(hash(json.dumps(params, sort_keys=True)))}.py"
    path.write_text(fam.source(params))
    return load_module_from_path(path)


# --------------------------------------------------------------------------- families.json and PARAMS


def test_every_task_has_its_families():
    assert set(FAMILY_NAMES) <= set(available_tasks())
    for task in available_tasks():
        families = load_families(task)
        assert {f.name for f in families} >= FAMILY_NAMES.get(task, {"seed"})
        folder = load_task(task).folder
        assert family(task, "seed").path == load_task(task).folder / "seed_triton.py"
        for f in families:
            assert f.path.parent == folder and f.description
            assert set(f.space) == set(f.default), f"{task}/{f.name}: space and PARAMS name other keys"
            assert f.contains(f.default), f"{task}/{f.name}: PARAMS is not a point of the space"
            # small enough to sweep on the lent GPU in a few sharded calls (about 16 s per point on the 47 MLA
            # workloads); a session sweeps a subset (--space, --points; the KDA chunk family's twelve parameters, 1152 points, are
            # chosen from by scripts/kda_probe.py on a few points instead)
            assert 6 <= f.size <= 2048, f"{task}/{f.name}: {f.size} points"
            assert f.default == read_params(f.path.read_text())
            points = list(f.points())
            assert len(points) == f.size and f.default in points
            assert all(f.contains(p) for p in points)


def test_family_files_pass_the_static_scan():
    for task in FAMILY_NAMES:
        for f in load_families(task):
            source = f.path.read_text()
            assert scan_source(source, str(f.path)) == [], f"{task}/{f.name}"
            kernels = jit_function_names(source)
            assert foreign_kernels(kernels) == [], f"{task}/{f.name}: {kernels}"
            assert bool(kernels) == f.uses_triton, f"{task}/{f.name}: a Triton family's file defines its @jit kernels"


def points_to_import(f: Family) -> list[dict]:
    """Every point of a small space; of a large one (the KDA chunk family's 2048), the default and each value of each
    key on it: apply_params rewrites only the PARAMS literal, so each value's rendering is what can go wrong, not the
    combination (importing all 2048 took 7 minutes)."""
    if f.size <= 64:
        return list(f.points())
    return [f.default] + [{**f.default, key: value} for key, values in f.space.items() for value in values
                          if value != f.default[key]]


def test_every_point_of_every_space_imports(tmp_path):
    """Every variant is a standalone file that passes the scan and carries its PARAMS; only the
    PARAMS literal differs from the family's file."""
    for task in FAMILY_NAMES:
        for f in load_families(task):
            original = f.path.read_text().splitlines()
            for i, point in enumerate(points_to_import(f)):
                source = f.source(point)
                assert scan_source(source) == []
                changed = [n for n, (a, b) in enumerate(zip(original, source.splitlines())) if a != b]
                assert len(source.splitlines()) == len(original) and len(changed) <= 1
                module = variant(f, point, tmp_path, f"{task}_{i}")
                assert module.PARAMS == point and callable(module.run)


# --------------------------------------------------------------------------- apply_params and checks


SOURCE = '''"""doc"""
import math

# the knobs
PARAMS = {"BLOCK": 32, "num_warps": 4, "scale": 0.5, "fast": True, "mode": "a", "extra": None}  # tail


def run(x):
    return PARAMS["BLOCK"] * x  # PARAMS = {"BLOCK": 1}
'''


def test_apply_params_rewrites_only_the_literal():
    new = apply_params(SOURCE, {"BLOCK": 64, "fast": False, "mode": "b'c"})
    assert read_params(new) == {"BLOCK": 64, "num_warps": 4, "scale": 0.5, "fast": False, "mode": "b'c",
                                "extra": None}
    old_lines, new_lines = SOURCE.splitlines(), new.splitlines()
    assert [n for n, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b] == [4]
    assert new_lines[4].startswith("PARAMS = {") and new_lines[4].endswith("}  # tail")
    assert new_lines[-1] == old_lines[-1]  # text that only looks like PARAMS is left alone
    assert apply_params(SOURCE, {}) == SOURCE  # the files keep PARAMS in the canonical form
    # A literal over several lines, non-ASCII text before it on its line.
    multi = 'X = "é"; PARAMS = {\n    "A": 1,\n    "B": 2,\n}\nY = 3\n'
    out = apply_params(multi, {"B": 5})
    assert out == 'X = "é"; PARAMS = {"A": 1, "B": 5}\nY = 3\n'
    for family_ in (f for task in FAMILY_NAMES for f in load_families(task)):
        assert apply_params(family_.path.read_text(), family_.default) == family_.path.read_text()


@pytest.mark.parametrize("source,params,message", [
    (SOURCE, {"BLOCK_M": 1}, "unknown parameters"),
    (SOURCE, {"BLOCK": [1, 2]}, "keys must be strings"),
    (SOURCE, {"scale": float("nan")}, "not a finite number"),
    ("X = 1\n", {}, "exactly one module-level assignment"),
    ("PARAMS = {}\nPARAMS = {}\n", {}, "exactly one module-level assignment"),
    ("PARAMS = dict(A=1)\n", {}, "must be a dict literal"),
    ("PARAMS = {'A': 1 + N}\n", {}, "literals only"),
    ("PARAMS = {'A': (1, 2)}\n", {}, "keys must be strings"),
])
def test_apply_params_rejects(source, params, message):
    with pytest.raises(ValueError, match=message):
        apply_params(source, params)


def test_family_source_stays_in_the_space():
    f = family("mla_decode", "splitkv")
    with pytest.raises(ValueError, match="not a point of its space"):
        f.source({"BLOCK_N": 48})
    with pytest.raises(ValueError, match="not a point of its space"):
        f.source({"BLOCK_N": 32.0})  # same value, other type
    with pytest.raises(ValueError, match="unknown parameters"):
        f.source({"BLOCK_M": 32})
    assert f.source() == f.path.read_text()


def write_task(tmp_path, families, kernel='PARAMS = {"A": 1, "B": "x"}\n\ndef run(**kw):\n    pass\n'):
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    (folder / "k.py").write_text(kernel)
    (folder / "families.json").write_text(json.dumps({"families": families}))
    return folder


@pytest.mark.parametrize("entry,message", [
    ({"name": "f", "file": "k.py", "space": {"A": [1, 2]}}, "exactly the keys"),
    ({"name": "f", "file": "k.py", "space": {"A": [2, 3], "B": ["x"]}}, "not a point of its space"),
    ({"name": "f", "file": "k.py", "space": {"A": [1, 1], "B": ["x"]}}, "distinct literals"),
    ({"name": "f", "file": "k.py", "space": {"A": [], "B": ["x"]}}, "non-empty list"),
    ({"name": "f", "file": "k.py", "space": {"A": [1, True], "B": ["x"]}, "what": 1}, "expected keys"),
    ({"name": "f", "file": "missing.py", "space": {"A": [1], "B": ["x"]}}, "does not exist"),
    ({"name": "f", "file": "../k.py", "space": {"A": [1], "B": ["x"]}}, "in the task folder"),
    ({"name": "f", "file": "k.py", "space": {"A": [1], "B": ["x"]}, "verified_on": "cpu"}, "list of hardware names"),
    ({"name": "f", "file": "k.py", "space": {"A": [1], "B": ["x"]}, "verified_on": [""]}, "list of hardware names"),
    ({"name": "f", "file": "k.py", "space": {"A": [1], "B": ["x"]}, "naive": "yes"}, "'naive' must be true or false"),
])
def test_load_families_rejects(tmp_path, entry, message):
    with pytest.raises(ValueError, match=message):
        load_families(write_task(tmp_path, [entry]))


def test_load_families_of_a_folder(tmp_path):
    good = {"name": "f", "file": "k.py", "description": "d", "space": {"A": [1, True, 2], "B": ["x", "y"]}}
    (f,) = load_families(write_task(tmp_path, [good]))
    assert (f.name, f.description, f.default, f.size) == ("f", "d", {"A": 1, "B": "x"}, 6)
    assert f.contains({"A": True, "B": "y"}) and not f.contains({"A": 1.0, "B": "y"})
    with pytest.raises(ValueError, match="repeated name"):
        load_families(write_task(tmp_path, [good, good]))
    assert load_families(tmp_path) == []  # no families.json: no families


def test_verified_on_limits_where_a_family_is_searched(tmp_path):
    entry = {"name": "f", "file": "k.py", "space": {"A": [1], "B": ["x"]}}
    (free,) = load_families(write_task(tmp_path, [entry]))
    (cpu_only,) = load_families(write_task(tmp_path, [{**entry, "verified_on": ["cpu"]}]))
    assert free.verified_on is None and free.usable_on("h200") and free.usable_on("cpu")
    assert cpu_only.verified_on == ("cpu",) and cpu_only.usable_on("cpu") and not cpu_only.usable_on("h200")
    # The MLA flashdecode and KDA chunk families passed the checker on the H200 (2026-11-30), and have
    # run nowhere else: searched on cpu and h200, left out on h100, b200 and mi350x.
    for task, name in (("mla_decode", "flashdecode"), ("kda_prefill", "chunk")):
        family = next(f for f in load_families(task) if f.name == name)
        assert family.usable_on("cpu") and family.usable_on("h200") and not family.usable_on("h100")


# --------------------------------------------------------------------------- correctness under the interpreter

MLA = load_task("mla_decode")
MLA_SMALL = MLA.scaled_workloads("small")
KDA = load_task("kda_prefill")
SPLITKV_POINTS = [
    {},  # the default
    {"BLOCK_N": 32, "MIN_CHUNK_BLOCKS": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_N": 64, "MIN_CHUNK_BLOCKS": 2, "num_warps": 4, "num_stages": 3},
]


def chunk_layout(module, workload):
    """(chunk, programs, pieces per request, requests per program) that splitkv uses on this CPU."""
    kv_indptr, _ = MLA.module.kv_layout(workload)
    total = int(kv_indptr[-1])
    chunk, programs = module.plan(total, module.CPU_MULTIPROCESSORS)
    starts, ends = kv_indptr[:-1].astype(np.int64), kv_indptr[1:].astype(np.int64)
    pieces = [int((e - 1) // chunk - s // chunk + 1) if e > s else 0 for s, e in zip(starts, ends)]
    per_program = [int(np.sum((starts < min((c + 1) * chunk, total)) & (ends > c * chunk)))
                   for c in range(programs)]
    return chunk, programs, pieces, per_program


@pytest.mark.parametrize("point", SPLITKV_POINTS, ids=["default", "block32_min1", "block64_min2"])
def test_splitkv_passes_the_checker(tmp_path, point):
    fam = family("mla_decode", "splitkv")
    module = variant(fam, point, tmp_path)
    assert module.PARAMS == {**fam.default, **point} and fam.contains(module.PARAMS)
    layouts = [chunk_layout(module, w) for w in MLA_SMALL]
    # The small workloads exercise the splitting: a request in one chunk alone (phase 1 finishes it,
    # no phase 2 at all), a request cut into several pieces, a chunk holding several requests.
    assert min(programs for _, programs, _, _ in layouts) == 1
    assert max(max(pieces) for _, _, pieces, _ in layouts) >= 3
    assert max(max(per) for _, _, _, per in layouts) >= 2
    for i, w in enumerate(MLA_SMALL):
        result = check_kernel(MLA, w, module.run, trials=3, seed=4100 + i, device="cpu")
        assert result.passed, f"{w.uuid[:8]} at {module.PARAMS}: {result.summary()}"
        assert result.errors["output"].rel_norm < 2e-3 and result.errors["lse"].rel_norm < 1e-5


def test_splitkv_empty_and_boundary_requests():
    """Empty requests first, at a chunk boundary and at the very end; a request ending on a chunk
    boundary, one filling a chunk exactly and one crossing a boundary (chunks of 64 tokens)."""
    module = load_module_from_path(family("mla_decode", "splitkv").path)
    lengths = [0, 1, 63, 0, 64, 95, 0]
    total = sum(lengths)
    assert module.plan(total, module.CPU_MULTIPROCESSORS) == (64, 4)
    inputs = mla_inputs(lengths, seed=11, num_pages=300)
    output = torch.full((len(lengths), 16, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((len(lengths), 16), float("nan"))
    module.run(**inputs, output=output, lse=lse)
    assert_matches_reference(MLA.reference(inputs), lengths, output, lse)


def test_mla_seed_at_another_point(tmp_path):
    module = variant(family("mla_decode", "seed"), {"BLOCK_N": 16, "num_warps": 4, "num_stages": 2}, tmp_path)
    w = MLA_SMALL[1]  # batch 1, 108 tokens: several blocks of 16
    result = check_kernel(MLA, w, module.run, trials=3, seed=4200, device="cpu")
    assert result.passed, result.summary()


def test_kda_seed_at_another_point(tmp_path):
    fam = family("kda_prefill", "seed")
    module = variant(fam, {"BV": 16, "num_warps": 2}, tmp_path)
    assert fam.contains(module.PARAMS)
    # Under the interpreter the blocks are 4x wider: 64 of the 128 value columns, two programs per head.
    w = min(KDA.scaled_workloads("small"), key=lambda w: w.axes["seq_len"] * w.axes["num_v_heads"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's exp overflow inside sigmoid
        result = check_kernel(KDA, w, module.run, trials=3, seed=4300, device="cpu")
    assert result.passed, result.summary()
    assert result.errors["final_state"].rel_norm < 1e-5 and result.errors["output"].rel_norm < 1e-3


def test_load_variants_writes_one_file_per_point(tmp_path):
    """The probes' variants: the family file with PARAMS rewritten, each imported from its own file."""
    f = family("mla_decode", "flashdecode")
    variants = load_variants(f.path, [{}, {"COMBINE": "ctas"}], tmp_path, "t")
    assert [point for point, _ in variants] == [{}, {"COMBINE": "ctas"}]
    assert variants[0][1].PARAMS == f.default and variants[1][1].PARAMS == {**f.default, "COMBINE": "ctas"}
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")  # Python's own, where it keeps one
    assert written == ["flashdecode_triton_p0.py", "flashdecode_triton_p1.py"]
    with pytest.raises(ValueError, match="unknown parameters"):
        load_variants(f.path, [{"NOT_A_PARAM": 1}], tmp_path, "t")


def test_a_champion_names_the_point_its_dispatch_runs_on_each_workload():
    """The offline tuner starts from these points: for a workload whose shape is a table entry, that entry's point
    (over the family's PARAMS), by the family's own params_for, as the kernel picks it at run time."""
    from evoteam.families import load_champion
    from evoteam.task import load_task

    task = load_task("mla_decode")
    from conftest import REPO

    champion = load_champion(REPO / "kernels" / "mla_decode" / "champion_h200.json")
    workloads = task.scaled_workloads("full")
    points = champion.points_by_workload(workloads)
    assert set(points) == {w.uuid for w in workloads}
    exact = 0
    for w in workloads:
        for axes, point in champion.dispatch:
            if all(w.axes[name] == value for name, value in axes.items()):
                assert points[w.uuid] == {**champion.family.default, **champion.params, **point}
                exact += 1
    assert exact >= 10  # the table was chosen on these workloads
    assert len({str(sorted(p.items())) for p in points.values()}) > 1  # not one point everywhere
