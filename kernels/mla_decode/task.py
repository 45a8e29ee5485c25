"""Task logic for mla_paged_decode_h16_ckv512_kpe64_ps1 (see evoteam/task.py for the contract).

The published workloads give only batch_size and num_kv_indices: their per-request lengths and
page indices were in binary blobs that are not available. `kv_layout` synthesizes them
deterministically from the workload's uuid, identically on every machine (README.md documents the
procedure exactly):

    seed   = int.from_bytes(sha256(uuid.encode("utf-8")).digest()[:8], "little")
    stream = numpy.random.PCG64(seed).random_raw(...)   # raw uint64 words, used in this order:
    1. lengths (batch_size > 1): N = num_kv_indices, B = batch_size.
       N >= B: one word per candidate cut 1..N-1; the B-1 cuts whose words are smallest
               (ties broken by position) split [0, N) into B lengths, each >= 1.
       N <  B: B-1 words; cut_i = word_i mod (N + 1), sorted (lengths may be 0).
       batch_size == 1: no words; the one length is N.
    2. pages: one word per page 0..num_pages-1; the N pages with the smallest words (ties broken
       by page number), ordered by word, are kv_indices: distinct and scattered over the pool.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import lru_cache

import numpy as np
import torch

from evoteam.task import Tolerance, scaled_uuid

NUM_QO_HEADS = 16
HEAD_DIM_CKV = 512
HEAD_DIM_KPE = 64
PAGE_SIZE = 1

# "small" scale: a cheap subset for CPU runs under the Triton interpreter, with the page pool
# scaled down from 989,669 pages to this many (the workloads' published token counts are kept).
SMALL_NUM_PAGES = 4096
SMALL_PICKS = ((1, 2), (16, 2))  # (batch_size, how many): the smallest workloads of that batch size

# flashinfer-bench checks lse at atol = rtol = 1e-2; output (bf16) keeps evoteam's bf16 default.
TOLERANCES = {"lse": Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=1e-2)}

# Timed calls (see evoteam/task.py): the calls of one batch share the KV-cache pool, as the requests
# of a serving engine do, each reading its own pages; the pages a call reads are revealed only when
# the judge's clock starts, so nothing can be read ahead of it.
SHARED_INPUTS = ("ckv_cache", "kpe_cache")
LATE_INPUTS = ("kv_indices",)
# In a batch, call k+1's queries (the part that meets the 512-wide latent cache) are call k's output, as the next
# decode step's attention input comes from the last one's: computing a call ahead of the one it follows reads poison.
# The rope part (q_pe) stays fresh, so the logits keep their spread along the chain.
CHAINED_INPUTS = {"q_nope": "output"}


# --------------------------------------------------------------------------- workloads


def scaled_workloads(workloads, scale):
    """`full`: every workload as it is. `small`: the two smallest batch-1 and the two smallest
    batch-16 workloads, with num_pages rewritten to SMALL_NUM_PAGES (and so a uuid of their own)."""
    if scale == "full":
        return list(workloads)
    if scale != "small":
        raise ValueError(f"unknown problem scale {scale!r}")
    picked = []
    for batch_size, count in SMALL_PICKS:
        fits = [w for w in workloads
                if w.axes["batch_size"] == batch_size and w.axes["num_kv_indices"] <= SMALL_NUM_PAGES]
        fits.sort(key=lambda w: (w.axes["num_kv_indices"], w.uuid))
        picked.extend(fits[:count])
    return [dataclasses.replace(w, uuid=scaled_uuid(w.uuid, scale), origin=w.uuid, axes={**w.axes, "num_pages": SMALL_NUM_PAGES})
            for w in picked]


# --------------------------------------------------------------------------- index synthesis


def uuid_seed(uuid: str) -> int:
    """The 64-bit seed of a workload's synthesized index structure."""
    return int.from_bytes(hashlib.sha256(uuid.encode("utf-8")).digest()[:8], "little")


def _smallest(words: np.ndarray, count: int) -> np.ndarray:
    """Positions of the `count` smallest words, ordered by (word, position): deterministic."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if count < words.size:
        cand = np.argpartition(words, count - 1)[:count]
        # Any word equal to the count-th smallest could be at the boundary: take them all, then order.
        kth = words[cand].max()
        cand = np.union1d(cand[words[cand] < kth], np.flatnonzero(words == kth))
    else:
        cand = np.arange(words.size)
    order = np.lexsort((cand, words[cand]))
    return cand[order][:count].astype(np.int64)


@lru_cache(maxsize=128)
def _kv_layout(uuid: str, batch_size: int, num_kv_indices: int, num_pages: int) -> tuple[np.ndarray, np.ndarray]:
    if num_kv_indices > num_pages:
        raise ValueError(f"workload {uuid}: {num_kv_indices} KV tokens do not fit {num_pages} pages")
    bitgen = np.random.PCG64(uuid_seed(uuid))
    n, b = num_kv_indices, batch_size
    if b <= 1:
        if b == 0 and n:
            raise ValueError(f"workload {uuid}: batch_size 0 with {n} KV tokens")
        cuts = np.zeros(0, dtype=np.int64)
    elif n >= b:
        words = bitgen.random_raw(n - 1)  # one per candidate cut 1..n-1
        cuts = np.sort(_smallest(words, b - 1) + 1)
    else:
        words = bitgen.random_raw(b - 1)
        cuts = np.sort((words % np.uint64(n + 1)).astype(np.int64))
    indptr = np.concatenate(([0], cuts, [n])) if b > 0 else np.zeros(1, dtype=np.int64)
    pages = _smallest(bitgen.random_raw(num_pages), n)
    kv_indptr = indptr.astype(np.int32)
    kv_indices = pages.astype(np.int32)
    kv_indptr.flags.writeable = False
    kv_indices.flags.writeable = False
    return kv_indptr, kv_indices


def kv_layout(workload) -> tuple[np.ndarray, np.ndarray]:
    """The synthesized (kv_indptr [batch_size+1], kv_indices [num_kv_indices]) of a workload, as
    read-only int32 numpy arrays (cached). Depends only on the (published) uuid, batch_size, num_kv_indices
    and num_pages."""
    a = workload.axes  # a scaled-down workload is seeded by the published uuid it was made from
    return _kv_layout(workload.origin or workload.uuid, int(a["batch_size"]), int(a["num_kv_indices"]),
                      int(a["num_pages"]))


def blob_tensors(workload):
    """kv_indptr and kv_indices as this task synthesizes them (the published index files are not carried)."""
    kv_indptr, kv_indices = kv_layout(workload)
    return {"kv_indptr": torch.from_numpy(np.array(kv_indptr)), "kv_indices": torch.from_numpy(np.array(kv_indices))}


def regenerated_from(workload):
    """The published workload whose data this one makes anew (kv_layout's index tensors, not the published blobs): at
    every scale. Its published uuid names the published data, so an export (python -m evoteam.export) gives a workload
    that still carries it a uuid of its own; a scaled-down one has its own already."""
    return workload.origin or workload.uuid


# --------------------------------------------------------------------------- inputs


def make_inputs(workload, generator, device):
    """Fresh random q/caches from `generator` (on `device`); index structure from `kv_layout`."""
    a = workload.axes
    batch_size, num_pages = int(a["batch_size"]), int(a["num_pages"])
    kv_indptr, kv_indices = kv_layout(workload)

    def randn(*shape):
        return torch.randn(shape, generator=generator, device=device, dtype=torch.bfloat16)

    spec = workload.inputs["sm_scale"]
    if spec.type != "scalar":
        raise ValueError(f"workload {workload.uuid}: sm_scale must be a scalar input, got {spec.type!r}")
    sm_scale = float(spec.value)
    return {
        "q_nope": randn(batch_size, NUM_QO_HEADS, HEAD_DIM_CKV),
        "q_pe": randn(batch_size, NUM_QO_HEADS, HEAD_DIM_KPE),
        "ckv_cache": randn(num_pages, PAGE_SIZE, HEAD_DIM_CKV),
        "kpe_cache": randn(num_pages, PAGE_SIZE, HEAD_DIM_KPE),
        "kv_indptr": torch.from_numpy(np.array(kv_indptr)).to(device),
        "kv_indices": torch.from_numpy(np.array(kv_indices)).to(device),
        "sm_scale": sm_scale,
    }


def max_sets(workload):
    """Calls per batch: each takes its own pages from the pool."""
    a = workload.axes
    return max(1, int(a["num_pages"]) // max(1, int(a["num_kv_indices"])))


def refreshed_pages(num_pages, needed):
    """How many pages a batch rewrites: twice the pages its calls read, and at least an eighth of the pool (on the
    full pool, 124k rows: more than the GPU's L2 holds), so that the rows that changed do not give away which pages
    the late kv_indices will name."""
    return min(num_pages, max(2 * needed, num_pages // 8))


def refresh_inputs(workload, sets, generator):
    """Fresh values for the calls of one batch: new queries, new pages (distinct across the calls, so
    no call finds another's rows in a cache) holding fresh rows; the request lengths (kv_indptr) stay.
    The pages rewritten are a larger random set (`refreshed_pages`) that the calls' pages are drawn from."""
    ckv, kpe = sets[0]["ckv_cache"], sets[0]["kpe_cache"]
    device, num_pages = ckv.device, ckv.shape[0]
    tokens = sets[0]["kv_indices"].shape[0]
    rewritten = torch.randperm(num_pages, generator=generator, device=device)[
        :refreshed_pages(num_pages, tokens * len(sets))]
    # drawn in float32 and rounded: the same distribution, a quarter less of a CPU judge's time than drawing bf16
    ckv[rewritten] = torch.randn((rewritten.numel(), PAGE_SIZE, HEAD_DIM_CKV), generator=generator,
                                 device=device).to(torch.bfloat16)
    kpe[rewritten] = torch.randn((rewritten.numel(), PAGE_SIZE, HEAD_DIM_KPE), generator=generator,
                                 device=device).to(torch.bfloat16)
    pick = torch.randperm(rewritten.numel(), generator=generator, device=device)[:tokens * len(sets)]
    pages = rewritten[pick].to(torch.int32).view(len(sets), tokens)
    # every set's queries drawn at once and copied in with one multi-tensor copy (a batch may hold a hundred sets)
    for name in ("q_nope", "q_pe"):
        fresh = torch.randn((len(sets), *sets[0][name].shape), generator=generator, device=device).to(torch.bfloat16)
        torch._foreach_copy_([inputs[name] for inputs in sets], list(fresh.unbind(0)))
    torch._foreach_copy_([inputs["kv_indices"] for inputs in sets], list(pages.unbind(0)))


def decoy_inputs(workload, inputs, names, generator):
    """Until the clock starts, kv_indices names other random pages."""
    for name in names:
        t = inputs[name]
        num_pages = inputs["ckv_cache"].shape[0]
        t.copy_(torch.randint(0, num_pages, t.shape, generator=generator, device=t.device, dtype=torch.int32))


# --------------------------------------------------------------------------- traffic floor


def min_bytes(workload, inputs):
    """Compulsory device-memory traffic: the queries, each KV row named by kv_indices once, the
    index arrays, and the outputs. (The rest of the ~1.1 GB pool is never read.)"""
    batch = inputs["q_nope"].shape[0]
    tokens = inputs["kv_indices"].shape[0]
    q = batch * NUM_QO_HEADS * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    kv = tokens * PAGE_SIZE * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    index = (tokens + batch + 1) * 4
    out = batch * NUM_QO_HEADS * (HEAD_DIM_CKV * 2 + 4)
    return q + kv + index + out


def workload_group(workload):
    """Workloads fall in three groups by batch size (1, 16, 64): what a kernel must do differs."""
    return f"batch{workload.axes['batch_size']}"
