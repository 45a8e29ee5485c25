"""A flashinfer-bench dataset folder (definitions/, workloads/, solutions/, blob/) as evoteam tasks.

Each definition is a task named `<dataset folder>::<definition name>`, usable wherever a task name is
(`python -m evoteam.bench SOLUTION --task <folder>::<definition>`; `python -m evoteam.run_dataset`
runs every solution of a folder). Inputs are made as flashinfer-bench makes them: `random` inputs
with its distributions (from evoteam's secret-seeded generator, fresh per trial), `scalar` values,
`safetensors` tensors read from the folder's blobs; the reference is the definition's own code;
tolerances are flashinfer-bench's defaults (atol = rtol = 1e-2) for floating outputs, exact for the rest.
A dataset's workloads are what they are at every scale (same axes, same uuid).
"""

from __future__ import annotations

import json
import linecache
import sys
import types
from functools import cache
from pathlib import Path

import torch

from evoteam.blobs import read_safetensors
from evoteam.errors import UserError
from evoteam.schema import Definition, SchemaError, Trace, Workload, read_jsonl
from evoteam.tolerance import DTYPE_TOLERANCES, Tolerance

SEPARATOR = "::"
FIB_TOLERANCE = (1e-2, 1e-2)  # flashinfer-bench's BenchmarkConfig defaults (atol, rtol)
_INT_RANGES = {torch.int8: (-128, 128), torch.int16: (-1024, 1024), torch.int32: (-1024, 1024),
               torch.int64: (-1024, 1024)}


def is_dataset_task(name: str) -> bool:
    return SEPARATOR in name


def task_name(root: str | Path, definition: str) -> str:
    return f"{Path(root).resolve()}{SEPARATOR}{definition}"


def definitions(root: str | Path) -> dict[str, dict]:
    """Definition name -> its JSON, for every definition of the folder."""
    out = {}
    for path in sorted((Path(root) / "definitions").rglob("*.json")):
        try:
            obj = json.loads(path.read_text())
            out[obj["name"]] = obj
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a FlashInfer-Trace definition ({exc}); fix or remove it") from None
    return out


def solutions(root: str | Path, definition: str) -> list[Path]:
    """The solution files of a definition in the folder."""
    return [p for p in sorted((Path(root) / "solutions").rglob("*.json"))
            if json.loads(p.read_text()).get("definition") == definition]


def module_from_source(source: str, name: str, filename: str) -> types.ModuleType:
    """A module of Python source that is no file of its own (a definition's reference code), registered under `name`;
    its lines are known to linecache under `filename`, so that tracebacks and inspect show them."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102
    return module


@cache
def load_parts(name: str) -> dict:
    """What `evoteam.task.load_task` builds the task from: folder, definition, workloads, hooks, reference."""
    parts = data_parts(name)
    definition = parts["definition"]
    reference = module_from_source(definition.reference, f"{parts['module'].__name__.removesuffix('_task')}_reference",
                                   f"<{definition.name} reference>")
    return {**parts, "reference_module": reference}


@cache
def data_parts(name: str) -> dict:
    """The task's data without its reference code run (an export copies a dataset; it runs none of its code):
    folder, definition, workloads and the hooks that read its blobs; `reference_module` None."""
    root_text, _, definition_name = name.rpartition(SEPARATOR)
    root = Path(root_text)
    if not (root / "definitions").is_dir():
        raise UserError(f"task {name!r}: {root} is not a flashinfer-bench dataset folder (no definitions/); give "
                        f"<dataset folder>::<definition name>")
    found = definitions(root)
    if definition_name not in found:
        raise UserError(f"task {name!r}: the dataset defines no {definition_name!r}; it defines: "
                        f"{', '.join(found) or 'nothing'}")
    try:
        definition = Definition.from_json(found[definition_name])
    except SchemaError as exc:
        raise UserError(f"task {name!r}: {exc}; fix the definition") from None
    workloads = []
    for path in sorted((root / "workloads").rglob("*.jsonl")):
        try:
            traces = [Trace.from_json(obj) for obj in read_jsonl(path)]
        except (SchemaError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not FlashInfer-Trace workload lines ({exc}); fix or remove it") from None
        workloads += [trace.workload for trace in traces if trace.definition == definition_name]
    tag = f"evoteam_dataset_{abs(hash(name))}"
    return {"folder": root, "definition": definition, "workloads": workloads, "module": _hooks(root, definition, tag),
            "reference_module": None}


def _hooks(root: Path, definition: Definition, tag: str) -> types.ModuleType:
    """The task hooks (see evoteam/task.py) of a dataset definition."""
    module = types.ModuleType(f"{tag}_task")
    atol, rtol = FIB_TOLERANCE
    module.TOLERANCES = {name: Tolerance(atol=atol, rtol=rtol, max_rel_norm=DTYPE_TOLERANCES[spec.dtype].max_rel_norm
                                         if spec.dtype in DTYPE_TOLERANCES else 1e-2)
                         for name, spec in definition.outputs.items() if spec.dtype.startswith(("float", "bfloat"))}

    def scaled_workloads(workloads: list[Workload], scale: str) -> list[Workload]:
        return list(workloads)

    def blob_tensors(workload: Workload) -> dict[str, torch.Tensor]:
        out = {}
        for name, spec in workload.inputs.items():
            if spec.type == "safetensors":
                path = Path(spec.path) if Path(spec.path).is_absolute() else root / spec.path
                tensors = read_safetensors(path)
                if spec.tensor_key not in tensors:
                    raise ValueError(f"workload {workload.uuid}: {path} holds no tensor {spec.tensor_key!r}")
                out[name] = tensors[spec.tensor_key]
        return out

    def make_inputs(workload: Workload, generator: torch.Generator, device) -> dict:
        shapes = definition.input_shapes(workload.axes)
        blobs = blob_tensors(workload)
        out = {}
        for name, spec in definition.inputs.items():
            given = workload.inputs.get(name)
            if given is not None and given.type == "scalar":
                out[name] = given.value
            elif name in blobs:
                out[name] = blobs[name].to(device)
            else:
                out[name] = _random(shapes[name], getattr(torch, spec.dtype), generator, device)  # the names are torch's
        return out

    module.scaled_workloads, module.blob_tensors, module.make_inputs = scaled_workloads, blob_tensors, make_inputs
    return module


def _random(shape, dtype: torch.dtype, generator: torch.Generator, device) -> torch.Tensor:
    """flashinfer-bench's distributions (bench/utils.py _rand_tensor), from the judge's generator."""
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.randn(shape, dtype=dtype, generator=generator, device=device)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.randn(shape, generator=generator, device=device).clamp_(-2.0, 2.0).to(dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=generator, device=device).bool()
    low, high = _INT_RANGES[dtype]
    return torch.randint(low, high, shape, dtype=dtype, generator=generator, device=device)
