"""Baseline timings cached per (hardware fingerprint, library version, timing mode, baseline, workload,
calls per timed interval and how they were chosen)."""

from evoteam.harness.baseline_cache import BaselineCache, Key, hardware_fingerprint
from evoteam.harness.executor import evaluate
from evoteam.harness.model import EvalRequest
from evoteam.harness.timing import BATCH_RULE
from evoteam.task import load_task

from conftest import REPO


def test_keys_keep_versions_and_modes_apart(tmp_path):
    cache = BaselineCache(tmp_path / "t.jsonl")
    key = Key("H200", "0.5.3", "events", "flashinfer", "w1")
    assert cache.get(key) is None
    cache.put(key, 0.02)
    cache.put(Key("H200", "0.5.3", "graph", "flashinfer", "w1"), 0.01)
    cache.put(Key("H200", "0.6.0", "events", "flashinfer", "w1"), 0.03)
    assert cache.get(key) == 0.02
    cache.put(key, 0.025)  # re-measured: the newest entry wins
    assert cache.get(key) == 0.025
    with open(cache.path, "a") as fh:
        fh.write('{"key": {"fingerprint"')  # a line cut by an interrupted writer is skipped
    assert cache.get(Key("H200", "0.6.0", "events", "flashinfer", "w1")) == 0.03
    assert hardware_fingerprint("cpu").startswith("cpu:")


def test_the_batch_keeps_entries_apart(tmp_path):
    """A baseline timed one call per interval is slower than in batches: it serves only evaluations timed so."""
    cache = BaselineCache(tmp_path / "t.jsonl")
    cache.put(Key("cpu", "2.11", "cputime", "reference", "w1"), 0.5)  # from before batches were kept: batch 0
    cache.put(Key("cpu", "2.11", "cputime", "reference", "w1", batch=1), 0.7)
    cache.put(Key("cpu", "2.11", "cputime", "reference", "w1", batch=8), 0.3)
    assert cache.get(Key("cpu", "2.11", "cputime", "reference", "w1", batch=8)) == 0.3
    assert cache.get(Key("cpu", "2.11", "cputime", "reference", "w1", batch=1)) == 0.7
    assert cache.get(Key("cpu", "2.11", "cputime", "reference", "w1", batch=16)) is None
    assert cache.batches(Key("cpu", "2.11", "cputime", "reference", "w1", batch=16)) == {1, 8}


def test_entries_of_another_batch_rule_never_serve(tmp_path):
    """CPU batches chosen by the candidate's check time (before the judge chose them from the baseline's own
    calls) carry no rule: they serve no evaluation of the judge's rule, whatever their batch."""
    cache = BaselineCache(tmp_path / "t.jsonl")
    cache.put(Key("cpu", "2.11", "cputime", "reference", "w1", batch=1), 0.7)  # the old rule's, beside a slow-looking candidate
    cache.put(Key("cpu", "2.11", "cputime", "reference", "w1", batch=8, batch_rule=BATCH_RULE), 0.3)
    assert cache.get(Key("cpu", "2.11", "cputime", "reference", "w1", batch=1, batch_rule=BATCH_RULE)) is None
    assert cache.batches(Key("cpu", "2.11", "cputime", "reference", "w1", batch_rule=BATCH_RULE)) == {8}


def test_quick_evaluation_reuses_the_cached_baseline():
    uuid = load_task("mla_decode").scaled_workloads("small")[0].uuid
    request = EvalRequest(task="mla_decode", hardware="cpu", workloads=[uuid], scale="small", seed=3, warmup=0,
                          reps=2, solution=str(REPO / "tests" / "data" / "candidates" / "mla_torch.py"))
    (first,) = evaluate(request, timeout_s=120).results
    assert first.baseline == "reference" and "baseline" in first.spread
    request.use_baseline_cache = True
    (second,) = evaluate(request, timeout_s=120).results
    assert second.baseline == "reference (cached)"
    assert second.baseline_ms == first.baseline_ms and "baseline" not in second.spread
