"""Fast oracle for kda_prefill: the reference's math as one Triton kernel, for checking candidates on a GPU.

What: `run` has the reference's signature (the definition's "reference" code, definition.json) and returns
what it returns (output bf16 [T, H, V], final_state fp32 [N, H, K, V]). It is the fused recurrent form: one
program per (sequence, head, block of BV value columns) keeps its [K, BV] fp32 slice of the state in registers and walks the sequence's tokens in order,
computing the reference's formulas in fp32 from the raw inputs: L2 norms (eps 1e-6 inside the sqrt), the
softplus or bounded gate, sigmoid(beta), decay first, then the delta rule, then the read-out. Only the
order of the sums differs from the reference: element-wise fp32 products and tl.sum reductions, no tl.dot
(so no TF32), no intermediate rounding; o is rounded once to bf16, to nearest even, as torch does.

Why: the harness checks every candidate output against a reference (evoteam/task.py `Task.reference`),
about 12 times a workload. The reference is a token-by-token PyTorch loop: on the lent H200 (2026-12-02,
one call each after a warm-up of this module, host clock around synchronised calls, the largest workload,
16k tokens x 32 heads) it took 3.70 s where this module took 32 ms (115x), so a 24-workload KDA evaluation
spent minutes in its checks. The harness uses this module instead of the reference when the inputs are on a
GPU; CPU targets keep the reference (Triton needs a GPU outside its interpreter).

The reference stays the definition of the task (definition.json carries it, the one home of its text); this module must
agree with it. tests/test_kda_oracle.py proves it under Triton's CPU interpreter (several sequences,
both gate forms, with and without an initial state), and tests/test_gpu.py on a GPU at full size.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _to_bf16_rne(x):
    """fp32 -> bf16 rounded to nearest even through the bits. Triton's CPU interpreter truncates in
    .to(tl.bfloat16); GPUs (and torch) round to nearest even."""
    b = x.to(tl.uint32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _kda_recurrent(
    q, k, v, g_raw, beta_logits, A_log, dt_bias, h0, cu_seqlens, o, ht,
    scale, lower_bound,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BOUNDED: tl.constexpr, HAS_H0: tl.constexpr, INTERPRETED: tl.constexpr,
):
    i_nh = tl.program_id(0)
    i_v = tl.program_id(1)
    i_n = i_nh // H
    i_h = i_nh % H
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_s = m_k[:, None] & m_v[None, :]
    b_a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
    b_bias = tl.load(dt_bias + i_h * K + o_k, mask=m_k, other=0.0).to(tl.float32)

    # [K, BV] slice of this sequence's and head's state (padding rows and columns stay zero)
    p_s = (i_nh.to(tl.int64) * K + o_k[:, None]) * V + o_v[None, :]
    if HAS_H0:
        b_s = tl.load(h0 + p_s, mask=m_s, other=0.0).to(tl.float32)
    else:
        b_s = tl.zeros([BK, BV], dtype=tl.float32)

    for t in range(bos, eos):
        p_qk = (t * H + i_h) * K + o_k
        b_q = tl.load(q + p_qk, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + p_qk, mask=m_k, other=0.0).to(tl.float32)
        b_x = tl.load(g_raw + p_qk, mask=m_k, other=0.0).to(tl.float32) + b_bias
        b_v = tl.load(v + (t * H + i_h) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta_logits + t * H + i_h).to(tl.float32))

        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, 0) + 1e-6) * scale
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, 0) + 1e-6)
        if BOUNDED:
            b_g = lower_bound * tl.sigmoid(b_a * b_x)
        else:
            # torch's softplus: x above 20 passes through, else log1p(exp(x)); log1p(y) as
            # log(1 + y) * y / ((1 + y) - 1), exact to an ulp also where 1 + y rounds to 1
            b_y = tl.exp(tl.minimum(b_x, 20.0))
            b_1y = 1.0 + b_y
            b_tiny = b_1y == 1.0
            b_log1p = tl.where(b_tiny, b_y, tl.log(b_1y) * (b_y / tl.where(b_tiny, 1.0, b_1y - 1.0)))
            b_g = -b_a * tl.where(b_x > 20.0, b_x, b_log1p)

        b_s = b_s * tl.exp(b_g)[:, None]                        # decay first
        b_u = b_beta * (b_v - tl.sum(b_k[:, None] * b_s, 0))    # b (v - S^T k)
        b_s = b_s + b_k[:, None] * b_u[None, :]                 # delta rule
        b_o = tl.sum(b_q[:, None] * b_s, 0)                     # o = S^T q, after the update
        if INTERPRETED:
            b_o = _to_bf16_rne(b_o)
        tl.store(o + (t * H + i_h) * V + o_v, b_o.to(tl.bfloat16), mask=m_v)

    tl.store(ht + p_s, b_s, mask=m_s)


def run(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
        scale, bounded_gate, lower_bound, has_initial_state):
    g_raw, beta_logits = g, beta  # the definition's names (raw gate, beta logits), the kernel's
    T, H, K = q.shape
    V = v.shape[-1]
    N = cu_seqlens.numel() - 1
    o = torch.empty(T, H, V, dtype=torch.bfloat16, device=q.device)
    final_state = torch.empty(N, H, K, V, dtype=torch.float32, device=q.device)
    if N * H == 0:
        return o, final_state
    interpreted = q.device.type == "cpu"  # CPU tensors run only under TRITON_INTERPRET=1
    BK = triton.next_power_of_2(K)
    # GPU: 32 columns keep a [128, 32] fp32 slice in registers; the interpreter is faster with one wide block
    BV = triton.next_power_of_2(V) if interpreted else min(32, triton.next_power_of_2(V))
    has_h0 = bool(has_initial_state)
    _kda_recurrent[(N * H, triton.cdiv(V, BV))](
        q.contiguous(), k.contiguous(), v.contiguous(), g_raw.contiguous(), beta_logits.contiguous(),
        A_log.contiguous(), dt_bias.contiguous(),
        initial_state.contiguous() if has_h0 else final_state,  # not read without an initial state
        cu_seqlens.contiguous(), o, final_state,
        float(scale), float(lower_bound),
        H=H, K=K, V=V, BK=BK, BV=BV,
        BOUNDED=bool(bounded_gate), HAS_H0=has_h0, INTERPRETED=interpreted,
    )
    return o, final_state
