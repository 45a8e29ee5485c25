"""What does it cost to release a graph batch's calls one at a time, and can a judge's stream wait on a runner's word?

Issue 52: in graph mode every call of a batch sees its late inputs from the start, so one call can compute the whole
batch (up to 18x on an H100). The designs that close it release call k+1 only after call k has ended. Each costs the
protocol something per call, and one of them may not run at all (a stream of one context waiting on a word held the
GPU from another context's kernels on the H200, 2026-12-04). Measured here, two processes (two CUDA contexts) sharing
device memory (VMM file descriptors) and a host page of words, as the harness's judge and runner do:

  runner graphs   all    the batch's N calls in one CUDA graph behind one word (today's graph mode)
                  chain  one graph holding, per call, [wait r_k] [the call] [write d_k] (stream memory operations
                         captured as graph nodes); where capture refuses them: per-call graphs, the words between
  judge designs   all          today's: late inputs copied in, r_0 set, on the judge's stream at the start
                  released     the chain graph with every r_k set at the start: the in-graph words alone
                  host         the judge's host reads d_k and stores r_{k+1} itself (no GPU work of the judge's)
                  host_ce      the judge's host reads d_k, then its stream copies call k+1's late inputs and sets r_{k+1}
                  host_sample  as host_ce, then a copy-engine sample of call k's outputs (proof it had ended)
                  device       all of host_sample enqueued on the judge's stream before the start, each step behind a
                               stream wait on d_k: no host round trip (may deadlock: watched, words forced after 10 s)
                  device_nosample  device without the samples
                  device_ctx2  device, enqueued on a second context of the judge's that never runs a kernel (its
                               waits may not hold the compute engine); timed by the judge's host clock
A call is a device-side sleep of WORK_US and a copy of its late input into its output. Every design runs with the
work and without it (the protocol alone). Reported per call, microseconds: the protocol alone, and the excess of the
batch with work over (protocol alone + the work), which is what a design would add to a kernel's time.

Usage on a GPU host, from the repository root: python3 scripts/batch_release_probe.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PAGE = 32768
READY, DONE = 0, 64
MAX_N = 128
LATE_BYTES = 16384  # per call
OUT_BYTES = 16384
SAMPLE_ROWS = 256


def r_word(k: int) -> int:
    return 8192 + 64 * k


def d_word(k: int) -> int:
    return 16384 + 64 * k


def q(values):
    v = sorted(values)
    return {"median": round(statistics.median(v), 2), "p10": round(v[int(0.1 * (len(v) - 1))], 2),
            "p90": round(v[int(0.9 * (len(v) - 1) + 0.5)], 2), "n": len(v)}


# ------------------------------------------------------------------------------------------ runner


def runner_main(args) -> None:
    import torch

    from evoteam.harness import cudadrv

    sock = socket.socket(fileno=args.sock)
    rfile = sock.makefile("r")
    torch.empty(1, device="cuda")
    cudadrv.ensure_context(0)
    late_m = cudadrv.import_fd(args.latefd, args.late_size, 0)
    out_m = cudadrv.import_fd(args.outfd, args.out_size, 0)
    late = cudadrv.byte_tensor(late_m.ptr, late_m.size, 0)
    out = cudadrv.byte_tensor(out_m.ptr, out_m.size, 0)
    page = mmap.mmap(args.flagfd, PAGE)
    base = cudadrv.register_host(ctypes.addressof(ctypes.c_char.from_buffer(page)), PAGE)
    stream = torch.cuda.current_stream()
    warm = torch.zeros(1, device="cuda")
    graphs: dict = {}

    def call(k: int, cycles: int) -> None:
        if cycles:
            torch.cuda._sleep(cycles)
            out[k * OUT_BYTES:(k + 1) * OUT_BYTES].copy_(late[k * LATE_BYTES:(k + 1) * LATE_BYTES])

    def reply(text: str) -> None:
        sock.sendall((text + "\n").encode())

    reply(f"ready pid={os.getpid()}")
    for line in rfile:
        cmd, *rest = line.split()
        try:
            if cmd == "capture":  # capture KIND N CYCLES
                kind, n, cycles = rest[0], int(rest[1]), int(rest[2])
                side = torch.cuda.Stream()
                side.wait_stream(stream)
                with torch.cuda.stream(side):
                    for k in range(n):
                        call(k, cycles)
                stream.wait_stream(side)
                torch.cuda.synchronize()
                note = "one graph"
                if kind == "all":
                    g = None  # the protocol alone: nothing to replay (an empty capture is refused)
                    if cycles:
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            for k in range(n):
                                call(k, cycles)
                    entry = ("all", g)
                else:
                    try:
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            s = torch.cuda.current_stream().cuda_stream
                            for k in range(n):
                                cudadrv.stream_wait_value(s, base + r_word(k), 1)
                                call(k, cycles)
                                cudadrv.stream_write_value(s, base + d_word(k), 1)
                        entry = ("chain", g)
                        note = "memops captured in one graph"
                    except Exception as exc:  # noqa: BLE001
                        torch.cuda.synchronize()
                        per = []
                        for k in range(n):
                            gk = None
                            if cycles:
                                gk = torch.cuda.CUDAGraph()
                                with torch.cuda.graph(gk):
                                    call(k, cycles)
                            per.append(gk)
                        entry = ("per_call", per)
                        note = f"memops not captured ({type(exc).__name__}: {str(exc)[:120]}): a graph a call"
                torch.cuda.synchronize()
                graphs[(kind, n, cycles)] = entry
                reply(f"ok {note}")
            elif cmd == "arm":  # arm KIND N CYCLES
                kind, n, cycles = rest[0], int(rest[1]), int(rest[2])
                shape, g = graphs[(kind, n, cycles)]
                s = stream.cuda_stream
                warm.add_(1)  # this context becomes the resident one, as the harness's runner does
                cudadrv.stream_write_value(s, base + READY, 1)
                if shape == "all":
                    cudadrv.stream_wait_value(s, base + r_word(0), 1)
                    if g is not None:
                        g.replay()
                elif shape == "chain":
                    g.replay()
                else:
                    for k, gk in enumerate(g):
                        cudadrv.stream_wait_value(s, base + r_word(k), 1)
                        if gk is not None:
                            gk.replay()
                        cudadrv.stream_write_value(s, base + d_word(k), 1)
                cudadrv.stream_write_value(s, base + DONE, 1)
                reply("ok")
            elif cmd == "sync":
                torch.cuda.synchronize()
                reply("ok")
            elif cmd == "exit":
                reply("bye")
                return
        except Exception as exc:  # noqa: BLE001
            reply(f"error {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


# ------------------------------------------------------------------------------------------ judge


class Judge:
    def __init__(self) -> None:
        import torch

        from evoteam.harness import cudadrv

        self.torch, self.cudadrv = torch, cudadrv
        torch.empty(1, device="cuda")
        cudadrv.ensure_context(0)
        self.late_m = cudadrv.allocate(MAX_N * LATE_BYTES, 0)
        self.out_m = cudadrv.allocate(MAX_N * OUT_BYTES, 0)
        self.late = cudadrv.byte_tensor(self.late_m.ptr, self.late_m.size, 0)
        self.out = cudadrv.byte_tensor(self.out_m.ptr, self.out_m.size, 0)
        self.staging = torch.randint(0, 255, (MAX_N * LATE_BYTES,), dtype=torch.uint8).pin_memory()
        self.samples = torch.empty(MAX_N * SAMPLE_ROWS * 16, dtype=torch.uint8).pin_memory()
        self.flagfd = os.memfd_create("probe-flags")
        os.ftruncate(self.flagfd, PAGE)
        self.page = mmap.mmap(self.flagfd, PAGE)
        self.words = memoryview(self.page).cast("I")
        self.base = cudadrv.register_host(ctypes.addressof(ctypes.c_char.from_buffer(self.page)), PAGE)
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flusher = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.stream = torch.cuda.current_stream()
        latefd, outfd = cudadrv.export_fd(self.late_m), cudadrv.export_fd(self.out_m)
        parent, child = socket.socketpair()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "runner", "--sock", str(child.fileno()),
               "--latefd", str(latefd), "--outfd", str(outfd), "--flagfd", str(self.flagfd),
               "--late-size", str(self.late_m.size), "--out-size", str(self.out_m.size)]
        self.proc = subprocess.Popen(cmd, pass_fds=[child.fileno(), latefd, outfd, self.flagfd])
        child.close()
        self.sock, self.rfile = parent, parent.makefile("r")
        print("runner:", self.rfile.readline().strip(), flush=True)

    def ask(self, text: str) -> str:
        self.sock.sendall((text + "\n").encode())
        return self.rfile.readline().strip()

    def get(self, offset: int) -> int:
        return self.words[offset // 4]

    def put(self, offset: int, value: int) -> None:
        self.words[offset // 4] = value

    def spin(self, offset: int, deadline: float) -> bool:
        spins = 0
        while self.words[offset // 4] < 1:
            spins += 1
            if spins & 0xFFF == 0 and time.monotonic() > deadline:
                return False
        return True

    def reset(self, n: int) -> None:
        for off in (READY, DONE, *[r_word(k) for k in range(n)], *[d_word(k) for k in range(n)]):
            self.put(off, 0)

    def force(self, n: int) -> None:
        for off in (READY, DONE, *[r_word(k) for k in range(n)], *[d_word(k) for k in range(n)]):
            self.put(off, 1)
        self.torch.cuda.synchronize()

    def ctx2(self):
        """A second context of the judge's process, used only for copies and stream memory operations."""
        if getattr(self, "_ctx2", None) is None:
            lib = self.cudadrv._lib()
            ctx, stream, primary = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
            lib.cuCtxGetCurrent(ctypes.byref(primary))
            rc = lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0)
            if rc != 0:
                rc = lib.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, 0)
            assert rc == 0, f"cuCtxCreate: {rc}"
            assert lib.cuStreamCreate(ctypes.byref(stream), 1) == 0  # non-blocking
            lib.cuCtxSetCurrent(primary)
            self._ctx2 = (ctx, stream, primary)
        return self._ctx2

    def batch(self, design: str, n: int, cycles: int, timeout_s: float = 10.0) -> float | None:
        """One batch; the judge's clock (its stream's events) in microseconds, None on a deadlock."""
        torch, cudadrv = self.torch, self.cudadrv
        s = self.stream.cuda_stream
        kind = "all" if design == "all" else "chain"
        self.reset(n)
        self.flusher.zero_()
        torch.cuda.synchronize()
        answer = self.ask(f"arm {kind} {n} {cycles}")
        assert answer == "ok", answer
        deadline = time.monotonic() + timeout_s
        if not self.spin(READY, deadline):
            self.force(n)
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if design == "device_ctx2":
            return self._batch_ctx2(n, deadline)
        start.record()

        def late_in(k: int | None) -> None:
            lo, hi = (0, n * LATE_BYTES) if k is None else (k * LATE_BYTES, (k + 1) * LATE_BYTES)
            self.late[lo:hi].copy_(self.staging[lo:hi], non_blocking=True)

        def sample(k: int) -> None:
            cudadrv.copy_strided_to_host(s, self.out_m.ptr + k * OUT_BYTES, OUT_BYTES // SAMPLE_ROWS, 16, SAMPLE_ROWS,
                                         self.samples.data_ptr() + k * SAMPLE_ROWS * 16)

        ok = True
        if design in ("all", "released"):
            late_in(None)
            for k in range(n if design == "released" else 1):
                cudadrv.stream_write_value(s, self.base + r_word(k), 1)
            ok = self.spin(DONE, deadline)
        elif design in ("host", "host_ce", "host_sample"):
            late_in(0 if design != "host" else None)
            cudadrv.stream_write_value(s, self.base + r_word(0), 1)
            for k in range(n - 1):
                if not self.spin(d_word(k), deadline):
                    ok = False
                    break
                if design == "host":
                    self.put(r_word(k + 1), 1)
                    continue
                late_in(k + 1)
                cudadrv.stream_write_value(s, self.base + r_word(k + 1), 1)
                if design == "host_sample":
                    sample(k)  # after the release: off the chain's path (a call k still running is caught by it)
            ok = ok and self.spin(DONE, deadline)
        else:  # device, device_nosample
            late_in(0)
            cudadrv.stream_write_value(s, self.base + r_word(0), 1)
            for k in range(n - 1):
                cudadrv.stream_wait_value(s, self.base + d_word(k), 1)
                late_in(k + 1)
                cudadrv.stream_write_value(s, self.base + r_word(k + 1), 1)
                if design == "device":
                    sample(k)
            cudadrv.stream_wait_value(s, self.base + DONE, 1)
        if design == "host_sample" or design == "device":
            sample(n - 1)
        end.record()
        while ok and not end.query():
            if time.monotonic() > deadline:
                ok = False
        if not ok:
            self.force(n)
            return None
        end.synchronize()
        return start.elapsed_time(end) * 1e3


    def _batch_ctx2(self, n: int, deadline: float) -> float | None:
        """The device chain on the second context, timed from the host's first store to the chain's last word."""
        cudadrv = self.cudadrv
        lib = cudadrv._lib()
        ctx, stream, primary = self.ctx2()
        lib.cuCtxSetCurrent(ctx)
        s = stream.value
        try:
            def late_in(k: int) -> None:
                lib.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(self.late_m.ptr + k * LATE_BYTES),
                                         ctypes.c_void_p(self.staging.data_ptr() + k * LATE_BYTES),
                                         ctypes.c_size_t(LATE_BYTES), ctypes.c_void_p(s))

            def sample(k: int) -> None:
                cudadrv.copy_strided_to_host(s, self.out_m.ptr + k * OUT_BYTES, OUT_BYTES // SAMPLE_ROWS, 16,
                                             SAMPLE_ROWS, self.samples.data_ptr() + k * SAMPLE_ROWS * 16)

            end_word = 128
            self.put(end_word, 0)
            cudadrv.stream_wait_value(s, self.base + 192, 1)  # the host's start
            late_in(0)
            cudadrv.stream_write_value(s, self.base + r_word(0), 1)
            for k in range(n - 1):
                cudadrv.stream_wait_value(s, self.base + d_word(k), 1)
                late_in(k + 1)
                cudadrv.stream_write_value(s, self.base + r_word(k + 1), 1)
                sample(k)
            cudadrv.stream_wait_value(s, self.base + DONE, 1)
            sample(n - 1)
            cudadrv.stream_write_value(s, self.base + end_word, 1)
        finally:
            lib.cuCtxSetCurrent(primary)
        t0 = time.perf_counter()
        self.put(192, 1)
        ok = self.spin(end_word, deadline)
        t1 = time.perf_counter()
        self.put(192, 0)
        if not ok:
            self.force(n)
            lib.cuCtxSetCurrent(ctx)
            lib.cuStreamSynchronize(stream)
            lib.cuCtxSetCurrent(primary)
            return None
        return (t1 - t0) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="judge")
    ap.add_argument("--sock", type=int)
    ap.add_argument("--latefd", type=int)
    ap.add_argument("--outfd", type=int)
    ap.add_argument("--flagfd", type=int)
    ap.add_argument("--late-size", type=int)
    ap.add_argument("--out-size", type=int)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", default="16,64")
    ap.add_argument("--work-us", default="5,40")
    ap.add_argument("--designs", default="all,released,host,host_ce,host_sample,device_ctx2,device_nosample,device")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.role == "runner":
        runner_main(args)
        return
    judge = Judge()
    import torch

    # device-side sleep cycles per microsecond, measured (the clock the sleep counts is the SM's)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    e0.record()
    torch.cuda._sleep(2_000_000)
    e1.record()
    e1.synchronize()
    cycles_per_us = 2_000_000 / (e0.elapsed_time(e1) * 1e3)
    print(f"device sleep: {cycles_per_us:.0f} cycles/us; GPU {torch.cuda.get_device_name(0)}", flush=True)
    report: dict = {"gpu": torch.cuda.get_device_name(0), "cycles_per_us": cycles_per_us, "rows": []}
    dead: set[str] = set()
    for n in [int(v) for v in args.calls.split(",")]:
        for work in [float(v) for v in args.work_us.split(",")]:
            cycles = max(1, int(work * cycles_per_us))
            notes = {}
            for kind in ("all", "chain"):
                for c in (0, cycles):
                    notes[kind] = judge.ask(f"capture {kind} {n} {c}")
            for design in args.designs.split(","):
                if design in dead:
                    continue
                times: dict[int, list[float]] = {0: [], cycles: []}
                failed = False
                for rep in range(args.reps + 2):
                    for c in (0, cycles) if rep % 2 == 0 else (cycles, 0):
                        t = judge.batch(design, n, c)
                        if t is None:
                            failed = True
                            break
                        if rep >= 2:
                            times[c].append(t)
                    if failed:
                        break
                if failed:
                    dead.add(design)
                    row = {"design": design, "calls": n, "work_us": work, "result": "DEADLOCK or no end in 10 s"}
                else:
                    null, full = statistics.median(times[0]), statistics.median(times[cycles])
                    row = {"design": design, "calls": n, "work_us": work,
                           "protocol_us_per_call": round(null / n, 2),
                           "excess_us_per_call": round((full - null) / n - work, 2),
                           "batch_null": q(times[0]), "batch_work": q(times[cycles]),
                           "graph": notes["all" if design == "all" else "chain"]}
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
    judge.ask("exit")
    print(f"\n{'design':16s} {'calls':>5s} {'work':>5s} {'protocol/call':>13s} {'excess/call':>11s}")
    for row in report["rows"]:
        if "result" in row:
            print(f"{row['design']:16s} {row['calls']:5d} {row['work_us']:5g} {row['result']}")
        else:
            print(f"{row['design']:16s} {row['calls']:5d} {row['work_us']:5g} {row['protocol_us_per_call']:13.2f} "
                  f"{row['excess_us_per_call']:11.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
