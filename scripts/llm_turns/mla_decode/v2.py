"""MLA paged decode (16 heads, ckv 512, kpe 64, page size 1), v2: all heads per program, split KV, merge pass.

What v1 left on the table: it read every KV row 16 times (once per head) and did matrix-vector work with
elementwise products, and a request with a long KV sequence ran in 16 programs only (a batch-1 request on a
GPU with 132 SMs used 16 of them). v2:

1. Pass 1, grid (batch, splits): a program takes ALL 16 heads of its request (the query tile [16, 512] is
   loaded once), and one contiguous slice of the request's KV tokens (the request's tokens cut into `splits`
   slices of whole BLOCK_N blocks). Each KV row is gathered once and used by the 16 heads through tl.dot.
   The online softmax is in base 2 (logits times sm_scale * log2(e)). The slice's partial result is stored
   normalised, with its base-2 lse (m + log2(l); -inf for an empty slice).
2. Pass 2, grid (batch,): the slices of a request are merged: M = max lse_s, w_s = exp2(lse_s - M),
   output = sum_s w_s o_s / sum_s w_s, lse = M + log2(sum_s w_s); a request without tokens gives output 0
   and lse -inf. With one split, pass 1 writes output and lse itself and pass 2 is not launched.

The number of splits is chosen on the host from shapes only (no device sync): enough programs to fill the GPU
(about 2 per SM of an H200 over the batch), at most MAX_SPLITS, and no more than the average request's
BLOCK_N blocks. Tiles are upcast to fp32 before tl.dot (exact for bf16 data).
"""

import math

import torch
import triton
import triton.language as tl

BLOCK_N = 32  # KV tokens per loop step
MAX_SPLITS = 16
TARGET_PROGRAMS = 264  # about 2 programs per SM of an H200 (132 SMs)
NUM_WARPS = 8

LOG2E = 1.0 / math.log(2.0)


@triton.jit
def _mla_split_kv(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr,
    o_ptr, lse_ptr,  # the partials [batch, splits, H, D_CKV] and [batch, splits, H], or output and lse (DIRECT)
    qk_scale,
    s_qn_b, s_qn_h, s_qn_d,
    s_qp_b, s_qp_h, s_qp_d,
    s_ckv_p, s_ckv_d,
    s_kpe_p, s_kpe_d,
    s_o_b, s_o_s, s_o_h, s_o_d,
    s_l_b, s_l_s, s_l_h,
    NUM_SPLITS: tl.constexpr,
    H: tl.constexpr,
    D_CKV: tl.constexpr,
    D_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    split = tl.program_id(1)
    offs_h = tl.arange(0, H)
    offs_c = tl.arange(0, D_CKV)
    offs_p = tl.arange(0, D_KPE)
    offs_n = tl.arange(0, BLOCK_N)

    first = tl.load(kv_indptr_ptr + b)
    last = tl.load(kv_indptr_ptr + b + 1)
    length = last - first
    # this split's slice: whole blocks, the last slices possibly empty
    blocks = (length + BLOCK_N - 1) // BLOCK_N
    per_split = ((blocks + NUM_SPLITS - 1) // NUM_SPLITS) * BLOCK_N
    lo = first + split * per_split
    hi = tl.minimum(lo + per_split, last)

    qn = tl.load(q_nope_ptr + b * s_qn_b + offs_h[:, None] * s_qn_h + offs_c[None, :] * s_qn_d).to(tl.float32)
    qp = tl.load(q_pe_ptr + b * s_qp_b + offs_h[:, None] * s_qp_h + offs_p[None, :] * s_qp_d).to(tl.float32)

    m = tl.full([H], float("-inf"), tl.float32)
    denom = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D_CKV], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        tok = n0 + offs_n
        valid = tok < hi
        page = tl.load(kv_indices_ptr + tok, mask=valid, other=0).to(tl.int64)
        kc = tl.load(ckv_ptr + page[:, None] * s_ckv_p + offs_c[None, :] * s_ckv_d,
                     mask=valid[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_CKV]
        kp = tl.load(kpe_ptr + page[:, None] * s_kpe_p + offs_p[None, :] * s_kpe_d,
                     mask=valid[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D_KPE]
        s = tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))  # [H, BLOCK_N]
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: a block holds a valid token
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, kc)
        m = m_new

    has_tokens = denom > 0.0
    denom_safe = tl.where(has_tokens, denom, 1.0)
    out = acc / denom_safe[:, None]
    lse = tl.where(has_tokens, m + tl.log2(denom_safe), float("-inf"))
    o_base = o_ptr + b * s_o_b + split * s_o_s
    tl.store(o_base + offs_h[:, None] * s_o_h + offs_c[None, :] * s_o_d, out.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * s_l_b + split * s_l_s + offs_h * s_l_h, lse)


@triton.jit
def _mla_merge(
    part_o_ptr, part_lse_ptr, out_ptr, lse_ptr,
    s_po_b, s_po_s, s_po_h, s_po_d,
    s_pl_b, s_pl_s, s_pl_h,
    s_o_b, s_o_h, s_o_d,
    s_lse_b, s_lse_h,
    NUM_SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,
    H: tl.constexpr,
    D_CKV: tl.constexpr,
):
    b = tl.program_id(0)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_h = tl.arange(0, H)
    offs_c = tl.arange(0, D_CKV)
    lse_all = tl.load(part_lse_ptr + b * s_pl_b + offs_s[:, None] * s_pl_s + offs_h[None, :] * s_pl_h,
                      mask=(offs_s < NUM_SPLITS)[:, None], other=float("-inf"))  # [SPLITS_P2, H]
    top = tl.max(lse_all, axis=0)  # [H]; -inf for a request without tokens
    top_safe = tl.where(top == float("-inf"), 0.0, top)
    weight_sum = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D_CKV], tl.float32)
    for s in range(NUM_SPLITS):
        lse_s = tl.load(part_lse_ptr + b * s_pl_b + s * s_pl_s + offs_h * s_pl_h)
        w = tl.exp2(lse_s - top_safe)  # 0 for an empty slice
        o_s = tl.load(part_o_ptr + b * s_po_b + s * s_po_s + offs_h[:, None] * s_po_h + offs_c[None, :] * s_po_d)
        acc += w[:, None] * o_s
        weight_sum += w
    has_tokens = weight_sum > 0.0
    ws_safe = tl.where(has_tokens, weight_sum, 1.0)
    out = acc / ws_safe[:, None]
    lse = tl.where(has_tokens, top_safe + tl.log2(ws_safe), float("-inf"))
    tl.store(out_ptr + b * s_o_b + offs_h[:, None] * s_o_h + offs_c[None, :] * s_o_d, out.to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * s_lse_b + offs_h * s_lse_h, lse)


def num_splits(batch_size: int, total_tokens: int) -> int:
    """Slices per request, from shapes only: fill the GPU, keep each slice at least one block on average."""
    avg_blocks = max(1, triton.cdiv(total_tokens, batch_size * BLOCK_N))
    return max(1, min(MAX_SPLITS, triton.cdiv(TARGET_PROGRAMS, batch_size), avg_blocks))


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch_size, num_heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
    if batch_size == 0:
        return None
    splits = num_splits(batch_size, kv_indices.shape[0])
    if splits == 1:  # pass 1 writes the result itself (a split axis of stride 0)
        part_o, part_lse = output, lse
        po_strides = (output.stride(0), 0, output.stride(1), output.stride(2))
        pl_strides = (lse.stride(0), 0, lse.stride(1))
    else:
        part_o = torch.empty((batch_size, splits, num_heads, d_ckv), dtype=torch.float32, device=q_nope.device)
        part_lse = torch.empty((batch_size, splits, num_heads), dtype=torch.float32, device=q_nope.device)
        po_strides, pl_strides = part_o.stride(), part_lse.stride()
    _mla_split_kv[(batch_size, splits)](
        q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, part_o, part_lse,
        float(sm_scale) * LOG2E,
        q_nope.stride(0), q_nope.stride(1), q_nope.stride(2),
        q_pe.stride(0), q_pe.stride(1), q_pe.stride(2),
        ckv_cache.stride(0), ckv_cache.stride(2),
        kpe_cache.stride(0), kpe_cache.stride(2),
        *po_strides, *pl_strides,
        NUM_SPLITS=splits, H=num_heads, D_CKV=d_ckv, D_KPE=d_kpe, BLOCK_N=BLOCK_N,
        num_warps=NUM_WARPS, num_stages=1,
    )
    if splits > 1:
        _mla_merge[(batch_size,)](
            part_o, part_lse, output, lse,
            *part_o.stride(), *part_lse.stride(),
            output.stride(0), output.stride(1), output.stride(2),
            lse.stride(0), lse.stride(1),
            NUM_SPLITS=splits, SPLITS_P2=triton.next_power_of_2(splits), H=num_heads, D_CKV=d_ckv,
            num_warps=4,
        )
    return None
