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
