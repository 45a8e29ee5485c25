"""The torch_cpu family of the MLA decode task (kernels/mla_decode/torch_cpu.py): plain PyTorch ops for a CPU
target. It loads through evoteam.families (searched on cpu only), passes the static scan, and its default point
and points that take its other paths (groups of padded requests, bf16 probabilities @ ckv, the fused 576-wide
matmul, index_select) give the reference's results within the task's tolerances, empty requests included."""

import numpy as np
import pytest
import torch
from mla_inputs import assert_matches_reference, family_module, mla_family, mla_inputs

from evoteam.harness.check import check_kernel
from evoteam.harness.scan import scan_source
from evoteam.task import load_task

MLA = load_task("mla_decode")

# lengths: empty first, in the middle and last; equal lengths (a group even at PAD_BUDGET 0), a group of
# several within 32 tokens, a long request on its own
LENGTHS = [0, 9, 9, 40, 0, 60, 300, 1, 50, 0]


def family():
    return mla_family("torch_cpu")


def variant(params, tmp_path, tag):
    return family_module("torch_cpu", params, tmp_path, tag)


def test_the_family_loads_for_cpu_only():
    fam = family()
    assert fam.path.name == "torch_cpu.py" and fam.description and not fam.naive
    assert fam.usable_on("cpu") and not fam.usable_on("h200")
    assert 8 <= fam.size <= 24 and fam.contains(fam.default)
    assert fam.default == {key: values[0] for key, values in fam.space.items()}  # the plain version
    assert scan_source(fam.path.read_text(), str(fam.path)) == []


POINTS = [
    {},  # the default: advanced indexing, one request at a time, fp32
    {"GATHER": "index_select", "PAD_BUDGET": 32, "PV_BF16_MIN_TOKENS": 0, "FUSED_KPE": True},
    {"GATHER": "index_select", "PAD_BUDGET": 256},  # everything in one padded group
]


@pytest.mark.parametrize("point", POINTS, ids=["default", "groups_bf16_fused", "one_group"])
def test_points_match_the_reference(tmp_path, point):
    fam = family()
    module = variant(point, tmp_path, "_".join(f"{k}{v}" for k, v in point.items()) or "default")
    assert module.PARAMS == {**fam.default, **point} and fam.contains(module.PARAMS)
    for lengths, seed in ((LENGTHS, 21), ([0], 22), ([5], 23), ([0, 0, 3], 24)):
        inputs = mla_inputs(lengths, seed, num_pages=1000)
        ref = MLA.reference(inputs)
        for _ in range(2):  # called twice: nothing is left over from a previous call
            output = torch.full((len(lengths), 16, 512), float("nan"), dtype=torch.bfloat16)
            lse = torch.full((len(lengths), 16), float("nan"))
            assert module.run(**inputs, output=output, lse=lse) is None  # destination-passing
            assert not torch.isnan(output).any() and not torch.isnan(lse).any()
            assert_matches_reference(ref, np.asarray(lengths), output, lse)
            # the task's tolerances (the checker's rule) on whole outputs; lse's -inf rows match exactly
            for name, got in (("output", output), ("lse", lse)):
                tol = MLA.tolerance(name)
                want = ref[name]
                finite = torch.isfinite(want)
                assert torch.equal(torch.isfinite(got), finite)
                err = (got.double() - want.double())[finite].abs()
                assert torch.all((err <= tol.atol) | (err <= tol.rtol * (want.double()[finite].abs() + 1e-8))), name
                if finite.any() and want.double()[finite].norm() > 0:
                    assert err.norm() / want.double()[finite].norm() <= tol.max_rel_norm, name


def test_the_checker_passes_on_a_small_workload(tmp_path):
    """The harness's checker (flashinfer-bench's tolerances, NaN-poisoned outputs) on the 16-request small
    workload, at the default and at a grouped bf16 point."""
    workload = MLA.scaled_workloads("small")[2]
    assert workload.axes["batch_size"] == 16
    for i, point in enumerate(POINTS[:2]):
        module = variant(point, tmp_path, f"check{i}")
        result = check_kernel(MLA, workload, module.run, trials=3, seed=6100 + i, device="cpu")
        assert result.passed, f"{module.PARAMS}: {result.summary()}"
