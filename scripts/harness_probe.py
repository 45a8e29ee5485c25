"""Feasibility probe for the split harness on a GPU host: a trusted judge process and an untrusted
runner in a bubblewrap sandbox (own PID, network, mount and user namespaces) sharing device memory
through VMM file descriptors, the runner's work pre-enqueued behind a flag in shared host memory.

    python3 scripts/harness_probe.py --bwrap /usr/bin/bwrap [--json OUT.json]

Each interval: the judge flushes L2 in its own context, tells the runner to arm ([warm-up kernel],
wait for the release word, the work, write the done word), sets the release word from the host
(t0), spins until it reads the done word (t1), snapshots the output on its own stream and waits for
it (t2). Reported in microseconds (median, p10, p90) per variant:
  null / copy 1 MiB / copy 64 MiB     the work; with and without the runner's warm-up kernel
  late                                the release word written by the judge's stream after a host-to-
                                      device copy of fresh input bytes (the late inputs)
  early                               the done word written before the work (escaped work)
  direct                              the judge copying the same bytes with events around one call
Then: a background kernel in the runner against the judge's own timing; SIGKILL of the sandbox with
a kernel in flight; an illegal memory access in the runner; legacy torch IPC across the namespace.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

A_OFF, B_OFF = 0, 64  # release and done words in the shared host page


def q(values):
    v = sorted(values)
    pick = lambda f: v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]  # noqa: E731
    return {"median": round(statistics.median(v), 2), "p10": round(pick(0.1), 2), "p90": round(pick(0.9), 2),
            "n": len(v)}


# ------------------------------------------------------------------------------------------ runner


def runner_main(args) -> None:
    import torch

    from evoteam.harness import cudadrv

    sock = socket.socket(fileno=args.sock)
    reader = sock.makefile("r")
    torch.empty(1, device="cuda")
    cudadrv.ensure_context(0)
    x_map = cudadrv.import_fd(args.xfd, args.size, 0)
    y_map = cudadrv.import_fd(args.yfd, args.size, 0)
    x = cudadrv.byte_tensor(x_map.ptr, x_map.size, 0)
    y = cudadrv.byte_tensor(y_map.ptr, y_map.size, 0)
    page = mmap.mmap(args.flagfd, 4096)
    page_addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    flags = cudadrv.register_host(page_addr, 4096)
    a_dev, b_dev = flags + A_OFF, flags + B_OFF
    stream = torch.cuda.current_stream()
    warm = torch.empty(1, device="cuda")
    graphs = {}

    def reply(text):
        sock.sendall((text + "\n").encode())

    reply(f"ready uid={os.getuid()} pid={os.getpid()} x0={int(x[0])}")
    while True:
        line = reader.readline()
        if not line:
            return
        cmd, *rest = line.split()
        k, n, warmup = (int(v) for v in (rest + ["0", "0", "0"])[:3])
        s = stream.cuda_stream
        try:
            if cmd in ("null", "copy", "graph", "early"):
                if warmup:
                    warm.add_(1)  # makes this context resident before it waits
                cudadrv.stream_wait_value(s, a_dev, k)
                if cmd == "early":
                    cudadrv.stream_write_value(s, b_dev, k)
                    torch.cuda._sleep(40000)
                    y[:n].copy_(x[:n])
                else:
                    if cmd == "copy":
                        y[:n].copy_(x[:n])
                    elif cmd == "graph":
                        graphs[n].replay()
                    cudadrv.stream_write_value(s, b_dev, k)
                reply("ok")
            elif cmd == "capture":
                g = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(stream)
                with torch.cuda.stream(side):
                    y[:n].copy_(x[:n])
                stream.wait_stream(side)
                torch.cuda.synchronize()
                with torch.cuda.graph(g):
                    y[:n].copy_(x[:n])
                torch.cuda.synchronize()
                graphs[n] = g
                reply("ok")
            elif cmd == "spin":
                side = torch.cuda.Stream()
                with torch.cuda.stream(side):
                    torch.cuda._sleep(k * 1_000_000)
                reply("ok")
            elif cmd == "long":
                torch.cuda._sleep(k * 1_000_000)
                reply("ok")
            elif cmd == "ima":
                import triton
                import triton.language as tl

                @triton.jit
                def _store_far(p, off):
                    tl.store(p + off, 1.0)

                t = torch.empty(1, device="cuda")
                _store_far[(1,)](t, 1 << 40)  # 4 TB past the tensor: nothing maps it
                try:
                    torch.cuda.synchronize()
                    reply("no fault")
                except Exception as exc:  # noqa: BLE001
                    reply(f"fault {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                os._exit(3)
            elif cmd == "legacy":
                import base64
                import pickle

                from torch.multiprocessing.reductions import rebuild_cuda_tensor

                t = rebuild_cuda_tensor(*pickle.loads(base64.b64decode(rest[0])))
                reply(f"legacy ok {float(t.float().sum())}")
            elif cmd == "sync":
                torch.cuda.synchronize()
                reply("ok")
            elif cmd == "exit":
                reply("bye")
                return
            else:
                reply(f"error unknown {cmd}")
        except Exception as exc:  # noqa: BLE001 - reported to the judge
            reply(f"error {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


# ------------------------------------------------------------------------------------------ judge


def sandbox_command(bwrap: str) -> list[str]:
    binds = []
    seen = []
    for p in ["/usr", "/etc", "/lib", "/lib64", "/bin", "/sbin", "/opt", *sys.path, sys.prefix, sys.base_prefix]:
        p = os.path.abspath(p) if p else ""
        if p and os.path.isdir(p) and p != str(REPO) and not any(p == s or p.startswith(s + "/") for s in seen):
            binds += ["--ro-bind", p, p]
            seen.append(p)
    devs = []
    for d in sorted(Path("/dev").glob("nvidia*")):
        if d.is_char_device():
            devs += ["--dev-bind", str(d), str(d)]
    env = []
    for key in ("PATH", "LD_LIBRARY_PATH"):
        if os.environ.get(key):
            env += ["--setenv", key, ":".join(x for x in os.environ[key].split(":") if "/tmp/bw" not in x)]
    pythonpath = ":".join([str(REPO)] + [x for x in os.environ.get("PYTHONPATH", "").split(":") if x])
    return [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", *binds, "--ro-bind", str(REPO / "evoteam"), str(REPO / "evoteam"),
            "--ro-bind", str(REPO / "scripts"), str(REPO / "scripts"), "--ro-bind", "/sys", "/sys",
            "--proc", "/proc", "--dev", "/dev", *devs, "--tmpfs", "/tmp", "--clearenv", *env,
            "--setenv", "HOME", "/tmp", "--setenv", "PYTHONPATH", pythonpath, "--chdir", "/tmp"]


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="judge")
    ap.add_argument("--bwrap", default="bwrap")
    ap.add_argument("--sock", type=int)
    ap.add_argument("--xfd", type=int)
    ap.add_argument("--yfd", type=int)
    ap.add_argument("--flagfd", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.role == "runner":
        runner_main(args)
        return

    import torch

    from evoteam.harness import cudadrv

    signal.signal(signal.SIGALRM, _alarm)
    report: dict = {}
    torch.empty(1, device="cuda")
    cudadrv.ensure_context(0)
    nbytes = 64 << 20
    xm, ym = cudadrv.allocate(nbytes, 0), cudadrv.allocate(nbytes, 0)
    x, y = cudadrv.byte_tensor(xm.ptr, xm.size, 0), cudadrv.byte_tensor(ym.ptr, ym.size, 0)
    x.copy_(torch.randint(0, 255, (x.numel(),), dtype=torch.uint8, device="cuda"))
    xfd, yfd = cudadrv.export_fd(xm), cudadrv.export_fd(ym)
    flagfd = os.memfd_create("evoteam-flags")
    os.ftruncate(flagfd, 4096)
    page = mmap.mmap(flagfd, 4096)
    page_dev = cudadrv.register_host(ctypes.addressof(ctypes.c_char.from_buffer(page)), 4096)
    flush_buf = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    snap = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    late_host = torch.empty(64 << 10, dtype=torch.uint8).pin_memory()
    late_dev = torch.empty(64 << 10, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()

    def start_runner():
        parent, child = socket.socketpair()
        cmd = sandbox_command(args.bwrap) + [
            sys.executable, str(REPO / "scripts" / "harness_probe.py"), "--role", "runner", "--sock", str(child.fileno()),
            "--xfd", str(xfd), "--yfd", str(yfd), "--flagfd", str(flagfd), "--size", str(xm.size)]
        proc = subprocess.Popen(cmd, pass_fds=[child.fileno(), xfd, yfd, flagfd], start_new_session=True)
        child.close()
        return proc, parent, parent.makefile("r")

    t = time.time()
    proc, sock, rfile = start_runner()
    report["hello"] = rfile.readline().strip()
    report["runner_start_s"] = round(time.time() - t, 2)
    print("runner:", report["hello"], report["runner_start_s"], "s", flush=True)
    counter = [0]

    def ask(text):
        sock.sendall((text + "\n").encode())
        return rfile.readline().strip()

    def interval(cmd, n=0, warmup=1, late=False, snapshot=0):
        counter[0] += 1
        k = counter[0]
        flush_buf.zero_()
        torch.cuda.synchronize()
        answer = ask(f"{cmd} {k} {n} {warmup}")
        assert answer == "ok", answer
        time.sleep(50e-6)  # let the warm-up kernel run
        t0 = time.perf_counter_ns()
        if late:
            late_dev.copy_(late_host, non_blocking=True)
            cudadrv.stream_write_value(stream.cuda_stream, page_dev + A_OFF, k)
        else:
            struct.pack_into("<I", page, A_OFF, k)
        while struct.unpack_from("<I", page, B_OFF)[0] != k:
            pass
        t1 = time.perf_counter_ns()
        if snapshot:
            snap[:snapshot].copy_(y[:snapshot])
        torch.cuda.synchronize()
        t2 = time.perf_counter_ns()
        return (t1 - t0) / 1e3, (t2 - t0) / 1e3

    def direct(n):
        flush_buf.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        y[:n].copy_(x[:n])
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3

    def run_test(name, seconds, fn):
        signal.alarm(seconds)
        try:
            report[name] = fn()
        except Timeout:
            report[name] = "timed out"
        except Exception as exc:  # noqa: BLE001
            report[name] = f"error {type(exc).__name__}: {exc}"
        finally:
            signal.alarm(0)
        print(name, json.dumps(report[name]), flush=True)

    def correctness():
        y.zero_()
        interval("copy", 1 << 20)
        return bool(torch.equal(y[:1 << 20], x[:1 << 20]))

    run_test("copy_correct", 30, correctness)

    def intervals():
        out = {}
        ask("capture 0 1048576")
        ask("capture 0 67108864")
        variants = [("null_warm", dict(cmd="null")), ("null_cold", dict(cmd="null", warmup=0)),
                    ("copy1M_warm", dict(cmd="copy", n=1 << 20)), ("copy1M_cold", dict(cmd="copy", n=1 << 20, warmup=0)),
                    ("graph1M_warm", dict(cmd="graph", n=1 << 20)),
                    ("copy64M_warm", dict(cmd="copy", n=64 << 20)),
                    ("null_late", dict(cmd="null", late=True)), ("copy1M_late", dict(cmd="copy", n=1 << 20, late=True)),
                    ("null_snap", dict(cmd="null", snapshot=1 << 20)),
                    ("copy1M_snap", dict(cmd="copy", n=1 << 20, snapshot=1 << 20))]
        raw = {name: ([], []) for name, _ in variants}
        raw["direct1M"], raw["direct64M"] = ([], []), ([], [])
        for rep in range(args.reps + 5):
            for name, kw in variants:
                t1, t2 = interval(**kw)
                if rep >= 5:
                    raw[name][0].append(t1)
                    raw[name][1].append(t2)
            for name, n in (("direct1M", 1 << 20), ("direct64M", 64 << 20)):
                d = direct(n)
                if rep >= 5:
                    raw[name][0].append(d)
        for name, (a, b) in raw.items():
            out[name] = {"to_done": q(a)} if not b else {"to_done": q(a), "to_synced": q(b)}
        return out

    run_test("intervals_us", 300, intervals)

    def escaped():
        honest, early, incomplete = [], [], 0
        for _ in range(30):
            ask("sync")
            y.zero_()
            torch.cuda.synchronize()
            t1, t2 = interval("copy", 1 << 20, snapshot=1 << 20)
            honest.append(t2 - t1)
            ask("sync")
            y.zero_()
            torch.cuda.synchronize()
            t1, t2 = interval("early", 1 << 20, snapshot=1 << 20)
            early.append(t2 - t1)
            incomplete += not bool(torch.equal(snap[:1 << 20], x[:1 << 20]))
        return {"snapshot_latency_honest": q(honest), "snapshot_latency_escaped": q(early),
                "escaped_snapshot_incomplete": f"{incomplete}/30"}

    run_test("escaped", 60, escaped)

    def spin():
        quiet = [direct(64 << 20) for _ in range(30)]
        ask("spin 300")
        busy = [direct(64 << 20) for _ in range(30)]
        ask("sync")
        return {"judge_copy_quiet": q(quiet), "judge_copy_runner_spinning": q(busy)}

    run_test("spin", 60, spin)

    def legacy():
        import base64
        import pickle

        from torch.multiprocessing.reductions import reduce_tensor

        _, fn_args = reduce_tensor(torch.ones(1024, device="cuda"))
        return ask("legacy " + base64.b64encode(pickle.dumps(fn_args)).decode())

    run_test("legacy_ipc", 60, legacy)

    def kill():
        nonlocal proc, sock, rfile
        ask("long 3000")
        t = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reap = time.time() - t
        t = time.time()
        d = direct(1 << 20)
        return {"reap_s": round(reap, 3), "judge_next_call_s": round(time.time() - t, 3), "judge_copy_us": round(d, 2)}

    run_test("kill", 60, kill)

    def ima():
        nonlocal proc, sock, rfile
        proc, sock, rfile = start_runner()
        rfile.readline()
        answer = ask("ima")
        code = proc.wait(timeout=60)
        y.zero_()
        direct(1 << 20)
        torch.cuda.synchronize()
        ok = bool(torch.equal(y[:1 << 20], x[:1 << 20]))
        proc, sock, rfile = start_runner()
        again = rfile.readline().strip()
        ask("exit")
        return {"answer": answer, "exit": code, "judge_ok_after": ok, "new_runner": again}

    run_test("ima", 120, ima)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
