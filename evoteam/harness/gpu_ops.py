"""The device operations the GPU protocol orders, one object per process: what the judge (evoteam.harness.interval)
and a runner (evoteam.harness.runner) enqueue on their stream, and the only way either waits for the device.

`CudaOps` makes the real calls (PyTorch and the CUDA driver through evoteam.harness.cudadrv). The same protocol code
drives `evoteam.harness.gpu_model.ModelOps` in tests on CPU: a small model of the device with the ordering rules the
GPU has shown (gpu_model.RULES), so that a change that breaks one fails in CI, before a GPU sees it.

Every wait of the judge's for the device is bounded (`synchronize(deadline)`, `wait_event`): a runner's work that never
ends (a stream waiting on a word nobody writes holds the GPU from the judge's kernels) must cost the judge a deadline,
never its life.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

POLL_S = 20e-6  # between polls of an event the judge waits for, after the first millisecond of spinning


class DeviceOps(Protocol):
    """What one process does to the device, in the order it does it (its one stream)."""

    stream: Any  # the stream handle the copies run on (cudadrv's int; None in the model)

    def init(self) -> None:
        """This process's context, current on the calling thread."""

    def register_host(self, address: int, nbytes: int) -> int:
        """Host memory (the flag page) mapped for the device: its device address."""

    def kernel(self, what: str, fn: Callable[[], Any] | None = None) -> None:
        """Work on the multiprocessors (PyTorch ops, a candidate's call), enqueued on the stream."""

    def copy(self, what: str, fn: Callable[[], Any]) -> None:
        """A copy-engine transfer enqueued on the stream (it takes no multiprocessor time)."""

    def wait_word(self, address: int, value: int) -> None:
        """Enqueue: the stream waits until the 32-bit word at `address` is >= value."""

    def write_word(self, address: int, value: int) -> None:
        """Enqueue: the stream writes `value` to the word at `address` (after what it enqueued before)."""

    def record(self) -> Any:
        """An event recorded on the stream now (a timestamp when the stream reaches it)."""

    def launch(self, graph: Any) -> None:
        """Enqueue a captured graph (its upload done at capture)."""

    def done(self, event: Any) -> bool:
        """Whether the stream has reached the event."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Device time between two reached events."""

    def synchronize(self, deadline: float | None = None) -> bool:
        """Wait until this process's work on the device has ended: True, or False at the deadline (the device is
        held by another context's work: the caller decides what ends it). None: no deadline (a runner's own wait)."""


class CudaOps:
    """The real device: PyTorch's current stream and context, the driver's stream memory operations."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self._handle: int | None = None

    @property
    def stream(self) -> int:
        """The handle of the stream the protocol uses (PyTorch's current stream when first asked: the default)."""
        if self._handle is None:
            self._handle = self.torch.cuda.current_stream().cuda_stream
        return self._handle

    def init(self) -> None:
        torch = self.torch
        torch.cuda.init()
        torch.empty(1, device="cuda")  # creates the context (and makes it current)
        from evoteam.harness import cudadrv

        cudadrv.ensure_context(torch.cuda.current_device())

    def register_host(self, address: int, nbytes: int) -> int:
        from evoteam.harness import cudadrv

        return cudadrv.register_host(address, nbytes)

    def kernel(self, what: str, fn: Callable[[], Any] | None = None) -> None:
        if fn is not None:
            fn()

    def copy(self, what: str, fn: Callable[[], Any]) -> None:
        fn()

    def wait_word(self, address: int, value: int) -> None:
        from evoteam.harness import cudadrv

        cudadrv.stream_wait_value(self.stream, address, value)

    def write_word(self, address: int, value: int) -> None:
        from evoteam.harness import cudadrv

        cudadrv.stream_write_value(self.stream, address, value)

    def record(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def launch(self, graph: Any) -> None:
        graph.replay()

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def synchronize(self, deadline: float | None = None) -> bool:
        if deadline is None:
            self.torch.cuda.synchronize()
            return True
        return wait_until(self.record(), self.done, deadline)


def wait_until(event: Any, done: Callable[[Any], bool], deadline: float) -> bool:
    """Poll `done(event)` until it holds (True) or the deadline passes (False): spinning the first millisecond (the
    protocol's own waits are microseconds), then sleeping between polls."""
    spin_until = time.monotonic() + 1e-3
    while not done(event):
        now = time.monotonic()
        if now > deadline:
            return False
        if now > spin_until:
            time.sleep(POLL_S)
    return True


_CUDA: CudaOps | None = None


def cuda_ops() -> CudaOps:
    """This process's real device operations (one object: the stream handle is read once)."""
    global _CUDA
    if _CUDA is None:
        _CUDA = CudaOps()
    return _CUDA
