"""Write a FlashInfer-Trace dataset folder that flashinfer-bench's own loader reads.

    python -m evoteam.export OUT --task mla_decode [--scale small]       definitions and workloads
    python -m evoteam.export OUT --run runs/<date>/<time>                a main job's final traces
    python -m evoteam.export OUT --traces t.jsonl --solution kernel.py   a bench output (--traces of bench)
    python -m evoteam.export OUT --traces t.jsonl --solution s.json --dataset DIR
                                                                         run_dataset DIR's traces (its workloads)

The folder is laid out as flashinfer-bench's `TraceSet.from_path` expects:
    definitions/<op_type>/<definition>.json          the reference code inline
    workloads/<op_type>/<definition>.jsonl           workload traces (solution and evaluation null)
    solutions/<op_type>/<definition>/<name>.json     one for every solution a trace names
    traces/<op_type>/<definition>.jsonl
    checks/<op_type>/<definition>.jsonl              check-only traces (bench --check-only; flashinfer-bench reads no checks/)
    blob/workloads/<op_type>/<definition>/<uuid>.safetensors
                                                     the tensors of each workload as evoteam makes them: its index
                                                     tensors and the inputs whose distribution flashinfer-bench's
                                                     "random" does not describe (a task's BLOB_INPUTS); the
                                                     workload's inputs point here

Names and identities:
  solutions  named as bench names them in its traces: a kernel file by its task and content
             (trace_writer.solution_name), a solution JSON by its own name. `--solution PATH` is the source of the
             traces that name it so; `--solution NAME=PATH` of the traces that name NAME (older bench traces name a
             file by its stem), exported under its content name. A NAME that is a content name is the hash of its
             source: given for a file of another content, it is refused. A name is one solution in the whole dataset: two
             different solutions of one name, or one that differs from the file of its name already in the folder,
             are refused before anything is written.
  workloads  a workload that carries a published uuid while its data are evoteam's own (a task's
             `regenerated_from`: MLA's index tensors) is exported under a uuid of its own (uuid5 of the published
             one), with the published uuid in "origin" (not a FlashInfer-Trace field; flashinfer-bench ignores it).
             Traces carry their workload; it is rewritten the same way in both files. Traces of a dataset's
             workloads (run_dataset) take definition and workload from --dataset DIR (class Sources), blobs copied.
  checks     a check-only trace (bench --check-only) has evaluation null and its verdict in "check", as
             trace_writer.to_trace writes it: flashinfer-bench requires performance of a PASSED evaluation. It is
             exported to checks/, not traces/: flashinfer-bench has no status for it (in traces/ it would count as
             failed in TraceSet.summary() and make Trace.is_successful() raise).
  sources    a kernel file is exported as one Python source named so that flashinfer-bench can import it (no dots in
             its stem), language python, or triton where it imports Triton, its imported packages its dependencies
             (candidate.solution_of_path); a solution JSON whose entry file it cannot import is refused.
Exporting into a folder that holds a dataset adds to it (a line already there is not written twice) and changes
nothing there: a definition, workload or solution there that differs from the export's is refused. The folder is read
as flashinfer-bench reads it (definitions/, solutions/ and workloads/ at any depth). Every name that becomes part of a
path (a definition's name and op_type, a solution's name, a workload's uuid: any string in FlashInfer-Trace) must be one
plain file name (`file_name`), and every path must stay inside the folder (`_inside`): nothing is written outside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from evoteam import dataset
from evoteam.blobs import read_safetensors, write_safetensors
from evoteam.errors import UserError, exit_code_of
from evoteam.harness.candidate import CandidateError, solution_of_path
from evoteam.schema import (
    TRACE_INCORRECT_NUMERICAL,
    TRACE_PASSED,
    Correctness,
    Definition,
    Evaluation,
    InputSpec,
    SchemaError,
    Solution,
    Trace,
    Workload,
    load_traces,
    read_jsonl,
)
from evoteam.task import SCALES, Task, available_tasks, load_task
from evoteam.tolerance import RULE_FIB
from evoteam.trace_writer import (
    FIB_VERDICT,
    is_content_name,
    non_finite_errors,
    solution_name,
    solution_name_of_file,
)

# Where an export puts check-only traces (Dataset.add_trace): beside traces/, in a folder flashinfer-bench does not read
CHECKS = "checks"

# The namespace of the uuids an export gives workloads whose data evoteam made anew for a published uuid
REGENERATED = uuid.uuid5(uuid.NAMESPACE_URL, "evoteam/export/regenerated-workload-data")


# ---------------------------------------------------------------- a workload as exported


def published_uuid(task: Task, workload: Workload) -> str | None:
    """The published workload whose data the task makes anew for this one (its `regenerated_from`), if any."""
    fn = getattr(task.module, "regenerated_from", None)
    return None if fn is None else fn(workload)


def exported_uuid(task: Task, workload: Workload) -> str:
    """The workload's uuid in an export: one of its own where it carries a published uuid but evoteam's data (the
    published uuid names the published data)."""
    if published_uuid(task, workload) == workload.uuid:
        return str(uuid.uuid5(REGENERATED, workload.uuid))
    return workload.uuid


def blob_inputs(task: Task, workload: Workload) -> list[str]:
    """The inputs an export gives as blobs: the workload's safetensors inputs, and the task's BLOB_INPUTS (random in
    its workloads, but from distributions of the task's own)."""
    own = getattr(task.module, "BLOB_INPUTS", ())
    return [n for n, spec in workload.inputs.items() if spec.type == "safetensors" or (spec.type == "random" and n in own)]


def blob_tensors(task: Task, workload: Workload, names: list[str]) -> dict[str, Any]:
    """Those inputs as the task makes them (its module's blob_tensors)."""
    tensors = task.module.blob_tensors(workload) if hasattr(task.module, "blob_tensors") else {}
    missing = [n for n in names if n not in tensors]
    if missing:
        raise RuntimeError(f"task {task.name}: blob_tensors gave no {missing} for workload {workload.uuid}")
    return {n: tensors[n] for n in names}


def fib_evaluation(evaluation: Evaluation, where: str) -> Evaluation:
    """The evaluation as exported: flashinfer-bench's verdict where evoteam's rule passed what its rule does not (the
    trace's record of both, trace_writer.FIB_VERDICT), so that an export says PASSED only where flashinfer-bench's own
    rule does. A PASSED by evoteam's rule with no record of flashinfer-bench's verdict (an older evoteam's trace) is
    refused: nothing in it says whether flashinfer-bench would pass it."""
    if evaluation.status != TRACE_PASSED:
        return evaluation
    extra = (evaluation.correctness.extra if evaluation.correctness is not None else None) or {}
    if extra.get("rule") == RULE_FIB:  # judged by flashinfer-bench's rule: its verdict already
        return evaluation
    verdict = extra.get(FIB_VERDICT)
    if not isinstance(verdict, dict) or verdict.get("status") not in (TRACE_PASSED, TRACE_INCORRECT_NUMERICAL):
        raise UserError(f"{where}: PASSED by evoteam's rule, with no record of flashinfer-bench's verdict (a trace of "
                        f"an older evoteam); bench the kernel again with this version, whose traces record both")
    if verdict["status"] == TRACE_PASSED:
        return evaluation
    try:
        correctness = Correctness(max_relative_error=float(verdict["max_relative_error"]),
                                  max_absolute_error=float(verdict["max_absolute_error"]), extra=extra)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{where}: its record of flashinfer-bench's verdict has no errors (not written by evoteam); "
                        f"bench the kernel again with this version") from None
    log = (f"{evaluation.log} | exported with flashinfer-bench's verdict, {verdict['status']}: its rule (atol = rtol = "
           f"{verdict.get('rtol', 1e-2):g}, every element, no NaN or Inf) fails {verdict.get('elements_failed', '?')} "
           f"elements that evoteam's rule passed")
    return replace(evaluation, status=verdict["status"], correctness=correctness, performance=None, log=log)


def _core(workload: dict) -> dict:
    """A workload JSON without what the format does not define (what flashinfer-bench reads of it)."""
    return Workload.from_json(workload).to_json()


# The longest name a file of the folder takes here (most file systems allow 255 bytes; ".safetensors" is 12 of them)
MAX_NAME_BYTES = 200


def file_name(name: object, what: str, where: str) -> str:
    """A name from a solution, trace or definition that becomes one component of a path in the folder, refused unless
    it is one plain file name: a FlashInfer-Trace name is any string, and it comes from JSON anyone can write."""
    problem = None
    if not isinstance(name, str) or not name:
        problem = "it is empty" if name == "" else f"it is a {type(name).__name__}, not a string"
    elif name in (".", ".."):
        problem = f"it is {name!r}"
    elif "/" in name or "\\" in name:
        problem = "it holds a path separator"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        problem = "it holds a control character"
    elif len(name.encode()) > MAX_NAME_BYTES:
        problem = f"it is longer than {MAX_NAME_BYTES} bytes"
    if problem is not None:
        raise UserError(f"{where}: {what} {name!r} cannot name a file in the dataset folder ({problem}); rename it")
    return name


def _inside(root: Path, *parts: str) -> Path:
    """root/parts, refused where it would lead out of root (a part that is a path, or a link in the folder that
    points elsewhere): nothing is ever written outside the export's folder."""
    path = root.joinpath(*parts)
    base = root.resolve()
    if not path.resolve().is_relative_to(base):
        raise UserError(f"{path}: leads out of {root} (through a link in the folder?); export into a folder without "
                        f"links that lead out of it")
    return path


def _definition_identity(obj: dict) -> str:
    """What makes two definition JSONs one definition, as evoteam's schema reads them: the name, axes, inputs,
    outputs, constraints and reference (descriptions and tags are prose; empty constraints and none alike)."""
    out = Definition.from_json(obj).to_json()
    out.pop("description", None)
    out.pop("tags", None)
    if not out.get("constraints"):
        out.pop("constraints", None)
    for group in ("axes", "inputs", "outputs"):
        for spec in out[group].values():
            spec.pop("description", None)
    return json.dumps(out, sort_keys=True)


def _identity(solution: dict) -> str:
    """What makes two solution JSONs one kernel: definition, build spec (but the hardware it ran on) and sources; the
    name of a single source file is not part of it (the same bytes under two file names are one kernel)."""
    try:
        solution = Solution.from_json(solution).to_json()  # the defaults filled in, as flashinfer-bench reads it
    except (SchemaError, KeyError, TypeError):
        pass
    spec = {k: v for k, v in solution.get("spec", {}).items() if k != "target_hardware"}
    sources = solution.get("sources")
    if isinstance(sources, list) and len(sources) == 1 and isinstance(sources[0], dict):
        sources = [sources[0].get("content")]
        spec["entry_point"] = "::" + str(spec.get("entry_point", "")).partition("::")[2]
    return json.dumps([solution.get("definition"), spec, sources], sort_keys=True)


def _importable(solution: Solution, where: str) -> None:
    """A Python or Triton solution's entry file as flashinfer-bench's builder imports it: as the module its path names
    (`main.v2.py` as `main.v2`, a submodule of a package `main` that is not there), refused where that cannot work."""
    if solution.spec.language not in ("python", "triton"):
        return
    entry = solution.spec.entry_point.split("::", 1)[0]
    if any("." in part for part in Path(entry).with_suffix("").parts):
        raise UserError(f"{where}: solution {solution.name!r}: flashinfer-bench imports its entry file {entry!r} as "
                        f"the module {Path(entry).with_suffix('').as_posix().replace('/', '.')!r}, which cannot be "
                        f"imported; rename the file without dots in its name (and its entry_point)")


# ---------------------------------------------------------------- the folder


class Dataset:
    """An export folder: what it holds and what this export adds to it, all checked before anything is written.

    What the folder holds is read as flashinfer-bench reads it, every file of definitions/, solutions/ and workloads/
    at any depth: a definition, solution or workload there under another path is the same name all the same."""

    def __init__(self, root: Path):
        self.root = root
        self.counts = {"definitions": 0, "workloads": 0, "solutions": 0, "traces": 0, "checks": 0, "blobs": 0}
        self._definitions: dict[Path, Task] = {}  # to write
        self._known_defs: dict[str, tuple[str, str]] | None = None  # name -> (identity, where), there or added
        # (definition, uuid) -> (workload JSON, where), there or added
        self._workloads: dict[tuple[str, str], tuple[dict, str]] | None = None
        self._new_workloads: list[tuple[Task, Workload, Path, Path, list[str], dict]] = []
        self._solutions: dict[str, tuple[str, str, bool]] | None = None  # name -> (identity, where, in the folder)
        self._new_solutions: dict[Path, Solution] = {}
        self._traces: dict[Path, set[str]] = {}  # traces file -> its lines, there or added
        self._new_traces: list[tuple[Path, dict]] = []

    def _path(self, *parts: str) -> Path:
        return _inside(self.root, *parts)

    def _names(self, task: Task) -> tuple[str, str]:
        """The definition's op_type and name, each checked to be one file name."""
        d = task.definition
        return (file_name(d.op_type, "op_type", f"definition {d.name!r}"),
                file_name(d.name, "definition name", f"task {task.name}"))

    # ---------------------------------------------------------------- what the export adds
    def add_definition(self, task: Task) -> None:
        """The task's definition, unless the folder holds it (under any path); another definition of its name there
        is refused: the traces would be read against the one and were judged against the other."""
        op_type, name = self._names(task)
        known = self._known_definitions()
        identity = _definition_identity(task.definition.to_json())
        if name in known:
            have, where = known[name]
            if have != identity:
                raise UserError(f"{where}: another definition named {name!r} than task {task.name}'s (its axes, "
                                f"inputs, outputs or reference differ); export into a new folder")
            return
        path = self._path("definitions", op_type, f"{name}.json")
        known[name] = (identity, str(path))
        self._definitions[path] = task

    def _known_definitions(self) -> dict[str, tuple[str, str]]:
        if self._known_defs is None:
            self._known_defs = {}
            for path in sorted((self.root / "definitions").rglob("*.json")):
                try:
                    obj = json.loads(path.read_text())
                    identity = _definition_identity(obj)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise UserError(f"{path}: not a FlashInfer-Trace definition ({exc}), so flashinfer-bench does not "
                                    f"load this folder either; fix or remove it, or export into a new folder") from None
                if obj["name"] in self._known_defs:
                    raise UserError(f"{path} and {self._known_defs[obj['name']][1]} both define {obj['name']!r}, so "
                                    f"flashinfer-bench does not load this folder; remove one, or export into a new "
                                    f"folder")
                self._known_defs[obj["name"]] = (identity, str(path))
        return self._known_defs

    def _known_workloads(self) -> dict[tuple[str, str], tuple[dict, str]]:
        if self._workloads is None:
            self._workloads = {}
            for path in sorted((self.root / "workloads").rglob("*.jsonl")):
                try:
                    for obj in read_jsonl(path):
                        Workload.from_json(obj["workload"])
                        key = (obj["definition"], obj["workload"]["uuid"])
                        self._workloads.setdefault(key, (obj["workload"], str(path)))
                except (ValueError, KeyError, TypeError) as exc:
                    raise UserError(f"{path}: not FlashInfer-Trace workload lines ({exc}), so flashinfer-bench does "
                                    f"not load this folder either; fix or remove it, or export into a new folder") \
                        from None
        return self._workloads

    def add_workload(self, task: Task, workload: Workload) -> dict:
        """The task's workload as exported (its blob inputs point into this folder, its uuid `exported_uuid`)."""
        op_type, name = self._names(task)
        own = file_name(exported_uuid(task, workload), "workload uuid", f"task {task.name}")
        blob = Path("blob") / "workloads" / op_type / name / f"{own}.safetensors"
        names = blob_inputs(task, workload)
        inputs = {n: InputSpec(type="safetensors", path=f"./{blob.as_posix()}", tensor_key=n) if n in names else spec
                  for n, spec in workload.inputs.items()}
        exported = Workload(axes=dict(workload.axes), inputs=inputs, uuid=own).to_json()
        published = published_uuid(task, workload)
        if published is not None:  # not FlashInfer-Trace fields: a pointer for people, ignored by its loader
            exported["origin"] = published
            exported["description"] = (f"inputs as evoteam's task {task.name} makes them ({', '.join(names)}), not "
                                       f"the published data of workload {published}")
        known = self._known_workloads()
        there = known.get((name, own))
        if there is None:
            path = self._path("workloads", op_type, f"{name}.jsonl")
            known[(name, own)] = (exported, str(path))
            self._new_workloads.append((task, workload, path, self._path(*blob.parts), names, exported))
            return exported
        if _core(there[0]) != _core(exported) and not self._same_data(task, workload, names, there):
            raise UserError(f"{there[1]}: workload {own} there has other axes or inputs than this export gives it (an "
                            f"export of another evoteam version?); export into a new folder")
        return there[0]  # as the folder has it (its blobs where they are): the traces carry it so

    def _same_data(self, task: Task, workload: Workload, names: list[str], there: tuple[dict, str]) -> bool:
        """Whether the folder's workload of that uuid is this one with its blobs elsewhere (a dataset written by
        flashinfer-bench, or the one the traces were run on): the same axes and inputs, and every blob tensor the same
        bit for bit."""
        theirs = Workload.from_json(there[0])
        if theirs.axes != workload.axes or set(theirs.inputs) != set(workload.inputs):
            return False
        for n, spec in theirs.inputs.items():
            mine = workload.inputs[n]
            if (spec.type == "safetensors") != (n in names) or (spec.type == "scalar" and spec != mine):
                return False
        if not names:
            return True
        want = blob_tensors(task, workload, names)
        for n in names:
            spec = theirs.inputs[n]
            path = Path(spec.path) if Path(spec.path).is_absolute() else self.root / spec.path
            try:
                have = read_safetensors(path)[spec.tensor_key]
            except (OSError, KeyError, ValueError):
                return False
            if have.dtype != want[n].dtype or have.shape != want[n].shape or not torch.equal(
                    have.contiguous().view(torch.uint8), want[n].contiguous().view(torch.uint8)):
                return False
        return True

    def add_solution(self, task: Task, solution: Solution, where: str) -> None:
        """A solution the traces name, refused where its name is another solution's in the folder or in this export."""
        op_type, name = self._names(task)
        if solution.definition != name:
            raise UserError(f"{where}: solution {solution.name!r} is for definition {solution.definition!r}, the "
                            f"traces naming it for {name!r}; give the solution they were measured with")
        file_name(solution.name, "solution name", where)
        _importable(solution, where)
        known = self._known_solutions()
        identity = _identity(solution.to_json())
        if solution.name not in known:
            path = self._path("solutions", op_type, name, f"{solution.name}.json")
            known[solution.name] = (identity, where, False)
            self._new_solutions[path] = solution
            return
        have, first, in_folder = known[solution.name]
        if have == identity:
            return
        if in_folder:  # overwriting it would change what the traces there name
            raise UserError(f"{where}: {first} is another solution of the name {solution.name!r}, which the traces "
                            f"there name; export into a new folder")
        raise UserError(f"{first} and {where} are different solutions named {solution.name!r}; rename one (a solution "
                        f"JSON's \"name\")")

    def _known_solutions(self) -> dict[str, tuple[str, str, bool]]:
        """Every solution of the folder by name (flashinfer-bench reads solutions/ whole: a name is one solution)."""
        if self._solutions is None:
            self._solutions = {}
            for path in sorted((self.root / "solutions").rglob("*.json")):
                try:
                    obj = json.loads(path.read_text())
                    self._solutions[obj["name"]] = (_identity(obj), str(path), True)
                except (ValueError, KeyError, TypeError):
                    continue  # not a solution: flashinfer-bench's loader says so
        return self._solutions

    def add_trace(self, task: Task, trace: Trace, origin: str, held: Workload | None = None) -> None:
        """A trace, its workload `held` (a dataset's, as the traces were run on it) or else the task's own."""
        workload = self.add_workload(task, held or self._own_workload(task, trace.workload))
        where = f"{origin}: workload {trace.workload.uuid}"
        evaluation, check = trace.evaluation, trace.check
        if evaluation is not None:  # its log begins with evoteam's status
            evaluation = replace(evaluation, correctness=non_finite_errors(evaluation.log.partition(":")[0],
                                                                           evaluation.correctness))
            evaluation = fib_evaluation(evaluation, where)
        if check is not None:
            check = fib_evaluation(check, where)
        line = replace(trace, workload=Workload.from_json(workload), evaluation=evaluation, check=check).to_json()
        key = json.dumps(line, sort_keys=True)
        line["workload"] = workload  # with its pointer to a published workload, as in the workloads file
        op_type, name = self._names(task)
        # A check-only trace (bench --check-only: a verdict, no time) goes to checks/, a folder flashinfer-bench does
        # not read: it has no status for "correct, not timed", and in traces/ such a line (evaluation null) loads but
        # counts as failed in its summary() and makes Trace.is_successful() raise
        path = self._path(CHECKS if evaluation is None and check is not None else "traces", op_type, f"{name}.jsonl")
        if path not in self._traces:
            self._traces[path] = {json.dumps(t.to_json(), sort_keys=True) for t in _read_traces(path)} \
                if path.is_file() else set()
        seen = self._traces[path]
        if key not in seen:
            seen.add(key)
            self._new_traces.append((path, line))

    def _own_workload(self, task: Task, workload: Workload) -> Workload:
        """The task's workload of that uuid at any scale (the one whose index tensors the task makes), by its own uuid
        or by the uuid an export gives it (`exported_uuid`: the traces of a dataset evoteam exported name that one)."""
        own = own_workloads(task)
        if workload.uuid not in own:
            raise UserError(f"workload {workload.uuid} of the traces is none of task {task.name}'s (at any scale, "
                            f"under its own uuid or an export's); give --dataset DIR, the dataset folder the traces "
                            f"were run on (python -m evoteam.run_dataset DIR), whose workloads they are")
        if own[workload.uuid].axes != workload.axes:
            raise UserError(f"workload {workload.uuid}: the traces give axes {workload.axes}, the task {task.name} "
                            f"{own[workload.uuid].axes}; give --dataset DIR, the dataset folder the traces were run on")
        return own[workload.uuid]

    # ---------------------------------------------------------------- writing
    def write(self) -> None:
        for path, task in self._definitions.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(task.definition.to_json(), indent=2) + "\n")
            self.counts["definitions"] += 1
        for task, workload, path, blob, names, exported in self._new_workloads:
            if names:
                write_safetensors(blob, blob_tensors(task, workload, names))
                self.counts["blobs"] += 1
            _append(path, {"definition": task.definition.name, "solution": None, "workload": exported,
                           "evaluation": None})
            self.counts["workloads"] += 1
        for path, solution in self._new_solutions.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(solution.to_json(), indent=2) + "\n")
            self.counts["solutions"] += 1
        for path, line in self._new_traces:
            _append(path, line)
            self.counts[CHECKS if path.relative_to(self.root).parts[0] == CHECKS else "traces"] += 1


def _append(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:  # strict JSON: non-finite floats are written as strings upstream
        fh.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")


# ---------------------------------------------------------------- the command's sources


def task_of_definition(name: str) -> Task:
    for task_name in available_tasks():
        task = load_task(task_name)
        if task.definition.name == name:
            return task
    raise UserError(f"no task of this installation defines {name!r} (tasks: {', '.join(available_tasks())}); give "
                    f"--dataset DIR, the dataset folder the traces were run on")


_OWN: dict[str, dict[str, Workload]] = {}


def own_workloads(task: Task) -> dict[str, Workload]:
    """A task's workloads at every scale, by their own uuids and by the uuids an export gives them."""
    if task.name not in _OWN:
        _OWN[task.name] = own = {}
        for scale in SCALES:
            for w in task.scaled_workloads(scale):
                own[w.uuid] = own[exported_uuid(task, w)] = w
    return _OWN[task.name]


class Sources:
    """Where a trace's definition and workload come from: the first --dataset folder that defines its definition and
    holds its workload, as the traces were run on it (run_dataset); else evoteam's task of that definition where the
    workload is one of the task's; else the export's own folder where it holds them; else evoteam's task (which
    refuses a workload not its own). A dataset's definition and workloads are read, never its code run; its blobs
    must lie inside it."""

    def __init__(self, datasets: list[Path], out: Path):
        self.folders, self.out = [*datasets, out], out
        self._held: dict[tuple[Path, str], dict[str, Workload] | None] = {}

    def find(self, trace: Trace, origin: str) -> tuple[Task, Workload | None]:
        own = None
        try:
            own = task_of_definition(trace.definition)
        except UserError:
            pass
        for root in self.folders:
            if root == self.out and own is not None and trace.workload.uuid in own_workloads(own):
                return own, None  # evoteam's own workload: made by its task, named as its bench names kernels
            held = self._workloads(root, trace.definition).get(trace.workload.uuid)
            if held is None:
                continue
            where = f"{origin}: workload {held.uuid} ({root})"
            if held.axes != trace.workload.axes or set(held.inputs) != set(trace.workload.inputs):
                raise UserError(f"{where}: the traces give it other axes or inputs than the folder; give the folder "
                                f"the traces were run on")
            for name, spec in held.inputs.items():
                if spec.type == "safetensors":
                    _inside_dataset(root, spec.path, f"{where} input {name}")
            return load_task(dataset.task_name(root, trace.definition), data_only=True), held
        return own or task_of_definition(trace.definition), None

    def _workloads(self, root: Path, definition: str) -> dict[str, Workload]:
        key = (root, definition)
        if key not in self._held:
            found = None
            if (root / "definitions").is_dir() and definition in dataset.definitions(root):
                found = {w.uuid: w for w in load_task(dataset.task_name(root, definition), data_only=True).workloads}
            self._held[key] = found
        return self._held[key] or {}


def _inside_dataset(root: Path, path: str, where: str) -> None:
    """A blob a dataset's workload points to, refused unless it lies inside the dataset (an export copies it)."""
    if Path(path).is_absolute() or ".." in Path(path).parts or not (root / path).resolve().is_relative_to(
            root.resolve()):
        raise UserError(f"{where}: blob path {path!r} leads out of the dataset folder; an export copies only a "
                        f"dataset's own blobs: give its blobs a path inside it")


def _read_traces(path: Path) -> list[Trace]:
    if not path.is_file():
        raise UserError(f"{path}: no such traces file; give the file bench --traces or a run's final/traces.jsonl")
    try:
        return load_traces(path)
    except (SchemaError, ValueError, KeyError) as exc:
        raise UserError(f"{path}: not FlashInfer-Trace lines ({exc})") from None


def _run_traces(run_dir: Path) -> tuple[str, list[Trace], dict[str, Solution]]:
    traces = run_dir / "final" / "traces.jsonl"
    if not traces.is_file():
        raise UserError(f"--run {run_dir}: no final/traces.jsonl (the run did not finish); give a finished run")
    solutions = {}
    for path in sorted((run_dir / "final" / "solutions").glob("*.json")):
        solution = Solution.from_json(json.loads(path.read_text()))
        solutions[solution.name] = solution
    return f"--run {run_dir}", _read_traces(traces), solutions


class GivenSolutions:
    """The --solution arguments: NAME=PATH, the source of the traces that name NAME; or PATH, of the traces that name
    it as bench does (trace_writer.solution_name_of_file: per task, by content)."""

    def __init__(self, texts: list[str]):
        self.entries: list[tuple[str | None, Path, str]] = []
        for text in texts:
            name, sep, path = text.partition("=")
            if not Path(path if sep else text).is_file():
                raise UserError(f"--solution {text}: no such file; give the kernel file the traces were measured with")
            self.entries.append((name if sep else None, Path(path if sep else text), f"--solution {text}"))
        self._names: dict[tuple[str, Path], list[str]] = {}
        self._tasks: dict[str, str] = {}  # a NAME of NAME=PATH -> the task whose traces it was given for

    def _names_of(self, task: Task, path: Path) -> list[str]:
        """The names traces give this file for the task's definition, the export's name first: a solution JSON its own;
        a kernel file its content name (trace_writer.solution_name) under the task's name, and under the other names
        bench gives that definition's task (an installed task of the definition, `bench --task mla_decode`; a dataset's,
        `bench --task DIR::DEFINITION`, by the definition's name): the hash is the content, the prefix the task."""
        key = (task.name, path)
        if key not in self._names:
            if path.suffix == ".json":
                self._names[key] = [solution_name_of_file(task.name, path)]
            else:
                text = path.read_text()
                prefixes = [task.name, task.definition.name,
                            *(t for t in available_tasks() if load_task(t).definition.name == task.definition.name)]
                self._names[key] = list(dict.fromkeys(solution_name(prefix, text) for prefix in prefixes))
        return self._names[key]

    def find(self, task: Task, name: str | None) -> tuple[Solution, str] | None:
        """The solution, under its export name, of the traces of `task` that name `name`, and the argument giving it."""
        if name is None:  # a workload trace: no solution to find
            return None
        found = [(p, w) for n, p, w in self.entries if n == name]
        if found and self._tasks.setdefault(name, task.name) != task.name:
            # a name that is not the content's (a file's stem in older bench traces) says nothing of the task
            raise UserError(f"{found[0][1]}: traces of {self._tasks[name]} and of {task.name} name {name!r}; export "
                            f"each task's traces on its own, each with the {name}=PATH of its own kernel")
        found = found or [(p, w) for n, p, w in self.entries if n is None and name in self._names_of(task, p)]
        for path, where in found:
            if is_content_name(name) and name not in self._names_of(task, path):
                # a content name is its source's hash: a file of another content is not what the traces measured
                raise UserError(f"{where}: the traces name {name!r}, the content name of another source than this file "
                                f"(its own is {self._names_of(task, path)[0]!r}: edited since it was measured?); give "
                                f"the file the traces were measured with, unchanged")
        solutions = [(self._solution(task, path, where, name), where) for path, where in found]
        different = [w for s, w in solutions[1:] if _identity(s.to_json()) != _identity(solutions[0][0].to_json())]
        if different:
            raise UserError(f"{solutions[0][1]} and {different[0]} are different sources for the traces naming "
                            f"{name!r}; give one")
        return solutions[0] if solutions else None

    def _solution(self, task: Task, path: Path, where: str, traced: str) -> Solution:
        try:
            solution = solution_of_path(path, task.definition.name)
        except CandidateError as exc:
            raise UserError(f"{where}: {exc}") from None
        if path.suffix != ".json":  # a kernel file: named by its content, whatever else the traces called it
            names = self._names_of(task, path)
            solution = replace(solution, name=traced if traced in names else names[0])
        return solution


def export(args: argparse.Namespace) -> dict[str, int]:
    unknown = [name for name in args.task if name not in available_tasks()]
    if unknown:
        raise UserError(f"--task {unknown[0]}: not a known task; allowed: {', '.join(available_tasks())}")
    runs = [_run_traces(run_dir) for run_dir in args.run]
    given = GivenSolutions(args.solution)
    runs += [(f"--traces {path}", _read_traces(path), None) for path in args.traces]
    out = Dataset(args.out)
    for name in args.task:
        task = load_task(name)
        out.add_definition(task)
        for workload in task.scaled_workloads(args.scale):
            out.add_workload(task, workload)
    sources = Sources(args.dataset, args.out)
    for origin, traces, solutions in runs:
        for trace in traces:
            task, held = sources.find(trace, origin)
            if solutions is not None:
                found = (solutions[trace.solution], origin) if trace.solution in solutions else None
            else:
                found = given.find(task, trace.solution)
            if found is None:
                # NAME=PATH is for names that do not say which content they are (older traces name a file by its
                # stem); a content name is matched by content alone, so only the unchanged file is its source
                how = ("" if trace.solution is None or is_content_name(trace.solution)
                       else f" or --solution {trace.solution}=PATH")
                raise UserError(f"{origin}: the traces name solution {trace.solution!r} but no source was given for "
                                f"it; add --solution PATH (the file it was measured with, unchanged){how}")
            solution, where = found
            out.add_definition(task)
            out.add_solution(task, solution, where)
            out.add_trace(task, replace(trace, solution=solution.name), origin, held)
    out.write()  # only once everything is known to fit
    return out.counts


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evoteam.export", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the dataset folder (created; an existing dataset is added to)")
    p.add_argument("--task", action="append", default=[], help="export this task's definition and workloads")
    p.add_argument("--scale", default="full", choices=SCALES, help="the problem scale of --task's workloads")
    p.add_argument("--run", action="append", type=Path, default=[], help="a finished main-job run folder")
    p.add_argument("--traces", action="append", type=Path, default=[], help="a traces file (bench --traces)")
    p.add_argument("--dataset", action="append", type=Path, default=[],
                   help="the dataset folder the traces were run on (run_dataset DATASET): their definitions and "
                        "workloads, blobs included, are taken from it")
    p.add_argument("--solution", action="append", default=[],
                   help="the source of solutions --traces names: PATH (the traces that name it as bench does: by task "
                        "and content, a solution JSON by its name) or NAME=PATH (the traces that name NAME)")
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
    from evoteam import process_exit

    process_exit.run(main)
