"""Judges forked from a process that has imported them already.

A judge process spends 1.5 s of CPU importing PyTorch and the harness before it does anything, and a team
run starts one per evaluation. `JudgeServer` is a helper process, one per calling process, that imports the
judge once and forks a judge for each evaluation: the same code in the same state as a fresh
`python -m evoteam.harness.judge` would have, started in milliseconds (what CPython's
`multiprocessing.forkserver` does, without its pickling and main-module re-import).

The fork happens before any judge work: the server holds no GPU context (CUDA is initialised lazily, in the
judge, after CUDA_VISIBLE_DEVICES is set from the request) and has not imported Triton (TRITON_INTERPRET is
read at its import). Each judge gets the caller's environment and working directory as of its request, its own
session (so that killing it ends its runners too), its output in its log file and stdin from /dev/null, and is
the server's child: it ends with the server (PR_SET_PDEATHSIG, judge._end_with_parent), and the server ends
when its caller does (its socket closes with the caller, whatever killed it). Candidates never run here: each
judge starts its runners in their sandbox as before.

A command (`python -m evoteam`) forks its server from itself before its threads start, where `fork_refusal` finds
nothing against it (a CPU-only PyTorch build, Triton not imported, among others): the server's imports are the
command's own, done once (`prestart`). Any other caller starts it afresh at its first evaluation.

`EVOTEAM_JUDGE_SERVER=0` starts every judge as its own process instead.

Protocol (JSON lines on a socket pair): the caller sends {"id", "args", "env", "cwd", "log", "cpus", "umask"}
(what a process it started would inherit now: environment, working directory, CPU affinity, umask; the server
sets sys.path[0] to that directory, as `python -m` does); the server answers
{"id", "pid"} once the judge is forked, and {"exited": pid, "code"} when it ends.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from evoteam.harness import fork as forking

SWITCH_ENV = "EVOTEAM_JUDGE_SERVER"
READY_TIMEOUT_S = 120.0  # the server's imports on a loaded machine
KILL_GRACE_S = 10.0
REAP_INTERVAL_S = 0.05


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1") != "0"


_PYTHONPATH = os.environ.get("PYTHONPATH", "")  # as this process started (what its sys.path was made from)


def fork_refusal(python: str) -> str | None:
    """Why this process cannot fork its judge server (None: it can, and saves the server's start: 1.2 s of CPU
    importing PyTorch and the harness, in every main job). A forked server must be in the state a started one would
    be: this interpreter and import path; no thread (one could hold a lock the child then never sees released); a
    CPU-only PyTorch build (no GPU was touched: a forked child cannot use a GPU its parent initialised, and a CUDA
    build's `is_available()` initialises the driver); Triton not imported (it reads TRITON_INTERPRET at its import,
    which the judge sets from the target first); PyTorch imported (else there is nothing to save)."""
    torch = sys.modules.get("torch")
    if python != sys.executable or os.environ.get("PYTHONPATH", "") != _PYTHONPATH:
        return "another interpreter or import path"
    if threading.active_count() != 1:
        return "threads are running"
    if torch is None:
        return "PyTorch is not imported here"
    if getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None):
        return "a GPU build of PyTorch"
    if "triton" in sys.modules:
        return "Triton is imported here"
    return None


def prestart(python: str = sys.executable) -> None:
    """This process's judge server, forked now where `fork_refusal` allows (else started, as at the first evaluation).
    Only a command's own process calls it (`python -m evoteam`), at a point where its modules are as imported and
    before its threads start (a tracker's, an LLM client's): a caller that had changed the harness's modules (a test's
    monkeypatch) would hand its changes to every judge of the server. Judges of a server started at the first
    evaluation (`JudgeServer.get`, any caller) come from a started one, as before."""
    if enabled():
        JudgeServer.get(python, fork=True)


def prestart_for_command(executor_kind: str) -> None:
    """What a command (`python -m evoteam`, `python -m evoteam.bench`) calls once it knows its target, in its own
    process: its server forked now (`prestart`) where its executor is local and `fork_refusal` finds nothing against
    it; else nothing now, and the server starts at the first evaluation, as for any caller."""
    if executor_kind == "local" and enabled() and fork_refusal(sys.executable) is None:
        prestart()


class ServerGone(RuntimeError):
    """The server process ended (or never started); the caller starts judges another way or a new server."""


class JudgeServer:
    """The caller's side: one server per process, Python executable and PYTHONPATH (`get`)."""

    _servers: dict[tuple, JudgeServer] = {}
    _servers_lock = threading.Lock()

    @classmethod
    def get(cls, python: str, fork: bool = False) -> JudgeServer:
        """This process's server (started now where it has none, or its last ended; forked where `fork` says and
        `fork_refusal` allows: see `prestart`)."""
        key = (python, os.environ.get("PYTHONPATH", ""), os.getpid())  # a forked caller gets its own
        with cls._servers_lock:
            server = cls._servers.get(key)
            if server is None or server.gone:
                server = cls._servers[key] = cls(python, fork)
            return server

    def __init__(self, python: str, fork: bool = False):
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [python, "-m", "evoteam.harness.judge_server", str(theirs.fileno())]
        self.forked = fork and fork_refusal(python) is None
        if self.forked:  # what a started server would import, this process has imported already
            self.proc = forking.spawn(argv, env=env, cwd=os.getcwd(), log_path=os.devnull, pass_fds=[theirs.fileno()],
                                      stderr_to_log=False, oom_first=False)
        else:
            self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, env=env, start_new_session=True)
        theirs.close()
        self.sock = ours
        self.gone = False
        self._send_lock = threading.Lock()
        self._changed = threading.Condition()
        self._ids = iter(range(1, 1 << 62))
        self._started: dict[int, int] = {}  # request id -> pid
        self._exited: dict[int, int] = {}  # pid -> exit code
        self._ready = False
        self.owner = os.getpid()
        threading.Thread(target=self._read, name="judge-server-reader", daemon=True).start()
        # Ended, and waited for, as the caller exits: a server (and its judges) still there after the caller's
        # command had returned was seen on a shared GPU host (2026-12-06, after every bench). Its socket's closing
        # alone ends it, but a moment later than the caller.
        atexit.register(self.close)

    def close(self, timeout_s: float = KILL_GRACE_S) -> None:
        """End the server and its judges, and wait until the server has ended (in the process that started it
        only: a forked child shares the socket, and shutting it down there would end its parent's server)."""
        if os.getpid() != self.owner or self.proc.poll() is not None:
            return
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # the server reads the end, ends its judges, and exits
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                with self._changed:
                    for line in lines:
                        message = json.loads(line)
                        if "ready" in message:
                            self._ready = True
                        elif "exited" in message:
                            self._exited[message["exited"]] = message["code"]
                        else:
                            self._started[message["id"]] = message["pid"]
                    self._changed.notify_all()
        except (OSError, ValueError):
            pass
        with self._changed:
            self.gone = True
            self._changed.notify_all()
        self.proc.poll()  # reaped where it has ended

    def start(self, args: list[str], env: dict[str, str], log_path: Path) -> int:
        """Fork a judge running `judge_main(*args)`; its pid."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready or self.gone, READY_TIMEOUT_S) or self.gone:
                raise ServerGone("the judge server did not start")
        with self._send_lock:
            request_id = next(self._ids)
            message = {"id": request_id, "args": args, "env": env, "cwd": os.getcwd(), "log": str(log_path),
                       "cpus": sorted(os.sched_getaffinity(0)), "umask": _umask()}
            try:
                self.sock.sendall(json.dumps(message).encode() + b"\n")
            except OSError as exc:
                raise ServerGone(f"the judge server is gone ({exc})") from None
        with self._changed:
            self._changed.wait_for(lambda: request_id in self._started or self.gone)
            if request_id not in self._started:
                raise ServerGone("the judge server ended before it forked the judge")
            return self._started.pop(request_id)

    def exit_code(self, pid: int) -> int | None:
        """The judge's exit code once it has ended (-9 where the server itself ended first: the judge ends with
        it)."""
        with self._changed:
            if pid in self._exited:
                return self._exited[pid]
            return -signal.SIGKILL if self.gone else None

    def wait(self, pid: int, timeout_s: float) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exited or self.gone, timeout_s)
        return self.exit_code(pid)

    def forget(self, pid: int) -> None:
        with self._changed:
            self._exited.pop(pid, None)


class ForkedJudge:
    """A judge the server forked: ended, polled and forgotten as a process of the caller's own would be."""

    def __init__(self, server: JudgeServer, pid: int):
        self.server, self.pid = server, pid

    def poll(self) -> int | None:
        return self.server.exit_code(self.pid)

    def kill(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the judge ends its runners on SIGTERM
            if self.poll() is not None:
                return
            _signal_group(self.pid, sig)
            if self.server.wait(self.pid, KILL_GRACE_S) is not None:
                return

    def close(self) -> None:
        self.server.forget(self.pid)


def close_all() -> None:
    """End this process's judge servers (and their judges) and wait for them: a command that evaluates and returns
    (bench, run_dataset) leaves nothing running behind it, also where it was called as a function."""
    with JudgeServer._servers_lock:
        servers = list(JudgeServer._servers.values())
        JudgeServer._servers.clear()
    for server in servers:
        server.close()


def _umask() -> int | None:
    """This process's umask, read without setting it (os.umask would change it for every thread a moment)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


def _signal_group(pid: int, sig: int) -> None:
    """The judge's session (its runners included); the judge alone in the moment before it has one."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# ------------------------------------------------------------------------------------------ the server process


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _judge_child(sock: socket.socket, request: dict) -> None:
    """In the forked child: become a fresh judge process, run it, exit with its code (never returns)."""
    code = 1
    try:
        sock.close()
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        # `python -m` puts its working directory first on sys.path, and the sandbox leaves that one folder out of
        # what a runner sees (sandbox.python_paths): the server's own would be mounted into every sandbox else
        sys.path[0] = request["cwd"]
        os.sched_setaffinity(0, request["cpus"])  # the CPUs the caller may use now, as a process it started would
        if request.get("umask") is not None:
            os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["EVOTEAM_JUDGE_PARENT"] = str(os.getppid())  # the server: the judge ends with it
        from evoteam.harness import judge

        sys.argv = [judge.__file__, *request["args"]]
        code = judge.judge_main(*request["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it is, it goes to the judge's log, as a fresh process's would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # as every command ends (its atexit callbacks and output first), never back into the server's loop
        from evoteam import process_exit

        process_exit.exit_now(code)


def serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    # what every judge imports (PyTorch, the task, hardware and check modules with it), so that none imports it again;
    # and numpy.ma, which numpy imports at its first np.unique (the MLA task's index layouts): 0.1 s of every judge
    import numpy.ma  # noqa: F401

    from evoteam.harness import judge  # noqa: F401

    children: set[int] = set()
    buffer = b""
    try:
        _send(sock, {"ready": os.getpid()})  # a caller that ended meanwhile (Ctrl-C during the imports) took the socket
        while True:
            readable, _, _ = select.select([sock], [], [], REAP_INTERVAL_S if children else None)
            if readable:
                data = sock.recv(1 << 16)
                if not data:
                    break  # the caller is gone: so is every judge (they end with this process)
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _judge_child(sock, request)
                    children.add(pid)
                    _send(sock, {"id": request["id"], "pid": pid})
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
    except (BrokenPipeError, ConnectionResetError):
        pass
    for pid in children:
        _signal_group(pid, signal.SIGTERM)
    # waited for, so that the caller, which waits for this process, finds no judge (nor its runners) left
    deadline = time.monotonic() + KILL_GRACE_S
    while children:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            children.discard(pid)
        elif time.monotonic() > deadline:
            for pid in children:
                _signal_group(pid, signal.SIGKILL)
            deadline = math.inf
        else:
            time.sleep(REAP_INTERVAL_S)
    return 0


def main(argv: list[str]) -> int:
    """`python -m evoteam.harness.judge_server FD`, also as a forked server runs it (evoteam.harness.fork)."""
    return serve(int(argv[0]))


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main, sys.argv[1:])
