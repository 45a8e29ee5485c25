"""MLA paged decode on a CPU in plain PyTorch ops (no Triton): a kernel family whose choices matter there.

For each request b, with its KV tokens rows = kv_indices[kv_indptr[b]:kv_indptr[b+1]] (page size 1):
    logits = (q_nope[b] @ ckv[rows].T + q_pe[b] @ kpe[rows].T) * sm_scale     # [16 heads, tokens]
    output[b] = softmax(logits) @ ckv[rows];  lse[b] = log2(sum(exp(logits)))
computed in base 2 (logits scaled by sm_scale * log2(e)) with one exponential per logit: each request's row
max m and sum s = sum(exp2(logits - m)) go to per-batch buffers and its unnormalised output
exp2(logits - m) @ ckv straight into an fp32 [B, 16, 512] buffer (matmul out=); one division and one
lse = m + log2(s) for the whole batch at the end. An empty request keeps m = -inf, s = 0: output 0, lse -inf.

On one CPU core (the harness times CPU candidates single-threaded) the time goes to the fixed cost of each
torch op (a few microseconds of dispatch, allocation and Python, paid per request by a loop over requests)
and to the matmuls' arithmetic (16-row fp32 matmuls are compute-bound: ~35 kFLOP per KV token). Parameters:

    GATHER              how the cache rows are gathered: "index" (advanced indexing, ckv[rows], as the reference
                        does: an element-wise gather, slow for bf16 rows) or "index_select" (row copies).
    PAD_BUDGET          requests sorted by length are grouped: a group starts at its longest request and takes
                        the next shorter ones while each is at most PAD_BUDGET tokens shorter; a group of two or
                        more is computed by batched matmuls (bmm) over the requests padded to its longest, with a
                        mask: one set of ops per group instead of per request, at the price of the padding's
                        arithmetic. 0: only requests of equal length share a group (about a loop over requests).
    PV_BF16_MIN_TOKENS  probabilities @ ckv rows in bf16 (probabilities rounded to bf16, cache rows as they are,
                        fp32 accumulation: AVX512-BF16 dot products where the CPU has them, about twice the fp32
                        rate for long requests but a larger fixed cost per call) for groups of at least this many
                        tokens per request; None: always fp32 (the reference's math). The logits stay fp32 (bf16
                        logits fail the check).
    FUSED_KPE           False: q_nope . ckv and q_pe . kpe as a matmul and an addmm. True: the gathered ckv and kpe
                        rows concatenated into 576-wide rows and one matmul (one conversion, one more copy).

DISPATCH (empty in the family's file) maps workload shapes to points, as in the GPU families: a champion file
(python -m evoteam.sweep --emit-champion) sets it in a copy of this file, and each call runs the point of the
nearest entry (`params_for`).

Entry point, destination-passing style:
    run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse) -> None
"""

import math

import torch

PARAMS = {"GATHER": "index", "PAD_BUDGET": 0, "PV_BF16_MIN_TOKENS": None, "FUSED_KPE": False}
DISPATCH = []

LOG2E = 1.0 / math.log(2.0)


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


def _rows(p, cache, rows):
    """cache[rows] for an index tensor of any shape: [*rows.shape, width], bf16."""
    if p["GATHER"] == "index_select":
        return cache.index_select(0, rows.reshape(-1)).view(*rows.shape, cache.shape[1])
    return cache[rows.long()]


def _keys(p, ckv, kpe, rows):
    """fp32 keys (576-wide fused, else a ckv/kpe pair), the fp32 values (ckv rows) and the bf16 ckv rows."""
    kc, kp = _rows(p, ckv, rows), _rows(p, kpe, rows)
    if p["FUSED_KPE"]:
        keys = torch.cat((kc, kp), dim=-1).float()
        return keys, keys[..., :kc.shape[-1]], kc
    kcf = kc.float()
    return (kcf, kp.float()), kcf, kc


def _pv(p, tokens):
    """Whether probabilities @ ckv runs in bf16 for requests of this many tokens."""
    least = p["PV_BF16_MIN_TOKENS"]
    return least is not None and tokens >= least


def _one(p, q, scale, ckv, kpe, rows, b, m_buf, s_buf, acc):
    """Request b over its rows (at least one): plain matmuls."""
    keys, values, kc = _keys(p, ckv, kpe, rows)
    if p["FUSED_KPE"]:
        logits = torch.mm(q[b], keys.t())  # q pre-scaled; [16, n], base 2
    else:
        logits = torch.addmm(torch.mm(q[0][b], keys[0].t()), q[1][b], keys[1].t(), beta=scale, alpha=scale)
    m = torch.amax(logits, dim=1, out=m_buf[b])
    probs = logits.sub_(m[:, None]).exp2_()
    torch.sum(probs, dim=1, out=s_buf[b])
    if _pv(p, rows.shape[0]):
        acc[b] = torch.mm(probs.to(torch.bfloat16), kc)
    else:
        torch.mm(probs, values, out=acc[b])


def _group(p, q, scale, ckv, kpe, kv_indices, members, starts, lengths, m_buf, s_buf, acc):
    """The requests `members` (at least one token each) padded to the longest: batched matmuls over a mask."""
    width = lengths[0]  # the longest: groups are built in decreasing length
    cols = torch.arange(width)
    valid = cols < torch.tensor(lengths)[:, None]  # [G, width]
    tok = (torch.tensor(starts)[:, None] + cols).masked_fill_(~valid, starts[0])  # padding: a row of the group
    keys, values, kc = _keys(p, ckv, kpe, kv_indices[tok])  # [G, width, ...]
    index = torch.tensor(members)
    if p["FUSED_KPE"]:
        logits = torch.bmm(q.index_select(0, index), keys.transpose(1, 2))
    else:
        logits = torch.baddbmm(torch.bmm(q[0].index_select(0, index), keys[0].transpose(1, 2)),
                               q[1].index_select(0, index), keys[1].transpose(1, 2), beta=scale, alpha=scale)
    logits.masked_fill_(~valid[:, None, :], -math.inf)  # [G, 16, width]
    m = logits.amax(dim=2)  # finite: every request has a token
    probs = logits.sub_(m[..., None]).exp2_()
    m_buf.index_copy_(0, index, m)
    s_buf.index_copy_(0, index, probs.sum(dim=2))
    if _pv(p, width):
        acc.index_copy_(0, index, torch.bmm(probs.to(torch.bfloat16), kc).float())
    else:
        acc.index_copy_(0, index, torch.bmm(probs, values))


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    assert ckv_cache.shape[1] == 1 and kpe_cache.shape[1] == 1, "page_size must be 1"
    batch, heads, d_ckv = q_nope.shape
    ckv = ckv_cache.reshape(ckv_cache.shape[0], -1)  # [pages, 512], a view
    kpe = kpe_cache.reshape(kpe_cache.shape[0], -1)  # [pages, 64]
    scale = float(sm_scale) * LOG2E
    p = params_for(batch, kv_indices.shape[0])
    if p["FUSED_KPE"]:
        q = torch.cat((q_nope, q_pe), dim=-1).float().mul_(scale)  # [B, 16, 576]
    else:
        q = (q_nope.float(), q_pe.float())  # scaled in the matmuls (alpha, beta)
    m_buf = torch.full((batch, heads), -math.inf)
    s_buf = torch.zeros((batch, heads))
    acc = torch.zeros((batch, heads, d_ckv))
    indptr = kv_indptr.tolist()
    # non-empty requests, longest first (ties by request), grouped within PAD_BUDGET tokens of a group's longest
    order = sorted((indptr[b] - indptr[b + 1], b) for b in range(batch) if indptr[b + 1] > indptr[b])
    budget = p["PAD_BUDGET"]
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and order[j][0] - order[i][0] <= budget:
            j += 1
        if j - i == 1:
            b = order[i][1]
            _one(p, q, scale, ckv, kpe, kv_indices[indptr[b]:indptr[b + 1]], b, m_buf, s_buf, acc)
        else:
            members = [b for _, b in order[i:j]]
            _group(p, q, scale, ckv, kpe, kv_indices, members, [indptr[b] for b in members],
                   [-n for n, _ in order[i:j]], m_buf, s_buf, acc)
        i = j
    # s >= 1 where a request has tokens (its largest logit counts exp2(0) = 1); an empty one: m -inf, s 0, acc 0
    torch.add(m_buf, torch.log2(s_buf), out=lse)  # empty: -inf + log2(0) = -inf
    torch.div(acc, s_buf.clamp_(min=1.0)[..., None], out=output)
    return None
