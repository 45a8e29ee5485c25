"""The harness's data model, in one place: what an evaluation is asked to do, and what it found.

An evaluation (`EvalRequest`) runs one candidate on a task's workloads; it yields one
`WorkloadResult` per workload and an `EvalResult` for the whole. Every result carries a `Status`
(PASSED or the first failure), the timing mode that produced its figures, and the sandbox it ran in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum

from evoteam.errors import UserError


class Status(str, Enum):
    """The verdict of one workload. Only PASSED counts; every other value is a failure."""

    PASSED = "PASSED"
    REJECTED = "rejected"  # the static scan refused the source before anything ran
    COMPILE_ERROR = "compile_error"  # the candidate does not load (syntax, import, no entry point)
    EXCEPTION = "exception"  # the candidate raised
    # an output tensor object was re-pointed or resized; a value-returning solution returned an output of the wrong
    # shape (flashinfer-bench's INCORRECT_SHAPE; what it returned in a form flashinfer-bench does not take, a dict or
    # a wrong count, is an exception, its RUNTIME_ERROR)
    OUTPUT_REPLACED = "output_replaced"
    OUTPUT_DTYPE = "output_dtype"  # a value-returning solution returned an output of the wrong dtype (INCORRECT_DTYPE)
    INPUT_MODIFIED = "input_modified"  # an input differs, bit for bit, from what was given
    UNWRITTEN = "unwritten"  # an output element still holds the poison pattern
    NAN_INF = "nan_inf"  # NaN or Inf where the reference has a finite value
    MISMATCH = "mismatch"  # |out - ref| > atol and > rtol * (|ref| + 1e-8)
    REL_NORM = "rel_norm"  # relative L2 error over the bound
    SKIPPED_WORK = "skipped_work"  # a timed call's output is wrong, or was written after the end mark
    TIMEOUT = "timeout"  # no answer within the time limit; the sandbox was killed
    CRASH = "crash"  # the runner died (segfault, illegal memory access, exit)
    OUT_OF_MEMORY = "out_of_memory"  # host or device memory exhausted
    FLAGGED = "flagged_cheat"  # correct, but a rule says the time cannot be trusted: not counted
    HARNESS_ERROR = "harness_error"  # the harness could not evaluate this workload (not the candidate's fault)

    def __str__(self) -> str:
        return self.value

    @property
    def passed(self) -> bool:
        return self is Status.PASSED


# Checker verdicts in the order they are decided (the first failing one is reported).
CHECK_ORDER = (Status.EXCEPTION, Status.OUTPUT_REPLACED, Status.OUTPUT_DTYPE, Status.INPUT_MODIFIED, Status.UNWRITTEN, Status.NAN_INF,
               Status.MISMATCH, Status.REL_NORM)


class TimingMode(str, Enum):
    """How the judge times a call. Every figure names the mode that produced it.

    graph      device time: the calls captured in a CUDA graph and enqueued before the clock starts,
               behind a release word the judge sets; the clock stops when the judge has a sampled
               copy of the last call's outputs (GPU only; the default there)
    events     per call, launched by the runner's host only after the release: the host's launch
               cost is inside the time (GPU)
    wallclock  the host clock around one call (both sides of a GPU comparison whose baseline does host
               work per call, such as FlashInfer's plan(); a CPU runner without a cgroup of its own)
    cputime    CPUs: the CPU time the runner's cgroup used over one call (the kernel's accounting, every
               process and thread of the runner), both sides single-threaded: what the work costs,
               unbent by other load on the machine, on one CPU (a cpuset); the speedup is the median of
               per-round ratios. Not a GPU's performance: CPU figures test the flow.
    """

    graph = "graph"
    events = "events"
    wallclock = "wallclock"
    cputime = "cputime"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def on(cls, requested: str, is_gpu: bool) -> str:
        """The mode a target uses for a requested one: a CPU is always timed by CPU time."""
        mode = cls(requested)
        if not is_gpu:
            return cls.cputime.value
        if mode is cls.cputime:
            raise UserError("timing mode cputime is a CPU's; on a GPU use graph (default), events or wallclock")
        return mode.value


TIMING_MODES = tuple(m.value for m in TimingMode)

# (warm-up, timed) rounds on a CPU, where the Triton interpreter makes each call slow
CPU_ROUNDS = (1, 15)


@dataclass
class EvalRequest:
    task: str
    hardware: str  # spec sheet name (already resolved by the caller)
    solution: str  # path of the candidate's Python file
    entry: str = "run"
    workloads: list[str] = field(default_factory=list)  # uuids; empty means every workload at the scale
    scale: str = "full"
    trials: int = 3  # correctness trials before any timing
    # None: a fresh secret per evaluation, never shown to the candidate (recorded in the result
    # afterwards). A number makes the inputs reproducible and is recorded as not secret.
    seed: int | None = None
    timing_mode: str = TimingMode.graph.value  # graph or events on a GPU; CPUs always use wallclock
    second_figure: bool = True  # on a GPU, also time in the other mode (fewer rounds): a named second figure
    baseline: str = "auto"
    baseline_options: dict = field(default_factory=dict)
    warmup: int = 1  # untimed rounds (a GPU side replays its captured graph once before its times count)
    # timed rounds, at most on a GPU (they stop once the figures are settled: judge.GPU_MIN_REPS, GPU_CI_WIDTH); each
    # round times the baseline, the candidate twice, and the protocol alone
    reps: int = 30
    check_only: bool = False
    # judge every output by flashinfer-bench's rule exactly (atol = rtol = 1e-2, no relative-norm bound, any NaN or
    # Inf fails: check.py), so the verdict is flashinfer-bench's; else evoteam's (tolerance.py, the task's overrides).
    # Either way flashinfer-bench's verdict on the compared outputs is recorded too (WorkloadResult.fib)
    fib_rule: bool = False
    use_baseline_cache: bool = False  # take the baseline's time from the cache where it has one
    static_scan: bool = True  # the first, fast filter; no guarantee depends on it
    sandbox: str = "strict"  # strict: refuse where a sandbox layer is missing; weak: run, and record what is missing
    workload_timeout_s: float = 600.0  # one workload's limit (compilation included); the sandbox is killed after it
    memory_limit_gib: float = 32.0  # the runner's host memory (cgroup)
    process_limit: int = 512  # the runner's processes and threads (cgroup)
    disk_limit_gib: float = 16.0  # what the runner may write to its scratch and compiled-kernel folders


@dataclass
class WorkloadResult:
    uuid: str
    status: Status
    detail: str = ""
    baseline: str = ""
    timing_mode: str = ""
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    candidate_repeat_ms: float | None = None  # the same candidate timed again in the same rounds: noise
    spread: dict = field(default_factory=dict)  # p10/p90 per timed side
    second: dict = field(default_factory=dict)  # the other mode's figures (baseline_ms, candidate_ms, mode)
    runner_ms: float | None = None  # the candidate's own device-event time of the same calls (not trusted)
    floor_ms: float | None = None  # compulsory bytes / peak bandwidth
    bandwidth_tbs: float | None = None  # compulsory bytes / candidate time
    flags: list[str] = field(default_factory=list)  # findings that stop the time from counting
    kernels: list[str] = field(default_factory=list)  # kernel names the candidate launched (as it reported)
    correctness: dict = field(default_factory=dict)
    # the pass rule the outputs were judged by, as traces record it (check.rule_record): {"rule": "evoteam",
    # "tolerances": {output: {atol, rtol, max_rel_norm}}} or {"rule": "flashinfer-bench", "atol", "rtol"}
    rule: dict = field(default_factory=dict)
    # flashinfer-bench's verdict on every output element the judge compared (check.fib_verdict), whichever rule judged
    # them: {"status": "PASSED" | "INCORRECT_NUMERICAL", "elements_failed", "max_absolute_error",
    # "max_relative_error", "atol", "rtol"}; empty where no output was compared
    fib: dict = field(default_factory=dict)
    calls_checked: int = 0  # calls whose every output element was compared with the reference
    calls_timed: int = 0
    device: str = ""  # the device it ran on, named as flashinfer-bench names it ("NVIDIA H200", a CPU's model)
    # CPU targets: the median over rounds of baseline / candidate within each round (the two sides timed
    # moments apart), the speedup reported there; the machine's slow and fast spells then cancel.
    paired_speedup: float | None = None
    # the speedup's 95% interval: the order statistics around the median of the per-round ratios baseline / candidate
    speedup_low: float | None = None
    speedup_high: float | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def speedup(self) -> float | None:
        if self.status is not Status.PASSED or not self.baseline_ms or not self.candidate_ms:
            return None
        return self.paired_speedup or self.baseline_ms / self.candidate_ms

    @property
    def noise(self) -> float | None:
        """Relative difference between the two measurements of the same candidate."""
        if not self.candidate_ms or not self.candidate_repeat_ms:
            return None
        return abs(self.candidate_ms - self.candidate_repeat_ms) / min(self.candidate_ms, self.candidate_repeat_ms)

    def to_json(self) -> dict:
        out = asdict(self)
        out["status"] = self.status.value
        return {**out, "speedup": self.speedup, "noise": self.noise}

    @classmethod
    def from_json(cls, obj: dict) -> WorkloadResult:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in obj.items() if k in names})


@dataclass(frozen=True)
class Placement:
    """Where an evaluation ran and its wall-clock times (time.time()): queue_s is its wait for a free device."""

    executor: str  # local, docker or ray
    submitted: float
    started: float
    ended: float
    gpu: str | None = None  # the device id(s) it had, as CUDA_VISIBLE_DEVICES names them
    node: str | None = None  # the Ray node
    pid: int | None = None  # the process that ran its judge's executor (Ray's worker)

    @property
    def queue_s(self) -> float:
        return round(max(0.0, self.started - self.submitted), 3)

    def to_json(self) -> dict:
        return {**asdict(self), "queue_s": self.queue_s}

    @classmethod
    def from_json(cls, obj: dict | None) -> Placement | None:
        if not obj or "submitted" not in obj:
            return None
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in obj.items() if k in names})


@dataclass
class EvalResult:
    results: list[WorkloadResult]
    restarts: int = 0  # runners replaced after a crash, an out-of-memory or a timeout
    log_tail: str = ""
    sandbox: dict = field(default_factory=dict)  # what the runner ran in (tool, namespaces, limits, mode)
    seed: int | None = None  # revealed after the evaluation; reproduces its inputs
    seed_secret: bool = True  # False when the caller chose the seed
    placement: Placement | None = None  # where it ran and when; None for a plain evaluate()
    # Where the evaluation's wall time went, seconds by phase (the judge's, and the executor's around it): they sum
    # to the evaluation's wall time
    phases: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"results": [r.to_json() for r in self.results], "restarts": self.restarts,
                "log_tail": self.log_tail, "sandbox": self.sandbox, "seed": self.seed,
                "seed_secret": self.seed_secret,
                "placement": self.placement.to_json() if self.placement else {}, "phases": self.phases}

    @classmethod
    def from_json(cls, obj: dict) -> EvalResult:
        return cls(results=[WorkloadResult.from_json(r) for r in obj["results"]], restarts=obj.get("restarts", 0),
                   log_tail=obj.get("log_tail", ""), sandbox=obj.get("sandbox", {}), seed=obj.get("seed"),
                   seed_secret=obj.get("seed_secret", True), placement=Placement.from_json(obj.get("placement")),
                   phases=obj.get("phases", {}))

    @classmethod
    def merged(cls, pieces: list[EvalResult], order: list[str]) -> EvalResult:
        """One evaluation's pieces (disjoint workloads, each its own judge) as one result, in `order`. Each
        workload's inputs come from its piece's seed: one seed stands for the whole only when all agree."""
        if len(pieces) <= 1:
            return pieces[0] if pieces else cls(results=[])
        by_uuid = {r.uuid: r for piece in pieces for r in piece.results}
        seeds = {piece.seed for piece in pieces}
        tails = [f"=== piece {i} ({len(p.results)} workloads, seed {p.seed}) ===\n{p.log_tail}" for i, p in enumerate(pieces)]
        return cls(results=[by_uuid[u] for u in order], restarts=sum(p.restarts for p in pieces),
                   log_tail="\n".join(tails)[-16000:], sandbox=pieces[0].sandbox,
                   seed=seeds.pop() if len(seeds) == 1 else None,
                   seed_secret=any(p.seed_secret for p in pieces), placement=pieces[-1].placement,
                   phases=add_phases(p.phases for p in pieces))


def add_phases(tables) -> dict:
    """Phase tables (seconds by phase) added up."""
    out: dict = {}
    for table in tables:
        for name, seconds in table.items():
            out[name] = out.get(name, 0.0) + seconds
    return out


def geomean(values) -> float | None:
    """The geometric mean of the positive numbers among values (None and 0 are left out); None for none.
    The one definition of the platform's headline figure."""
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
