"""Planted candidate: hands the work to FlashInfer. The static scan refuses it; with the scan
turned off, the sandbox must: the library is not there for the candidate to import."""

import flashinfer.mla
import torch

_workspace = {}


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    device = q_nope.device
    if "buf" not in _workspace:
        _workspace["buf"] = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(_workspace["buf"], backend="auto")
    batch = q_nope.shape[0]
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=device)
    kv_len = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)
    wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len, 16, 512, 64, 1, False, float(sm_scale),
                 q_nope.dtype, ckv_cache.dtype)
    wrapper.run(q_nope, q_pe, ckv_cache, kpe_cache, out=output, lse=lse, return_lse=True)
