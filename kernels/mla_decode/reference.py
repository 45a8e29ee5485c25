"""Reference for mla_paged_decode_h16_ckv512_kpe64_ps1 (flashinfer-bench style).

Exact math, fp32 accumulation. For each request b, with its KV tokens
rows = kv_indices[kv_indptr[b]:kv_indptr[b+1]] of the caches (page_size 1: a page is a token):
    logits = (q_nope[b] @ ckv[rows].T + q_pe[b] @ kpe[rows].T) * sm_scale     # [heads, tokens]
    output[b] = softmax(logits) @ ckv[rows]                                   # [heads, 512]
    lse[b] = logsumexp(logits) / ln 2                                         # base 2
An empty request gives output 0 and lse -inf.
Works on CPU and CUDA tensors: one loop over requests, vectorised over heads and tokens.
"""

import math

import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch_size, num_qo_heads, head_dim_ckv = q_nope.shape
    head_dim_kpe = q_pe.shape[-1]
    page_size = ckv_cache.shape[1]
    assert num_qo_heads == 16 and head_dim_ckv == 512 and head_dim_kpe == 64 and page_size == 1
    assert kv_indptr.shape[0] == batch_size + 1
    device = q_nope.device
    scale = float(sm_scale)

    ckv_all = ckv_cache.reshape(-1, head_dim_ckv)  # [num_pages, 512] (page_size 1: a view)
    kpe_all = kpe_cache.reshape(-1, head_dim_kpe)  # [num_pages, 64]
    output = torch.zeros((batch_size, num_qo_heads, head_dim_ckv), dtype=torch.bfloat16, device=device)
    lse = torch.full((batch_size, num_qo_heads), -float("inf"), dtype=torch.float32, device=device)

    indptr = kv_indptr.tolist()  # one host copy for the whole batch
    for b in range(batch_size):
        start, end = int(indptr[b]), int(indptr[b + 1])
        if end <= start:
            continue  # empty request: output 0, lse -inf
        rows = kv_indices[start:end].long()
        kc = ckv_all[rows].float()  # [L, 512]
        kp = kpe_all[rows].float()  # [L, 64]
        qn = q_nope[b].float()  # [16, 512]
        qp = q_pe[b].float()  # [16, 64]
        logits = (qn @ kc.T + qp @ kp.T) * scale  # [16, L]
        lse[b] = torch.logsumexp(logits, dim=-1) / math.log(2.0)
        attn = torch.softmax(logits, dim=-1)
        output[b] = (attn @ kc).to(torch.bfloat16)
    return output, lse
