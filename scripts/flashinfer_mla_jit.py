"""On a GPU host: builds FlashInfer's fa2 and fa3 MLA JIT modules for the MLA task's shapes once, loads them, and copies
their .so files to OUT_DIR/NAME/NAME.so, to be brought back and carried: `FLASHINFER_AOT=OUT_DIR bash
scripts/fetch_wheels.sh` puts them into the slim wheel as AOT artifacts, which FlashInfer loads without compiling.

Usage (with the slim FlashInfer installed: . scripts/device_env.sh; use_wheels flashinfer):
  python3 scripts/flashinfer_mla_jit.py OUT_DIR [fa2] [fa3]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    backends = argv[1:] or ["fa2", "fa3"]
    # a fresh JIT workspace: a module found in an older cache would not be built (nor timed) here
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", tempfile.mkdtemp(prefix="fi-jit-"))
    import flashinfer
    import torch
    from flashinfer.jit import gen_batch_mla_module

    print(f"flashinfer {flashinfer.__version__} (slim={getattr(flashinfer, 'SLIM', None)}) from {flashinfer.__file__}; "
          f"{torch.cuda.get_device_name()}; nvcc {shutil.which('nvcc')}, ninja {shutil.which('ninja')}", flush=True)
    failed = 0
    for backend in backends:
        spec = gen_batch_mla_module(backend, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64, False)
        t0 = time.time()
        try:
            spec.build_and_load()
        except Exception as exc:  # noqa: BLE001 - report and go on with the other backend
            print(f"{backend}: {spec.name}: FAILED after {time.time() - t0:.0f} s: {type(exc).__name__}: "
                  f"{str(exc)[-3000:]}", flush=True)
            failed += 1
            continue
        so = spec.get_library_path()
        dest = out / spec.name / f"{spec.name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(so, dest)
        print(f"{backend}: {spec.name}: built and loaded in {time.time() - t0:.0f} s "
              f"({'AOT, not compiled' if spec.is_aot else 'JIT'}), {so.stat().st_size / 1e6:.1f} MB -> {dest}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
