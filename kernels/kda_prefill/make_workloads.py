"""Writes workloads.jsonl and cu_seqlens.safetensors of the kda_prefill task (run from anywhere:
`python kernels/kda_prefill/make_workloads.py`). Needs only the Python standard library.

Each workload is named by its shape: total tokens, sequences (`n4x2048`: 4 of 2048 tokens;
`n6var`: 6 of mixed lengths), heads, gate, initial state (`init`) or none (`h0`), e.g.
`t8192_n4x2048_h16_softplus_h0`; its uuid is
uuid5(NAMESPACE_URL, "evoteam/kda_prefill/<name>"), so regenerating gives the same uuids. The
per-sequence lengths are stored as int32 cu_seqlens tensors in cu_seqlens.safetensors (the
FlashInfer-Trace way to give an index tensor), under the key <name>; the workload's cu_seqlens input
is {"type": "safetensors", "path": "cu_seqlens.safetensors", "tensor_key": "<name>"}, the path
relative to this folder. The problem scale "small" (CPU runs) uses the keys "small/<name>" of the
same file for the few workloads listed in SMALL; task.py reads both.
"""

from __future__ import annotations

import json
import struct
import sys
import uuid
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
DEFINITION = "kda_prefill_d128"
CU_SEQLENS_FILE = "cu_seqlens.safetensors"
HEAD_DIM = 128
LOWER_BOUND = -5.0

# Kimi-Linear-48B-A3B: 32 KDA heads, K = V = 128. Tensor parallel 1 / 2 / 4 gives 32 / 16 / 8 heads
# per GPU. (num_heads, sequence lengths, gate, initial state); gate "softplus" is Kimi-Linear's own,
# "bounded" the lower-bounded sigmoid gate (lower_bound -5) that FlashKDA supports.
WORKLOADS: list[tuple[int, list[int], str, bool]] = [
    # one sequence, 1k-16k tokens
    (32, [1024], "softplus", False),
    (32, [1024], "bounded", True),
    (16, [2048], "softplus", True),
    (32, [4096], "softplus", False),
    (32, [4096], "bounded", False),
    (8, [4096], "softplus", True),
    (32, [8192], "softplus", True),
    (32, [8192], "bounded", False),
    (16, [8192], "bounded", True),
    (32, [16384], "softplus", False),
    (32, [16384], "bounded", True),
    (8, [16384], "softplus", False),
    # a few sequences of equal length
    (32, [1024] * 4, "softplus", True),
    (32, [1024] * 8, "bounded", False),
    (16, [2048] * 4, "softplus", False),
    (32, [4096] * 2, "bounded", True),
    (32, [4096] * 4, "softplus", False),
    (8, [2048] * 8, "bounded", True),
    # variable lengths: lengths that are not multiples of 64 (chunk edges), single tokens
    (32, [4096, 512, 2048, 1536], "softplus", True),
    (32, [1000, 3000, 17, 2500, 600, 883], "bounded", False),
    (32, [5000, 300, 2700, 1, 4096, 1200, 987, 2100], "softplus", False),
    (16, [63, 2049, 777, 4000, 1303], "bounded", True),
    (8, [128, 129, 3000, 65, 4500, 200, 170], "softplus", True),
    (32, [6000, 3001, 1999, 1000], "bounded", True),
]

# The problem scale "small": 4 workloads rewritten to 2 heads and <= 256 tokens, covering both
# gates, with and without initial state, one and several sequences, lengths 1 and 64k +- 1.
SMALL_NUM_HEADS = 2
SMALL: dict[str, list[int]] = {
    "t1024_n1x1024_h32_softplus_h0": [160],
    "t8192_n2x4096_h32_bounded_init": [96, 65],
    "t8192_n4var_h32_softplus_init": [100, 1, 37, 64],
    "t8000_n6var_h32_bounded_h0": [50, 130, 17, 59],
}


def workload_name(num_heads: int, lengths: list[int], gate: str, init: bool) -> str:
    seqs = f"n{len(lengths)}x{lengths[0]}" if len(set(lengths)) == 1 else f"n{len(lengths)}var"
    return f"t{sum(lengths)}_{seqs}_h{num_heads}_{gate}_{'init' if init else 'h0'}"


def workload_uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"evoteam/kda_prefill/{name}"))


def cu_seqlens(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def workload_trace(num_heads: int, lengths: list[int], gate: str, init: bool) -> dict:
    name = workload_name(num_heads, lengths, gate, init)
    return {
        "definition": DEFINITION,
        "solution": None,
        "workload": {
            "axes": {
                "seq_len": sum(lengths),
                "num_q_heads": num_heads,
                "num_v_heads": num_heads,
                "num_sequences": len(lengths),
                "len_cu_seqlens": len(lengths) + 1,
            },
            "inputs": {
                "q": {"type": "random"},
                "k": {"type": "random"},
                "v": {"type": "random"},
                "g": {"type": "random"},
                "beta": {"type": "random"},
                "A_log": {"type": "random"},
                "dt_bias": {"type": "random"},
                "initial_state": {"type": "random"},
                "cu_seqlens": {"type": "safetensors", "path": CU_SEQLENS_FILE, "tensor_key": name},
                "scale": {"type": "scalar", "value": HEAD_DIM ** -0.5},
                "bounded_gate": {"type": "scalar", "value": gate == "bounded"},
                "lower_bound": {"type": "scalar", "value": LOWER_BOUND},
                "has_initial_state": {"type": "scalar", "value": init},
            },
            "uuid": workload_uuid(name),
        },
        "evaluation": None,
    }


def write_int32_safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """The safetensors format: u64 header size, JSON header, then the raw little-endian data."""
    header: dict[str, dict] = {}
    data = b""
    for key in sorted(tensors):
        values = tensors[key]
        blob = struct.pack(f"<{len(values)}i", *values)
        header[key] = {"dtype": "I32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def build() -> tuple[list[dict], dict[str, list[int]]]:
    traces = [workload_trace(*w) for w in WORKLOADS]
    names = [workload_name(*w) for w in WORKLOADS]
    if len(set(names)) != len(names):
        raise ValueError("two workloads have the same name")
    tensors = {name: cu_seqlens(w[1]) for name, w in zip(names, WORKLOADS)}
    for name, lengths in SMALL.items():
        if name not in tensors:
            raise ValueError(f"SMALL names unknown workload {name}")
        tensors[f"small/{name}"] = cu_seqlens(lengths)
    return traces, tensors


def write(folder: Path = FOLDER) -> None:
    traces, tensors = build()
    with open(folder / "workloads.jsonl", "w") as fh:
        for trace in traces:
            fh.write(json.dumps(trace, separators=(",", ":")) + "\n")
    write_int32_safetensors(folder / CU_SEQLENS_FILE, tensors)
    print(f"wrote {len(traces)} workloads and {len(tensors)} cu_seqlens tensors to {folder}", file=sys.stderr)


def main() -> None:
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER)


if __name__ == "__main__":
    main()
