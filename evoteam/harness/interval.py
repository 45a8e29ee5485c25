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

Open on GPUs: in graph mode the calls of a batch are released together, so one call could compute the others' sets
(released one by one, each call cost 10-250 us more than the protocol alone on the H200); and while the runner
enqueues its batch (after its inputs are written) its other threads run too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evoteam.harness.calls import CallSets, Sample
from evoteam.harness.runners import RunnerHandle
from evoteam.harness.shared import FlagPage

BATCH_TIMEOUT_S = 60.0  # a graph batch's device work: a fault or a hang there shows only as a missing done word


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


def run_gpu(handle: RunnerHandle, calls: CallSets, sets: list[int], batch: int, deadline: float,
            write: Callable[[], None], flusher: torch.Tensor, graph: bool, null: bool = False) -> Interval:
    """One GPU interval (see the module's docstring): `graph` replays the runner's captured calls, else its host
    launches them; `null`: the protocol alone, the same words and sample for as many calls."""
    n = len(sets)
    if n < 1 or (not graph and n > FlagPage.MAX_CALLS):  # graph mode uses one release word for the batch
        raise ValueError(f"a batch holds 1 to {FlagPage.MAX_CALLS} calls (a graph any number), not {n}")
    if graph:
        deadline = min(deadline, time.monotonic() + BATCH_TIMEOUT_S)
    flags, finished = handle.flags, False
    out = Interval(math.nan, {"ok": True})
    try:
        # The judge's kernels (input writes, the flush) first: a runner's stream waiting on a word holds the GPU,
        # and a kernel of another context waits behind it (seen on the H200: the flush never ran). The runner is
        # frozen meanwhile, and thawed only to enqueue its batch (graph) or to launch its calls (events).
        t = time.perf_counter()
        handle.freeze()
        t1 = time.perf_counter()
        write()
        flusher.zero_()  # the L2 cache holds nothing of the inputs when the clock starts
        torch.cuda.synchronize()
        out.freeze_s, out.inputs_s = t1 - t, time.perf_counter() - t1
        message = {"op": "arm" if graph else "call", "batch": batch, "sets": sets, "null": null}
        if graph:
            reply = handle.ask(message, deadline - time.monotonic())  # frozen again as it answers
            if not reply.get("ok"):
                out.reply = reply
                return out
        else:
            handle.send(message)
        early = handle.wait_flag(FlagPage.READY, batch, deadline)  # its context is the resident one
        if early is not None:
            out.reply = early
            return out
        stream = torch.cuda.current_stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        from evoteam.harness import cudadrv

        base = flags.device_address
        start.record()
        if graph:
            # Every call released at once, the batch one graph: released one by one (each call a graph of its own,
            # its late inputs copied in once the judge's host read the previous call's done word) a call cost about
            # 250 us more than the protocol alone on the H200, and each call a graph of its own behind its own word
            # about 10 us (2026-12-04; causes not established). So a batch's calls all see their late inputs from the
            # start, and one call could compute the others' sets: open on GPUs.
            calls.release_late(None, stream)
            cudadrv.stream_write_value(stream.cuda_stream, base + FlagPage.call_release(0), batch)
            early = handle.wait_flag(FlagPage.DONE, batch, deadline)
            if early is not None:
                out.reply = early
                return out
        else:
            calls.release_late(sets[0], stream)
            cudadrv.stream_write_value(stream.cuda_stream, base + FlagPage.call_release(0), batch)
            for k in range(n):
                # Call k+1's late inputs go in only once call k has signalled its end (the judge's host reads the
                # word)
                early = handle.wait_flag(FlagPage.call_done(k), batch, deadline)
                if early is not None:
                    out.reply = early
                    return out
                if k + 1 < n:
                    calls.release_late(sets[k + 1], stream)
                    cudadrv.stream_write_value(stream.cuda_stream, base + FlagPage.call_release(k + 1), batch)
        out.sample = calls.take_sample(max(sets) + 1, stream.cuda_stream)  # by the copy engine, behind the last call
        end.record()
        early = handle.wait_flag(FlagPage.DONE, batch, deadline)
        if early is not None:
            out.reply = early
            return out
        end.synchronize()
        if not graph:
            out.reply = handle.receive(deadline - time.monotonic())
            t = time.perf_counter()
            handle.freeze()  # the answer is in: nothing of it runs until its clock starts again
            out.freeze_s += time.perf_counter() - t
        out.ms = start.elapsed_time(end)
        finished = True
        return out
    finally:
        if not finished:
            _unblock(flags, batch, n)


def _unblock(flags: FlagPage, batch: int, n: int) -> None:
    """A batch that ended early (a call raised, the runner died or hung): the words the runner's stream may still
    wait for, written from the host, so that nothing of it stays queued behind them."""
    for k in range(min(n, FlagPage.MAX_CALLS)):  # a graph batch waits on call 0's word alone
        flags.set(FlagPage.call_release(k), batch)
        flags.set(FlagPage.call_done(k), batch)
    flags.set(FlagPage.DONE, batch)
    flags.set(FlagPage.READY, batch)
    torch.cuda.synchronize()
