"""Split-KV flash-decoding for mla_paged_decode_h16_ckv512_kpe64_ps1, in two launches.

The batch's KV tokens, request after request (kv_indices is one concatenated list), are cut into
equal chunks of CHUNK tokens, one chunk per phase-1 program, whatever the request lengths: every
program does about the same work and the grid has no idle programs, from one 2708-token request
to 64 requests of a few hundred tokens each.

Phase 1, grid (cdiv(num_kv_indices, CHUNK),): a program walks the requests that overlap its chunk.
For each it loads the request's queries (all heads), then the request's tokens inside the chunk in
blocks of BLOCK_N rows gathered through kv_indices, each KV row read once for all heads (logits of
16 heads x BLOCK_N tokens by tl.dot), with an online softmax in base 2. A request that lies wholly
inside the chunk (and an empty request, whose position is inside the chunk) is finished on the
spot: output (bf16) and lse written. A request that crosses a chunk boundary leaves one partial
result per chunk it touches, normalised output (fp32) and base-2 lse, in a workspace; the piece
of request b in chunk c goes to slot c + b (unique: ordered by position, both c and b only grow).

Phase 2, grid (batch, column blocks): for a request that crossed a chunk boundary, the pieces in
slots c0 + b .. c1 + b (c0, c1 the chunks of its first and last token) are merged, all heads and
a block of output columns per program: lse = M + log2(sum_s 2^(lse_s - M)) and
output = sum_s 2^(lse_s - lse) * out_s. Other requests are left as phase 1 wrote them. Phase 2 is
not launched when there is one chunk only.

CHUNK = max(MIN_CHUNK_BLOCKS * BLOCK_N, cdiv(num_kv_indices, CTAS_PER_SM * multiprocessors)),
rounded up to a multiple of BLOCK_N: chunks of at least MIN_CHUNK_BLOCKS loop steps, and for big
batches about CTAS_PER_SM programs per multiprocessor. Everything is derived from tensor shapes on
the host (no device-to-host copy), so a call can be captured in a CUDA graph. The workspace
(programs + batch slots) is allocated on first use and kept per device and size class in a
module-level dict.

On a GPU the tl.dot operands stay bf16 (fp32 accumulate; the probabilities are cast to bf16 for
the second product, as flash attention does). Under the Triton interpreter (CPU) they are upcast
to fp32 first, since the interpreter's bf16 tl.dot returns garbage, and bf16 stores round to
nearest even through the bits, since the interpreter's fp32 -> bf16 cast truncates.

A kernel family (kernels/mla_decode/families.json): the tunable parameters live in PARAMS alone;
every value of the family's space gives a correct kernel.

Entry point, destination-passing style:
    run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse) -> None
"""

import math

import torch
import triton
import triton.language as tl

# Tunable parameters (this family's default point).
#   BLOCK_N           KV tokens per loop step of phase 1
#   MIN_CHUNK_BLOCKS  the fewest loop steps a phase-1 program is given: chunks of at least
#                     MIN_CHUNK_BLOCKS * BLOCK_N tokens (small batches: more, shorter chunks)
#   CTAS_PER_SM       phase-1 programs per multiprocessor that large batches are cut into
#   num_warps, num_stages   phase-1 launch options. The KV row loads depend on the kv_indices load:
#                     with Triton 3.6 and 3.9 on sm_90, num_stages 3 prefetches the indices and one KV
#                     block, 5 double-buffers the KV blocks (all loads of a 2-step chunk in flight at once)
PARAMS = {"BLOCK_N": 32, "MIN_CHUNK_BLOCKS": 2, "CTAS_PER_SM": 2, "num_warps": 4, "num_stages": 5}

LOG2E = 1.0 / math.log(2.0)
COMBINE_LSE_S = 64  # piece lse values (per head) read per step of phase 2's first pass
COMBINE_TILE = 2048  # elements of phase 2's [pieces, heads, columns] tile on a GPU (~72 registers)
COUNT_B = 64  # kv_indptr entries scanned per step when a program looks for its requests
CPU_MULTIPROCESSORS = 8  # what a CPU (the Triton interpreter) counts as, for CTAS_PER_SM

_MULTIPROCESSORS = {}
_WORKSPACE = {}


@triton.jit
def _bf16_rne(x):
    """fp32 -> bf16 rounded to nearest even through the bits (the interpreter's cast truncates)."""
    b = x.to(tl.uint32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _splitkv_partial_kernel(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
    part_o_ptr, part_lse_ptr,
    qk_scale,  # sm_scale * log2(e)
    batch_size, total_tokens, chunk,
    stride_qn_b, stride_qn_h, stride_qn_d,
    stride_qp_b, stride_qp_h, stride_qp_d,
    stride_ckv_p, stride_ckv_d,
    stride_kpe_p, stride_kpe_d,
    stride_o_b, stride_o_h, stride_o_d,
    stride_lse_b, stride_lse_h,
    stride_po_s, stride_po_h,  # workspace: part_o [slots, heads, D_CKV] (last stride 1), part_lse [slots, heads]
    stride_pl_s,
    NUM_HEADS: tl.constexpr,
    D_CKV: tl.constexpr,
    D_KPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    COUNT_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    c = tl.program_id(0)
    lo_c = c * chunk
    hi_c = tl.minimum(lo_c + chunk, total_tokens)
    # Requests of this program: those with a token in [lo_c, hi_c), and the empty requests placed in
    # it (start in [lo_c, hi_c); the last program also takes those at position total_tokens).
    hi_member = hi_c + (c == tl.num_programs(0) - 1).to(tl.int32)
    b_first = 0  # requests wholly before lo_c
    b_end = 0  # requests starting before hi_member
    for i in range(0, batch_size, COUNT_B):
        offs = i + tl.arange(0, COUNT_B)
        valid = offs < batch_size
        starts = tl.load(kv_indptr_ptr + offs, mask=valid, other=0)
        ends = tl.load(kv_indptr_ptr + offs + 1, mask=valid, other=0)
        b_first += tl.sum((valid & (starts < lo_c) & (ends <= lo_c)).to(tl.int32), axis=0)
        b_end += tl.sum((valid & (starts < hi_member)).to(tl.int32), axis=0)

    offs_h = tl.arange(0, BLOCK_H)
    mask_h = offs_h < NUM_HEADS
    offs_c = tl.arange(0, D_CKV)
    offs_p = tl.arange(0, D_KPE)
    offs_n = tl.arange(0, BLOCK_N)

    for b in range(b_first, b_end):
        start = tl.load(kv_indptr_ptr + b)
        end = tl.load(kv_indptr_ptr + b + 1)
        lo = tl.maximum(start, lo_c)
        hi = tl.minimum(end, hi_c)

        qn = tl.load(q_nope_ptr + b * stride_qn_b + offs_h[:, None] * stride_qn_h + offs_c[None, :] * stride_qn_d,
                     mask=mask_h[:, None], other=0.0)  # [BLOCK_H, D_CKV]
        qp = tl.load(q_pe_ptr + b * stride_qp_b + offs_h[:, None] * stride_qp_h + offs_p[None, :] * stride_qp_d,
                     mask=mask_h[:, None], other=0.0)  # [BLOCK_H, D_KPE]
        if INTERPRETED:
            qn = qn.to(tl.float32)
            qp = qp.to(tl.float32)

        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, D_CKV], dtype=tl.float32)
        for n0 in range(lo, hi, BLOCK_N):
            tok = n0 + offs_n
            mask_n = tok < hi
            page = tl.load(kv_indices_ptr + tok, mask=mask_n, other=0).to(tl.int64)
            kc = tl.load(ckv_ptr + page[:, None] * stride_ckv_p + offs_c[None, :] * stride_ckv_d,
                         mask=mask_n[:, None], other=0.0)  # [BLOCK_N, D_CKV]
            kp = tl.load(kpe_ptr + page[:, None] * stride_kpe_p + offs_p[None, :] * stride_kpe_d,
                         mask=mask_n[:, None], other=0.0)  # [BLOCK_N, D_KPE]
            if INTERPRETED:
                kc = kc.to(tl.float32)
                kp = kp.to(tl.float32)
            s = tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))  # [BLOCK_H, BLOCK_N], fp32
            s = tl.where(mask_n[None, :], s * qk_scale, float("-inf"))
            # Every block holds at least one valid token, so m_new is finite and nothing turns NaN.
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc)
            m_i = m_new

        nonempty = l_i > 0.0
        l_safe = tl.where(nonempty, l_i, 1.0)
        o = acc / l_safe[:, None]  # 0 for an empty request
        piece_lse = tl.where(nonempty, m_i + tl.log2(l_safe), float("-inf"))
        if (lo == start) & (hi == end):  # the whole request (or an empty one): final result
            if INTERPRETED:
                o_out = _bf16_rne(o)
            else:
                o_out = o.to(out_ptr.dtype.element_ty)
            tl.store(out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_c[None, :] * stride_o_d,
                     o_out, mask=mask_h[:, None])
            tl.store(lse_ptr + b * stride_lse_b + offs_h * stride_lse_h, piece_lse, mask=mask_h)
        else:  # one piece of a request that crosses a chunk boundary: slot c + b of the workspace
            slot = (c + b).to(tl.int64)
            tl.store(part_o_ptr + slot * stride_po_s + offs_h[:, None] * stride_po_h + offs_c[None, :], o,
                     mask=mask_h[:, None])
            tl.store(part_lse_ptr + slot * stride_pl_s + offs_h, piece_lse, mask=mask_h)


@triton.jit
def _splitkv_combine_kernel(
    kv_indptr_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
    chunk,
    stride_o_b, stride_o_h, stride_o_d,
    stride_lse_b, stride_lse_h,
    stride_po_s, stride_po_h,
    stride_pl_s,
    NUM_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    LSE_S: tl.constexpr,
    COMBINE_S: tl.constexpr,
    COMBINE_D: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    b = tl.program_id(0)
    d_blk = tl.program_id(1)
    start = tl.load(kv_indptr_ptr + b)
    end = tl.load(kv_indptr_ptr + b + 1)
    c0 = start // chunk
    c1 = (end - 1) // chunk
    if (end > start) & (c1 > c0):  # the request crossed a chunk boundary: merge its pieces
        first = c0 + b
        last = c1 + b  # inclusive; every slot in between holds a non-empty piece
        offs_h = tl.arange(0, BLOCK_H)
        mask_h = offs_h < NUM_HEADS
        # Pass 1, over the pieces' lse only: per head m = max lse_s, l = sum 2^(lse_s - m) (online).
        offs_sl = tl.arange(0, LSE_S)
        m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
        for s0 in range(first, last + 1, LSE_S):
            slot = (s0 + offs_sl).to(tl.int64)
            valid = (slot <= last)[:, None] & mask_h[None, :]
            piece_lse = tl.load(part_lse_ptr + slot[:, None] * stride_pl_s + offs_h[None, :], mask=valid,
                                other=float("-inf"))
            m_new = tl.maximum(m, tl.max(piece_lse, axis=0))
            m_new = tl.where(mask_h, m_new, 0.0)  # finite for real heads (the first step has a piece)
            l_sum = l_sum * tl.exp2(m - m_new) + tl.sum(tl.exp2(piece_lse - m_new[None, :]), axis=0)
            m = m_new
        l_sum = tl.where(mask_h, l_sum, 1.0)  # >= 1 for real heads
        # Pass 2: output = sum_s 2^(lse_s - m) / l * out_s, COMBINE_D columns of all heads.
        offs_s = tl.arange(0, COMBINE_S)
        offs_d = d_blk * COMBINE_D + tl.arange(0, COMBINE_D)
        acc = tl.zeros([BLOCK_H, COMBINE_D], dtype=tl.float32)
        for s0 in range(first, last + 1, COMBINE_S):
            slot = (s0 + offs_s).to(tl.int64)
            valid = (slot <= last)[:, None] & mask_h[None, :]
            piece_lse = tl.load(part_lse_ptr + slot[:, None] * stride_pl_s + offs_h[None, :], mask=valid,
                                other=float("-inf"))
            w = tl.exp2(piece_lse - m[None, :]) / l_sum[None, :]  # [COMBINE_S, BLOCK_H], 0 where masked
            o = tl.load(part_o_ptr + slot[:, None, None] * stride_po_s + offs_h[None, :, None] * stride_po_h
                        + offs_d[None, None, :], mask=valid[:, :, None], other=0.0)  # [S, H, D]
            acc += tl.sum(w[:, :, None] * o, axis=0)
        if INTERPRETED:
            o_out = _bf16_rne(acc)
        else:
            o_out = acc.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_d[None, :] * stride_o_d, o_out,
                 mask=mask_h[:, None])
        if d_blk == 0:
            tl.store(lse_ptr + b * stride_lse_b + offs_h * stride_lse_h, m + tl.log2(l_sum), mask=mask_h)


# Whether triton.jit gave interpreted functions (TRITON_INTERPRET=1 when triton was imported).
_INTERPRETER = type(_splitkv_partial_kernel).__name__ == "InterpretedFunction"


def _multiprocessors(device):
    if device.type != "cuda":
        return CPU_MULTIPROCESSORS
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _MULTIPROCESSORS:
        _MULTIPROCESSORS[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _MULTIPROCESSORS[key]


def _workspace(device, slots, num_heads, d_ckv):
    """(part_o [slots, heads, d_ckv] fp32, part_lse [slots, heads] fp32), views of a cached buffer.
    Sizes are rounded up to a power of two of slots, so a handful of buffers serve every workload;
    none is ever freed or resized, so a CUDA graph that captured one keeps valid memory."""
    cap = triton.next_power_of_2(max(slots, 64))
    key = (str(device), cap, num_heads, d_ckv)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.empty((cap, num_heads, d_ckv), dtype=torch.float32, device=device),
                           torch.empty((cap, num_heads), dtype=torch.float32, device=device))
    part_o, part_lse = _WORKSPACE[key]
    return part_o[:slots], part_lse[:slots]


def _combine_tile(programs, batch_size, block_h, d_ckv, interpreted):
    """(pieces, columns) of phase 2's tile. Each step of its loop over a request's pieces costs a
    memory round trip, so a request cut into many pieces (a long one in a small batch) gets many
    pieces per step and few columns per program (more programs); with a big batch, most requests
    have a few pieces. Under the interpreter: all columns (few programs run fastest there)."""
    if interpreted:
        return 16, d_ckv
    typical = triton.cdiv(programs, batch_size) + 1  # pieces of a request of average length, about
    pieces = min(32, max(4, triton.next_power_of_2(typical)))
    columns = min(d_ckv, max(8, COMBINE_TILE // (block_h * pieces)))
    return pieces, columns


def plan(num_kv_indices, device_multiprocessors, params=None):
    """(chunk, number of phase-1 programs) for a batch of num_kv_indices KV tokens."""
    p = PARAMS if params is None else params
    block_n = p["BLOCK_N"]
    target = max(1, p["CTAS_PER_SM"] * device_multiprocessors)
    chunk = max(p["MIN_CHUNK_BLOCKS"] * block_n, triton.cdiv(num_kv_indices, target), 1)
    chunk = triton.cdiv(chunk, block_n) * block_n
    return chunk, max(1, triton.cdiv(num_kv_indices, chunk))


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch_size, num_heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
    assert d_ckv == triton.next_power_of_2(d_ckv) and d_kpe == triton.next_power_of_2(d_kpe), "power-of-2 dims"
    if batch_size == 0:
        return None
    device = q_nope.device
    interpreted = _INTERPRETER or device.type == "cpu"  # CPU tensors run only under the interpreter
    total = kv_indices.shape[0]
    chunk, programs = plan(total, _multiprocessors(device))
    part_o, part_lse = _workspace(device, programs + batch_size, num_heads, d_ckv)
    block_h = max(16, triton.next_power_of_2(num_heads))
    _splitkv_partial_kernel[(programs,)](
        q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse, part_o, part_lse,
        float(sm_scale) * LOG2E,
        batch_size, total, chunk,
        q_nope.stride(0), q_nope.stride(1), q_nope.stride(2),
        q_pe.stride(0), q_pe.stride(1), q_pe.stride(2),
        ckv_cache.stride(0), ckv_cache.stride(2),
        kpe_cache.stride(0), kpe_cache.stride(2),
        output.stride(0), output.stride(1), output.stride(2),
        lse.stride(0), lse.stride(1),
        part_o.stride(0), part_o.stride(1), part_lse.stride(0),
        NUM_HEADS=num_heads, D_CKV=d_ckv, D_KPE=d_kpe, BLOCK_H=block_h, BLOCK_N=PARAMS["BLOCK_N"],
        COUNT_B=COUNT_B, INTERPRETED=interpreted,
        num_warps=PARAMS["num_warps"], num_stages=PARAMS["num_stages"],
    )
    if programs > 1:  # with one chunk every request was finished in phase 1
        combine_s, combine_d = _combine_tile(programs, batch_size, block_h, d_ckv, interpreted)
        _splitkv_combine_kernel[(batch_size, d_ckv // combine_d)](
            kv_indptr, output, lse, part_o, part_lse,
            chunk,
            output.stride(0), output.stride(1), output.stride(2),
            lse.stride(0), lse.stride(1),
            part_o.stride(0), part_o.stride(1), part_lse.stride(0),
            NUM_HEADS=num_heads, BLOCK_H=block_h, LSE_S=COMBINE_LSE_S, COMBINE_S=combine_s, COMBINE_D=combine_d,
            INTERPRETED=interpreted, num_warps=4,
        )
    return None
