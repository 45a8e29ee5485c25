"""One timed interval: one side's batch of calls through the judge <-> runner protocol, with nothing of the runner
running unseen around it.

One discipline on every target. A runner runs only while the judge talks to it or while its clock runs: from the
moment its answer arrives until its clock starts again, every process of it (threads, children, other sessions: its
cgroup) is frozen, so nothing of it works while the judge writes the next inputs, flushes the caches, checks outputs
or times the other side. A freeze that is not complete in time fails the workload (RunnerFault).

CPU (cputime): the runner is frozen while its inputs are written and the caches filled; its count starts, it thaws,
and the judge sends the calls one message each, copying call k's late inputs (the task's LATE_INPUTS) in just before
its message, so that no call can compute another call's set; at the last answer it is frozen again and only then is
its count read: the CPU time of every process of its cgroup, all of what it did until it stopped.

GPU: the runner is frozen while the judge writes the inputs and flushes the L2 cache with its own kernels (before
the runner enqueues anything: a runner's stream waiting on a word holds the GPU, and a kernel of another context
waits behind it, as seen on the H200), then thawed only to enqueue its batch (graph: the batch's calls captured in
one CUDA graph behind the release word; it is frozen again as it answers) or to launch its calls (events and
wallclock: its host launches each call once that call's release word is set, and is frozen at its answer). When the
runner's stream has signalled ready (its context is the resident one), the judge starts its clock on its own stream,
copies the late inputs in with the copy engine and sets the release word (events: per call, the next only once the
judge's host has read the previous call's done word); the clock stops after a copy-engine sample of the outputs.
Outputs that change after their sample were written after the end: work left running.

In graph mode the calls of a batch are released together; one call cannot compute the others' sets because they form
a chain (the task's CHAINED_INPUTS: call k+1's input is call k's output, poisoned until written: calls.CallSets).
Released one by one instead, each call cost 15-20 us of protocol where the judge's GPU copies its inputs, 276 us
from the judge's host behind the runner's kernels (an H100, scripts/batch_release_probe.py, 2026-12-06). Every wait
here has a deadline (BATCH_TIMEOUT_S, JUDGE_SYNC_S): gpu_model's rules, tested on CPU. Open: while the runner
enqueues its batch (after its inputs are written) its other threads run too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from evoteam.harness.calls import CallSets, Sample
from evoteam.harness.gpu_ops import DeviceOps, cuda_ops, wait_until
from evoteam.harness.runners import RunnerHandle
from evoteam.harness.shared import FlagPage

# A batch's device work: a fault or a hang there shows only as a missing done word (30 s: the workload's fault is
# reported within 30 s of its batch, with the runner's stacks)
BATCH_TIMEOUT_S = 30.0
JUDGE_SYNC_S = 10.0  # the judge's own kernels before a batch (its inputs, the flush) take milliseconds


@dataclass
class Interval:
    ms: float  # the judge's clock over the batch (GPU: its events; CPU: the runner's cgroup CPU time); NaN on failure
    reply: dict  # the runner's answer: {"ok": True}, or a failure it reports (read by runners.claimed_failure)
    sample: Sample | None = None  # the outputs as they were at the end mark
    wall_ms: float = math.nan  # CPU: the host clock over the same calls, less the runner's wait for a busy CPU
    inputs_s: float = 0.0  # the judge's time writing inputs and flushing caches
    freeze_s: float = 0.0  # the judge's time freezing the runner
    flush_s: float = 0.0  # CPU: the part of inputs_s the cache flush took (a GPU's flush is the device's time)


def run_cpu(handle: RunnerHandle, calls: CallSets, sets: list[int], batch: int, deadline: float,
            write: Callable[[], None], flusher, null: bool = False) -> Interval:
    """One CPU interval (see the module's docstring); `null`: the protocol alone, one empty message per call."""
    t = time.perf_counter()
    handle.freeze()
    t1 = time.perf_counter()
    freeze_s = t1 - t
    write()
    t2 = time.perf_counter()
    flusher.fill(batch & 0xFF)  # the caches hold nothing of either side when a call starts
    t3 = time.perf_counter()
    inputs_s, flush_s = t3 - t1, t3 - t2
    before = handle.process.cpu_usec()
    handle.thaw()  # after the count is read: all it does from here on counts
    # The time its threads (or the judge, which it waits on between calls) were ready to run but another process held
    # the CPU is the machine's load, not waiting the runner chose: on a loaded machine it can hold an honest call's
    # host clock at several times its CPU time; the cpu_idle check reads what is left (`wall - waited`). Both counts
    # are read inside the host clock's window, the judge's own nearest to it: read before the thaw (whose wake-up
    # can queue the judge) and after the freeze (which waits, sleeping and waking), they held waits the clock never
    # saw; on a loaded machine the protocol's own intervals came out at -4.8 ms, and a candidate sleeping 30 ms a
    # call passed the cpu_idle check.
    q_runner = handle.process.queued_usec()
    q_judge = _own_queued_usec()
    t0 = time.perf_counter()
    reply: dict = {"ok": True}
    for j in sets:
        calls.release_late(j)
        handle.send({"op": "call", "batch": batch, "sets": [] if null else [j]})
        reply = handle.receive(deadline - time.monotonic())
        if not reply.get("ok"):
            break
    wall = (time.perf_counter() - t0) * 1e3
    q_judge = _own_queued_usec() - q_judge
    q_runner = handle.process.queued_usec() - q_runner
    waited = (q_judge + q_runner) / 1e3
    t = time.perf_counter()
    handle.freeze()  # the answer is in: what the runner did until it stopped is counted; nothing after it runs
    freeze_s += time.perf_counter() - t
    after = handle.process.cpu_usec()
    sample = calls.take_sample(max(sets) + 1) if sets and not null else None
    ms = (after - before) / 1e3 if before is not None and after is not None else wall
    return Interval(ms, reply, sample, wall - waited, inputs_s, freeze_s, flush_s)


def _own_queued_usec() -> int:
    """This thread's time ready to run while the CPU was another's (the kernel's run-queue delay), 0 where unknown."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) // 1000
    except (OSError, ValueError, IndexError):
        return 0


class GpuHeld(Exception):
    """The judge's own work on the device did not finish in time: another context's work holds the GPU (a frozen
    runner's stream waiting on a word nobody writes holds the compute engine: gpu_model's wait_holds_compute)."""


def run_gpu(handle: RunnerHandle, calls: CallSets, sets: list[int], batch: int, deadline: float,
            write: Callable[[], None], flush: Callable[[], None] | None, graph: bool, null: bool = False,
            ops: DeviceOps | None = None) -> Interval:
    """One GPU interval (see the module's docstring): `graph` replays the runner's captured calls, else its host
    launches them; `null`: the protocol alone, the same words and sample for as many calls. `ops`: the device (the
    real one, or gpu_model's in tests). Every wait of the judge's has a deadline: a batch that does not end within
    BATCH_TIMEOUT_S is a RunnerFault (the runner's stacks in its log); work that keeps the judge's own kernels from
    running past JUDGE_SYNC_S raises GpuHeld."""
    ops = ops or cuda_ops()
    n = len(sets)
    if n < 1 or (not graph and n > FlagPage.MAX_CALLS):  # graph mode uses one release word for the batch
        raise ValueError(f"a batch holds 1 to {FlagPage.MAX_CALLS} calls (a graph any number), not {n}")
    deadline = min(deadline, time.monotonic() + BATCH_TIMEOUT_S)
    flags, finished, thawed = handle.flags, False, False
    out = Interval(math.nan, {"ok": True})
    try:
        # The judge's kernels (input writes, the flush) first: a runner's stream waiting on a word holds the GPU,
        # and a kernel of another context waits behind it (gpu_model's wait_holds_compute). The runner is frozen
        # meanwhile, and thawed only to enqueue its batch (graph) or to launch its calls (events).
        t = time.perf_counter()
        handle.freeze()
        t1 = time.perf_counter()
        ops.kernel("the batch's inputs", write)
        if flush is not None:
            ops.kernel("L2 flush", flush)  # the L2 cache holds nothing of the inputs when the clock starts
        if not ops.synchronize(min(deadline, time.monotonic() + JUDGE_SYNC_S)):
            raise GpuHeld(f"the judge's input writes and L2 flush did not finish in {JUDGE_SYNC_S:g} s: another "
                          f"context's work holds the GPU")
        out.freeze_s, out.inputs_s = t1 - t, time.perf_counter() - t1
        message = {"op": "arm" if graph else "call", "batch": batch, "sets": sets, "null": null}
        if graph:
            reply = handle.ask(message, deadline - time.monotonic())  # frozen again as it answers
            if not reply.get("ok"):
                out.reply = reply
                return out
            if not reply.get("enqueued", True):
                # its launch still waits behind the release word (launch_may_block): it runs on while the batch
                # does, and its host's enqueue is then inside the time (the graph's size, not a cheat); never a hang
                handle.thaw()
                thawed = True
        else:
            handle.send(message)
        early = handle.wait_flag(FlagPage.READY, batch, deadline)  # its context is the resident one
        if early is not None:
            out.reply = early
            return out
        base = flags.device_address
        start = ops.record()
        if graph:
            # Every call released at once, the batch one graph: released one by one, from the judge's host, a call
            # cost about 250 us more than the protocol alone on the H200; each call a graph of its own behind its
            # own word, about 10 us (2026-12-04). One call cannot compute the others' sets all the same: they form a
            # chain (the task's CHAINED_INPUTS: call k+1's input is call k's output, poisoned until call k writes it).
            ops.copy("the late inputs", lambda: calls.release_late(None))
            ops.write_word(base + FlagPage.call_release(0), batch)
            early = handle.wait_flag(FlagPage.DONE, batch, deadline)
            if early is not None:
                out.reply = early
                return out
        else:
            ops.copy("call 0's late inputs", lambda: calls.release_late(sets[0]))
            ops.write_word(base + FlagPage.call_release(0), batch)
            for k in range(n):
                # Call k+1's late inputs go in only once call k has signalled its end (the judge's host reads the
                # word)
                early = handle.wait_flag(FlagPage.call_done(k), batch, deadline)
                if early is not None:
                    out.reply = early
                    return out
                if k + 1 < n:
                    ops.copy(f"call {k + 1}'s late inputs", lambda j=sets[k + 1]: calls.release_late(j))
                    ops.write_word(base + FlagPage.call_release(k + 1), batch)
        sample = calls.plan_sample(max(sets) + 1)
        ops.copy("the outputs' sample", lambda: calls.read_sample(sample, ops.stream))  # behind the last call
        out.sample = sample
        end = ops.record()
        early = handle.wait_flag(FlagPage.DONE, batch, deadline)
        if early is not None:
            out.reply = early
            return out
        if not wait_until(end, ops.done, deadline):
            raise GpuHeld("the judge's end mark (behind a copy of the outputs) was not reached by the batch's "
                          "deadline: another context's work holds the GPU")
        if not graph:
            out.reply = handle.receive(deadline - time.monotonic())
        if not graph or thawed:
            t = time.perf_counter()
            handle.freeze()  # the answer is in: nothing of it runs until its clock starts again
            out.freeze_s += time.perf_counter() - t
        out.ms = ops.elapsed_ms(start, end)
        finished = True
        return out
    finally:
        if not finished:
            _unblock(flags, batch, n, ops)


def _unblock(flags: FlagPage, batch: int, n: int, ops: DeviceOps) -> None:
    """A batch that ended early (a call raised, the runner died or hung): the words the runner's stream may still
    wait for, written from the host, so that nothing of it stays queued behind them."""
    for k in range(min(n, FlagPage.MAX_CALLS)):  # a graph batch waits on call 0's word alone
        flags.set(FlagPage.call_release(k), batch)
        flags.set(FlagPage.call_done(k), batch)
    flags.set(FlagPage.DONE, batch)
    flags.set(FlagPage.READY, batch)
    ops.synchronize(time.monotonic() + JUDGE_SYNC_S)  # bounded: what holds the GPU past it is the caller's to end
