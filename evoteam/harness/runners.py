"""The judge's handle on one runner process: start it in its sandbox, ask it things with a deadline,
wait for its flag words, and turn every way it can fail (death, silence, a fault it reports) into a
`RunnerFault` that names the status the current workload gets."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from evoteam.harness.model import Status
from evoteam.harness.protocol import Channel, ChannelClosed, ChannelTimeout
from evoteam.harness.sandbox import FreezeFailed, SandboxedProcess, SandboxSpec
from evoteam.harness.shared import FlagPage

LOG_TAIL_CHARS = 4000
STACK_WAIT_S = 0.5  # a runner asked for its stacks has this long to write them
CRASH_MARKERS = ("illegal memory access", "misaligned address", "device-side assert", "unspecified launch failure",
                 "Segmentation fault", "core dumped")


# What a runner may say of its own failure. Its process holds the candidate, which can rewrite any reply (it can
# patch the very json module the protocol writes with), so its word only ever chooses among the failures it could
# have: never PASSED, FLAGGED, or a verdict the judge alone gives from its own evidence (a check's outcome, a
# timeout, harness_error). Anything else it claims reads as `default`. output_replaced and output_dtype are the
# runner's own findings on what a value-returning solution returned (runner.deliver): a failure, whichever failure a
# candidate picks.
RUNNER_FAILURES = frozenset({Status.EXCEPTION, Status.COMPILE_ERROR, Status.CRASH, Status.OUT_OF_MEMORY,
                             Status.OUTPUT_REPLACED, Status.OUTPUT_DTYPE})


def claimed_failure(reply: dict, default: Status) -> Status:
    """The failure a runner's reply that is not ok stands for (the reply's own word only where it names one of
    RUNNER_FAILURES)."""
    try:
        status = Status(reply.get("status"))
    except ValueError:
        return default
    return status if status in RUNNER_FAILURES else default


class RunnerFault(Exception):
    """The runner cannot go on: the workload it was on gets `status`; a new runner takes the next."""

    def __init__(self, status: Status, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


class RunnerHandle:
    def __init__(self, kind: str, spec: SandboxSpec, workdir: Path):
        self.kind = kind  # "candidate" or "baseline"
        self.device = spec.device
        parent, child = socket.socketpair()
        self.flags = FlagPage(spec.device)
        argv = [sys.executable, "-m", "evoteam.harness.runner", str(child.fileno())]
        spec.env = {**spec.env, "EVOTEAM_RUNNER_DEVICE": spec.device}
        self.process = SandboxedProcess(argv, spec, pass_fds=[child.fileno()], log_path=workdir / f"{kind}.log")
        child.close()
        self.channel = Channel(parent)
        self.record = self.process.record
        self.dead = False
        self.frozen = False
        self.turn = 0  # the number of the last message sent: its answer must carry it (receive)

    # ------------------------------------------------------------------ running or not
    def freeze(self) -> None:
        """Stop every process of the runner (its cgroup: threads, children, other sessions) and wait until they are
        stopped: nothing of it runs while the judge writes its inputs, checks its outputs or times the other side.
        A freeze that is not complete in time ends the runner and fails the workload."""
        if self.frozen or self.dead:
            return
        try:
            self.process.freeze(True)
        except FreezeFailed as exc:
            self.kill()
            raise RunnerFault(Status.TIMEOUT, f"{exc}: it was ended") from None
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen and not self.dead:
            self.process.freeze(False)
        self.frozen = False

    # ------------------------------------------------------------------ messages
    def send(self, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
        """A message to the runner (thawed first: a frozen runner cannot read it)."""
        self.thaw()
        self.turn += 1
        try:
            self.channel.send({**message, "turn": self.turn}, fds)
        except ChannelClosed:
            raise self._death() from None

    def receive(self, timeout_s: float) -> dict:
        """The runner's answer; a reply of a failure is returned, not raised, unless it is fatal."""
        try:
            reply, extra = self.channel.recv(max(timeout_s, 0.001))
        except ChannelTimeout:
            self.kill()
            raise RunnerFault(Status.TIMEOUT, f"no answer within the time limit ({timeout_s:.0f} s left)") from None
        except ChannelClosed:
            raise self._death() from None
        for fd in extra:
            os.close(fd)
        if reply.get("turn") != self.turn:
            # One answer per message, carrying the message's number (the runner's serve loop copies it). Anything
            # else was sent by code in the runner's process other than that loop: the candidate forging a message
            # (the red team's forge_done_message, made real on 2026-12-06: on a CPU its forged "done" was read as the
            # call's answer and the outputs checked before they were written; on a GPU, where the judge waits for
            # the device's words, it would shift every later answer by one, unseen), or a second answer to one
            # message. The judge takes nothing from an answer but steering: this is a runner that tampered with the
            # protocol, not a verdict of speed.
            self.kill()
            raise RunnerFault(Status.FLAGGED if self.kind == "candidate" else Status.HARNESS_ERROR,
                              f"the {self.kind} runner answered out of turn (an answer marked {reply.get('turn')!r} "
                              f"to message {self.turn}): a message its serve loop did not send, the protocol "
                              f"tampered with")
        if reply.get("fatal"):
            self.kill()
            raise RunnerFault(claimed_failure(reply, Status.CRASH), reply.get("detail", "the runner stopped"))
        return reply

    def ask(self, message: dict, timeout_s: float, fds: list[int] | tuple[int, ...] = ()) -> dict:
        """A message and its answer; then the runner is frozen (it runs only while the judge talks to it or its
        clock runs: nothing of it works unseen between two messages)."""
        self.send(message, fds)
        reply = self.receive(timeout_s)
        self.freeze()
        return reply

    def wait_flag(self, offset: int, value: int, deadline: float, what: str = "its GPU work") -> dict | None:
        """Spin until the flag word reaches `value` (the runner's GPU writes it); an answer that the
        runner sends first (a call that raised, say) is returned instead. At the deadline the runner's stacks go to
        its log, it is ended, and the workload fails with them."""
        words, index = self.flags.words, offset // 4
        spins = 0
        while words[index] < value:
            spins += 1
            if spins & 0x3FFF == 0:
                if time.monotonic() > deadline:
                    self.dump_stacks()
                    self.kill()
                    raise RunnerFault(Status.TIMEOUT, f"no signal from {what} within the time limit (its word at "
                                      f"{offset} was never written); the runner's stacks: {self.stacks()}")
                if self.process.poll() is not None or _readable(self.channel.sock):
                    return self.receive(max(0.0, deadline - time.monotonic()))
        return None

    def dump_stacks(self, wait_s: float = STACK_WAIT_S) -> None:
        """Ask the runner's Python processes for every thread's stack (SIGUSR1: faulthandler writes them to its log),
        thawed for the moment it takes: a runner about to be ended for silence leaves where it was."""
        try:
            self.thaw()
            pids = self.process.python_pids()
            for pid in pids:
                os.kill(pid, signal.SIGUSR1)
            if pids:
                time.sleep(wait_s)
        except (OSError, RunnerFault):
            pass

    def stacks(self) -> str:
        """The frames of the runner's latest stack dump in its log (faulthandler's `File "...", line N in f` lines),
        the innermost of each thread first, as written."""
        frames = [line.strip() for line in self.logs().splitlines() if line.strip().startswith('File "')]
        return " | ".join(frames[-16:]) or "none written"

    def _death(self) -> RunnerFault:
        for _ in range(100):  # the socket closes a moment before the process is reaped
            if self.process.poll() is not None:
                break
            time.sleep(0.01)
        code = self.process.poll()
        logs = self.process.logs(LOG_TAIL_CHARS)
        self.kill()
        guard = self.process.guard
        if guard is not None and guard.reason:
            status = Status.OUT_OF_MEMORY if guard.out_of_memory else Status.CRASH
            return RunnerFault(status, f"{guard.reason} ({logs_tail(logs)})")
        if self.process.out_of_memory() or (code is not None and code in (-signal.SIGKILL, 128 + signal.SIGKILL)
                                            and "memory" in logs.lower()):
            return RunnerFault(Status.OUT_OF_MEMORY, f"out of memory: the runner was killed at its limit ({logs_tail(logs)})")
        return RunnerFault(Status.CRASH, describe_exit(code, logs))

    # ------------------------------------------------------------------ lifetime
    def kill(self) -> None:
        if not self.dead:
            self.dead = True
            self.process.kill()

    def close(self, goodbye: bool = True) -> None:
        """End the runner: asked to exit first (up to 5 s) unless not `goodbye` (a judge being ended asks nothing)."""
        if goodbye and not self.dead:
            try:
                self.thaw()
                self.channel.send({"op": "exit"})
                self.channel.recv(5)
            except Exception:  # noqa: BLE001 - it is being ended either way
                pass
        self.kill()
        self.process.close()
        self.channel.close()
        self.flags.close()

    def logs(self) -> str:
        return self.process.logs(LOG_TAIL_CHARS)


def _readable(sock) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def logs_tail(logs: str) -> str:
    lines = [line for line in logs.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def describe_exit(code: int | None, logs: str) -> str:
    if code is None:
        cause = "the runner stopped answering"
    elif code < 0:
        try:
            cause = f"runner killed by {signal.Signals(-code).name}"
        except ValueError:
            cause = f"runner killed by signal {-code}"
    elif code > 128:
        try:
            cause = f"runner killed by {signal.Signals(code - 128).name}"
        except ValueError:
            cause = f"runner exited with code {code}"
    else:
        cause = f"runner exited with code {code}"
    lower = logs.lower()
    for marker in CRASH_MARKERS:
        if marker.lower() in lower:
            cause += f" ({marker})"
            break
    if logs.strip():
        cause += f": {logs_tail(logs)}"
    return cause
