"""`python -m evoteam.bench SOLUTION.py --task T`: evaluate one solution file on a task and
hardware target with the harness (a trusted judge process; the candidate in a sandboxed runner);
print a per-workload table (baseline and candidate time, speedup, noise, % of the bandwidth
ceiling, status) with the geometric mean and wins, and write FlashInfer-Trace lines and a JSON report.

Exit code 0 when every workload passed, 1 when one did not (failed, flagged or not run), 2 for bad input
(one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from evoteam import report
from evoteam.errors import UserError, exit_code_of
from evoteam.harness.model import TIMING_MODES, Status
from evoteam.outputs import check_output_file, write_output
from evoteam.schema import trace_line


def parse_args(argv: list[str]) -> argparse.Namespace:
    # the module docstring's first paragraph, whole (its first line alone stopped mid-sentence)
    p = argparse.ArgumentParser(prog="python -m evoteam.bench", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("solution", help="the candidate: a Python file (entry point `run` unless --entry), a .cu or .cpp "
                   "file (torch binding, entry `run`), or a FlashInfer-Trace solution JSON (Python, Triton, C++ or "
                   "CUDA sources)")
    p.add_argument("--task", required=True, help="a folder of kernels/, e.g. mla_decode or kda_prefill")
    p.add_argument("--hardware", default="auto", help="a spec sheet of hardware/ or auto (default)")
    p.add_argument("--scale", choices=["full", "small"], help="problem scale (default: the target's)")
    p.add_argument("--workloads", nargs="*", default=[], help="unique uuid prefixes (default: all)")
    p.add_argument("--baseline", default="auto", help="auto, reference, flashinfer, fla, flashkda, flashinfer_kda, vllm, aiter, or "
                   "solution (--baseline-option path=FILE: the A/A control, a kernel against itself)")
    p.add_argument("--baseline-option", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter option, e.g. backend=fa3 or plan=per_call (repeatable)")
    p.add_argument("--timing", choices=list(TIMING_MODES), default="graph",
                   help="timing mode on GPUs: graph (device time, default), events (per call, host launch "
                        "included); CPUs always use cputime")
    p.add_argument("--no-second-figure", action="store_true", help="time in one mode only (GPU)")
    p.add_argument("--entry", default="run")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--seed", type=int, help="reproducible inputs (recorded as not secret); default: a fresh "
                                            "secret per evaluation, revealed in the report afterwards")
    p.add_argument("--sandbox", choices=["strict", "weak"], default="strict",
                   help="strict (default): refuse where the candidate's sandbox lacks a layer; weak: run anyway "
                        "and record what is missing")
    p.add_argument("--no-static-scan", action="store_true",
                   help="skip the source scan (a fast filter; the sandbox and the judge do not depend on it)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds per workload (compilation included) before the candidate's runner is killed")
    p.add_argument("--check-only", action="store_true", help="check correctness, time nothing")
    p.add_argument("--fib-rule", action="store_true",
                   help="judge every output by flashinfer-bench's rule (atol = rtol = 1e-2, no relative-norm bound): its "
                        "verdicts exactly (without it, evoteam's rule judges and traces record both verdicts)")
    p.add_argument("--use-baseline-cache", action="store_true", help="take cached baseline times where present")
    p.add_argument("--traces", type=Path, help="append FlashInfer-Trace lines here")
    p.add_argument("--json", type=Path, help="write the full report here")
    p.add_argument("--label", default=None, help="the candidate's name in the table (traces name a kernel file by its "
                   "task and content, <task>_evoteam_<hash>, a solution JSON by its own name)")
    p.add_argument("--executor", choices=["local", "docker", "auto"], default="local",
                   help="the judge on this machine (default), in the target's container through the Docker API, or "
                        "auto: the container where an engine has the target's image, else here")
    p.add_argument("--image", help="--executor docker: the image (default: the target's, hardware/<name>.yaml)")
    p.add_argument("--docker-host", help="--executor docker: the engine's address (default: DOCKER_HOST)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, command: bool = False) -> int:
    """`command`: this process is `python -m evoteam.bench` itself (its judge server may be forked from it)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from evoteam.harness import judge_server

    try:
        return exit_code_of("evoteam.bench", lambda: run(args, command))
    finally:
        judge_server.close_all()  # nothing of the evaluation runs on once the command has returned


def run(args: argparse.Namespace, command: bool = False) -> int:
    from evoteam.config import ExecutorConfig, ExecutorKind
    from evoteam.harness.candidate import solution_label
    from evoteam.harness.executor import evaluate
    from evoteam.target import Target, baseline_options
    from evoteam.trace_writer import solution_name_of_file, to_trace

    solution = Path(args.solution)
    if not solution.is_file():
        raise UserError(f"solution file {solution} does not exist; give the path of a Python file or a solution JSON")
    if args.trials < 3:
        raise UserError(f"--trials {args.trials} is too few; the checker needs at least 3")
    executor_cfg = ExecutorConfig(kind=ExecutorKind(args.executor), image=args.image, docker_host=args.docker_host)
    target = Target.resolve(args.task, args.hardware, scale=args.scale, workloads=args.workloads,
                            timing_mode=args.timing, executor=args.executor, executor_cfg=executor_cfg)
    task, hw, workloads, labels, by_uuid = target.task, target.hw, target.workloads, target.labels, target.by_uuid
    name = args.label or solution_label(solution)
    # unique across tasks and tied to the content, so that an export finds the one source the traces were measured with
    traced = solution_name_of_file(task.name, solution)
    request = target.request(solution.resolve(), entry=args.entry, trials=args.trials, seed=args.seed,
                             second_figure=not args.no_second_figure, baseline=args.baseline,
                             baseline_options=baseline_options(args.baseline_option), warmup=args.warmup,
                             reps=args.reps, check_only=args.check_only, fib_rule=args.fib_rule,
                             use_baseline_cache=args.use_baseline_cache,
                             static_scan=not args.no_static_scan, sandbox=args.sandbox,
                             workload_timeout_s=args.timeout)
    # The output paths, checked (their folders made) before the evaluation: a bad one is one line now, not a
    # traceback after the measurement.
    for path, flag in ((args.traces, "--traces"), (args.json, "--json")):
        if path is not None:
            check_output_file(path, flag)
    if command:  # its judge server forked now, as `python -m evoteam` forks its own (mainjob.run)
        from evoteam.harness import judge_server

        judge_server.prestart_for_command(target.executor.kind)
    naming = f"; traces name it {traced}" if args.traces else ""
    rule = "flashinfer-bench's" if args.fib_rule else "evoteam's"
    print(f"evoteam.bench: {name} on {target.describe()}; baseline {args.baseline} {request.baseline_options or ''}; "
          f"seed {'secret' if args.seed is None else args.seed}; {rule} pass rule{naming}", flush=True)
    done = {"n": 0}
    unwritten: list[str] = []  # trace lines that could not be appended: kept in a file of their own at the end

    def progress(result) -> None:
        done["n"] += 1
        speed = f" {result.speedup:.3f}x" if result.speedup else ""
        print(f"[{done['n']}/{len(workloads)}] {result.uuid[:8]} {labels[result.uuid]}: {result.status}{speed}",
              flush=True)
        if args.traces:
            line = trace_line(to_trace(task.definition.name, by_uuid[result.uuid], traced, result, hw.name))
            if not unwritten:
                try:
                    with open(args.traces, "a") as fh:
                        fh.write(line)
                    return
                except OSError:  # the evaluation goes on; this line and the next are written (or kept) at the end
                    pass
            unwritten.append(line)

    started = time.monotonic()
    outcome = evaluate(request, executor=target.executor.evaluator, on_result=progress)
    elapsed = time.monotonic() - started
    print()
    print(report.format_table(outcome.results, labels, name, hw.bandwidth_ceiling_tbs))
    print(report.format_phases(outcome.phases, elapsed))
    sandbox = outcome.sandbox.get("mode", "-")
    print(f"evaluation {elapsed:.1f} s; sandbox {sandbox}; runner restarts {outcome.restarts}; "
          f"seed {outcome.seed}{'' if outcome.seed_secret else ' (given, not secret)'}")
    lost = []  # what could not be written where asked, each kept elsewhere (never lost)
    if unwritten:
        try:
            write_output(args.traces, "".join(unwritten), "--traces", "traces", append=True)
        except UserError as exc:
            lost.append(str(exc))
    if args.json:
        summary = report.summarize(outcome.results)
        text = json.dumps({"request": request.__dict__, "summary": summary.__dict__, "elapsed_s": elapsed,
                           **outcome.to_json()}, indent=1)
        try:
            write_output(args.json, text, "--json", "report")
        except UserError as exc:
            lost.append(str(exc))
    if lost:
        raise UserError("; ".join(lost))
    return 0 if all(r.status == Status.PASSED for r in outcome.results) else 1


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main, None, True)
