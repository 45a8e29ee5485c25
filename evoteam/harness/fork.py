"""A trusted process forked from this one: `python -m MODULE ARGS` without its interpreter start and imports.

A runner spends about 1.5 s of CPU importing PyTorch before it answers the judge; the judge, forked from the judge
server (judge_server.py), has imported all of it already. The baseline's runner runs trusted code only (the library
adapter, the task's reference, the protocol alone), so on a CPU target the judge forks it from itself instead of
starting it afresh: a new process per evaluation as before, with its own session, cgroup, CPUs, limits, log,
environment and working directory, set up here as the shell prologue of sandbox.SandboxedProcess sets them up for a
started one, then the module's `main(args)`, then its end (never back into the judge's code).

A command's judge server is forked the same way from the command itself where nothing stands in the way
(judge_server.prestart): 1.2 s of CPU less per main job.

Never for a candidate: its runner must not share one page of the judge's memory (the secret, the inputs' copies),
and it starts afresh in its sandbox. Never where this process holds a GPU context: a forked child cannot use it
(the judge opens its context before its runners start), so a GPU target's baseline runner starts afresh as before.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import importlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path


def can_fork() -> bool:
    """Whether a child forked now could run PyTorch: no CUDA context here (torch unimported counts as none)."""
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


class ForkedProcess:
    """The parent's handle on the child, as subprocess.Popen's (pid, returncode, poll, wait, send_signal, kill,
    terminate)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # one reaper at a time, as Popen's

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: gone either way
                    self.returncode = -signal.SIGKILL
                    return self.returncode
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]


def spawn(argv: list[str], *, env: dict[str, str], cwd: str, log_path: Path | str, pass_fds: list[int],
          procs_files: list[str] = (), cpus: frozenset[int] | None = None, limits: dict[int, int] | None = None,
          stderr_to_log: bool = True, oom_first: bool = True) -> ForkedProcess:
    """Fork a child that becomes `argv` (`[python, "-m", module, *args]`, the module's `main(args)` returning its exit
    code): in a session of its own, the out-of-memory killer's first choice (`oom_first`), under `limits`
    (resource.RLIMIT_* to one value, soft and hard), in every cgroup of `procs_files`, on `cpus`, with stdin from
    /dev/null, stdout (and stderr, unless not `stderr_to_log`: then this process's) to `log_path`, only `pass_fds` of
    this process's descriptors, `env` alone and `cwd`."""
    if len(argv) < 3 or argv[1] != "-m":
        raise ValueError(f"a forked process runs a module's main: [python, '-m', module, ...], not {argv}")
    module, args = argv[2], argv[3:]
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream in (sys.stdout, sys.stderr):  # nothing of this process's buffered output is written twice
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    pid = os.fork()
    if pid:
        os.close(log)
        return ForkedProcess(pid)
    code = 127
    try:
        _become(log, env=env, cwd=cwd, pass_fds=pass_fds, procs_files=procs_files, cpus=cpus, limits=limits or {},
                stderr_to_log=stderr_to_log, oom_first=oom_first)
        sys.argv = [module, *args]
        code = importlib.import_module(module).main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it is goes to the child's log, as a started process's would
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code if isinstance(code, int) else 1)


def _default_handlers() -> None:
    """The signal handlers a started interpreter has: exec resets a caught signal to its default (the judge's SIGTERM
    handler unwinds the judge; a runner just ends), and Python installs its own for SIGINT alone."""
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP and the like
            pass


def _become(log: int, *, env: dict[str, str], cwd: str, pass_fds: list[int], procs_files: list[str],
            cpus: frozenset[int] | None, limits: dict[int, int], stderr_to_log: bool, oom_first: bool) -> None:
    """In the child: what `sh -c "<prologue>; exec python -m ..."` of sandbox.SandboxedProcess would have set."""
    # Everything inherited out of the collector's sight, never collected here: a cycle of the judge's that held a
    # descriptor (a socket, a file) would else close, when collected, the number this child has since reused for
    # its own (the channel, a buffer). The runner's own collections look only at what it made.
    gc.freeze()
    os.setsid()
    _default_handlers()
    atexit._clear()  # the parent's exit callbacks are the parent's (an MLflow run's end, a server's closing)
    if not env.get("PYTHONFAULTHANDLER"):
        faulthandler.disable()  # the parent's (pytest's, say) writes to a descriptor closed below
    if oom_first:
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
    for which, value in limits.items():
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError):
            pass
    for path in procs_files:  # a failure here ends the child, as the prologue's `&&` does
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    if cpus:
        os.sched_setaffinity(0, cpus)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    if stderr_to_log:
        os.dup2(log, 2)
    keep = {0, 1, 2, *pass_fds}
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd not in keep:  # the judge's sockets, buffers, flag page and CPU lock stay the judge's
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed already
                pass
    # fresh standard streams on the log: another thread of the judge's may have held the old ones' locks at the fork
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own, to its end
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    sys.path[0] = cwd  # as `python -m` puts its working directory first
    os.environ.clear()
    os.environ.update(env)
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS")
    if torch is not None and threads and threads.isdigit():
        torch.set_num_threads(int(threads))  # a started process reads it at torch's import; this one imported it
