"""A kernel task: its definition, workloads, input maker, reference and seed kernel.

Each task is a folder `kernels/<name>/` (data, not an import package) holding:
  definition.json   FlashInfer-Trace definition, complete as flashinfer-bench reads it: its "reference" is the
                    Python source of `run(<inputs in definition order>) -> tuple of outputs`, exact, fp32
                    accumulate (the one home of the task's math; `Task.reference_module` is it, loaded), and
                    its "constraints" are Python expressions over the axes and the inputs
  workloads.jsonl   FlashInfer-Trace workload traces (one JSON object per line)
  oracle.py         (optional) a fast `run` with the reference's signature and math (fp32; only the order of
                    the sums may differ), e.g. a Triton kernel: `Task.reference` uses it on GPU inputs
                    (Triton not interpreted), the definition's reference elsewhere; the reference stays the
                    definition, and a test must show that the two agree
  task.py           the task's own logic, module-level functions:
                      scaled_workloads(workloads, scale) -> list[Workload]
                          the workloads to run at a problem scale ("full" or "small"); "small" is a
                          subset with a scaled-down problem for CPU runs (axes rewritten, and the
                          uuid then `scaled_uuid(published, scale)`)
                      make_inputs(workload, generator, device) -> dict[name, Tensor | scalar]
                          fresh random data from `generator` (a torch.Generator on `device`); index
                          structure deterministic per workload
                      blob_tensors(workload) -> dict[name, Tensor]   the workload's safetensors inputs
                          as it uses them (written by `python -m evoteam.export`)
                      min_bytes(workload, inputs) -> int   (optional) compulsory device-memory traffic
                      workload_group(workload) -> str      (optional) e.g. "batch64", for splitting work
                      TOLERANCES: dict[output name, Tolerance]   (optional per-output overrides)
                    What the harness needs to give every timed call fresh inputs cheaply (all optional):
                      SHARED_INPUTS: names one buffer serves for every call of a batch (a KV-cache
                          pool, as in serving); the rest is per call
                      LATE_INPUTS: names the judge writes only after its clock starts: small inputs
                          every output depends on, so that no work can start before the clock
                      refresh_inputs(workload, sets, generator) fresh values, in place, for the
                          input sets of one batch (default: make_inputs again for each set)
                      decoy_inputs(workload, inputs, names, generator) plausible wrong values for
                          the late inputs until the clock starts (default: their elements shuffled)
                      max_sets(workload) -> int   how many calls one batch can hold (default 16)
                      CHAINED_INPUTS: {input: output}: in a batch of calls, call k+1's input IS call k's
                          output (the same memory; same shape and dtype), as a model's next layer or decode
                          step takes the last one's result: no call can be computed before the call it follows
                          has ended, so one call cannot compute its batch's others. A task that declares no
                          chain is timed one call a batch in graph mode (the calls of a graph batch are
                          released together)
  seed_triton.py    `run(**inputs, **outputs)`: the simple, correct seed kernel (destination-passing)

Kernel calling convention (candidates, seeds, baselines): `entry(**inputs, **outputs)`; inputs and
outputs by the definition's names; the kernel writes every element of every output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid as uuid_module
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from evoteam import resources, triton_interpreter
from evoteam.errors import UserError
from evoteam.schema import Definition, Trace, Workload, read_jsonl
from evoteam.tolerance import DTYPE_TOLERANCES, Tolerance  # noqa: F401 - part of the task contract

SCALES = ("full", "small")


def load_module_from_path(path: Path, name: str | None = None) -> ModuleType:
    """Import a Python file that is not part of a package (kernels/ is data, not a package)."""
    mod_name = name or f"evoteam_loaded_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load Python file {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so that dataclasses and Triton's source inspection can find it.
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    triton_interpreter.apply()  # a kernel file under TRITON_INTERPRET=1: the interpreter cheaper, its results the same
    return module


def available_tasks() -> list[str]:
    root = resources.kernels_dir()
    return sorted(p.name for p in root.iterdir() if (p / "definition.json").is_file())


@dataclass
class Task:
    name: str
    folder: Path
    definition: Definition
    workloads: list[Workload]
    module: ModuleType
    reference_module: ModuleType
    oracle_module: ModuleType | None = None  # the folder's oracle.py, if any: the reference's math, fast on a GPU

    # ------------------------------------------------------------ workloads and inputs
    def scaled_workloads(self, scale: str) -> list[Workload]:
        if scale not in SCALES:
            raise ValueError(f"unknown problem scale {scale!r}; allowed: {', '.join(SCALES)}")
        return list(self.module.scaled_workloads(list(self.workloads), scale))

    def blob_tensors(self, workload: Workload) -> dict[str, Any]:
        """The tensors of the workload's safetensors inputs, as it uses them (what an export writes)."""
        tensors = self.module.blob_tensors(workload) if hasattr(self.module, "blob_tensors") else {}
        wanted = [n for n, spec in workload.inputs.items() if spec.type == "safetensors"]
        missing = [n for n in wanted if n not in tensors]
        if missing:
            raise RuntimeError(f"task {self.name}: blob_tensors gave no {missing} for workload {workload.uuid}")
        return {n: tensors[n] for n in wanted}

    def make_inputs(self, workload: Workload, generator: Any, device: Any) -> dict[str, Any]:
        inputs = self.module.make_inputs(workload, generator, device)
        missing = [n for n in self.definition.inputs if n not in inputs]
        if missing:
            raise RuntimeError(f"task {self.name}: make_inputs did not produce {missing}")
        return {n: inputs[n] for n in self.definition.inputs}

    def var_axes(self, workload: Workload, inputs: dict[str, Any]) -> dict[str, int]:
        """Var-axis values read off the actual input tensors (they may be scaled versions of
        the workload's axes), falling back to the workload's own values."""
        values = dict(workload.axes)
        for name, spec in self.definition.inputs.items():
            tensor = inputs[name]
            for dim, axis in enumerate(spec.shape or ()):
                if self.definition.axes[axis].type == "var":
                    values[axis] = int(tensor.shape[dim])
        return values

    def output_shapes(self, workload: Workload, inputs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        return self.definition.output_shapes(self.var_axes(workload, inputs))

    # ------------------------------------------------------------ reference and tolerances
    def reference(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The exact outputs for `inputs`: from the task's oracle where every input tensor is on a CUDA (or
        ROCm) device, else from the definition's reference (also under Triton's interpreter, where the oracle would
        crawl)."""
        args = [inputs[n] for n in self.definition.inputs]
        on_gpu = {x.device.type for x in args if hasattr(x, "device")} == {"cuda"}
        use_oracle = self.oracle_module is not None and on_gpu and os.environ.get("TRITON_INTERPRET") != "1"
        result = (self.oracle_module if use_oracle else self.reference_module).run(*args)
        if not isinstance(result, tuple):
            result = (result,)
        names = list(self.definition.outputs)
        if len(result) != len(names):
            raise RuntimeError(f"task {self.name}: reference returned {len(result)} outputs, expected {names}")
        return dict(zip(names, result))

    def tolerance(self, output: str) -> Tolerance:
        overrides = getattr(self.module, "TOLERANCES", {})
        if output in overrides:
            return overrides[output]
        return DTYPE_TOLERANCES[self.definition.outputs[output].dtype]

    def min_bytes(self, workload: Workload, inputs: dict[str, Any]) -> int | None:
        """Bytes any implementation must move through device memory (each input it needs read once,
        each output written once), from the task's `min_bytes`; None if the task does not say."""
        fn = getattr(self.module, "min_bytes", None)
        return None if fn is None else int(fn(workload, inputs))

    # ------------------------------------------------------------ fresh inputs for timed calls
    @property
    def shared_inputs(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "SHARED_INPUTS", ()))

    @property
    def declared_late_inputs(self) -> tuple[str, ...] | None:
        late = getattr(self.module, "LATE_INPUTS", None)
        return None if late is None else tuple(late)

    @property
    def chained_inputs(self) -> dict[str, str]:
        """{input: output}: in a batch, call k+1's input is call k's output (see CHAINED_INPUTS above)."""
        chain = dict(getattr(self.module, "CHAINED_INPUTS", {}))
        for name, output in chain.items():
            if name not in self.definition.inputs or output not in self.definition.outputs:
                raise ValueError(f"task {self.name}: CHAINED_INPUTS maps {name!r} -> {output!r}, but the definition "
                                 f"has no such input or output")
            if self.definition.inputs[name].dtype != self.definition.outputs[output].dtype:
                raise ValueError(f"task {self.name}: CHAINED_INPUTS {name!r} -> {output!r}: dtypes differ")
        return chain

    def max_sets(self, workload: Workload) -> int:
        fn = getattr(self.module, "max_sets", None)
        return 16 if fn is None else max(1, int(fn(workload)))

    def refresh_inputs(self, workload: Workload, sets: list[dict[str, Any]], generator: Any) -> None:
        """Fresh values, in place, for the input sets of one batch (a shared input is one tensor in
        every set and is refreshed once). Deterministic given the generator's state."""
        fn = getattr(self.module, "refresh_inputs", None)
        if fn is not None:
            fn(workload, sets, generator)
            return
        done: set[str] = set()
        for inputs in sets:
            device = next(v.device for v in inputs.values() if hasattr(v, "device"))
            fresh = self.make_inputs(workload, generator, device)
            for name, value in fresh.items():
                if hasattr(value, "copy_") and name not in done:
                    inputs[name].copy_(value)
                    if name in self.shared_inputs:
                        done.add(name)

    def decoy_inputs(self, workload: Workload, inputs: dict[str, Any], names: tuple[str, ...], generator: Any) -> None:
        """Plausible wrong values, in place, for the late inputs until the judge's clock starts."""
        fn = getattr(self.module, "decoy_inputs", None)
        if fn is not None:
            fn(workload, inputs, names, generator)
            return
        import torch

        for name in names:
            t = inputs[name]
            flat = t.reshape(-1)
            order = torch.randperm(flat.numel(), generator=generator, device=t.device)
            t.copy_(flat[order].view_as(t))

    def workload_group(self, workload: Workload) -> str:
        """The task's grouping of workloads (its optional `workload_group`), else "all"."""
        fn = getattr(self.module, "workload_group", None)
        return "all" if fn is None else str(fn(workload))


@cache
def load_task(name: str, data_only: bool = False) -> Task:
    """The task `kernels/<name>/` of this installation, or a definition of a flashinfer-bench dataset
    folder named `<folder>::<definition>` (evoteam.dataset); `data_only`: a dataset's task without its
    reference code run (reference_module None), for reading its data alone."""
    from evoteam import dataset

    if dataset.is_dataset_task(name):
        return Task(name=name, **(dataset.data_parts(name) if data_only else dataset.load_parts(name)))
    folder = resources.kernels_dir() / name
    if not (folder / "definition.json").is_file():
        raise ValueError(f"unknown task {name!r}; available: {', '.join(available_tasks())}")
    return load_task_folder(folder)


def scaled_uuid(uuid: str, scale: str) -> str:
    """A scaled-down workload's own identity, derived from the published one (a name-based UUID under
    it), so that a published uuid always means the published axes."""
    return uuid if scale == "full" else str(uuid_module.uuid5(uuid_module.UUID(uuid), f"evoteam-scale:{scale}"))


def load_task_folder(folder: str | Path) -> Task:
    """A task from any folder laid out as described at the top of this module."""
    folder = Path(folder)
    name = folder.name
    from evoteam import dataset

    oracle_path = folder / "oracle.py"
    definition = Definition.from_json(json.loads((folder / "definition.json").read_text()))
    workloads = []
    for obj in read_jsonl(folder / "workloads.jsonl"):
        trace = Trace.from_json(obj)
        if trace.definition != definition.name:
            raise ValueError(f"{folder / 'workloads.jsonl'}: workload {trace.workload.uuid} is for "
                             f"definition {trace.definition!r}, not {definition.name!r}")
        workloads.append(trace.workload)
    tag = f"{name}_{abs(hash(str(folder.resolve())))}"
    return Task(
        name=name,
        folder=folder,
        definition=definition,
        workloads=workloads,
        module=load_module_from_path(folder / "task.py", f"evoteam_task_{tag}"),
        reference_module=dataset.module_from_source(definition.reference, f"evoteam_reference_{tag}",
                                                    f"{folder / 'definition.json'}:reference"),
        oracle_module=load_module_from_path(oracle_path, f"evoteam_oracle_{tag}") if oracle_path.is_file() else None,
    )


def select_workloads(all_workloads: list[Workload], wanted: list[str]) -> list[Workload]:
    if not wanted:
        return all_workloads
    chosen = []
    for prefix in wanted:
        matches = [w for w in all_workloads if w.uuid.startswith(prefix)]
        if not matches:  # at a scaled problem, a published uuid selects the workload scaled from it
            matches = [w for w in all_workloads if w.origin and w.origin.startswith(prefix)]
        if len(matches) != 1:
            what = "matches no workload" if not matches else f"matches {len(matches)} workloads"
            raise UserError(f"task.workloads entry {prefix!r} {what} at this scale; give a unique uuid prefix "
                            f"(available: {', '.join(w.uuid[:8] for w in all_workloads)})")
        chosen.append(matches[0])
    return chosen


def shape_label(workload: Workload) -> str:
    skip = {"len_indptr", "num_pages", "len_cu_seqlens"}
    return " ".join(f"{k}={v}" for k, v in workload.axes.items() if k not in skip)
