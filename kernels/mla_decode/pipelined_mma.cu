// MLA paged decode (16 heads, ckv 512, kpe 64, page size 1) in CUDA C++ with a cp.async ring and mma.sync
// (bf16 in, fp32 accumulate), the torch binding: a FlashInfer-Trace solution's source (language "cuda", entry
// "pipelined_mma.cu::run"), called inputs then outputs in the definition's order. Made for the large,
// memory-bound workloads (batch 16 and 64, thousands to ~75k KV rows); see DESIGN.md sections 6.8-6.10.
//
// Work split: the batch's KV tokens in kv_indices' order are one stream, cut into ranges of CH tokens, one CTA
// each: CH = max(MIN_CHUNK, cdiv(num_kv_indices, multiprocessors)), grid = cdiv(num_kv_indices, CH) CTAs, both from
// the shapes alone (no device-to-host copy, so the call can be captured in a CUDA graph). A CTA's range is cut at
// request boundaries into segments (mostly one or two), run one after another; segment (CTA c, request b) owns
// workspace slot c + b. This differs from flashdecode_triton.py's pieces per request (a grid that is an upper
// bound on max(1, cdiv(len_b, CHUNK)) summed over requests): with one CTA resident per multiprocessor (shared
// memory), a piece count a few over the multiprocessors would cost a second wave of whole pieces (random lengths
// summing to the batch-64 shapes gave 127-136 pieces for 132 SMs), while equal token ranges put every CTA in one
// wave with the same number of tokens (a segment boundary costs a pipeline refill and a Q load, not a wave).
// A CTA finds its first request with one round of parallel loads of kv_indptr (the b with
// indptr[b] < c CH <= indptr[b + 1]), then walks the requests. scripts/mla_pipelined_mma_layout_check.py checks
// this arithmetic (and the fragment layouts below) on the CPU.
//
// A CTA (8 warps) takes all 16 heads of a segment: the 16 heads are exactly the M = 16 of mma.m16n8k16. Its
// loop runs over tiles of TILE = 32 KV tokens: each tile's 32 rows (ckv and kpe side by side, 1152 B, padded to
// 1168 B so that ldmatrix's 8 rows fall in 8 different 16-byte bank groups) are gathered with 16-byte
// cp.async.cg (L2 only) into a ring of STAGES shared-memory buffers, STAGES - 1 tiles ahead of the one being
// computed; each thread copies one row's 9 chunks, so it needs one page number per tile, loaded one iteration
// before its copies are issued. Per tile:
//   S = Q K^T (16 x 32): warp w takes tokens 8*(w%4)..+8 over half of the 576 dims (w/4); the halves are summed
//       through shared memory;
//   online softmax in base 2 (logit * sm_scale * log2 e), 16 threads per head; P rounded to bf16 into shared
//       memory (as flash attention does), the per-head rescale factor alpha beside it;
//   O = alpha * O + P V: O (16 x 512 fp32) lives in registers, warp w owning columns 64w..64w+63 (32 fp32 a
//       thread, the mma accumulator layout: c0,c1 in row lane/4, c2,c3 in row lane/4 + 8, columns 2(lane%4)+{0,1}
//       of each n8 tile); V's fragments come from the same rows through ldmatrix.trans.
// Three CTA barriers a tile (tile landed / S halves written / P written).
// End of a segment: a request in one segment writes its bf16 output and lse at once. Otherwise the segment writes
// its normalised output (fp32) and base-2 lse to its workspace slot, fences, and draws a ticket from its
// request's counter; the CTA that draws the last ticket merges the request's segments
// (lse = M + log2 sum 2^(lse_s - M), out = sum 2^(lse_s - lse) o_s, the others' partials read from L2 with
// __ldcg), writes output and lse, and resets the counter to 0 for the next call (counters are zeroed once, when
// the workspace is allocated). fp32 partials: DESIGN.md 6.9 shows bf16 partials fail flashinfer-bench's rule.
//
// Limits: one CTA a multiprocessor (the ring takes ~171 KB at 4 stages), so a segment's prologue (indptr, page
// numbers, Q, first tiles: a chain of dependent loads) and its merge are not overlapped by another CTA's loads;
// the pipeline is drained and refilled at each segment boundary; producer and consumer are the same warps (no
// warp specialisation), so a tile's copies are issued only after the CTA barrier that frees its buffer. The merge
// of a request is done by one CTA (the last to finish), so a request cut into many segments (batch 1: up to 43)
// has a long merge on its critical path. Small workloads (batch 1, a few hundred tokens) are not its aim.
// Never run on a GPU at the time of writing: see the commit log.
#ifndef MLA_NO_TORCH
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace {

using bf16 = __nv_bfloat16;

constexpr int H = 16, DC = 512, DP = 64, D = DC + DP;
constexpr int TILE = 32;                 // KV tokens per tile
#ifndef MLA_STAGES
#define MLA_STAGES 4
#endif
constexpr int STAGES = MLA_STAGES;       // ring buffers: STAGES - 1 tiles in flight while one is computed
constexpr int WARPS = 8, THREADS = WARPS * 32;
constexpr int LDK = D + 8;               // bf16 per smem row: 1168 B, = 16 (mod 128) -> conflict-free ldmatrix
constexpr int ROW_BYTES = LDK * 2;
constexpr int CHUNKS = D / 8;            // 16-byte chunks per row: 64 of ckv, 8 of kpe
constexpr int THREADS_PER_ROW = THREADS / TILE;             // 8
constexpr int CHUNKS_PER_THREAD = CHUNKS / THREADS_PER_ROW;  // 9
constexpr int LDS = TILE + 8;            // floats per row of the S halves
constexpr int LDP = TILE + 8;            // bf16 per row of P: 80 B, 8 rows in 8 bank groups
constexpr int KHALF_STEPS = D / 16 / 2;  // 18 k-steps of 16 per half of the dims
constexpr int COLS_PER_WARP = DC / WARPS;  // 64
constexpr int NT = COLS_PER_WARP / 8;      // n8 tiles of O per warp: 8
constexpr float NEG_INF = -INFINITY;
static_assert(THREADS % TILE == 0 && CHUNKS % THREADS_PER_ROW == 0, "a row's chunks split evenly");
static_assert(CHUNKS_PER_THREAD == 9 && DC / 8 == 64, "chunk c = lane8 + 8 i: i < 8 is ckv, i = 8 kpe");

// Shared memory, in bytes from the dynamic base (all offsets multiples of 16).
constexpr int SM_KV = 0;
constexpr int SM_Q = SM_KV + STAGES * TILE * ROW_BYTES;
constexpr int SM_S = SM_Q + H * ROW_BYTES;
constexpr int SM_P = SM_S + 2 * H * LDS * 4;
constexpr int SM_ALPHA = SM_P + H * LDP * 2;
constexpr int SM_M = SM_ALPHA + H * 4;
constexpr int SM_L = SM_M + H * 4;
constexpr int SM_INT = SM_L + H * 4;  // scan scratch: warp sums [8], then b, first, n, ticket
constexpr int SMEM_BYTES = SM_INT + (WARPS + 4) * 4;
static_assert(SMEM_BYTES <= 227 * 1024, "fits one CTA a multiprocessor");

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared through L2 only; src_bytes 0 writes zeros (rows past the segment's end).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d = a b + d, a 16x16 (row), b 16x8 (col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Issues the copies of one KV row's 9 chunks (this thread's share of a tile): chunk lane8 + 8 i of the row,
// i < 8 from ckv (1024 B), i = 8 from kpe (128 B). page < 0: zeros (a row past the segment's end).
__device__ __forceinline__ void issue_row(uint32_t dst_row, const bf16* __restrict__ ckv, const bf16* __restrict__ kpe,
                                          int page, int lane8) {
  const int bytes = page >= 0 ? 16 : 0;
  const size_t p = page >= 0 ? static_cast<size_t>(page) : 0;  // a valid address even when nothing is read
  const bf16* c = ckv + p * DC + lane8 * 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) cp_async16(dst_row + (lane8 + 8 * i) * 16, c + i * 64, bytes);
  cp_async16(dst_row + (64 + lane8) * 16, kpe + p * DP + lane8 * 8, bytes);
}

// One segment: tokens [lo, hi) of request b (which starts at kv_indices[start]); the request has n segments in
// workspace slots first .. first + n - 1, this one in slot `slot`. Called by every thread of the CTA (uniform
// arguments); returns with the CTA's shared memory free for the next segment (every thread past a barrier that
// follows its last shared-memory read, and no copy in flight).
__device__ __forceinline__ void segment(
    unsigned char* smem, const bf16* __restrict__ q_nope, const bf16* __restrict__ q_pe, const bf16* __restrict__ ckv,
    const bf16* __restrict__ kpe, const int* __restrict__ indices, int b, int start, int lo, int hi, int n, int first,
    int slot, float scale_log2, float* __restrict__ part_o, float* __restrict__ part_lse, int* __restrict__ counters,
    bf16* __restrict__ out, float* __restrict__ out_lse) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pid = slot;
  const int ntiles = (hi - lo + TILE - 1) / TILE;
  __syncthreads();  // the previous segment's last reads of s_m, s_l (an empty request has no barrier before its writes)
  const int* idx = indices + start;

  // ---- prologue: Q (16 x 576) and the first STAGES - 1 tiles, one commit group per tile (Q in the first) ----
  const uint32_t s_kv = smem_u32(smem + SM_KV), s_q = smem_u32(smem + SM_Q);
  for (int c = tid; c < H * CHUNKS; c += THREADS) {
    const int h = c / CHUNKS, cc = c % CHUNKS;
    const bf16* src = cc < DC / 8 ? q_nope + ((size_t)b * H + h) * DC + cc * 8
                                  : q_pe + ((size_t)b * H + h) * DP + (cc - DC / 8) * 8;
    cp_async16(s_q + h * ROW_BYTES + cc * 16, src, 16);
  }
  const int my_row = tid / THREADS_PER_ROW, lane8 = tid % THREADS_PER_ROW;
  auto page_of = [&](int t) {  // the page of this thread's row of tile t, -1 past the segment's end
    const int tok = lo + t * TILE + my_row;
    return tok < hi ? __ldg(idx + tok) : -1;
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < ntiles) issue_row(s_kv + (t * TILE + my_row) * ROW_BYTES, ckv, kpe, page_of(t), lane8);
    cp_async_commit();
  }
  int next_page = STAGES - 1 < ntiles ? page_of(STAGES - 1) : -1;

  // Softmax state of head sm_h, replicated over its 16 threads (thread tid: head tid / 16, tokens sm_j, sm_j + 1).
  const int sm_h = tid / 16, sm_j = (tid % 16) * 2;
  float m_run = NEG_INF, l_run = 0.f;
  // O: this warp's 64 columns, n8 tile j at columns 64 warp + 8 j.
  float o[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  float* s_s = reinterpret_cast<float*>(smem + SM_S);
  bf16* s_p = reinterpret_cast<bf16*>(smem + SM_P);
  float* s_alpha = reinterpret_cast<float*>(smem + SM_ALPHA);
  const int s_nt = warp & 3, s_kh = warp >> 2;  // S: tokens 8 s_nt..+8, dims 288 s_kh..+288

  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t (and Q) have landed
    __syncthreads();              // everyone's have; and every warp is done with tile t - 1's buffer, S and P
    {
      const int tn = t + STAGES - 1;  // into the buffer tile t - 1 used
      if (tn < ntiles) issue_row(s_kv + ((tn % STAGES) * TILE + my_row) * ROW_BYTES, ckv, kpe, next_page, lane8);
      cp_async_commit();  // always, so that the group count stays one per tile
      if (tn + 1 < ntiles) next_page = page_of(tn + 1);  // in flight during this tile's math
    }
    const uint32_t kv = s_kv + (t % STAGES) * TILE * ROW_BYTES;

    {  // S half: 16 heads x 8 tokens over 18 k-steps
      float acc[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};  // two chains: half the mma latency
      // A (Q): lanes 0-15 rows 0-15 at k0, lanes 16-31 rows 0-15 at k0 + 8.
      const uint32_t qa = s_q + (lane & 15) * ROW_BYTES + (s_kh * KHALF_STEPS * 16 + (lane >> 4) * 8) * 2;
      // B (K rows = tokens): lanes 8m..8m+7 give token rows 0-7 at k0 + 8m, m = 0..3 (two k-steps).
      const uint32_t kb = kv + (s_nt * 8 + (lane & 7)) * ROW_BYTES + (s_kh * KHALF_STEPS * 16 + (lane >> 3) * 8) * 2;
#pragma unroll
      for (int ks = 0; ks < KHALF_STEPS; ks += 2) {
        uint32_t a0[4], a1[4], bb[4];
        ldmatrix_x4(bb, kb + ks * 32);
        ldmatrix_x4(a0, qa + ks * 32);
        ldmatrix_x4(a1, qa + (ks + 1) * 32);
        mma_bf16(acc, a0, bb[0], bb[1]);
        mma_bf16(acc1, a1, bb[2], bb[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += acc1[e];
      float* dst = s_s + s_kh * H * LDS + (lane >> 2) * LDS + s_nt * 8 + (lane & 3) * 2;
      *reinterpret_cast<float2*>(dst) = make_float2(acc[0], acc[1]);
      *reinterpret_cast<float2*>(dst + 8 * LDS) = make_float2(acc[2], acc[3]);
    }
    __syncthreads();

    {  // online softmax, base 2: 16 threads per head, 2 tokens each
      const float2 x0 = *reinterpret_cast<const float2*>(s_s + sm_h * LDS + sm_j);
      const float2 x1 = *reinterpret_cast<const float2*>(s_s + H * LDS + sm_h * LDS + sm_j);
      const int tok = lo + t * TILE + sm_j;
      const float v0 = tok < hi ? (x0.x + x1.x) * scale_log2 : NEG_INF;
      const float v1 = tok + 1 < hi ? (x0.y + x1.y) * scale_log2 : NEG_INF;
      float mx = fmaxf(v0, v1);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run, mx);  // finite: a tile holds at least one token of the segment
      const float p0 = exp2f(v0 - m_new), p1 = exp2f(v1 - m_new);
      float sum = p0 + p1;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const float alpha = exp2f(m_run - m_new);  // 0 on the first tile (m_run = -inf)
      l_run = l_run * alpha + sum;
      m_run = m_new;
      *reinterpret_cast<__nv_bfloat162*>(s_p + sm_h * LDP + sm_j) = __floats2bfloat162_rn(p0, p1);
      if ((tid & 15) == 0) s_alpha[sm_h] = alpha;
    }
    __syncthreads();

    {  // O = alpha O + P V over this warp's 64 columns
      const float al = s_alpha[lane >> 2], ah = s_alpha[(lane >> 2) + 8];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        o[j][0] *= al; o[j][1] *= al; o[j][2] *= ah; o[j][3] *= ah;
      }
      const uint32_t pa = smem_u32(s_p) + ((lane & 15) * LDP + (lane >> 4) * 8) * 2;
      // B (V rows = tokens, .trans): lanes 0-7 tokens 0-7, 8-15 tokens 8-15 at column c; 16-31 the same at c + 8.
      const uint32_t vb = kv + ((lane & 7) + ((lane >> 3) & 1) * 8) * ROW_BYTES +
                          (warp * COLS_PER_WARP + (lane >> 4) * 8) * 2;
#pragma unroll
      for (int ks = 0; ks < TILE / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, pa + ks * 32);
#pragma unroll
        for (int jp = 0; jp < NT / 2; ++jp) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, vb + ks * 16 * ROW_BYTES + jp * 32);
          mma_bf16(o[2 * jp], a, bv[0], bv[1]);
          mma_bf16(o[2 * jp + 1], a, bv[2], bv[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // nothing left in flight (the trailing groups are empty)

  // ---- end of the segment ----
  float* s_m = reinterpret_cast<float*>(smem + SM_M);
  float* s_l = reinterpret_cast<float*>(smem + SM_L);
  if ((tid & 15) == 0) {
    s_m[sm_h] = m_run;
    s_l[sm_h] = l_run;
  }
  __syncthreads();
  const int r0 = lane >> 2, r1 = r0 + 8;
  const float l0 = s_l[r0], l1 = s_l[r1];
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;  // empty request: 0
  const int col0 = warp * COLS_PER_WARP + (lane & 3) * 2;

  if (n == 1) {  // the request is this segment: final output and lse
    bf16* ob = out + (size_t)b * H * DC;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(ob + r0 * DC + col0 + j * 8) =
          __floats2bfloat162_rn(o[j][0] * inv0, o[j][1] * inv0);
      *reinterpret_cast<__nv_bfloat162*>(ob + r1 * DC + col0 + j * 8) =
          __floats2bfloat162_rn(o[j][2] * inv1, o[j][3] * inv1);
    }
    if (tid < H) out_lse[b * H + tid] = s_l[tid] > 0.f ? s_m[tid] + log2f(s_l[tid]) : NEG_INF;
    return;
  }

  // A segment of a longer request: the normalised partial and its lse into slot pid.
  float* po = part_o + (size_t)pid * H * DC;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    *reinterpret_cast<float2*>(po + r0 * DC + col0 + j * 8) = make_float2(o[j][0] * inv0, o[j][1] * inv0);
    *reinterpret_cast<float2*>(po + r1 * DC + col0 + j * 8) = make_float2(o[j][2] * inv1, o[j][3] * inv1);
  }
  if (tid < H) part_lse[(size_t)pid * H + tid] = s_l[tid] > 0.f ? s_m[tid] + log2f(s_l[tid]) : NEG_INF;
  __threadfence();  // this thread's partials are visible device-wide before the ticket is drawn
  __syncthreads();
  int* s_ticket = reinterpret_cast<int*>(smem + SM_INT);
  if (tid == 0) *s_ticket = atomicAdd(counters + b, 1);
  __syncthreads();
  if (*s_ticket != n - 1) return;  // not the last segment of the request to finish
  __threadfence();  // acquire side: the other segments' partials are read after their tickets

  // Merge the request's segments (slots first .. first + n - 1): thread -> head h, columns 4 q + 64 c, c < 8.
  // The 16 threads of a head share the lse reduction (segment q, q + 16, ...; then shuffles), and the partials
  // are read MERGE_GROUP segments a round, their loads issued together: the merge sits on the request's critical
  // path, and one L2 round trip per segment would cost about half a microsecond each.
  const int h = tid / 16, q = tid % 16;
  const float* lse_h = part_lse + (size_t)first * H + h;
  float mx = NEG_INF;
  for (int s = q; s < n; s += 16) mx = fmaxf(mx, __ldcg(lse_h + (size_t)s * H));
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = 0.f;
  if (mx != NEG_INF)
    for (int s = q; s < n; s += 16) sum += exp2f(__ldcg(lse_h + (size_t)s * H) - mx);
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float total = sum > 0.f ? mx + log2f(sum) : NEG_INF;  // -inf only if every segment were empty
  float4 acc[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (total != NEG_INF) {
    constexpr int MERGE_GROUP = 4;
    const float4* src0 = reinterpret_cast<const float4*>(part_o + ((size_t)first * H + h) * DC + q * 4);
    for (int s0 = 0; s0 < n; s0 += MERGE_GROUP) {
      float w[MERGE_GROUP];
      float4 v[MERGE_GROUP][8];
#pragma unroll
      for (int u = 0; u < MERGE_GROUP; ++u) {
        const bool in = s0 + u < n;
        w[u] = in ? exp2f(__ldcg(lse_h + (size_t)(s0 + u) * H) - total) : 0.f;
#pragma unroll
        for (int c = 0; c < 8; ++c)
          v[u][c] = in ? __ldcg(src0 + (size_t)(s0 + u) * H * DC / 4 + c * 16) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < MERGE_GROUP; ++u)
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          acc[c].x += w[u] * v[u][c].x; acc[c].y += w[u] * v[u][c].y;
          acc[c].z += w[u] * v[u][c].z; acc[c].w += w[u] * v[u][c].w;
        }
    }
  }
  bf16* ob = out + ((size_t)b * H + h) * DC + q * 4;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    __nv_bfloat162 lo2 = __floats2bfloat162_rn(acc[c].x, acc[c].y), hi2 = __floats2bfloat162_rn(acc[c].z, acc[c].w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&lo2);
    u.y = *reinterpret_cast<uint32_t*>(&hi2);
    *reinterpret_cast<uint2*>(ob + c * 64) = u;
  }
  if (q == 0) out_lse[b * H + h] = total;
  if (tid == 0) counters[b] = 0;  // ready for the next call (or graph replay): every ticket of this one is drawn
}

// Token stream split: CTA c takes the tokens [c CH, (c + 1) CH) of the batch's concatenated KV tokens (kv_indices'
// order), cut at request boundaries into segments; segment (c, request b) uses workspace slot c + b (distinct:
// a later CTA can only meet a later-or-equal request). An empty request is finished by the CTA whose range holds
// its position (the last CTA for one at the end).
__global__ void __launch_bounds__(THREADS, 1) mla_pipelined(
    const bf16* __restrict__ q_nope, const bf16* __restrict__ q_pe, const bf16* __restrict__ ckv,
    const bf16* __restrict__ kpe, const int* __restrict__ indptr, const int* __restrict__ indices, int batch,
    int total, int chunk, float scale_log2, float* __restrict__ part_o, float* __restrict__ part_lse,
    int* __restrict__ counters, bf16* __restrict__ out, float* __restrict__ out_lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int c = blockIdx.x, last = gridDim.x - 1;
  const int c0 = c * chunk, c1 = min(total, c0 + chunk);
  auto owner = [&](int x) { return min(x / chunk, last); };  // the CTA whose range holds token position x
  // The first request b with indptr[b + 1] >= c0 is the one b with indptr[b] < c0 <= indptr[b + 1] (or b = 0):
  // one round of parallel loads instead of a binary search's chain of dependent ones.
  int* s_first_b = reinterpret_cast<int*>(smem + SM_INT) + 1;
  for (int b = threadIdx.x; b < batch; b += THREADS)
    if (indptr[b + 1] >= c0 && (b == 0 || indptr[b] < c0)) *s_first_b = b;
  __syncthreads();
  const int b0 = *s_first_b;
  for (int b = b0; b < batch; ++b) {
    const int start = indptr[b], end = indptr[b + 1];
    if (start > c1) break;
    if (start == end) {  // an empty request: output 0, lse -inf (segment() with no tiles writes them)
      if (owner(start) == c)
        segment(smem, q_nope, q_pe, ckv, kpe, indices, b, start, 0, 0, 1, 0, 0, scale_log2, part_o, part_lse, counters,
                out, out_lse);
      continue;
    }
    const int lo = max(start, c0), hi = min(end, c1);
    if (lo >= hi) continue;  // ends at c0 or starts at c1: another CTA's
    const int first = owner(start), n = owner(end - 1) - first + 1;
    segment(smem, q_nope, q_pe, ckv, kpe, indices, b, start, lo - start, hi - start, n, first + b, c + b, scale_log2,
            part_o, part_lse, counters, out, out_lse);
  }
}

// The host's arithmetic, from shapes only: CH = max(MIN_CHUNK, cdiv(total, WAVES * multiprocessors)) tokens a CTA,
// grid = cdiv(total, CH) CTAs (one for an empty batch), workspace slots = grid + batch (slot c + b < grid + batch).
#ifndef MLA_WAVES
#define MLA_WAVES 1  // CTAs per multiprocessor the tokens are spread over (one fits at a time: shared memory)
#endif
constexpr int64_t MIN_CHUNK = 2 * TILE;  // below this a CTA's prologue outweighs its loop

inline int64_t chunk_for(int64_t total, int64_t sms) {
  return std::max<int64_t>(MIN_CHUNK, (total + MLA_WAVES * sms - 1) / (MLA_WAVES * sms));
}
inline int64_t grid_for(int64_t total, int64_t chunk) { return std::max<int64_t>(1, (total + chunk - 1) / chunk); }

}  // namespace

#ifndef MLA_NO_TORCH
namespace {
struct Workspace {
  torch::Tensor part_o, part_lse, counters;
};
}  // namespace

void run(torch::Tensor q_nope, torch::Tensor q_pe, torch::Tensor ckv_cache, torch::Tensor kpe_cache,
         torch::Tensor kv_indptr, torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  TORCH_CHECK(q_nope.is_cuda() && output.is_cuda(), "pipelined_mma runs on CUDA tensors");
  TORCH_CHECK(q_nope.size(1) == H && q_nope.size(2) == DC && q_pe.size(2) == DP && ckv_cache.size(1) == 1,
              "pipelined_mma: 16 heads, ckv 512, kpe 64, page size 1 only");
  TORCH_CHECK(output.is_contiguous() && lse.is_contiguous(), "pipelined_mma writes contiguous outputs");
  const int batch = static_cast<int>(q_nope.size(0));
  if (batch == 0) return;
  auto qn = q_nope.contiguous(), qp = q_pe.contiguous(), ckv = ckv_cache.contiguous(), kpe = kpe_cache.contiguous();
  auto indptr = kv_indptr.to(torch::kInt).contiguous(), indices = kv_indices.to(torch::kInt).contiguous();
  const int64_t total = kv_indices.numel();
  const int device = q_nope.get_device();
  const auto* props = at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK(total < (int64_t(1) << 31) - MIN_CHUNK, "pipelined_mma: int32 token positions");
  const int64_t chunk = chunk_for(total, props->multiProcessorCount);
  const int64_t grid = grid_for(total, chunk);

  // Workspace per (device, batch, tokens): allocated on the first call of a shape (not during a graph's capture,
  // which the harness's warm-up precedes), counters zeroed once; the merging CTA resets its counter after use.
  static std::map<std::tuple<int, int64_t, int64_t>, Workspace> workspaces;
  static std::map<int, bool> configured;
  const auto key = std::make_tuple(device, static_cast<int64_t>(batch), total);
  auto it = workspaces.find(key);
  if (it == workspaces.end()) {
    auto f32 = q_nope.options().dtype(torch::kFloat);
    Workspace ws{torch::empty({grid + batch, H, DC}, f32), torch::empty({grid + batch, H}, f32),
                 torch::zeros({batch}, q_nope.options().dtype(torch::kInt))};
    it = workspaces.emplace(key, ws).first;
  }
  if (!configured[device]) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(mla_pipelined, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    configured[device] = true;
  }
  const auto stream = at::cuda::getCurrentCUDAStream();
  const float scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  auto bf = [](const torch::Tensor& t) { return reinterpret_cast<const bf16*>(t.data_ptr<at::BFloat16>()); };
  mla_pipelined<<<static_cast<unsigned>(grid), THREADS, SMEM_BYTES, stream>>>(
      bf(qn), bf(qp), bf(ckv), bf(kpe), indptr.data_ptr<int>(), indices.data_ptr<int>(), batch, static_cast<int>(total),
      static_cast<int>(chunk),
      scale_log2, it->second.part_o.data_ptr<float>(), it->second.part_lse.data_ptr<float>(),
      it->second.counters.data_ptr<int>(), reinterpret_cast<bf16*>(output.data_ptr<at::BFloat16>()),
      lse.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "MLA paged decode (split-KV, cp.async ring, mma.sync)"); }
#endif
