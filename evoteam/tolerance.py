"""How close an output must be to the reference: one home for the rule's numbers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """Element-wise |out - ref| <= atol or |out - ref| <= rtol * (|ref| + 1e-8) (flashinfer-bench's rule),
    plus ||out - ref|| / ||ref|| <= max_rel_norm."""

    atol: float
    rtol: float
    max_rel_norm: float


# Defaults by output dtype. bf16 follows flashinfer-bench (atol = rtol = 1e-2); the relative-norm
# bound catches an output that is wrong everywhere by a little less than the element-wise bound.
DTYPE_TOLERANCES = {
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=1e-2),
    "float16": Tolerance(atol=1e-3, rtol=1e-3, max_rel_norm=2e-3),
    "float32": Tolerance(atol=1e-4, rtol=1e-4, max_rel_norm=1e-4),
}
