"""The GPU protocol's ordering rules, on CPU: the judge's own interval code (evoteam.harness.interval.run_gpu) and the
runner's own ops (evoteam.harness.runner.Runner) drive a model of the device (evoteam.harness.gpu_model) that holds
them to the rules the GPU has shown. Each GPU-only mistake so far cost a whole device call; here such a change fails
in CI. Every rule names the device run that showed it (gpu_model.RULES)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from evoteam.harness import interval
from evoteam.harness.calls import CallSets
from evoteam.harness.gpu_model import QUEUE_NODES, RULES, GpuModel, ModelGraph, ModelOps, RuleBroken
from evoteam.harness.model import Status
from evoteam.harness.runner import Runner
from evoteam.harness.runners import RunnerFault
from evoteam.harness.shared import FlagPage
from evoteam.harness.timing import MAX_GRAPH_NODES
from evoteam.task import load_task

TASK = load_task("mla_decode")
STILL_S = 1.0  # nothing running for this long, while the judge waits for a word: a deadlock


def _honest(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    ref = TASK.reference({"q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
                          "kv_indptr": kv_indptr, "kv_indices": kv_indices, "sm_scale": sm_scale})
    output.copy_(ref["output"])
    lse.copy_(ref["lse"])


class ModelHandle:
    """The judge's handle on a runner that lives in this process and drives the model (runners.RunnerHandle's part
    that interval.run_gpu uses): its ops run as the real runner's would, host words and all."""

    def __init__(self, model: GpuModel, runner: Runner, flags: FlagPage):
        self.model, self.runner, self.flags = model, runner, flags
        self.frozen = self.dead = False
        self.thread: threading.Thread | None = None
        self.reply: dict | None = None

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False

    def _op(self, msg: dict) -> dict:
        try:
            return getattr(self.runner, f"op_{msg['op']}")(msg, [])
        except Exception as exc:  # noqa: BLE001 - as the real runner reports a failure
            return {"ok": False, "status": "exception", "detail": f"{type(exc).__name__}: {exc}"}

    def ask(self, msg: dict, timeout_s: float, fds=()) -> dict:
        self.thaw()
        reply = self._op(msg)
        self.freeze()
        return reply

    def send(self, msg: dict, fds=()) -> None:  # events: the runner's host launches its calls as the judge releases
        self.thaw()
        self.reply = None
        self.thread = threading.Thread(target=lambda: setattr(self, "reply", self._op(msg)), daemon=True)
        self.thread.start()

    def receive(self, timeout_s: float) -> dict:
        self.thread.join(timeout_s)
        return self.reply

    def wait_flag(self, offset: int, value: int, deadline: float, what: str = "") -> dict | None:
        still_since = None  # nothing ran and no runner thread was alive since then
        while self.flags.get(offset) < value:
            progressed = self.model.step()
            busy = (self.thread is not None and self.thread.is_alive()) or any(
                t.name == "evoteam-arm" and t.is_alive() for t in threading.enumerate())
            if self.thread is not None and not busy and self.reply is not None and not self.reply.get("ok"):
                return self.reply
            if progressed or busy:
                still_since = None
            elif still_since is None:
                still_since = time.monotonic()
            elif time.monotonic() - still_since > STILL_S:  # a moment's grace: a thread that just ended
                self.kill()
                raise RunnerFault(Status.TIMEOUT, f"deadlock waiting for word {offset} >= {value} (it holds "
                                  f"{self.flags.get(offset)}; reply {self.reply}): {self.model.describe_blocked()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RunnerFault(Status.TIMEOUT, "no signal in time")
            time.sleep(0.0005)
        return None

    def kill(self) -> None:
        self.dead = True
        self.model.end("runner")

    def dump_stacks(self) -> None:
        pass

    def stacks(self) -> str:
        return ""


@pytest.fixture
def rig():
    """A judge and a runner on one model GPU, an MLA workload's call sets between them (a batch of 4, chained)."""
    model = GpuModel()
    judge_ops = ModelOps(model, "judge", judge=True)
    judge_ops.init()
    flags = FlagPage("cpu", ops=judge_ops)
    runner = Runner(channel=None)
    runner.ops, runner.threaded_arm = ModelOps(model, "runner"), False
    runner.op_hello({"op": "hello"}, [flags.fd])
    workload = TASK.scaled_workloads("small")[0]
    calls = CallSets(TASK, workload, "cpu", 4)
    runner.sets = []
    for ref in calls.refs:
        inputs = {**{n: calls.arena.tensor(r) for n, r in ref["inputs"].items()}, **calls.scalars}
        runner.sets.append((inputs, {n: calls.arena.tensor(r) for n, r in ref["outputs"].items()}))
    runner.calls = [lambda i=i, o=o: _honest(**i, **o) for i, o in runner.sets]
    runner.graph = ModelGraph([(f"call {j}", call) for j, call in enumerate(runner.calls)])
    return model, judge_ops, ModelHandle(model, runner, flags), calls


def _batch(rig, graph: bool = True, n: int = 4, seed: int = 3, deadline_s: float = 5.0):
    model, judge_ops, handle, calls = rig
    sets = list(range(n))
    return interval.run_gpu(handle, calls, sets, seed, time.monotonic() + deadline_s,
                            write=lambda: calls.refresh(sets, seed), flush=lambda: None, graph=graph, ops=judge_ops)


def _all_pass(calls: CallSets, n: int) -> None:
    for j in range(n):
        failure, _ = calls.verify(j, 0)
        assert failure is None, (j, failure)


def test_a_graph_batch_runs_through_the_protocol_in_order(rig):
    """The judge's kernels, then the runner's warm kernel, ready word and wait, the release (a copy and a word), the
    calls, the done word, the judge's sample and end mark: every call right, its chained input the last one's output."""
    model, _, _, calls = rig
    out = _batch(rig)
    assert out.reply.get("ok") and out.ms == out.ms and out.sample is not None
    _all_pass(calls, 4)
    order = [(ctx, what) for ctx, kind, what in model.trace if kind in ("kernel", "copy", "write")]
    first_call = order.index(("runner", "call 0"))
    release = order.index(("judge", "the late inputs"))
    assert order.index(("judge", "the batch's inputs")) < order.index(("runner", "warm")) < release < first_call
    assert order.index(("judge", "the outputs' sample")) > order.index(("runner", "call 3"))


def test_events_mode_releases_each_call_after_the_last_ended(rig):
    """Events: the runner's host launches call k once its release word is set; the judge copies call k+1's late
    inputs in only after call k's done word."""
    model, _, handle, calls = rig
    handle.runner.calls = handle.runner.calls[:1]
    out = _batch(rig, graph=False, n=1)
    assert out.reply.get("ok"), out.reply
    _all_pass(calls, 1)


def test_the_runner_armed_before_the_judges_writes_holds_the_judge_off(rig):
    """wait_holds_compute: the first design armed the runner first (its stream waiting on a word), then the judge
    wrote the inputs and flushed with its own kernels: the flush never ran (H200, 2026-12-04)."""
    model, judge_ops, handle, calls = rig
    handle.ask({"op": "arm", "batch": 1, "sets": [0, 1, 2, 3]}, 5)  # the old order: the runner waits first
    judge_ops.kernel("L2 flush", lambda: None)
    assert not judge_ops.synchronize(time.monotonic() + 1)
    assert "wait_holds_compute" in model.describe_blocked()
    assert "240 s" in RULES["wait_holds_compute"].seen


def test_a_frozen_candidates_wait_on_a_word_costs_its_workload_not_the_evaluation(rig):
    """judge_waits_bounded: a candidate that leaves its stream waiting on a word nobody writes, then is frozen, holds
    the judge's next kernels; the judge's wait has a deadline (GpuHeld), never a hang; ending the runner frees it."""
    model, judge_ops, handle, calls = rig
    handle.runner.ops.wait_word(handle.flags.device_address + 4000, 1)  # nobody writes it
    with pytest.raises(interval.GpuHeld):
        _batch(rig)
    handle.kill()  # as the judge does (Judge._gpu_held): the context goes, and its work with it
    assert judge_ops.synchronize(time.monotonic() + 1)
    with pytest.raises(RuleBroken, match="judge_waits_bounded"):
        judge_ops.synchronize()  # the judge may never wait for the device without a deadline


def test_host_memory_is_registered_only_with_a_context():
    """register_needs_context (H200, 2026-12-04: CUDA error 3, every workload crashed) and register_once (712)."""
    model = GpuModel()
    ops = ModelOps(model, "judge", judge=True)
    with pytest.raises(RuleBroken, match="register_needs_context"):
        FlagPage("cpu", ops=ops)
    ops.init()
    page = FlagPage("cpu", ops=ops)
    import ctypes

    with pytest.raises(RuleBroken, match="register_once"):
        ops.register_host(ctypes.addressof(ctypes.c_char.from_buffer(page.page)), FlagPage.SIZE)


def test_a_batch_never_needs_a_launch_that_may_hold_its_host(rig):
    """launch_may_block: the judge keeps a graph batch at MAX_GRAPH_NODES nodes or fewer, within what a launch behind
    the unwritten word queues; a larger graph not uploaded would break the rule."""
    model, judge_ops, handle, calls = rig
    assert MAX_GRAPH_NODES <= QUEUE_NODES
    runner = handle.runner
    runner.graph = ModelGraph([("node", None)] * (QUEUE_NODES + 1), uploaded=False)
    reply = handle.ask({"op": "arm", "batch": 9, "sets": [0]}, 5)
    assert not reply["ok"] and "launch_may_block" in reply["detail"]


def test_one_call_that_computes_its_whole_batch_reads_poison_through_the_protocol(rig):
    """The batch hole, through the protocol: the first call computes every set from what the buffers hold when it
    runs; the chained inputs of the later sets are still poison, and the judge's checks fail them."""
    model, judge_ops, handle, calls = rig
    runner = handle.runner
    taken = []

    def whole_batch():
        for inputs, outputs in runner.sets:
            taken.append(({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}, outputs))
        for inputs, outputs in taken:
            _honest(**inputs, **outputs)

    runner.graph = ModelGraph([("call 0 (the whole batch)", whole_batch)] + [(f"call {j}", None) for j in (1, 2, 3)])
    out = _batch(rig)
    assert out.reply.get("ok")
    failures = [calls.verify(j, 0)[0] for j in range(4)]
    assert failures[0] is None and all(f is not None for f in failures[1:])


def test_a_launch_that_holds_its_host_never_holds_the_batch(rig):
    """launch_may_block, as it may happen: the runner's graph launch does not return until the release word is
    written. The runner answers `arm` within ARM_ANSWER_S all the same (the launch on a thread of its own), says the
    launch has not returned, and the judge thaws it and releases the word: the batch ends, right. (An arm that
    waited for its launch would wait for the release that waits for its answer: the deadlock issue 52 rules out.)"""
    model, judge_ops, handle, calls = rig
    runner = handle.runner
    runner.ops.launches_block, runner.threaded_arm = True, True
    nodes = [(f"call {j}", call) for j, call in enumerate(runner.calls)]
    runner.graph = ModelGraph(nodes + [("empty node", None)] * QUEUE_NODES, uploaded=False)
    replies = []
    ask = handle.ask
    handle.ask = lambda msg, timeout_s, fds=(): replies.append(ask(msg, timeout_s, fds)) or replies[-1]
    out = _batch(rig)
    assert replies == [{"ok": True, "enqueued": False}]
    assert out.reply.get("ok") and out.ms == out.ms
    _all_pass(calls, 4)
    assert handle.frozen  # thawed for its launch, frozen again once the batch ended
