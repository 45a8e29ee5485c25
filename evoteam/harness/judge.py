"""The judge: the trusted process of one evaluation. It owns everything a verdict or a time depends on
(the task, the reference, the inputs and the copies it checks against, the clock, the baseline's
runner) and gives the candidate's runner, in its sandbox, nothing but buffers to read and write.

Per workload:
1. Checks. `trials` calls, each on fresh inputs drawn from the judge's secret, every output element
   compared with the reference and every input bit with the judge's copy.
2. Timing. Rounds of four batches, in an order drawn afresh each round (evoteam.harness.rounds): the protocol alone
   (`null`, by the trusted runner), the baseline, the candidate twice (which of the two is the speedup's and which the
   noise's is decided by a coin after the round). A batch is G calls on G input sets, fresh for every batch, chained
   (call k+1's chained input is call k's output). One batch is one interval (evoteam.harness.interval): the runner
   frozen while its inputs are written and the caches flushed, its calls released, the clock stopped after a sample
   of the outputs, the runner frozen again from its answer on. Time per call = batch / G - null / its G, median over
   the rounds. Everything that is a timing mode's (which clock, calls per batch, how many rounds, when the figures
   are settled, what the samples make, the figure beside it) is its clock's (evoteam.harness.timing): this module
   names no mode. Nothing of the judge's uses the GPU's multiprocessors inside the interval: a context switch costs
   ~150 us on an H200 and would swamp small kernels. Before a trusted side's batch on a GPU the judge waits until no
   other work runs there (the candidate's, left behind: flagged if it does not end).
3. After every candidate batch: outputs written after the end mark, unwritten outputs, inputs
   changed, and the full check of calls picked at random by the judge (all of them where the
   reference is cheap) fail the workload.
4. Flags (correct, but the time is not counted): a time at or below the protocol's own, faster than the physical
   floor, the runner's own device time disagreeing with the judge's, baseline kernels seen in the candidate's
   profile, GPU work of the candidate's that kept running while a trusted side was to be timed.
A fault (crash, illegal memory access, out of memory, hang) fails the workload it happened in; the
next workload gets a fresh runner and a clean GPU context.

    python -m evoteam.harness.judge REQUEST.json PROGRESS.jsonl    (started by evoteam.harness.executor)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from evoteam.errors import EXIT_BAD_INPUT, UserError
from evoteam.hardware import HardwareSpec
from evoteam.harness import cache_flush, interval, rounds, scan, scratch, timing
from evoteam.harness.baseline_cache import BaselineCache, Key, hardware_fingerprint
from evoteam.harness.calls import CallSets
from evoteam.harness.candidate import Candidate, CandidateError
from evoteam.harness.check import CheckResult, OutputError, fib_verdict, rule_record
from evoteam.harness.gpu_ops import cuda_ops
from evoteam.harness.model import EvalRequest, EvalResult, Status, WorkloadResult
from evoteam.harness.runners import RunnerFault, RunnerHandle, claimed_failure
from evoteam.harness.sandbox import SandboxSpec
from evoteam.schema import append_journal
from evoteam.task import load_task

# where the timing phase's time goes, logged with the phases (judge time by phase): the inputs refreshed or
# poisoned before each batch, the batches through the protocol (timed intervals and their waits), the checks of
# timed calls' outputs and inputs, freezing and thawing the candidate around the trusted sides, the baseline's
# runner and input sets made ready (on a CPU, its batch sized), the runner's own report and the flags
SUB_INPUTS, SUB_BATCHES, SUB_VERIFY, SUB_FREEZE = ("timing: inputs", "timing: batches", "timing: checks of timed calls",
                                                   "timing: freezing")
SUB_BASELINE, SUB_FLAGS = "timing: baseline setup", "timing: report and flags"
SUB_OTHER = "timing: other"
SUB_FLUSH = "timing: cache flush (CPU)"  # what a CPU target's fill before every interval costs
# the phases outside the workloads: the judge's process until its first workload (imports, the GPU context, the
# flush buffer), each workload's end (its buffers unbound and freed), the runners closed at the end; whatever is in
# no phase is "judge: other", so that the judge's phases sum to its process's life
PHASE_START, PHASE_UNBIND, PHASE_END, PHASE_OTHER = ("judge start", "workload end (buffers freed)",
                                                     "judge end (runners closed)", "judge: other")
SECOND_FIGURE_ROUNDS = 8
DISAGREE_REL, DISAGREE_ABS_MS = 0.25, 0.002  # judge vs runner device time, per call
LOAD_TIMEOUT_S = 600.0
GPU_HOST_THREADS = 8
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "TORCH_NUM_THREADS")
# Before a trusted side's batch on a GPU, the judge's own flush must take no longer than QUIET_FACTOR times its time
# on an idle GPU plus QUIET_SLACK_US (a switch from another context's idle one included), else other work is running
# there: the candidate's, left behind while it is frozen. Retried for QUIET_LIMIT_S (queued work drains), then the
# workload is flagged.
QUIET_FACTOR, QUIET_SLACK_US, QUIET_LIMIT_S = 4.0, 700.0, 0.5


class GpuBusy(Exception):
    """Another context's work kept running on the GPU when a trusted side was to be timed."""


class CandidateUnusable(Exception):
    """The candidate fails before any workload (rejected or does not load): every workload gets it."""

    def __init__(self, status: Status, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def derive(secret: int, *parts: object) -> int:
    """A 63-bit seed from the evaluation's secret and a purpose (unpredictable without the secret)."""
    text = ":".join([str(secret), *map(str, parts)]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & ((1 << 63) - 1)


def baseline_check_factor(name: str) -> float:
    """How widely the judge checks this baseline's own output element-wise (its adapter's `own_check_factor`),
    read here from the adapter's class, not from the baseline runner."""
    from evoteam.harness import baselines

    adapter = baselines.ADAPTERS.get(name)
    return float(adapter.own_check_factor) if adapter is not None else 1.0


class Judge:
    def __init__(self, request: EvalRequest, hw: HardwareSpec, on_start=lambda uuid: None,
                 on_result=lambda result: None):
        self.request, self.hw = request, hw
        self.on_start, self.on_result = on_start, on_result
        self.task = load_task(request.task)
        self.rule = rule_record(self.task, request.fib_rule)  # what every result records it was judged by
        self.device = "cuda:0" if hw.is_gpu else "cpu"
        self.secret = request.seed if request.seed is not None else secrets.randbits(63)
        self.workdir = scratch.make("judge")
        self.cache_root = Path(os.environ.get("EVOTEAM_CACHE_DIR")
                               or os.path.join(os.path.expanduser("~"), ".cache", "evoteam"))
        self.candidate: RunnerHandle | None = None
        self.baseline: RunnerHandle | None = None
        self.baseline_info: dict = {}
        self.baseline_note = ""
        self.restarts = 0
        self.compared: dict[str, OutputError] = {}
        self.batch_no = 0
        self.sandbox_record: dict = {}
        self.logs: list[str] = []
        self.kernel_names: list[str] | None = None
        self.own_kernels: list[str] = []
        self.cache = BaselineCache()
        self.phase_s: dict[str, float] = {}  # where the evaluation's time went (logged at the end)
        # Written before every timed call: a GPU's L2 (twice its size), a CPU's last-level cache (twice).
        # A CPU target times on one CPU: the judge's flush and both runners' calls all run there (a cpuset
        # holds the runners), so no call finds its data in another core's private cache. Unpinned, the same
        # kernel measured 1.06x in one CI run and 1.45x in another; pinned, within 4% under a busy neighbour.
        self.cpus: frozenset[int] | None = None  # CPU targets: the CPU this evaluation times on (during run())
        # and the CPUs the runners start on (the judge's own set): two runners importing PyTorch on one CPU took twice
        # as long; each is held to `cpus` as it greets the judge, before any candidate code is loaded (_greeted)
        self.start_cpus: frozenset[int] | None = None
        self.cpu_lock = None  # and the lock that holds it for this evaluation
        self.flusher = None
        self.device_name = ""
        # the checks' calls, and the CPU's batch probe: one call an interval, launched by the runner's host
        self.check_clock = timing.for_checks(hw.is_gpu)
        self.baseline_loaded = True  # False once the baseline's runner said it cannot load it
        self.spawned: list[RunnerHandle] = []  # every runner this judge started

    def _init_device(self) -> None:
        """The judge's GPU context, flush buffer and idle flush time (once; while the runners start)."""
        if self.device_name:
            return
        self.device_name = _device_name(self.device)
        if self.hw.is_gpu:
            torch.cuda.init()
            torch.empty(1, device=self.device)
            from evoteam.harness import cudadrv

            cudadrv.ensure_context(0)
            l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (64 << 20))
            self.flusher = torch.empty(2 * l2, dtype=torch.uint8, device=self.device)
            self.idle_flush_us = timing.median([self._flush_us() for _ in range(10)])  # with no other work on the GPU

    # ------------------------------------------------------------------ the evaluation
    def run(self) -> EvalResult:
        request, task = self.request, self.task
        workloads = {w.uuid: w for w in task.scaled_workloads(request.scale)}
        uuids = request.workloads or list(workloads)
        unknown = [u for u in uuids if u not in workloads]
        if unknown:
            raise ValueError(f"workloads not in task {task.name} at scale {request.scale}: {unknown}")
        results: list[WorkloadResult] = []
        unusable: CandidateUnusable | None = None
        try:
            self.cand = Candidate.from_path(request.solution, request.entry)
        except CandidateError as exc:
            self.cand, unusable = None, CandidateUnusable(Status.COMPILE_ERROR, str(exc))
        if self.cand is not None and self.cand.language not in self.hw.languages:
            unusable = CandidateUnusable(Status.COMPILE_ERROR, f"{self.hw.name} does not build {self.cand.language} "
                                         f"solutions (its spec sheet's languages: {', '.join(self.hw.languages)})")
        # The scan reads Python (a filter, not the guarantee: C++ and CUDA sources get the same sandbox)
        for name, source in (self.cand.python_sources() if self.cand else {}).items():
            self.own_kernels += scan.jit_function_names(source) if _parses(source) else []
            violations = scan.scan_source(source, name, self.cand.own_modules()) if request.static_scan else []
            if violations and unusable is None:
                unusable = CandidateUnusable(Status.REJECTED, "; ".join(str(v) for v in violations[:5]))
        affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
        try:
            if not self.hw.is_gpu:
                cpu, self.cpu_lock = _claim_cpu()
                self.cpus, self.start_cpus = frozenset({cpu}), frozenset(affinity)
                # This thread flushes on the CPU where the runners run, and the judge's own torch work stays
                # on it (pool threads spinning there beside a runner made an evaluation 6x slower).
                os.sched_setaffinity(0, self.cpus)
                torch.set_num_threads(1)
                # numpy's fill runs on the calling thread alone (torch's would use its thread pool), a slice at a
                # time (cache_flush); its size is what evicts on this machine, measured here (once per machine) on
                # the CPU the evaluation times on
                t = time.perf_counter()
                size, source = cache_flush.flush_bytes()
                self.flusher = cache_flush.CpuFlusher(size)
                self.logs.append(f"CPU cache flush: {size >> 20} MiB before every interval ({source})")
                self._phase(SUB_FLUSH, t)
            if unusable is None:
                t = time.perf_counter()
                from evoteam.harness.sandbox import reap_orphans

                reaped = reap_orphans()  # runners of judges killed before they could end them
                if reaped:
                    self.logs.append(f"ended {reaped} runner(s) left behind by judges that were killed")
                try:
                    self._start_runners()
                except CandidateUnusable as exc:
                    unusable = exc
                self._phase("runner start", t)
            self._init_device()
            for n, uuid in enumerate(uuids):
                self.on_start(uuid)
                if unusable is None:
                    try:
                        result = self._workload(workloads[uuid], n)
                        self._after_workload(result)
                    except CandidateUnusable as exc:
                        unusable = exc
                    except UserError:
                        raise  # the machine or the request, not this workload: one line for the user
                    except Exception as exc:  # noqa: BLE001 - a fault of the harness, not of the candidate
                        import traceback

                        self.logs.append(traceback.format_exc())
                        self._fault(self.candidate)
                        self._fault(self.baseline)
                        result = WorkloadResult(uuid=uuid, status=Status.HARNESS_ERROR,
                                                detail=f"the judge failed on this workload: {type(exc).__name__}: "
                                                       f"{str(exc).splitlines()[0] if str(exc) else ''}")
                if unusable is not None:
                    result = WorkloadResult(uuid=uuid, status=unusable.status, detail=unusable.detail)
                result.device, result.rule = self.device_name, self.rule
                results.append(result)
                self.on_result(result)
        finally:
            t = time.perf_counter()
            self._close_runners()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._phase(PHASE_END, t)
            if self.cpu_lock is not None:
                self.cpu_lock.close()  # the CPU is free for the next evaluation
                self.cpu_lock = None
            os.sched_setaffinity(0, affinity)
            torch.set_num_threads(threads)
        return EvalResult(results=results, restarts=self.restarts, log_tail="\n".join(self.logs)[-16000:],
                          sandbox=self.sandbox_record, seed=self.secret, seed_secret=request.seed is None,
                          phases=dict(self.phase_s))

    def _close_runners(self) -> None:
        for handle in (self.candidate, self.baseline):
            if handle is not None:
                self.logs.append(f"=== {handle.kind} runner ===\n{handle.logs()}")
                handle.close(goodbye=not _ending)  # being ended: no 5 s wait on a runner that does not answer
        for handle in self.spawned:  # one the judge was still starting (a frozen runner does not end on its own)
            if not handle.dead and handle not in (self.candidate, self.baseline):
                handle.close(goodbye=not _ending)
        self.candidate = self.baseline = None
        self.spawned = []

    # ------------------------------------------------------------------ runners
    def threads(self) -> str:
        """Threads of both runners' math libraries, set by the harness whatever the caller's environment
        says (Ray sets OMP_NUM_THREADS in its workers; a sweep under Ray measured 0.012x where the same job
        measured 1.205x outside it): one on a CPU target (threads waiting at a barrier on a busy CPU made one
        side's time swing 7x between runs, and the evaluation holds one CPU), GPU_HOST_THREADS on a GPU host
        (its host threads only launch). Recorded with every result (sandbox.threads)."""
        return "1" if not self.hw.is_gpu else str(min(GPU_HOST_THREADS, os.cpu_count() or 1))

    def _spec(self, trusted: bool, workdir: Path, cache: Path | None, candidate: Path | None) -> SandboxSpec:
        env = dict(self.hw.env)
        # The same thread settings for both sides (the candidate's environment is otherwise empty, the
        # baseline's the judge's): what either gets, the other gets too.
        threads = self.threads()
        env.update({name: threads for name in THREAD_VARIABLES})
        if self.hw.is_gpu:
            env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        # The trusted runner has no memory limit of the candidate's (its library may compile, say). On a CPU target it
        # is forked from this process (evoteam.harness.fork), which imported PyTorch and the harness already: 1.5 s of
        # CPU less per evaluation. A GPU target's judge holds a GPU context by then, which a forked child cannot use.
        # A candidate's runner always starts afresh in its sandbox.
        return SandboxSpec(scratch=workdir, cache=cache, candidate=candidate, device=self.device,
                           memory_bytes=0 if trusted else int(self.request.memory_limit_gib * (1 << 30)),
                           max_pids=self.request.process_limit, env=env, trusted=trusted, mode=self.request.sandbox,
                           cpus=self.cpus, start_cpus=self.start_cpus,
                           disk_bytes=int(self.request.disk_limit_gib * (1 << 30)),
                           fork=trusted and not self.hw.is_gpu)

    def _spawn(self, kind: str) -> RunnerHandle:
        """A runner process in its sandbox, greeted (its answer not yet read: see _greeted)."""
        workdir = self.workdir / f"{kind}-{self.restarts}-{time.monotonic_ns()}"
        workdir.mkdir()
        if kind == "candidate":
            sources = self.cand.write(self.workdir / "candidate")  # seen read-only at /candidate
            cache = self.cache_root / "candidates" / self.cand.digest  # compiled kernels of these sources only
            spec = self._spec(False, workdir, cache, sources)
        else:
            cache = self.cache_root / "baseline"
            spec = self._spec(True, workdir, cache, None)
        assert spec.cache is not None
        spec.cache.mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o777)  # the sandbox's user (65534) writes here; the parent folder is private
        handle = RunnerHandle(kind, spec, workdir)
        self.spawned.append(handle)  # ended with the evaluation, whatever becomes of it
        handle.send({"op": "hello"}, fds=[handle.flags.fd])
        return handle

    def _greeted(self, handle: RunnerHandle) -> RunnerHandle:
        hello = handle.receive(LOAD_TIMEOUT_S)
        handle.freeze()
        handle.process.pin()  # to the evaluation's CPU, before the candidate (or the baseline) is loaded
        if not hello.get("ok"):
            handle.kill()
            raise RunnerFault(Status.CRASH, f"the {handle.kind} runner did not start: {hello.get('detail', '')}")
        return handle

    def _start_runners(self) -> None:
        """Both runners at once, before the first workload: their starts (imports, a GPU context, the baseline
        library) overlap. A failure here is left to the workload that needs the runner, which starts it again and
        records what happens."""
        self._init_device()  # first: a runner's flag page is registered with the judge's GPU context
        cand = self._spawn("candidate")
        base = self._spawn("baseline") if self.request.baseline != "none" else None
        try:
            self._greeted(cand)
            cand.send(self.cand.load_message(self._root(cand)))
            if base is not None:
                self._greeted(base)
                base.send(self._baseline_load())
            self._loaded_candidate(cand)
            if base is not None:
                self._loaded_baseline(base)
        except RunnerFault as fault:
            self.logs.append(f"a runner did not start with the evaluation ({fault.detail}): started again for the "
                             f"first workload")
            for handle in {id(h): h for h in (cand, base) if h is not None}.values():
                handle.kill()
                handle.close()
            self.candidate = self.baseline = None

    def _root(self, handle: RunnerHandle) -> str:
        return "/candidate" if handle.record.get("tool") else str(self.workdir / "candidate")

    def _loaded_candidate(self, handle: RunnerHandle) -> RunnerHandle:
        self.sandbox_record = {**handle.record, "threads": int(self.threads())}
        reply = handle.receive(LOAD_TIMEOUT_S)
        handle.freeze()
        if not reply.get("ok"):
            handle.close()
            raise CandidateUnusable(claimed_failure(reply, Status.COMPILE_ERROR), reply.get("detail", ""))
        self.candidate = handle
        return handle

    def _baseline_load(self) -> dict:
        return {"op": "load", "kind": "baseline", "name": self.request.baseline, "options": self.request.baseline_options,
                "task": self.task.name, "hardware": self.hw.name}

    def _loaded_baseline(self, handle: RunnerHandle) -> RunnerHandle | None:
        reply = handle.receive(LOAD_TIMEOUT_S)
        handle.freeze()
        if not reply.get("ok"):
            self.baseline_note = reply.get("detail", "").splitlines()[0] if reply.get("detail") else "unavailable"
            handle.close()
            self.baseline_loaded = False
            return None
        self.baseline_info = reply
        self.baseline = handle
        return handle

    def _candidate_runner(self) -> RunnerHandle:
        if self.candidate is None:
            handle = self._greeted(self._spawn("candidate"))
            handle.send(self.cand.load_message(self._root(handle)))
            self._loaded_candidate(handle)
        return self.candidate

    def _baseline_runner(self) -> RunnerHandle | None:
        """The trusted runner: the baseline library, and the protocol alone (null batches)."""
        if self.baseline is None and self.baseline_loaded:
            handle = self._greeted(self._spawn("baseline"))
            handle.send(self._baseline_load())
            self._loaded_baseline(handle)
        return self.baseline

    def _after_workload(self, result: WorkloadResult) -> None:
        """A workload that failed may have left its runner in any state (children, threads, memory, a
        damaged GPU context); one that holds much memory would take it from the next workload. Either
        way the next workload gets a fresh runner."""
        handle = self.candidate
        if handle is None:
            return
        if result.status not in (Status.PASSED, Status.FLAGGED):
            self._fault(handle)
            return
        held = handle.process.memory_bytes()
        limit = int(self.request.memory_limit_gib * (1 << 30))
        if held > limit // 2:
            self.logs.append(f"runner replaced after {result.uuid}: it holds {held >> 20} MiB of host memory")
            self._fault(handle)
        elif self.hw.is_gpu:
            free, total = torch.cuda.mem_get_info()
            if free < total // 4:
                self.logs.append(f"runner replaced after {result.uuid}: the GPU has {free >> 20} MiB free")
                self._fault(handle)

    def _fault(self, handle: RunnerHandle | None) -> None:
        if handle is None:
            return
        self.logs.append(f"=== {handle.kind} runner (replaced) ===\n{handle.logs()}")
        handle.close()
        self.restarts += 1
        if handle is self.candidate:
            self.candidate = None
        if handle is self.baseline:
            self.baseline = None

    # ------------------------------------------------------------------ one workload
    def _workload(self, workload, index: int) -> WorkloadResult:
        uuid = workload.uuid
        deadline = time.monotonic() + self.request.workload_timeout_s
        sides: dict[str, CallSets] = {}
        self.compared: dict[str, OutputError] = {}  # every compared output of this workload's calls (_after_call)
        try:
            t = time.perf_counter()
            cand = self._candidate_runner()
            t = self._phase("runner start", t)
            sides["candidate"] = self._call_sets(workload, self._sets_for(workload))
            self._bind(cand, sides["candidate"], deadline)
            t = self._phase("buffers", t)
            check = self._checks(cand, sides["candidate"], workload, index, deadline)
            self._phase("checks", t)
            result = WorkloadResult(uuid=uuid, status=Status.PASSED if check.passed else Status(check.failure.check),
                                    detail=check.summary(), correctness=check.to_correctness().to_json(),
                                    calls_checked=check.trials, fib=fib_verdict(self.compared) if self.compared else {})
            if not check.passed or self.request.check_only:
                return result
            t, inside = time.perf_counter(), sum(v for k, v in self.phase_s.items() if k.startswith("timing: "))
            try:
                result = self._timing(result, sides, workload, index, deadline, cand)
                result.fib = fib_verdict(self.compared)  # the timed calls' checks included
                return result
            finally:
                # the timing phase's time in none of its sub-phases (between them: the round's bookkeeping)
                accounted = sum(v for k, v in self.phase_s.items() if k.startswith("timing: ")) - inside
                self.phase_s[SUB_OTHER] = self.phase_s.get(SUB_OTHER, 0.0) + time.perf_counter() - t - accounted
        except RunnerFault as fault:
            self._fault(self.candidate)
            return WorkloadResult(uuid=uuid, status=fault.status, detail=fault.detail)
        except torch.OutOfMemoryError as exc:
            self._fault(self.candidate)  # a runner holding the GPU's memory goes; the next workload starts clean
            return WorkloadResult(uuid=uuid, status=Status.OUT_OF_MEMORY,
                                  detail=f"the GPU ran out of memory during this workload: {str(exc).splitlines()[0]}")
        finally:
            t = time.perf_counter()
            for handle in (self.candidate, self.baseline):
                if handle is not None and not handle.dead:
                    if _ending:
                        # Being ended (SIGTERM): no runner is asked anything on the way out. A candidate hanging in
                        # its call held the judge here for the unbind's 60 s, past its server's 10 s of grace; the
                        # server's SIGKILL then left the baseline's runner, frozen while the candidate was timed,
                        # frozen for good (a frozen process cannot die; test_judge_server's killed caller, 3 of 3
                        # runs on 2026-12-06).
                        handle.kill()
                        continue
                    try:
                        handle.ask({"op": "unbind"}, 60)
                    except RunnerFault:
                        self._fault(handle)
            for calls in sides.values():
                calls.close()
            if self.hw.is_gpu and not _ending:
                try:
                    self._device_sync()
                except RunnerFault:
                    pass  # the runner that held the GPU is ended; its workload's result already stands
                torch.cuda.empty_cache()
            self._phase(PHASE_UNBIND, t)

    def _sets_for(self, workload):
        """The input sets a workload's calls get: as the requested mode's clock says (on a CPU, the CPU's)."""
        return timing.for_target(self.hw.is_gpu, self.request.timing_mode).sets(self.task, workload, self.hw)

    def _call_sets(self, workload, n_sets) -> CallSets:
        try:
            return CallSets(self.task, workload, self.device, n_sets)
        except torch.OutOfMemoryError:
            self._fault(self.candidate)  # it may be what holds the memory
            if self.hw.is_gpu:
                torch.cuda.empty_cache()
            return CallSets(self.task, workload, self.device, n_sets)

    def _bind(self, handle: RunnerHandle, calls: CallSets, deadline: float) -> None:
        message, fds = calls.bind_message()
        reply = handle.ask(message, max(1.0, deadline - time.monotonic()), fds=fds)
        if not reply.get("ok"):
            status = claimed_failure(reply, Status.EXCEPTION)
            raise RunnerFault(status, f"binding the workload's buffers failed: {reply.get('detail', '')}")

    def _phase(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.phase_s[name] = self.phase_s.get(name, 0.0) + now - since
        return now

    def _next_batch(self) -> int:
        self.batch_no += 1
        return self.batch_no

    # ------------------------------------------------------------------ one interval through the protocol
    def _call(self, handle: RunnerHandle, calls: CallSets, sets: list[int], deadline: float,
              write: Callable[[], None], clock: timing.Clock | None = None, null: bool = False,
              account: bool = False) -> interval.Interval:
        """One interval of `sets` on `handle`, timed by `clock` (default: one call by one, the checks' clock):
        `write` puts the inputs in place while the runner is frozen; `null` is the protocol alone. `account`: its
        parts go to the timing phase's sub-phases."""
        t = time.perf_counter()
        batch = self._next_batch()
        if self.hw.is_gpu and handle is self.baseline:
            self._quiet()  # nothing of the candidate's runs on the GPU while a trusted side is timed
        try:
            out = (clock or self.check_clock).interval(handle, calls, sets, batch, deadline, write, self.flusher, null)
        except interval.GpuHeld as held:
            raise self._gpu_held(str(held)) from None
        if account:
            for name, seconds in ((SUB_INPUTS, out.inputs_s - out.flush_s), (SUB_FLUSH, out.flush_s),
                                  (SUB_FREEZE, out.freeze_s),
                                  (SUB_BATCHES, time.perf_counter() - t - out.inputs_s - out.freeze_s)):
                if seconds or name != SUB_FLUSH:  # a GPU's flush is device time, in its batch
                    self.phase_s[name] = self.phase_s.get(name, 0.0) + seconds
        return out

    def _flush_us(self) -> float:
        """The judge's L2 flush, enqueued to synchronized, in microseconds: it waits behind other contexts' work.
        Bounded: a GPU held past interval.JUDGE_SYNC_S is the candidate's runner's doing (RunnerFault)."""
        t0 = time.perf_counter()
        self.flusher.zero_()
        self._device_sync()
        return (time.perf_counter() - t0) * 1e6

    def _device_sync(self) -> None:
        """The judge's own work on the device, waited for with a deadline (gpu_model's judge_waits_bounded): should
        another context's work hold the GPU past it (a frozen candidate's stream waiting on a word nobody writes
        holds the compute engine), the candidate's runner is ended, which ends its work, and the workload fails."""
        if not self.hw.is_gpu:
            return
        if not cuda_ops().synchronize(time.monotonic() + interval.JUDGE_SYNC_S):
            raise self._gpu_held(f"the judge's own work on the GPU did not finish in {interval.JUDGE_SYNC_S:g} s")

    def _gpu_held(self, what: str) -> RunnerFault:
        """The fault for a GPU held by work that does not end: the candidate's runner (the only untrusted context;
        frozen, its work runs on) is ended, with its stacks, and the judge's work then finishes (or the evaluation
        cannot go on: the GPU is held by something else)."""
        stacks = ""
        if self.candidate is not None:
            self.candidate.dump_stacks()
            stacks = self.candidate.stacks()
            self._fault(self.candidate)
        if not cuda_ops().synchronize(time.monotonic() + interval.JUDGE_SYNC_S):
            raise RuntimeError(f"{what}, and the GPU is still held with the candidate's runner ended")
        return RunnerFault(Status.TIMEOUT, f"{what}: the candidate's work held the GPU (a stream waiting on a word "
                                           f"nobody writes, or a kernel that does not end); its runner was ended. "
                                           f"The runner's stacks: {stacks or 'none written'}")

    def _quiet(self) -> None:
        """Wait until no other context has work running on the GPU (the candidate's runner, frozen on the host, may
        have left kernels queued or running): the GPU time-slices contexts, so the judge's own flush then waits for a
        slice. Flushes until one takes no longer than the idle one allows; GpuBusy after QUIET_LIMIT_S."""
        limit = time.monotonic() + QUIET_LIMIT_S
        while True:
            us = self._flush_us()
            if us <= QUIET_FACTOR * self.idle_flush_us + QUIET_SLACK_US:
                return
            if time.monotonic() > limit:
                raise GpuBusy(f"gpu_busy: GPU work of the candidate's ran on for {QUIET_LIMIT_S:g} s after its calls "
                              f"ended, while the baseline was to be timed (the judge's flush took {us:.0f} us, "
                              f"{self.idle_flush_us:.0f} us on an idle GPU)")

    # ------------------------------------------------------------------ checks
    def _checks(self, handle: RunnerHandle, calls: CallSets, workload, index: int, deadline: float) -> CheckResult:
        errors: dict[str, OutputError] = {}
        base_seed = derive(self.secret, workload.uuid, "check")
        self.reference_s = 0.0
        self.check_ms = math.nan
        for trial in range(self.request.trials):
            seed = derive(base_seed, trial)
            out = self._call(handle, calls, [0], deadline, write=lambda seed=seed: calls.refresh([0], seed))
            if not out.reply.get("ok"):
                from evoteam.harness.check import CheckFailure

                failure = CheckFailure(claimed_failure(out.reply, Status.EXCEPTION).value, "", trial, None, 0,
                                       out.reply.get("detail", ""))
                return CheckResult(False, trial + 1, base_seed, failure, errors)
            self.check_ms = out.ms
            failure = self._after_call(calls, [0], out.sample, trial, verify=[0], errors=errors)
            if failure is not None:
                return CheckResult(False, trial + 1, base_seed, failure, errors)
        return CheckResult(True, self.request.trials, base_seed, None, errors)

    def _after_call(self, calls: CallSets, sets: list[int], sample, trial: int, verify: list[int],
                    errors: dict[str, OutputError] | None = None):
        """The checks after a call or batch, in order; the first failure (a CheckFailure) or None."""
        from evoteam.harness.check import CheckFailure

        self._device_sync()
        if sample is not None and calls.changed_since(sample):
            return CheckFailure(Status.SKIPPED_WORK.value, "", trial, None, 0,
                                "outputs were written after the runner signalled the end of its calls (work left "
                                "running past the end of the timed region)")
        failure = calls.inputs_unchanged(sets, trial)
        if failure is not None:
            return failure
        # unwritten before the comparisons, as CHECK_ORDER has it: a chained call's input is the last call's output,
        # and an output left unwritten would read there as a non-finite input first
        unwritten = calls.unwritten(sets)
        if unwritten is not None:
            return CheckFailure(Status.UNWRITTEN.value, "", trial, None, 0, unwritten)
        for j in verify:
            t = time.perf_counter()
            failure, errs = calls.verify(j, trial, fib=self.request.fib_rule)
            self.reference_s = max(self.reference_s, time.perf_counter() - t)
            if errors is not None:
                for name, err in errs.items():
                    errors.setdefault(name, OutputError()).update(err)
            for name, err in errs.items():  # every compared call, timed ones too: flashinfer-bench's verdict on all
                self.compared.setdefault(name, OutputError()).update(err)
            if failure is not None:
                return failure
        return None

    # ------------------------------------------------------------------ timing
    def _timing(self, result: WorkloadResult, sides: dict[str, CallSets], workload, index: int, deadline: float,
                cand: RunnerHandle) -> WorkloadResult:
        """The workload's timed rounds against the baseline (evoteam.harness.rounds), planned and read by the
        workload's clock (evoteam.harness.timing): the judge names no timing mode."""
        request = self.request
        t = time.perf_counter()
        try:
            base = self._baseline_runner() if request.baseline != "none" else None
            if base is None:
                result.baseline = f"unavailable: {self.baseline_note}" if self.baseline_note else "none"
                return result
            calls_c = sides["candidate"]
            sides["baseline"] = calls_b = self._call_sets(workload, calls_c.n_sets)
            self._bind(base, calls_b, deadline)
        except RunnerFault as fault:
            return self._baseline_failed(result, fault)
        finally:
            self._phase(SUB_BASELINE, t)
        result.baseline = self.baseline_info.get("label", request.baseline)
        clock = timing.for_workload(self.hw.is_gpu, request.timing_mode,
                                    bool(self.baseline_info.get("timing_mode_override")),
                                    cand.process.cpu_usec() is not None and base.process.cpu_usec() is not None)
        t = time.perf_counter()
        try:
            plan = clock.plan(_Planning(self, result, workload, clock, cand, base, calls_b,
                                        min(calls_c.n_sets, calls_b.n_sets), deadline))
        except _BaselineFault as failed:
            return self._baseline_failed(result, failed.fault)
        finally:
            self._phase(clock.plan_phase, t)
        outcome = self._timed(result, sides, workload, deadline, cand, base, plan.baseline, plan.candidate, plan.n,
                              plan.n_base, request.warmup, request.reps, repeat=True, verify_budget=True)
        if outcome is None:
            return result
        figures = outcome.figures
        result.timing_mode = plan.label
        result.baseline_ms, result.candidate_ms, result.candidate_repeat_ms = (
            figures["baseline"].median, figures["candidate"].median, figures["candidate_repeat"].median)
        result.paired_speedup = outcome.paired
        result.speedup_low, result.speedup_high = outcome.interval or (None, None)
        result.flags += outcome.flags
        result.spread = {k: {"p10_ms": v.p10, "p90_ms": v.p90, "samples": v.samples} for k, v in figures.items()
                         if v.samples}
        result.spread["calls_per_batch"], result.spread["baseline_calls_per_batch"] = plan.n, plan.n_base
        if plan.graph_nodes:
            result.spread["graph_nodes"] = plan.graph_nodes  # the larger side's captured batch
        t = time.perf_counter()
        if plan.candidate.captured:
            self._runner_report(result, cand, outcome.timed_batches, plan.n, deadline)
        second = plan.baseline.second
        if second is not None and request.second_figure:
            t = self._phase(SUB_FLAGS, t)
            other = timing.clock(second)
            extra = self._timed(result, sides, workload, deadline, cand, base, other, other, 1, 1, 1,
                                SECOND_FIGURE_ROUNDS, repeat=False, verify_budget=False)
            if extra is None:
                return result
            result.second = {"mode": other.label, "baseline_ms": extra.figures["baseline"].median,
                             "candidate_ms": extra.figures["candidate"].median}
            t = time.perf_counter()
        self._flags(result, workload, calls_c, cand, deadline)
        self._phase(SUB_FLAGS, t)
        if result.flags:
            result.status = Status.FLAGGED  # not counted as a win; the detail says why
            result.detail = "; ".join(result.flags)
        return result

    def _baseline_failed(self, result: WorkloadResult, fault: RunnerFault) -> WorkloadResult:
        """The one handler of a baseline runner that failed (to start, to bind, to run its probe): it is replaced for
        the next workload, and this one is the harness's error, not the candidate's."""
        self._fault(self.baseline)
        result.status, result.detail = Status.HARNESS_ERROR, f"the baseline runner failed: {fault.detail}"
        return result

    def _runner_report(self, result: WorkloadResult, cand: RunnerHandle, timed: set[int], n: int,
                       deadline: float) -> None:
        """timers_disagree: the runner's own device events over its timed graph batches against the judge's figure
        (not trusted either way: a disagreement is a flag, never a time)."""
        reported = cand.ask({"op": "report"}, deadline - time.monotonic()).get("device_ms", [])
        own = [ms / n for batch, ms in reported if batch in timed]
        if own:
            result.runner_ms = timing.median(own)
            gap = abs(result.runner_ms - result.candidate_ms)
            if gap > DISAGREE_REL * result.candidate_ms + DISAGREE_ABS_MS:
                result.flags.append(f"timers_disagree: the judge measured {result.candidate_ms:.4g} ms per call, "
                                    f"the runner's own device events {result.runner_ms:.4g} ms")

    def _cache_key(self, result: WorkloadResult, workload, clock: timing.Clock, batch: int) -> Key:
        return Key(hardware_fingerprint(self.device), self.baseline_info.get("version", "?"), clock.mode.value,
                   result.baseline, workload.uuid, batch, clock.cache_rule)

    def _timed(self, result: WorkloadResult, sides: dict[str, CallSets], workload, deadline: float,
               cand: RunnerHandle, base: RunnerHandle, clock_b: timing.Clock, clock_c: timing.Clock, n: int,
               n_base: int, warmup: int, reps: int, repeat: bool, verify_budget: bool) -> rounds.Outcome | None:
        """The rounds of one plan: the baseline's batches of `n_base` calls by `clock_b`, the candidate's of `n` by
        `clock_c`, each side's protocol alone timed with it; None where a batch failed (the result says how). The
        baseline's figure is taken from the cache where the request asks and it holds one; else it goes there."""
        calls_c, calls_b = sides["candidate"], sides["baseline"]
        # The batch is in the key: a lone call pays a cold interpreter and cache that a batch shares, so a baseline
        # timed one call per interval (beside a candidate slow enough for that) serves only such evaluations
        cache_key = self._cache_key(result, workload, clock_b, n_base)
        cached = self.cache.get(cache_key) if self.request.use_baseline_cache else None
        sets, sets_b = tuple(range(n)), tuple(range(n_base))
        plan = {"null": rounds.Side("null", base, calls_b, sets_b, clock_b)}
        own_null = clock_b is not clock_c  # the candidate's protocol differs from the baseline's
        if own_null:
            plan["null_candidate"] = rounds.Side("null_candidate", base, calls_b, sets, clock_c)
        if cached is None:
            plan["baseline"] = rounds.Side("baseline", base, calls_b, sets_b, clock_b, against="null")
        against = "null_candidate" if own_null else "null"
        plan["candidate"] = rounds.Side("candidate", cand, calls_c, sets, clock_c, against=against)
        if repeat:
            plan["candidate_repeat"] = rounds.Side("candidate_repeat", cand, calls_c, sets, clock_c, against=against)
        try:
            outcome = rounds.run(_Judging(self, result, cand), plan, warmup=warmup, reps=reps, repeat=repeat,
                                 verify_budget=verify_budget, deadline=deadline, cached=cached,
                                 workload_uuid=workload.uuid)
        except rounds.Failed as failed:
            result.status, result.detail = failed.status, failed.detail
            if failed.flag:
                result.flags.append(failed.detail)
            return None
        if cached is not None:
            result.baseline = f"{result.baseline} (cached)"
        else:
            self.cache.put(cache_key, outcome.figures["baseline"].median)
        return outcome

    def _flags(self, result: WorkloadResult, workload, calls: CallSets, cand: RunnerHandle, deadline: float) -> None:
        """Flags on what the candidate's figures cannot be."""
        measured = result.candidate_ms
        if measured is not None and measured <= 0:
            # at or below the protocol alone: no work measured (never a time to divide by, nor a check to skip)
            result.flags.append(f"no_time: the candidate's calls measured {measured:.4g} ms each, at or "
                                f"below the protocol's own cost")
        min_bytes = self.task.min_bytes(workload, calls.pristine[0])
        if min_bytes and result.candidate_ms is not None:
            from evoteam.harness.scan import physical_floor_ms

            result.floor_ms = physical_floor_ms(min_bytes, self.hw.peak_memory_bandwidth_tbs)
            if result.candidate_ms > 0:
                result.bandwidth_tbs = min_bytes / (result.candidate_ms * 1e-3) / 1e12
            if result.floor_ms and 0 < measured < result.floor_ms:
                result.flags.append(f"faster_than_floor: {measured:.4g} ms < physical floor "
                                    f"{result.floor_ms:.4g} ms")
        if self.hw.is_gpu and self.kernel_names is None:
            try:
                self.kernel_names = cand.ask({"op": "kernels", "set": 0}, deadline - time.monotonic()).get("kernels", [])
            except RunnerFault:
                self.kernel_names = []
                raise
        if self.kernel_names is not None:
            result.kernels = list(self.kernel_names)
            foreign = scan.foreign_kernels(self.kernel_names, self.own_kernels)
            if foreign:
                result.flags.append(f"baseline_kernels: {', '.join(sorted(set(foreign))[:3])}")


class _BaselineFault(Exception):
    """The baseline's runner failed while a clock planned the workload's batches (the candidate's faults propagate as
    they are)."""

    def __init__(self, fault: RunnerFault):
        super().__init__(fault.detail)
        self.fault = fault


class _Planning:
    """timing.Planning for one workload: what a clock asks of the judge to plan its batches."""

    def __init__(self, judge: Judge, result: WorkloadResult, workload, clock: timing.Clock, cand: RunnerHandle,
                 base: RunnerHandle, calls_b: CallSets, n_sets: int, deadline: float):
        self.judge, self.result, self.workload, self.clock = judge, result, workload, clock
        self.cand, self.base, self.calls_b, self.n_sets, self.deadline = cand, base, calls_b, n_sets, deadline
        self.check_ms = judge.check_ms

    def capture(self, side: str, n: int) -> tuple[str | None, int]:
        message = {"op": "capture", "sets": list(range(n))}
        if side == "candidate":
            reply = self.cand.ask(message, self.deadline - time.monotonic())
        else:
            try:
                reply = self.base.ask(message, self.deadline - time.monotonic())
            except RunnerFault as fault:
                raise _BaselineFault(fault) from None
        return (None if reply.get("ok") else str(reply.get("detail", ""))), int(reply.get("nodes") or 0)

    def baseline_probe_ms(self) -> float:
        judge, workload = self.judge, self.workload
        self.cand.freeze()
        probe_ms = math.inf
        for trial in range(2):
            seed = derive(judge.secret, workload.uuid, "batch", trial)
            try:
                out = judge._call(self.base, self.calls_b, [0], self.deadline,
                                  write=lambda seed=seed: self.calls_b.refresh([0], seed))
            except RunnerFault as fault:
                raise _BaselineFault(fault) from None
            if not out.reply.get("ok"):
                raise _BaselineFault(RunnerFault(claimed_failure(out.reply, Status.EXCEPTION),
                                                 out.reply.get("detail", "")))
            probe_ms = min(probe_ms, out.ms)
        return probe_ms

    def cached_batches(self) -> list[int]:
        # whether or not the request takes cached times: the batch is the machine's, the time is this evaluation's
        return list(self.judge.cache.batches(self.judge._cache_key(self.result, self.workload, self.clock, 0)))


class _Judging:
    """rounds.Judging for one workload: the judge's side of the timed rounds."""

    def __init__(self, judge: Judge, result: WorkloadResult, cand: RunnerHandle):
        self.judge, self.result, self.cand = judge, result, cand

    @property
    def reference_s(self) -> float:
        return self.judge.reference_s

    def time(self, side: rounds.Side, deadline: float, write) -> tuple[interval.Interval, int]:
        judge = self.judge
        try:
            out = judge._call(side.runner, side.calls, list(side.sets), deadline, write, side.clock, null=side.null,
                              account=True)
        except GpuBusy as busy:
            judge._fault(judge.candidate)  # its work runs on: the next workload gets a fresh runner
            raise rounds.Failed(Status.FLAGGED, str(busy), flag=True) from None
        return out, judge.batch_no

    def check_batch(self, side: rounds.Side, sample, rnd: int, verify: list[int]):
        t = time.perf_counter()
        failure = self.judge._after_call(side.calls, list(side.sets), sample, rnd, verify)
        self.judge._phase(SUB_VERIFY, t)
        self.result.calls_timed += len(side.sets)
        self.result.calls_checked += len(verify)
        return failure

    def baseline_wrong(self, calls: CallSets, rnd: int) -> str | None:
        factor = baseline_check_factor(self.judge.request.baseline)
        # by evoteam's rule whatever the candidate's: whether the baseline's time is a reference
        failure, _errors = calls.verify(0, rnd, factor)
        if failure is None:
            return None
        widened = f" at {factor:g}x the element-wise tolerance" if factor != 1.0 else ""
        return f"the baseline's own output is wrong{widened} ({failure.check}: {failure.detail}); its time is not a " \
               f"reference"

    def freeze_candidate(self) -> None:
        self.cand.freeze()

    def seed(self, *parts: object) -> int:
        return derive(self.judge.secret, *parts)


def _claim_cpu() -> tuple[int, object]:
    """A CPU of this process's set for one evaluation's timing, the highest one no other evaluation on
    this machine holds (a lock file per CPU, released when the evaluation ends or its process dies):
    two evaluations timed on one CPU would each pollute the other's caches. When every CPU is held,
    the highest is shared."""
    import fcntl
    import tempfile

    cpus = sorted(os.sched_getaffinity(0), reverse=True)
    for cpu in cpus:
        path = Path(tempfile.gettempdir()) / f"evoteam-timing-cpu{cpu}.lock"
        handle = open(path, "a")  # noqa: SIM115 - held for the evaluation's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return cpu, handle
        except OSError:
            handle.close()
    return cpus[0], open(os.devnull)  # noqa: SIM115


def _device_name(device: str) -> str:
    """The device as flashinfer-bench's traces name it: the GPU's name, else the CPU's model name."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return cache_flush.cpu_model() or platform.processor() or platform.machine() or "CPU"


def _parses(source: str) -> bool:
    import ast

    try:
        ast.parse(source)
        return True
    except SyntaxError:
        return False


# ------------------------------------------------------------------------------------------ the judge process


# Set by the first SIGTERM: the judge is being ended. On the way out it ends its runners without asking them anything
# (Judge._workload, Judge._close_runners): whatever a runner does then (a hanging call) must not hold the judge.
_ending = False


def _on_sigterm(*_) -> None:
    global _ending
    if _ending:
        return  # a second SIGTERM (the server's, then the parent-death signal) must not cut the way out short
    _ending = True
    sys.exit(143)


def _end_with_parent(sig: int) -> None:
    """The judge runs in a session of its own (so that killing it ends its runners too); should the process
    that started it die (a killed run), the kernel sends it `sig`: no evaluation outlives its caller."""
    import ctypes

    parent = int(os.environ.get("EVOTEAM_JUDGE_PARENT", "0"))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != parent:  # the parent died before the line above
        os.kill(os.getpid(), sig)


def _profiled(fn):
    """fn(), under cProfile where EVOTEAM_JUDGE_PROFILE names a file (the 60 costliest functions by their own time
    and by cumulative time go there as text): where a judge's time goes, function by function."""
    path = os.environ.get("EVOTEAM_JUDGE_PROFILE")
    if not path:
        return fn()
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    try:
        return profile.runcall(fn)
    finally:
        text = io.StringIO()
        for key in ("tottime", "cumulative"):
            pstats.Stats(profile, stream=text).sort_stats(key).print_stats(60)
        with open(path, "a") as f:
            f.write(text.getvalue())


def judge_main(request_path: str, progress_path: str) -> int:
    import signal

    from evoteam import hardware
    from evoteam.errors import UserError

    signal.signal(signal.SIGTERM, _on_sigterm)  # unwinds: the runners are ended on the way out
    _end_with_parent(signal.SIGTERM)
    # the judge's life from its spawn (the executor's clock, where it says; else from here)
    born = float(os.environ.get("EVOTEAM_JUDGE_SPAWNED", "0")) or time.time()
    request = EvalRequest(**json.loads(Path(request_path).read_text()))
    progress = Path(progress_path)
    try:
        hw = hardware.load_spec(request.hardware)
        os.environ.update(hw.env)  # before Triton is imported (the interpreter on CPU)
        judge = Judge(request, hw, on_start=lambda uuid: append_journal(progress, {"event": "start", "uuid": uuid}),
                      on_result=lambda r: append_journal(progress, {"event": "result", **r.to_json()}))
        judge.phase_s[PHASE_START] = time.time() - born
        outcome = _profiled(judge.run)
        outcome.phases[PHASE_OTHER] = max(0.0, time.time() - born - sum(outcome.phases.values()))
    except UserError as exc:
        append_journal(progress, {"event": "error", "message": str(exc)})
        return EXIT_BAD_INPUT
    summary = {k: v for k, v in outcome.to_json().items() if k != "results"}
    append_journal(progress, {"event": "end", **summary})
    return 0


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(judge_main, sys.argv[1], sys.argv[2])
