"""Chunked KDA prefill for kda_prefill: a parallel intra-chunk pass, then a sequential state pass.

Each sequence is cut into chunks of BT tokens (PARAMS: 64 or 32; the last one of a sequence may be shorter); a
chunk never crosses a sequence boundary. With S0 the [K, V] state at the chunk's start, G the
cumulative log-gate inside the chunk (G_t = g_0 + ... + g_t, per key dim, <= 0), q, k L2-normalised
(q scaled), b = sigmoid(beta_logits), the recurrence of README.md unrolls to

    Akk[t, j] = b_t sum_d k_t[d] k_j[d] exp(G_t[d] - G_j[d])    j < t
    Aqk[t, j] =     sum_d q_t[d] k_j[d] exp(G_t[d] - G_j[d])    j <= t
    Tinv = (I + Akk)^-1,  w = Tinv (b k exp(G)),  u = Tinv (b v)
    U    = u - w S0                          (the delta-rule values b (v - k^T D S) of every token)
    o    = (q exp(G)) S0 + Aqk U
    S1   = diag(exp(G_last)) S0 + (k exp(G_last - G))^T U

Launch 1 (intra, grid (chunks, heads, 1), all chunks in parallel): L2 norms, gate, sigmoid(beta),
cumulative gate, Aqk and Akk on tensor cores, Tinv, and the state-independent operands of the state
pass: w, u, qg = q exp(G), kd = k exp(G_last - G) (bf16) and exp(G_last) (fp32), into a workspace
kept per device and shape. The chunk's rows are two blocks of 32 (separate tensors; Triton cannot
slice registers), so A is three 32x32 blocks (00, 10, 11). exp(G_t - G_j) is split as
exp(G_t - c) exp(c - G_j) in the diagonal blocks, c the middle of the block's gate range per key dim
(both factors within half the block's decay), and exp(G_t - s0) exp(s0 - G_j) in the 10 block, s0
the gate at the boundary between the blocks (both factors <= 1), so the products are exact in fp32
while each block of 32 rows decays by at most 2^-240 in every key column. A chunk beyond that
(extreme gates only) is redone exactly (_intra_exact). Tinv by blocks: the
diagonal blocks by the exact product (I - A)(I + A^2)(I + A^4)(I + A^8)(I + A^16) (A^32 = 0: no
sequential substitution), T10 = -T11 A10 T00.

Launch 2 (state, grid (sequences x heads x V/BV)): one program per sequence, head and block of BV
value columns walks the sequence's chunks with the fp32 state slice [K, BV] in registers:
U = u - w S, o = qg S + Aqk U (FUSE_O), S = exp(G_last) S + kd^T U. The chunks are sequential, the
value blocks independent (the delta rule mixes state rows, never columns).
With FUSE_O = False, launch 2 stores each chunk's starting state (bf16) and U instead of o, and
launch 3 (grid (chunks, heads, V/BV)) computes o in parallel: the sequential loop then does two
matrix products per chunk instead of four.

The chunk -> sequence map is computed on the device from cu_seqlens (a prefix sum of the chunk
counts): no device-to-host copy, no host-side index tensors.

On a GPU the tl.dot operands are bf16 where the *_LOWP switches say so (fp32 accumulation), tf32
otherwise. Under the Triton interpreter (CPU) every operand is upcast to fp32 (its bf16 tl.dot
returns garbage) after rounding to bf16 where the GPU would, and bf16 stores round to nearest
even through the bits (its fp32 -> bf16 cast truncates).

With BT 32 and `merge`, the two 32-token halves of each 64-token chunk are combined in place, by a launch between
the two (_merge_halves) or at the end of an intra program that did both halves, so that the state pass walks
64-token steps (exact; see _merge_pair and DESIGN.md 6.5).

Entry point, destination-passing style: run(q, k, v, g, beta, A_log, dt_bias,
initial_state, cu_seqlens, scale, bounded_gate, lower_bound, has_initial_state, output, final_state)
(g the raw gate, beta its logits: called g_raw and beta_logits inside, o the output).
"""

import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

# Tunable parameters (this family's default point).
#   BV            value columns of the state per program of the state pass; 0: by the number of
#                 sequences x heads (16 below 16, 32 below 64, else 64: about a program per SM or more)
#   num_warps     warps of the state pass (and of the output pass)
#   num_stages    software pipelining of the state pass's chunk loop (prefetch of the next chunk's
#                 operands, which do not depend on the state)
#   FUSE_O        o inside the state pass (True) or in a separate parallel launch (False)
#   BK            key columns per step of the intra pass
#   intra_warps   warps of the intra pass (8 at BT 64; at BT 32, 2 warps beat 4 and 8 on the H200, 2026-12-02: each
#                 16 x 16 product's layout conversions span fewer warps, and four programs share a multiprocessor)
#   intra_maxnreg_softplus, intra_maxnreg_bounded   register cap of the intra pass for each gate form
#                 (None: the compiler's choice, 255 at 8 warps: one program per multiprocessor; 128: two,
#                 with some spills). On the H200 (2026-11-30) 128 made the bounded-gate workloads
#                 5-11% faster and the softplus ones 2-14% slower (the softplus gate needs more
#                 registers): the gate form is an argument of every call, so each gets its own cap.
#   BT            chunk length in tokens: 64 (two 32-row blocks per chunk, measured since v1), or 32 (two 16-row
#                 blocks: offline, Triton 3.9, sm_90, the bounded-gate intra pass at the cap of 128 keeps 96 B
#                 of stack instead of 688 and issues 120 mma.sync per chunk instead of 352, 32% fewer per token;
#                 the state pass then walks twice the steps, on mma.sync instead of wgmma). On the H200 (2026-12-02):
#                 the intra pass 1.6-2x faster on 2 warps, the state pass 1.6x slower on one sequence; the
#                 champion (champion_h200.json) chooses per shape
#   merge         with BT 32, each two chunks of 32 combined into one of 64 for the state pass, which then walks
#                 64-token steps (the BT 32 intra pass is 1.6-2x faster than BT 64's on 2 warps, the BT 32 state pass
#                 1.6x slower on one sequence: H200, 2026-12-02, DESIGN.md 6.5): "off"; "launch", by a launch of its
#                 own (_merge_halves; measured); "fused", by the intra pass, one program per 64 tokens doing both
#                 halves and then the combination from L2 (1.5-2.6x slower than "launch" on the H200, 2026-12-02:
#                 the doubled program; no longer in the family's space)
#   segments      on one sequence, the chunks cut into this many runs of consecutive chunks: the state pass of run j
#                 (on a second stream, carrying the state through final_state) overlaps the intra pass of run j + 1
#                 (the state pass of one sequence is latency-bound on a program per head and value block: 0.46-0.52
#                 ms of 0.72-1.52 at 16k tokens on the H200, 2026-12-02, while the intra pass fills the GPU); 1: off.
#                 Measured (DESIGN.md 6.6): 1.23x at 16k x 8, nearly nothing at 32 heads (the state programs displace
#                 intra programs), a loss below 4k tokens. Runs of the global chunk order on batches lost 1.03-1.9x
#                 (they serialize the sequences' state passes): a batch is one pass
#   store_early   the intra pass writes qg, kd and b k exp(G) of a key block before its A products (True)
#                 or after them (False, measured as v1.4): only the compiler's register allocation
#                 differs (offline, Triton 3.6, sm_90: stack 744 -> 592 B at the bounded cap of 128,
#                 120 -> 0 B uncapped); False is no longer in the family's space (slower on the H200 since v1.5)
PARAMS = {"BV": 0, "num_warps": 4, "num_stages": 2, "FUSE_O": True, "BK": 64, "intra_warps": 8, "intra_maxnreg_softplus": None, "intra_maxnreg_bounded": 128, "store_early": True, "BT": 64, "merge": "off", "segments": 1}
# Per-shape points ([[axes, params], ...], nearest shape wins; empty: PARAMS everywhere), written by
# python -m evoteam.sweep --emit-champion, built by --build into a copy of this file.
DISPATCH = []

A_LOWP = True  # bf16 operands for Aqk / Akk (tf32 otherwise)
INV_LOWP = False  # bf16 operands in the product form of Tinv (tf32 otherwise)
# bf16 operands for w = Tinv (...) and u = Tinv (b v); b k exp(G) passes through the workspace as bf16 either way
WU_LOWP = True

# Probe-only (scripts/kda_probe.py --ablate): a bit mask of intra-pass stages left out, to place the pass's time
# without hardware counters (the output is then wrong): 1 the A products, 2 the inverse (Tinv taken as Akk),
# 4 the w pass, 8 the u pass, 16 the stores of qg, kd and b k exp(G). 0 in every real call.
ABLATE = 0

FAST_LAUNCH = True  # launch the compiled kernels directly after the first call of a shape
_WORKSPACE = {}
_PLANS = {}


@triton.jit
def _bf16_rne(x):
    """fp32 -> bf16 rounded to nearest even through the bits (the interpreter's cast truncates)."""
    b = x.to(tl.uint32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _to_bf16(x, INTERP: tl.constexpr):
    """fp32 -> bf16 for a store (round to nearest even on either path)."""
    if INTERP:
        return _bf16_rne(x)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def _operand(x, LOWP: tl.constexpr, INTERP: tl.constexpr):
    """A tl.dot operand: bf16 when LOWP (under the interpreter: rounded to bf16, held in fp32),
    fp32 otherwise (tf32 on the GPU)."""
    if LOWP:
        if INTERP:
            return _bf16_rne(x.to(tl.float32)).to(tl.float32)
        else:
            return x.to(tl.bfloat16)
    else:
        return x.to(tl.float32)


@triton.jit
def _gate_block(g_raw, dt_bias, tok, m_t, i_h, o_k, b_a, lower_bound,
                H, K: tl.constexpr, BOUNDED: tl.constexpr, INTERP: tl.constexpr):
    """Log2 of the decay of every row of the chunk for key columns o_k ([BT, BK] fp32, 0 on masked rows)."""
    b_bias = tl.load(dt_bias + i_h * K + o_k).to(tl.float32)
    p = (tok[:, None] * H + i_h) * K + o_k[None, :]
    b_x = tl.load(g_raw + p, mask=m_t[:, None], other=0.0).to(tl.float32) + b_bias[None, :]
    if BOUNDED:
        b_g = (lower_bound * 1.4426950408889634) * tl.sigmoid(b_a * b_x)
    else:
        # log2e softplus(x) = max(x, 0) log2e + log2(1 + 2^(-|x| log2e)) with the hardware's approximate
        # exp2 and log2 (relative error about 2^-22): the precise expf/logf took about 50 instructions
        # per element, a quarter of the intra pass's (Triton 3.6, sm_90). Above x = 20 (torch's
        # threshold, where it returns x) the second term is under 4e-9, below half an ulp of x.
        e = tl.exp2(-tl.abs(b_x) * 1.4426950408889634)
        if INTERP:
            tail = tl.log2(1.0 + e)  # the interpreter has no libdevice
        else:
            tail = libdevice.fast_log2f(1.0 + e)
        b_g = -b_a * (tl.maximum(b_x, 0.0) * 1.4426950408889634 + tail)
    return tl.where(m_t[:, None], b_g, 0.0)


@triton.jit
def _block_gates(g_raw, dt_bias, tok0, tok1, m0, m1, i_h, o_k, b_a, lower_bound,
                 H, K: tl.constexpr, BOUNDED: tl.constexpr, INTERP: tl.constexpr):
    """(s0, G0, G1, gl) for key columns o_k: the log2 decay of block 0 in all, the cumulative log2
    gates of both blocks' rows from the chunk's start ([BC, BK]), and G at the chunk's last row."""
    g0 = _gate_block(g_raw, dt_bias, tok0, m0, i_h, o_k, b_a, lower_bound, H, K, BOUNDED, INTERP)
    g1 = _gate_block(g_raw, dt_bias, tok1, m1, i_h, o_k, b_a, lower_bound, H, K, BOUNDED, INTERP)
    s0 = tl.sum(g0, 0)
    G0 = tl.cumsum(g0, 0)
    G1 = tl.cumsum(g1, 0) + s0[None, :]
    return s0, G0, G1, s0 + tl.sum(g1, 0)


@triton.jit
def _chunk_of_program(cu_seqlens, i_c, N, NP: tl.constexpr, BT: tl.constexpr):
    """(sequence, the chunk's first token, the sequence's end, the sequence's first token) of global chunk i_c;
    sequence == N when i_c is past the last chunk."""
    o_np = tl.arange(0, NP)
    m_np = o_np < N
    cu0 = tl.load(cu_seqlens + o_np, mask=m_np, other=0)
    cu1 = tl.load(cu_seqlens + o_np + 1, mask=m_np, other=0)
    nch = (cu1 - cu0 + BT - 1) // BT
    cend = tl.cumsum(nch, 0)
    i_n = tl.minimum(tl.sum((cend <= i_c).to(tl.int32), 0), N)
    cstart = tl.sum(tl.where(o_np < i_n, nch, 0), 0)
    i_ns = tl.minimum(i_n, N - 1)
    bos = tl.load(cu_seqlens + i_ns).to(tl.int64)
    eos = tl.load(cu_seqlens + i_ns + 1).to(tl.int64)
    t0 = bos + (i_c - cstart).to(tl.int64) * BT
    return i_n, t0, eos, bos


@triton.jit
def _rows(ptr, tok, m, i_h, o_c, H, C: tl.constexpr):
    """[rows, columns o_c] of a [T, H, C] tensor, fp32, 0 on masked rows."""
    return tl.load(ptr + (tok[:, None] * H + i_h) * C + o_c[None, :], mask=m[:, None], other=0.0).to(tl.float32)


@triton.jit
def _store_state_operands(q0, k0, q1, k1, G0, G1, gl, rq0, rq1, rk0, rk1, beta0, beta1, row0, row1,
                          m0, m1, o_k, qg_ws, kd_ws, w_ws, el_row, K: tl.constexpr, INTERP: tl.constexpr):
    """Key columns o_k of the operands that need no Tinv: qg = q exp(G), kd = k exp(G_last - G)
    (normalised rows), exp(G_last) at el_row, and b k exp(G) in w's place (the w pass multiplies it
    by Tinv there)."""
    eg0 = tl.exp2(G0)
    eg1 = tl.exp2(G1)
    p_ws0 = row0[:, None] * K + o_k[None, :]
    p_ws1 = row1[:, None] * K + o_k[None, :]
    tl.store(qg_ws + p_ws0, _to_bf16(q0 * eg0 * rq0[:, None], INTERP), mask=m0[:, None])
    tl.store(qg_ws + p_ws1, _to_bf16(q1 * eg1 * rq1[:, None], INTERP), mask=m1[:, None])
    tl.store(kd_ws + p_ws0, _to_bf16(k0 * rk0[:, None] * tl.exp2(gl[None, :] - G0), INTERP), mask=m0[:, None])
    tl.store(kd_ws + p_ws1, _to_bf16(k1 * rk1[:, None] * tl.exp2(gl[None, :] - G1), INTERP), mask=m1[:, None])
    tl.store(w_ws + p_ws0, _to_bf16(k0 * eg0 * (beta0 * rk0)[:, None], INTERP), mask=m0[:, None])
    tl.store(w_ws + p_ws1, _to_bf16(k1 * eg1 * (beta1 * rk1)[:, None], INTERP), mask=m1[:, None])
    tl.store(el_row + o_k, tl.exp2(gl))


@triton.jit
def _inverse_norm(x, factor):
    """factor / the L2 norm of each row of x [rows, K] (eps 1e-6 under the square root)."""
    return factor / tl.sqrt(tl.sum(x * x, 1) + 1e-6)


@triton.jit
def _inverse_unit_lower(a, BC: tl.constexpr, LOG2_BC: tl.constexpr, LOWP: tl.constexpr, INTERP: tl.constexpr):
    """(I + a)^-1 for a strictly lower triangular [BC, BC] a: the exact product
    (I - a)(I + a^2)(I + a^4)...(I + a^(BC/2)), since a^BC = 0."""
    o = tl.arange(0, BC)
    x = a
    p = tl.where(o[:, None] == o[None, :], 1.0, 0.0) - a
    for _ in tl.static_range(LOG2_BC - 1):
        x = tl.dot(_operand(x, LOWP, INTERP), _operand(x, LOWP, INTERP))
        p = tl.dot(_operand(p, LOWP, INTERP), _operand(x, LOWP, INTERP), p)
    return p


@triton.jit
def _diagonal_exact(x, kk, G, acc_x, acc_k, BC: tl.constexpr):
    """acc_x[i, j] += sum_d x[i, d] kk[j, d] 2^(G[i, d] - G[j, d]), acc_k the same with kk for x,
    for j <= i, one key j at a time (exact whatever the gate; used only for extreme decays)."""
    o = tl.arange(0, BC)
    for j in range(BC):
        sel = (o == j)[:, None]
        kj = tl.sum(tl.where(sel, kk, 0.0), 0)
        Gj = tl.sum(tl.where(sel, G, 0.0), 0)
        ex = tl.where((o >= j)[:, None], tl.exp2(tl.minimum(G - Gj[None, :], 0.0)), 0.0) * kj[None, :]
        col = (o == j)[None, :]
        acc_x += tl.where(col, tl.sum(x * ex, 1)[:, None], 0.0)
        acc_k += tl.where(col, tl.sum(kk * ex, 1)[:, None], 0.0)
    return acc_x, acc_k


@triton.jit
def _intra_exact(q, k, g_raw, dt_bias, tok0, tok1, m0, m1, i_h, b_a, lower_bound,
                 H, K: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BOUNDED: tl.constexpr,
                 A_LOWP: tl.constexpr, INTERP: tl.constexpr):
    """The raw Aqk and Akk blocks of a chunk whose gates decay beyond 2^-240: block 1 x block 0
    relative to the boundary between the blocks (both factors <= 1), the diagonal blocks exactly,
    key by key. Slow; only chunks with extreme gates come here."""
    a00q = tl.zeros([BC, BC], dtype=tl.float32)
    a10q = tl.zeros([BC, BC], dtype=tl.float32)
    a11q = tl.zeros([BC, BC], dtype=tl.float32)
    a00k = tl.zeros([BC, BC], dtype=tl.float32)
    a10k = tl.zeros([BC, BC], dtype=tl.float32)
    a11k = tl.zeros([BC, BC], dtype=tl.float32)
    for kb in tl.static_range(K // BK):
        o_k = kb * BK + tl.arange(0, BK)
        q0 = _rows(q, tok0, m0, i_h, o_k, H, K)
        k0 = _rows(k, tok0, m0, i_h, o_k, H, K)
        q1 = _rows(q, tok1, m1, i_h, o_k, H, K)
        k1 = _rows(k, tok1, m1, i_h, o_k, H, K)
        s0, G0, G1, _ = _block_gates(g_raw, dt_bias, tok0, tok1, m0, m1, i_h, o_k, b_a, lower_bound,
                                      H, K, BOUNDED, INTERP)
        e1 = tl.exp2(G1 - s0[None, :])
        k0f = tl.trans(_operand(k0 * tl.exp2(s0[None, :] - G0), A_LOWP, INTERP))
        a10q = tl.dot(_operand(q1 * e1, A_LOWP, INTERP), k0f, a10q)
        a10k = tl.dot(_operand(k1 * e1, A_LOWP, INTERP), k0f, a10k)
        a00q, a00k = _diagonal_exact(q0, k0, G0, a00q, a00k, BC)
        a11q, a11k = _diagonal_exact(q1, k1, G1, a11q, a11k, BC)
    return a00q, a00k, a10q, a10k, a11q, a11k


@triton.jit(do_not_specialize=["T", "N", "NCMAX", "H", "NC_FULL", "C0"])
def _intra_chunk(
    q, k, v, g_raw, beta_logits, A_log, dt_bias, cu_seqlens,
    w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws,
    scale, lower_bound, T, N, NCMAX,
    H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BK: tl.constexpr, BVU: tl.constexpr, NP: tl.constexpr,
    BOUNDED: tl.constexpr, STORE_EARLY: tl.constexpr, A_LOWP: tl.constexpr, INV_LOWP: tl.constexpr, WU_LOWP: tl.constexpr,
    INTERP: tl.constexpr, ABLATE: tl.constexpr, AQK_W: tl.constexpr, FUSED: tl.constexpr, el_full, NC_FULL, C0,
):
    """One chunk of one head (grid: chunks of BT x heads); FUSED: one chunk of 2 BT tokens, its two halves one after
    the other, then combined as _merge_halves does (grid: chunks of 2 BT x heads; the halves' rows that the combination
    reads back were written by this program, so they come from L2 instead of a third launch's DRAM round trip).
    C0: the first chunk of this launch (a run of chunks of one sequence, `segments`; else 0)."""
    i_c = tl.program_id(0) + C0
    i_h = tl.program_id(1)
    if FUSED:
        i_n, t0, eos, bos = _chunk_of_program(cu_seqlens, i_c, N, NP, 2 * BT)
        if i_n >= N:
            return
        i_a = _first_half(cu_seqlens, i_n, t0, bos, N, NP, BT)
        _intra_rows(q, k, v, g_raw, beta_logits, A_log, dt_bias, w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws,
                    scale, lower_bound, T, NCMAX, i_a, i_h, t0, eos, bos, H, K, V, BT, BK, BVU, BOUNDED, STORE_EARLY,
                    A_LOWP, INV_LOWP, WU_LOWP, INTERP, ABLATE, AQK_W)
        if eos - t0 > BT:
            _intra_rows(q, k, v, g_raw, beta_logits, A_log, dt_bias, w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws,
                        scale, lower_bound, T, NCMAX, i_a + 1, i_h, t0 + BT, eos, bos, H, K, V, BT, BK, BVU, BOUNDED,
                        STORE_EARLY, A_LOWP, INV_LOWP, WU_LOWP, INTERP, ABLATE, AQK_W)
        tl.debug_barrier()  # the halves' stores (other threads of this program) before the combination's loads
        _merge_pair(w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws, el_full, i_a, i_c, i_h, t0, eos, T, NCMAX, NC_FULL,
                    K, V, BT, INTERP)
    else:
        i_n, t0, eos, bos = _chunk_of_program(cu_seqlens, i_c, N, NP, BT)
        if i_n >= N:
            return
        _intra_rows(q, k, v, g_raw, beta_logits, A_log, dt_bias, w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws,
                    scale, lower_bound, T, NCMAX, i_c, i_h, t0, eos, bos, H, K, V, BT, BK, BVU, BOUNDED, STORE_EARLY,
                    A_LOWP, INV_LOWP, WU_LOWP, INTERP, ABLATE, AQK_W)


@triton.jit
def _chunks_before(cu_seqlens, i_n, N, NP: tl.constexpr, BT: tl.constexpr):
    """The number of chunks of BT tokens in the sequences before sequence i_n (a prefix sum over cu_seqlens)."""
    o_np = tl.arange(0, NP)
    m_np = o_np < N
    cu0 = tl.load(cu_seqlens + o_np, mask=m_np, other=0)
    cu1 = tl.load(cu_seqlens + o_np + 1, mask=m_np, other=0)
    return tl.sum(tl.where(o_np < i_n, (cu1 - cu0 + BT - 1) // BT, 0), 0)


@triton.jit
def _first_half(cu_seqlens, i_n, t0, bos, N, NP: tl.constexpr, BH: tl.constexpr):
    """The global index of the first chunk of BH tokens inside the chunk of 2 BH starting at t0 of sequence i_n."""
    return _chunks_before(cu_seqlens, i_n, N, NP, BH) + ((t0 - bos) // BH).to(tl.int32)


@triton.jit
def _intra_rows(
    q, k, v, g_raw, beta_logits, A_log, dt_bias, w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws,
    scale, lower_bound, T, NCMAX, i_c, i_h, t0, eos, bos,
    H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BVU: tl.constexpr,
    BOUNDED: tl.constexpr, STORE_EARLY: tl.constexpr, A_LOWP: tl.constexpr, INV_LOWP: tl.constexpr, WU_LOWP: tl.constexpr,
    INTERP: tl.constexpr, ABLATE: tl.constexpr, AQK_W: tl.constexpr,
):
    """The chunk of BT tokens starting at t0 (global chunk i_c), head i_h. Its rows are handled as two blocks of
    BC = BT / 2 rows (block 0: rows 0..BC-1, block 1: rows BC..BT-1), each a tensor of its own."""
    BC: tl.constexpr = BT // 2
    LOG2_BC: tl.constexpr = 5 if BC == 32 else (4 if BC == 16 else 6)
    L = tl.minimum(eos - t0, BT)
    o_i = tl.arange(0, BC)
    m0 = o_i < L
    m1 = (BC + o_i) < L
    tok0 = t0 + o_i
    tok1 = t0 + BC + o_i
    b_a = tl.exp(tl.load(A_log + i_h).to(tl.float32))

    # ---- Aqk, Akk from the raw q and k (their L2 norms are row factors, applied afterwards).
    # Diagonal blocks: exp(G_t - G_j) = exp(G_t - c) exp(c - G_j), c = the middle of the block's gate
    # range: both factors stay within half the block's decay. Block 1 x block 0 (t in block 1, j in
    # block 0): relative to the boundary between the blocks, exp(G_t - s0) exp(s0 - G_j), both <= 1,
    # so exact whatever the decay (a factor underflows only where the product is below 2^-126).
    a00q = tl.zeros([BC, BC], dtype=tl.float32)
    a10q = tl.zeros([BC, BC], dtype=tl.float32)
    a11q = tl.zeros([BC, BC], dtype=tl.float32)
    a00k = tl.zeros([BC, BC], dtype=tl.float32)
    a10k = tl.zeros([BC, BC], dtype=tl.float32)
    a11k = tl.zeros([BC, BC], dtype=tl.float32)
    # the rows' L2 norms and b first: the loop below also writes the state pass's operands that need
    # no Tinv (qg, kd, exp(G_last)) and b k exp(G), which the w pass multiplies by Tinv in place. Until
    # v1.4 a second loop recomputed the gates, their cumulative sums and the loads of q and k for
    # that: about a third of the pass's instructions.
    o_kall = tl.arange(0, K)
    rq0 = _inverse_norm(_rows(q, tok0, m0, i_h, o_kall, H, K), scale)
    rq1 = _inverse_norm(_rows(q, tok1, m1, i_h, o_kall, H, K), scale)
    rk0 = _inverse_norm(_rows(k, tok0, m0, i_h, o_kall, H, K), 1.0)
    rk1 = _inverse_norm(_rows(k, tok1, m1, i_h, o_kall, H, K), 1.0)
    beta0 = tl.where(m0, tl.sigmoid(tl.load(beta_logits + tok0 * H + i_h, mask=m0, other=0.0).to(tl.float32)), 0.0)
    beta1 = tl.where(m1, tl.sigmoid(tl.load(beta_logits + tok1 * H + i_h, mask=m1, other=0.0).to(tl.float32)), 0.0)
    # workspace rows of this head and chunk: [H, T, .] layouts, contiguous per head
    row0 = i_h.to(tl.int64) * T + tok0
    row1 = i_h.to(tl.int64) * T + tok1
    el_row = el_ws + (i_h.to(tl.int64) * NCMAX + i_c) * K  # exp(G_last) of this chunk and head
    worst = 0.0
    for kb in tl.static_range(K // BK):
        o_k = kb * BK + tl.arange(0, BK)
        q0 = _rows(q, tok0, m0, i_h, o_k, H, K)
        k0 = _rows(k, tok0, m0, i_h, o_k, H, K)
        q1 = _rows(q, tok1, m1, i_h, o_k, H, K)
        k1 = _rows(k, tok1, m1, i_h, o_k, H, K)
        s0, G0, G1, gl = _block_gates(g_raw, dt_bias, tok0, tok1, m0, m1, i_h, o_k, b_a, lower_bound,
                                      H, K, BOUNDED, INTERP)
        c0 = 0.5 * s0
        c1 = 0.5 * (s0 + gl)
        # The diagonal blocks' factors are at most 2^(range/2) for a block's decay range (-s0 for
        # block 0, s0 - gl for block 1): fine in fp32 while each block of BC rows decays by at most
        # 2^-240 over every key column (a chunk may decay twice that). Beyond that (strong gates
        # only) the chunk is redone below; the clamps keep this pass finite. (Until 2026-11-30 the
        # cross block was taken relative to c1, which bounded the whole chunk's decay instead: 1-5%
        # of the softplus workloads' chunks took the slow exact path.)
        worst = tl.maximum(worst, tl.max(tl.maximum(-s0, s0 - gl), 0))
        if STORE_EARLY and (ABLATE & 16) == 0:
            _store_state_operands(q0, k0, q1, k1, G0, G1, gl, rq0, rq1, rk0, rk1, beta0, beta1, row0, row1,
                                  m0, m1, o_k, qg_ws, kd_ws, w_ws, el_row, K, INTERP)
        e0 = tl.exp2(tl.minimum(G0 - c0[None, :], 120.0))
        e1 = tl.exp2(tl.minimum(G1 - c1[None, :], 120.0))
        i0 = tl.exp2(tl.minimum(c0[None, :] - G0, 120.0))
        k0c = tl.trans(_operand(k0 * i0, A_LOWP, INTERP))
        # k0 exp(s0 - G0) and q1, k1 exp(G1 - s0): per-column rescalings of the diagonal blocks' factors
        k0b = tl.trans(_operand(k0 * i0 * tl.exp2(s0 - c0)[None, :], A_LOWP, INTERP))
        k1c = tl.trans(_operand(k1 * tl.exp2(tl.minimum(c1[None, :] - G1, 120.0)), A_LOWP, INTERP))
        q1s = q1 * e1
        k1s = k1 * e1
        to_boundary = tl.exp2(c1 - s0)[None, :]
        if (ABLATE & 1) == 0:
            a00q = tl.dot(_operand(q0 * e0, A_LOWP, INTERP), k0c, a00q)
            a00k = tl.dot(_operand(k0 * e0, A_LOWP, INTERP), k0c, a00k)
            a10q = tl.dot(_operand(q1s * to_boundary, A_LOWP, INTERP), k0b, a10q)
            a10k = tl.dot(_operand(k1s * to_boundary, A_LOWP, INTERP), k0b, a10k)
            a11q = tl.dot(_operand(q1s, A_LOWP, INTERP), k1c, a11q)
            a11k = tl.dot(_operand(k1s, A_LOWP, INTERP), k1c, a11k)
        if not STORE_EARLY and (ABLATE & 16) == 0:
            _store_state_operands(q0, k0, q1, k1, G0, G1, gl, rq0, rq1, rk0, rk1, beta0, beta1, row0, row1,
                                  m0, m1, o_k, qg_ws, kd_ws, w_ws, el_row, K, INTERP)
    if worst > 240.0:
        a00q, a00k, a10q, a10k, a11q, a11k = _intra_exact(
            q, k, g_raw, dt_bias, tok0, tok1, m0, m1, i_h, b_a, lower_bound, H, K, BC, BK, BOUNDED, A_LOWP, INTERP)
    lower = o_i[:, None] >= o_i[None, :]
    strict = o_i[:, None] > o_i[None, :]
    a00q = tl.where(lower, a00q * rq0[:, None] * rk0[None, :], 0.0)
    a11q = tl.where(lower, a11q * rq1[:, None] * rk1[None, :], 0.0)
    a10q = a10q * rq1[:, None] * rk0[None, :]
    a00k = tl.where(strict, a00k * (beta0 * rk0)[:, None] * rk0[None, :], 0.0)
    a11k = tl.where(strict, a11k * (beta1 * rk1)[:, None] * rk1[None, :], 0.0)
    a10k = a10k * (beta1 * rk1)[:, None] * rk0[None, :]

    if AQK_W == 0:  # Aqk rows of this chunk's width
        p_a0 = aqk_ws + row0[:, None] * BT + o_i[None, :]
        p_a1 = aqk_ws + row1[:, None] * BT + o_i[None, :]
    else:  # rows of a chunk twice as long (combined by _merge_pair): this chunk's columns
        col = (((t0 - bos) // BT) % 2) * BT  # 0 for the first half of its 2 BT chunk, BT for the second
        p_a0 = aqk_ws + row0[:, None] * AQK_W + col + o_i[None, :]
        p_a1 = aqk_ws + row1[:, None] * AQK_W + col + o_i[None, :]
        if col == 0:  # the first half's rows end in zeros; the second half's begin with Aqk_ba, which _merge_pair writes
            zeros = tl.zeros([BC, BC], dtype=tl.bfloat16)
            tl.store(p_a0 + BT, zeros, mask=m0[:, None])
            tl.store(p_a0 + BT + BC, zeros, mask=m0[:, None])
            tl.store(p_a1 + BT, zeros, mask=m1[:, None])
            tl.store(p_a1 + BT + BC, zeros, mask=m1[:, None])
    tl.store(p_a0, _to_bf16(a00q, INTERP), mask=m0[:, None])
    tl.store(p_a0 + BC, tl.zeros([BC, BC], dtype=tl.bfloat16), mask=m0[:, None])
    tl.store(p_a1, _to_bf16(a10q, INTERP), mask=m1[:, None])
    tl.store(p_a1 + BC, _to_bf16(a11q, INTERP), mask=m1[:, None])

    # ---- Tinv = (I + Akk)^-1 by blocks: [[T00, 0], [T10, T11]], T10 = -T11 A10 T00
    if (ABLATE & 2) == 0:
        t00 = _inverse_unit_lower(a00k, BC, LOG2_BC, INV_LOWP, INTERP)
        t11 = _inverse_unit_lower(a11k, BC, LOG2_BC, INV_LOWP, INTERP)
        t10 = -tl.dot(_operand(tl.dot(_operand(t11, INV_LOWP, INTERP), _operand(a10k, INV_LOWP, INTERP)),
                               INV_LOWP, INTERP), _operand(t00, INV_LOWP, INTERP))
    else:
        t00, t10, t11 = a00k, a10k, a11k
    t00 = _operand(t00, WU_LOWP, INTERP)
    t10 = _operand(t10, WU_LOWP, INTERP)
    t11 = _operand(t11, WU_LOWP, INTERP)

    # ---- w = Tinv (b k exp(G)): b k exp(G) from w's place (bf16, as the dot's operand was), written
    # above by other threads of this program: the barrier orders those stores before these loads
    tl.debug_barrier()
    if (ABLATE & 4) == 0:
        for kb in tl.static_range(K // BK):
            o_k = kb * BK + tl.arange(0, BK)
            p_ws0 = row0[:, None] * K + o_k[None, :]
            p_ws1 = row1[:, None] * K + o_k[None, :]
            x0 = _operand(tl.load(w_ws + p_ws0, mask=m0[:, None], other=0.0), WU_LOWP, INTERP)
            x1 = _operand(tl.load(w_ws + p_ws1, mask=m1[:, None], other=0.0), WU_LOWP, INTERP)
            w0 = tl.dot(t00, x0)
            w1 = tl.dot(t11, x1, tl.dot(t10, x0))
            tl.store(w_ws + p_ws0, _to_bf16(w0, INTERP), mask=m0[:, None])
            tl.store(w_ws + p_ws1, _to_bf16(w1, INTERP), mask=m1[:, None])
    # ---- u = Tinv (b v)
    if (ABLATE & 8) == 0:
        for vb in tl.static_range(V // BVU):
            o_v = vb * BVU + tl.arange(0, BVU)
            v0 = _operand(_rows(v, tok0, m0, i_h, o_v, H, V) * beta0[:, None], WU_LOWP, INTERP)
            v1 = _operand(_rows(v, tok1, m1, i_h, o_v, H, V) * beta1[:, None], WU_LOWP, INTERP)
            u0 = tl.dot(t00, v0)
            u1 = tl.dot(t11, v1, tl.dot(t10, v0))
            tl.store(u_ws + row0[:, None] * V + o_v[None, :], _to_bf16(u0, INTERP), mask=m0[:, None])
            tl.store(u_ws + row1[:, None] * V + o_v[None, :], _to_bf16(u1, INTERP), mask=m1[:, None])


@triton.jit(do_not_specialize=["T", "N", "NC_HALF", "NC_FULL", "C0", "H"])
def _merge_halves(
    w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_half, el_full, cu_seqlens,
    T, N, NC_HALF, NC_FULL, C0,
    H, K: tl.constexpr, V: tl.constexpr, BH: tl.constexpr, NP: tl.constexpr, INTERP: tl.constexpr,
):
    """The state pass's operands of each chunk of 2 BH tokens from those of its two halves (chunks of BH written by
    the intra pass), in place (_merge_pair). Grid: chunks of 2 BH x heads, from chunk C0."""
    i_c = tl.program_id(0) + C0
    i_h = tl.program_id(1)
    i_n, t0, eos, bos = _chunk_of_program(cu_seqlens, i_c, N, NP, 2 * BH)
    if i_n >= N:
        return
    i_a = _first_half(cu_seqlens, i_n, t0, bos, N, NP, BH)
    _merge_pair(w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_half, el_full, i_a, i_c, i_h, t0, eos, T, NC_HALF, NC_FULL,
                K, V, BH, INTERP)


@triton.jit
def _merge_pair(w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_half, el_full, i_a, i_c, i_h, t0, eos, T, NC_HALF, NC_FULL,
                K: tl.constexpr, V: tl.constexpr, BH: tl.constexpr, INTERP: tl.constexpr):
    """The chunk of 2 BH tokens at t0 (chunk i_c; its halves a, b are the chunks i_a, i_a + 1 of BH), head i_h, in
    place. With M = w_b kd_a^T = Tinv_b A_ba (Tinv's 10 block is -M Tinv_a):
    w_b <- w_b e^(s_a) - M w_a, u_b <- u_b - M u_a, qg_b <- qg_b e^(s_a), kd_a <- kd_a e^(s_b), Aqk_ba = qg_b kd_a^T,
    exp(G_last) = e^(s_a) e^(s_b), where e^(s_a), e^(s_b) are the halves' exp(G_last) (per key column). Exact: the
    cross block of A is (b k_b e^(G_b)) (k_a e^(G_last,a - G_a))^T, and Tinv_b (b k_b e^(G_b)) is the half's w_b.
    A chunk without a second half is its first half."""
    o_k = tl.arange(0, K)
    el_a = tl.load(el_half + (i_h.to(tl.int64) * NC_HALF + i_a) * K + o_k)
    p_full = el_full + (i_h.to(tl.int64) * NC_FULL + i_c) * K + o_k
    if eos - t0 <= BH:
        tl.store(p_full, el_a)
    else:
        el_b = tl.load(el_half + (i_h.to(tl.int64) * NC_HALF + i_a + 1) * K + o_k)
        o_r = tl.arange(0, BH)
        row_a = i_h.to(tl.int64) * T + t0 + o_r
        row_b = row_a + BH
        m_b = (t0 + BH + o_r) < eos
        p_ka = row_a[:, None] * K + o_k[None, :]
        p_kb = row_b[:, None] * K + o_k[None, :]
        w_a = _operand(tl.load(w_ws + p_ka), True, INTERP)
        kd_a = tl.load(kd_ws + p_ka).to(tl.float32)
        w_b = tl.load(w_ws + p_kb, mask=m_b[:, None], other=0.0).to(tl.float32)
        qg_b = tl.load(qg_ws + p_kb, mask=m_b[:, None], other=0.0).to(tl.float32)
        kd_at = tl.trans(_operand(kd_a, True, INTERP))
        m = tl.dot(_operand(w_b, True, INTERP), kd_at)  # [BH, BH]
        aqk_ba = tl.dot(_operand(qg_b, True, INTERP), kd_at)
        m_op = _operand(m, True, INTERP)
        w_b = w_b * el_a[None, :] - tl.dot(m_op, w_a)
        tl.store(w_ws + p_kb, _to_bf16(w_b, INTERP), mask=m_b[:, None])
        tl.store(qg_ws + p_kb, _to_bf16(qg_b * el_a[None, :], INTERP), mask=m_b[:, None])
        tl.store(kd_ws + p_ka, _to_bf16(kd_a * el_b[None, :], INTERP))
        tl.store(aqk_ws + row_b[:, None] * (2 * BH) + o_r[None, :], _to_bf16(aqk_ba, INTERP), mask=m_b[:, None])
        tl.store(p_full, el_a * el_b)
        o_v = tl.arange(0, V)
        u_a = _operand(tl.load(u_ws + row_a[:, None] * V + o_v[None, :]), True, INTERP)
        p_ub = u_ws + row_b[:, None] * V + o_v[None, :]
        u_b = tl.load(p_ub, mask=m_b[:, None], other=0.0).to(tl.float32)
        tl.store(p_ub, _to_bf16(u_b - tl.dot(m_op, u_a), INTERP), mask=m_b[:, None])


@triton.jit(do_not_specialize=["T", "N", "NCMAX", "I0", "I1", "H"])
def _state_pass(
    w_ws, u_ws, qg_ws, kd_ws, aqk_ws, el_ws, h0, cu_seqlens, o, ht, hs_ws, vn_ws,
    T, N, NCMAX, I0, I1,
    H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    NP: tl.constexpr, HAS_H0: tl.constexpr, FUSE_O: tl.constexpr, NUM_STAGES: tl.constexpr,
    INTERP: tl.constexpr,
):
    NV: tl.constexpr = V // BV
    pid = tl.program_id(0)
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // H
    i_h = i_nh % H
    coff = _chunks_before(cu_seqlens, i_n, N, NP, BT)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    nt = ((eos - bos + BT - 1) // BT).to(tl.int32)

    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    o_t = tl.arange(0, BT)
    p_state = (i_nh.to(tl.int64) * K + o_k[:, None]) * V + o_v[None, :]
    if HAS_H0:
        b_s = tl.load(h0 + p_state).to(tl.float32)
    else:
        b_s = tl.zeros([K, BV], dtype=tl.float32)
    head_row = i_h.to(tl.int64) * T
    # chunks I0 .. I1 - 1 of each sequence (a run of them, `segments`: h0 is then the previous run's ht, read by this
    # program before it writes the same slice)
    for i in tl.range(I0, tl.minimum(nt, I1), num_stages=NUM_STAGES):
        t0 = bos + i * BT
        m_t = (t0 + o_t) < eos
        row = head_row + t0 + o_t  # [BT]
        p_kk = row[:, None] * K + o_k[None, :]
        b_w = _operand(tl.load(w_ws + p_kk, mask=m_t[:, None], other=0.0), True, INTERP)
        b_kd = _operand(tl.load(kd_ws + p_kk, mask=m_t[:, None], other=0.0), True, INTERP)
        b_u = tl.load(u_ws + row[:, None] * V + o_v[None, :], mask=m_t[:, None], other=0.0).to(tl.float32)
        b_el = tl.load(el_ws + (i_h.to(tl.int64) * NCMAX + coff + i) * K + o_k)
        b_sb = _operand(b_s, True, INTERP)
        b_un = b_u - tl.dot(b_w, b_sb)  # [BT, BV]
        b_ub = _operand(b_un, True, INTERP)
        # the next state first (the loop's critical path), then o from the chunk's starting state
        b_s = tl.dot(tl.trans(b_kd), b_ub, b_s * b_el[:, None])
        if FUSE_O:
            b_qg = _operand(tl.load(qg_ws + p_kk, mask=m_t[:, None], other=0.0), True, INTERP)
            b_aqk = _operand(tl.load(aqk_ws + row[:, None] * BT + o_t[None, :], mask=m_t[:, None], other=0.0),
                             True, INTERP)
            b_o = tl.dot(b_aqk, b_ub, tl.dot(b_qg, b_sb))
            p_o = ((t0 + o_t)[:, None] * H + i_h) * V + o_v[None, :]
            tl.store(o + p_o, _to_bf16(b_o, INTERP), mask=m_t[:, None])
        else:
            p_hs = ((i_h.to(tl.int64) * NCMAX + coff + i) * K + o_k[:, None]) * V + o_v[None, :]
            tl.store(hs_ws + p_hs, b_sb.to(tl.bfloat16))
            tl.store(vn_ws + row[:, None] * V + o_v[None, :], b_ub.to(tl.bfloat16), mask=m_t[:, None])
    tl.store(ht + p_state, b_s)


@triton.jit(do_not_specialize=["T", "N", "NCMAX", "H"])
def _output_pass(
    qg_ws, aqk_ws, hs_ws, vn_ws, cu_seqlens, o,
    T, N, NCMAX,
    H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    NP: tl.constexpr, INTERP: tl.constexpr,
):
    i_c = tl.program_id(0)
    i_h = tl.program_id(1)
    i_v = tl.program_id(2)
    i_n, t0, eos, bos = _chunk_of_program(cu_seqlens, i_c, N, NP, BT)
    if i_n >= N:
        return
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    m_t = (t0 + o_t) < eos
    row = i_h.to(tl.int64) * T + t0 + o_t
    b_qg = _operand(tl.load(qg_ws + row[:, None] * K + o_k[None, :], mask=m_t[:, None], other=0.0), True, INTERP)
    b_aqk = _operand(tl.load(aqk_ws + row[:, None] * BT + o_t[None, :], mask=m_t[:, None], other=0.0), True, INTERP)
    b_un = _operand(tl.load(vn_ws + row[:, None] * V + o_v[None, :], mask=m_t[:, None], other=0.0), True, INTERP)
    p_hs = ((i_h.to(tl.int64) * NCMAX + i_c) * K + o_k[:, None]) * V + o_v[None, :]
    b_h = _operand(tl.load(hs_ws + p_hs), True, INTERP)
    b_o = tl.dot(b_qg, b_h) + tl.dot(b_aqk, b_un)
    tl.store(o + ((t0 + o_t)[:, None] * H + i_h) * V + o_v[None, :], _to_bf16(b_o, INTERP), mask=m_t[:, None])


def _workspace(device, T, H, K, V, BT, ncmax, fuse_o, state_bt, state_ncmax):
    """Intermediates of one shape, kept across calls (one shape at a time). With merged halves (state_bt = 2 BT)
    the Aqk rows are state_bt wide and exp(G_last) exists per chunk of each length ("el", "el_state")."""
    key = (str(device), T, H, K, V, BT, ncmax, fuse_o, state_bt)
    ws = _WORKSPACE.get(key)
    if ws is None:
        _WORKSPACE.clear()
        bf16 = torch.bfloat16
        ws = {
            "w": torch.empty(H, T, K, device=device, dtype=bf16),
            "u": torch.empty(H, T, V, device=device, dtype=bf16),
            "qg": torch.empty(H, T, K, device=device, dtype=bf16),
            "kd": torch.empty(H, T, K, device=device, dtype=bf16),
            "aqk": torch.empty(H, T, state_bt, device=device, dtype=bf16),
            "el": torch.empty(H, ncmax, K, device=device, dtype=torch.float32),
        }
        ws["el_state"] = ws["el"] if state_bt == BT else torch.empty(H, state_ncmax, K, device=device,
                                                                       dtype=torch.float32)
        if not fuse_o:
            ws["hs"] = torch.empty(H, state_ncmax, K, V, device=device, dtype=bf16)
            ws["vn"] = torch.empty(H, T, V, device=device, dtype=bf16)
        else:
            ws["hs"] = ws["vn"] = ws["u"]  # not touched
        _WORKSPACE[key] = ws
    return ws


def params_for(seq_len, num_v_heads, num_sequences, dispatch=None):
    """The point a call of this shape uses: the DISPATCH entry nearest in (log heads, log sequences,
    log tokens), merged over PARAMS; PARAMS when DISPATCH is empty."""
    table = DISPATCH if dispatch is None else dispatch
    if not table:
        return dict(PARAMS)

    def distance(entry):
        axes = entry[0]
        return tuple(abs(math.log(max(axes.get(name, 1), 1)) - math.log(max(value, 1)))
                     for name, value in (("num_v_heads", num_v_heads), ("num_sequences", num_sequences),
                                         ("seq_len", seq_len)))

    return {**PARAMS, **min(table, key=distance)[1]}


class _Launch:
    """One kernel launch: Triton's normal launch the first time, then (FAST_LAUNCH) the compiled
    kernel's C launcher directly with the same positional arguments, the current stream and no launch
    hooks: Triton's argument binding costs tens of microseconds per launch on some versions, and
    CompiledKernel[grid] (3.6 to 3.9) builds a launch-metadata dict on every call because its hook
    chain is never None. Grids are 3-tuples (the launcher reads grid[0], grid[1] and grid[2])."""

    __slots__ = ("fn", "grid", "options", "compiled", "fast", "device")

    def __init__(self, fn, grid, options, fast):
        # fast: None (direct launches not yet tried), True (they work), False (off or failed)
        self.fn, self.grid, self.options, self.fast = fn, grid, options, None if fast else False
        self.compiled, self.device = None, 0

    def __call__(self, args, fast_ok, stream=None):
        """stream: a torch stream to launch on (else the current one); direct launches take its handle, without
        the stream context's host cost."""
        c = self.compiled
        if c is not None and fast_ok:
            handle = stream.cuda_stream if stream is not None else _current_stream(self.device)
            if self.fast is True:
                c.run(self.grid[0], self.grid[1], self.grid[2], handle, c.function,
                      c.packed_metadata, None, None, None, *args)
                return
            try:  # the first direct launch: a Triton whose launcher takes other arguments raises here
                c.run(self.grid[0], self.grid[1], self.grid[2], handle, c.function,
                      c.packed_metadata, None, None, None, *args)
                self.fast = True
                return
            except (TypeError, ValueError, IndexError, SystemError, AttributeError):
                self.compiled, self.fast = None, False
        if stream is not None:
            with torch.cuda.stream(stream):
                compiled = self.fn[self.grid](*args, **self.options)
        else:
            compiled = self.fn[self.grid](*args, **self.options)
        if self.fast is not False and fast_ok and compiled is not None and hasattr(compiled, "run"):
            self.compiled = compiled
            self.device = torch.cuda.current_device()


def _current_stream(device_index):
    return torch._C._cuda_getCurrentRawStream(device_index)


class _Step:
    """One run of chunks: its intra launch (from chunk c0), merge launch (from chunk m0) and state launch (chunks
    i0 .. i1 - 1 of each sequence)."""

    __slots__ = ("intra", "c0", "merge", "m0", "state", "i0", "i1")

    def __init__(self, intra, c0, merge, m0, state, i0, i1):
        self.intra, self.c0, self.merge, self.m0, self.state, self.i0, self.i1 = intra, c0, merge, m0, state, i0, i1


class _Plan:
    __slots__ = ("p", "ws", "ncmax", "state_ncmax", "steps", "out", "consts", "side", "events")


_ALL = 1 << 30  # "every chunk" as the state pass's end


def _runs(T, N, state_bt, count):
    """[(i0, i1)]: the state pass's chunks cut into `count` runs of consecutive chunks (one sequence only)."""
    if N != 1 or count <= 1:
        return [(0, _ALL)]
    chunks = -(-T // state_bt)
    per = -(-chunks // count)
    return [(i0, min(i0 + per, chunks)) for i0 in range(0, chunks, per)]


def _make_plan(device, T, H, N, K, V, bounded, has_h0, interpreted):
    p = params_for(T, H, N)
    pl = _Plan()
    pl.p = p
    BT = p["BT"]
    # the state pass's chunk: with a merge (BT 32 only), each two chunks of the intra pass combined into one
    state_bt = 2 * BT if p["merge"] != "off" and BT == 32 else BT
    fused = state_bt != BT and p["merge"] == "fused"
    pl.ncmax = T // BT + N  # >= sum over sequences of cdiv(length, BT)
    pl.state_ncmax = T // state_bt + N
    pl.ws = _workspace(device, T, H, K, V, BT, pl.ncmax, p["FUSE_O"], state_bt, pl.state_ncmax)
    fast = FAST_LAUNCH and not interpreted
    np_ = max(16, triton.next_power_of_2(N))  # one compiled kernel for up to 16 sequences
    bv = p["BV"] or (16 if N * H < 16 else 32 if N * H < 64 else 64)
    pl.consts = {
        "intra": (H, K, V, BT, p["BK"], p["BK"], np_, bool(bounded), bool(p["store_early"]), A_LOWP, INV_LOWP,
                  WU_LOWP, interpreted, ABLATE, state_bt if state_bt != BT else 0, fused),
        "merge": (H, K, V, BT, np_, interpreted),
        "out": (H, K, V, state_bt, bv, np_, interpreted),
    }
    for name, reads_h0 in (("state", bool(has_h0)), ("state_next", True)):  # state_next: h0 is the previous run's ht
        pl.consts[name] = (H, K, V, state_bt, bv, np_, reads_h0, bool(p["FUSE_O"]), p["num_stages"], interpreted)
    intra_options = {"num_warps": p["intra_warps"]}
    maxnreg = p["intra_maxnreg_bounded"] if bounded else p["intra_maxnreg_softplus"]
    if maxnreg and not interpreted:
        intra_options["maxnreg"] = maxnreg
    per_state = 1 if fused else state_bt // BT  # intra programs per state chunk
    runs = _runs(T, N, state_bt, p["segments"])
    pl.steps = []
    for i0, i1 in runs:
        if i1 == _ALL:
            intra_grid, merge_grid = (pl.state_ncmax if fused else pl.ncmax), pl.state_ncmax
        else:
            intra_grid, merge_grid = (i1 - i0) * per_state, i1 - i0
        merge = None if state_bt == BT or fused else _Launch(_merge_halves, (merge_grid, H, 1), {"num_warps": 4}, fast)
        state = _Launch(_state_pass, (N * H * (V // bv), 1, 1), {"num_warps": p["num_warps"]}, fast)
        pl.steps.append(_Step(_Launch(_intra_chunk, (intra_grid, H, 1), intra_options, fast), i0 * per_state,
                              merge, i0, state, i0, i1))
    pl.out = None if p["FUSE_O"] else _Launch(_output_pass, (pl.state_ncmax, H, V // bv),
                                              {"num_warps": p["num_warps"]}, fast)
    # the runs' state passes on a second stream (high priority: its programs take SMs as the intra pass's free up)
    pl.side = pl.events = None
    if len(runs) > 1 and device.type == "cuda" and not interpreted:
        pl.side = torch.cuda.Stream(device=device, priority=-1)
        pl.events = [torch.cuda.Event() for _ in range(len(runs) + 1)]
    return pl


def _contiguous_aligned(tensors):
    ptrs = 0
    for t in tensors:
        if not t.is_contiguous():
            return False, False
        ptrs |= t.data_ptr()
    return True, (ptrs & 15) == 0


def run(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
        scale, bounded_gate, lower_bound, has_initial_state, output, final_state):
    g_raw, beta_logits, o = g, beta, output  # the definition's names (raw gate, beta logits, output), the kernel's
    T, H, K = q.shape
    V = v.shape[-1]
    N = cu_seqlens.numel() - 1
    assert K == 128 and V == 128, "written for K = V = 128"
    device = q.device
    key = (device, T, H, N, bool(bounded_gate), bool(has_initial_state))
    pl = _PLANS.get(key)
    if pl is None:
        interpreted = _INTERPRETER or device.type == "cpu"  # CPU tensors run only under the interpreter
        _PLANS.clear()  # one shape at a time (a plan holds its workspace)
        pl = _PLANS[key] = _make_plan(device, T, H, N, K, V, bounded_gate, has_initial_state, interpreted)
    tensors = (q, k, v, g_raw, beta_logits, A_log, dt_bias, initial_state, cu_seqlens, o, final_state)
    contiguous, aligned = _contiguous_aligned(tensors)
    assert contiguous, "the kernels assume contiguous tensors"
    ws, ncmax, state_ncmax = pl.ws, pl.ncmax, pl.state_ncmax
    h0 = initial_state if has_initial_state else final_state  # not read without an initial state
    intra_args = (q, k, v, g_raw, beta_logits, A_log, dt_bias, cu_seqlens, ws["w"], ws["u"], ws["qg"], ws["kd"],
                  ws["aqk"], ws["el"], float(scale), float(lower_bound), T, N, ncmax, *pl.consts["intra"],
                  ws["el_state"], state_ncmax)
    side = pl.side
    main = torch.cuda.current_stream(device) if side is not None else None
    for j, step in enumerate(pl.steps):
        step.intra((*intra_args, step.c0), aligned)
        if step.merge is not None:
            step.merge((ws["w"], ws["u"], ws["qg"], ws["kd"], ws["aqk"], ws["el"], ws["el_state"], cu_seqlens,
                        T, N, ncmax, state_ncmax, step.m0, *pl.consts["merge"]), aligned)
        state_args = (ws["w"], ws["u"], ws["qg"], ws["kd"], ws["aqk"], ws["el_state"], h0 if j == 0 else final_state,
                      cu_seqlens, o, final_state, ws["hs"], ws["vn"], T, N, state_ncmax, step.i0, step.i1,
                      *pl.consts["state" if j == 0 else "state_next"])
        if side is None:
            step.state(state_args, aligned)
        else:  # this run's state pass waits for its chunks only; the next run's intra pass goes on meanwhile
            pl.events[j].record(main)
            side.wait_event(pl.events[j])
            step.state(state_args, aligned, side)
    if side is not None:
        pl.events[-1].record(side)
        main.wait_event(pl.events[-1])
    if pl.out is not None:
        pl.out((ws["qg"], ws["aqk"], ws["hs"], ws["vn"], cu_seqlens, o, T, N, state_ncmax, *pl.consts["out"]),
               aligned)
    return None


_INTERPRETER = type(_intra_chunk).__name__ == "InterpretedFunction"
