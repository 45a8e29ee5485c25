"""Kernel families: kernel files whose tunable parameters live in one literal, and their search spaces.

A family is a standalone kernel file (the usual `run(**inputs, **outputs)`) whose tunable
parameters are the entries of ONE module-level dict literal,

    PARAMS = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 2}

which its `run` reads. A variant of the family is the same file with only that literal rewritten
(`apply_params`), so it stays one self-contained file that passes the static scan like any other
candidate. Each task folder lists its families in `kernels/<task>/families.json`:

    {"families": [{"name": "seed", "file": "seed_triton.py", "description": "...",
                   "space": {"BLOCK_N": [16, 32, 64], "num_warps": [4, 8], ...}}, ...]}

The space names every key of PARAMS (a fixed one with a one-value list); its points are the
Cartesian product of the lists, and every point gives a correct kernel on every workload of the
task. The file's own PARAMS is one of the points: the family's default.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoteam import resources

FAMILIES_FILE = "families.json"
PARAMS_NAME = "PARAMS"
DISPATCH_NAME = "DISPATCH"  # a family file's optional table [[workload axes, point], ...] its run() reads
# Values a parameter may take: what a JSON list holds and a Python literal writes back unchanged.
_SCALAR_TYPES = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Family:
    name: str
    path: Path  # the kernel file
    description: str
    space: dict[str, list[Any]] = field(hash=False)
    default: dict[str, Any] = field(hash=False)  # the file's own PARAMS
    # Hardware names (hardware/*.yaml) the family has been seen correct on; None: no restriction.
    # A new family that has not yet run on a GPU lists only "cpu", so a GPU team run leaves it out
    # instead of spending its time limits on a kernel that may hang there.
    verified_on: tuple[str, ...] | None = None
    # The task's naive starting kernel (a team that inherits nothing starts from it; slow by design): a team that
    # inherited a champion explores it last.
    naive: bool = False

    @property
    def uses_triton(self) -> bool:
        """Whether the kernel file imports Triton (on a target that interprets Triton, its speed means nothing)."""
        tree = _parsed(self.path.read_text(), str(self.path))
        return any(isinstance(node, ast.Import) and any(a.name.split(".")[0] == "triton" for a in node.names)
                   or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton"
                   for node in ast.walk(tree))

    def usable_on(self, hardware_name: str) -> bool:
        return self.verified_on is None or hardware_name in self.verified_on

    @property
    def reads_dispatch(self) -> bool:
        """Whether the file has a DISPATCH table (a point per workload shape, read by its `params_for`)."""
        return _assignment(_parsed(self.path.read_text(), str(self.path)), DISPATCH_NAME, str(self.path)) is not None

    @property
    def size(self) -> int:
        """Number of points of the space."""
        return math.prod(len(values) for values in self.space.values())

    def points(self) -> Iterator[dict[str, Any]]:
        """Every point of the space, in the order of the lists (the last key varies fastest)."""
        keys = list(self.space)
        for values in itertools.product(*(self.space[k] for k in keys)):
            yield dict(zip(keys, values))

    def contains(self, params: dict[str, Any]) -> bool:
        """Whether `params` (a full point) is a point of the space."""
        return set(params) == set(self.space) and all(
            any(_same(params[k], v) for v in self.space[k]) for k in self.space)

    def source(self, params: dict[str, Any] | None = None) -> str:
        """The kernel file's text, with PARAMS rewritten to `params` (merged over the default)."""
        text = self.path.read_text()
        if not params:
            return text
        unknown = set(params) - set(self.space)
        if unknown:
            raise ValueError(f"family {self.name}: unknown parameters {sorted(unknown)}; "
                             f"the space has {sorted(self.space)}")
        merged = {**self.default, **params}
        if not self.contains(merged):
            raise ValueError(f"family {self.name}: {merged} is not a point of its space {self.space}")
        return apply_params(text, params)


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (True is not 1, 2.0 is not 2)."""
    return type(a) is type(b) and a == b


@functools.lru_cache(maxsize=16)
def _parsed(source: str, filename: str) -> ast.Module:
    """A kernel file's syntax tree, read-only: a sweep or a test reads and rewrites one family's source many times,
    and parsing it is most of that cost."""
    return ast.parse(source, filename=filename)


def _assignment(tree: ast.Module, name: str, filename: str) -> ast.expr | None:
    """The value of the one module-level assignment to `name`, or None; more than one is an error."""
    found = []
    for node in tree.body:  # module level only
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            found.append(node)
    if len(found) > 1:
        raise ValueError(f"{filename}: expected exactly one module-level assignment to {name}, found {len(found)}")
    return found[0].value if found else None


def _params_node(tree: ast.Module, filename: str) -> ast.Dict:
    value = _assignment(tree, PARAMS_NAME, filename)
    if value is None:
        raise ValueError(f"{filename}: expected exactly one module-level assignment to {PARAMS_NAME}, found 0")
    if not isinstance(value, ast.Dict):
        raise ValueError(f"{filename}: {PARAMS_NAME} must be a dict literal")
    return value


def read_params(source: str, filename: str = "<kernel>") -> dict[str, Any]:
    """The PARAMS literal of a kernel file's source."""
    node = _params_node(_parsed(source, filename), filename)
    try:
        params = ast.literal_eval(node)
    except ValueError as exc:
        raise ValueError(f"{filename}: {PARAMS_NAME} must hold literals only ({exc})") from None
    for key, value in params.items():
        if not isinstance(key, str) or not isinstance(value, _SCALAR_TYPES):
            raise ValueError(f"{filename}: {PARAMS_NAME}[{key!r}] = {value!r}: keys must be strings and values "
                             f"bool, int, float, str or None")
    return params


def py_literal(value: Any, indent: int = 0) -> str:
    """`value` as a Python literal: strings double-quoted, numbers, True/False/None as Python writes
    them, dicts on one line, a list of lists one item a line."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError(f"dict keys must be strings, got {list(value)}")
        return "{" + ", ".join(f"{json.dumps(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        items = [py_literal(v, indent + 4) for v in value]
        if value and all(isinstance(v, (list, tuple)) for v in value):
            pad = " " * (indent + 4)
            return "[\n" + "".join(f"{pad}{item},\n" for item in items) + " " * indent + "]"
        return "[" + ", ".join(items) + "]"
    raise ValueError(f"cannot write {type(value).__name__} as a literal")


def set_literal(source: str, name: str, value: Any, filename: str = "<kernel>") -> str:
    """`source` with the value of its module-level `name = <literal>` rewritten to `value`; nothing
    else in the text changes. The one literal rewriter: PARAMS (`apply_params`), DISPATCH (a champion)."""
    node = _assignment(_parsed(source, filename), name, filename)
    if node is None:
        raise ValueError(f"{filename}: no module-level assignment to {name}")
    # ast gives (line, UTF-8 byte offset within the line); lines end at "\n" (or "\r\n").
    raw = source.encode("utf-8")
    starts = [0] + [i + 1 for i, byte in enumerate(raw) if byte == 0x0A]
    begin = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    text = (raw[:begin] + py_literal(value).encode("utf-8") + raw[end:]).decode("utf-8")
    back = ast.literal_eval(_assignment(ast.parse(text), name, filename))
    if json.dumps(back, sort_keys=True) != json.dumps(value, sort_keys=True):  # belt and braces
        raise RuntimeError(f"{filename}: rewriting {name} failed: read back {back!r}, wanted {value!r}")
    return text


def apply_params(source: str, params: dict[str, Any]) -> str:
    """`source` with its PARAMS literal rewritten: `params` merged over the current values (every key
    must exist already; key order kept). Nothing else in the text changes."""
    current = read_params(source)
    unknown = [k for k in params if k not in current]
    if unknown:
        raise ValueError(f"unknown parameters {unknown}; PARAMS has {list(current)}")
    for key, value in params.items():
        if not isinstance(value, _SCALAR_TYPES):
            raise ValueError(f"parameter {key!r} = {value!r}: keys must be strings and values "
                             f"bool, int, float, str or None")
    return set_literal(source, PARAMS_NAME, {**current, **params})


@dataclass(frozen=True)
class Champion:
    """What a sweep chose, as data: a family, the point for shapes the table does not name (PARAMS) and
    a point per workload shape (DISPATCH). `source()` builds the runnable candidate from the family's
    file, so the kernel's code exists once (kernels/<task>/champion_<hardware>.json)."""

    task: str
    family: Family
    hardware: str  # where it was chosen
    params: dict[str, Any]
    dispatch: list  # [[{axis: value}, point], ...]
    made_by: str = ""  # the command (and the measurements) that chose it

    def source(self) -> str:
        text = apply_params(self.family.path.read_text(), self.params)
        return set_literal(text, DISPATCH_NAME, self.dispatch, str(self.family.path))

    def points_by_workload(self, workloads: list) -> dict[str, dict[str, Any]]:
        """The point the champion runs on each workload (uuid -> params), by its family's own rule: the file's
        `params_for(<workload axes>)`, which the kernel applies at run time (nearest table entry over PARAMS).
        A family file without `params_for` runs PARAMS everywhere."""
        import inspect
        import tempfile

        from evoteam.task import load_module_from_path

        params = {**self.family.default, **self.params}
        with tempfile.TemporaryDirectory(prefix="evoteam-champion-") as folder:
            path = Path(folder) / self.family.path.name
            path.write_text(self.source())
            module = load_module_from_path(path, f"evoteam_champion_{self.task}_{self.family.name}")
            rule = getattr(module, "params_for", None)
            axes = [n for n in inspect.signature(rule).parameters if n != "dispatch"] if rule else []
            if rule is None or not all(n in w.axes for w in workloads for n in axes):
                return {w.uuid: dict(params) for w in workloads}  # no rule over these axes: PARAMS everywhere
            return {w.uuid: {**params, **rule(**{n: w.axes[n] for n in axes})} for w in workloads}

    def to_json(self) -> dict:
        return {"task": self.task, "family": self.family.name, "hardware": self.hardware, "made_by": self.made_by,
                "params": self.params, "dispatch": self.dispatch}

    def to_text(self) -> str:
        """The champion file's JSON, one table entry a line (readable diffs)."""
        data = self.to_json()
        head = {k: v for k, v in data.items() if k != "dispatch"}
        lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
        table = ",\n".join("  " + json.dumps(entry) for entry in data["dispatch"])
        text = "{\n" + "\n".join(lines) + '\n "dispatch": [\n' + table + "\n ]\n}\n"
        assert json.loads(text) == data
        return text


def load_champion(path: Path) -> Champion:
    """A champion file, checked: its task's family exists and reads DISPATCH, PARAMS and every table
    entry (merged over PARAMS) are points of the family's space."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable champion file ({exc})") from None
    if not isinstance(data, dict) or {"task", "family", "params", "dispatch"} - set(data):
        raise ValueError(f"{path}: expected an object with task, family, params and dispatch")
    folder = resources.kernels_dir() / str(data["task"])
    if not (folder / FAMILIES_FILE).is_file():
        raise ValueError(f"{path}: task {data['task']!r} has no {FAMILIES_FILE} under {resources.kernels_dir()}")
    families = {f.name: f for f in load_families(folder)}
    family = families.get(data["family"])
    if family is None:
        raise ValueError(f"{path}: family {data['family']!r} is not in {folder / FAMILIES_FILE} "
                         f"({', '.join(families)})")
    if not family.reads_dispatch:
        raise ValueError(f"{path}: family {family.name}'s file has no {DISPATCH_NAME} for the table")
    params = {**family.default, **data["params"]}
    if not family.contains(params):
        raise ValueError(f"{path}: params {data['params']} are not a point of family {family.name}'s space")
    for i, entry in enumerate(data["dispatch"]):
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, dict) for x in entry)
                and family.contains({**params, **entry[1]})):
            raise ValueError(f"{path}: dispatch[{i}] is not [workload axes, a point of the family's space]")
    return Champion(task=str(data["task"]), family=family, hardware=str(data.get("hardware", "")), params=data["params"],
                    dispatch=data["dispatch"], made_by=str(data.get("made_by", "")))


def load_variants(kernel: Path, points: list[dict[str, Any]], folder: Path, prefix: str) -> list[tuple[dict, Any]]:
    """(point, module) for each point: the kernel file with its PARAMS rewritten (`apply_params`),
    written into `folder` and imported from there, so every variant is a file of its own; {} imports
    the file's text unchanged."""
    from evoteam.task import load_module_from_path

    source = kernel.read_text()
    variants = []
    for i, point in enumerate(points):
        path = folder / f"{kernel.stem}_p{i}.py"
        path.write_text(apply_params(source, point) if point else source)
        variants.append((point, load_module_from_path(path, f"{prefix}_{kernel.stem}_p{i}")))
    return variants


def _task_folder(task: Any) -> Path:
    if isinstance(task, Path):
        return task
    if isinstance(task, str):
        return resources.kernels_dir() / task
    folder = getattr(task, "folder", None)  # an evoteam.task.Task
    if folder is None:
        raise TypeError(f"expected a task name, folder or Task, got {type(task).__name__}")
    return Path(folder)


def load_families(task: Any) -> list[Family]:
    """The families of a task (its name, its folder, or a Task), checked: each file exists and has
    one PARAMS literal, the space names exactly PARAMS' keys with non-empty lists of distinct
    literals, and PARAMS is a point of the space. A task without families.json has none."""
    folder = _task_folder(task)
    path = folder / FAMILIES_FILE
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    entries = data.get("families") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected an object with a list 'families'")
    families: list[Family] = []
    for i, entry in enumerate(entries):
        where = f"{path}: families[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "file", "description", "space", "verified_on", "naive"}:
            raise ValueError(f"{where}: expected keys name, file, description, space (and verified_on, naive)")
        name, file, space = entry.get("name"), entry.get("file"), entry.get("space")
        if not isinstance(name, str) or not name or any(f.name == name for f in families):
            raise ValueError(f"{where}: missing or repeated name {name!r}")
        if not isinstance(file, str) or "/" in file or "\\" in file or not file.endswith(".py"):
            raise ValueError(f"{where}: 'file' must be the name of a .py file in the task folder")
        kernel = folder / file
        if not kernel.is_file():
            raise ValueError(f"{where}: {kernel} does not exist")
        default = read_params(kernel.read_text(), str(kernel))
        if not isinstance(space, dict) or set(space) != set(default):
            keys = sorted(space) if isinstance(space, dict) else space
            raise ValueError(f"{where}: the space must name exactly the keys of {file}'s PARAMS "
                             f"{sorted(default)}, got {keys}")
        for key, values in space.items():
            if (not isinstance(values, list) or not values
                    or not all(isinstance(v, _SCALAR_TYPES) for v in values)
                    or any(_same(a, b) for a, b in itertools.combinations(values, 2))):
                raise ValueError(f"{where}: space[{key!r}] must be a non-empty list of distinct literals")
        verified_on = entry.get("verified_on")
        if verified_on is not None and (not isinstance(verified_on, list)
                                        or not all(isinstance(v, str) and v for v in verified_on)):
            raise ValueError(f"{where}: 'verified_on' must be a list of hardware names, e.g. [\"cpu\", \"h200\"]")
        if not isinstance(entry.get("naive", False), bool):
            raise ValueError(f"{where}: 'naive' must be true or false")
        family = Family(name=name, path=kernel, description=str(entry.get("description", "")),
                        space={k: list(space[k]) for k in default}, default=default,
                        verified_on=None if verified_on is None else tuple(verified_on),
                        naive=entry.get("naive", False))
        if not family.contains(default):
            raise ValueError(f"{where}: {file}'s PARAMS {default} is not a point of its space {space}")
        families.append(family)
    return families
