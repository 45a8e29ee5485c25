"""Write a FlashInfer-Trace dataset folder that flashinfer-bench's own loader reads.

    python -m evoteam.export OUT --task mla_decode [--scale small]       definitions and workloads
    python -m evoteam.export OUT --run runs/<date>/<time>                a main job's final traces
    python -m evoteam.export OUT --traces t.jsonl --solution kernel.py   a bench output (--traces of bench)

The folder is laid out as flashinfer-bench's `TraceSet.from_path` expects:
    definitions/<op_type>/<definition>.json          the reference code inline
    workloads/<op_type>/<definition>.jsonl           workload traces (solution and evaluation null)
    solutions/<op_type>/<definition>/<name>.json     one for every solution a trace names
    traces/<op_type>/<definition>.jsonl
    blob/workloads/<op_type>/<definition>/<uuid>.safetensors
                                                     the index tensors each workload uses, as evoteam
                                                     makes them; its safetensors inputs point here
Traces carry their workload; the same uuid is rewritten the same way in both files. Exporting into a
folder that holds a dataset adds to it (a line already there is not written twice).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from evoteam.blobs import write_safetensors
from evoteam.errors import UserError, exit_code_of
from evoteam.harness.candidate import CandidateError, solution_of_path
from evoteam.schema import SchemaError, Solution, Trace, Workload, load_traces
from evoteam.task import SCALES, Task, available_tasks, load_task


class Dataset:
    """An export folder being written."""

    def __init__(self, root: Path):
        self.root = root
        self.counts = {"definitions": 0, "workloads": 0, "solutions": 0, "traces": 0, "blobs": 0}
        self._workloads: dict[str, set[str]] = {}  # definition -> uuids written
        self._solutions: dict[str, str] = {}  # name -> content digest
        self._traces: dict[str, set[str]] = {}
        self._own: dict[str, dict[str, Workload]] = {}  # task -> its workloads at every scale, by uuid

    # ---------------------------------------------------------------- definitions and workloads
    def definition(self, task: Task) -> None:
        d = task.definition
        path = self.root / "definitions" / d.op_type / f"{d.name}.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(d.to_json(), indent=2) + "\n")
            self.counts["definitions"] += 1

    def workload(self, task: Task, workload: Workload) -> Workload:
        """The workload as exported (its safetensors inputs point at blobs in this folder), written once."""
        d = task.definition
        blob = Path("blob") / "workloads" / d.op_type / d.name / f"{workload.uuid}.safetensors"
        inputs = {name: (replace(spec, path=f"./{blob.as_posix()}", tensor_key=name) if spec.type == "safetensors"
                         else spec) for name, spec in workload.inputs.items()}
        exported = replace(workload, inputs=inputs)
        seen = self._workloads.setdefault(d.name, self._read_uuids(self._workloads_file(task)))
        if workload.uuid not in seen:
            tensors = task.blob_tensors(workload)  # made only for a workload not written yet
            if tensors:
                write_safetensors(self.root / blob, tensors)
                self.counts["blobs"] += 1
            line = Trace(definition=d.name, workload=exported, solution=None, evaluation=None).to_json()
            _append(self._workloads_file(task), line)
            seen.add(workload.uuid)
            self.counts["workloads"] += 1
        return exported

    def _workloads_file(self, task: Task) -> Path:
        return self.root / "workloads" / task.definition.op_type / f"{task.definition.name}.jsonl"

    @staticmethod
    def _read_uuids(path: Path) -> set[str]:
        return {t.workload.uuid for t in load_traces(path)} if path.is_file() else set()

    # ---------------------------------------------------------------- solutions and traces
    def solution(self, task: Task, solution: Solution) -> None:
        digest = json.dumps([s.to_json() for s in solution.sources], sort_keys=True)
        if solution.name in self._solutions:
            if self._solutions[solution.name] != digest:
                raise UserError(f"two different solutions are named {solution.name!r}; give one another name "
                                f"(--solution NAME=PATH)")
            return
        self._solutions[solution.name] = digest
        path = self.root / "solutions" / task.definition.op_type / task.definition.name / f"{solution.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(solution.to_json(), indent=2) + "\n")
        self.counts["solutions"] += 1

    def trace(self, task: Task, trace: Trace) -> None:
        exported = replace(trace, workload=self.workload(task, self._own_workload(task, trace.workload)))
        line = json.dumps(exported.to_json(), sort_keys=True)
        path = self.root / "traces" / task.definition.op_type / f"{task.definition.name}.jsonl"
        seen = self._traces.setdefault(str(path), {json.dumps(t.to_json(), sort_keys=True) for t in load_traces(path)}
                                       if path.is_file() else set())
        if line not in seen:
            _append(path, exported.to_json())
            seen.add(line)
            self.counts["traces"] += 1

    def _own_workload(self, task: Task, workload: Workload) -> Workload:
        """The task's workload of that uuid at any scale (the one whose index tensors the task makes)."""
        own = self._own.get(task.name)
        if own is None:
            own = self._own[task.name] = {w.uuid: w for scale in SCALES for w in task.scaled_workloads(scale)}
        if workload.uuid not in own:
            raise UserError(f"workload {workload.uuid} is not a workload of task {task.name} at any scale "
                            f"({', '.join(SCALES)}); traces of another version of the task cannot be exported")
        if own[workload.uuid].axes != workload.axes:
            raise UserError(f"workload {workload.uuid}: the traces give axes {workload.axes}, the task {task.name} "
                            f"{own[workload.uuid].axes}; traces of another version of the task cannot be exported")
        return own[workload.uuid]


def _append(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:  # strict JSON: non-finite floats are written as strings upstream
        fh.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")


def task_of_definition(name: str) -> Task:
    for task_name in available_tasks():
        task = load_task(task_name)
        if task.definition.name == name:
            return task
    raise UserError(f"no task of this installation defines {name!r}; tasks: {', '.join(available_tasks())}")


def _read_traces(path: Path) -> list[Trace]:
    if not path.is_file():
        raise UserError(f"{path}: no such traces file; give the file bench --traces or a run's final/traces.jsonl")
    try:
        return load_traces(path)
    except (SchemaError, ValueError, KeyError) as exc:
        raise UserError(f"{path}: not FlashInfer-Trace lines ({exc})") from None


def _solution_arg(text: str) -> tuple[str | None, Path]:
    name, sep, path = text.partition("=")
    return (name, Path(path)) if sep else (None, Path(text))


def export(args: argparse.Namespace) -> dict[str, int]:
    out = Dataset(args.out)
    unknown = [name for name in args.task if name not in available_tasks()]
    if unknown:
        raise UserError(f"--task {unknown[0]}: not a known task; allowed: {', '.join(available_tasks())}")
    runs = []
    for run_dir in args.run:
        traces = run_dir / "final" / "traces.jsonl"
        if not traces.is_file():
            raise UserError(f"--run {run_dir}: no final/traces.jsonl (the run did not finish); give a finished run")
        solutions = {}
        for path in sorted((run_dir / "final" / "solutions").glob("*.json")):
            solution = Solution.from_json(json.loads(path.read_text()))
            solutions[solution.name] = solution
        runs.append((f"--run {run_dir}", _read_traces(traces), solutions))
    given = {}
    for text in args.solution:
        name, path = _solution_arg(text)
        if not path.is_file():
            raise UserError(f"--solution {text}: no such file; give the kernel file the traces were measured with")
        given[name or path.stem] = path
    for path in args.traces:
        runs.append((f"--traces {path}", _read_traces(path), None))
    for name in args.task:
        task = load_task(name)
        out.definition(task)
        for workload in task.scaled_workloads(args.scale):
            out.workload(task, workload)
    resolved = []  # every trace with its task and solution, before anything is written
    for origin, traces, solutions in runs:
        for trace in traces:
            task = task_of_definition(trace.definition)
            if solutions is not None:
                solution = solutions.get(trace.solution)
            elif trace.solution in given:
                try:
                    solution = replace(solution_of_path(given[trace.solution], task.definition.name),
                                       name=trace.solution)
                except CandidateError as exc:
                    raise UserError(f"--solution {trace.solution}: {exc}") from None
            else:
                solution = None
            if solution is None:
                raise UserError(f"{origin}: the traces name solution {trace.solution!r} but no source was given for it; "
                                f"add --solution {trace.solution}=PATH")
            resolved.append((task, trace, solution))
    for task, trace, solution in resolved:
        out.definition(task)
        out.solution(task, solution)
        out.trace(task, trace)
    return out.counts


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evoteam.export", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the dataset folder (created; an existing dataset is added to)")
    p.add_argument("--task", action="append", default=[], help="export this task's definition and workloads")
    p.add_argument("--scale", default="full", choices=SCALES, help="the problem scale of --task's workloads")
    p.add_argument("--run", action="append", type=Path, default=[], help="a finished main-job run folder")
    p.add_argument("--traces", action="append", type=Path, default=[], help="a traces file (bench --traces)")
    p.add_argument("--solution", action="append", default=[],
                   help="the source of a solution --traces names: PATH (named by its stem) or NAME=PATH")
    args = p.parse_args(argv)
    if not (args.task or args.run or args.traces):
        p.error("nothing to export: give --task, --run or --traces")
    return args


def run(args: argparse.Namespace) -> int:
    counts = export(args)
    print(f"evoteam.export: {args.out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + " written")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return exit_code_of("evoteam.export", lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
