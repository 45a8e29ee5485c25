"""Planted candidate: computes on the host and copies the answer to the device (no kernel of its own)."""

import math

import torch


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    bounds = kv_indptr.cpu().tolist()
    rows_all = kv_indices.cpu().long()
    out_host = torch.empty(output.shape, dtype=output.dtype)
    lse_host = torch.empty(lse.shape, dtype=lse.dtype)
    for b in range(q_nope.shape[0]):
        rows = rows_all[bounds[b]:bounds[b + 1]]
        ckv = ckv_cache[rows.to(ckv_cache.device), 0].cpu().float()
        kpe = kpe_cache[rows.to(kpe_cache.device), 0].cpu().float()
        logits = (q_nope[b].cpu().float() @ ckv.T + q_pe[b].cpu().float() @ kpe.T) * sm_scale
        if rows.numel() == 0:
            out_host[b].zero_()
            lse_host[b].fill_(-math.inf)
            continue
        out_host[b].copy_(torch.softmax(logits, dim=-1) @ ckv)
        lse_host[b].copy_(torch.logsumexp(logits, dim=-1) / math.log(2.0))
    output.copy_(out_host)
    lse.copy_(lse_host)
