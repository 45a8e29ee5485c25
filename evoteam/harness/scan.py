"""Rules that untrusted candidates must pass, beyond computing the right numbers.

Static (before any candidate code runs): the source may not import or name the baseline libraries,
the task's reference or evoteam itself, nor reach around the rules through dynamic imports,
`sys.modules`, frames, ctypes, subprocesses or sockets.
Dynamic (checked by the harness while it runs the candidate): the candidate launched kernels of its
own and none of the baseline libraries' (profiler), its time is not faster than the physical floor,
and its outputs do not alias its inputs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

# Libraries whose kernels are the baselines (or could stand in for them).
# Libraries whose kernels are the baselines (or could stand in for them), and flashinfer's runtime (tvm_ffi): named
# by a candidate, rejected here; hidden from it by the sandbox (evoteam.harness.sandbox reads this list)
BASELINE_MODULES = ("flashinfer", "fla", "vllm", "flash_kda", "aiter", "sgl_kernel", "flash_attn", "xformers",
                    "tvm_ffi")
# evoteam holds the reference implementation and the harness; a candidate needs neither.
HARNESS_MODULES = ("evoteam",)
# Ways around a static scan, or out of the sandbox.
ESCAPE_MODULES = ("importlib", "ctypes", "cffi", "subprocess", "socket", "multiprocessing", "gc", "inspect",
                  "pickle", "marshal", "runpy", "urllib", "http", "requests", "shutil", "builtins")
ESCAPE_CALLS = ("__import__", "exec", "eval", "compile", "globals", "getattr", "setattr", "delattr",
                "breakpoint", "open", "load_inline", "load")
ESCAPE_ATTRIBUTES = ("modules", "_getframe", "f_back", "f_globals", "f_locals", "__globals__", "__builtins__",
                     "__subclasses__", "__code__", "system", "popen", "spawn", "fork", "execv", "cdll",
                     "kill", "killpg", "getppid", "environ")
ALLOWED_TOP_MODULES = ("torch", "triton", "math", "functools", "typing", "dataclasses", "itertools", "os",
                       "collections", "enum", "numpy", "operator", "__future__", "cuda", "cutlass", "tilelang")
# Markers of the reference files in kernels/<task>/: reading them is using the reference.
REFERENCE_MARKERS = ("reference.py", "oracle.py", "kernels/", "workloads.jsonl")


@dataclass(frozen=True)
class Violation:
    rule: str  # "baseline_import", "harness_import", "escape", "reference_access", "syntax"
    line: int
    detail: str

    def __str__(self) -> str:
        return f"{self.rule} at line {self.line}: {self.detail}"


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def scan_source(source: str, filename: str = "<candidate>", allowed_modules: Iterable[str] = ()) -> list[Violation]:
    """Every rule the source breaks, in line order."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [Violation("syntax", exc.lineno or 0, f"not valid Python: {exc.msg}")]
    allowed = set(ALLOWED_TOP_MODULES) | set(allowed_modules)
    found: list[Violation] = []
    # Docstrings are prose: naming a file there reads nothing.
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}

    def check_module(name: str, line: int) -> None:
        top = _top(name)
        if top in BASELINE_MODULES:
            found.append(Violation("baseline_import", line, f"imports the baseline library '{name}'"))
        elif top in HARNESS_MODULES:
            found.append(Violation("harness_import", line, f"imports '{name}' (the harness and reference)"))
        elif top in ESCAPE_MODULES:
            found.append(Violation("escape", line, f"imports '{name}'"))
        elif top not in allowed:
            found.append(Violation("escape", line, f"imports '{name}', which is not on the allowed list "
                                                   f"({', '.join(sorted(allowed))})"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(Violation("escape", node.lineno, "relative import"))
            else:
                check_module(node.module or "", node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ESCAPE_CALLS:
            found.append(Violation("escape", node.lineno, f"calls {node.func.id}()"))
        elif isinstance(node, ast.Attribute) and node.attr in ESCAPE_ATTRIBUTES:
            found.append(Violation("escape", node.lineno, f"uses .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            found.append(Violation("escape", node.lineno, f"uses {node.id}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            for module in BASELINE_MODULES:
                if text == module or text.startswith(module + "."):
                    found.append(Violation("baseline_import", node.lineno, f"names the baseline library {text!r}"))
            if any(marker in text for marker in REFERENCE_MARKERS):
                found.append(Violation("reference_access", node.lineno, f"names the task's files ({text!r})"))
    return sorted(found, key=lambda v: v.line)


# Substrings of kernel names that belong to the baseline libraries (seen in profiles on the H200).
BASELINE_KERNEL_MARKERS = ("flashinfer", "BatchMLAPagedAttention", "MLAPlan", "chunk_kda", "chunk_gla",
                           "chunk_gated_delta_rule", "kda_", "fla_", "flash_kda", "FlashKDA", "aiter", "mla_decode_fwd")


def foreign_kernels(kernel_names: Iterable[str], own_markers: Iterable[str] = ()) -> list[str]:
    """Kernel names that look like a baseline library's, unless they match the candidate's own names."""
    own = tuple(own_markers)
    hits = []
    for name in kernel_names:
        if any(marker.lower() in name.lower() for marker in BASELINE_KERNEL_MARKERS) and not (
            own and any(o in name for o in own)
        ):
            hits.append(name)
    return hits


def physical_floor_ms(min_bytes: float, bandwidth_tbs: float | None) -> float | None:
    """Time the compulsory bytes take at the target's peak bandwidth: nothing real runs faster."""
    if not bandwidth_tbs or min_bytes <= 0:
        return None
    return min_bytes / (bandwidth_tbs * 1e12) * 1e3


def jit_function_names(source: str) -> list[str]:
    """Names of the functions the source decorates with triton.jit (or @jit): its own kernels."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                label = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if label in ("jit", "autotune", "heuristics"):
                    names.append(node.name)
                    break
    return names
