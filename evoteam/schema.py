"""FlashInfer-Trace data model as plain dataclasses.

Field names follow flashinfer-bench's schema (Definition, Workload, Solution, Trace), so the
published workload JSONL files load as they are and the traces we write can be read back by
flashinfer-bench. Each class has `from_json` (a parsed JSON object) and `to_json` (a JSON-ready
dict); `None` fields that the schema marks optional are written as `null` the way flashinfer-bench
writes them.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DTYPES = (
    "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",  # flashinfer-bench's names
    "int64", "int32", "int16", "int8", "bool",
)


def json_float(x: float) -> float | str:
    """A float in strict JSON as flashinfer-bench writes it (pydantic's "strings" mode for inf and nan)."""
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


class SchemaError(ValueError):
    """A JSON document does not match the FlashInfer-Trace schema."""


def _require(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise SchemaError(f"{where}: missing field '{key}'")
    return obj[key]


# --------------------------------------------------------------------------- Definition


@dataclass(frozen=True)
class Axis:
    """A symbolic dimension: `const` with a fixed value or `var` bound at run time."""

    type: str  # "const" | "var"
    value: int | None = None
    description: str | None = None

    @classmethod
    def from_json(cls, obj: dict, where: str = "axis") -> Axis:
        kind = _require(obj, "type", where)
        if kind not in ("const", "var"):
            raise SchemaError(f"{where}: type must be 'const' or 'var', got {kind!r}")
        if kind == "const" and not isinstance(obj.get("value"), int):
            raise SchemaError(f"{where}: a const axis needs an integer 'value'")
        return cls(type=kind, value=obj.get("value"), description=obj.get("description"))

    def to_json(self) -> dict:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "const":
            out["value"] = self.value
        if self.description is not None:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class TensorSpec:
    """Shape as axis names (None for a scalar) and a dtype name."""

    shape: tuple[str, ...] | None
    dtype: str
    description: str | None = None

    @classmethod
    def from_json(cls, obj: dict, where: str = "tensor") -> TensorSpec:
        dtype = _require(obj, "dtype", where)
        if dtype not in DTYPES:
            raise SchemaError(f"{where}: unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
        shape = obj.get("shape")
        return cls(
            shape=None if shape is None else tuple(shape),
            dtype=dtype,
            description=obj.get("description"),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
        }
        if self.description is not None:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class Definition:
    """What a kernel computes: axes, named inputs and outputs, and a reference `run`."""

    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    tags: tuple[str, ...] | None = None
    description: str | None = None
    constraints: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, obj: dict) -> Definition:
        name = _require(obj, "name", "definition")
        where = f"definition {name}"
        # Older flashinfer-bench releases called op_type "type".
        op_type = obj.get("op_type", obj.get("type"))
        if not op_type:
            raise SchemaError(f"{where}: missing field 'op_type'")
        axes = {k: Axis.from_json(v, f"{where} axis {k}") for k, v in _require(obj, "axes", where).items()}
        inputs = {k: TensorSpec.from_json(v, f"{where} input {k}") for k, v in _require(obj, "inputs", where).items()}
        outputs = {k: TensorSpec.from_json(v, f"{where} output {k}") for k, v in _require(obj, "outputs", where).items()}
        for tname, spec in {**inputs, **outputs}.items():
            for axis in spec.shape or ():
                if axis not in axes:
                    raise SchemaError(f"{where}: tensor {tname} uses undefined axis {axis!r}")
        tags = obj.get("tags")
        constraints = obj.get("constraints")
        for expr in constraints or ():
            try:
                ast.parse(expr, mode="eval")
            except SyntaxError:
                raise SchemaError(f"{where}: constraint {expr!r} is not a Python expression") from None
        return cls(
            name=name,
            op_type=op_type,
            axes=axes,
            inputs=inputs,
            outputs=outputs,
            reference=_require(obj, "reference", where),
            tags=None if tags is None else tuple(tags),
            description=obj.get("description"),
            constraints=None if constraints is None else tuple(constraints),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "name": self.name,
            "op_type": self.op_type,
            "axes": {k: v.to_json() for k, v in self.axes.items()},
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
            "reference": self.reference,
        }
        if self.tags is not None:
            out["tags"] = list(self.tags)
        if self.description is not None:
            out["description"] = self.description
        if self.constraints is not None:
            out["constraints"] = list(self.constraints)
        return out

    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if a.type == "const"}  # type: ignore[misc]

    def shapes(self, tensors: dict[str, TensorSpec], var_axes: dict[str, int]) -> dict[str, tuple[int, ...]]:
        """Concrete shapes of tensors (scalars left out) for the given var-axis values."""
        values = {**self.const_axes(), **var_axes}
        out = {}
        for tname, spec in tensors.items():
            if spec.shape is None:
                continue
            missing = [a for a in spec.shape if a not in values]
            if missing:
                raise SchemaError(f"definition {self.name}: no value for axis {missing[0]!r} of {tname}")
            out[tname] = tuple(values[a] for a in spec.shape)
        return out

    def output_shapes(self, var_axes: dict[str, int]) -> dict[str, tuple[int, ...]]:
        return self.shapes(self.outputs, var_axes)

    def input_shapes(self, var_axes: dict[str, int]) -> dict[str, tuple[int, ...]]:
        return self.shapes(self.inputs, var_axes)


# --------------------------------------------------------------------------- Workload


@dataclass(frozen=True)
class InputSpec:
    """How one input is made: `random`, `scalar` (with value) or `safetensors` (path, tensor_key)."""

    type: str
    value: int | float | bool | None = None
    path: str | None = None
    tensor_key: str | None = None

    @classmethod
    def from_json(cls, obj: dict, where: str = "input") -> InputSpec:
        kind = _require(obj, "type", where)
        if kind == "random":
            return cls(type=kind)
        if kind == "scalar":
            return cls(type=kind, value=_require(obj, "value", where))
        if kind == "safetensors":
            return cls(type=kind, path=_require(obj, "path", where), tensor_key=_require(obj, "tensor_key", where))
        raise SchemaError(f"{where}: input type must be random, scalar or safetensors, got {kind!r}")

    def to_json(self) -> dict:
        if self.type == "scalar":
            return {"type": "scalar", "value": self.value}
        if self.type == "safetensors":
            return {"type": "safetensors", "path": self.path, "tensor_key": self.tensor_key}
        return {"type": self.type}


@dataclass(frozen=True)
class Workload:
    """One concrete problem: var-axis values, how each input is made, and a uuid."""

    axes: dict[str, int]
    inputs: dict[str, InputSpec]
    uuid: str
    # A scaled-down workload: the published uuid it was made from (not part of the trace format; a
    # published uuid prefix selects the workload scaled from it).
    origin: str | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, obj: dict) -> Workload:
        where = f"workload {obj.get('uuid', '?')}"
        axes = dict(_require(obj, "axes", where))
        for k, v in axes.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SchemaError(f"{where}: axis {k} must be a non-negative integer, got {v!r}")
        inputs = {k: InputSpec.from_json(v, f"{where} input {k}") for k, v in _require(obj, "inputs", where).items()}
        return cls(axes=axes, inputs=inputs, uuid=_require(obj, "uuid", where))

    def to_json(self) -> dict:
        return {
            "axes": dict(self.axes),
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "uuid": self.uuid,
        }


# --------------------------------------------------------------------------- Solution


@dataclass(frozen=True)
class SourceFile:
    path: str
    content: str

    def to_json(self) -> dict:
        return {"path": self.path, "content": self.content}


@dataclass(frozen=True)
class BuildSpec:
    """`entry_point` is '<file>::<function>'; destination-passing style means the entry writes into
    output tensors passed after the inputs instead of returning them."""

    language: str  # "python" | "triton" | "cpp" | "cuda" | "tilelang"
    target_hardware: tuple[str, ...]
    entry_point: str
    dependencies: tuple[str, ...] | None = None
    destination_passing_style: bool = True
    binding: str | None = None  # C++/CUDA: "torch" or "tvm-ffi" (flashinfer-bench's default when absent)

    @classmethod
    def from_json(cls, obj: dict, where: str = "spec") -> BuildSpec:
        entry = _require(obj, "entry_point", where)
        if entry.count("::") != 1 or not all(entry.split("::")):
            raise SchemaError(f"{where}: entry_point must be '<file>::<function>', got {entry!r}")
        deps = obj.get("dependencies")
        return cls(
            language=_require(obj, "language", where),
            target_hardware=tuple(_require(obj, "target_hardware", where)),
            entry_point=entry,
            dependencies=None if deps is None else tuple(deps),
            destination_passing_style=bool(obj.get("destination_passing_style", True)),
            binding=obj.get("binding"),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "language": self.language,
            "target_hardware": list(self.target_hardware),
            "entry_point": self.entry_point,
            "destination_passing_style": self.destination_passing_style,
        }
        if self.dependencies is not None:
            out["dependencies"] = list(self.dependencies)
        if self.binding is not None:
            out["binding"] = self.binding
        return out


@dataclass(frozen=True)
class Solution:
    name: str
    definition: str
    author: str
    spec: BuildSpec
    sources: tuple[SourceFile, ...]
    description: str | None = None

    @classmethod
    def from_json(cls, obj: dict) -> Solution:
        name = _require(obj, "name", "solution")
        where = f"solution {name}"
        sources = tuple(SourceFile(path=s["path"], content=s["content"]) for s in _require(obj, "sources", where))
        spec = BuildSpec.from_json(_require(obj, "spec", where), f"{where} spec")
        entry_file = spec.entry_point.split("::", 1)[0]
        if entry_file not in {s.path for s in sources}:
            raise SchemaError(f"{where}: entry file {entry_file!r} is not among its sources")
        return cls(
            name=name,
            definition=_require(obj, "definition", where),
            author=_require(obj, "author", where),
            spec=spec,
            sources=sources,
            description=obj.get("description"),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "name": self.name,
            "definition": self.definition,
            "author": self.author,
            "spec": self.spec.to_json(),
            "sources": [s.to_json() for s in self.sources],
        }
        if self.description is not None:
            out["description"] = self.description
        return out

    @classmethod
    def from_file(cls, path: str | Path, definition: str, author: str = "evoteam",
                  language: str = "triton", entry: str = "run", target_hardware: Iterable[str] = ("any",),
                  name: str | None = None) -> Solution:
        """Wrap a single Python source file as a Solution (named by its stem unless `name` is given)."""
        path = Path(path)
        return cls(
            name=name or path.stem,
            definition=definition,
            author=author,
            spec=BuildSpec(language=language, target_hardware=tuple(target_hardware),
                           entry_point=f"{path.name}::{entry}"),
            sources=(SourceFile(path=path.name, content=path.read_text()),),
        )


# --------------------------------------------------------------------------- Trace


@dataclass(frozen=True)
class Correctness:
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict | None = None

    def to_json(self) -> dict:
        return {"max_relative_error": json_float(self.max_relative_error),
                "max_absolute_error": json_float(self.max_absolute_error), "extra": self.extra}


@dataclass(frozen=True)
class Performance:
    latency_ms: float = 0.0
    reference_latency_ms: float = 0.0
    speedup_factor: float = 0.0

    def to_json(self) -> dict:
        return {"latency_ms": self.latency_ms, "reference_latency_ms": self.reference_latency_ms,
                "speedup_factor": self.speedup_factor}


EVALUATION_STATUSES = (
    "PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
    "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT",
)
# a trace's evaluation statuses by name (FlashInfer-Trace's strings: evoteam's own verdicts are harness.model.Status)
TRACE_PASSED, TRACE_INCORRECT_NUMERICAL = EVALUATION_STATUSES[0], EVALUATION_STATUSES[2]


@dataclass(frozen=True)
class Evaluation:
    status: str
    environment: dict  # {"hardware": str, "libs": {name: version}}
    timestamp: str
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None

    @classmethod
    def from_json(cls, obj: dict) -> Evaluation:
        status = _require(obj, "status", "evaluation")
        if status not in EVALUATION_STATUSES:
            raise SchemaError(f"evaluation: unknown status {status!r}; allowed: {', '.join(EVALUATION_STATUSES)}")
        corr = obj.get("correctness")
        perf = obj.get("performance")
        return cls(
            status=status,
            environment=dict(_require(obj, "environment", "evaluation")),
            timestamp=_require(obj, "timestamp", "evaluation"),
            log=obj.get("log", ""),
            correctness=None if corr is None else Correctness(
                max_relative_error=float(corr.get("max_relative_error", 0.0)),
                max_absolute_error=float(corr.get("max_absolute_error", 0.0)),
                extra=corr.get("extra")),
            performance=None if perf is None else Performance(
                latency_ms=float(perf.get("latency_ms", 0.0)),
                reference_latency_ms=float(perf.get("reference_latency_ms", 0.0)),
                speedup_factor=float(perf.get("speedup_factor", 0.0))),
        )

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "environment": self.environment,
            "timestamp": self.timestamp,
            "log": self.log,
            "correctness": None if self.correctness is None else self.correctness.to_json(),
            "performance": None if self.performance is None else self.performance.to_json(),
        }


@dataclass(frozen=True)
class Trace:
    """A workload, optionally with the solution evaluated on it and the result."""

    definition: str
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None
    # A correctness check with nothing timed (bench --check-only): flashinfer-bench requires performance of a PASSED
    # evaluation and has no status for "correct, not timed", so such a trace's evaluation is null and its verdict is
    # here, in a field that is not part of the format (flashinfer-bench's loader ignores it). Written only when set.
    check: Evaluation | None = None

    @classmethod
    def from_json(cls, obj: dict) -> Trace:
        ev, check = obj.get("evaluation"), obj.get("check")
        return cls(
            definition=_require(obj, "definition", "trace"),
            workload=Workload.from_json(_require(obj, "workload", "trace")),
            solution=obj.get("solution"),
            evaluation=None if ev is None else Evaluation.from_json(ev),
            check=None if check is None else Evaluation.from_json(check),
        )

    def to_json(self) -> dict:
        out = {
            "definition": self.definition,
            "solution": self.solution,
            "workload": self.workload.to_json(),
            "evaluation": None if self.evaluation is None else self.evaluation.to_json(),
        }
        if self.check is not None:
            out["check"] = self.check.to_json()
        return out


# --------------------------------------------------------------------------- JSON lines


def read_jsonl(path: str | Path) -> Iterator[dict]:
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


def read_journal(path: str | Path) -> list[dict]:
    """The intact lines of an append-only JSON-lines journal. A line cut by a killed writer (and a
    line later appended onto it) is skipped; every other line is kept."""
    path = Path(path)
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return entries


def append_journal(path: str | Path, obj: dict) -> None:
    """Append one JSON line, first ending a line that a killed writer left unterminated."""
    path = Path(path)
    with open(path, "a+b") as fh:
        fh.seek(0, 2)
        if fh.tell():
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write((json.dumps(obj) + "\n").encode())
        fh.flush()


def load_traces(path: str | Path) -> list[Trace]:
    return [Trace.from_json(obj) for obj in read_jsonl(path)]


def trace_line(trace: Trace) -> str:
    """A trace as its JSON line (newline included), as append_traces writes it."""
    return json.dumps(trace.to_json(), separators=(",", ":")) + "\n"


def append_traces(path: str | Path, traces: Iterable[Trace]) -> None:
    """Append one JSON line per trace (appending keeps earlier lines if a run is interrupted)."""
    with open(path, "a") as fh:
        for t in traces:
            fh.write(trace_line(t))
