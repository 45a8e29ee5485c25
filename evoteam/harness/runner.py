"""The runner: the process that holds a candidate (or, trusted, the baseline library) and nothing
else of an evaluation. `python -m evoteam.harness.runner FD` talks to the judge over the Unix socket
FD; the judge starts it in the sandbox (`evoteam.harness.sandbox`).

It maps the buffers the judge shares (inputs, outputs, a page of flag words), calls the entry point
`entry(**inputs, **outputs)` on the judge's request (a value-returning solution with the inputs alone, what it
returns copied into the outputs within the call: `deliver`) and, on a GPU, orders its work with the flag
words: a batch of calls is enqueued behind the judge's release word and ends by writing the done
word, so the judge's clock sees the device work and nothing of this process's host side. Nothing
this process says or does is believed: the judge times, checks and decides. It imports neither the
task nor its reference.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch

from evoteam.harness.protocol import Channel, ChannelClosed
from evoteam.harness.shared import FlagPage, MappedBuffers, TensorRef

STUCK_DUMP_S = 30.0  # see Runner.serve
ARM_ANSWER_S = 1.0  # op_arm answers once its launch has returned, or after this long in any case
CPU_TIMED_OPS = ("call",)
FATAL_CUDA_MARKERS = ("illegal memory access", "misaligned address", "device-side assert", "unspecified launch failure",
                      "illegal instruction", "an illegal", "CUDA error")


def _detail(exc: BaseException) -> str:
    try:
        message = str(exc).strip()
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        message = "<unprintable message>"
    head = f"{type(exc).__name__}: {message[:600]}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    tail = "".join(traceback.format_list(frames)).rstrip()
    return f"{head}\n{tail}" if tail else head


def _compiler_detail(exc: BaseException) -> str:
    """The compiler's own words: its error lines first, then the end of its output."""
    text = str(exc)
    errors = [line.strip() for line in text.splitlines() if "error" in line.lower()][:12]
    return f"{type(exc).__name__}: " + "\n".join(errors + ["..."] + text.splitlines()[-8:])[-3000:]


class WrongOutputs(Exception):
    """A value-returning solution returned what its outputs cannot be, with the verdict flashinfer-bench 0.1.2 gives it
    (its DefaultEvaluator.check_correctness, which takes the value through bench/evaluators/utils.normalize_result):
    `exception` (RUNTIME_ERROR) for what normalize_result raises on (a dict, a wrong count, a value that is not a
    tensor or a number), `output_replaced` (INCORRECT_SHAPE) for a shape, `output_dtype` (INCORRECT_DTYPE) for a
    dtype."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def _returned(value: Any, names: list[str]) -> list[Any]:
    """What a value-returning solution returned, one value per output in the definition's order, taken as
    flashinfer-bench's normalize_result takes it: a tuple or list of one value per output, else one value for a
    single output. A dict is none of these there (a RUNTIME_ERROR), so it is none here."""
    if isinstance(value, dict):
        raise WrongOutputs("exception", f"returned a dict; return a tuple or list in the definition's order "
                                        f"({', '.join(names)}), as flashinfer-bench takes it")
    if isinstance(value, (tuple, list)):
        if len(value) != len(names):
            raise WrongOutputs("exception", f"returned {len(value)} values for {len(names)} outputs "
                                            f"({', '.join(names)})")
        return list(value)
    if len(names) != 1:
        raise WrongOutputs("exception", f"returned one {type(value).__name__} for {len(names)} outputs "
                                        f"({', '.join(names)})")
    return [value]


def deliver(value: Any, outputs: dict[str, torch.Tensor]) -> None:
    """What a value-returning solution returned, copied into the judge's output buffers (part of the call, so part of
    its time, as its allocation is in flashinfer-bench's). A value of another shape or dtype is refused, never
    broadcast or converted (copy_ would do both); a scalar becomes a tensor of the output's dtype, as there. Every
    value is converted before any is checked, and each output's shape before its dtype, in the definition's order:
    flashinfer-bench's order, so that the first failure is the one it reports."""
    tensors = []
    for (name, out), v in zip(outputs.items(), _returned(value, list(outputs))):
        if not isinstance(v, torch.Tensor):
            try:
                v = torch.tensor(v, dtype=out.dtype, device=out.device)
            except (TypeError, ValueError, RuntimeError):
                raise WrongOutputs("exception", f"output {name}: returned a {type(v).__name__}, not a tensor") from None
        tensors.append(v)
    for (name, out), v in zip(outputs.items(), tensors):
        if tuple(v.shape) != tuple(out.shape):
            raise WrongOutputs("output_replaced",
                               f"output {name}: returned shape {tuple(v.shape)}, the definition's is {tuple(out.shape)}")
        if v.dtype != out.dtype:
            raise WrongOutputs("output_dtype", f"output {name}: returned dtype {v.dtype}, the definition's is {out.dtype}")
    with torch.no_grad():
        for out, v in zip(outputs.values(), tensors):
            out.copy_(v)


def _failure(exc: BaseException) -> dict:
    if isinstance(exc, WrongOutputs):  # flashinfer-bench's verdict on what it returned
        return {"ok": False, "status": exc.status, "detail": f"WrongOutputs: {exc}"}
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return {"ok": False, "status": "out_of_memory", "detail": _detail(exc), "fatal": True}
    fatal = any(m in str(exc) for m in FATAL_CUDA_MARKERS) and torch.cuda.is_available()
    return {"ok": False, "status": "crash" if fatal else "exception", "detail": _detail(exc), "fatal": fatal}


class Runner:
    def __init__(self, channel: Channel):
        self.channel = channel
        self.fn: Callable[..., Any] | None = None
        self.keywords = True  # entry(**inputs, **outputs); a Solution is called positionally
        self.returns = False  # a value-returning Solution: entry(*inputs), its result delivered into the outputs
        self.baseline = None
        self.task = None
        self.mapped: MappedBuffers | None = None
        self.sets: list[tuple[dict, dict]] = []
        self.calls: list[Callable[[], None]] = []
        self.flags: FlagPage | None = None
        self.cuda = torch.cuda.is_available() and os.environ.get("EVOTEAM_RUNNER_DEVICE", "cpu").startswith("cuda")
        self.stream = None
        self.graph: torch.cuda.CUDAGraph | None = None  # the batch's calls (graph mode)
        self.pending: list[tuple[int, Any, Any]] = []  # (batch, start event, end event) of armed batches
        self._reported: list[tuple[int, float]] = []
        self._warm = None
        self.graph_kernels: list[str] | None = None  # the kernels of the captured batch, read from its graph
        self.ops = None  # the device operations (gpu_ops.CudaOps on a GPU; gpu_model.ModelOps in tests)
        self.threaded_arm = True  # graph batches launched from a thread of their own (op_arm)
        if self.cuda:
            from evoteam.harness.gpu_ops import cuda_ops

            self.ops = cuda_ops()

    # ------------------------------------------------------------------ messages
    def serve(self) -> None:
        while True:
            try:
                msg, fds = self.channel.recv()
            except ChannelClosed:
                return
            op = msg.get("op")
            # An op still running after STUCK_DUMP_S writes every thread's stack to this runner's log (the judge
            # ends a silent runner with SIGKILL, which leaves no word of where it was; its log reaches the
            # evaluation's log tail). A diagnostic only: nothing is decided by it. Not armed for the calls the judge
            # times on a CPU (arming starts a thread: its CPU time would be in every interval); on a GPU the judge's
            # clock starts at the release word, after it.
            watched = self.cuda or op not in CPU_TIMED_OPS
            if watched:
                faulthandler.dump_traceback_later(STUCK_DUMP_S, exit=False)
            try:
                reply = getattr(self, f"op_{op}")(msg, fds)
            except Exception as exc:  # noqa: BLE001 - any failure of the candidate is reported, never believed
                reply = _failure(exc)
            except SystemExit as exc:
                reply = {"ok": False, "status": "exception", "detail": f"SystemExit({exc.code}) from the candidate"}
            finally:
                if watched:
                    faulthandler.cancel_dump_traceback_later()
            try:
                self.channel.send({**reply, "turn": msg.get("turn")})  # the judge matches each answer to its message
            except ChannelClosed:
                return
            if op == "exit" or reply.get("fatal"):
                os._exit(3 if reply.get("fatal") else 0)

    def op_hello(self, msg: dict, fds: list[int]) -> dict:
        if self.ops is not None:
            self.ops.init()  # first: the flag page is registered with this context (register_needs_context)
            self.stream = torch.cuda.current_stream() if self.cuda else None
            self._warm = torch.zeros(1, device="cuda") if self.cuda else torch.zeros(1)
        self.flags = _flag_page(fds[0], self.ops) if fds else None
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid(), "cuda": self.cuda}

    def op_load(self, msg: dict, fds: list[int]) -> dict:
        if msg["kind"] == "candidate":
            path = msg["path"]
            self.keywords = msg.get("keywords", True)
            self.returns = msg.get("returns", False)
            if msg.get("compile"):
                return self._build(msg)
            try:
                if msg.get("root"):
                    sys.path.insert(0, msg["root"])  # a solution's other Python files import as modules
                spec = importlib.util.spec_from_file_location("candidate", path)
                module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
                sys.modules["candidate"] = module
                spec.loader.exec_module(module)  # type: ignore[union-attr]
                fn = getattr(module, msg["entry"], None)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the candidate's own failure
                return {"ok": False, "status": "compile_error", "detail": _detail(exc)}
            if not callable(fn):
                return {"ok": False, "status": "compile_error",
                        "detail": f"{os.path.basename(path)} defines no callable {msg['entry']!r} (the entry point)"}
            # outside the candidate's try: a fault here is evoteam's, never the candidate's compile error
            from evoteam import triton_interpreter

            triton_interpreter.apply()  # a Triton candidate on a CPU: same results, less time
            self.fn = fn
            _freeze_heap()
            return {"ok": True}
        # The baseline runner (trusted): the library adapter, built from the task.
        from evoteam.hardware import load_spec
        from evoteam.harness import baselines
        from evoteam.task import load_task

        self.task = load_task(msg["task"])
        self.baseline = baselines.create(msg["name"], self.task, load_spec(msg["hardware"]), **msg["options"])
        _freeze_heap()
        return {"ok": True, "label": self.baseline.label, "version": self.baseline.version,
                "timing_mode_override": self.baseline.timing_mode_override}

    def op_bind(self, msg: dict, fds: list[int]) -> dict:
        self.op_unbind(msg, [])
        self.mapped = MappedBuffers(msg["buffers"], fds)
        for entry in msg["sets"]:
            inputs = {k: self.mapped.tensor(TensorRef.from_json(v)) if "buffer" in v else v["value"]
                      for k, v in entry["inputs"].items()}
            outputs = {k: self.mapped.tensor(TensorRef.from_json(v)) for k, v in entry["outputs"].items()}
            self.sets.append((inputs, outputs))
        if self.baseline is not None:
            from evoteam.schema import Workload

            workload = Workload.from_json(msg["workload"])
            self.calls = []
            for inputs, outputs in self.sets:
                run = self.baseline.prepare(self.task, workload, inputs)
                self.calls.append(lambda run=run, i=inputs, o=outputs: run(**i, **o))
        else:
            fn = self.fn
            if self.keywords:
                self.calls = [lambda i=inputs, o=outputs: fn(**i, **o) for inputs, outputs in self.sets]
            elif self.returns:  # inputs in the definition's order; the copy is captured with the call in graph mode
                args = [tuple(inputs.values()) for inputs, _ in self.sets]
                self.calls = [lambda a=a, o=outputs: deliver(fn(*a), o) for a, (_, outputs) in zip(args, self.sets)]
            else:  # a Solution: inputs then outputs, in the definition's order (the judge sends them so)
                args = [(*inputs.values(), *outputs.values()) for inputs, outputs in self.sets]
                self.calls = [lambda a=a: fn(*a) for a in args]
        return {"ok": True, "sets": len(self.sets)}

    def _build(self, msg: dict) -> dict:
        """C++/CUDA sources built by torch's extension loader (as flashinfer-bench's torch builder does),
        in the cache folder of these exact sources: a second evaluation loads what the first built."""
        from torch.utils.cpp_extension import load

        root = msg["root"]
        build = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(root, ".."), "torch_extensions",
                             msg["name"])
        os.makedirs(build, exist_ok=True)
        # One builder of these sources at a time, by a lock the kernel drops when its holder dies. torch's own lock
        # (build/lock, a file made with O_EXCL and removed by its builder) outlives a runner killed mid-build (a
        # timeout, Ctrl-C, a lost node): every later load() of the folder then waited for it until the load limit. On
        # the H100 (2026-12-06) an honest CUDA candidate waited so through three later device calls, behind a lock
        # that a cut call had left in the carried cache. Under the flock no live builder holds torch's lock, so one
        # found there is stale.
        guard = os.open(os.path.join(build, ".evoteam-build.lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(build, "lock"))
            ext = load(name=msg["name"], sources=[os.path.join(root, p) for p in msg["compile"]],
                       extra_include_paths=[root], with_cuda=msg["language"] == "cuda", build_directory=build,
                       verbose=False)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the compiler's verdict on the candidate
            return {"ok": False, "status": "compile_error", "detail": _compiler_detail(exc)}
        finally:
            os.close(guard)  # and with it the flock
        fn = getattr(ext, msg["entry"], None)
        if not callable(fn):
            return {"ok": False, "status": "compile_error",
                    "detail": f"the built extension exports no {msg['entry']!r} (the entry point's symbol)"}
        self.fn = fn
        return {"ok": True}

    def op_unbind(self, msg: dict, fds: list[int]) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
        self.graph, self.pending, self.graph_kernels = None, [], None
        self.calls, self.sets = [], []
        if self.mapped is not None:
            import gc

            gc.collect()  # the tensors on the buffers (and closures holding them) go before the buffers do
            self.mapped.close()
            self.mapped = None
        return {"ok": True}

    def op_call(self, msg: dict, fds: list[int]) -> dict:
        """Calls launched by this process's host (events and wallclock modes, and CPUs, where the judge sends one
        call a message). On a GPU each call k waits, on the host and on the stream, for its release word, and
        the stream writes its done word after it."""
        batch, sets, null = int(msg["batch"]), list(msg["sets"]), bool(msg.get("null"))
        if self.ops is None:
            if not null:
                for j in sets:
                    self.calls[j]()
            return {"ok": True}
        ops, base, flags = self.ops, self.flags.device_address, self.flags
        self._prepare(batch)
        done = 0
        try:
            for k, j in enumerate(sets):
                ops.wait_word(base + FlagPage.call_release(k), batch)
                while flags.get(FlagPage.call_release(k)) < batch:
                    pass
                if not null:
                    ops.kernel(f"call {j}", self.calls[j])
                ops.write_word(base + FlagPage.call_done(k), batch)
                done = k + 1
        finally:
            for k in range(done, len(sets)):  # a call that raised: the judge's stream waits for these words
                ops.write_word(base + FlagPage.call_done(k), batch)
            ops.write_word(base + FlagPage.DONE, batch)
        ops.synchronize()  # a fault of this call is reported for this call
        return {"ok": True}

    def op_sync(self, msg: dict, fds: list[int]) -> dict:
        if self.ops is not None:
            self.ops.synchronize()
        return {"ok": True}

    def op_arm(self, msg: dict, fds: list[int]) -> dict:
        """Graph mode: enqueue a batch (the calls' graph behind one release word) and answer; `null` for the protocol
        alone, which only the trusted runner is asked for. The launch runs on a thread of its own: should it hold
        the host behind the unwritten word (gpu_model's launch_may_block), the answer still comes, within
        ARM_ANSWER_S, saying so (`enqueued`: False), and the judge thaws this process and releases the word: a batch
        never waits on the answer that its own release waits for."""
        import threading

        batch, null = int(msg["batch"]), bool(msg.get("null"))
        ops, base = self.ops, self.flags.device_address
        self._collect()
        self._prepare(batch)
        ops.wait_word(base + FlagPage.call_release(0), batch)
        start = ops.record()
        entry = {"batch": batch, "start": start, "end": None, "launched": threading.Event()}

        def launch() -> None:
            try:
                if not null:
                    ops.launch(self.graph)
                entry["end"] = ops.record()
            finally:
                ops.write_word(base + FlagPage.DONE, batch)  # whatever happened: nothing waits on a word never set
                entry["launched"].set()

        self.pending.append(entry)
        if not self.threaded_arm:
            launch()
            return {"ok": True, "enqueued": True}
        thread = threading.Thread(target=self._on_stream(launch), name="evoteam-arm", daemon=True)
        thread.start()
        return {"ok": True, "enqueued": entry["launched"].wait(ARM_ANSWER_S)}

    def _on_stream(self, fn):
        """fn on this process's protocol stream (a thread's current stream is its own)."""
        if self.stream is None:
            return fn

        def run() -> None:
            with torch.cuda.stream(self.stream):
                fn()
        return run

    def _prepare(self, batch: int) -> None:
        """The batch's start on the stream: a tiny kernel (this context becomes the GPU's resident one), then the
        ready word. (Nothing waits before it: a stream waiting on a word holds the GPU, and the judge writes its
        inputs with kernels of its own before it asks for the batch.)"""
        self.ops.kernel("warm", lambda: self._warm.add_(1))
        self.ops.write_word(self.flags.device_address + FlagPage.READY, batch)

    def _collect(self) -> list[tuple[int, float]]:
        out, keep = [], []
        for entry in self.pending:
            end = entry["end"]
            if entry["launched"].is_set() and end is not None and self.ops.done(end):
                out.append((entry["batch"], self.ops.elapsed_ms(entry["start"], end)))
            elif not entry["launched"].is_set() or end is not None:
                keep.append(entry)
        self.pending = keep
        self._reported += out
        return out

    def op_report(self, msg: dict, fds: list[int]) -> dict:
        """Device-event times of finished batches, as this process measured them (not trusted)."""
        if self.ops is not None:
            self.ops.synchronize()
            self._collect()
        reported, self._reported = self._reported, []
        return {"ok": True, "device_ms": reported}

    def op_capture(self, msg: dict, fds: list[int]) -> dict:
        """The batch's calls in one CUDA graph (one graph a call, each behind its own release word, cost about 10 us a
        call more than the protocol alone on the H200, 2026-12-04)."""
        sets = list(msg["sets"])
        side = torch.cuda.Stream()
        side.wait_stream(self.stream)
        with torch.cuda.stream(side):
            for j in sets:  # warm-up on a side stream, as capture requires
                self.calls[j]()
        self.stream.wait_stream(side)
        torch.cuda.synchronize()
        try:  # kept after capture: its nodes name the kernels (instantiated below, before any replay)
            graph = torch.cuda.CUDAGraph(keep_graph=True)
        except TypeError:
            graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for j in sets:
                    self.calls[j]()
        except Exception as exc:  # noqa: BLE001 - not capturable: the judge times it per call instead
            torch.cuda.synchronize()
            return {"ok": False, "detail": _detail(exc).splitlines()[0][:300]}
        torch.cuda.synchronize()
        from evoteam.harness import cudadrv

        self.graph_kernels, nodes = None, None
        try:  # the kernels it launches, read from the graph (the profiler's start costs seconds): op_kernels
            self.graph_kernels = sorted(set(cudadrv.graph_kernel_names(graph.raw_cuda_graph())))
            nodes = cudadrv.graph_node_count(graph.raw_cuda_graph())
        except Exception:  # noqa: BLE001 - an older driver or torch: op_kernels profiles a call instead
            pass
        if hasattr(graph, "instantiate"):
            graph.instantiate()
        try:  # uploaded now, not by the first armed replay: that upload is ordered behind the release word, inside
            # the judge's clock (and on the H200 an honest PyTorch candidate's arm did not answer: being checked)
            cudadrv.graph_upload(graph.raw_cuda_graph_exec(), self.stream.cuda_stream)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - an older driver or torch: the first replay uploads it
            pass
        self.graph = graph
        return {"ok": True, "nodes": nodes}  # the judge bounds a batch's nodes (timing.MAX_GRAPH_NODES)

    def op_kernels(self, msg: dict, fds: list[int]) -> dict:
        """Names of the device kernels one call launches (a filter, not a guarantee): those of the captured batch's
        graph where there is one, else the profiler's."""
        if self.graph_kernels:
            return {"ok": True, "kernels": self.graph_kernels}
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self.calls[int(msg["set"])]()
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", "")) and e.name
                        and not e.name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset"))})
        return {"ok": True, "kernels": names}

    def op_exit(self, msg: dict, fds: list[int]) -> dict:
        return {"ok": True}

def _freeze_heap() -> None:
    """What is loaded (torch, the libraries, the candidate's module) moves out of the collector's sight: unbind's
    collection then looks only at what a workload made (75 ms a collection with torch and Triton loaded, 2026-12-04:
    two a workload)."""
    import gc

    gc.collect()
    gc.freeze()


def _flag_page(fd: int, ops) -> FlagPage:
    """The judge's page of flag words, mapped here and, on a GPU, registered with this process's context."""
    page = FlagPage.__new__(FlagPage)
    import mmap

    page.fd = fd
    page.page = mmap.mmap(fd, FlagPage.SIZE)
    page.words = memoryview(page.page).cast("I")
    page.device_address = 0
    if ops is not None:
        import ctypes

        address = ctypes.addressof(ctypes.c_char.from_buffer(page.page))
        page.device_address = ops.register_host(address, FlagPage.SIZE)
    return page


def main(argv: list[str]) -> int:
    import signal
    import socket

    # every thread's stack to the log (stderr) when the judge asks, before it ends a runner that went silent
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    channel = Channel(socket.socket(fileno=int(argv[0])))
    Runner(channel).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
