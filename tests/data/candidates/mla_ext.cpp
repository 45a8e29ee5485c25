// MLA paged decode as a C++ solution (torch binding), for CPU: the reference's math with ATen ops.
// ATen and torch's pybind11 casters, not <torch/extension.h> (which adds the whole C++ frontend: autograd, nn,
// optim, data): the same extension, its compile about 10 CPU-s where extension.h's took about 22 (g++ 12, torch
// 2.13, 2-core development VM), and the suite compiles it twice (test_languages).
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>

void run(at::Tensor q_nope, at::Tensor q_pe, at::Tensor ckv_cache, at::Tensor kpe_cache,
         at::Tensor kv_indptr, at::Tensor kv_indices, double sm_scale, at::Tensor output,
         at::Tensor lse) {
  // PLANTED
  const int64_t batch = q_nope.size(0);
  auto ckv = ckv_cache.reshape({-1, ckv_cache.size(-1)});
  auto kpe = kpe_cache.reshape({-1, kpe_cache.size(-1)});
  auto indptr = kv_indptr.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* ip = indptr.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = ip[b], end = ip[b + 1];
    if (end <= start) {
      output[b].zero_();
      lse[b].fill_(-INFINITY);
      continue;
    }
    auto rows = kv_indices.slice(0, start, end).to(at::kLong);
    auto kc = ckv.index_select(0, rows).to(at::kFloat);
    auto kp = kpe.index_select(0, rows).to(at::kFloat);
    auto logits = (q_nope[b].to(at::kFloat).matmul(kc.t()) + q_pe[b].to(at::kFloat).matmul(kp.t())) * sm_scale;
    lse[b].copy_(at::logsumexp(logits, -1) / std::log(2.0));
    output[b].copy_(at::softmax(logits, -1).matmul(kc).to(output.scalar_type()));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
