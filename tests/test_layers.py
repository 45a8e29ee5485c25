"""The harness's layering: its modules import nothing above them (the team, the main job, tracking,
the config), form no import cycle, and the runner (the candidate's process) imports neither the task
nor its reference."""

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


def test_the_harness_imports_only_downward_and_has_no_cycle():
    modules = {_module(p): _imports(p) for p in (PACKAGE / "harness").glob("*.py")}
    for name, deps in modules.items():
        above = sorted(d for d in deps if d.startswith(ABOVE_THE_HARNESS))
        assert not above, f"{name} imports {above}"
    graph = {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}
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
