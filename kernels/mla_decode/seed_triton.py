"""Seed kernel for mla_paged_decode_h16_ckv512_kpe64_ps1: simple and correct, not yet fast.

One program per (request, block of heads). The program loads its queries once, then walks the
request's KV tokens in blocks of BLOCK_N rows gathered through kv_indices, keeping an online
softmax in base 2 (logits pre-multiplied by sm_scale * log2(e)). Tiles are upcast to fp32 before
tl.dot (exact for bf16 data; it also sidesteps the Triton 3.9 interpreter's wrong bf16 tl.dot).
An empty request writes output 0 and lse -inf.

A kernel family (kernels/mla_decode/families.json): the tunable parameters live in PARAMS alone;
every value of the family's space gives a correct kernel.

Entry point, destination-passing style:
    run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse) -> None
"""

import math

import triton
import triton.language as tl

# Tunable parameters (this family's default point). BLOCK_N: KV tokens per loop step; BLOCK_H: heads
# per program (16 = all heads of a request, each KV row read once); num_warps, num_stages: launch.
PARAMS = {"BLOCK_N": 32, "BLOCK_H": 16, "num_warps": 8, "num_stages": 1}

LOG2E = 1.0 / math.log(2.0)


@triton.jit
def _mla_decode_kernel(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
    qk_scale,  # sm_scale * log2(e)
    stride_qn_b, stride_qn_h, stride_qn_d,
    stride_qp_b, stride_qp_h, stride_qp_d,
    stride_ckv_p, stride_ckv_d,
    stride_kpe_p, stride_kpe_d,
    stride_o_b, stride_o_h, stride_o_d,
    stride_lse_b, stride_lse_h,
    NUM_HEADS: tl.constexpr,
    D_CKV: tl.constexpr,
    D_KPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < NUM_HEADS
    offs_c = tl.arange(0, D_CKV)
    offs_p = tl.arange(0, D_KPE)
    offs_n = tl.arange(0, BLOCK_N)

    start = tl.load(kv_indptr_ptr + b)
    end = tl.load(kv_indptr_ptr + b + 1)

    qn = tl.load(q_nope_ptr + b * stride_qn_b + offs_h[:, None] * stride_qn_h + offs_c[None, :] * stride_qn_d,
                 mask=mask_h[:, None], other=0.0).to(tl.float32)  # [BLOCK_H, D_CKV]
    qp = tl.load(q_pe_ptr + b * stride_qp_b + offs_h[:, None] * stride_qp_h + offs_p[None, :] * stride_qp_d,
                 mask=mask_h[:, None], other=0.0).to(tl.float32)  # [BLOCK_H, D_KPE]

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_CKV], dtype=tl.float32)

    for n0 in range(start, end, BLOCK_N):
        tok = n0 + offs_n
        mask_n = tok < end
        page = tl.load(kv_indices_ptr + tok, mask=mask_n, other=0).to(tl.int64)
        kc = tl.load(ckv_ptr + page[:, None] * stride_ckv_p + offs_c[None, :] * stride_ckv_d,
                     mask=mask_n[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_CKV]
        kp = tl.load(kpe_ptr + page[:, None] * stride_kpe_p + offs_p[None, :] * stride_kpe_d,
                     mask=mask_n[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_KPE]
        s = tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))  # [BLOCK_H, BLOCK_N]
        s = tl.where(mask_n[None, :], s * qk_scale, float("-inf"))
        # Every block holds at least one valid token, so m_new is finite and nothing turns NaN.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, kc)
        m_i = m_new

    nonempty = l_i > 0.0
    l_safe = tl.where(nonempty, l_i, 1.0)
    out = acc / l_safe[:, None]  # acc is 0 for an empty request
    lse = tl.where(nonempty, m_i + tl.log2(l_safe), float("-inf"))

    tl.store(out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_c[None, :] * stride_o_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_h[:, None])
    tl.store(lse_ptr + b * stride_lse_b + offs_h * stride_lse_h, lse, mask=mask_h)


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch_size, num_heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
    if batch_size == 0:
        return None
    block_h = PARAMS["BLOCK_H"]
    grid = (batch_size, triton.cdiv(num_heads, block_h))
    _mla_decode_kernel[grid](
        q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse,
        float(sm_scale) * LOG2E,
        q_nope.stride(0), q_nope.stride(1), q_nope.stride(2),
        q_pe.stride(0), q_pe.stride(1), q_pe.stride(2),
        ckv_cache.stride(0), ckv_cache.stride(2),
        kpe_cache.stride(0), kpe_cache.stride(2),
        output.stride(0), output.stride(1), output.stride(2),
        lse.stride(0), lse.stride(1),
        NUM_HEADS=num_heads, D_CKV=d_ckv, D_KPE=d_kpe,
        BLOCK_H=block_h, BLOCK_N=PARAMS["BLOCK_N"],
        num_warps=PARAMS["num_warps"], num_stages=PARAMS["num_stages"],
    )
    return None
