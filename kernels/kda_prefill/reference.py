"""Exact fp32 reference for KDA (Kimi Delta Attention) chunked prefill, fused from raw inputs.

Per sequence n (tokens cu_seqlens[n] .. cu_seqlens[n+1]-1) and head h, with S a [K, V] fp32 state
that starts at initial_state[n, h] (zeros when has_initial_state is false; initial_state is then
not read at all):

    q_t <- q_t / sqrt(sum(q_t^2) + 1e-6) * scale            (L2 norm over K, fla's l2norm eps)
    k_t <- k_t / sqrt(sum(k_t^2) + 1e-6)
    x_t  = g_raw_t + dt_bias[h*K:(h+1)*K]
    g_t  = -exp(A_log[h]) * softplus(x_t)                    (softplus gate, Kimi-Linear)
         | lower_bound * sigmoid(exp(A_log[h]) * x_t)        (bounded gate, bounded_gate = true)
    b_t  = sigmoid(beta_logits_t)
    S    <- diag(exp(g_t)) S                                 (decay first)
    S    <- S + k_t (b_t (v_t - S^T k_t))^T                   (delta rule on the decayed state)
    o_t  = S^T q_t                                           (read out after the update)

final_state[n, h] = S after the sequence's last token, in fp32 and [K, V] layout (fla's layout;
vLLM keeps [V, K]). This is fla's `naive_recurrent_kda` (fla/ops/kda/naive.py) applied to the
outputs of its gate (fla/ops/kda/gate.py: naive_kda_gate / naive_kda_lowerbound_gate), its
l2norm (fla/modules/l2norm.py) and sigmoid(beta); everything here is computed in fp32 from the
bf16 inputs, with no intermediate rounding to bf16.
"""

import torch
import torch.nn.functional as F


def run(q, k, v, g_raw, beta_logits, A_log, dt_bias, initial_state, cu_seqlens,
        scale, bounded_gate, lower_bound, has_initial_state):
    T, H, K = q.shape
    V = v.shape[-1]
    N = cu_seqlens.numel() - 1
    scale = float(scale)
    f32 = torch.float32

    def l2norm(x):
        x = x.to(f32)
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    qn = l2norm(q) * scale                                    # [T, H, K]
    kn = l2norm(k)                                            # [T, H, K]
    x = g_raw.to(f32) + dt_bias.to(f32).view(H, K)            # [T, H, K]
    a = A_log.to(f32).exp().view(H, 1)
    if bool(bounded_gate):
        g = float(lower_bound) * torch.sigmoid(a * x)
    else:
        g = -a * F.softplus(x)
    decay = g.exp()                                           # [T, H, K]
    beta = torch.sigmoid(beta_logits.to(f32))                 # [T, H]
    vf = v.to(f32)                                            # [T, H, V]

    # The sequences walk side by side, one token of each per step: sorted longest first, the ones still running at
    # step i are a prefix (a slice, no masking), so every element sees exactly the per-token arithmetic above. On
    # batched workloads this takes the longest sequence's length in steps instead of the total tokens.
    o = torch.empty(T, H, V, dtype=f32, device=q.device)
    final_state = torch.empty(N, H, K, V, dtype=f32, device=q.device)
    bounds = cu_seqlens.to("cpu", torch.int64).tolist()
    lengths = [bounds[n + 1] - bounds[n] for n in range(N)]
    order = sorted(range(N), key=lambda n: -lengths[n])
    if bool(has_initial_state):
        S = initial_state[order].to(f32).clone()              # [N, H, K, V], longest sequence first
    else:
        S = torch.zeros(N, H, K, V, dtype=f32, device=q.device)
    steps = lengths[order[0]] if N else 0
    # token index of each running sequence at each step (-1 past its end; never read: the slices stop before)
    tokens = torch.full((steps, N), -1, dtype=torch.int64)
    for j, n in enumerate(order):
        tokens[:lengths[n], j] = torch.arange(bounds[n], bounds[n + 1])
    tokens = tokens.to(q.device)
    running = [sum(1 for n in order if lengths[n] > i) for i in range(steps)]
    for i in range(steps):
        c = running[i]
        t = tokens[i, :c]
        s = S[:c] * decay[t][:, :, :, None]
        kt = kn[t][:, :, :, None]
        kS = (kt * s).sum(2)                                  # S^T k: [c, H, V]
        u = beta[t][:, :, None] * (vf[t] - kS)                # [c, H, V]
        s = s + kt * u[:, :, None, :]
        o[t] = (qn[t][:, :, :, None] * s).sum(2)              # S^T q: [c, H, V]
        S[:c] = s
    final_state[order] = S
    return o.to(torch.bfloat16), final_state
