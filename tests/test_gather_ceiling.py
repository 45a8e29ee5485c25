"""scripts/gather_ceiling.py's kernels under the Triton interpreter: the gather reads exactly the rows a
decode must (every byte, each once), the copy copies, and the four index orders name the same number of
pages. The timings themselves need a GPU (graph replay)."""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import gather_ceiling  # noqa: E402


def host_xor(ckv, kpe, idx):
    rows = idx.long()
    return gather_ceiling.xor_rows(torch.cat([ckv[rows], kpe[rows]], dim=1).view(torch.int16))


@pytest.mark.parametrize("config", gather_ceiling.CONFIGS[:3])
def test_gather_reads_exactly_the_named_rows(config):
    gen = torch.Generator().manual_seed(3)
    ckv = torch.randn(700, 512, generator=gen).bfloat16()
    kpe = torch.randn(700, 64, generator=gen).bfloat16()
    idx = torch.randint(0, 700, (301,), generator=gen, dtype=torch.int32)  # not a multiple of any tile
    call = gather_ceiling.gather_fn(ckv, kpe, idx, config)
    call(0)
    assert (gather_ceiling.xor_rows(call.out) == host_xor(ckv, kpe, idx)).all()
    # one row fewer, or another row, gives another fold (the check would catch skipped work)
    assert not (gather_ceiling.xor_rows(call.out) == host_xor(ckv, kpe, idx[:-1])).all()


def test_copy_moves_every_element():
    call = gather_ceiling.copy_fn(2 * 4 * 5000 + 8, "cpu")
    call(0)
    assert call.moved == 2 * 4 * 5001
    assert torch.equal(call.src, call.dst)


def test_index_orders_name_the_same_number_of_pages():
    gen = torch.Generator().manual_seed(1)
    kv_indices = torch.randperm(10_000, generator=gen)[:321].to(torch.int32)
    orders = gather_ceiling.index_orders(kv_indices, gen)
    assert set(orders) == set(gather_ceiling.ORDERS)
    assert torch.equal(orders["sorted"], torch.sort(kv_indices).values)
    assert torch.equal(torch.sort(orders["compact"]).values, torch.arange(321, dtype=torch.int32))
    assert torch.equal(orders["contiguous"], torch.arange(321, dtype=torch.int32))
    assert all(o.dtype == torch.int32 and o.numel() == 321 for o in orders.values())


def test_a_cuda_kernel_is_built_by_torchs_extension_loader(tmp_path, monkeypatch):
    # a .cu file (pipelined_mma.cu, a "cuda" solution) is built as the harness builds one, a .py file loaded as the
    # sweep loads it; the build itself needs nvcc and a CUDA torch, so here the loader records its call
    import torch.utils.cpp_extension as cpp_extension

    calls = []

    def fake_load(**kwargs):
        calls.append(kwargs)
        return type("Ext", (), {"run": staticmethod(lambda **_: None)})

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    root = Path(__file__).resolve().parent.parent
    cu = root / "kernels/mla_decode/pipelined_mma.cu"
    py = root / "kernels/mla_decode/seed_triton.py"
    modules = gather_ceiling.load_kernels([str(cu), str(py)], tmp_path)
    assert set(modules) == {"pipelined_mma", "seed_triton"}
    assert callable(modules["seed_triton"].run)
    (call,) = calls
    assert call["sources"] == [str(cu)] and call["with_cuda"] is True
    assert Path(call["build_directory"]).is_dir()
