import torch


def run(x, lengths, scale):
    """Masked scaled softmax over rows and its log-sum-exp, in fp32."""
    s = x.float() * float(scale)
    cols = torch.arange(x.shape[1], device=x.device)
    valid = cols[None, :] < lengths[:, None].long()
    s = torch.where(valid, s, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for an empty row
    p = torch.where(valid, torch.exp(s - lse[:, None]), 0.0)
    return p.to(torch.bfloat16), lse
