"""Where an evaluation's judge runs: the one interface every executor has.

`evaluate(request)` starts the judge (`python -m evoteam.harness.judge`) as its own process, follows
the progress file it appends to (a `start` line before each workload, a `result` line after it, an
`end` line with the evaluation's summary) and returns the `EvalResult`. The judge starts the
candidate's runner in its sandbox and replaces it after a fault, so a crash, a hang or an
out-of-memory fails one workload and the evaluation goes on. Executors differ only in how the judge
process is started: `LocalExecutor` here, `evoteam.harness.container.ContainerExecutor` in the hardware
target's container.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Protocol

from evoteam.errors import UserError
from evoteam.harness import judge_server, scratch
from evoteam.harness.judge_server import ForkedJudge, JudgeServer, ServerGone
from evoteam.harness.model import EvalRequest, EvalResult, Placement, Status, WorkloadResult, add_phases
from evoteam.schema import read_journal

POLL_S = 0.05
OUTSIDE = "outside the judge (its process started, followed, ended)"  # the phase table's executor line
LOG_TAIL_CHARS = 4000


class JudgeProcess(Protocol):
    """A started judge: the progress file it writes, poll() -> exit code or None, kill(), logs()."""

    progress_path: Path

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def logs(self) -> str: ...


class Executor(Protocol):
    def start(self, request: EvalRequest, workdir: Path) -> JudgeProcess: ...


class _LocalJudge:
    """A judge on this machine: forked by the process's judge server (judge_server.py: PyTorch and the harness
    imported once), or, where that is switched off or cannot start, a process of its own."""

    def __init__(self, request: EvalRequest, workdir: Path, python: str, extra_env: dict):
        req_path = workdir / "request.json"
        req_path.write_text(json.dumps(asdict(request)))
        self.progress_path = workdir / "progress.jsonl"
        self.log_path = workdir / "judge.log"
        env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1", "EVOTEAM_JUDGE_PARENT": str(os.getpid()),
               "EVOTEAM_JUDGE_SPAWNED": repr(time.time())}
        args = [str(req_path), str(self.progress_path)]
        self.forked: ForkedJudge | None = None
        self.proc: subprocess.Popen | None = None
        for _ in range(2 if judge_server.enabled() else 0):  # a server that ended is replaced once
            server = JudgeServer.get(python)
            try:
                self.forked = ForkedJudge(server, server.start(args, env, self.log_path))
                return
            except ServerGone:
                continue
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([python, "-m", "evoteam.harness.judge", *args],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def poll(self) -> int | None:
        return self.forked.poll() if self.forked else self.proc.poll()

    def kill(self) -> None:
        if self.forked:
            self.forked.kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the judge kills its runners on the way out
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        if self.forked:
            self.forked.close()

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""


VISIBLE_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def visible_devices() -> list[str]:
    """The GPU ids this process's visible-devices variable names (the first one set); [] where none is set."""
    for name in VISIBLE_DEVICE_VARIABLES:
        ids = [d.strip() for d in os.environ.get(name, "").split(",") if d.strip()]
        if ids:
            return ids
    return []


class DevicePool:
    """The accelerators evaluations may use, one evaluation per device at a time: `device()` waits for a
    free one and takes the first free in order, so work of one evaluation at a time always runs on the
    first device. Its ids are what CUDA_VISIBLE_DEVICES (or HIP_VISIBLE_DEVICES) names."""

    def __init__(self, ids: list[str]):
        self.ids = list(ids)
        self._busy: set[str] = set()
        self._changed = threading.Condition()

    @classmethod
    def visible(cls, gpu: bool) -> DevicePool | None:
        """Every GPU this process sees (its visible-devices variable where set); None on a CPU target."""
        if not gpu:
            return None
        named = visible_devices()
        if named:
            return cls(named)
        import torch

        return cls([str(i) for i in range(max(1, torch.cuda.device_count()))])

    @contextlib.contextmanager
    def device(self):
        with self._changed:
            self._changed.wait_for(lambda: len(self._busy) < len(self.ids))
            gpu = next(i for i in self.ids if i not in self._busy)
            self._busy.add(gpu)
        try:
            yield gpu
        finally:
            with self._changed:
                self._busy.discard(gpu)
                self._changed.notify()


class LocalExecutor:
    """executor=local: the judge as a process on this machine. With a device pool, each evaluation takes
    a free GPU of it (one judge per device), so a run's parallel work uses every visible GPU."""

    kind = "local"

    def __init__(self, python: str = sys.executable, extra_env: dict | None = None, pool: DevicePool | None = None):
        self.python = python
        self.extra_env = extra_env or {}
        self.pool = pool

    @classmethod
    def from_config(cls, executor_cfg, hw) -> LocalExecutor:
        """On a machine with several GPUs, a parallel team's evaluations spread over every visible one."""
        pool = DevicePool.visible(hw.is_gpu)
        return cls(pool=pool if pool and len(pool.ids) > 1 else None)

    def start(self, request: EvalRequest, workdir: Path) -> JudgeProcess:
        return _LocalJudge(request, workdir, self.python, self.extra_env)

    def __call__(self, request: EvalRequest, timeout_s: float | None = None) -> EvalResult:
        submitted = time.time()
        if self.pool is None:
            result = evaluate(request, executor=self, timeout_s=timeout_s)
            return replace(result, placement=placement("local", submitted, submitted))
        with self.pool.device() as gpu:
            started = time.time()
            one = LocalExecutor(self.python, {**self.extra_env, "CUDA_VISIBLE_DEVICES": gpu, "HIP_VISIBLE_DEVICES": gpu})
            result = evaluate(request, executor=one, timeout_s=timeout_s)
        return replace(result, placement=placement("local", submitted, started, gpu=gpu))


def placement(executor: str, submitted: float, started: float, **where) -> Placement:
    """EvalResult.placement of an evaluation that ends now."""
    return Placement(executor=executor, submitted=submitted, started=started, ended=time.time(), **where)


def evaluate(request: EvalRequest, *, executor: Executor | None = None, timeout_s: float | None = None,
             total_timeout_s: float | None = None,
             on_result: Callable[[WorkloadResult], None] | None = None) -> EvalResult:
    """Run the request's evaluation; never raises for anything the candidate does. `timeout_s` limits
    each workload (compilation included), `total_timeout_s` the whole evaluation. Should the judge
    itself die (its container killed for memory, say), the workload it was on fails and a new judge
    takes the rest."""
    from evoteam.harness.check import rule_record
    from evoteam.task import load_task

    if timeout_s is not None:
        request = replace(request, workload_timeout_s=float(timeout_s))
    task = load_task(request.task)
    uuids = request.workloads or [w.uuid for w in task.scaled_workloads(request.scale)]
    executor = executor or LocalExecutor()
    results: dict[str, WorkloadResult] = {}
    summary: dict = {}
    restarts, logs = 0, []
    deadline = time.monotonic() + total_timeout_s if total_timeout_s else None
    started, judge_phases = time.monotonic(), []

    rule = rule_record(task, request.fib_rule)

    def record(result: WorkloadResult) -> None:
        result.rule = result.rule or rule  # also on what the judge did not say (it was killed, or died)
        results[result.uuid] = result
        if on_result:
            on_result(result)

    tmp = scratch.make("eval")
    try:
        remaining = list(uuids)
        while remaining:
            workdir = Path(tmp) / f"judge{restarts}"
            workdir.mkdir()
            judge = executor.start(replace(request, workloads=remaining), workdir)
            try:
                current, killed, summary = _follow(judge, record, deadline, request.workload_timeout_s + 120)
                logs.append(judge.logs())
                out_of_memory = bool(getattr(judge, "out_of_memory", lambda: False)())
            finally:
                getattr(judge, "close", lambda: None)()
            if summary.get("event") == "error":
                raise UserError(summary["message"])
            judge_phases.append(summary.get("phases") or {})
            remaining = [u for u in remaining if u not in results]
            if not remaining:
                break
            if killed:
                for uuid in remaining:
                    record(WorkloadResult(uuid=uuid, status=Status.TIMEOUT, detail=killed))
                break
            victim = current if current in remaining else remaining[0]
            status = Status.OUT_OF_MEMORY if out_of_memory else Status.CRASH
            record(WorkloadResult(uuid=victim, status=status,
                                  detail=f"the evaluation's judge process died on this workload ({_last_line(logs[-1])})"))
            remaining.remove(victim)
            restarts += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    phases = add_phases(judge_phases)
    phases[OUTSIDE] = max(0.0, time.monotonic() - started - sum(phases.values()))
    log_tail = "\n".join(x for x in [summary.get("log_tail") or ""] +
                         [f"=== judge {i} ===\n{text}" for i, text in enumerate(logs) if text.strip()] if x)
    return EvalResult(results=[results[u] for u in uuids], restarts=summary.get("restarts", 0) + restarts,
                      log_tail=log_tail[-4 * LOG_TAIL_CHARS:], sandbox=summary.get("sandbox", {}),
                      seed=summary.get("seed"), seed_secret=summary.get("seed_secret", True), phases=phases)


def _follow(judge: JudgeProcess, record, deadline: float | None, stall_limit: float) -> tuple[str | None, str, dict]:
    """Follow a judge's progress file until it exits (or is killed): (the workload it was on when it
    stopped, why it was killed, its closing summary)."""
    seen, current, summary, killed = 0, None, {}, ""
    last_event = time.monotonic()
    while True:
        code = judge.poll()
        events = read_journal(judge.progress_path)
        for event in events[seen:]:
            last_event = time.monotonic()
            if event["event"] == "start":
                current = event["uuid"]
            elif event["event"] == "result":
                record(WorkloadResult.from_json(event))
                current = None
            elif event["event"] in ("end", "error"):
                summary = event
        seen = len(events)
        if code is not None:
            return current, killed, summary
        now = time.monotonic()
        if (deadline and now > deadline) or now - last_event > stall_limit:
            killed = "the evaluation ran past its time limit" if deadline and now > deadline else \
                f"the judge gave no sign of progress for {stall_limit:.0f} s"
            judge.kill()
            return current, killed, summary
        time.sleep(POLL_S)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
