"""mla_torch.py as a value-returning solution (destination_passing_style false): it allocates its outputs and
returns them, in the definition's order (tests plant variants of it: a wrong shape, count or dtype, a NaN)."""

import math

import torch


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, dim = q_nope.shape[0], q_nope.shape[1], ckv_cache.shape[-1]
    output = torch.empty(batch, heads, dim, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q_nope.device)
    bounds = kv_indptr.tolist()
    for b in range(batch):
        rows = kv_indices[bounds[b]:bounds[b + 1]].long()
        if rows.numel() == 0:
            output[b].zero_()
            lse[b].fill_(-math.inf)
            continue
        ckv = ckv_cache[rows, 0].float()
        kpe = kpe_cache[rows, 0].float()
        logits = (q_nope[b].float() @ ckv.T + q_pe[b].float() @ kpe.T) * sm_scale
        output[b].copy_(torch.softmax(logits, dim=-1) @ ckv)
        lse[b].copy_(torch.logsumexp(logits, dim=-1) / math.log(2.0))
    return output, lse
