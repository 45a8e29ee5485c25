"""Compile a kernel file's Triton launches for an NVIDIA target without a GPU, and report each compiled
kernel's resources: registers, stack (spills), shared memory, grid, and its tensor-core and async-copy
instructions. For design notes and for choosing points before spending GPU time; not a timing.

    python scripts/offline_compile.py KERNEL.py --task mla_decode [--hardware h200] [--workloads PREFIX ...]
                                      [--param KEY=JSON ...] [--json OUT.json] [--dump DIR]

The kernel's run() is called on meta tensors of the workload's real shapes (so grids and integer
specialisations are those of the GPU run, and data pointers count as 16-byte aligned); every Triton
launch is compiled for the spec sheet's arch_target (sm_90 for h100/h200, sm_100 for b200) instead of
launched. Register counts depend on the Triton version: put the GPU machine's version first on
PYTHONPATH (e.g. `pip install --target /tmp/triton36 triton==3.6.0`, then PYTHONPATH=/tmp/triton36).
On 2026-11-30 this gave the same registers and shared memory as the lent H200 for the MLA
flashdecode and KDA chunk kernels. Uses Triton internals of 3.6 to 3.9 (JIT binder, ASTSource).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU target, whatever the caller's setting
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # what the JIT does by default (3.9 warns when unset)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evoteam.errors import UserError  # noqa: E402 - after the repository is on sys.path


def resource_usage(cubin: bytes, cuobjdump: Path) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL of the kernel in a cubin (cuobjdump --dump-resource-usage)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    return {key: int(value) for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out)}


def instruction_counts(ptx: str) -> dict[str, int]:
    """Static counts in the PTX (unrolled code counts each copy)."""
    return {"mma.sync": ptx.count("mma.sync"), "wgmma": ptx.count("wgmma.mma_async"),
            "cp.async": len(re.findall(r"cp\.async\.(?:ca|cg)", ptx)), "tma": ptx.count("cp.async.bulk"),
            "ldmatrix": ptx.count("ldmatrix")}


class Compiler:
    """Stands in for a JITFunction: `fake[grid](*args, **options)` compiles, records, launches nothing."""

    def __init__(self, name, fn, target, rows, seen, label, dump=None):
        self.name, self.fn, self.target, self.rows, self.seen, self.label = name, fn, target, rows, seen, label
        self.dump = dump

    def __getitem__(self, grid):
        def compile_launch(*args, **kwargs):
            import triton
            from triton.compiler import ASTSource, make_backend
            from triton.runtime.jit import create_function_from_signature

            backend = make_backend(self.target)
            binder = create_function_from_signature(self.fn.signature, self.fn.params, backend)
            bound, spec, options = binder(*args, **kwargs)
            options, signature, constexprs, attrs = self.fn._pack_args(backend, kwargs, bound, spec, options)
            key = (self.name, repr(sorted(options.__dict__.items())), repr(signature), repr(constexprs), repr(attrs))
            grid_t = tuple(grid(kwargs) if callable(grid) else grid)
            if key in self.seen:
                self.rows.append({**self.seen[key], "workload": self.label(), "grid": list(grid_t)})
                return None
            kernel = triton.compile(ASTSource(self.fn, signature, constexprs, attrs), target=self.target,
                                    options=options.__dict__)
            cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
            usage = resource_usage(kernel.asm["cubin"], cuobjdump)
            row = {"kernel": self.name, "num_warps": options.num_warps, "num_stages": options.num_stages,
                   "maxnreg": getattr(options, "maxnreg", None), "registers": usage.get("REG"),
                   "stack_bytes": usage.get("STACK"), "local_bytes": usage.get("LOCAL"),
                   "shared_bytes": kernel.metadata.shared, **instruction_counts(kernel.asm["ptx"])}
            self.seen[key] = row
            if self.dump is not None:  # one set per distinct compilation, numbered in compile order
                stem = self.dump / f"{len(self.seen):02d}_{self.name}"
                for ext in ("ttgir", "ptx"):
                    stem.with_suffix("." + ext).write_text(kernel.asm[ext])
            self.rows.append({**row, "workload": self.label(), "grid": list(grid_t)})
            return None

        return compile_launch


def main(argv: list[str] | None = None) -> int:
    try:
        return compile_all(parse_args(sys.argv[1:] if argv is None else argv))
    except UserError as exc:  # bad input: one line, exit 2 (as evoteam.bench)
        print(f"offline_compile: {exc}", file=sys.stderr)
        return 2


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kernel", type=Path)
    p.add_argument("--task", required=True)
    p.add_argument("--hardware", default="h200", help="an NVIDIA spec sheet of hardware/ (its arch_target)")
    p.add_argument("--workloads", nargs="*", default=[], help="uuid prefixes (default: the first and the last)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=JSON", help="override PARAMS[KEY]")
    p.add_argument("--json", type=Path)
    p.add_argument("--dump", type=Path, help="write each compiled kernel's TTGIR and PTX into this folder")
    return p.parse_args(argv)


def compile_all(args: argparse.Namespace) -> int:
    import torch

    from evoteam import hardware
    from evoteam.harness.check import torch_dtype
    from evoteam.task import available_tasks, load_module_from_path, load_task, select_workloads, shape_label

    if args.task not in available_tasks():
        raise UserError(f"unknown task {args.task!r}; choose one of {', '.join(available_tasks())}")
    if not args.kernel.is_file():
        raise UserError(f"no kernel file {args.kernel}; give the path of a kernel's .py file")
    hw = hardware.load_spec(args.hardware)  # HardwareError (a UserError) names an unknown target
    match = re.fullmatch(r"sm_(\d+)a?", hw.arch_target or "")
    if hw.backend != "cuda" or not match:
        raise UserError(f"hardware {hw.name} is not an NVIDIA target (arch_target {hw.arch_target!r}); use h100, h200 or b200")
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", int(match.group(1)), 32)
    task = load_task(args.task)
    workloads = task.scaled_workloads("full")
    chosen = select_workloads(workloads, args.workloads) if args.workloads else [workloads[0], workloads[-1]]
    module = load_module_from_path(args.kernel.resolve(), "offline_compile_kernel")
    for item in args.param:
        key, _, value = item.partition("=")
        if not hasattr(module, "PARAMS") or key not in module.PARAMS:
            raise UserError(f"--param {item!r}: the kernel has no PARAMS[{key!r}]")
        try:
            module.PARAMS[key] = json.loads(value)
        except ValueError:
            raise UserError(f"--param {item!r}: the value must be JSON (e.g. 64, true, \"launch\")") from None
    if hasattr(module, "CPU_MULTIPROCESSORS") and hw.multiprocessors:
        module.CPU_MULTIPROCESSORS = hw.multiprocessors  # meta tensors take the kernel's non-CUDA path

    import triton

    rows: list[dict] = []
    seen: dict = {}
    current = {"label": ""}
    # Every `kernel[grid](...)` launch compiles instead (helpers called from kernels are left alone:
    # Triton hashes them into their callers' cache keys).
    triton.runtime.jit.JITFunction.__getitem__ = (
        lambda fn, grid: Compiler(fn.__name__, fn, target, rows, seen, lambda: current["label"], args.dump)[grid])
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    meta = torch.device("meta")
    for w in chosen:
        current["label"] = f"{w.uuid[:8]} {shape_label(w)}"
        inputs = task.make_inputs(w, torch.Generator(), meta)
        shapes = task.output_shapes(w, inputs)
        outputs = {n: torch.empty(shapes[n], dtype=torch_dtype(s.dtype), device=meta)
                   for n, s in task.definition.outputs.items()}
        module.run(**inputs, **outputs)

    print(f"{args.kernel} for {hw.name} (sm_{target.arch}) with Triton {triton.__version__}")
    cols = ["kernel", "num_warps", "num_stages", "maxnreg", "registers", "stack_bytes", "shared_bytes",
            "grid", "mma.sync", "wgmma", "cp.async", "tma", "ldmatrix"]
    for w_label in dict.fromkeys(r["workload"] for r in rows):
        print(w_label)
        for r in (r for r in rows if r["workload"] == w_label):
            print("  " + "  ".join(f"{c} {r[c]}" for c in cols if r.get(c) is not None))
    if args.json:
        args.json.write_text(json.dumps({"kernel": str(args.kernel), "hardware": hw.name, "arch": target.arch,
                                         "triton": triton.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
