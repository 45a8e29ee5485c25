"""Run the red-team suite (tests/redteam/cases.py) through the real harness and print its table.

    python tests/redteam/run.py [--hardware auto|cpu|h200] [--only NAME ...] [--json OUT.json]

Each case is evaluated like a team's candidate (`evoteam.harness.executor.evaluate`, static scan OFF:
the suite tests what holds without it) on two MLA workloads, then judged: caught, or LEAK. The host's
side of every escape is checked here (files written, connections accepted, processes left running).
Exit status 0 only when every case is caught. CI runs the CPU cases (tests/test_redteam.py); on a GPU
host, scripts/gpu_integrity_report.sh OUT redteam runs the GPU's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(HERE)]

from cases import CASES, SLOW, WORKLOADS, Case, cases_for  # noqa: E402

from evoteam import hardware  # noqa: E402
from evoteam.harness.executor import evaluate  # noqa: E402
from evoteam.harness.model import EvalRequest, Status  # noqa: E402
from evoteam.task import load_task, select_workloads  # noqa: E402


class Listener:
    """A TCP listener on this machine's loopback that counts the connections it accepts."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        self.server.close()


@dataclass
class Context:
    hw: object
    scale: str
    uuids: list[str]
    delay_s: float
    workdir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(6))
    listener: Listener = field(default_factory=Listener)
    control_baseline_ms: list[float | None] | None = None  # the baseline's time beside an honest candidate
    control_candidate_ms: list[float | None] | None = None  # the honest candidate's own time, as its clock counted it

    @property
    def secret_file(self) -> Path:
        return self.workdir / "other-agent" / "notes.txt"

    @property
    def cache_file(self) -> Path:
        root = os.environ.get("EVOTEAM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "evoteam")
        return Path(root) / "baseline_timings.jsonl"

    def close(self):
        self.listener.close()


def make_context(hardware_name: str = "auto", workdir: Path | None = None) -> Context:
    hw = hardware.resolve(hardware_name)
    scale = hw.problem_scale
    task = load_task("mla_decode")
    uuids = [w.uuid for w in select_workloads(task.scaled_workloads(scale), list(WORKLOADS))]
    workdir = workdir or Path(tempfile.mkdtemp(prefix="redteam-"))
    # the honest path's deliberate cost per call: on a CPU a sleep of 30 ms, 100 times an honest call's work at the
    # small scale (0.1 s made each case 20 s, mostly asleep; at 30 ms 12 s, every verdict the same, 2026-12-05)
    ctx = Context(hw=hw, scale=scale, uuids=uuids, delay_s=0.002 if hw.is_gpu else 0.03, workdir=workdir)
    ctx.secret_file.parent.mkdir(parents=True, exist_ok=True)
    ctx.secret_file.write_text("secret notes of another agent\n")
    return ctx


@dataclass
class Row:
    case: str
    cls: str
    expect: str
    statuses: list[str]
    candidate_ms: list[float | None]
    evidence: str
    caught: bool
    why: str
    log: str = ""  # the evaluation's log tail where the case was not caught (the runners' logs among it)
    speedups: list[float | None] = field(default_factory=list)  # per workload, where one was measured
    modes: list[str] = field(default_factory=list)  # per workload, the timing mode that produced the time
    second: list[float | None] = field(default_factory=list)  # per workload, the other mode's speedup (GPU controls)

    def line(self) -> str:
        times = ", ".join("-" if t is None else f"{t:.3g}" for t in self.candidate_ms)
        return (f"{self.case:<30} {self.cls:<19} {self.expect:<8} {'/'.join(self.statuses):<32} {times:<18} "
                f"{'caught' if self.caught else 'LEAK':<7} {self.why}")


def _escape_traces(case: Case, ctx: Context, accepted_before: int, log: str) -> list[str]:
    traces = []
    marker = f"redteam-{ctx.token}"
    if "secret_read" in case.evidence and f"{marker} read " in log:
        traces.append(f"read {ctx.secret_file} (its runner's log says so)")
    if "connections" in case.evidence and ctx.listener.accepted > accepted_before:
        traces.append(f"{ctx.listener.accepted - accepted_before} connection(s) reached the host")
    if "written_files" in case.evidence:
        for folder in (REPO, Path.cwd(), Path("/tmp"), Path.home(), Path("/"), Path("/var/tmp"), Path("/dev/shm"),
                       ctx.cache_file.parent):
            if (folder / marker).exists():
                traces.append(f"wrote {folder / marker}")
                (folder / marker).unlink()
    if "package_files" in case.evidence:
        for path in (REPO / "evoteam").rglob(f"*redteam_{ctx.token}*"):
            traces.append(f"wrote {path}")
            path.unlink()
    if "cache_file" in case.evidence and ctx.cache_file.is_file() and "1e6" in ctx.cache_file.read_text().replace(
            "1000000.0", "1e6"):
        traces.append(f"forged a line in {ctx.cache_file}")
    if "processes" in case.evidence:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="ignore")
            except OSError:
                continue
            if marker in cmdline:
                traces.append(f"process {proc.name} ({cmdline.split(chr(0))[0]}) outlived the evaluation")
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except OSError:
                    pass
    return traces


# A baseline timed beside a cheat more than this much slower than beside an honest candidate (the geometric mean
# over the workloads: one CPU workload's baseline alone varied 1.5x between honest evaluations in CI) was slowed
BASELINE_SLOWED = 1.5
HONEST = Case("honest_control", "control", "the honest path with its deliberate cost", "no_gain", f"    {SLOW}")


def _candidate(case: Case, ctx: Context) -> Path:
    """The case's candidate file: a repository kernel as it is, a value-returning solution JSON, or a Python file."""
    if case.file:
        return REPO / case.file
    source = case.source(ctx.delay_s, ctx.token, ctx.listener.port, str(ctx.secret_file), str(ctx.cache_file))
    if not case.returns:
        path = ctx.workdir / f"{case.name}.py"
        path.write_text(source)
        return path
    path = ctx.workdir / f"{case.name}.json"
    task = load_task("mla_decode")
    path.write_text(json.dumps({
        "name": case.name, "definition": task.definition.name, "author": "redteam",
        "spec": {"language": "python", "target_hardware": [ctx.hw.name], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": source}]}))
    return path


def _uuids(case: Case, ctx: Context) -> list[str]:
    if ctx.hw.is_gpu and case.gpu_workloads:
        task = load_task("mla_decode")
        return [w.uuid for w in select_workloads(task.scaled_workloads(ctx.scale), list(case.gpu_workloads))]
    return ctx.uuids


def _evaluate(case: Case, ctx: Context, reps: int | None):
    path = _candidate(case, ctx)
    request = EvalRequest(task="mla_decode", hardware=ctx.hw.name, solution=str(path), workloads=_uuids(case, ctx),
                          scale=ctx.scale, warmup=1, reps=reps or (10 if ctx.hw.is_gpu else 3), static_scan=False,
                          # an honest control is timed in both GPU modes (graph, and events beside it)
                          second_figure=case.expect == "pass", workload_timeout_s=case.timeout_s,
                          memory_limit_gib=8 if ctx.hw.is_gpu else 4, disk_limit_gib=1)
    return evaluate(request)


def _control(ctx: Context, reps: int | None) -> None:
    """The honest control evaluated once per context: its baseline's times and its own, by workload."""
    if ctx.control_baseline_ms is None:
        results = _evaluate(HONEST, ctx, reps).results
        ctx.control_baseline_ms = [r.baseline_ms for r in results]
        ctx.control_candidate_ms = [r.candidate_ms for r in results]


def _won(case: Case, results, ctx: Context, reps: int | None) -> list[bool]:
    """The workloads a case PASSED under half its honest cost. The honest cost is the deliberate delay where the clock
    counts it (a GPU's clocks; the host clock). CPU time does not count a wait (the delay is time.sleep there), so
    under it the honest cost is the honest control's own time as CPU time counted it: a cheat that skips the delay
    gains nothing that clock sees, and one that skips work shows under it. (Half the delay was the bar under CPU time
    too, where every honest path is under it: the case then passed only while the clock's cpu_idle flag caught the
    wait, and a loaded machine's noisy protocol-alone wall hid 30 ms of sleep beside 11 ms of CPU once in CI.) The same
    bar holds for an escape case, whose gain is the skipped delay too (escape_network's honest path, 13.2 ms of CPU
    beside a 30 ms sleep the flag missed, was once called a leak): its escape shows on the host on every clock (the
    connections, files and processes it left, what its runner logged), which `_escape_traces` reads."""
    won = [r.status is Status.PASSED and r.candidate_ms is not None and r.candidate_ms < 500 * ctx.delay_s
           for r in results]
    cputime = [(r.timing_mode or "").split(" ")[0] == "cputime" for r in results]
    if case.expect not in ("no_gain", "escape") or not any(w and c for w, c in zip(won, cputime)):
        return won
    _control(ctx, reps)
    return [w and (not c or honest is None or r.candidate_ms < 0.5 * honest)
            for w, c, r, honest in zip(won, cputime, results, ctx.control_candidate_ms)]


def _slowed_baseline(results, ctx: Context, reps: int | None) -> tuple[list[str], str]:
    """Traces of a baseline slowed past BASELINE_SLOWED, and the ratios either way (a slowdown under the
    threshold is still worth seeing)."""
    _control(ctx, reps)
    ratios = [r.baseline_ms / control for r, control in zip(results, ctx.control_baseline_ms)
              if r.status is Status.PASSED and r.baseline_ms and control]
    each = ", ".join(f"{x:.2f}x" for x in ratios) or "-"
    if ratios and math.prod(ratios) ** (1 / len(ratios)) > BASELINE_SLOWED:
        return [f"the baseline took {each} its time beside an honest candidate"], ""
    return [], f"the baseline at {each} its time beside an honest candidate"


def run_case(case: Case, ctx: Context, reps: int | None = None) -> Row:
    accepted_before = ctx.listener.accepted
    outcome = _evaluate(case, ctx, reps)
    time.sleep(0.5)  # a process that escaped would still be there
    results = outcome.results
    statuses = [str(r.status) for r in results]
    times = [r.candidate_ms for r in results]
    won = _won(case, results, ctx, reps)
    timing = "/".join(sorted({r.timing_mode.split(" ")[0] for r in results if r.timing_mode}))
    traces = _escape_traces(case, ctx, accepted_before, outcome.log_tail) if case.evidence else []
    baseline_note = ""
    if "baseline_time" in case.evidence:
        slowed, baseline_note = _slowed_baseline(results, ctx, reps)
        traces += slowed
    if case.expect == "pass":
        caught = all(r.status is Status.PASSED and r.candidate_ms is not None and r.speedup for r in results)
        why = ("every workload PASSED with a time" if caught else
               "an honest candidate was not PASSED with a time: " + "; ".join(r.detail[:160] for r in results
                                                                           if r.status is not Status.PASSED))
    elif case.expect == "fail":
        caught = all(r.status is not Status.PASSED for r in results)
        why = "every workload failed or was flagged" if caught else "a workload passed"
    elif case.expect == "fault":
        caught = statuses[0] in case.statuses and results[1].status is Status.PASSED
        why = (f"the fault stayed with its workload ({statuses[0]}); the next passed" if caught else
               f"expected {'/'.join(case.statuses)} then PASSED")
    else:
        caught = not any(won) and not traces
        why = "; ".join(traces) if traces else ("timed at or above its honest cost, or failed" if caught else
                                                f"PASSED under its honest cost ({ctx.delay_s * 1e3:g} ms)")
        why += f" ({baseline_note})" if baseline_note and not traces else ""
    if timing:
        why += f" [{timing}]"
    return Row(case.name, case.cls, case.expect, statuses, times, "; ".join(traces) or "-", caught, why,
               "" if caught else outcome.log_tail[-6000:], [r.speedup for r in results],
               [r.timing_mode for r in results],
               [r.second["baseline_ms"] / r.second["candidate_ms"] if r.second.get("candidate_ms") else None
                for r in results])


def table(rows: list[Row]) -> str:
    head = (f"{'case':<30} {'class':<19} {'expect':<8} {'statuses':<32} {'candidate ms':<18} {'verdict':<7} why")
    caught = sum(r.caught for r in rows)
    classes = sorted({r.cls for r in rows})
    return "\n".join([head, "-" * len(head), *(r.line() for r in rows),
                      f"{caught}/{len(rows)} caught across {len(classes)} classes ({', '.join(classes)})"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="auto")
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--first", nargs="*", default=[], help="these cases first, in this order, then the others")
    p.add_argument("--json", type=Path)
    p.add_argument("--reps", type=int)
    p.add_argument("--part", help="K/N: the controls, the --first cases, and of the others every N-th from the K-th "
                                  "(0-based): a rotating part of the suite where time is short (scripts/gpu_check.sh)")
    args = p.parse_args(argv)
    ctx = make_context(args.hardware)
    device = "cuda" if ctx.hw.is_gpu else "cpu"
    available = {c.name: c for c in cases_for(device)}
    cases = [available[name] for name in args.only if name in available] if args.only else list(available.values())
    if args.part:
        k, n = (int(v) for v in args.part.split("/"))
        others = [c for c in cases if c.expect != "pass"]
        chosen = {c.name for i, c in enumerate(others) if i % n == k}
        cases = [c for c in cases if c.expect == "pass" or c.name in chosen or c.name in args.first]
    cases = [c for name in args.first for c in cases if c.name == name] + [c for c in cases if c.name not in args.first]
    unknown = (set(args.only) | set(args.first)) - {c.name for c in CASES}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    print(f"red team: {len(cases)} cases on {ctx.hw.name} ({ctx.scale} scale, workloads "
          f"{', '.join(u[:8] for u in ctx.uuids)}; honest cost {ctx.delay_s * 1e3:g} ms per call)", flush=True)
    rows = []
    try:
        for case in cases:
            t0 = time.monotonic()
            row = run_case(case, ctx, args.reps)
            rows.append(row)
            print(f"{row.line()}  [{time.monotonic() - t0:.0f} s]", flush=True)
            if args.json:  # after every case: a run cut short keeps what it found
                args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    finally:
        ctx.close()
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0 if all(r.caught for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
