"""Isolated evaluation of an untrusted candidate: a fresh worker process per evaluation.

The parent (`evaluate_isolated`) starts `python -m evoteam.worker REQUEST.json` in its own process
group, without network where the machine allows (`unshare -n`), and watches a progress file the
worker appends to: a `start` line before each workload and a `result` line after it. A workload
that runs past the time limit is recorded as `timeout` and the worker killed; a worker that dies
(segfault, illegal memory access, out of memory) has the workload it was on recorded with the
cause; in both cases a new worker continues with the workloads that are left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from evoteam.schema import append_journal, read_journal

# Statuses of one workload's evaluation.
PASSED = "PASSED"
FAILURE_STATUSES = ("rejected", "compile_error", "exception", "unwritten", "nan_inf", "mismatch", "rel_norm",
                    "input_modified", "output_replaced", "skipped_work", "timeout", "crash", "out_of_memory",
                    "flagged_cheat")


@dataclass
class EvalRequest:
    task: str
    hardware: str  # spec sheet name (already resolved by the caller)
    solution: str  # path of the candidate's Python file
    entry: str = "run"
    workloads: list[str] = field(default_factory=list)  # uuids; empty means every workload at the scale
    scale: str = "full"
    trials: int = 3
    seed: int = 0
    timing_mode: str = "events"
    baseline: str = "auto"
    baseline_options: dict = field(default_factory=dict)
    warmup: int = 5
    reps: int = 50
    check_only: bool = False
    use_baseline_cache: bool = False  # take the baseline's time from the cache where it has one
    profile: bool = True  # look at the kernels the candidate launches (GPU only)
    # The static scan is the first line of defence; tests of the second (the profiler) turn it off.
    static_scan: bool = True


@dataclass
class WorkloadResult:
    uuid: str
    status: str  # PASSED or one of FAILURE_STATUSES
    detail: str = ""
    baseline: str = ""
    timing_mode: str = ""
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    candidate_repeat_ms: float | None = None  # the same candidate timed again in the same run: noise
    spread: dict = field(default_factory=dict)  # p10/p90 of each timed callable
    floor_ms: float | None = None  # compulsory bytes / peak bandwidth
    bandwidth_tbs: float | None = None  # compulsory bytes / candidate time
    flags: list[str] = field(default_factory=list)  # anti-cheat findings that do not stop the run
    kernels: list[str] = field(default_factory=list)  # kernel names the candidate launched
    correctness: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        if self.status != PASSED or not self.baseline_ms or not self.candidate_ms:
            return None
        return self.baseline_ms / self.candidate_ms

    @property
    def noise(self) -> float | None:
        """Relative difference between the two measurements of the same candidate."""
        if not self.candidate_ms or not self.candidate_repeat_ms:
            return None
        return abs(self.candidate_ms - self.candidate_repeat_ms) / min(self.candidate_ms, self.candidate_repeat_ms)

    def to_json(self) -> dict:
        return {**asdict(self), "speedup": self.speedup, "noise": self.noise}

    @classmethod
    def from_json(cls, obj: dict) -> WorkloadResult:
        obj = {k: v for k, v in obj.items() if k not in ("speedup", "noise", "event")}
        return cls(**obj)


@dataclass
class EvalResult:
    results: list[WorkloadResult]
    restarts: int = 0  # workers replaced after a crash, an out-of-memory or a timeout
    log_tail: str = ""

    def to_json(self) -> dict:
        return {"results": [r.to_json() for r in self.results], "restarts": self.restarts, "log_tail": self.log_tail}


# ----------------------------------------------------------------------------- the parent side


def _network_isolation_prefix() -> list[str]:
    """`unshare -n` (a new, empty network namespace) where this machine allows it."""
    if os.environ.get("EVOTEAM_ALLOW_NETWORK") == "1" or not shutil.which("unshare"):
        return []
    args = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-n", "-r"]
    try:
        ok = subprocess.run([*args, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return args if ok else []


def _describe_exit(returncode: int, stderr_tail: str) -> tuple[str, str]:
    """(status, cause) for a worker that died."""
    text = stderr_tail.lower()
    if "out of memory" in text or "outofmemoryerror" in text or returncode == -signal.SIGKILL and "memory" in text:
        return "out_of_memory", "out of memory"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        cause = f"worker killed by {name}"
    else:
        cause = f"worker exited with code {returncode}"
    for marker in ("illegal memory access", "misaligned address", "device-side assert", "unspecified launch failure"):
        if marker in text:
            cause += f" ({marker})"
    last = [line for line in stderr_tail.strip().splitlines() if line.strip()]
    if last:
        cause += f": {last[-1][:300]}"
    return "crash", cause


class _Progress:
    """Follows one worker's progress file: which workload it is on and since when."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = 0
        self.current: str | None = None
        self.started_at = time.monotonic()

    def consume(self, record) -> None:
        events = read_journal(self.path)
        for event in events[self.seen:]:
            if event["event"] == "start":
                self.current = event["uuid"]
            else:
                record(WorkloadResult.from_json(event))
                self.current = None
            self.started_at = time.monotonic()
        self.seen = len(events)


class LocalWorkers:
    """Worker processes on this machine (executor=local): `python -m evoteam.worker` in its own
    process group, without network where the machine allows (`unshare -n`)."""

    def __init__(self, python: str = sys.executable, extra_env: dict | None = None):
        self.python = python
        self.extra_env = extra_env or {}
        self.prefix = _network_isolation_prefix()

    def start(self, request: EvalRequest, workdir: Path, attempt: int) -> _LocalWorker:
        return _LocalWorker(self, request, workdir, attempt)


class _LocalWorker:
    """One worker process. The interface every kind of worker has (see evoteam.container):
    progress_path, poll() -> exit code or None, kill(), exit_cause(code) -> (status, cause), logs(), close()."""

    def __init__(self, workers: LocalWorkers, request: EvalRequest, workdir: Path, attempt: int):
        req_path = workdir / f"request{attempt}.json"
        self.progress_path = workdir / f"progress{attempt}.jsonl"
        self.log_path = workdir / f"stderr{attempt}.txt"
        req_path.write_text(json.dumps(asdict(request)))
        env = {**os.environ, **workers.extra_env, "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen([*workers.prefix, workers.python, "-m", "evoteam.worker", str(req_path),
                                          str(self.progress_path)], stdout=log_file, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        _kill_group(self.proc)

    def exit_cause(self, returncode: int) -> tuple[str, str]:
        return _describe_exit(returncode, self.logs())

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()


LOG_TAIL_CHARS = 4000


def evaluate_isolated(request: EvalRequest, *, timeout_s: float, total_timeout_s: float | None = None,
                      python: str = sys.executable, extra_env: dict | None = None,
                      on_result=None, workers=None) -> EvalResult:
    """Run the request in fresh worker processes; never raises for anything the candidate does.
    `workers` starts them: LocalWorkers (the default) or evoteam.container.ContainerWorkers."""
    from evoteam.task import load_task

    task = load_task(request.task)
    all_uuids = request.workloads or [w.uuid for w in task.scaled_workloads(request.scale)]
    remaining = list(all_uuids)
    results: dict[str, WorkloadResult] = {}
    restarts = 0
    logs: list[str] = []
    deadline = time.monotonic() + total_timeout_s if total_timeout_s else None
    workers = workers or LocalWorkers(python, extra_env)

    def record(result: WorkloadResult) -> None:
        results[result.uuid] = result
        if on_result:
            on_result(result)

    with tempfile.TemporaryDirectory(prefix="evoteam-worker-") as tmp:
        tmp_path = Path(tmp)
        while remaining:
            attempt = restarts
            worker = workers.start(replace(request, workloads=remaining), tmp_path, attempt)
            try:
                progress = _Progress(worker.progress_path)
                killed_for: str | None = None
                while (returncode := worker.poll()) is None:
                    progress.consume(record)
                    now = time.monotonic()
                    if now - progress.started_at > timeout_s or (deadline and now > deadline):
                        killed_for = "timeout"
                        worker.kill()
                        returncode = worker.poll()
                        break
                    time.sleep(0.05)
                progress.consume(record)  # lines written just before the exit
                current = progress.current
                log = worker.logs()
                remaining = [u for u in remaining if u not in results]
                if not remaining:
                    logs.append(log)
                    break
                if killed_for == "timeout":
                    cause = f"no result within {timeout_s:.0f} s"
                    status = "timeout"
                elif returncode == 0:
                    cause, status = "worker ended without a result for this workload", "crash"
                else:
                    status, cause = worker.exit_cause(returncode)
                logs.append(f"{log.rstrip()}\n--- {status}: {cause}")
            finally:
                worker.close()
            victim = current or remaining[0]
            record(WorkloadResult(uuid=victim, status=status, detail=cause))
            remaining = [u for u in remaining if u != victim]
            if status == "rejected" or (deadline and time.monotonic() > deadline):
                for uuid in remaining:
                    results[uuid] = WorkloadResult(uuid=uuid, status=status, detail=cause)
                remaining = []
            restarts += 1
    return EvalResult(results=[results[u] for u in all_uuids], restarts=restarts, log_tail=_join_logs(logs))


def _join_logs(logs: list[str]) -> str:
    """The tail of every worker's log, oldest first; one worker's log as it is."""
    if len(logs) <= 1:
        return logs[0] if logs else ""
    return "\n".join(f"=== worker {i} ===\n{log}" for i, log in enumerate(logs))[-4 * LOG_TAIL_CHARS:]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# ----------------------------------------------------------------------------- the worker side


def _emit(progress: Path, event: dict) -> None:
    append_journal(progress, event)


def worker_main(request_path: str, progress_path: str) -> int:
    request = EvalRequest(**json.loads(Path(request_path).read_text()))
    progress = Path(progress_path)
    from evoteam import hardware

    hw = hardware.load_spec(request.hardware)
    os.environ.update(hw.env)  # before Triton is imported (the interpreter on CPU)

    from evoteam.evaluate import evaluate_in_process

    for result in evaluate_in_process(request, hw, on_start=lambda uuid: _emit(progress, {"event": "start",
                                                                                         "uuid": uuid})):
        _emit(progress, {"event": "result", **result.to_json()})
        if result.status == "out_of_memory":
            return 3  # a fresh process gets a clean device for the workloads that are left
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1], sys.argv[2]))
