"""CPU check of kernels/mla_decode/pipelined_mma.cu's index math (no GPU needed).

1. Fragment layouts: replays the kernel's ldmatrix lane addresses (bytes, as written in the .cu) against the PTX
   ISA's definitions of ldmatrix (.x4, .trans) and mma.m16n8k16 (row.col, bf16) on a model of shared memory, and
   checks S = Q K^T (both halves of the dims summed) and O = P V against numpy.
2. The work split: for each workload shape of workloads.jsonl and random request lengths (empty ones among
   them), the kernel's loop (equal token ranges per CTA, cut at request boundaries into segments) covers every
   token exactly once, writes every empty request once, and gives each request's n segments distinct, consecutive
   workspace slots below grid + batch (the slots the merge reads).
Run: python scripts/mla_pipelined_mma_layout_check.py (tests/test_mla_pipelined_mma.py runs both checks)
"""

import json
import pathlib

import numpy as np

H, DC, DP = 16, 512, 64
D = DC + DP
TILE, WARPS = 32, 8
LDK = D + 8
ROW = LDK * 2
LDP = TILE + 8
KHALF = D // 16 // 2
NT = 8
rng = np.random.default_rng(0)
ROOT = pathlib.Path(__file__).resolve().parent.parent


def ldmatrix_x4(mem, addrs, trans=False):
    """mem: bf16 elements indexed by byte address // 2; addrs[lane]: the row address lane gives.
    Returns regs[lane][i] = two elements (lo, hi)."""
    regs = np.zeros((32, 4, 2))
    for i in range(4):
        rows = [mem[addrs[8 * i + r] // 2 : addrs[8 * i + r] // 2 + 8] for r in range(8)]
        mat = np.array(rows)  # 8 x 8 of matrix i
        for lane in range(32):
            g, t = lane // 4, lane % 4
            if trans:
                regs[lane, i] = [mat[2 * t, g], mat[2 * t + 1, g]]
            else:
                regs[lane, i] = [mat[g, 2 * t], mat[g, 2 * t + 1]]
    return regs


def mma(acc, a, b0, b1):
    """acc[lane][4], a[lane][4][2], b0/b1[lane][2]: D = A B + C per the PTX fragment layout."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        A[g, 2 * t : 2 * t + 2] = a[lane, 0]
        A[g + 8, 2 * t : 2 * t + 2] = a[lane, 1]
        A[g, 2 * t + 8 : 2 * t + 10] = a[lane, 2]
        A[g + 8, 2 * t + 8 : 2 * t + 10] = a[lane, 3]
        B[2 * t : 2 * t + 2, g] = b0[lane]
        B[2 * t + 8 : 2 * t + 10, g] = b1[lane]
    C = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc[lane] += [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]


def check_layouts():
    # shared memory model: [kv tile | q | p], byte offsets as in the kernel (one stage is enough)
    kv_base, q_base = 0, TILE * ROW
    p_base = q_base + H * ROW
    mem = np.full((p_base + H * LDP * 2) // 2, np.nan)
    K = rng.standard_normal((TILE, D))
    Q = rng.standard_normal((H, D))
    P = rng.standard_normal((H, TILE))
    for r in range(TILE):
        mem[(kv_base + r * ROW) // 2 : (kv_base + r * ROW) // 2 + D] = K[r]
    for h in range(H):
        mem[(q_base + h * ROW) // 2 : (q_base + h * ROW) // 2 + D] = Q[h]
    for h in range(H):
        mem[(p_base + h * LDP * 2) // 2 : (p_base + h * LDP * 2) // 2 + TILE] = P[h]
    lanes = np.arange(32)
    # S: warp w -> tokens 8 (w % 4), dims half w // 4; halves summed (s_s)
    S = np.zeros((2, H, TILE))
    for w in range(WARPS):
        s_nt, s_kh = w & 3, w >> 2
        acc = np.zeros((32, 4))
        acc1 = np.zeros((32, 4))
        qa = q_base + (lanes & 15) * ROW + (s_kh * KHALF * 16 + (lanes >> 4) * 8) * 2
        kb = kv_base + (s_nt * 8 + (lanes & 7)) * ROW + (s_kh * KHALF * 16 + (lanes >> 3) * 8) * 2
        for ks in range(0, KHALF, 2):
            bb = ldmatrix_x4(mem, kb + ks * 32)
            a0 = ldmatrix_x4(mem, qa + ks * 32)
            a1 = ldmatrix_x4(mem, qa + (ks + 1) * 32)
            mma(acc, a0, bb[:, 0], bb[:, 1])
            mma(acc1, a1, bb[:, 2], bb[:, 3])
        acc += acc1
        for lane in range(32):
            col = s_nt * 8 + (lane & 3) * 2
            S[s_kh, lane >> 2, col : col + 2] = acc[lane, :2]
            S[s_kh, (lane >> 2) + 8, col : col + 2] = acc[lane, 2:]
    assert np.allclose(S.sum(0), Q @ K.T), "S = Q K^T"
    # O = P V: warp w -> columns 64 w .. 64 w + 63
    out = np.zeros((H, DC))
    for w in range(WARPS):
        o = np.zeros((NT, 32, 4))
        pa = p_base + ((lanes & 15) * LDP + (lanes >> 4) * 8) * 2
        vb = kv_base + ((lanes & 7) + ((lanes >> 3) & 1) * 8) * ROW + (w * 64 + (lanes >> 4) * 8) * 2
        for ks in range(TILE // 16):
            a = ldmatrix_x4(mem, pa + ks * 32)
            for jp in range(NT // 2):
                bv = ldmatrix_x4(mem, vb + ks * 16 * ROW + jp * 32, trans=True)
                mma(o[2 * jp], a, bv[:, 0], bv[:, 1])
                mma(o[2 * jp + 1], a, bv[:, 2], bv[:, 3])
        for j in range(NT):
            for lane in range(32):
                col = w * 64 + (lane & 3) * 2 + j * 8
                out[lane >> 2, col : col + 2] = o[j, lane, :2]
                out[(lane >> 2) + 8, col : col + 2] = o[j, lane, 2:]
    assert np.allclose(out, P @ K[:, :DC]), "O = P V"
    # bank groups of ldmatrix: 8 row addresses of each 8x8 matrix in 8 distinct 16-byte groups of 128 bytes
    for name, stride in (("kv/q rows", ROW), ("p rows", LDP * 2)):
        assert len({(r * stride // 16) % 8 for r in range(8)}) == 8, name
    print("layouts: S = Q K^T and O = P V match; ldmatrix rows conflict-free")


def chunk_for(total, sms, waves=1, min_chunk=2 * TILE):
    return max(min_chunk, -(-total // (waves * sms)))


def segments_of_cta(c, grid, chunk, total, indptr):
    """The kernel's mla_pipelined loop, step for step: [(b, lo, hi, n, first_slot, slot)] of CTA c."""
    batch = len(indptr) - 1
    last = grid - 1

    def owner(x):
        return min(x // chunk, last)

    c0 = c * chunk
    c1 = min(total, c0 + chunk)
    hits = [b for b in range(batch) if indptr[b + 1] >= c0 and (b == 0 or indptr[b] < c0)]
    assert len(hits) == 1, hits  # the kernel's parallel search writes exactly one b
    out = []
    for b in range(hits[0], batch):
        start, end = indptr[b], indptr[b + 1]
        if start > c1:
            break
        if start == end:
            if owner(start) == c:
                out.append((b, 0, 0, 1, 0, 0))
            continue
        lo, hi = max(start, c0), min(end, c1)
        if lo >= hi:
            continue
        first = owner(start)
        n = owner(end - 1) - first + 1
        out.append((b, lo - start, hi - start, n, first + b, c + b))
    return out


def check_split(sms=132):
    rows = [json.loads(line)["workload"]["axes"] for line in (ROOT / "kernels/mla_decode/workloads.jsonl").open()]
    stats = []
    for a in rows:
        B, N = a["batch_size"], a["num_kv_indices"]
        for trial in range(20):
            if B == 1:
                lens = np.array([N])
            else:  # random lengths summing to N, some empty
                cuts = np.sort(rng.integers(0, N + 1, B - 1))
                lens = np.diff(np.concatenate([[0], cuts, [N]]))
                if trial % 2:
                    lens[rng.integers(1, B)] += lens[0]
                    lens[0] = 0  # an empty request
                if trial % 4 == 1:
                    lens[-1] += lens[-2]
                    lens[-2] = 0  # an empty request before the last
                if trial % 4 == 3:
                    lens[-2] += lens[-1]
                    lens[-1] = 0  # an empty request at the very end
            lens = [int(x) for x in lens]
            assert sum(lens) == N
            indptr = [0] + list(np.cumsum(lens).astype(int))
            chunk = chunk_for(N, sms)
            grid = max(1, -(-N // chunk))
            assert grid <= sms
            covered = np.zeros(N, int)
            done = np.zeros(B, int)
            slots = {}
            segs = {}
            most = 0
            for c in range(grid):
                s = segments_of_cta(c, grid, chunk, N, indptr)
                most = max(most, sum(hi - lo for _, lo, hi, *_ in s))
                for b, lo, hi, n, first, slot in s:
                    covered[indptr[b] + lo : indptr[b] + hi] += 1
                    if lens[b] == 0:
                        done[b] += 1
                        continue
                    assert 0 <= slot < grid + B and slot not in slots, (slot, slots)
                    slots[slot] = b
                    segs.setdefault(b, []).append((slot, n, first))
            assert (covered == 1).all(), a
            for b in range(B):
                if lens[b] == 0:
                    assert done[b] == 1, (b, done[b])  # exactly one CTA writes an empty request
                    continue
                ss = segs[b]
                n, first = ss[0][1], ss[0][2]
                assert all(x[1] == n and x[2] == first for x in ss) and len(ss) == n, ss  # tickets: n per request
                assert sorted(x[0] for x in ss) == list(range(first, first + n))  # the merge reads these slots
        stats.append((B, N, chunk, grid, most))
    print("split: every token in one segment, every empty request written once, slots distinct and < grid + batch,")
    print("       each request's n segments in slots first .. first + n - 1: all 47 shapes x 20 length sets")
    print("batch tokens CH grid most-tokens-a-CTA")
    for r in stats:
        print(*r)


if __name__ == "__main__":
    check_layouts()
    check_split()
