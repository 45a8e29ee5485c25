"""A batch's calls form a chain (the task's CHAINED_INPUTS): call k+1's chained input is call k's output, the same
bytes, poisoned until call k writes them. Computed in turn, every call is right; a call that computes the batch's
other sets ahead of the calls they follow (the GPU graph batch's hole: one call computing its whole batch, up to 18x
over its honest path on an H100, 2026-12-06) reads poison and fails the check. Run here on CPU buffers, with the
judge's own CallSets, reference and checks."""

import math

import pytest
import torch

from evoteam.harness.calls import CallSets
from evoteam.harness.timing import GraphClock
from evoteam.task import load_task

from conftest import REPO


def _mla_honest(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    """The reference's math, written into the outputs (as a candidate would)."""
    ref = load_task("mla_decode").reference({"q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache,
                                             "kpe_cache": kpe_cache, "kv_indptr": kv_indptr,
                                             "kv_indices": kv_indices, "sm_scale": sm_scale})
    output.copy_(ref["output"])
    lse.copy_(ref["lse"])


@pytest.fixture(scope="module")
def mla():
    task = load_task("mla_decode")
    return task, task.scaled_workloads("small")[0]


def _batch(task, workload, n: int, seed: int = 7) -> CallSets:
    calls = CallSets(task, workload, "cpu", n)
    assert calls.n_sets == n
    calls.refresh(list(range(n)), seed)
    calls.release_late()
    return calls


def _runner_view(calls: CallSets, j: int):
    """Set j's tensors as the runner maps them (its buffers, its refs), in the definition's order."""
    inputs = {n: calls.arena.tensor(r) for n, r in calls.refs[j]["inputs"].items()}
    inputs.update(calls.scalars)
    outputs = {n: calls.arena.tensor(r) for n, r in calls.refs[j]["outputs"].items()}
    return inputs, outputs


def _checked(calls: CallSets, n: int) -> list[str | None]:
    """Each set's first check failure (None: passed), by the judge's own rule."""
    found = []
    for j in range(n):
        failure, _ = calls.verify(j, 0)
        found.append(None if failure is None else failure.check)
    unwritten = calls.unwritten(list(range(n)))
    return found + ([unwritten] if unwritten else [])


def test_the_chained_input_is_the_previous_calls_output_and_computed_in_turn_every_call_passes(mla):
    task, workload = mla
    n = 4
    calls = _batch(task, workload, n)
    assert calls.chain == {"q_nope": "output"}
    for j in range(1, n):  # the same bytes of the output buffer, as the runner sees them
        assert calls.refs[j]["inputs"]["q_nope"] == calls.refs[j - 1]["outputs"]["output"]
    first_q = calls.inputs[0]["q_nope"].clone()
    for j in range(n):  # a graph batch's calls, in stream order
        inputs, outputs = _runner_view(calls, j)
        _mla_honest(**inputs, **outputs)
    assert _checked(calls, n) == [None] * n
    # call 1's input is call 0's output: its reference is computed from what call 0 wrote
    assert torch.equal(calls.pristine[1]["q_nope"], calls.outputs[0]["output"])
    assert torch.equal(calls.inputs[0]["q_nope"], first_q)  # set 0's chained input is an input of its own
    assert calls.inputs_unchanged(list(range(n)), 0) is None


def test_a_call_that_computes_the_whole_batch_ahead_reads_poison_and_fails(mla):
    """compute_whole_batch's shape: the first call computes every set at once from what the buffers hold when it
    starts (the other calls then return at once). The later sets' chained inputs are still poison: NaN outputs."""
    task, workload = mla
    n = 4
    calls = _batch(task, workload, n)
    views = [_runner_view(calls, j) for j in range(n)]
    ahead = [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()} for inputs, _ in views]
    for (_, outputs), inputs in zip(views, ahead):  # every set from its inputs as they were at the first call
        _mla_honest(**inputs, **outputs)
    found = _checked(calls, n)
    assert found[0] is None  # set 0's inputs were all there
    assert all(f is not None for f in found[1:n]), found
    assert math.isnan(float(ahead[1]["q_nope"].float().sum()))  # what it read for set 1: the poison


def test_a_task_without_a_chain_is_timed_one_call_a_graph_batch(mla, monkeypatch):
    task, workload = mla
    hw = type("HW", (), {"peak_memory_bandwidth_tbs": 4.8})()
    count = GraphClock().sets(task, workload, hw)
    template = task.make_inputs(workload, torch.Generator().manual_seed(0), "cpu")
    assert count(template) > 1  # MLA's tiny calls: many a batch, chained
    monkeypatch.setattr(task.module, "CHAINED_INPUTS", {}, raising=False)
    assert GraphClock().sets(task, workload, hw)(template) == 1


def test_kda_chains_its_keys_to_the_last_calls_output(tmp_path):
    task = load_task("kda_prefill")
    workload = task.scaled_workloads("small")[0]
    calls = _batch(task, workload, 2)
    assert calls.chain == {"k": "output"}
    assert calls.refs[1]["inputs"]["k"] == calls.refs[0]["outputs"]["output"]
    assert (REPO / "kernels" / "kda_prefill" / "task.py").read_text().count("CHAINED_INPUTS") >= 1
