"""kda_prefill: workload scaling, input maker and tolerances (see evoteam/task.py for the contract).

Sequence lengths: each workload's cu_seqlens input is {"type": "safetensors", "path":
"cu_seqlens.safetensors", "tensor_key": <workload name>}, the path relative to this folder; the
file holds int32 cu_seqlens per workload, written by make_workloads.py. The problem scale "small"
rewrites the workloads that have a "small/<name>" entry in that file to 2 heads and those
(<= 256-token) lengths, each with a uuid of its own derived from the published one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from functools import cache
from pathlib import Path

import torch

from evoteam.blobs import read_safetensors
from evoteam.schema import InputSpec, Workload
from evoteam.task import DTYPE_TOLERANCES, Tolerance, scaled_uuid

FOLDER = Path(__file__).resolve().parent
HEAD_DIM_K = 128
HEAD_DIM_V = 128
SMALL_NUM_HEADS = 2
INITIAL_STATE_STD = 0.5

# Measured on an H200 over all 24 workloads (README.md, "Tolerances"), against fla-core 0.6.0's
# chunk_kda, which rounds q, k and intermediates to bf16 for tensor cores:
#   output (bf16): flashinfer-bench's bf16 default. fla: max |err| 2.0e-3, rel. norm <= 5.5e-3 (1.8x margin).
#   final_state (fp32 from bf16 inputs): fla: max |err| 1.7e-2, needs atol 1.41e-2 at rtol 1e-2,
#   rel. norm <= 4.4e-3; a kernel that keeps the recurrence in fp32 (the seed): rel. norm ~1e-6.
#   One token left out 8 before the end of a sequence moves final_state by >= 0.18 element-wise
#   beyond rtol and by >= 2e-2 in relative norm on the small workloads. The float32 default (1e-4)
#   would fail every kernel that feeds bf16 operands to tensor cores.
TOLERANCES = {
    "output": DTYPE_TOLERANCES["bfloat16"],
    "final_state": Tolerance(atol=3e-2, rtol=1e-2, max_rel_norm=1e-2),
}

# Timed calls (see evoteam/task.py): every output depends on beta (output_t through the delta rule at step
# t, final_state through every step), and it is small (T x H), so the judge writes it only after its
# clock starts.
LATE_INPUTS = ("beta",)
# In a batch, call k+1's keys are call k's output (both [T, H, 128] bf16; keys are L2-normalised, so any finite
# values serve): everything of a call (the chunk-local inverse, the state, the output) depends on its keys, so no
# call can be computed before the call it follows has ended (the queries alone would not do: the state and the
# chunk-local inverse do not depend on them).
CHAINED_INPUTS = {"k": "output"}


# ----------------------------------------------------------------------------- cu_seqlens file

@cache
def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    return read_safetensors(path)


def _cu_seqlens_spec(workload: Workload) -> InputSpec:
    spec = workload.inputs["cu_seqlens"]
    if spec.type != "safetensors":
        raise ValueError(f"workload {workload.uuid}: cu_seqlens must come from a safetensors file")
    return spec


def cu_seqlens_of(workload: Workload) -> torch.Tensor:
    """The workload's cu_seqlens (int32, CPU), checked against its axes."""
    spec = _cu_seqlens_spec(workload)
    cu = _read_safetensors(FOLDER / spec.path)[spec.tensor_key].to(torch.int32).clone()  # the cache stays intact
    axes = workload.axes
    if (cu.numel() != axes["num_sequences"] + 1 or axes["len_cu_seqlens"] != cu.numel() or int(cu[0]) != 0
            or int(cu[-1]) != axes["seq_len"] or bool((cu[1:] < cu[:-1]).any())):
        raise ValueError(f"workload {workload.uuid}: cu_seqlens {spec.tensor_key} does not fit axes {axes}")
    return cu


# ----------------------------------------------------------------------------- contract

def scaled_workloads(workloads: list[Workload], scale: str) -> list[Workload]:
    if scale == "full":
        return list(workloads)
    if scale != "small":
        raise ValueError(f"unknown problem scale {scale!r}")
    tensors = _read_safetensors(FOLDER / "cu_seqlens.safetensors")
    out = []
    for w in workloads:
        spec = _cu_seqlens_spec(w)
        key = f"small/{spec.tensor_key}"
        if key not in tensors:
            continue
        cu = tensors[key]
        n = cu.numel() - 1
        axes = {**w.axes, "seq_len": int(cu[-1]), "num_q_heads": SMALL_NUM_HEADS, "num_v_heads": SMALL_NUM_HEADS,
                "num_sequences": n, "len_cu_seqlens": n + 1}
        inputs = {**w.inputs, "cu_seqlens": replace(spec, tensor_key=key)}
        out.append(Workload(axes=axes, inputs=inputs, uuid=scaled_uuid(w.uuid, scale), origin=w.uuid))
    return out


# Inputs whose distribution flashinfer-bench's "random" (a standard normal) does not describe: an export (python -m
# evoteam.export) gives each as a safetensors blob holding one draw of evoteam's own distribution (`state_inputs`,
# seeded by the workload's uuid), as it gives cu_seqlens; where has_initial_state is false, initial_state is the NaN
# fill a kernel must not read.
BLOB_INPUTS = ("A_log", "dt_bias", "initial_state")


def blob_seed(workload: Workload) -> int:
    """The seed of a workload's exported draw: from its uuid, so that every export writes the same values."""
    return int.from_bytes(hashlib.sha256(workload.uuid.encode("utf-8")).digest()[:8], "little")


def blob_tensors(workload: Workload) -> dict[str, torch.Tensor]:
    """cu_seqlens, and BLOB_INPUTS as make_inputs draws them (`state_inputs`, on the CPU from blob_seed)."""
    generator = torch.Generator().manual_seed(blob_seed(workload))
    return {"cu_seqlens": cu_seqlens_of(workload), **state_inputs(workload, generator, "cpu")}


def _scalar(workload: Workload, name: str):
    spec = workload.inputs[name]
    if spec.type != "scalar":
        raise ValueError(f"workload {workload.uuid}: {name} must be a scalar input")
    return spec.value


def inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def state_inputs(workload: Workload, generator: torch.Generator, device) -> dict[str, torch.Tensor]:
    """A_log, dt_bias and initial_state from `generator`, in this order (make_inputs's, and an export's blobs)."""
    H, N, K, V = workload.axes["num_v_heads"], workload.axes["num_sequences"], HEAD_DIM_K, HEAD_DIM_V

    def uniform(*shape, low, high):
        return torch.rand(shape, generator=generator, device=device, dtype=torch.float32) * (high - low) + low

    out = {"A_log": torch.log(uniform(H, low=1.0, high=16.0)),
           "dt_bias": inverse_softplus(torch.exp(uniform(H, K, low=math.log(1e-3), high=math.log(1e-1))))}
    if bool(_scalar(workload, "has_initial_state")):
        out["initial_state"] = torch.randn((N, H, K, V), generator=generator, device=device,
                                           dtype=torch.float32).mul_(INITIAL_STATE_STD)
    else:
        # Must not be read: a kernel that reads it produces NaN and fails the check.
        out["initial_state"] = torch.full((N, H, K, V), float("nan"), device=device, dtype=torch.float32)
    return out


def make_inputs(workload: Workload, generator: torch.Generator, device) -> dict:
    cu = cu_seqlens_of(workload)
    T = workload.axes["seq_len"]
    H = workload.axes["num_v_heads"]
    K, V = HEAD_DIM_K, HEAD_DIM_V
    has_initial_state = bool(_scalar(workload, "has_initial_state"))

    def randn(*shape, dtype=torch.float32):
        return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)

    bf16 = torch.bfloat16
    inputs = {
        "q": randn(T, H, K, dtype=bf16),
        "k": randn(T, H, K, dtype=bf16),
        "v": randn(T, H, V, dtype=bf16),
        "g": randn(T, H, K, dtype=bf16),
        "beta": randn(T, H, dtype=bf16),
        **state_inputs(workload, generator, device),  # drawn after the activations, from the same generator
    }
    inputs["cu_seqlens"] = cu.to(device)
    inputs["scale"] = float(_scalar(workload, "scale"))
    inputs["bounded_gate"] = bool(_scalar(workload, "bounded_gate"))
    inputs["lower_bound"] = float(_scalar(workload, "lower_bound"))
    inputs["has_initial_state"] = has_initial_state
    return inputs


def min_bytes(workload: Workload, inputs: dict) -> int:
    """Compulsory device-memory traffic: every input read once (initial_state only when present),
    output and final_state written once."""
    total = 0
    for name, x in inputs.items():
        if not isinstance(x, torch.Tensor) or (name == "initial_state" and not inputs["has_initial_state"]):
            continue
        total += x.numel() * x.element_size()
    T, H, N = inputs["q"].shape[0], inputs["q"].shape[1], inputs["cu_seqlens"].numel() - 1
    total += T * H * HEAD_DIM_V * 2 + N * H * HEAD_DIM_K * HEAD_DIM_V * 4  # output (bf16), final_state (fp32)
    return total


def workload_group(workload):
    """One long sequence, or a batch of sequences packed through cu_seqlens."""
    return "single" if workload.axes["num_sequences"] == 1 else "batched"


# ----------------------------------------------------------------------------- FlashInfer's recurrent_kda
# FlashInfer 0.7.4 traces its KDA entry point flashinfer.kda.recurrent_kda with the template recurrent_kda
# (flashinfer/trace/templates/kda.py). This definition takes its names, axes and inputs where the math is the same;
# what differs, and why, is listed in docs/interop.md ("KDA and FlashInfer's recurrent_kda"). These two functions
# turn one call's tensors from either side into the other's, so that a FlashInfer user's KDA workload runs here and
# evoteam's workloads run there.
RECURRENT_KDA_FLAGS = {"use_gate_in_kernel": True, "beta_is_logit": True, "use_qk_l2norm_in_kernel": True,
                       "output_final_state": True}  # the recurrent_kda settings under which the math is this one's


def to_recurrent_kda(inputs: dict) -> dict:
    """recurrent_kda's arguments for this definition's inputs: the packed tokens as its batch_size 1, the states in
    its [V, K] layout, the gate and beta raw (RECURRENT_KDA_FLAGS), no initial state where there is none, and the
    bounded gate as its lower_bound (None: the softplus gate)."""
    out = {name: inputs[name].unsqueeze(0) for name in ("q", "k", "v", "g", "beta")}
    out.update(A_log=inputs["A_log"], dt_bias=inputs["dt_bias"], scale=float(inputs["scale"]),
               cu_seqlens=inputs["cu_seqlens"],
               initial_state=inputs["initial_state"].transpose(-1, -2) if inputs["has_initial_state"] else None,
               lower_bound=float(inputs["lower_bound"]) if inputs["bounded_gate"] else None, **RECURRENT_KDA_FLAGS)
    return out


def from_recurrent_kda(call: dict) -> dict:
    """This definition's inputs for a recurrent_kda call's arguments; ValueError (one line) for a call whose math this
    definition does not express: another gate or beta form, no L2 norm, grouped value heads, a head dim other than
    128, a state pool (ssm_state_indices, initial_state_source) or checkpoints, no A_log or dt_bias."""
    for flag, value in RECURRENT_KDA_FLAGS.items():
        if flag != "output_final_state" and bool(call.get(flag, flag == "use_qk_l2norm_in_kernel")) != value:
            raise ValueError(f"recurrent_kda with {flag}={not value}: this definition computes {flag}={value} only")
    for name in ("ssm_state_indices", "initial_state_source", "initial_state_indices", "state_checkpoints",
                 "num_spec_tokens"):
        if call.get(name) is not None:
            raise ValueError(f"recurrent_kda with {name}: this definition has no state pool, speculative tokens or "
                             f"checkpoints (one state per sequence)")
    if call.get("A_log") is None or call.get("dt_bias") is None:
        raise ValueError("recurrent_kda without A_log and dt_bias: this definition computes the gate in the kernel")
    q = call["q"]
    B, T, H, K = q.shape
    HV, V = call["v"].shape[-2:]
    if HV != H or K != HEAD_DIM_K or V != HEAD_DIM_V:
        raise ValueError(f"recurrent_kda with {H} query and {HV} value heads of dims {K} and {V}: this definition has "
                         f"as many value heads as query heads, dims {HEAD_DIM_K}")
    cu = call.get("cu_seqlens")
    if cu is None:  # B rows of T tokens each: B sequences, packed
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=q.device)
    elif B != 1:
        raise ValueError(f"recurrent_kda with cu_seqlens and batch_size {B}: packed sequences have batch_size 1")
    N = cu.numel() - 1
    initial = call.get("initial_state")
    has_initial = initial is not None
    lower = call.get("lower_bound")
    return {"q": q.reshape(B * T, H, K), "k": call["k"].reshape(B * T, H, K), "v": call["v"].reshape(B * T, H, V),
            "g": call["g"].reshape(B * T, H, K), "beta": call["beta"].reshape(B * T, H),
            "A_log": call["A_log"].float(), "dt_bias": call["dt_bias"].float().reshape(H, K),
            "initial_state": (initial.transpose(-1, -2).float().contiguous() if has_initial else
                              torch.full((N, H, K, V), float("nan"), device=q.device)),
            "cu_seqlens": cu.to(torch.int32), "scale": float(call.get("scale") or K ** -0.5),
            "bounded_gate": lower is not None, "lower_bound": -5.0 if lower is None else float(lower),
            "has_initial_state": has_initial}
