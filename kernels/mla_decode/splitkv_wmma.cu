// MLA paged decode (16 heads, ckv 512, kpe 64, page size 1) in CUDA C++ with tensor cores (WMMA, bf16 in,
// fp32 accumulate), the torch binding: a FlashInfer-Trace solution's source (language "cuda", entry
// "splitkv_wmma.cu::run"), called inputs then outputs in the definition's order.
//
// Design: split-KV flash decoding. The 16 query heads are exactly one 16-row WMMA tile, so a CTA takes all
// heads of one request over one slice of its KV tokens: per tile of 32 tokens it gathers the rows
// (ckv and kpe side by side, 576 bf16) into shared memory, computes S = Q K^T (16 x 32) with WMMA, an online
// softmax in base 2, and O += P V (V = the ckv part of the same rows). The next tile's rows are loaded into
// registers while the current one is computed. Slices of one request are merged by a second kernel through
// their base-2 log-sum-exp; with one slice per request the first kernel writes the output itself.
// Limits (what a next step would change): the accumulator O lives in shared memory (WMMA's fragment layout is
// opaque, so rescaling per row needs it there), and loads overlap compute only through one register stage.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>

namespace {

using bf16 = __nv_bfloat16;
using namespace nvcuda;

constexpr int H = 16, DC = 512, DP = 64, D = DC + DP;
constexpr int TILE = 32;           // tokens per tile
constexpr int THREADS = 256;       // 8 warps
constexpr int LDQ = D + 8;         // padded rows (bf16): WMMA needs a multiple of 8, the pad spreads banks
constexpr int LDS = TILE + 4;      // floats
constexpr int LDP = TILE + 8;      // bf16
constexpr int LDO = DC + 4;        // floats
constexpr int CHUNKS = D / 8;      // 16-byte chunks per row: 64 of ckv, 8 of kpe
constexpr int LOADS = TILE * CHUNKS / THREADS;  // chunks per thread per tile (9)
constexpr int KSTEPS = D / 16;     // 36
constexpr int KQUARTERS = 4;       // S is summed over 4 slices of D, one per warp pair
constexpr float NEG_INF = -INFINITY;

struct Smem {
  bf16 q[H * LDQ];
  bf16 k[TILE * LDQ];
  float s[KQUARTERS * H * LDS];
  bf16 p[H * LDP];
  float o[H * LDO];
  float m[H], l[H], alpha[H];
};

__device__ __forceinline__ uint4 load_chunk(const bf16* ckv, const bf16* kpe, int row, int chunk) {
  if (row < 0) return make_uint4(0, 0, 0, 0);
  const bf16* src = chunk < DC / 8 ? ckv + (size_t)row * DC + chunk * 8 : kpe + (size_t)row * DP + (chunk - DC / 8) * 8;
  return __ldg(reinterpret_cast<const uint4*>(src));
}

// grid (splits, batch). Writes the slice's normalized output and base-2 lse to part_o/part_lse, or, when
// `out` is given (one slice per request), the final bf16 output and lse.
__global__ void __launch_bounds__(THREADS) mla_slice(
    const bf16* __restrict__ q_nope, const bf16* __restrict__ q_pe, const bf16* __restrict__ ckv,
    const bf16* __restrict__ kpe, const int* __restrict__ indptr, const int* __restrict__ indices,
    float scale_log2, float* __restrict__ part_o, float* __restrict__ part_lse, bf16* __restrict__ out,
    float* __restrict__ out_lse) {
  extern __shared__ __align__(128) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  const int split = blockIdx.x, splits = gridDim.x, b = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32;
  const int start = indptr[b], len = indptr[b + 1] - start;
  const int per = (len + splits - 1) / splits;
  const int chunk = (per + TILE - 1) / TILE * TILE;
  const int lo = min(len, split * chunk), hi = min(len, lo + chunk);

  for (int c = tid; c < H * CHUNKS; c += THREADS) {
    const int h = c / CHUNKS, cc = c % CHUNKS;
    const bf16* src = cc < DC / 8 ? q_nope + ((size_t)b * H + h) * DC + cc * 8 : q_pe + ((size_t)b * H + h) * DP + (cc - DC / 8) * 8;
    *reinterpret_cast<uint4*>(&sm.q[h * LDQ + cc * 8]) = __ldg(reinterpret_cast<const uint4*>(src));
  }
  for (int e = tid; e < H * LDO; e += THREADS) sm.o[e] = 0.f;
  if (tid < H) { sm.m[tid] = NEG_INF; sm.l[tid] = 0.f; }

  uint4 stage[LOADS];
  auto fetch = [&](int t0) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int c = tid + i * THREADS, r = c / CHUNKS;
      const int row = t0 + r < hi ? indices[start + t0 + r] : -1;
      stage[i] = load_chunk(ckv, kpe, row, c % CHUNKS);
    }
  };
  if (lo < hi) fetch(lo);

  for (int t0 = lo; t0 < hi; t0 += TILE) {
    __syncthreads();  // the previous tile's readers are done with sm.k
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int c = tid + i * THREADS;
      *reinterpret_cast<uint4*>(&sm.k[(c / CHUNKS) * LDQ + (c % CHUNKS) * 8]) = stage[i];
    }
    __syncthreads();
    if (t0 + TILE < hi) fetch(t0 + TILE);  // in flight while this tile is computed

    {  // S partials: warp -> (column block nf of 16 tokens, quarter kq of D)
      const int nf = warp & 1, kq = warp >> 1;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int ks = kq * (KSTEPS / KQUARTERS); ks < (kq + 1) * (KSTEPS / KQUARTERS); ++ks) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bk;
        wmma::load_matrix_sync(a, sm.q + ks * 16, LDQ);
        wmma::load_matrix_sync(bk, sm.k + nf * 16 * LDQ + ks * 16, LDQ);
        wmma::mma_sync(acc, a, bk, acc);
      }
      wmma::store_matrix_sync(sm.s + kq * H * LDS + nf * 16, acc, LDS, wmma::mem_row_major);
    }
    __syncthreads();

    {  // online softmax: 16 threads per head, 2 tokens each
      const int h = tid / 16, j = (tid % 16) * 2;
      float x[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float s = 0.f;
#pragma unroll
        for (int kq = 0; kq < KQUARTERS; ++kq) s += sm.s[kq * H * LDS + h * LDS + j + u];
        x[u] = t0 + j + u < hi ? s * scale_log2 : NEG_INF;
      }
      float mx = fmaxf(x[0], x[1]);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off, 16));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, mx);  // finite: every tile holds at least one token
      const float p0 = exp2f(x[0] - m_new), p1 = exp2f(x[1] - m_new);
      float sum = p0 + p1;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off, 16);
      sm.p[h * LDP + j] = __float2bfloat16(p0);
      sm.p[h * LDP + j + 1] = __float2bfloat16(p1);
      __syncwarp();  // every lane has read m_old
      if (tid % 16 == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 for the first tile (m_old = -inf)
        sm.alpha[h] = alpha;
        sm.l[h] = sm.l[h] * alpha + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();

    {  // O = alpha * O + P V over this warp's 64 columns
      const int c0 = warp * 64;
      for (int e = tid % 32; e < H * 64; e += 32) {
        const int h = e / 64, c = c0 + e % 64;
        sm.o[h * LDO + c] *= sm.alpha[h];
      }
      __syncwarp();
#pragma unroll
      for (int nf = 0; nf < 4; ++nf) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, sm.o + c0 + nf * 16, LDO, wmma::mem_row_major);
#pragma unroll
        for (int ks = 0; ks < TILE / 16; ++ks) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bv;
          wmma::load_matrix_sync(a, sm.p + ks * 16, LDP);
          wmma::load_matrix_sync(bv, sm.k + ks * 16 * LDQ + c0 + nf * 16, LDQ);
          wmma::mma_sync(acc, a, bv, acc);
        }
        wmma::store_matrix_sync(sm.o + c0 + nf * 16, acc, LDO, wmma::mem_row_major);
      }
    }
  }
  __syncthreads();

  // normalize and write: an empty slice gives 0 and -inf
  for (int e = tid; e < H * DC; e += THREADS) {
    const int h = e / DC, c = e % DC;
    const float l = sm.l[h];
    const float v = l > 0.f ? sm.o[h * LDO + c] / l : 0.f;
    if (out) out[((size_t)b * H + h) * DC + c] = __float2bfloat16(v);
    else part_o[(((size_t)b * splits + split) * H + h) * DC + c] = v;
  }
  if (tid < H) {
    const float l = sm.l[tid];
    const float lse = l > 0.f ? sm.m[tid] + log2f(l) : NEG_INF;
    if (out) out_lse[b * H + tid] = lse;
    else part_lse[((size_t)b * splits + split) * H + tid] = lse;
  }
}

// grid (batch): merges a request's slices by their base-2 lse.
__global__ void __launch_bounds__(THREADS) mla_merge(const float* __restrict__ part_o, const float* __restrict__ part_lse,
                                                     int splits, bf16* __restrict__ out, float* __restrict__ out_lse) {
  extern __shared__ float weight[];  // [H][splits]
  const int b = blockIdx.x, tid = threadIdx.x;
  if (tid < H) {
    const float* lse = part_lse + (size_t)b * splits * H + tid;
    float mx = NEG_INF;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lse[s * H]);
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += mx == NEG_INF ? 0.f : exp2f(lse[s * H] - mx);
    const float total = sum > 0.f ? mx + log2f(sum) : NEG_INF;
    for (int s = 0; s < splits; ++s) weight[tid * splits + s] = sum > 0.f ? exp2f(lse[s * H] - total) : 0.f;
    out_lse[b * H + tid] = total;
  }
  __syncthreads();
  for (int e = tid; e < H * DC; e += THREADS) {
    const int h = e / DC, c = e % DC;
    float v = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float w = weight[h * splits + s];
      if (w > 0.f) v += w * part_o[(((size_t)b * splits + s) * H + h) * DC + c];
    }
    out[((size_t)b * H + h) * DC + c] = __float2bfloat16(v);
  }
}

}  // namespace

void run(torch::Tensor q_nope, torch::Tensor q_pe, torch::Tensor ckv_cache, torch::Tensor kpe_cache,
         torch::Tensor kv_indptr, torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  TORCH_CHECK(q_nope.is_cuda() && output.is_cuda(), "splitkv_wmma runs on CUDA tensors");
  TORCH_CHECK(q_nope.size(1) == H && q_nope.size(2) == DC && q_pe.size(2) == DP && ckv_cache.size(1) == 1,
              "splitkv_wmma: 16 heads, ckv 512, kpe 64, page size 1 only");
  TORCH_CHECK(output.is_contiguous() && lse.is_contiguous(), "splitkv_wmma writes contiguous outputs");
  const int batch = static_cast<int>(q_nope.size(0));
  if (batch == 0) return;
  auto qn = q_nope.contiguous(), qp = q_pe.contiguous(), ckv = ckv_cache.contiguous(), kpe = kpe_cache.contiguous();
  auto indptr = kv_indptr.to(torch::kInt).contiguous(), indices = kv_indices.to(torch::kInt).contiguous();
  const auto* props = at::cuda::getCurrentDeviceProperties();
  // Enough slices for about two CTAs per SM, but no slice under 128 tokens on average.
  const int64_t avg = std::max<int64_t>(1, kv_indices.numel() / batch);
  const int splits = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({(2 * props->multiProcessorCount + batch - 1) / batch, avg / 128, 64})));
  const size_t smem = sizeof(Smem);
  static bool configured = false;
  if (!configured) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(mla_slice, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    configured = true;
  }
  const auto stream = at::cuda::getCurrentCUDAStream();
  const float scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  auto bf = [](const torch::Tensor& t) { return reinterpret_cast<const bf16*>(t.data_ptr<at::BFloat16>()); };
  bf16* out = reinterpret_cast<bf16*>(output.data_ptr<at::BFloat16>());
  if (splits == 1) {
    mla_slice<<<dim3(1, batch), THREADS, smem, stream>>>(bf(qn), bf(qp), bf(ckv), bf(kpe), indptr.data_ptr<int>(),
                                                          indices.data_ptr<int>(), scale_log2, nullptr, nullptr, out,
                                                          lse.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  auto opts = q_nope.options().dtype(torch::kFloat);
  auto part_o = torch::empty({batch, splits, H, DC}, opts);
  auto part_lse = torch::empty({batch, splits, H}, opts);
  mla_slice<<<dim3(splits, batch), THREADS, smem, stream>>>(bf(qn), bf(qp), bf(ckv), bf(kpe), indptr.data_ptr<int>(),
                                                             indices.data_ptr<int>(), scale_log2, part_o.data_ptr<float>(),
                                                             part_lse.data_ptr<float>(), nullptr, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  mla_merge<<<batch, THREADS, H * splits * sizeof(float), stream>>>(part_o.data_ptr<float>(), part_lse.data_ptr<float>(),
                                                                      splits, out, lse.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "MLA paged decode (split-KV, WMMA)"); }
