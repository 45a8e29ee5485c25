"""MLA paged decode (16 heads, ckv 512, kpe 64, page size 1), v1: one program per (request, head).

Written from the task's definition: for request b, with rows = kv_indices[kv_indptr[b]:kv_indptr[b+1]],
    logits = (q_nope[b] . ckv[rows] + q_pe[b] . kpe[rows]) * sm_scale
    output[b] = softmax(logits) @ ckv[rows]        (bf16)
    lse[b]    = log2(sum(exp(logits)))             (fp32, base 2; -inf and output 0 for an empty request)

Each program owns one (request, head) pair and walks the request's KV tokens in blocks of BLOCK_N rows
gathered through kv_indices. The dot products are elementwise products reduced with tl.sum (no tl.dot:
one query row is a matrix-vector product), in fp32. The softmax is online and in base 2: the logits are
multiplied by sm_scale * log2(e) so that exp becomes exp2 and the running max plus log2 of the running
sum is the base-2 lse directly. Simple and correct; every KV row is read once per head (16 times).
"""

import math

import triton
import triton.language as tl

BLOCK_N = 16  # KV tokens per loop step
NUM_WARPS = 4

LOG2E = 1.0 / math.log(2.0)


@triton.jit
def _mla_decode_head(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
    qk_scale,  # sm_scale * log2(e): logits in base 2
    s_qn_b, s_qn_h, s_qn_d,
    s_qp_b, s_qp_h, s_qp_d,
    s_ckv_p, s_ckv_d,
    s_kpe_p, s_kpe_d,
    s_o_b, s_o_h, s_o_d,
    s_lse_b, s_lse_h,
    D_CKV: tl.constexpr,
    D_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_c = tl.arange(0, D_CKV)
    offs_p = tl.arange(0, D_KPE)
    offs_n = tl.arange(0, BLOCK_N)

    first = tl.load(kv_indptr_ptr + b)
    last = tl.load(kv_indptr_ptr + b + 1)

    qn = tl.load(q_nope_ptr + b * s_qn_b + h * s_qn_h + offs_c * s_qn_d).to(tl.float32)  # [D_CKV]
    qp = tl.load(q_pe_ptr + b * s_qp_b + h * s_qp_h + offs_p * s_qp_d).to(tl.float32)  # [D_KPE]

    # running max (base 2), running sum of exp2, running weighted sum of ckv rows
    m = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), axis=0)
    denom = tl.sum(tl.zeros([BLOCK_N], tl.float32), axis=0)
    acc = tl.zeros([D_CKV], tl.float32)

    for n0 in range(first, last, BLOCK_N):
        tok = n0 + offs_n
        valid = tok < last
        page = tl.load(kv_indices_ptr + tok, mask=valid, other=0).to(tl.int64)
        kc = tl.load(ckv_ptr + page[:, None] * s_ckv_p + offs_c[None, :] * s_ckv_d,
                     mask=valid[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_CKV]
        kp = tl.load(kpe_ptr + page[:, None] * s_kpe_p + offs_p[None, :] * s_kpe_d,
                     mask=valid[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_KPE]
        s = tl.sum(kc * qn[None, :], axis=1) + tl.sum(kp * qp[None, :], axis=1)  # [BLOCK_N]
        s = tl.where(valid, s * qk_scale, float("-inf"))
        # a block holds at least one valid token: m_new is finite
        m_new = tl.maximum(m, tl.max(s, axis=0))
        scale_old = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)  # 0 where masked
        denom = denom * scale_old + tl.sum(p, axis=0)
        acc = acc * scale_old + tl.sum(p[:, None] * kc, axis=0)
        m = m_new

    has_tokens = denom > 0.0
    denom_safe = tl.where(has_tokens, denom, 1.0)
    out = acc / denom_safe  # acc is all zeros for an empty request
    lse = tl.where(has_tokens, m + tl.log2(denom_safe), float("-inf"))
    tl.store(out_ptr + b * s_o_b + h * s_o_h + offs_c * s_o_d, out.to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * s_lse_b + h * s_lse_h, lse)


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch_size, num_heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
    if batch_size == 0:
        return None
    _mla_decode_head[(batch_size, num_heads)](
        q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse,
        float(sm_scale) * LOG2E,
        q_nope.stride(0), q_nope.stride(1), q_nope.stride(2),
        q_pe.stride(0), q_pe.stride(1), q_pe.stride(2),
        ckv_cache.stride(0), ckv_cache.stride(2),
        kpe_cache.stride(0), kpe_cache.stride(2),
        output.stride(0), output.stride(1), output.stride(2),
        lse.stride(0), lse.stride(1),
        D_CKV=d_ckv, D_KPE=d_kpe, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS,
    )
    return None
