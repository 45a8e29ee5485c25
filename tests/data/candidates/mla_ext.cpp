// MLA paged decode as a C++ solution (torch binding), for CPU: the reference's math with ATen ops.
#include <torch/extension.h>

#include <cmath>

void run(torch::Tensor q_nope, torch::Tensor q_pe, torch::Tensor ckv_cache, torch::Tensor kpe_cache,
         torch::Tensor kv_indptr, torch::Tensor kv_indices, double sm_scale, torch::Tensor output,
         torch::Tensor lse) {
  // PLANTED
  const int64_t batch = q_nope.size(0);
  auto ckv = ckv_cache.reshape({-1, ckv_cache.size(-1)});
  auto kpe = kpe_cache.reshape({-1, kpe_cache.size(-1)});
  auto indptr = kv_indptr.to(torch::kCPU).to(torch::kLong).contiguous();
  const int64_t* ip = indptr.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = ip[b], end = ip[b + 1];
    if (end <= start) {
      output[b].zero_();
      lse[b].fill_(-INFINITY);
      continue;
    }
    auto rows = kv_indices.slice(0, start, end).to(torch::kLong);
    auto kc = ckv.index_select(0, rows).to(torch::kFloat);
    auto kp = kpe.index_select(0, rows).to(torch::kFloat);
    auto logits = (q_nope[b].to(torch::kFloat).matmul(kc.t()) + q_pe[b].to(torch::kFloat).matmul(kp.t())) * sm_scale;
    lse[b].copy_(torch::logsumexp(logits, -1) / std::log(2.0));
    output[b].copy_(torch::softmax(logits, -1).matmul(kc).to(output.scalar_type()));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
