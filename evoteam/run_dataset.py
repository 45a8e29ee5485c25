"""Run every solution of a flashinfer-bench dataset folder on its definition's workloads, in evoteam's
harness (sandboxed, checked, timed against the definition's reference), and write the traces.

    python -m evoteam.run_dataset DATASET [--definition NAME ...] [--hardware auto] [--traces OUT.jsonl] [--fib-rule]

Solutions in Python, Triton, C++ and CUDA (binding "torch") run, destination-passing or value-returning;
a solution the runner cannot build (another binding, another language) is recorded as a compile error with
the reason. Outputs are judged by evoteam's rule (its tolerances and relative-norm bound) unless --fib-rule
asks for flashinfer-bench's exactly; every trace records which. Exit code 1 when no workload of any
solution passed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evoteam.errors import UserError, exit_code_of
from evoteam.harness.model import Status


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evoteam.run_dataset", description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", type=Path, help="a folder with definitions/, workloads/ and solutions/")
    p.add_argument("--definition", action="append", default=[], help="only these definitions (default: all)")
    p.add_argument("--hardware", default="auto", help="a spec sheet of hardware/ or auto (default)")
    p.add_argument("--traces", type=Path, help="append the FlashInfer-Trace lines here")
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per solution")
    p.add_argument("--fib-rule", action="store_true",
                   help="judge every output by flashinfer-bench's rule (atol = rtol = 1e-2, no relative-norm bound): "
                        "its verdicts exactly")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    from evoteam import dataset
    from evoteam.harness.candidate import solution_label
    from evoteam.schema import append_traces
    from evoteam.target import Target
    from evoteam.trace_writer import to_trace

    if not (args.dataset / "definitions").is_dir():
        raise UserError(f"{args.dataset} is not a flashinfer-bench dataset folder (no definitions/)")
    found = dataset.definitions(args.dataset)
    wanted = args.definition or list(found)
    unknown = [d for d in wanted if d not in found]
    if unknown:
        raise UserError(f"--definition {unknown[0]}: not in the dataset; it defines: {', '.join(found)}")
    passed = 0
    for name in wanted:
        target = Target.resolve(dataset.task_name(args.dataset, name), args.hardware, scale="full")
        hw, by_uuid = target.hw, target.by_uuid
        for path in dataset.solutions(args.dataset, name):
            label = solution_label(path)
            print(f"{name}: {label} ({len(target.workloads)} workloads) on {hw.name}", flush=True)
            request = target.request(path.resolve(), baseline="reference", warmup=args.warmup, reps=args.reps,
                                     fib_rule=args.fib_rule)
            for r in target.executor.evaluator(request, args.timeout).results:
                speed = f" {r.speedup:.3f}x" if r.speedup else ""
                print(f"  {r.uuid[:8]}: {r.status}{speed}{'' if r.speedup else ' ' + r.detail[:160]}", flush=True)
                passed += r.status == Status.PASSED
                if args.traces:
                    append_traces(args.traces, [to_trace(name, by_uuid[r.uuid], label, r, hw.name)])
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from evoteam.harness import judge_server

    try:
        return exit_code_of("evoteam.run_dataset", lambda: run(args))
    finally:
        judge_server.close_all()  # nothing of the evaluations runs on once the command has returned


if __name__ == "__main__":
    from evoteam import process_exit

    process_exit.run(main)
