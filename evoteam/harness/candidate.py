"""What a candidate is: evoteam's own form, one Python file, or a FlashInfer-Trace Solution (a JSON
file) in any language the runner builds: Python, Triton, C++ and CUDA (torch's extension loader, the
machine's compiler, inside the sandbox).

The judge writes the sources into a folder the runner sees read-only at /candidate; the runner loads
or compiles them there (compiled artefacts go to its cache folder, which is keyed by `digest`, so the
same sources compile once). Calling conventions: a bare Python file is called with keywords,
`entry(**inputs, **outputs)` (evoteam's brief); a Solution positionally, inputs then outputs in the
definition's order (flashinfer-bench's destination-passing convention), or, where its spec says
`destination_passing_style: false`, with the inputs alone: the runner copies what it returns into the
judge's output buffers within the call (`runner.deliver`), so every check of the outputs is the same.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from evoteam.schema import Solution

LOADED = ("python", "triton")  # imported as Python
COMPILED = ("cpp", "cuda")  # built with torch.utils.cpp_extension (binding "torch")
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
SOURCE_LANGUAGE = {".cu": "cuda", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp"}  # a bare compiled source file
SOURCE_MTIME = 946684800  # 2000-01-01


class CandidateError(ValueError):
    """The candidate cannot be run as given (recorded as a compile error, with this message)."""


def solution_label(path: Path) -> str:
    """A candidate's name in tables and traces: a solution JSON's own name, else the file's stem."""
    if path.suffix == ".json":
        try:
            return str(json.loads(path.read_text())["name"])
        except (ValueError, KeyError, TypeError):
            pass  # the judge records why it cannot run it
    return path.stem


def module_file_name(name: str) -> str:
    """A Python file's name as flashinfer-bench's builder can import it: it imports a source as the module its path
    names (`a.b.py` as the submodule `b` of a package `a`, which is not there), so the stem is made an identifier."""
    stem, suffix = name.rsplit(".", 1) if "." in name else (name, "py")
    stem = re.sub(r"\W", "_", stem)
    return f"{'_' if not stem or stem[0].isdigit() else ''}{stem}.{suffix}"


def python_language(source: str) -> tuple[str, tuple[str, ...] | None]:
    """A Python kernel's FlashInfer-Trace language and the packages it imports (its BuildSpec dependencies): triton
    where it imports Triton (flashinfer-bench builds that only where Triton is installed), else python, as a plain
    PyTorch kernel is (flashinfer-bench's own dependencies have no Triton)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "python", None  # it does not load anywhere; the judge says why
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    packages = tuple(sorted(m for m in imported if m not in sys.stdlib_module_names and m != "__future__"))
    return ("triton" if "triton" in packages else "python"), packages or None


def solution_of_path(path: str | Path, definition: str = "", name: str | None = None,
                     entry: str = "run") -> Solution:
    """The Solution a candidate file stands for: a Solution JSON as written; a bare .cu/.cpp file as a
    one-source solution built with torch's extension loader; any other file as one Python source, its language
    triton or python by what it imports (`python_language`), named as flashinfer-bench can import it."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            return Solution.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise CandidateError(f"{path.name} is not a FlashInfer-Trace solution: {exc}") from None
    language = SOURCE_LANGUAGE.get(path.suffix)
    dependencies = None
    if language is None:
        language, dependencies = python_language(path.read_text())
    solution = Solution.from_file(path, definition=definition, language=language, entry=entry, name=name)
    if language in COMPILED:
        return dataclasses.replace(solution, spec=dataclasses.replace(solution.spec, binding="torch"))
    source = module_file_name(path.name)
    return dataclasses.replace(solution, sources=(dataclasses.replace(solution.sources[0], path=source),),
                               spec=dataclasses.replace(solution.spec, entry_point=f"{source}::{entry}",
                                                        dependencies=dependencies))


@dataclass(frozen=True)
class Candidate:
    solution: Solution
    keywords: bool  # called with keywords (a bare Python file) or positionally (a Solution)
    returns: bool = False  # value-returning: called with the inputs alone; what it returns are the outputs

    @classmethod
    def from_path(cls, path: str | Path, entry: str = "run") -> Candidate:
        path = Path(path)
        solution = solution_of_path(path, entry=entry)
        if path.suffix != ".json" and solution.spec.language in LOADED:
            return cls(solution, keywords=True)
        spec = solution.spec
        if spec.language not in LOADED + COMPILED:
            raise CandidateError(f"solution {solution.name}: language {spec.language!r} is not built here; "
                                 f"supported: {', '.join(LOADED + COMPILED)}")
        if spec.language in COMPILED and (spec.binding or "tvm-ffi") != "torch":
            raise CandidateError(f"solution {solution.name}: binding {spec.binding or 'tvm-ffi (the default)'!r} is "
                                 f"not built here; give \"binding\": \"torch\" (torch's C++/CUDA extension loader)")
        for source in solution.sources:
            p = Path(source.path)
            if p.is_absolute() or ".." in p.parts:
                raise CandidateError(f"solution {solution.name}: source path {source.path!r} leaves its folder")
        return cls(solution, keywords=False, returns=not spec.destination_passing_style)

    @property
    def language(self) -> str:
        return self.solution.spec.language

    @property
    def entry_file(self) -> str:
        return self.solution.spec.entry_point.split("::", 1)[0]

    @property
    def symbol(self) -> str:
        return self.solution.spec.entry_point.split("::", 1)[1]

    @property
    def digest(self) -> str:
        """Everything that decides what the runner builds: language, entry point, every source."""
        blob = json.dumps([self.language, self.solution.spec.entry_point, self.keywords,
                           sorted((s.path, s.content) for s in self.solution.sources)])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def python_sources(self) -> dict[str, str]:
        return {s.path: s.content for s in self.solution.sources if s.path.endswith(".py")}

    def own_modules(self) -> tuple[str, ...]:
        """The modules its own Python files make importable (the runner puts its folder first on sys.path): a
        multi-file solution imports its siblings, which the static scan must not read as foreign modules."""
        names = set()
        for path in self.python_sources():
            parts = Path(path).with_suffix("").parts
            names.add(parts[0])  # a package folder, or a module at the top of the folder
        return tuple(sorted(names))

    def compiled_sources(self) -> list[str]:
        return [s.path for s in self.solution.sources if s.path.endswith(COMPILED_SUFFIXES)]

    def write(self, folder: Path) -> Path:
        """The sources under `folder` (readable by the sandbox's user); returns the folder."""
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        for source in self.solution.sources:
            target = folder / source.path
            for parent in reversed(target.relative_to(folder).parents):
                (folder / parent).mkdir(exist_ok=True)
                (folder / parent).chmod(0o755)
            target.write_text(source.content)
            target.chmod(0o644)
            # A fixed time: the build tool then finds the cached objects (keyed by these exact sources)
            # newer than the sources written again for the next evaluation, and builds nothing.
            os.utime(target, (SOURCE_MTIME, SOURCE_MTIME))
        return folder

    def load_message(self, root: str) -> dict:
        """The runner's load request, the sources under `root` as the runner sees them."""
        return {"op": "load", "kind": "candidate", "path": f"{root}/{self.entry_file}", "entry": self.symbol,
                "language": self.language, "root": root, "compile": self.compiled_sources(),
                "name": f"candidate_{self.digest}", "keywords": self.keywords, "returns": self.returns}
