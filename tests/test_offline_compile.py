"""scripts/offline_compile.py: a kernel file's Triton launches compiled for sm_90 without a GPU (meta
tensors of the real shapes), with each compiled kernel's registers, stack and shared memory."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/offline_compile.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_compiles_every_launch_of_a_workload_for_sm90(tmp_path):
    out = run("kernels/mla_decode/flashdecode_triton.py", "--task", "mla_decode", "--workloads", "5bef8d88",
              "--param", 'COMBINE="launch"', "--json", str(tmp_path / "c.json"), "--dump", str(tmp_path / "ir"))
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["arch"] == 90 and data["hardware"] == "h200"
    kernels = {r["kernel"]: r for r in data["rows"]}
    # COMBINE "launch" on a batch of 64: the piece kernel, then the merge kernel (batch x column blocks)
    assert set(kernels) == {"_fd_piece_kernel", "_fd_merge_kernel"}
    piece = kernels["_fd_piece_kernel"]
    assert 128 <= piece["registers"] <= 255 and piece["stack_bytes"] == 0
    assert piece["shared_bytes"] > 2 * 32 * 1152  # two pipelined buffers of 32 KV rows (num_stages 5)
    assert piece["mma.sync"] > 0 and piece["cp.async"] > 0 and piece["grid"][1:] == [1, 1]
    assert kernels["_fd_merge_kernel"]["grid"][0] == 64
    assert "_fd_piece_kernel" in out.stdout and "registers" in out.stdout
    ttgir = (tmp_path / "ir/01__fd_piece_kernel.ttgir").read_text()
    assert "scf.for" in ttgir and "async_copy_global_to_local" in ttgir  # the pipelined gather loop
    assert (tmp_path / "ir/02__fd_merge_kernel.ptx").read_text().count(".entry") == 1


@pytest.mark.parametrize("args,message", [
    (["--task", "no_such_task"], "unknown task"),
    (["--task", "mla_decode", "--hardware", "cpu"], "not an NVIDIA target"),
    (["--task", "mla_decode", "--param", "NOT_A_PARAM=1"], "has no PARAMS"),
    (["--task", "mla_decode", "--param", "BLOCK_N=sixty"], "must be JSON"),
    (["--task", "mla_decode", "--workloads", "zzzzzzzz"], "zzzzzzzz"),
])
def test_bad_input_is_one_line(args, message):
    out = run("kernels/mla_decode/flashdecode_triton.py", *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.strip() and "Warning" not in line and "warn" not in line]
    assert len(lines) == 1 and message in lines[0], out.stderr
