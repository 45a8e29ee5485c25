"""kernels/mla_decode/pipelined_mma.cu's index math on a CPU: its ldmatrix/mma fragment layouts against the PTX
definitions, and its token-range work split on every workload shape (scripts/mla_pipelined_mma_layout_check.py)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _check_module():
    spec = importlib.util.spec_from_file_location("layout_check", ROOT / "scripts/mla_pipelined_mma_layout_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fragment_layouts_give_q_kt_and_p_v():
    _check_module().check_layouts()


def test_the_split_covers_every_token_once_and_gives_each_request_consecutive_slots():
    _check_module().check_split()


def test_the_check_models_the_kernels_constants():
    # the model's tile, stages-independent row padding and warp count are the .cu file's
    source = (ROOT / "kernels/mla_decode/pipelined_mma.cu").read_text()
    m = _check_module()
    assert f"constexpr int TILE = {m.TILE};" in source
    assert f"constexpr int WARPS = {m.WARPS}," in source
    assert "constexpr int LDK = D + 8;" in source and m.LDK == m.D + 8
