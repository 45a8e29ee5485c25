"""Every static anti-cheat rule against a planted source, and the dynamic rules' helpers."""

import pytest

from evoteam.harness import scan as anticheat

from conftest import REPO

SEEDS = sorted((REPO / "kernels").glob("*/seed_triton.py"))


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.parent.name)
def test_seed_kernels_pass_the_scan(path):
    assert anticheat.scan_source(path.read_text(), str(path)) == []


@pytest.mark.parametrize("source, rule, words", [
    ("import flashinfer\n", "baseline_import", "flashinfer"),
    ("from fla.ops.kda import chunk_kda\n", "baseline_import", "fla.ops.kda"),
    ("import vllm.model_executor\n", "baseline_import", "vllm"),
    ("import flash_kda\n", "baseline_import", "flash_kda"),
    ("from aiter.mla import mla_decode_fwd\n", "baseline_import", "aiter"),
    ("from evoteam.task import load_task\n", "harness_import", "evoteam"),
    ("import importlib\nm = importlib.import_module('x')\n", "escape", "importlib"),
    ("m = __import__('flashinfer')\n", "escape", "__import__"),
    ("x = 'fla.ops.kda'\n", "baseline_import", "fla.ops.kda"),
    ("import torch\nx = torch.ops.load('kernels/mla_decode/reference.py')\n", "reference_access", "reference.py"),
    ("src = open('x').read()\n", "escape", "open()"),
    ("exec('print(1)')\n", "escape", "exec()"),
    ("import torch\nm = torch.sys.modules\n", "escape", ".modules"),
    ("import ctypes\n", "escape", "ctypes"),
    ("import subprocess\n", "escape", "subprocess"),
    ("import socket\n", "escape", "socket"),
    ("import os\nos.system('ls')\n", "escape", ".system"),
    ("import os\nos.kill(os.getppid(), 9)\n", "escape", ".kill"),
    ("import requests\n", "escape", "requests"),
    ("import pandas\n", "escape", "not on the allowed list"),
    ("def f():\n    return f.__globals__\n", "escape", "__globals__"),
    ("from . import sibling\n", "escape", "relative import"),
    ("x = getattr(object, 'a')\n", "escape", "getattr()"),
    ("def broken(:\n", "syntax", "not valid Python"),
])
def test_planted_sources_are_refused(source, rule, words):
    violations = anticheat.scan_source(source)
    assert violations, source
    assert any(v.rule == rule and words in v.detail for v in violations), violations


def test_plain_triton_and_torch_code_is_allowed():
    source = ("import math\nimport torch\nimport triton\nimport triton.language as tl\n\n"
              "@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, tl.load(x_ptr) + 1)\n\n"
              "def run(x, out):\n    out.copy_(torch.exp(x) * math.pi)\n")
    assert anticheat.scan_source(source) == []
    assert anticheat.jit_function_names(source) == ["k"]


def test_foreign_kernels_spares_the_candidates_own_names():
    names = ["BatchMLAPagedAttentionKernel<...>", "my_kda_kernel_0d1d", "chunk_kda_fwd_kernel_o", "copy_kernel"]
    assert anticheat.foreign_kernels(names, own_markers=["my_kda_kernel"]) == [
        "BatchMLAPagedAttentionKernel<...>", "chunk_kda_fwd_kernel_o"]
    assert anticheat.foreign_kernels(["triton_poi_fused_add_0"]) == []


def test_physical_floor():
    # 4.8 GB at 4.8 TB/s takes 1 ms.
    assert anticheat.physical_floor_ms(4.8e9, 4.8) == pytest.approx(1.0)
    assert anticheat.physical_floor_ms(1e9, None) is None


def test_docstrings_may_name_files_but_code_may_not():
    doc = '"""Reads nothing: see kernels/mla_decode/reference.py for the math."""\n\ndef run():\n    """kernels/ too."""\n'
    assert anticheat.scan_source(doc) == []
    code = doc + "\nPATH = 'kernels/mla_decode/reference.py'\n"
    assert [v.rule for v in anticheat.scan_source(code)] == ["reference_access"]
