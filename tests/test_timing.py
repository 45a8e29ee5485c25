"""Timing bookkeeping: modes, interleaving, warm-up, rotation indices, summaries."""

import time

import pytest

from evoteam.harness import timing


def test_summary_statistics():
    t = timing.summarize("wallclock", [5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_ms, t.p10_ms, t.p90_ms, t.samples) == (3.0, 1.0, 5.0, 5)
    assert t.to_json()["mode"] == "wallclock"


def test_interleaved_calls_warmup_and_rotation_indices():
    calls, hooks = [], []
    fns = {"a": lambda i: calls.append(("a", i)), "b": lambda i: calls.append(("b", i))}
    result = timing.measure(fns, device="cpu", mode="wallclock", warmup=2, reps=3,
                            before_call=lambda name, i: hooks.append((name, i)))
    assert set(result) == {"a", "b"} and all(t.samples == 3 for t in result.values())
    assert len(calls) == 2 * (2 + 3)
    # Turns alternate and the order flips every round; every call gets a fresh index.
    assert [c[0] for c in calls[:4]] == ["a", "b", "b", "a"]
    assert [c[1] for c in calls] == list(range(10))
    assert hooks == calls  # the hook runs before every call, with the same index


def test_wallclock_measures_what_the_callable_takes():
    result = timing.measure({"slow": lambda i: time.sleep(0.02), "fast": lambda i: None}, device="cpu",
                            mode="wallclock", warmup=1, reps=5)
    assert 15 < result["slow"].median_ms < 200
    assert result["fast"].median_ms < 5


@pytest.mark.parametrize("mode", ["events", "graph"])
def test_device_modes_need_a_gpu(mode):
    with pytest.raises(ValueError, match="needs a GPU"):
        timing.measure({"a": lambda i: None}, device="cpu", mode=mode)


def test_unknown_mode():
    with pytest.raises(ValueError, match="unknown timing mode 'fast'"):
        timing.measure({"a": lambda i: None}, device="cpu", mode="fast")


def test_the_host_clocks_least_disturbed_figure_takes_the_protocols_quickest_batch_warm_up_included():
    """In a container (no cgroup, so no CPU time) a side's time is also judged on its least disturbed batch: its
    quickest timed batch per call less the protocol's quickest per call, warm-up rounds included for the protocol
    (load only adds to a batch, so its quickest is the closest to the protocol alone)."""
    from evoteam.harness.judge import _least

    plan = {"null": (None, None, [0, 1], None, True, None), "candidate": (None, None, [0, 1, 2, 3], None, False, "null")}
    walls = {"null": [0.2, 5.0, 3.0], "candidate": [100.0, 8.0, 12.0]}  # round 0 is the warm-up
    assert _least(plan, walls, "candidate", warmup=1) == pytest.approx(8.0 / 4 - 0.2 / 2)
    assert _least(plan, walls, "candidate", warmup=0) == pytest.approx(8.0 / 4 - 0.2 / 2)
    assert _least(plan, {"null": [0.2], "candidate": [100.0]}, "candidate", warmup=1) == float("-inf")  # not timed yet
