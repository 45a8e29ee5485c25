"""Split-KV flash decoding for mla_paged_decode_h16_ckv512_kpe64_ps1, pieces cut per request,
merged by the last piece to finish (one launch) or by a second launch.

Work split. Every request is cut into pieces of at most CHUNK tokens (an empty request is one
empty piece), so no program ever crosses a request boundary: one program per piece runs ONE
software-pipelined loop over its tokens, with the request's queries loaded once. The pieces are
numbered request after request; a program finds its piece with one vector scan of kv_indptr (for
batch 1 it needs none: kv_indptr is [0, num_kv_indices] by the definition's constraints, so the
index loads start at once). The grid is cdiv(num_kv_indices, CHUNK) + batch_size programs, an
upper bound on the pieces that the host knows from tensor shapes alone (no device-to-host copy);
programs past the last piece exit at once.

CHUNK = max(MIN_CHUNK_BLOCKS * BLOCK_N, cdiv(num_kv_indices, T)), rounded up to a multiple of
BLOCK_N, with T = PROGRAMS_PER_SM * multiprocessors (less batch_size / 2 for batches, whose
requests' last pieces are half a chunk on average): short batches get pieces of at least
MIN_CHUNK_BLOCKS loop steps (fewer pieces to merge), big ones about PROGRAMS_PER_SM programs per
multiprocessor. With num_stages 5 Triton (3.6 to 3.9, sm_90) double-buffers the KV blocks (two
pipeline stages per level of indirection: the page numbers, then the rows); 3 gives one buffer.

A program's loop: BLOCK_N page numbers from kv_indices, the BLOCK_N rows of ckv (1024 B) and kpe
(128 B) they name, logits of all 16 heads (tl.dot, bf16 operands, fp32 accumulate), an online
softmax in base 2 (logits scaled by sm_scale * log2(e)), and P @ ckv (probabilities cast to bf16,
as flash attention does). Each KV row is read once, for all heads. num_stages > 1 lets Triton's
pipeliner keep the index loads and the next KV block in flight while the current one is used.

A request in one piece is finished on the spot (bf16 output, lse). A piece of a longer request
leaves its normalised output (fp16 or fp32: PARTIALS) and base-2 lse in a workspace slot (its program id), then:
  COMBINE "last":   a ticket from an atomic counter per request (acq_rel, after a CTA barrier);
                    the program that draws the last ticket merges the request's pieces (its own from
                    registers, the others' read past L1) and resets the counter to 0 for the next call.
                    One launch in all. (Batch 1 in more than LAST_MAX_PIECES pieces: as "launch".)
  COMBINE "launch": a second kernel, grid (batch, column blocks), merges each request's pieces:
                    lse = M + log2(sum_s 2^(lse_s - M)), output = sum_s 2^(lse_s - lse) * out_s.
                    Not launched when every request is one piece (known from the shapes).
  COMBINE "ctas":   the same merge by merge programs appended to the pieces' grid (batch x column
                    blocks, one launch in all): each piece of a longer request counts itself done
                    (release, after a CTA barrier); a merge program spins on its request's count
                    (one thread's acquire load, shared with the CTA by a barrier) and reads the pieces
                    past L1. The merge programs rely on NVIDIA GPUs starting blocks in grid order
                    (observed behaviour that stream-K and decoupled look-back also rely on, not a
                    documented guarantee): every piece program has started before a merge program
                    can spin, so none waits for a slot. Made for batch 1 under events timing, where
                    the second launch's host time showed (2026-11-30).
  COMBINE "pdl":    the merge kernel of "launch", launched as a programmatic dependent of the piece
                    kernel (CUDA's programmatic stream serialization; every piece program calls
                    griddepcontrol.launch_dependents at its start): its programs are scheduled once
                    every piece program has started, read kv_indptr while the pieces run, and wait
                    (griddepcontrol.wait) for the piece kernel to finish before they read the pieces.
                    Made because Nsight Compute on the H200 (2026-11-30) put the piece kernel alone
                    under FlashInfer's whole kernel and the merge kernel at 7-10 us. Measured: 0.6-1.1
                    us less per call than "launch" (graph replay), not the 2-4 us hoped for: merge
                    programs seldom fit beside two piece programs (registers), so few start early.
                    Under the interpreter (no griddepcontrol) it is "launch".
  COMBINE "peers":  the pieces of a request merge it together, in the pieces' launch: each counts itself
                    done (acq_rel, after a CTA barrier); the last to count resets the count, moves the
                    request's generation word on and merges its share of the columns at once, the others
                    wait for the word to move (acquire loads), then merge theirs from all the pieces
                    (read past L1). One launch, no extra programs, and the merge is spread over the
                    request's pieces, which finish at about the same time (one wave of equal pieces).
                    A piece waits only for pieces of its own request, consecutive programs that start
                    in grid order (as "ctas" relies on), so at most PEER_MAX of them must run at once
                    (the multiprocessors: one block each always fits); a request in more pieces is
                    merged as at "last". Made because the merge kernel took 7-8 us on batches 16
                    and 64 (Nsight Compute, 2026-12-01), mostly waves of small programs and their
                    launch, for ~8 MB read from L2. Measured (H200, graph replay): 0-1 us faster than
                    "pdl" on batch 64, ahead of it on batch 16 from ~7000 tokens up once the merge
                    tile was chosen per request (_merge_share), 2-3 us slower on small batch-16
                    shapes. Under events, its one launch won batch 1 (1.18x against "ctas" 1.06x
                    in one sweep) and batch 16 (every shape, against "pdl", 2026-12-01). The
                    generation word (instead of polling the count with atomics and counting out
                    after the merge) took 0.6-1.1 us off every shape probed (graph replay, side by
                    side). Under the interpreter, whose programs run one after another, the
                    last piece of a request to finish merges all its columns (the same merge code,
                    no waiting).
The merge (any mode but "last") is one pass, online over tiles of pieces: each step loads a tile's
lse values and outputs together ("peers": one piece's slice at a time, unrolled over a tile chosen
from the request's piece count, see _merge_share).

Host path: the timed call must be launches only. run() keeps one plan per (device, batch_size,
num_kv_indices): parameters (from DISPATCH or PARAMS), CHUNK, grids, workspace views; after the
first call of a plan it launches the compiled kernels directly (their C launchers, no hooks),
skipping Triton's argument binding and specialisation, which costs tens of microseconds per
launch on some Triton versions. The fast path is taken only for contiguous tensors with 16-byte
aligned data (what the compiled kernel was specialised for); anything else takes Triton's normal
launch. The integer arguments are not specialised (do_not_specialize), so one compiled kernel
serves every batch.

Under the Triton interpreter (CPU) the tl.dot operands are upcast to fp32 (its bf16 tl.dot returns
garbage) and bf16 stores round to nearest even through the bits (its fp32 -> bf16 cast truncates).

A kernel family (kernels/mla_decode/families.json): the tunable parameters live in PARAMS; every
point of the family's space gives a correct kernel. DISPATCH (empty in the family's file) maps
workload shapes to points: a champion file (python -m evoteam.sweep --emit-champion) sets it in a copy of this file.

Entry point, destination-passing style:
    run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse) -> None
"""

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# Tunable parameters (this family's default point).
#   BLOCK_N           KV tokens per loop step
#   MIN_CHUNK_BLOCKS  the fewest loop steps a piece is given (CHUNK >= MIN_CHUNK_BLOCKS * BLOCK_N)
#   PROGRAMS_PER_SM   programs per multiprocessor that big batches are cut into
#   COMBINE           "last": the last piece of a request merges it (one launch); "launch": a merge kernel;
#                     "ctas": merge programs in the pieces' launch; "pdl": the merge kernel as a
#                     programmatic dependent launch; "peers": a request's pieces merge it together
#   FAST_LAUNCH       launch compiled kernels directly after the first call of a shape
#   num_warps, num_stages   the main kernel's launch options
#   maxnreg           the main kernel's register cap (None: Triton's choice), e.g. 128 for 2 CTAs of 8 warps per SM
#   PARTIALS          the dtype of the pieces' partial outputs in the workspace: "fp16" (each head's row scaled by a
#                     power of two) or "fp32" (_PARTIALS says why)
PARAMS = {"BLOCK_N": 32, "MIN_CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 2, "COMBINE": "last", "FAST_LAUNCH": True, "num_warps": 4, "num_stages": 5, "maxnreg": None, "PARTIALS": "fp16"}

# Points of the family's space by workload shape, set by python -m evoteam.sweep --build CHAMPION.json:
#   [[{"batch_size": B, "num_kv_indices": N, ...}, {params}], ...]
# A call takes the entry of the nearest batch size, then the nearest token count (both on a log
# scale); its params are merged over PARAMS. Empty: PARAMS for every shape.
DISPATCH = []

LOG2E = 1.0 / math.log(2.0)
COMBINE_TILE = 2048  # elements of the merge kernel's [pieces, heads, columns] tile on a GPU
COUNT_B = 64  # kv_indptr entries scanned per step when a program looks for its piece
CPU_MULTIPROCESSORS = 8  # what a CPU (the Triton interpreter) counts as, for PROGRAMS_PER_SM
LAST_MAX_PIECES = 8  # batch 1 cut into more pieces than this merges in a merge kernel even at COMBINE "last"
# The pieces' normalised outputs in the workspace (PARAMS["PARTIALS"]). bf16 (v1.7, 2026-12-01) saved 0.2-0.9 us per
# call on six "peers" shapes (H200, graph replay) by halving the partials' stores and the merges' loads, but its extra
# rounding before the merge put some elements a whole bf16 step off before the last rounding: on the H100 (2026-12-06)
# the champion failed flashinfer-bench's rule on one element in two of five 47-workload runs (45be562f: 1.0078 for
# 0.9961; 60b29b12: 1.3906 for 1.4063). fp32 (v1.9) removed that tail and cost 3.3% of the time (H100, graph replay;
# 4.5% at batch 64). fp16 has 3 more bits than bf16 at the same bytes: scripts/mla_partials_error.py (600 requests of
# 45be562f's shape) puts bf16 at 14 elements more than a step off before the last rounding, fp16 and fp32 at none past
# 3/4 of a step. fp16 alone overflows past 65504, which a bf16 cache can hold, hence the scale (a power of two: exact)
# per head row, stored beside the lse; finding it is a reduction over the row, which a short piece pays for (v1.10 on
# an H100, graph replay: batch 64 1.3-2.3% faster than fp32, a batch-1 request of 2708 tokens in 85 pieces 8% slower).
_PARTIALS = {"fp16": torch.float16, "fp32": torch.float32}

_MULTIPROCESSORS = {}
_WORKSPACE = {}
_PLANS = {}


@triton.jit
def _bf16_rne(x):
    """fp32 -> bf16 rounded to nearest even through the bits (the interpreter's cast truncates)."""
    b = x.to(tl.uint32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _as_element_of(ptr, x, INTERPRETED: tl.constexpr):
    """x (fp32) in ptr's element type, to be stored there: bf16 rounded to nearest even under the
    interpreter too (_bf16_rne), a plain cast otherwise."""
    if INTERPRETED and ptr.dtype.element_ty == tl.bfloat16:
        y = _bf16_rne(x)
    else:
        y = x.to(ptr.dtype.element_ty)
    return y


@triton.jit
def _scaled(w, part_o_ptr, scale_ptrs, mask, CACHE: tl.constexpr):
    """A piece's merge weight w, times its rows' scales where the partials are fp16 (scale_ptrs: its lse's pointers
    plus NUM_HEADS, the workspace's [slots, 2, heads] layout)."""
    if part_o_ptr.dtype.element_ty == tl.float16:
        w = w * tl.load(scale_ptrs, mask=mask, other=0.0, cache_modifier=CACHE)
    return w


@triton.jit
def _pieces_before(kv_indptr_ptr, batch_size, chunk, pid, COUNT_B: tl.constexpr):
    """(b, first, total): request b holds piece `pid`, its pieces are programs first .. first + n_b - 1,
    and the batch has `total` pieces (request i has max(1, cdiv(len_i, chunk)) pieces)."""
    b = 0
    first = 0
    total = 0
    for i in range(0, batch_size, COUNT_B):
        offs = i + tl.arange(0, COUNT_B)
        valid = offs < batch_size
        starts = tl.load(kv_indptr_ptr + offs, mask=valid, other=0)
        ends = tl.load(kv_indptr_ptr + offs + 1, mask=valid, other=0)
        n = tl.where(valid, tl.maximum((ends - starts + chunk - 1) // chunk, 1), 0)
        cum = total + tl.cumsum(n, axis=0)  # inclusive: pieces up to and including request offs
        before = valid & (cum <= pid)
        b += tl.sum(before.to(tl.int32), axis=0)
        first += tl.sum(tl.where(before, n, 0), axis=0)
        total += tl.sum(n, axis=0)
    return b, first, total


@triton.jit
def _piece(pid, q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
           part_o_ptr, part_lse_ptr, counter_ptr, sync_ptr, qk_scale, batch_size, total_tokens, chunk,
           NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, D_KPE: tl.constexpr, BLOCK_H: tl.constexpr,
           BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, LAST_MERGES: tl.constexpr, COUNT_DONE: tl.constexpr,
           PEERS: tl.constexpr, PEER_MAX: tl.constexpr, COUNT_B: tl.constexpr, INTERPRETED: tl.constexpr):
    """Piece `pid` of the batch (see the module docstring); COUNT_DONE: a piece of a longer request
    adds 1 to its request's counter once its partial result is stored (for the merge programs);
    PEERS: the pieces of a request in at most PEER_MAX pieces merge it together (COMBINE "peers"),
    those of a longer one as in "last". sync_ptr: per request, the merge programs done ("ctas") or
    the generation word ("peers")."""
    if SINGLE:
        zero = pid * 0
        b = zero
        first = zero
        n_pieces = tl.maximum((total_tokens + chunk - 1) // chunk, 1)
        all_pieces = n_pieces
        start = zero
        end = zero + total_tokens
    else:
        b, first, all_pieces = _pieces_before(kv_indptr_ptr, batch_size, chunk, pid, COUNT_B)
        b_safe = tl.minimum(b, batch_size - 1)  # idle programs (pid >= all_pieces) read a real entry
        start = tl.load(kv_indptr_ptr + b_safe)
        end = tl.load(kv_indptr_ptr + b_safe + 1)
        n_pieces = tl.maximum((end - start + chunk - 1) // chunk, 1)
    if pid < all_pieces:
        lo = start + (pid - first) * chunk
        hi = tl.minimum(lo + chunk, end)

        offs_h = tl.arange(0, BLOCK_H)
        mask_h = offs_h < NUM_HEADS
        offs_c = tl.arange(0, D_CKV)
        offs_p = tl.arange(0, D_KPE)
        offs_n = tl.arange(0, BLOCK_N)
        b64 = b.to(tl.int64)

        qn = tl.load(q_nope_ptr + b64 * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV + offs_c[None, :],
                     mask=mask_h[:, None], other=0.0)  # [BLOCK_H, D_CKV]
        qp = tl.load(q_pe_ptr + b64 * (NUM_HEADS * D_KPE) + offs_h[:, None] * D_KPE + offs_p[None, :],
                     mask=mask_h[:, None], other=0.0)  # [BLOCK_H, D_KPE]
        if INTERPRETED:
            qn = qn.to(tl.float32)
            qp = qp.to(tl.float32)

        if PEERS:
            # The request's generation before any of its pieces counts itself done (it moves only
            # once all have): read here, its latency hides behind the loop.
            generation = tl.load(sync_ptr + b, volatile=True)

        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, D_CKV], dtype=tl.float32)
        for n0 in range(lo, hi, BLOCK_N):
            tok = n0 + offs_n
            mask_n = tok < hi
            page = tl.load(kv_indices_ptr + tok, mask=mask_n, other=0).to(tl.int64)
            kc = tl.load(ckv_ptr + page[:, None] * D_CKV + offs_c[None, :], mask=mask_n[:, None],
                         other=0.0)  # [BLOCK_N, D_CKV]
            kp = tl.load(kpe_ptr + page[:, None] * D_KPE + offs_p[None, :], mask=mask_n[:, None],
                         other=0.0)  # [BLOCK_N, D_KPE]
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
        out_offs = b64 * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV + offs_c[None, :]
        if n_pieces == 1:  # the whole request (or an empty one): final result
            o_out = _as_element_of(out_ptr, o, INTERPRETED)
            tl.store(out_ptr + out_offs, o_out, mask=mask_h[:, None])
            tl.store(lse_ptr + b64 * NUM_HEADS + offs_h, piece_lse, mask=mask_h)
        else:  # one piece of a longer request: workspace slot pid (every piece is non-empty)
            slot = pid.to(tl.int64)
            lse_row = part_lse_ptr + slot * (2 * NUM_HEADS) + offs_h  # its lse; NUM_HEADS on, its rows' scales
            if part_o_ptr.dtype.element_ty == tl.float16:
                # fp16 partials (v1.10): each head's row divided by a power of two at or above its largest
                # magnitude, which goes beside its lse; fp16 alone overflows past 65504 (a bf16 cache can hold more)
                amax = tl.max(tl.abs(o), axis=1)
                scale = tl.exp2(tl.ceil(tl.log2(tl.where(amax > 0.0, amax, 1.0))))
                o_part = (o / scale[:, None]).to(tl.float16)
                tl.store(lse_row + NUM_HEADS, scale, mask=mask_h)
            else:
                o_part = _as_element_of(part_o_ptr, o, INTERPRETED)
            tl.store(part_o_ptr + slot * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV + offs_c[None, :], o_part,
                     mask=mask_h[:, None])
            tl.store(lse_row, piece_lse, mask=mask_h)
            if COUNT_DONE:
                # Every thread's stores above come before the count (barrier, then a release by the
                # atomic); a merge program's acquire of the full count orders its reads after them.
                tl.debug_barrier()
                tl.atomic_add(counter_ptr + b, 1, sem="release")
            if LAST_MERGES:
                _merge_if_last(slot, b, first, n_pieces, o, piece_lse, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                               counter_ptr, NUM_HEADS, D_CKV, BLOCK_H, INTERPRETED)
            if PEERS:
                if n_pieces <= PEER_MAX:
                    _merge_with_peers(pid - first, b, first, n_pieces, generation, out_ptr, lse_ptr, part_o_ptr,
                                      part_lse_ptr, counter_ptr, sync_ptr, NUM_HEADS, D_CKV, BLOCK_H, INTERPRETED)
                else:
                    _merge_if_last(slot, b, first, n_pieces, o, piece_lse, out_ptr, lse_ptr, part_o_ptr,
                                   part_lse_ptr, counter_ptr, NUM_HEADS, D_CKV, BLOCK_H, INTERPRETED)


@triton.jit
def _merge_if_last(slot, b, first, n_pieces, o, piece_lse, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, counter_ptr,
                   NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, BLOCK_H: tl.constexpr, INTERPRETED: tl.constexpr):
    """COMBINE "last" for piece `slot` of request b, whose result (o, piece_lse) is stored and still in
    registers: a ticket; the program that draws the last one merges the request's pieces, one after
    another, and resets the counter for the next call."""
    offs_h = tl.arange(0, BLOCK_H)
    mask_h = offs_h < NUM_HEADS
    offs_c = tl.arange(0, D_CKV)
    # Every thread's stores come before the ticket (barrier, then a release by the atomic); the last
    # ticket's acquire orders the reads of the other pieces after it.
    tl.debug_barrier()
    ticket = tl.atomic_add(counter_ptr + b, 1, sem="acq_rel")
    if ticket == n_pieces - 1:
        m = piece_lse
        l_sum = tl.full([BLOCK_H], 1.0, dtype=tl.float32)
        acc = o
        zero64 = tl.zeros([BLOCK_H], dtype=tl.int64)
        for s_idx in range(first, first + n_pieces):
            s64 = zero64 + s_idx  # [BLOCK_H], all s_idx
            keep = mask_h & (s64 != slot)  # the program's own piece is in registers
            lse_row = part_lse_ptr + s64 * (2 * NUM_HEADS) + offs_h
            lse_s = tl.load(lse_row, mask=keep, other=float("-inf"), cache_modifier=".cg")
            o_s = tl.load(part_o_ptr + s64[:, None] * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV
                          + offs_c[None, :], mask=keep[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
            m_new = tl.maximum(m, lse_s)
            m_new = tl.where(mask_h, m_new, 0.0)  # padded heads: keep everything finite
            alpha = tl.exp2(m - m_new)
            w = tl.exp2(lse_s - m_new)
            ws = _scaled(w, part_o_ptr, lse_row + NUM_HEADS, keep, ".cg")
            acc = acc * alpha[:, None] + o_s * ws[:, None]
            l_sum = l_sum * alpha + w
            m = m_new
        _store_merged(b, 0, acc, m, l_sum, offs_h, mask_h, offs_c, out_ptr, lse_ptr, NUM_HEADS, D_CKV, INTERPRETED)
        tl.atomic_xchg(counter_ptr + b, 0)  # ready for the next call


@triton.jit
def _load_acquire(ptr):
    """One int32 loaded with acquire semantics at GPU scope (a poll that is a load, not an atomic)."""
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _merge_with_peers(k, b, first, n_pieces, generation, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, counter_ptr,
                      sync_ptr, NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, BLOCK_H: tl.constexpr,
                      INTERPRETED: tl.constexpr):
    """COMBINE "peers" for piece k (0 .. n_pieces - 1) of request b, whose result is stored: counts
    itself done (acq_rel). The last to do so resets the count, moves the request's generation word
    (sync_ptr[b]) past `generation`, the value every piece read before counting itself (release), and
    merges its share of the request's column blocks at once; the others wait for the word to move
    (acquire loads), then merge theirs (all the pieces, read past L1). So the last piece goes from its
    count straight to its merge, nobody polls with atomics, and no piece counts itself out after
    merging (an earlier version did both: two more round trips to L2 at the end of the kernel).
    The wait needs every piece of the request running or finished: they are consecutive programs and
    blocks start in grid order (observed, as "ctas" relies on), so at most n_pieces <= PEER_MAX (the
    multiprocessors: one block each always fits) must run at once. Under the interpreter, whose
    programs run one after another, the last piece merges every column block instead."""
    tl.debug_barrier()  # every thread's stores come before the count (released by the atomic)
    arrived = tl.atomic_add(counter_ptr + b, 1, sem="acq_rel")
    if arrived == n_pieces - 1:  # all pieces are stored (acquired above): reset for the next call
        tl.atomic_xchg(counter_ptr + b, 0, sem="relaxed")
        tl.atomic_xchg(sync_ptr + b, generation + 1, sem="release")
        if INTERPRETED:
            _merge_share(0, 1, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                         BLOCK_H, INTERPRETED)
    else:
        if not INTERPRETED:
            now = _load_acquire(sync_ptr + b)
            while now == generation:
                now = _load_acquire(sync_ptr + b)
    if not INTERPRETED:  # one copy of the merge code for both branches (compile time)
        _merge_share(k, n_pieces, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                     BLOCK_H, INTERPRETED)


@triton.jit
def _merge_share(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS: tl.constexpr,
                 D_CKV: tl.constexpr, BLOCK_H: tl.constexpr, INTERPRETED: tl.constexpr):
    """Column blocks k, k + stride, .. of request b merged from its n_pieces pieces, with the tile that
    fits the request's real piece count: S pieces x D_CKV / S columns (S = 2, 4, 8, 16), so a request
    in n <= 16 pieces has n or more column blocks and each piece merges about one block in one step
    of S slices. (A tile sized from the batch's mean count cost 8 blocks x 16 steps per piece on the
    2-piece requests of a batch whose longest request has 35 pieces.)"""
    if n_pieces <= 2:
        _merge_blocks(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, 2, INTERPRETED)
    elif n_pieces <= 4:
        _merge_blocks(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, 4, INTERPRETED)
    elif n_pieces <= 8:
        _merge_blocks(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, 8, INTERPRETED)
    else:
        _merge_blocks(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, 16, INTERPRETED)


@triton.jit
def _merge_blocks(k, stride, b, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS: tl.constexpr,
                  D_CKV: tl.constexpr, BLOCK_H: tl.constexpr, S: tl.constexpr, INTERPRETED: tl.constexpr):
    """Column blocks k, k + stride, .. < S of request b, each D_CKV / S columns wide, S slices a step."""
    for d_blk in range(k, S, stride):
        _merge_pieces_unrolled(b, d_blk, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS,
                               D_CKV, BLOCK_H, S, D_CKV // S, ".cg", INTERPRETED)


@triton.jit
def _request_pieces(kv_indptr_ptr, b, total_tokens, chunk, SINGLE: tl.constexpr, COUNT_B: tl.constexpr):
    """(first, n_pieces): request b's pieces are workspace slots first .. first + n_pieces - 1."""
    if SINGLE:
        first = 0
        n_pieces = tl.maximum((total_tokens + chunk - 1) // chunk, 1)
    else:
        # Pieces of the requests before b, the same count as the piece kernel's.
        first = 0
        for i in range(0, b, COUNT_B):
            offs = i + tl.arange(0, COUNT_B)
            valid = offs < b
            starts = tl.load(kv_indptr_ptr + offs, mask=valid, other=0)
            ends = tl.load(kv_indptr_ptr + offs + 1, mask=valid, other=0)
            first += tl.sum(tl.where(valid, tl.maximum((ends - starts + chunk - 1) // chunk, 1), 0), axis=0)
        start = tl.load(kv_indptr_ptr + b)
        end = tl.load(kv_indptr_ptr + b + 1)
        n_pieces = tl.maximum((end - start + chunk - 1) // chunk, 1)
    return first, n_pieces


@triton.jit
def _store_merged(b, d_blk, acc, m, l_sum, offs_h, mask_h, offs_d, out_ptr, lse_ptr, NUM_HEADS: tl.constexpr,
                  D_CKV: tl.constexpr, INTERPRETED: tl.constexpr):
    """Request b's merged columns offs_d (acc / l_sum, in the output's dtype) and, at d_blk 0, its lse."""
    l_sum = tl.where(mask_h, l_sum, 1.0)  # >= 1 for real heads
    o_out = _as_element_of(out_ptr, acc / l_sum[:, None], INTERPRETED)
    b64 = b.to(tl.int64)
    tl.store(out_ptr + b64 * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV + offs_d[None, :], o_out,
             mask=mask_h[:, None])
    if d_blk == 0:
        tl.store(lse_ptr + b64 * NUM_HEADS + offs_h, m + tl.log2(l_sum), mask=mask_h)


@triton.jit
def _merge_pieces(b, d_blk, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                  NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, BLOCK_H: tl.constexpr,
                  COMBINE_S: tl.constexpr, COMBINE_D: tl.constexpr, CACHE: tl.constexpr, INTERPRETED: tl.constexpr):
    """Columns d_blk * COMBINE_D .. of request b's output (and its lse, at d_blk 0), merged from its
    n_pieces > 1 pieces:  lse = M + log2(sum_s 2^(lse_s - M)),  output = sum_s 2^(lse_s - lse) * out_s.
    CACHE: the pieces' loads' cache modifier (".cg", past L1, where other programs of the same launch
    wrote them)."""
    last = first + n_pieces - 1  # inclusive
    offs_h = tl.arange(0, BLOCK_H)
    mask_h = offs_h < NUM_HEADS
    # One pass, online over tiles of COMBINE_S pieces: each step loads the tile's lse and outputs
    # together (one memory round trip; two passes cost two on the critical path after the pieces).
    offs_s = tl.arange(0, COMBINE_S)
    offs_d = d_blk * COMBINE_D + tl.arange(0, COMBINE_D)
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, COMBINE_D], dtype=tl.float32)
    for s0 in range(first, last + 1, COMBINE_S):
        slot = (s0 + offs_s).to(tl.int64)
        valid = (slot <= last)[:, None] & mask_h[None, :]
        lse_rows = part_lse_ptr + slot[:, None] * (2 * NUM_HEADS) + offs_h[None, :]
        piece_lse = tl.load(lse_rows, mask=valid, other=float("-inf"), cache_modifier=CACHE)  # [S, H]
        o = tl.load(part_o_ptr + slot[:, None, None] * (NUM_HEADS * D_CKV) + offs_h[None, :, None] * D_CKV
                    + offs_d[None, None, :], mask=valid[:, :, None], other=0.0,
                    cache_modifier=CACHE).to(tl.float32)  # [S, H, D]
        m_new = tl.maximum(m, tl.max(piece_lse, axis=0))
        m_new = tl.where(mask_h, m_new, 0.0)  # finite for real heads (every step has a piece)
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(piece_lse - m_new[None, :])  # [S, H], 0 where masked
        l_sum = l_sum * alpha + tl.sum(w, axis=0)
        ws = _scaled(w, part_o_ptr, lse_rows + NUM_HEADS, valid, CACHE)
        acc = acc * alpha[:, None] + tl.sum(ws[:, :, None] * o, axis=0)
        m = m_new
    _store_merged(b, d_blk, acc, m, l_sum, offs_h, mask_h, offs_d, out_ptr, lse_ptr, NUM_HEADS, D_CKV, INTERPRETED)


@triton.jit
def _merge_pieces_unrolled(b, d_blk, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                           NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, BLOCK_H: tl.constexpr,
                           COMBINE_S: tl.constexpr, COMBINE_D: tl.constexpr, CACHE: tl.constexpr,
                           INTERPRETED: tl.constexpr):
    """As _merge_pieces, for the pieces' programs of COMBINE "peers" (one warp per scheduler, 222
    registers): each piece's [heads, columns] slice and lse are folded in one after another (online),
    unrolled COMBINE_S pieces at a time, so every load of a step is issued before the first is used
    and no value crosses threads. _merge_pieces' [pieces, heads, columns] tile reduces over threads
    (~1900 instructions per step of 8192 elements, mostly one dependent chain): inside the pieces'
    programs a step took ~5 us on the H200 (2026-12-01). In the merge kernel, with many programs per
    SM, the 3-D tile was as fast or faster (a long chain of unrolled steps is not)."""
    last = first + n_pieces - 1  # inclusive
    offs_h = tl.arange(0, BLOCK_H)
    mask_h = offs_h < NUM_HEADS
    offs_d = d_blk * COMBINE_D + tl.arange(0, COMBINE_D)
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, COMBINE_D], dtype=tl.float32)
    zero64 = tl.zeros([BLOCK_H], dtype=tl.int64)
    for s0 in range(first, last + 1, COMBINE_S):
        # The step's maximum first (a chain of maxima), then every slice's weight independently: the
        # dependent chain per slice is one FMA, not a max, an exp2 and an FMA (one warp per scheduler
        # here, so a chain's latency is not hidden).
        m_new = m
        for i in tl.static_range(COMBINE_S):
            slot = zero64 + (s0 + i)  # [BLOCK_H], all the slot's number
            valid = mask_h & (slot <= last)
            lse_s = tl.load(part_lse_ptr + slot * (2 * NUM_HEADS) + offs_h, mask=valid, other=float("-inf"),
                            cache_modifier=CACHE)
            m_new = tl.maximum(m_new, lse_s)
        m_new = tl.where(mask_h, m_new, 0.0)  # finite for real heads (the first slot is a piece)
        alpha = tl.exp2(m - m_new)
        l_sum = l_sum * alpha
        acc = acc * alpha[:, None]
        for i in tl.static_range(COMBINE_S):
            slot = zero64 + (s0 + i)
            valid = mask_h & (slot <= last)
            lse_row = part_lse_ptr + slot * (2 * NUM_HEADS) + offs_h
            lse_s = tl.load(lse_row, mask=valid, other=float("-inf"), cache_modifier=CACHE)
            o_s = tl.load(part_o_ptr + slot[:, None] * (NUM_HEADS * D_CKV) + offs_h[:, None] * D_CKV
                          + offs_d[None, :], mask=valid[:, None], other=0.0,
                          cache_modifier=CACHE).to(tl.float32)
            w = tl.exp2(lse_s - m_new)  # 0 past the last piece
            l_sum += w
            acc += o_s * _scaled(w, part_o_ptr, lse_row + NUM_HEADS, valid, CACHE)[:, None]
        m = m_new
    _store_merged(b, d_blk, acc, m, l_sum, offs_h, mask_h, offs_d, out_ptr, lse_ptr, NUM_HEADS, D_CKV, INTERPRETED)


@triton.jit
def _merge_program(idx, kv_indptr_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, counter_ptr, merge_done_ptr,
                   total_tokens, chunk, NUM_HEADS: tl.constexpr, D_CKV: tl.constexpr, BLOCK_H: tl.constexpr,
                   SINGLE: tl.constexpr, COMBINE_S: tl.constexpr, COMBINE_D: tl.constexpr,
                   COUNT_B: tl.constexpr, INTERPRETED: tl.constexpr):
    """Merge program idx of COMBINE "ctas" (request idx // columns, column block idx % columns): waits
    until every piece of its request has counted itself done, merges, and the request's last merge
    program to finish resets both counters for the next call. The merge programs come after every
    piece program in the grid; blocks start in grid order (observed, not guaranteed: see the module
    docstring), so when one spins, every piece program has started or finished."""
    n_col: tl.constexpr = D_CKV // COMBINE_D
    b = idx // n_col
    d_blk = idx % n_col
    first, n_pieces = _request_pieces(kv_indptr_ptr, b, total_tokens, chunk, SINGLE, COUNT_B)
    if n_pieces > 1:
        done = tl.atomic_add(counter_ptr + b, 0, sem="acquire")
        while done < n_pieces:
            done = tl.atomic_add(counter_ptr + b, 0, sem="acquire")
        _merge_pieces(b, d_blk, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, COMBINE_S, COMBINE_D, ".cg", INTERPRETED)
        finished = tl.atomic_add(merge_done_ptr + b, 1, sem="acq_rel")
        if finished == n_col - 1:
            tl.atomic_xchg(counter_ptr + b, 0)
            tl.atomic_xchg(merge_done_ptr + b, 0)


# Integer arguments that change from call to call are not specialised (== 1, multiple of 16): one
# compiled kernel serves every shape, which the direct launches rely on.
@triton.jit(do_not_specialize=["batch_size", "total_tokens", "chunk", "n_programs"])
def _fd_piece_kernel(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
    part_o_ptr, part_lse_ptr, counter_ptr,
    sync_ptr,  # per request: merge programs done ("ctas"), generation word ("peers")
    qk_scale,  # sm_scale * log2(e)
    batch_size, total_tokens, chunk, n_programs,
    NUM_HEADS: tl.constexpr,  # tensors are contiguous: q_nope [B, H, D_CKV], q_pe [B, H, D_KPE],
    D_CKV: tl.constexpr,  # ckv [pages, 1, D_CKV], kpe [pages, 1, D_KPE], output [B, H, D_CKV],
    D_KPE: tl.constexpr,  # lse [B, H]; part_o [slots, H, D_CKV], part_lse [slots, H]
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE: tl.constexpr,  # batch_size == 1: the request is [0, total_tokens)
    LAST_MERGES: tl.constexpr,  # COMBINE == "last"
    COUNT_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
    MERGE_PROGRAMS: tl.constexpr,  # COMBINE == "ctas": programs n_programs .. merge the pieces
    PDL: tl.constexpr,  # COMBINE == "pdl": the merge kernel may launch once every program has started
    PEERS: tl.constexpr,  # COMBINE == "peers": a request's pieces merge it together
    PEER_MAX: tl.constexpr,  # at "peers", requests in more pieces are merged as at "last" (the multiprocessors)
    COMBINE_S: tl.constexpr,  # the merge programs' tiles (as the merge kernel's)
    COMBINE_D: tl.constexpr,
):
    pid = tl.program_id(0)
    if PDL:
        # Lets the merge kernel (a programmatic dependent launch) be scheduled once every piece program
        # has started, so its programs read kv_indptr while the pieces run; it waits (griddepcontrol.wait)
        # for this kernel to finish before it reads the pieces.
        gdc_launch_dependents()
    if MERGE_PROGRAMS:
        if pid >= n_programs:
            _merge_program(pid - n_programs, kv_indptr_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                           counter_ptr, sync_ptr, total_tokens, chunk, NUM_HEADS, D_CKV, BLOCK_H,
                           SINGLE, COMBINE_S, COMBINE_D, COUNT_B, INTERPRETED)
        else:
            _piece(pid, q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
                   part_o_ptr, part_lse_ptr, counter_ptr, sync_ptr, qk_scale, batch_size, total_tokens, chunk,
                   NUM_HEADS, D_CKV, D_KPE, BLOCK_H, BLOCK_N, SINGLE, LAST_MERGES, True, PEERS, PEER_MAX, COUNT_B,
                   INTERPRETED)
    else:
        _piece(pid, q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
               part_o_ptr, part_lse_ptr, counter_ptr, sync_ptr, qk_scale, batch_size, total_tokens, chunk,
               NUM_HEADS, D_CKV, D_KPE, BLOCK_H, BLOCK_N, SINGLE, LAST_MERGES, False, PEERS, PEER_MAX, COUNT_B,
               INTERPRETED)


@triton.jit(do_not_specialize=["batch_size", "total_tokens", "chunk"])
def _fd_merge_kernel(
    kv_indptr_ptr, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
    batch_size, total_tokens, chunk,
    NUM_HEADS: tl.constexpr,
    D_CKV: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SINGLE: tl.constexpr,
    COMBINE_S: tl.constexpr,
    COMBINE_D: tl.constexpr,
    COUNT_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
    PDL: tl.constexpr,  # launched as a programmatic dependent of the piece kernel (COMBINE "pdl")
):
    b = tl.program_id(0)
    d_blk = tl.program_id(1)
    # kv_indptr is an input (the piece kernel does not write it): read before the wait
    first, n_pieces = _request_pieces(kv_indptr_ptr, b, total_tokens, chunk, SINGLE, COUNT_B)
    if PDL:
        gdc_wait()  # the piece kernel has finished and its stores are visible
    if n_pieces > 1:  # a request cut into pieces: merge them
        _merge_pieces(b, d_blk, first, n_pieces, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, NUM_HEADS, D_CKV,
                      BLOCK_H, COMBINE_S, COMBINE_D, "", INTERPRETED)


# Whether triton.jit gave interpreted functions (TRITON_INTERPRET=1 when triton was imported).
_INTERPRETER = type(_fd_piece_kernel).__name__ == "InterpretedFunction"


def _multiprocessors(device):
    if device.type != "cuda":
        return CPU_MULTIPROCESSORS
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _MULTIPROCESSORS:
        _MULTIPROCESSORS[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _MULTIPROCESSORS[key]


def _workspace(device, slots, batch_size, num_heads, d_ckv, dtype):
    """(part_o [slots, heads, d_ckv] in `dtype`, part_lse [slots, 2, heads] fp32 (each piece's lse, then its
    rows' scales where the partials are fp16), counters [batch] int32 zeros,
    merge_done [batch] int32 zeros, generations [batch] int32), views of cached buffers. Sizes are
    rounded up to powers of two, so a handful of buffers serve every workload; none is ever freed or
    resized, so a CUDA graph that captured one keeps valid memory. The counters and merge_done are zero
    between calls: the program that takes a request's last ticket ("last"), its last merge program
    ("ctas") or its last piece ("peers") resets them. A generation word only moves on ("peers")."""
    cap = triton.next_power_of_2(max(slots, 64))
    cap_b = triton.next_power_of_2(max(batch_size, 64))
    key = (str(device), cap, cap_b, num_heads, d_ckv, dtype)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.empty((cap, num_heads, d_ckv), dtype=dtype, device=device),
                           torch.empty((cap, 2, num_heads), dtype=torch.float32, device=device),
                           torch.zeros((3, cap_b), dtype=torch.int32, device=device))
    part_o, part_lse, counters = _WORKSPACE[key]
    return (part_o[:slots], part_lse[:slots], counters[0, :batch_size], counters[1, :batch_size],
            counters[2, :batch_size])


def _combine_tile(pieces_per_request, block_h, d_ckv, interpreted):
    """(pieces, columns) of the merge kernel's tile: a request cut into many pieces (a long one in a
    small batch) gets many pieces per step and few columns per program (more programs). Under the
    interpreter: all columns (few programs run fastest there). (Offline, Triton 3.6, sm_90: a tile of
    2048 elements takes 64-71 registers; 4096 took 161-204, a quarter of the programs per SM.)"""
    if interpreted:
        return 16, d_ckv
    pieces = min(32, max(4, triton.next_power_of_2(pieces_per_request)))
    columns = min(d_ckv, max(8, COMBINE_TILE // (block_h * pieces)))
    return pieces, columns


def _merge_programs_tile(programs, batch_size, pieces_per_request, block_h, d_ckv, interpreted):
    """(pieces, columns) of the merge programs' tile at COMBINE "ctas": they run in the pieces' launch,
    with its registers and shared memory, so about as many as there are piece programs (batch x
    column blocks), each with a tile of at most 4096 fp32 elements. Under the interpreter: as
    _combine_tile."""
    if interpreted:
        return _combine_tile(pieces_per_request, block_h, d_ckv, interpreted)
    column_blocks = min(d_ckv // 8, max(triton.next_power_of_2(max(1, programs // batch_size)),
                                        triton.cdiv(d_ckv * block_h, 4096)))
    columns = d_ckv // column_blocks
    pieces = max(1, min(32, triton.next_power_of_2(pieces_per_request), 4096 // (block_h * columns)))
    return pieces, columns


def plan(batch_size, num_kv_indices, multiprocessors, params=None):
    """(chunk, programs) for a batch: pieces of at most `chunk` tokens, `programs` >= the number of pieces."""
    p = PARAMS if params is None else params
    block_n = p["BLOCK_N"]
    target = max(1, p["PROGRAMS_PER_SM"] * multiprocessors)
    if batch_size > 1:  # a request's last piece is half a chunk on average: aim at `target` pieces in all
        target = max(target - batch_size // 2, triton.cdiv(target, 2))
    chunk = max(p["MIN_CHUNK_BLOCKS"] * block_n, triton.cdiv(num_kv_indices, target), 1)
    chunk = triton.cdiv(chunk, block_n) * block_n
    if batch_size == 1:
        return chunk, max(1, triton.cdiv(num_kv_indices, chunk))
    return chunk, triton.cdiv(num_kv_indices, chunk) + batch_size


def params_for(batch_size, num_kv_indices, dispatch=None):
    """The point that a call of this shape uses: the DISPATCH entry of the nearest batch size, then the
    nearest token count (log scale), merged over PARAMS; PARAMS when DISPATCH is empty."""
    table = DISPATCH if dispatch is None else dispatch
    if not table:
        return dict(PARAMS)

    def distance(entry):
        axes = entry[0]
        return (abs(math.log(max(axes.get("batch_size", 1), 1)) - math.log(max(batch_size, 1))),
                abs(math.log(max(axes.get("num_kv_indices", 1), 1)) - math.log(max(num_kv_indices, 1))))

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

    def __call__(self, args, fast_ok, fast_args=None):
        """fast_args: args with every tensor replaced by its data pointer (an int), for direct launches:
        the launcher then neither calls data_ptr() nor asks the driver about each pointer
        (cuPointerGetAttribute), which it does for every tensor argument."""
        c = self.compiled
        if c is not None and fast_ok:
            direct = args if fast_args is None else fast_args
            if self.fast is True:
                c.run(self.grid[0], self.grid[1], self.grid[2], _current_stream(self.device), c.function,
                      c.packed_metadata, None, None, None, *direct)
                return
            try:  # the first direct launch: a Triton whose launcher takes other arguments raises here
                c.run(self.grid[0], self.grid[1], self.grid[2], _current_stream(self.device), c.function,
                      c.packed_metadata, None, None, None, *direct)
                self.fast = True
                return
            except (TypeError, ValueError, IndexError, SystemError, AttributeError):
                self.compiled, self.fast = None, False
        compiled = self.fn[self.grid](*args, **self.options)
        if self.fast is not False and fast_ok and compiled is not None and hasattr(compiled, "run"):
            self.compiled = compiled
            self.device = torch.cuda.current_device()


def _current_stream(device_index):
    return torch._C._cuda_getCurrentRawStream(device_index)


class _Plan:
    __slots__ = ("chunk", "programs", "piece", "merge", "part_o", "part_lse", "counters", "merge_done",
                 "generations", "sync", "single", "workspace_ptrs")


def _make_plan(device, batch_size, num_heads, d_ckv, d_kpe, total, interpreted):
    p = params_for(batch_size, total)
    sms = _multiprocessors(device)
    chunk, programs = plan(batch_size, total, sms, p)
    pl = _Plan()
    pl.chunk, pl.programs, pl.single = chunk, programs, batch_size == 1
    pl.part_o, pl.part_lse, pl.counters, pl.merge_done, pl.generations = _workspace(device, programs, batch_size,
                                                                                     num_heads, d_ckv,
                                                                                     _PARTIALS[p["PARTIALS"]])
    block_h = max(16, triton.next_power_of_2(num_heads))
    # One program reads all pieces of its request in the last-piece merge (~1 us per piece): a single
    # request in many pieces is merged by the merge kernel instead, whose programs share the work.
    last = p["COMBINE"] == "last" and not (pl.single and triton.cdiv(total, chunk) > LAST_MAX_PIECES)
    several = total > chunk  # some request has several pieces unless the chunk holds the whole batch
    ctas = p["COMBINE"] == "ctas" and several
    # "pdl": the merge kernel as a programmatic dependent launch (griddepcontrol: none under the interpreter)
    pdl = p["COMBINE"] == "pdl" and several and not interpreted
    # "peers": no merge launch; a request in more pieces than PEER_MAX (the multiprocessors: all of
    # them can run at once) merges as at "last"
    peers = p["COMBINE"] == "peers" and several
    pl.sync = pl.generations if peers else pl.merge_done  # the kernel's sync_ptr
    # the workspace is never freed or moved (_workspace), so its pointers hold for every call
    pl.workspace_ptrs = tuple(t.data_ptr() for t in (pl.part_o, pl.part_lse, pl.counters, pl.sync))
    # pieces of a request: all of them for batch 1, about the average otherwise
    typical = triton.cdiv(total, chunk) if pl.single else triton.cdiv(programs, batch_size) + 1
    if ctas:
        combine_s, combine_d = _merge_programs_tile(programs, batch_size, typical, block_h, d_ckv, interpreted)
    else:
        combine_s, combine_d = _combine_tile(typical, block_h, d_ckv, interpreted)
    fast = bool(p["FAST_LAUNCH"]) and not interpreted
    constexprs = dict(NUM_HEADS=num_heads, D_CKV=d_ckv, D_KPE=d_kpe, BLOCK_H=block_h, BLOCK_N=p["BLOCK_N"],
                      SINGLE=pl.single, LAST_MERGES=last, COUNT_B=COUNT_B, INTERPRETED=interpreted,
                      MERGE_PROGRAMS=ctas, PDL=pdl, PEERS=peers, PEER_MAX=sms if peers else 0,
                      # the tile only where used (one compiled kernel for the other modes)
                      COMBINE_S=combine_s if ctas else 1, COMBINE_D=combine_d if ctas else d_ckv)
    # "ctas": the merge programs (batch x column blocks, the merge kernel's grid) follow the pieces
    grid = programs + (batch_size * (d_ckv // combine_d) if ctas else 0)
    options = {"num_warps": p["num_warps"], "num_stages": p["num_stages"]}
    if p.get("maxnreg") and not interpreted:
        options["maxnreg"] = p["maxnreg"]
    pl.piece = (_Launch(_fd_piece_kernel, (grid, 1, 1), options, fast), constexprs)
    pl.merge = None
    if not last and not ctas and not peers and several:
        merge_constexprs = dict(NUM_HEADS=num_heads, D_CKV=d_ckv, BLOCK_H=block_h, SINGLE=pl.single,
                                COMBINE_S=combine_s, COMBINE_D=combine_d, COUNT_B=COUNT_B,
                                INTERPRETED=interpreted, PDL=pdl)
        merge_options = {"num_warps": 4, "launch_pdl": True} if pdl else {"num_warps": 4}
        pl.merge = (_Launch(_fd_merge_kernel, (batch_size, d_ckv // combine_d, 1), merge_options, fast),
                    merge_constexprs)
    return pl


def _pointers(tensors):
    """(contiguous, direct, data pointers) of the call's tensors. direct: every pointer 16-byte aligned
    (what the compiled kernel was specialised for) and every tensor on a GPU (the direct launches pass
    the pointers as ints, so Triton's check that each is device memory does not run)."""
    ptrs = []
    bits = 0
    on_gpu = True
    for t in tensors:
        if not t.is_contiguous():
            return False, False, None
        ptr = t.data_ptr()
        ptrs.append(ptr)
        bits |= ptr
        on_gpu = on_gpu and t.is_cuda
    return True, on_gpu and (bits & 15) == 0, ptrs


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch_size, num_heads, d_ckv = q_nope.shape
    if batch_size == 0:
        return None
    total = kv_indices.shape[0]
    device = q_nope.device
    key = (device, batch_size, num_heads, d_ckv, total)
    pl = _PLANS.get(key)
    if pl is None:
        d_kpe = q_pe.shape[-1]
        assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
        assert d_ckv == triton.next_power_of_2(d_ckv) and d_kpe == triton.next_power_of_2(d_kpe), "power-of-2 dims"
        interpreted = _INTERPRETER or device.type == "cpu"  # CPU tensors run only under the interpreter
        pl = _PLANS[key] = _make_plan(device, batch_size, num_heads, d_ckv, d_kpe, total, interpreted)
    contiguous, direct, ptrs = _pointers((q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse))
    if not contiguous:  # the kernels assume contiguous tensors: work on contiguous copies
        out_c = output.contiguous()
        lse_c = lse.contiguous()
        run(q_nope.contiguous(), q_pe.contiguous(), ckv_cache.contiguous(), kpe_cache.contiguous(),
            kv_indptr.contiguous(), kv_indices.contiguous(), sm_scale, out_c, lse_c)
        output.copy_(out_c)
        lse.copy_(lse_c)
        return None
    launch, c = pl.piece
    scalars = (float(sm_scale) * LOG2E, batch_size, total, pl.chunk, pl.programs,
               c["NUM_HEADS"], c["D_CKV"], c["D_KPE"], c["BLOCK_H"], c["BLOCK_N"], c["SINGLE"], c["LAST_MERGES"],
               c["COUNT_B"], c["INTERPRETED"], c["MERGE_PROGRAMS"], c["PDL"], c["PEERS"], c["PEER_MAX"],
               c["COMBINE_S"], c["COMBINE_D"])
    launch((q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse, pl.part_o, pl.part_lse,
            pl.counters, pl.sync, *scalars), direct, (*ptrs, *pl.workspace_ptrs, *scalars) if direct else None)
    if pl.merge is not None:
        launch, c = pl.merge
        scalars = (batch_size, total, pl.chunk, c["NUM_HEADS"], c["D_CKV"], c["BLOCK_H"], c["SINGLE"],
                   c["COMBINE_S"], c["COMBINE_D"], c["COUNT_B"], c["INTERPRETED"], c["PDL"])
        launch((kv_indptr, output, lse, pl.part_o, pl.part_lse, *scalars), direct,
               (ptrs[4], ptrs[6], ptrs[7], *pl.workspace_ptrs[:2], *scalars) if direct else None)
    return None
