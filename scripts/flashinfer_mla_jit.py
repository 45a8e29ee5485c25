"""Builds FlashInfer's fa2 and fa3 MLA JIT modules for the MLA task's shapes once (bf16, int32 indices, head_dim_ckv
512, head_dim_kpe 64) and copies their .so files to OUT_DIR/NAME/NAME.so, to be carried: `FLASHINFER_AOT=OUT_DIR bash
scripts/fetch_wheels.sh` puts them into the slim wheel as AOT artifacts, which FlashInfer loads without compiling
(where one does not load, FlashInfer warns and compiles it as before).

On a GPU host it builds and loads them (for the card's architecture). Without a GPU (nvcc alone) it builds them for
sm_90a (FLASHINFER_CUDA_ARCH_LIST, default 9.0a) and does not load them; CUDA_HOME defaults to nvcc's folder's
parent, or /usr/local/cuda where that has no libcudart (MAX_JOBS=1: one nvcc at a time), and where the toolkit has no libcuda.so stub to link against, an empty one with the
driver's soname is made and put on LIBRARY_PATH (nothing from it is used: the modules need only libcudart).

Usage (the slim FlashInfer installed, or on PYTHONPATH with its dependencies):
  python3 scripts/flashinfer_mla_jit.py OUT_DIR [fa2] [fa3]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _libcuda_stub(cuda_home: str, scratch: Path) -> None:
    if any((Path(cuda_home) / d / "libcuda.so").exists() for d in ("lib64/stubs", "lib64", "targets/x86_64-linux/lib/stubs")):
        return
    stub = scratch / "libcuda-stub"
    stub.mkdir(exist_ok=True)
    (stub / "stub.c").write_text("")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub / "libcuda.so"),
                    str(stub / "stub.c")], check=True)
    os.environ["LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(stub), os.environ.get("LIBRARY_PATH")]))
    print(f"no libcuda.so stub in {cuda_home}: linking against an empty one ({stub})", flush=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    backends = argv[1:] or ["fa2", "fa3"]
    scratch = Path(tempfile.mkdtemp(prefix="fi-jit-"))
    # a fresh JIT workspace: a module found in an older cache would not be built (nor timed) here
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(scratch))
    import torch

    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
        nvcc = shutil.which("nvcc")
        if not nvcc:
            print("no GPU and no nvcc: nothing to build with", file=sys.stderr)
            return 2
        # nvcc's folder's parent, unless that has no libcudart (nvcc a wrapper script, as in /usr/local/bin here)
        homes = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
        home = next((h for h in homes if Path(h, "lib64", "libcudart.so").exists()), homes[0])
        os.environ.setdefault("CUDA_HOME", home)
        _libcuda_stub(os.environ["CUDA_HOME"], scratch)
    import flashinfer
    from flashinfer.jit import gen_batch_mla_module

    where = torch.cuda.get_device_name() if gpu else f"no GPU: built for {os.environ['FLASHINFER_CUDA_ARCH_LIST']}, not loaded"
    print(f"flashinfer {flashinfer.__version__} (slim={getattr(flashinfer, 'SLIM', None)}) from {flashinfer.__file__}; "
          f"{where}; nvcc {shutil.which('nvcc')}, ninja {shutil.which('ninja')}", flush=True)
    failed = 0
    for backend in backends:
        spec = gen_batch_mla_module(backend, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64, False)
        t0 = time.time()
        try:
            spec.build_and_load() if gpu else spec.build()
        except Exception as exc:  # noqa: BLE001 - report and go on with the other backend
            print(f"{backend}: {spec.name}: FAILED after {time.time() - t0:.0f} s: {type(exc).__name__}: "
                  f"{str(exc)[-3000:]}", flush=True)
            failed += 1
            continue
        aot = gpu and spec.is_aot
        so = spec.get_library_path() if gpu else spec.jit_library_path
        dest = out / spec.name / f"{spec.name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(so, dest)
        how = "loaded from the wheel's AOT artifact, not compiled" if aot else ("built and loaded" if gpu else "built")
        print(f"{backend}: {spec.name}: {how} in {time.time() - t0:.0f} s, {so.stat().st_size / 1e6:.2f} MB -> {dest}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
