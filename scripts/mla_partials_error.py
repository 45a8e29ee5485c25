"""How far the MLA champion's split-KV arithmetic lands from the task's reference, with its pieces' partial outputs
stored in bf16, fp16 or fp32: the tail that makes an element fail flashinfer-bench's rule (|err| > 1e-2 and
|err| > 1e-2 |ref|, both outputs in bf16).

An emulation in PyTorch on the CPU, operation for operation as kernels/mla_decode/flashdecode_triton.py computes a
request cut into pieces: logits in fp32 from bf16 operands, a base-2 softmax per piece, the probabilities cast to
bf16 for P @ ckv with fp32 accumulation, each piece's normalised output stored in the partials' dtype, the pieces
merged in fp32 by their lse, the result rounded to bf16. The reference is the task's (softmax(logits) @ ckv, here in
float64, rounded to bf16). An element fails only where the two bf16 values are two or more steps apart; that needs
an error before the last rounding of about one bf16 step (ulp) of the value, so the table counts, over the elements
with |ref| >= 0.5 (below, atol 1e-2 covers any rounding), how many lie more than 1/4, 1/2, 3/4 and 1 ulp off.
fp16 is emulated unscaled: the kernel's power-of-two scale per head row (v1.10, against overflow past 65504)
leaves its relative precision as it is.

    python scripts/mla_partials_error.py [--trials 600] [--tokens 155] [--chunk 48] [--seed 2]

--tokens and --chunk: one request's KV tokens and the champion's piece length (defaults: workload 45be562f's mean
request, batch 64 with 9,945 tokens, cut as the champion cuts it on an H100: about 48 tokens a piece).
"""

from __future__ import annotations

import argparse
import math

import torch

HEADS, D_CKV, D_KPE = 16, 512, 64
SM_SCALE = 1.0 / math.sqrt(128 + 64)  # the definition's sm_scale
TAILS = (0.25, 0.5, 0.75, 1.0)


def piece(qn, qp, kc, kp):
    """One piece: its normalised output (fp32, before it is stored) and base-2 lse."""
    logits = (qn @ kc.T + qp @ kp.T) * (SM_SCALE * math.log2(math.e))
    m = logits.max(-1, keepdim=True).values
    p = torch.exp2(logits - m)
    l_sum = p.sum(-1, keepdim=True)
    acc = p.to(torch.bfloat16).float() @ kc  # probabilities cast to bf16, as flash attention does
    return acc / l_sum, (m + torch.log2(l_sum)).squeeze(-1)


def merged(parts, partials: torch.dtype) -> torch.Tensor:
    if len(parts) == 1:  # a request in one piece is finished on the spot: no partial stored
        return parts[0][0]
    lses = torch.stack([lse for _, lse in parts])
    w = torch.exp2(lses - lses.max(0).values)
    w = w / w.sum(0)
    return sum(w[i][:, None] * out.to(partials).float() for i, (out, _) in enumerate(parts))


def trial(tokens: int, chunk: int, dtypes: dict[str, torch.dtype]) -> dict[str, tuple[list[int], int]]:
    bf = lambda *shape: torch.randn(*shape).bfloat16().float()  # noqa: E731 - the task's inputs: N(0, 1) in bf16
    qn, qp, kc, kp = bf(HEADS, D_CKV), bf(HEADS, D_KPE), bf(tokens, D_CKV), bf(tokens, D_KPE)
    exact = torch.softmax(((qn @ kc.T + qp @ kp.T) * SM_SCALE).double(), -1) @ kc.double()
    ref = exact.bfloat16().double()
    big = exact.abs() >= 0.5
    ulp = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(1e-30)))) / 128  # bf16's step at the value
    parts = [piece(qn, qp, kc[s:s + chunk], kp[s:s + chunk]) for s in range(0, tokens, chunk)]
    out = {}
    for name, dtype in dtypes.items():
        before = merged(parts, dtype).double()
        off = ((before - exact).abs() / ulp)[big]
        final = before.float().bfloat16().double()
        err = (final - ref).abs()
        fails = int(((err > 1e-2) & (err > 1e-2 * ref.abs())).sum())
        out[name] = ([int((off > t).sum()) for t in TAILS], fails)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=600, help="requests drawn (default 600)")
    ap.add_argument("--tokens", type=int, default=155, help="KV tokens a request (default 155)")
    ap.add_argument("--chunk", type=int, default=48, help="tokens a piece (default 48)")
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    tails = {k: [0] * len(TAILS) for k in dtypes}
    fails = dict.fromkeys(dtypes, 0)
    for _ in range(args.trials):
        for name, (counts, failed) in trial(args.tokens, args.chunk, dtypes).items():
            tails[name] = [a + b for a, b in zip(tails[name], counts)]
            fails[name] += failed
    print(f"{args.trials} requests of {args.tokens} tokens in pieces of {args.chunk}, seed {args.seed}: elements with "
          f"|ref| >= 0.5 more than k bf16 steps off before the last rounding, and elements failing the rule")
    print(f"{'partials':9} " + " ".join(f"{'> ' + str(t) + ' ulp':>11}" for t in TAILS) + f" {'failing':>8}")
    for name in dtypes:
        print(f"{name:9} " + " ".join(f"{n:>11}" for n in tails[name]) + f" {fails[name]:>8}")


if __name__ == "__main__":
    main()
