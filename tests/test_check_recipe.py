"""docker/check_recipe.sh runs only on a GPU host, so nothing on a CPU machine ran the Python it embeds, and a
renamed or removed evoteam API there went unnoticed (baselines.availability, Task.seed_kernel_path). Here,
without a GPU: the script is valid bash; each Python program it runs (its `$PY ... <<'EOF'` heredocs and
`$PY -c "..."` lines) compiles; and every evoteam name a program uses resolves against the installed package:
`import evoteam.x` and `from evoteam.x import name`, attribute chains on those modules, attributes of the values
that evoteam functions and classes return (followed by their type annotations: `load_task(...)` is a Task, so
`task.folder` is checked on Task), and the arguments of calls to evoteam functions and classes. Names that
come from elsewhere (torch, triton, flashinfer, the standard library) are not imported."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import subprocess
import types
import typing
from functools import cache

import pytest

from conftest import REPO

SCRIPT = REPO / "docker" / "check_recipe.sh"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_PY_C = re.compile(r'\$PY -c "((?:[^"\\]|\\.)*)"')


def python_programs(text: str) -> list[tuple[str, str]]:
    """(label, source) of each Python program the script runs: `$PY` heredocs and `$PY -c "..."` strings."""
    lines = text.splitlines()
    programs, i = [], 0
    while i < len(lines):
        line = lines[i]
        heredoc = _HEREDOC.search(line)
        if heredoc and "$PY" in line:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == heredoc.group(2)), None)
            assert end is not None, f"line {i + 1}: heredoc {heredoc.group(2)} is not closed"
            programs.append((f"heredoc at line {i + 1}", "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        elif (inline := _PY_C.search(line)) is not None:
            programs.append((f"$PY -c at line {i + 1}", inline.group(1).replace('\\"', '"')))
        i += 1
    return programs


# ------------------------------------------------------------------ resolving evoteam names
class _Instance:
    """A value known by its type only (a function's return annotation, a dataclass field's type)."""

    def __init__(self, tp: typing.Any):
        self.tp = tp
        self.cls = typing.get_origin(tp) or tp


class _Method:
    """A method looked up on an _Instance: calling it gives its return annotation."""

    def __init__(self, func: typing.Any):
        self.func = func


def _instance(tp: typing.Any) -> _Instance | None:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = rest[0] if len(rest) == 1 else None
    if inspect.isclass(typing.get_origin(tp) or tp):
        return _Instance(tp)
    return None


def _element(value: typing.Any) -> _Instance | None:
    """The element of a list[X], tuple[X, ...], set[X] or a dict's value type, as iterating or indexing gives it."""
    if not isinstance(value, _Instance):
        return None
    args = typing.get_args(value.tp)
    if value.cls in (list, set, frozenset, tuple) and args:
        return _instance(args[0])
    if value.cls is dict and len(args) == 2:
        return _instance(args[1])
    return None


def _evoteam(obj: typing.Any) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "") or ""
    return name == "evoteam" or name.startswith("evoteam.")


@cache
def _hints(obj: typing.Any) -> dict:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # noqa: BLE001 - a name only under TYPE_CHECKING: fall back to the raw annotations
        out = {}
        for klass in reversed(getattr(obj, "__mro__", [obj])):
            out.update(getattr(klass, "__annotations__", {}))
        return out


@cache
def _assigned_on_self(cls: type) -> frozenset[str]:
    """Attributes the class's own code sets on self (an __init__'s self.x = ...)."""
    names = set()
    for klass in cls.__mro__:
        if not _evoteam(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"\bself\.(\w+)\s*(?::[^=]+)?=(?!=)", source))
    return frozenset(names)


class Resolver:
    """Walks one program in order, knowing what its names hold where an evoteam import or call tells; every
    evoteam attribute or call that does not resolve is a problem."""

    def __init__(self, label: str):
        self.label = label
        self.env: dict[str, typing.Any] = {}
        self.problems: list[str] = []

    def problem(self, node: ast.AST, what: str) -> None:
        self.problems.append(f"{self.label}, line {getattr(node, 'lineno', '?')}: {what}")

    # ---------------------------------------------------------------- statements
    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Import):
            for alias in s.names:
                top = alias.name.split(".")[0]
                module = self.import_module(alias.name, s) if top == "evoteam" else None
                if alias.asname:
                    self.env[alias.asname] = module
                else:
                    self.env[top] = importlib.import_module("evoteam") if top == "evoteam" else None
        elif isinstance(s, ast.ImportFrom):
            module = self.import_module(s.module, s) if s.level == 0 and s.module and _evoteam_name(s.module) else None
            for alias in s.names:
                self.env[alias.asname or alias.name] = self.import_name(module, alias.name, s) if module else None
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            value = self.value(s.value) if s.value is not None else None
            for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                self.bind(target, value)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.bind(s.target, _element(self.value(s.iter)))
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in s.decorator_list:
                self.value(decorator)
            saved = dict(self.env)
            if not isinstance(s, ast.ClassDef):
                for arg in ast.walk(s.args):
                    if isinstance(arg, ast.arg):
                        self.env[arg.arg] = None
            self.block(s.body)
            self.env = saved
            self.env[s.name] = None
        else:  # if, while, with, try, assert, return, an expression...
            self.generic(s)

    def generic(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.value(child)
            elif isinstance(child, ast.stmt):
                self.statement(child)
            else:
                if isinstance(child, ast.ExceptHandler) and child.name:
                    self.env[child.name] = None
                self.generic(child)
        if isinstance(node, ast.withitem) and node.optional_vars is not None:
            self.bind(node.optional_vars, None)

    def bind(self, target: ast.expr, value: typing.Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, None if isinstance(element, ast.Starred) else _element(value))
        else:  # x.attr = ..., x[i] = ...: the target's own names are checked
            self.value(target)

    # ---------------------------------------------------------------- imports
    def import_module(self, name: str, node: ast.AST) -> types.ModuleType | None:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            self.problem(node, f"import {name}: {exc}")
            return None

    def import_name(self, module: types.ModuleType, name: str, node: ast.AST) -> typing.Any:
        if hasattr(module, name):
            return getattr(module, name)
        try:
            return importlib.import_module(f"{module.__name__}.{name}")
        except ImportError:
            self.problem(node, f"from {module.__name__} import {name}: {module.__name__} has no {name}")
            return None

    # ---------------------------------------------------------------- expressions
    def value(self, node: ast.expr) -> typing.Any:
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.value(node.value), node)
        if isinstance(node, ast.Call):
            return self.call(self.value(node.func), node)
        if isinstance(node, ast.Subscript):
            base = self.value(node.value)
            self.value(node.slice)
            return _element(base)
        if isinstance(node, ast.NamedExpr):
            value = self.value(node.value)
            self.bind(node.target, value)
            return value
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp, ast.Lambda)):
            saved = dict(self.env)
            if isinstance(node, ast.Lambda):
                for arg in ast.walk(node.args):
                    if isinstance(arg, ast.arg):
                        self.env[arg.arg] = None
                self.value(node.body)
            else:
                for generator in node.generators:
                    self.bind(generator.target, _element(self.value(generator.iter)))
                    for condition in generator.ifs:
                        self.value(condition)
                for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                    self.value(part)
            self.env = saved
            return None
        self.generic(node)
        return None

    def attribute(self, base: typing.Any, node: ast.Attribute) -> typing.Any:
        attr = node.attr
        if base is None:
            return None
        if isinstance(base, _Instance):
            cls = base.cls
            hints = _hints(cls)
            static = inspect.getattr_static(cls, attr, None)
            known = (static is not None or attr in hints or attr in _assigned_on_self(cls)
                     or (dataclasses.is_dataclass(cls) and attr in {f.name for f in dataclasses.fields(cls)}))
            if not known:
                self.problem(node, f"{ast.unparse(node)}: {cls.__module__}.{cls.__qualname__} has no attribute {attr!r}")
                return None
            if attr in hints:
                return _instance(hints[attr])
            if isinstance(static, property) and static.fget is not None:
                return _instance(_hints(static.fget).get("return"))
            if inspect.isfunction(static):
                return _Method(static)
            if isinstance(static, (classmethod, staticmethod)):
                return getattr(cls, attr)
            return None
        if isinstance(base, _Method):
            return None
        try:
            return getattr(base, attr)
        except AttributeError:
            owner = base.__name__ if isinstance(base, types.ModuleType) else repr(base)[:80]
            self.problem(node, f"{ast.unparse(node)}: {owner} has no attribute {attr!r}")
            return None

    def call(self, func: typing.Any, node: ast.Call) -> typing.Any:
        for arg in node.args:
            self.value(arg.value if isinstance(arg, ast.Starred) else arg)
        for keyword in node.keywords:
            self.value(keyword.value)
        if isinstance(func, _Method):
            self.check_arguments(func.func, node, leading=1)
            return _instance(_hints(func.func).get("return"))
        if func is None or not _evoteam(func) or not callable(func):
            return None
        self.check_arguments(func, node)
        if inspect.isclass(func):
            return _Instance(func)
        return _instance(_hints(func).get("return"))

    def check_arguments(self, func: typing.Any, node: ast.Call, leading: int = 0) -> None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):
            return
        try:
            signature.bind(*[None] * (leading + len(node.args)), **{k.arg: None for k in node.keywords})
        except TypeError as exc:
            self.problem(node, f"{ast.unparse(node.func)}(...): {exc}")


def _evoteam_name(module: str) -> bool:
    return module == "evoteam" or module.startswith("evoteam.")


def evoteam_problems(label: str, source: str) -> list[str]:
    resolver = Resolver(label)
    resolver.block(ast.parse(source, label).body)
    return resolver.problems


# ------------------------------------------------------------------ the tests
PROGRAMS = python_programs(SCRIPT.read_text())


def test_the_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_python_program_of_the_script_is_found():
    text = SCRIPT.read_text()
    runs = text.count("$PY - ") + len(_PY_C.findall(text))
    assert len(PROGRAMS) == runs >= 5, [label for label, _ in PROGRAMS]
    assert sum("evoteam" in source for _, source in PROGRAMS) >= 3


@pytest.mark.parametrize(("label", "source"), PROGRAMS, ids=[label for label, _ in PROGRAMS])
def test_python_program_compiles(label, source):
    compile(source, f"check_recipe.sh, {label}", "exec")


@pytest.mark.parametrize(("label", "source"), PROGRAMS, ids=[label for label, _ in PROGRAMS])
def test_python_program_uses_only_evoteam_names_that_exist(label, source):
    assert evoteam_problems(label, source) == []


def test_the_resolver_finds_removed_and_renamed_names():
    """What the script used to call, before the package moved on: the resolver must say so."""
    source = """
import evoteam.harness.nothing_here
from evoteam.task import load_task, no_such_function
from evoteam import hardware
from evoteam.harness import baselines
from evoteam.harness.executor import LocalExecutor
from evoteam.harness.model import EvalRequest
hw = hardware.resolve("auto")
status = baselines.availability(load_task("mla_decode"), hw)
task = load_task("mla_decode")
print(task.seed_kernel_path, task.folder / "seed_triton.py", hw.name, task.workloads[0].uuid, task.workloads[0].nope)
request = EvalRequest(task="mla_decode", hardware=hw.name, solution="x.py", repetitions=3)
LocalExecutor(environment={})
"""
    found = evoteam_problems("example", source)
    expected = ["import evoteam.harness.nothing_here", "no_such_function", "'availability'", "'seed_kernel_path'",
                "'nope'", "repetitions", "environment"]
    assert len(found) == len(expected), found
    for text, problem in zip(expected, found):
        assert text in problem
