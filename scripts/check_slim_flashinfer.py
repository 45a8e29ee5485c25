"""Checks a slim FlashInfer wheel (scripts/slim_flashinfer.py) on a CPU, no GPU needed.

  1. `import flashinfer.mla` works from the unpacked wheel alone (every flashinfer module it loads comes from there,
     and it warns of none missing), BatchMLAPagedAttentionWrapper is there and takes backend fa2 and fa3;
  2. the fa2 and fa3 JIT specs of the MLA task's shapes (bf16 query, KV and output, int32 indices, head_dim_ckv 512,
     head_dim_kpe 64: kernels/mla_decode/definition.json) name only sources that exist, and their ninja files
     (written, not run: FLASHINFER_CUDA_ARCH_LIST=9.0a) name only include dirs and inputs that exist;
  3. where nvcc is installed (not with --no-nvcc): every compile command of those specs runs as `nvcc -M` (the
     preprocessor, host and device passes, on the real flags), so every header they include is found; with
     --full WHEEL, the headers found inside the package are exactly those the full wheel's own package gives.

The checking runs in a child Python with only the unpacked wheel (and --site DIR, where apache-tvm-ffi and
nvidia-ml-py lie if this Python lacks them) in front of PYTHONPATH. Exit code 0 when every check holds.

Usage: python scripts/check_slim_flashinfer.py [SLIM_WHEEL] [--site DIR] [--full FULL_WHEEL] [--no-nvcc]
  (SLIM_WHEEL defaults to .whl/flashinfer_python-*+sm90mla-py3-none-any.whl)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"head_dim_ckv": 512, "head_dim_kpe": 64}  # kernels/mla_decode/definition.json (bf16, int32 indices)

CHILD = r'''
import json, os, re, sys, time, warnings
root = os.path.realpath(sys.argv[1])
t0 = time.time()
import torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import flashinfer
    import flashinfer.mla
from flashinfer.jit import gen_batch_mla_module
report = {"import_s": round(time.time() - t0, 2), "version": flashinfer.__version__,
          "slim": getattr(flashinfer, "SLIM", None), "errors": []}
err = report["errors"].append
missing = sorted({str(w.message).splitlines()[0][:200] for w in caught if "No module named 'flashinfer" in str(w.message)})
if missing:  # a module imported inside a function while flashinfer.mla is imported, which the repack left out
    err(f"importing flashinfer.mla warned of {len(missing)} missing flashinfer modules: {missing[:3]}")
if not os.path.realpath(flashinfer.__file__).startswith(root + os.sep):
    err(f"flashinfer imported from {flashinfer.__file__}, not from {root}")
foreign = sorted(m for m, mod in list(sys.modules.items()) if m.split(".")[0] == "flashinfer"
                 and getattr(mod, "__file__", None) and not os.path.realpath(mod.__file__).startswith(root + os.sep))
if foreign:
    err(f"flashinfer modules from outside the slim package: {foreign[:5]}")
report["modules"] = sum(1 for m in sys.modules if m.split(".")[0] == "flashinfer")
if not hasattr(flashinfer.mla, "BatchMLAPagedAttentionWrapper"):
    err("flashinfer.mla has no BatchMLAPagedAttentionWrapper")
for backend in ("fa2", "fa3"):
    try:
        flashinfer.mla.BatchMLAPagedAttentionWrapper(torch.empty(1 << 20, dtype=torch.uint8), backend=backend)
    except Exception as exc:
        err(f"BatchMLAPagedAttentionWrapper(backend={backend}) on a CPU workspace: {type(exc).__name__}: {exc}")
specs = {}
for backend in ("fa2", "fa3"):
    spec = gen_batch_mla_module(backend, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
                                %(head_dim_ckv)d, %(head_dim_kpe)d, False)
    entry = specs[backend] = {"name": spec.name, "sources": [str(s) for s in spec.sources], "commands": []}
    for src in spec.sources:
        if not os.path.exists(src):
            err(f"{backend}: source {src} does not exist")
    try:
        spec.write_ninja()
        entry["commands"] = [c["command"] for c in spec.get_compile_commands()]
    except Exception as exc:  # no CUDA toolkit: the ninja file needs nvcc's path
        entry["ninja_skipped"] = f"{type(exc).__name__}: {exc}"
        continue
    ninja = spec.ninja_path.read_text()
    entry["ninja"] = str(spec.ninja_path)
    for flag, path in re.findall(r"(-I|-isystem) ?(\S+)", ninja):
        if os.path.realpath(path).startswith(root + os.sep) and not os.path.isdir(path):
            err(f"{backend}: include dir {path} of {spec.ninja_path} does not exist")
    for line in ninja.splitlines():
        if line.startswith("build ") and ": " in line:
            for path in line.split(": ", 1)[1].split()[1:]:
                if path.startswith("/") and not path.endswith(".o") and not os.path.exists(path):
                    err(f"{backend}: build input {path} does not exist")
report["specs"] = specs
print("REPORT " + json.dumps(report))
'''


def unpack(wheel: Path, dest: Path, only: str | None = None) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if only is None or n.startswith(only)])
    return dest


def run_child(site: Path, extra: list[str], workspace: Path) -> dict:
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(workspace), FLASHINFER_CUDA_ARCH_LIST="9.0a",
               CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join([str(site), *extra, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", CHILD % SHAPES, str(site / "flashinfer")], env=env,
                          capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT "):])
    raise SystemExit(f"the check's child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def header_deps(command: str, nvcc: str) -> set[str]:
    """The files one compile command includes, by `nvcc -M` on its own flags (no object written)."""
    args = shlex.split(command)
    out = args.index("-o")
    args = [nvcc, *args[1:out], *args[out + 2:], "-M"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr.strip()[-2000:])
    deps = proc.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    return {os.path.realpath(d) for d in deps}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", nargs="?")
    ap.add_argument("--site", action="append", default=[], help="a folder with the wheel's dependencies")
    ap.add_argument("--full", help="the full wheel: compare the headers nvcc finds")
    ap.add_argument("--no-nvcc", action="store_true", help="skip nvcc -M even where nvcc is installed")
    args = ap.parse_args(argv)
    wheel = args.wheel or next(iter(sorted(glob.glob(str(ROOT / ".whl/flashinfer_python-*+sm90mla-*.whl")))), None)
    if not wheel:
        print("no slim wheel: make one with FLASHINFER=0.7.4 bash scripts/fetch_wheels.sh", file=sys.stderr)
        return 2
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="slim-fi-") as tmp:
        site = unpack(Path(wheel), Path(tmp) / "site")
        t0 = time.time()
        report = run_child(site, args.site, Path(tmp) / "ws")
        failures += report["errors"]
        print(f"import flashinfer.mla: {report['modules']} flashinfer modules, all from the slim package "
              f"(version {report['version']}, slim={report['slim']}), {report['import_s']} s; child {time.time() - t0:.1f} s")
        nvcc = None if args.no_nvcc else (shutil.which("nvcc") or (os.environ.get("CUDA_HOME", "") + "/bin/nvcc"))
        nvcc = nvcc if nvcc and os.path.exists(nvcc) else None
        full_root = None
        if args.full and nvcc:
            full_root = unpack(Path(args.full), Path(tmp) / "full", only="flashinfer/data/") / "flashinfer"
        pkg = str((site / "flashinfer").resolve())
        for backend, spec in report["specs"].items():
            print(f"{backend}: {spec['name']}: {len(spec['sources'])} sources present"
                  + (f"; ninja file written ({spec['ninja']})" if "ninja" in spec else
                     f"; no ninja file ({spec.get('ninja_skipped')})"))
            if not nvcc or not spec["commands"]:
                continue
            for command in spec["commands"]:
                source = Path(shlex.split(command)[2]).name
                t1 = time.time()
                try:
                    deps = header_deps(command, nvcc)
                except RuntimeError as exc:
                    failures.append(f"{backend} {source}: nvcc -M failed: {exc}")
                    continue
                inside = {d[len(pkg) + 1:] for d in deps if d.startswith(pkg + os.sep)}
                line = f"  {source}: nvcc -M found all {len(deps)} headers, {len(inside)} in the package"
                if full_root is not None:
                    full_deps = header_deps(command.replace(pkg, str(full_root.resolve())), nvcc)
                    full_pkg = str(full_root.resolve())
                    full_inside = {d[len(full_pkg) + 1:] for d in full_deps if d.startswith(full_pkg + os.sep)}
                    if full_inside != inside:
                        failures.append(f"{backend} {source}: the full wheel's package gives other headers: "
                                        f"{sorted(full_inside ^ inside)[:5]}")
                    else:
                        line += ", the same as from the full wheel"
                print(line + f" ({time.time() - t1:.1f} s)")
        if not nvcc:
            print("nvcc: not run (" + ("--no-nvcc" if args.no_nvcc else "no nvcc on PATH or in CUDA_HOME") + ")")
    for failure in failures:
        print("FAIL " + failure)
    print("slim FlashInfer check: " + ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
