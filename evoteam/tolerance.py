"""How close an output must be to the reference: one home for the rule's numbers."""

from __future__ import annotations

import math
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

# The two pass rules a check can judge by (EvalRequest.fib_rule), named as results and traces record them.
# evoteam's: the tolerances above (a task may override them per output), the relative-norm bound, and a non-finite
# output that equals the reference's (the lse of an empty row is -inf) passes. flashinfer-bench's (its
# BenchmarkConfig's defaults, bench/utils.py compute_error_stats, in float32): atol = rtol = 1e-2 for every output
# whatever its dtype, every element (matched ratio 1.0), no norm bound, and any NaN or Inf in an output fails.
RULE_EVOTEAM, RULE_FIB = "evoteam", "flashinfer-bench"
FIB_TOLERANCE = Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=math.inf)
