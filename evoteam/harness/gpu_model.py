"""A small model of one GPU as the harness's protocol uses it, for tests on CPU: the ordering rules the device has
shown, each with the run that showed it, enforced on the judge's and the runners' own protocol code (which drives
`ModelOps` here exactly as it drives gpu_ops.CudaOps on a GPU).

What is modelled: contexts (one per process: the judge, a runner), each with one stream, a FIFO of operations
(kernels, copy-engine transfers, waits on and writes of 32-bit words in a shared host page, events, graph launches);
the host page's words; which context the compute engine holds. What is not: time beyond the order of events, memory,
more than one stream a context. Each operation runs when the model is stepped and nothing ahead of it (on its stream,
or a rule) holds it back. A wait that nothing will end is a deadlock: `Deadlock` names the streams, the words they
wait on and the rule that held each.

The rules (RULES): every one was seen on a lent GPU, or is what the protocol relied on in every run since (say so).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    name: str
    text: str
    seen: str  # the device run that showed it


QUEUE_NODES = 1024  # a graph's nodes that a launch behind an unwritten word is taken to queue without holding the host

RULES = {rule.name: rule for rule in (
    Rule("wait_holds_compute",
         "A stream waiting on a word that is not yet written holds the GPU's compute engine: no kernel of another "
         "context runs until the word is written (copies and word writes of other contexts still do: "
         "copy_engine_free).",
         "H200, 2026-12-04, issue 35 call 1 (docs/results/2026-12-04-h200-harness-holes): with the runner armed "
         "before the judge wrote its inputs, the judge's L2 flush (54 us on an idle GPU) did not finish in 240 s"),
    Rule("copy_engine_free",
         "Copy-engine transfers and word writes of one context run while another context's stream waits on a word.",
         "every graph batch since issue 18 (H200, 2026-11-30 on): the judge's release (a host-to-device copy of the "
         "late inputs and a word write) runs behind the runner's wait; issue 52's probe measures it per call"),
    Rule("register_needs_context",
         "Host memory is registered for the GPU (cuMemHostRegister) only by a process with a current context.",
         "H200, 2026-12-04, issue 36 call 2 (docs/results/2026-12-04-h200-harness-speed): the judge registered a "
         "runner's flag page before its own context existed, CUDA error 3, every workload crashed"),
    Rule("register_once",
         "A host range stays registered as long as the process that registered it: registered again it fails.",
         "H200, 2026-12-02 (commit 968e3f3): a freed page's addresses reused by the next runner's page, CUDA error 712 "
         "for every later workload"),
    Rule("launch_may_block",
         f"A graph of more than {QUEUE_NODES} nodes launched behind a word not yet written may hold the launching host "
         "thread until the word is written: the host that launches must never be what the word's writer waits for.",
         "suspected for the arm timeouts of an honest PyTorch candidate on the H200, 2026-12-05 "
         "(docs/results/2026-12-05-h200-graph-arm-timeout); not reproduced on the H100, 2026-12-06 "
         "(scripts/graph_gate_probe.py: 3000-node graphs, uploaded first, returned at once)"),
    Rule("judge_waits_bounded",
         "The judge waits for the device only with a deadline: work of a frozen runner's that never ends (a wait on "
         "a word nobody writes holds the compute engine) must cost the workload, not the evaluation.",
         "follows from wait_holds_compute; the red team's hold_gpu_with_a_wait case shows it on a GPU"),
)}


class Deadlock(RuntimeError):
    """Nothing can run and what is waited for will not come."""


class RuleBroken(RuntimeError):
    def __init__(self, rule: str, detail: str):
        self.rule = RULES[rule]
        super().__init__(f"{rule}: {detail} (rule: {self.rule.text} Seen: {self.rule.seen})")


@dataclass
class Op:
    kind: str  # kernel, copy, wait, write, record, graph
    what: str
    fn: Callable[[], Any] | None = None
    address: int = 0
    value: int = 0
    event: Any = None


@dataclass
class ModelEvent:
    context: str
    reached: bool = False
    tick: int = -1


@dataclass
class ModelGraph:
    """A captured graph: its nodes (each a kernel or a copy), in order."""

    nodes: list[tuple[str, Callable[[], Any] | None]]
    uploaded: bool = True


@dataclass
class Context:
    name: str
    stream: deque = field(default_factory=deque)
    alive: bool = True
    registered: set = field(default_factory=set)


class GpuModel:
    """One GPU: its contexts, the registered host pages' words (read and written in place, so the processes' own views
    of the page see them), the engine's order of execution (`trace`). Thread-safe: a runner's host thread may drive
    its context while the judge's drives its own."""

    HOST_PAGE_BASE = 1 << 44  # device addresses of registered host memory start here (host address + base)

    def __init__(self) -> None:
        import threading

        self.contexts: dict[str, Context] = {}
        self.trace: list[tuple[str, str, str]] = []  # (context, kind, what), as run
        self.tick = itertools.count()
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ the host pages' words
    def word(self, address: int) -> int:
        return self._cell(address).value

    def set_word(self, address: int, value: int) -> None:
        self._cell(address).value = value

    def _cell(self, address: int):
        import ctypes

        host = address - self.HOST_PAGE_BASE
        if host <= 0:
            raise ValueError(f"device address {address:#x} is not in registered host memory")
        return ctypes.c_uint32.from_address(host)

    # ------------------------------------------------------------------ running
    def _holder(self, other_than: str) -> tuple[str, Op] | None:
        """A context other than `other_than` whose stream waits on a word not yet written (wait_holds_compute)."""
        for ctx in self.contexts.values():
            if ctx.name != other_than and ctx.alive and ctx.stream:
                head = ctx.stream[0]
                if head.kind == "wait" and self.word(head.address) < head.value:
                    return ctx.name, head
        return None

    def step(self) -> bool:
        """Run every operation that can run; whether any did."""
        with self.lock:
            progressed, again = False, True
            while again:
                again = False
                for ctx in list(self.contexts.values()):
                    while ctx.alive and ctx.stream:
                        op = ctx.stream[0]
                        if op.kind == "wait":
                            if self.word(op.address) < op.value:
                                break
                        elif op.kind == "kernel" and self._holder(ctx.name) is not None:
                            break  # wait_holds_compute
                        ctx.stream.popleft()
                        self._run(ctx, op)
                        progressed = again = True
            return progressed

    def _run(self, ctx: Context, op: Op) -> None:
        self.trace.append((ctx.name, op.kind, op.what))
        if op.kind == "write":
            self.set_word(op.address, op.value)
        elif op.kind == "record":
            op.event.reached, op.event.tick = True, next(self.tick)
        elif op.fn is not None:
            next(self.tick)
            op.fn()

    def run_until(self, condition: Callable[[], bool], what: str) -> None:
        """Step until `condition` holds; Deadlock when nothing can run and it does not."""
        while not condition():
            if not self.step():
                raise Deadlock(f"{what}: nothing can run. {self.describe_blocked()}")

    def describe_blocked(self) -> str:
        parts = []
        with self.lock:
            for ctx in self.contexts.values():
                if not (ctx.alive and ctx.stream):
                    continue
                head = ctx.stream[0]
                if head.kind == "wait":
                    parts.append(f"{ctx.name}'s stream waits on word {head.address:#x} >= {head.value} "
                                 f"(it holds {self.word(head.address)})")
                else:
                    holder = self._holder(ctx.name)
                    held = (f", held by {holder[0]}'s wait on word {holder[1].address:#x} (wait_holds_compute: "
                            f"{RULES['wait_holds_compute'].seen})") if holder else ""
                    parts.append(f"{ctx.name}'s {head.kind} {head.what!r} cannot run{held}")
        return "; ".join(parts) or "no stream has work"

    def end(self, name: str) -> None:
        """The context's process ended: its work goes with it."""
        with self.lock:
            ctx = self.contexts.get(name)
            if ctx is not None:
                ctx.alive = False
                ctx.stream.clear()


class ModelOps:
    """gpu_ops.DeviceOps on the model, for one process (`name`: its context; `judge`: the trusted judge, which may
    wait for the device only with a deadline)."""

    stream = None

    def __init__(self, model: GpuModel, name: str, judge: bool = False, launches_block: bool = False):
        """`launches_block`: a launch that launch_may_block covers holds the calling thread until the word it queues
        behind is written (what the rule says may happen), instead of being refused."""
        self.model, self.name, self.judge, self.launches_block = model, name, judge, launches_block

    @property
    def ctx(self) -> Context:
        ctx = self.model.contexts.get(self.name)
        if ctx is None or not ctx.alive:
            raise RuntimeError(f"{self.name} has no context (init() first)")
        return ctx

    def init(self) -> None:
        with self.model.lock:
            self.model.contexts.setdefault(self.name, Context(self.name))

    def register_host(self, address: int, nbytes: int) -> int:
        if self.name not in self.model.contexts:
            raise RuleBroken("register_needs_context", f"{self.name} registered host memory before it had a context")
        if address in self.ctx.registered:
            raise RuleBroken("register_once", f"{self.name} registered {address:#x} a second time")
        self.ctx.registered.add(address)
        return self.model.HOST_PAGE_BASE + address

    def _enqueue(self, op: Op) -> None:
        with self.model.lock:
            self.ctx.stream.append(op)
        self.model.step()

    def kernel(self, what: str, fn: Callable[[], Any] | None = None) -> None:
        self._enqueue(Op("kernel", what, fn))

    def copy(self, what: str, fn: Callable[[], Any]) -> None:
        self._enqueue(Op("copy", what, fn))

    def wait_word(self, address: int, value: int) -> None:
        self._enqueue(Op("wait", f"word {address:#x} >= {value}", address=address, value=value))

    def write_word(self, address: int, value: int) -> None:
        self._enqueue(Op("write", f"word {address:#x} = {value}", address=address, value=value))

    def record(self) -> ModelEvent:
        event = ModelEvent(self.name)
        self._enqueue(Op("record", "event", event=event))
        return event

    def _unwritten_ahead(self) -> Op | None:
        with self.model.lock:
            return next((op for op in self.ctx.stream if op.kind == "wait" and self.model.word(op.address) < op.value),
                        None)

    def launch(self, graph: ModelGraph) -> None:
        import time

        if len(graph.nodes) > QUEUE_NODES and not graph.uploaded:
            while self.launches_block and self._unwritten_ahead() is not None:
                time.sleep(0.001)  # held in the launch until the word is written
            if self._unwritten_ahead() is not None:
                raise RuleBroken("launch_may_block", f"{self.name} launched a graph of {len(graph.nodes)} nodes, not "
                                 f"uploaded, behind a word not yet written: the launch may not return until it is")
        with self.model.lock:
            for what, fn in graph.nodes:
                self.ctx.stream.append(Op("copy" if what.startswith("copy") else "kernel", what, fn))
        self.model.step()

    def done(self, event: ModelEvent) -> bool:
        self.model.step()
        return event.reached

    def elapsed_ms(self, start: ModelEvent, end: ModelEvent) -> float:
        if not (start.reached and end.reached):
            raise RuntimeError("elapsed time of an event not yet reached")
        return float(end.tick - start.tick) * 1e-3

    def synchronize(self, deadline: float | None = None) -> bool:
        """Runs the model until this context's stream is empty: False where it cannot (the deadline comes at once
        here: nothing else runs in the model while this process waits). The judge waiting with no deadline breaks
        judge_waits_bounded; a runner that cannot finish raises Deadlock (the judge's deadline ends it)."""
        if self.judge and deadline is None:
            raise RuleBroken("judge_waits_bounded", f"{self.name} waited for the device with no deadline")
        try:
            self.model.run_until(lambda: not self.ctx.stream, f"{self.name} waits for its work on the device")
            return True
        except Deadlock:
            if deadline is None:
                raise
            return False
