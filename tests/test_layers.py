"""The package's layering, read from its import graph (module-level and deferred imports alike):
every module belongs to a declared layer and imports only its own layer or those below; no import
cycle anywhere. The runner (the candidate's process) imports neither the task nor its reference."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evoteam"
ABOVE_THE_HARNESS = ("evoteam.team", "evoteam.mainjob", "evoteam.tracking", "evoteam.compare", "evoteam.config",
                     "evoteam.cli_errors", "evoteam.bench", "evoteam.llm", "evoteam.families", "evoteam.report")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evoteam"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("evoteam")}
    return out


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


# Lowest first. A module belongs to the layer of its longest matching prefix.
LAYERS = (
    ("core", ("evoteam", "evoteam.errors", "evoteam.outputs", "evoteam.resources", "evoteam.schema", "evoteam.blobs", "evoteam.tolerance", "evoteam.dataset", "evoteam.hardware",
              "evoteam.triton_interpreter", "evoteam.task", "evoteam.process_exit")),
    ("harness", ("evoteam.harness",)),
    ("services", ("evoteam.llm", "evoteam.families", "evoteam.report", "evoteam.uncertainty", "evoteam.trace_writer",
                  "evoteam.tracking.store", "evoteam.tracking.plots", "evoteam.target")),
    ("team", ("evoteam.team",)),
    ("tracking", ("evoteam.tracking", "evoteam.compare")),
    ("entry points", ("evoteam.config", "evoteam.cli_errors", "evoteam.mainjob", "evoteam.bench",
                      "evoteam.__main__", "evoteam.sweep", "evoteam.results", "evoteam.export",
                      "evoteam.run_dataset")),
)


def _layer(module: str) -> int | None:
    best = None
    for level, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # the package itself ("evoteam") is a module of its own, not a prefix of every other
            if module == prefix or (prefix != "evoteam" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (level, len(prefix))
    return None if best is None else best[0]


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): _imports(p) for p in PACKAGE.rglob("*.py")}
    return {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}


def test_every_module_imports_only_its_layer_or_below():
    graph = _graph()
    undeclared = sorted(m for m in graph if _layer(m) is None)
    assert not undeclared, f"modules in no declared layer (add them to LAYERS): {undeclared}"
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
              for m, deps in sorted(graph.items()) for d in sorted(deps) if _layer(d) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_the_harness_imports_only_downward():
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("evoteam.harness"):
            above = sorted(d for d in deps if d.startswith(ABOVE_THE_HARNESS))
            assert not above, f"{name} imports {above}"


def test_the_package_has_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [d])}"
            if d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_the_runner_imports_neither_the_task_nor_the_judge():
    """What the candidate's process loads at start: the runner and what it imports, transitively within
    the harness; the baseline runner alone (trusted) imports the task, inside op_load."""
    runner = PACKAGE / "harness" / "runner.py"
    top_level = set()
    for node in ast.parse(runner.read_text()).body:  # module-level imports only
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evoteam"):
            top_level.add(node.module)
    assert top_level <= {"evoteam.harness.protocol", "evoteam.harness.shared"}, top_level
    for module in top_level:
        deps = _imports(PACKAGE.parent / Path(*module.split(".")).with_suffix(".py"))
        assert not {d for d in deps if d.startswith(("evoteam.task", "evoteam.harness.judge", "evoteam.harness.check"))}


def test_the_judge_names_no_timing_mode_and_the_harness_map_lists_every_module():
    """Every decision that is a timing mode's lives in its clock (evoteam/harness/timing.py): the judge names none,
    so a new mode is one new clock. And the harness package's map (its docstring) names every module in it."""
    import ast
    import re

    import evoteam.harness as harness

    folder = Path(harness.__file__).parent
    source = (folder / "judge.py").read_text()
    names = {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)}
    strings = {node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)
               and isinstance(node.value, str)}
    assert "TimingMode" not in names
    assert not {"graph", "events", "wallclock", "cputime"} & (attributes | strings)
    listed = set(re.findall(r"^  (\w+)\s", harness.__doc__, re.M))
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules <= listed, f"not in the harness map: {sorted(modules - listed)}"
