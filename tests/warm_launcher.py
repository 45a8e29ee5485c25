"""`python -m evoteam ARGS` (and evoteam's other commands) for the tests, each in a new process forked from a warm
one (`run`).

Every main job a test starts imported PyTorch, NumPy, Hydra, OmegaConf and matplotlib afresh: about 1.3 CPU-s of
each, over fifty times a suite on a 2-core machine that the suite keeps busy throughout. Here a process started once
per test process (the zygote: `python tests/warm_launcher.py`) imports those libraries and nothing else, never runs
a command itself, and forks a child per command. The child becomes the command as a fresh `python -m evoteam ARGS`
would be: its own process, working directory, environment (os.environ replaced, so C code sees it too), argv and
sys.path[0], standard streams made anew on files the caller reads, stdin /dev/null, NumPy's global generator reseeded
(Python's `random` reseeds itself at a fork), evoteam imported and run by runpy as `-m` does, and at its end what a
normal exit runs (non-daemon threads joined, atexit callbacks, streams flushed).

What stays a fresh process (`subprocess.run`, as before): a request whose environment differs from this process's in a
variable read at import (`IMPORT_TIME_PREFIXES`: Python's, the math libraries', PyTorch's, Hydra's, matplotlib's, the
locale), a python other than this one, EVOTEAM_TESTS_FRESH=1, or a zygote that could not start or is not
single-threaded. Where this process's own such variables change (a test's monkeypatch), or the zygote ended, it is
started anew. Tests that signal a main job, or read its process tree, start it with subprocess themselves and are not
served here.
evoteam's own modules, MLflow and litellm are never imported by the zygote: they read their environment at import
(judge_server's PYTHONPATH; litellm's LITELLM_LOCAL_MODEL_COST_MAP) or start a thread (MLflow: jemalloc's).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOAD = ("torch", "numpy", "hydra", "hydra.utils", "hydra.core.global_hydra", "omegaconf", "yaml",
           "matplotlib.figure", "matplotlib.backends.backend_agg")
IMPORT_TIME_PREFIXES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "NUMPY_", "TORCH", "PYTORCH_",
                        "LD_", "MALLOC_", "HYDRA_", "MPL", "MATPLOTLIB", "LC_", "LANG")


def import_time_environment(env: dict[str, str]) -> frozenset:
    """The part of an environment the zygote's imports read (Triton's is not: the zygote never imports it)."""
    return frozenset((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES))


# ---------------------------------------------------------------------------------------------------- the zygote
def _be_the_command(module: str, args: list[str], cwd: str, env: dict[str, str], out_fd: int, err_fd: int) -> None:
    """In a freshly forked child: become `python -m MODULE ARGS` and never return."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        import io

        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        for fd, name in ((1, "stdout"), (2, "stderr")):
            stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), encoding="utf-8",
                                      errors="backslashreplace" if name == "stderr" else "strict",
                                      write_through=unbuffered or name == "stderr")
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
        sys.path[0] = os.getcwd()  # where `python -m` puts it
        sys.argv = ["-m", *args]
        import numpy

        numpy.random.seed()  # a fresh process's global generator is seeded from the OS; a fork would share one
        import runpy

        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
        except BaseException:  # noqa: BLE001 - as Python reports an uncaught exception
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        from evoteam.process_exit import exit_now

        exit_now(code)  # a normal exit's end (threads joined, atexit callbacks, streams flushed), then os._exit


def serve(path: str) -> None:
    """The zygote: import PRELOAD, say ready, and fork a child per request until the test process is gone."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print(json.dumps({"ready": threads == 1, "threads": threads}), flush=True)
    if threads != 1:
        return  # a fork would lose a thread that may hold a lock: the caller starts fresh processes instead
    parent = os.getppid()
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection its exit status goes back on
    while os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
            request = json.loads(msg)
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _be_the_command(request["module"], request["args"], request["cwd"], request["env"], fds[0], fds[1])
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                try:
                    conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()


# ---------------------------------------------------------------------------------------------------- the caller
class _Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="evoteam-zygote-")
        self.path = os.path.join(self.folder, "sock")
        self.env = dict(os.environ)
        self.imported_with = import_time_environment(self.env)
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=self.env, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        self.ready = bool(line) and json.loads(line).get("ready", False)

    def serves(self, env: dict[str, str]) -> bool:
        return self.ready and self.proc.poll() is None and import_time_environment(env) == self.imported_with

    def run(self, module: str, args: list[str], cwd: str, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            msg = json.dumps({"module": module, "args": args, "cwd": cwd, "env": env}).encode()
            socket.send_fds(conn, [msg], [out.fileno(), err.fileno()])
            reader = conn.makefile("r")
            pid = json.loads(reader.readline())["pid"]
            conn.settimeout(timeout)
            try:
                line = reader.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout) from None
            returncode = json.loads(line)["returncode"]
            outputs = []
            for f in (out, err):
                f.seek(0)
                outputs.append(f.read().decode("utf-8", errors="replace").replace("\r\n", "\n"))
        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], returncode, *outputs)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)


_zygote: _Zygote | None = None


def run(args: list[str], cwd: Path | str | None = None, env: dict[str, str] | None = None,
        python: str = sys.executable, timeout: float = 600, module: str = "evoteam") -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` run to its end, its output captured, as subprocess.run(..., capture_output=True,
    text=True) runs it (cwd: this process's by default; env: this process's environment): forked from the zygote
    where it serves, else a fresh process (see the module's docstring)."""
    global _zygote
    cwd = str(cwd) if cwd is not None else os.getcwd()
    env = dict(os.environ) if env is None else env
    if python == sys.executable and os.environ.get("EVOTEAM_TESTS_FRESH") != "1":
        own = import_time_environment(os.environ)
        if _zygote is not None and (_zygote.imported_with != own or _zygote.proc.poll() is not None):
            close()  # this process's own environment changed since (a test's monkeypatch), or the zygote ended
        # (one that started but is not single-threaded is kept: starting another would only fail the same way)
        if _zygote is None and import_time_environment(env) == own:
            _zygote = _Zygote()
        if _zygote is not None and _zygote.serves(env):
            return _zygote.run(module, list(args), cwd, env, timeout)
    return subprocess.run([python, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def close() -> None:
    global _zygote
    if _zygote is not None:
        _zygote.close()
        _zygote = None


if __name__ == "__main__":
    serve(sys.argv[1])
