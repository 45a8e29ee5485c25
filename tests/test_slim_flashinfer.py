"""The slim FlashInfer repack (scripts/slim_flashinfer.py) and its CPU check (scripts/check_slim_flashinfer.py), and the
FlashInfer MLA adapter on both APIs (0.5.3's flat plan/run, 0.7.4's metadata and structural inputs)."""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import importlib.util
import io
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import slim_flashinfer as slim  # noqa: E402

D = "flashinfer/data"
# a small FlashInfer-shaped wheel: what MLA imports at module level, what it imports only inside functions, what
# the full __init__ imports, the MLA JIT sources with a header chain (quoted beside its file, angled on the include
# path, one include not in the wheel), and headers nothing includes
FAKE = {
    "flashinfer/__init__.py": "from . import fused_moe\nfrom .version import __version__\nfrom . import jit\n",
    "flashinfer/version.py": "from ._build_meta import __version__\n__git_commit__ = __git_version__ = 'x'\n",
    "flashinfer/_build_meta.py": "__version__ = '0.7.4'\n",
    "flashinfer/py.typed": "",
    "flashinfer/jit/__init__.py": "from .core import JitSpec\nfrom . import env\n",
    "flashinfer/jit/core.py": "import os\nclass JitSpec: pass\n",
    "flashinfer/jit/env.py": "try:\n    import flashinfer_cubin\nexcept ImportError:\n    pass\n",
    "flashinfer/mla/__init__.py": "from ._core import *\n",
    "flashinfer/mla/_core.py": ("from ..utils import helper\nfrom ._batch_mla import _wrapper\n"
                                "def nvfp4():\n    from ..experimental.nvfp4 import run\n"
                                "BatchMLAPagedAttentionWrapper = _wrapper.W\n"),
    "flashinfer/mla/_batch_mla/__init__.py": "",
    "flashinfer/mla/_batch_mla/_wrapper.py": "class W: pass\n",
    "flashinfer/utils.py": "def helper(): pass\n",
    "flashinfer/tactics_blocklist.py": "",
    "flashinfer/experimental/__init__.py": "",
    "flashinfer/experimental/nvfp4.py": "def run(): pass\n",
    "flashinfer/fused_moe/__init__.py": "",
    f"{D}/csrc/fused_moe_sm100.cu": "",
    f"{D}/csrc/batch_mla_config.jinja": "#include <flashinfer/page.cuh>\n",
    f"{D}/include/flashinfer/page.cuh": '#pragma once\n#include "math.cuh"\n#include <cute/tensor.hpp>\n',
    f"{D}/include/flashinfer/math.cuh": "#include <cuda_runtime.h>\n",
    f"{D}/include/flashinfer/unused.cuh": "",
    f"{D}/cutlass/include/cute/tensor.hpp": "#  include <cute/layout.hpp>\n",
    f"{D}/cutlass/include/cute/layout.hpp": "",
    f"{D}/cutlass/include/cutlass/gemm_sm100.hpp": "",
    f"{D}/cccl/cub/cub/cub.cuh": "",
    f"{D}/cccl/thrust/thrust/sort.h": "",
    "flashinfer_python-0.7.4.dist-info/METADATA": ("Metadata-Version: 2.4\nName: flashinfer-python\nVersion: 0.7.4\n"
                                                   "Summary: FlashInfer\nRequires-Dist: nvidia-cutlass-dsl>=4.8.0\n"
                                                   "Provides-Extra: cu13\n\nREADME\n"),
    "flashinfer_python-0.7.4.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "flashinfer_python-0.7.4.dist-info/RECORD": "",
}
for name in {n for names in slim.MLA_SOURCES.values() for n in names if n.endswith(".cu")}:
    FAKE[f"{D}/csrc/{name}"] = '#include "batch_mla_config.inc"\n#include <flashinfer/page.cuh>\n'


def _wheel(tmp_path: Path) -> Path:
    path = tmp_path / "flashinfer_python-0.7.4-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in FAKE.items():
            zf.writestr(name, text)
    return path


def test_repack_keeps_what_mla_imports_and_includes(tmp_path):
    out, summary = slim.build(_wheel(tmp_path), tmp_path / "out")
    assert out.name == "flashinfer_python-0.7.4+sm90mla-py3-none-any.whl"
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        init = zf.read("flashinfer/__init__.py").decode()
        metadata = zf.read("flashinfer_python-0.7.4+sm90mla.dist-info/METADATA").decode()
        record = zf.read("flashinfer_python-0.7.4+sm90mla.dist-info/RECORD").decode()
        contents = {n: zf.read(n) for n in names}
    # Python: the module-level closure from the roots, parents included; the named function-level imports only
    for kept in ("flashinfer/version.py", "flashinfer/_build_meta.py", "flashinfer/jit/core.py", "flashinfer/jit/env.py",
                 "flashinfer/mla/_core.py", "flashinfer/mla/_batch_mla/__init__.py", "flashinfer/mla/_batch_mla/_wrapper.py",
                 "flashinfer/utils.py", "flashinfer/tactics_blocklist.py", "flashinfer/py.typed"):
        assert kept in names, kept
    assert not any(n.startswith(("flashinfer/experimental/", "flashinfer/fused_moe/")) for n in names)
    assert "fused_moe" not in init and "from . import jit" in init
    # sources and the header chain (quoted beside its file, angled through the include path); nothing else but CCCL
    for kept in (f"{D}/csrc/batch_mla_sm90_run.cu", f"{D}/csrc/batch_mla_config.jinja", f"{D}/include/flashinfer/page.cuh",
                 f"{D}/include/flashinfer/math.cuh", f"{D}/cutlass/include/cute/tensor.hpp",
                 f"{D}/cutlass/include/cute/layout.hpp", f"{D}/cccl/cub/cub/cub.cuh", f"{D}/cccl/thrust/thrust/sort.h"):
        assert kept in names, kept
    for dropped in (f"{D}/include/flashinfer/unused.cuh", f"{D}/cutlass/include/cutlass/gemm_sm100.hpp",
                    f"{D}/csrc/fused_moe_sm100.cu"):
        assert dropped not in names, dropped
    assert "cuda_runtime.h" in summary["includes_outside"] and "batch_mla_config.inc" in summary["includes_outside"]
    # an include dir nothing comes from stays on the include path
    assert f"{D}/spdlog/include/{slim.PLACEHOLDER}" in names
    assert f"{D}/include/{slim.PLACEHOLDER}" not in names
    # dist-info: the version marked, Requires-Dist what the kept modules import, RECORD's hashes right
    assert "Version: 0.7.4+sm90mla\n" in metadata and "nvidia-cutlass-dsl" not in metadata
    assert "Requires-Dist: apache-tvm-ffi<0.2,>=0.1.11" in metadata and metadata.endswith("README\n")
    rows = list(csv.reader(io.StringIO(record)))
    assert {r[0] for r in rows} == names
    for path, digest, size in rows:
        if digest:
            expect = base64.urlsafe_b64encode(hashlib.sha256(contents[path]).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expect}" and int(size) == len(contents[path]), path
    # reproducible: the same bytes again
    again, _ = slim.build(_wheel(tmp_path), tmp_path / "again")
    assert again.read_bytes() == out.read_bytes()


def test_repack_imports_and_carries_built_modules(tmp_path):
    aot = tmp_path / "cached_ops" / "batch_mla_x_sm90"
    aot.mkdir(parents=True)
    (aot / "batch_mla_x_sm90.so").write_bytes(b"\x7fELF")
    (aot / "batch_mla_x_sm90.cuda.o").write_bytes(b"")
    out, summary = slim.build(_wheel(tmp_path), tmp_path / "out", aot_dir=tmp_path / "cached_ops")
    assert summary["aot_modules"] == ["batch_mla_x_sm90.so"]
    site = tmp_path / "site"
    with zipfile.ZipFile(out) as zf:
        assert f"{D}/aot/batch_mla_x_sm90/batch_mla_x_sm90.so" in zf.namelist()
        zf.extractall(site)
    code = ("import flashinfer.mla, sys; assert flashinfer.mla.BatchMLAPagedAttentionWrapper\n"
            "assert 'flashinfer.fused_moe' not in sys.modules; print(flashinfer.SLIM, flashinfer.__version__)\n"
            "try:\n    flashinfer.mla._core.nvfp4()\nexcept ImportError:\n    print('experimental absent')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=site, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["sm90mla 0.7.4", "experimental absent"]


def test_repack_refuses_a_wheel_without_mla_sources(tmp_path):
    path = tmp_path / "flashinfer_python-0.5.3-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in FAKE.items():
            if "batch_mla_sm90" not in name:
                zf.writestr(name, text)
    with pytest.raises(SystemExit, match="lacks MLA's JIT sources"):
        slim.build(path, tmp_path / "out")


SLIM_WHEELS = sorted(glob.glob(str(REPO / ".whl" / "flashinfer_python-*+sm90mla-*.whl")))


@pytest.mark.skipif(not SLIM_WHEELS, reason="no slim FlashInfer wheel in .whl/ (made by bash "
                                            "scripts/fetch_wheels.sh from flashinfer-python 0.7.4)")
@pytest.mark.skipif(importlib.util.find_spec("tvm_ffi") is None or importlib.util.find_spec("pynvml") is None,
                    reason="the slim FlashInfer wheel imports apache-tvm-ffi and nvidia-ml-py, not installed here")
def test_real_slim_wheel_imports_and_names_only_files_it_has():
    """The downloaded wheel's slim repack: flashinfer.mla imports from it alone, and the fa2 and fa3 JIT specs of the
    task's shapes name only sources, include dirs and inputs that it has (nvcc -M: scripts/check_slim_flashinfer.py)."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "check_slim_flashinfer.py"), SLIM_WHEELS[-1],
                           "--no-nvcc"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all from the slim package" in proc.stdout and "slim FlashInfer check: ok" in proc.stdout


class _Recorder:
    """A stand-in for BatchMLAPagedAttentionWrapper that records its calls."""

    calls: list = []

    def __init__(self, workspace, backend="auto"):
        self.calls.append(("init", backend))

    def plan(self, *args, **kwargs):
        self.calls.append(("plan", args, kwargs))

    def run(self, *args, **kwargs):
        self.calls.append(("run", args, kwargs))


def _mla_inputs():
    b, h = 2, 16
    return {"q_nope": torch.zeros(b, h, 512, dtype=torch.bfloat16), "q_pe": torch.zeros(b, h, 64, dtype=torch.bfloat16),
            "ckv_cache": torch.zeros(5, 1, 512, dtype=torch.bfloat16), "kpe_cache": torch.zeros(5, 1, 64, dtype=torch.bfloat16),
            "kv_indptr": torch.tensor([0, 2, 5], dtype=torch.int32), "kv_indices": torch.arange(5, dtype=torch.int32),
            "sm_scale": torch.tensor(0.04), "output": torch.zeros(b, h, 512, dtype=torch.bfloat16),
            "lse": torch.zeros(b, h)}


@pytest.mark.parametrize("api", ["0.5.3", "0.7.4"])
def test_flashinfer_adapter_speaks_both_apis(monkeypatch, api):
    """0.5.3: flat plan(qo_indptr, kv_indptr, kv_indices, kv_len, ...) and run(q_nope, q_pe, ckv, kpe); 0.7.4: plan(
    metadata=MLAPlanMetadata.csr(...), split layouts, base-2 lse) and run(query=, kv_cache=), which do not warn."""
    from evoteam.harness import baselines

    mla = types.ModuleType("flashinfer.mla")
    mla.BatchMLAPagedAttentionWrapper = _Recorder
    if api == "0.7.4":
        mla.MLAPlanMetadata = types.SimpleNamespace(csr=lambda *tensors: ("csr", tensors))
    package = types.ModuleType("flashinfer")
    package.mla = mla
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.mla", mla)
    monkeypatch.setattr(baselines.FlashInferMLA, "WORKSPACE_BYTES", 1024)
    _Recorder.calls = []
    inputs = _mla_inputs()
    run = baselines.FlashInferMLA(backend="fa3").prepare(None, None, inputs)
    run(**inputs)
    (init, plan, call) = _Recorder.calls
    assert init == ("init", "fa3")
    _, args, kwargs = plan
    shape = {"num_heads": 16, "head_dim_ckv": 512, "head_dim_kpe": 64, "page_size": 1, "causal": False,
             "q_data_type": torch.bfloat16, "kv_data_type": torch.bfloat16}
    assert {k: kwargs[k] for k in shape} == shape and kwargs["sm_scale"] == pytest.approx(0.04)
    _, run_args, run_kwargs = call
    assert run_kwargs["out"] is inputs["output"] and run_kwargs["lse"] is inputs["lse"] and run_kwargs["return_lse"]
    if api == "0.5.3":
        qo_indptr, kv_indptr, kv_indices, kv_len = args
        assert "metadata" not in kwargs and "lse_mode" not in kwargs
        assert all(a is inputs[n] for a, n in zip(run_args, ("q_nope", "q_pe", "ckv_cache", "kpe_cache"), strict=True))
    else:
        assert args == () and run_args == ()
        tag, (qo_indptr, kv_indptr, kv_indices, kv_len) = kwargs["metadata"]
        assert (tag, kwargs["query_layout"], kwargs["kv_cache_layout"], kwargs["lse_mode"]) == ("csr", "split", "split", "base2")
        assert run_kwargs["query"][0] is inputs["q_nope"] and run_kwargs["query"][1] is inputs["q_pe"]
        assert run_kwargs["kv_cache"][0] is inputs["ckv_cache"] and run_kwargs["kv_cache"][1] is inputs["kpe_cache"]
    assert qo_indptr.tolist() == [0, 1, 2] and kv_len.tolist() == [2, 3] and kv_indices is inputs["kv_indices"]
    assert kv_indptr is inputs["kv_indptr"]
