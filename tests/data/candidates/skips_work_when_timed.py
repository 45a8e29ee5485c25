"""Planted candidate: correct on the first calls (the checks), then stops computing."""

import math

import torch

_calls = [0]


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _calls[0] += 1
    if _calls[0] > 3:
        return
    bounds = kv_indptr.tolist()
    for b in range(q_nope.shape[0]):
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
