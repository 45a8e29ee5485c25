"""A slim FlashInfer wheel for MLA paged decode on SM90: what a device call can carry.

flashinfer-python 0.7.4's wheel is 101 MB (717 MB unpacked, most of it Blackwell, SM120, trtllm-gen, fused-MoE and
experimental sources); a device call carries at most 64 MiB. This repack keeps

  - the Python modules that `import flashinfer.mla` loads (the module-level import closure from `flashinfer.mla`,
    `flashinfer.jit` and `flashinfer.version`, read from the sources, not run), plus the few that the fa2 and fa3
    paths of BatchMLAPagedAttentionWrapper import inside functions (EXTRA_MODULES);
  - a new `flashinfer/__init__.py` that imports only the version and `flashinfer.jit` (the wheel's own imports all
    of FlashInfer, CuTe-DSL, cuda-tile and NCCL bindings included);
  - the JIT sources of the fa2 and fa3 MLA modules (`gen_batch_mla_module`: MLA_SOURCES) and every header they
    include, transitively, as the compiler finds them on FlashInfer's include path (INCLUDE_DIRS, in its order);
    every `#include` is followed whatever `#if` guards it, so the set is a superset of what nvcc opens; and
    FlashInfer's copy of CCCL whole (WHOLE_DIRS: the CUDA toolkit's headers include it too);
  - the dist-info, its version marked `+sm90mla`, its Requires-Dist cut to what the kept modules import.

Nothing is patched but `__init__.py`. `scripts/check_slim_flashinfer.py` checks the result on a CPU: `flashinfer.mla`
imports, the fa2 and fa3 JIT specs of the task's shapes name only files that are there, and where nvcc is installed,
every compile command of their ninja files preprocesses.

With --aot DIR, the JIT modules built once on a GPU host (their .so files, from FlashInfer's JIT cache) go into the
wheel as AOT artifacts (flashinfer/data/aot/NAME/NAME.so), which FlashInfer loads without compiling.

Usage: python scripts/slim_flashinfer.py FULL_WHEEL OUT_DIR [--aot DIR]    (prints the slim wheel's path)
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path, PurePosixPath

LOCAL_VERSION = "sm90mla"
ROOT_MODULES = ("flashinfer", "flashinfer.version", "flashinfer.jit", "flashinfer.mla")
# imported inside functions on the fa2/fa3 wrapper's plan() and run() path, or by what they call (the autotuner's
# constructor and its graph timing, API logging's kernel, the attention variants of jit.attention.modules), or while
# flashinfer.mla is imported (@flashinfer_api attaches fi_trace to every API it decorates; without it each one warns)
EXTRA_MODULES = ("flashinfer.tactics_blocklist", "flashinfer.autotuner._graph_timing", "flashinfer.jit.api_log_stats",
                 "flashinfer.jit.attention.variants", "flashinfer.fi_trace")
DATA = "flashinfer/data"
# gen_batch_mla_module (flashinfer/jit/attention/modules.py): the template and the sources it copies, per backend
MLA_SOURCES = {
    "fa2": ("batch_mla_config.jinja", "batch_mla_plan.cu", "batch_mla_run.cu", "batch_mla_binding.cu"),
    "fa3": ("batch_mla_config.jinja", "batch_mla_sm90_plan.cu", "batch_mla_sm90_run.cu", "batch_mla_sm90_binding.cu"),
}
# the include path of a JIT module (flashinfer/jit/env.py, cpp_ext.build_common_cflags): CCCL by -I first, then
# -isystem (tvm_ffi's headers come from the apache-tvm-ffi wheel)
INCLUDE_DIRS = ("cccl/cub", "cccl/libcudacxx/include", "cccl/thrust", "include", "csrc", "cutlass/include",
                "cutlass/tools/util/include", "spdlog/include")
# kept whole: the CUDA toolkit's own headers (cuda_bf16.hpp, cuda_fp8.hpp, ...) include CCCL headers by the same
# names, which FlashInfer's CCCL answers first (-I), so what they reach depends on the toolkit, not on these sources
# (nvcc 13.0's -M of the fa3 run source lists 59 such headers that no FlashInfer file includes); 4.4 MB compressed
WHOLE_DIRS = ("cccl",)
# what the kept modules import at module level, beyond the standard library (Requires-Dist of the slim wheel)
REQUIRES = ("apache-tvm-ffi<0.2,>=0.1.11", "filelock", "jinja2", "ninja", "numpy", "nvidia-ml-py", "packaging>=24.2",
            "requests", "torch", "tqdm")
SLIM_INIT = '''"""FlashInfer, slimmed by evoteam's scripts/slim_flashinfer.py for MLA paged decode on SM90: flashinfer.mla and
what it imports, and the JIT sources and headers of its fa2 and fa3 modules. The rest of FlashInfer is not here: its
own __init__ imports all of it (CuTe-DSL, cuda-tile, NCCL bindings), this one only the version and the JIT layer."""

from .version import __version__ as __version__
from .version import __git_commit__ as __git_commit__
from .version import __git_version__ as __git_version__

from . import jit as jit

SLIM = "sm90mla"
'''
PLACEHOLDER = "SLIM-EMPTY.txt"
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^">]+)[">]', re.M)


def module_path(files: set[str], module: str) -> str | None:
    """The archive path of a module (a file, or a package's __init__.py), None where the wheel has neither."""
    base = module.replace(".", "/")
    for path in (base + ".py", base + "/__init__.py"):
        if path in files:
            return path
    return None


def _is_package(files: set[str], module: str) -> bool:
    base = module.replace(".", "/") + "/"
    return any(f.startswith(base) for f in files)


def _module_level_imports(source: bytes, module: str, is_init: bool) -> set[str]:
    """The modules a module's top-level code imports (functions' bodies skipped; if/try/with/class bodies read, so
    conditional imports count): for `from X import a`, both X and X.a (a may be a submodule)."""
    found: set[str] = set()
    package = module if is_init else module.rpartition(".")[0]
    stack: list[ast.AST] = list(ast.parse(source).body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
        stack.extend(ast.iter_child_nodes(node))
    return found


def python_closure(files: dict[str, bytes], roots=ROOT_MODULES, extras=EXTRA_MODULES) -> set[str]:
    """Archive paths of the modules that importing `roots` and `extras` loads, their packages' __init__.py included.
    A module the wheel does not have (the standard library, another distribution) is not followed."""
    names = set(files)
    keep: set[str] = set()
    todo = [m for m in (*roots, *extras)]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen or not module.startswith("flashinfer"):
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        path = module_path(names, module)
        if path is None:
            continue  # a namespace package, a name imported from a module, or not in the wheel
        keep.add(path)
        todo.extend(_module_level_imports(files[path], module, path.endswith("__init__.py")))
    return keep


def _resolve(names: set[str], include: str, quoted: bool, current_dir: str, dirs: list[str]) -> str | None:
    candidates = ([current_dir] if quoted else []) + dirs
    for d in candidates:
        path = str(PurePosixPath(d) / include)
        if ".." in path:
            parts: list[str] = []
            for part in path.split("/"):
                if part == ".." and parts:
                    parts.pop()
                else:
                    parts.append(part)
            path = "/".join(parts)
        if path in names:
            return path
    return None


def include_closure(files: dict[str, bytes], sources: list[str], include_dirs: list[str]) -> tuple[set[str], set[str]]:
    """(archive paths of the sources and every header they include, transitively; the includes found nowhere in the
    wheel, which the compiler takes from CUDA, tvm_ffi or the C++ library). Each #include resolves as the compiler's
    search does: a quoted one first beside its file, then the include dirs in order, the first hit only."""
    names = set(files)
    keep: set[str] = set()
    outside: set[str] = set()
    todo = list(sources)
    while todo:
        path = todo.pop()
        if path in keep:
            continue
        keep.add(path)
        current = str(PurePosixPath(path).parent)
        for kind, include in _INCLUDE.findall(files[path]):
            name = include.decode()
            found = _resolve(names, name, kind == b'"', current, include_dirs)
            if found is None:
                outside.add(name)
            elif found not in keep:
                todo.append(found)
    return keep, outside


def mla_sources(data: str = DATA) -> list[str]:
    return sorted({f"{data}/csrc/{name}" for names in MLA_SOURCES.values() for name in names})


def _record_hash(content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _metadata(text: str, version: str) -> str:
    lines, requires_done = [], False
    for line in text.split("\n"):
        if line.startswith("Version: "):
            line = f"Version: {version}"
        elif line.startswith("Requires-Dist: ") or line.startswith("Provides-Extra: "):
            if not requires_done:
                lines.extend(f"Requires-Dist: {r}" for r in REQUIRES)
                requires_done = True
            continue
        elif line.startswith("Summary: "):
            line += " (slim: MLA paged decode on SM90 only, evoteam scripts/slim_flashinfer.py)"
        lines.append(line)
    return "\n".join(lines)


def slim_members(files: dict[str, bytes]) -> tuple[dict[str, bytes], dict]:
    """The slim package's files (dist-info excluded) from the full wheel's, and a summary of what was kept."""
    files = dict(files)
    files["flashinfer/__init__.py"] = SLIM_INIT.encode()
    python = python_closure(files)
    dirs = [f"{DATA}/{d}" for d in INCLUDE_DIRS]
    missing = [s for s in mla_sources() if s not in files]
    if missing:
        raise SystemExit(f"the wheel lacks MLA's JIT sources {missing}: is it flashinfer-python 0.7.x?")
    whole = {p for p in files if any(p.startswith(f"{DATA}/{d}/") for d in WHOLE_DIRS)}
    native, outside = include_closure(files, mla_sources() + sorted(whole), dirs)
    keep = python | native | {p for p in files if p.endswith("py.typed") and p.startswith("flashinfer/")}
    members = {p: files[p] for p in sorted(keep)}
    for d in dirs:  # an include dir nothing is taken from stays on the include path: keep it, with a note
        if not any(p.startswith(d + "/") for p in members):
            members[f"{d}/{PLACEHOLDER}"] = b"slim_flashinfer.py: no MLA fa2/fa3 JIT source includes a header from here\n"
    summary = {"python_modules": len(python), "native_files": len(native), "includes_outside": sorted(outside)}
    return members, summary


def aot_members(aot_dir: Path) -> dict[str, bytes]:
    """Built JIT modules (NAME.so, or NAME/NAME.so as FlashInfer's JIT cache holds them under cached_ops/) as
    FlashInfer's AOT artifacts, flashinfer/data/aot/NAME/NAME.so: jit/env.py's get_aot_artifacts finds them there and
    the spec loads them without compiling (JitSpecNvcc.try_load)."""
    found = {}
    for so in sorted(aot_dir.rglob("*.so")):
        name = so.stem
        found[f"{DATA}/aot/{name}/{name}.so"] = so.read_bytes()
    if not found:
        raise SystemExit(f"--aot {aot_dir}: no .so file there")
    return found


def build(full_wheel: Path, out_dir: Path, aot_dir: Path | None = None) -> tuple[Path, dict]:
    with zipfile.ZipFile(full_wheel) as zf:
        files = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
    dist_info = next(p.split("/")[0] for p in files if p.split("/")[0].endswith(".dist-info"))
    name, version = dist_info[: -len(".dist-info")].rsplit("-", 1)
    slim_version = f"{version}+{LOCAL_VERSION}"
    members, summary = slim_members({p: c for p, c in files.items() if not p.startswith(dist_info + "/")})
    if aot_dir is not None:
        aot = aot_members(aot_dir)
        members.update(aot)
        summary["aot_modules"] = sorted(p.split("/")[-1] for p in aot)
    new_info = f"{name}-{slim_version}.dist-info"
    for path, content in files.items():
        if path.startswith(dist_info + "/") and not path.endswith("/RECORD"):
            rel = path[len(dist_info) + 1:]
            if rel == "METADATA":
                content = _metadata(content.decode(), slim_version).encode()
            members[f"{new_info}/{rel}"] = content
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, content in members.items():
        writer.writerow([path, _record_hash(content), len(content)])
    writer.writerow([f"{new_info}/RECORD", "", ""])
    members[f"{new_info}/RECORD"] = record.getvalue().encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}-{slim_version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for path, content in members.items():
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))  # reproducible bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, content, compresslevel=9)
    summary.update(files=len(members), unpacked_bytes=sum(len(c) for c in members.values()),
                   wheel_bytes=out.stat().st_size, full_wheel_bytes=full_wheel.stat().st_size,
                   full_unpacked_bytes=sum(len(c) for c in files.values()))
    return out, summary


def main(argv: list[str]) -> int:
    aot = None
    if len(argv) == 4 and argv[2] == "--aot":
        aot = Path(argv[3])
    elif len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out, summary = build(Path(argv[0]), Path(argv[1]), aot)
    mb = 1e6
    print(f"{out}: {summary['wheel_bytes'] / mb:.1f} MB ({summary['unpacked_bytes'] / mb:.1f} MB unpacked, "
          f"{summary['files']} files: {summary['python_modules']} Python modules, {summary['native_files']} JIT "
          f"sources and headers) from {summary['full_wheel_bytes'] / mb:.1f} MB ({summary['full_unpacked_bytes'] / mb:.0f}"
          f" MB unpacked)", file=sys.stderr)
    if aot is not None:
        print(f"with the built modules {summary['aot_modules']} as AOT artifacts", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
