"""Tensors in safetensors files (the format FlashInfer-Trace workloads point to), without the package:
an 8-byte little-endian header size, a JSON header (dtype, shape, byte offsets per tensor), raw data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

_DTYPES = {"I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool, "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
           "BF16": torch.bfloat16}
_NAMES = {v: k for k, v in _DTYPES.items()}


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    header: dict = {}
    chunks, offset = [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data to 8 bytes
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(struct.pack("<Q", len(head)) + head + b"".join(chunks))


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    raw = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    data = raw[8 + size:]
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        out[key] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(info["shape"]) if end > begin \
            else torch.empty(info["shape"], dtype=dtype)
    return out
