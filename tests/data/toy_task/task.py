"""Toy task for the checker's tests: masked scaled softmax with log-sum-exp (see definition.json)."""

import torch

# No TOLERANCES: the dtype defaults apply (bf16 out, fp32 lse).


def scaled_workloads(workloads, scale):
    # The workloads are already tiny; "small" keeps the first two.
    return list(workloads) if scale == "full" else list(workloads[:2])


def _lengths(num_rows, num_cols):
    """Deterministic per workload: row 0 full, row 1 empty (lse = -inf), the rest partial."""
    lengths = [(r * 37 + 11) % (num_cols + 1) for r in range(num_rows)]
    lengths[0] = num_cols
    if num_rows > 1:
        lengths[1] = 0
    return lengths


def make_inputs(workload, generator, device):
    rows, cols = workload.axes["num_rows"], workload.axes["num_cols"]
    x = torch.randn((rows, cols), generator=generator, device=device, dtype=torch.float32) * 2.0
    scale = workload.inputs["scale"].value if "scale" in workload.inputs else 1.0
    return {
        "x": x.to(torch.bfloat16),
        "lengths": torch.tensor(_lengths(rows, cols), dtype=torch.int32, device=device),
        "scale": float(scale),
    }
