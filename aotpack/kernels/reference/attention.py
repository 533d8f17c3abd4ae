"""Torch reference of AttentionOp (causal mask aligned to the top-left, GQA by head groups)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import AttentionOp


def reference(op: AttentionOp, env) -> None:
    import torch

    q, k, v = (view(env, t) for t in (op.q, op.k, op.v))
    mask = view(env, op.mask) if op.mask is not None else None
    if op.kv_limit is not None:
        seen = positional_mask(view(env, op.kv_limit), op.window, k.shape[2])
        mask = seen if mask is None else (seen & mask.bool() if mask.dtype == torch.bool
                                          else mask.float().masked_fill(~seen, float("-inf")))
    bias = view(env, op.bias) if op.bias is not None else None
    write(env, op.out, attend(q, k, v, op.scale, op.causal, mask, op.softcap, bias))


def attend(q, k, v, scale: float, causal: bool, mask=None, softcap: float = 0.0, bias=None):
    """Attention in f32 (GQA by head groups; mask bool, True seen, or added; bias added), a
    row that sees no key giving zeros as torch's scaled_dot_product_attention does, not NaN."""
    import torch

    q, k, v = q.float(), k.float(), v.float()
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = capped((q @ k.transpose(-1, -2)) * scale, softcap)
    if causal:
        s, t = scores.shape[-2:]
        seen = torch.ones(s, t, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~seen, float("-inf"))
    if mask is not None:
        scores = (scores.masked_fill(~mask.bool(), float("-inf")) if mask.dtype == torch.bool
                  else scores + mask.float())
    if bias is not None:
        scores = scores + bias.float()
    seen = (scores != float("-inf")).any(-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1) * seen
    return probs @ v


def capped(scores, softcap: float):
    """softcap * tanh(scores / softcap) (Gemma-2's attention logits), or scores if 0."""
    import torch

    return softcap * torch.tanh(scores / softcap) if softcap > 0 else scores


def positional_mask(positions, window: int, keys: int):
    """bool [B, 1, S, T]: key t seen by query (b, s) iff t <= positions[b, s] (and within the
    window)."""
    import torch

    t = torch.arange(keys, device=positions.device).view(1, 1, 1, -1)
    at = positions.long().unsqueeze(1).unsqueeze(-1)
    seen = t <= at
    return seen & (t > at - window) if window > 0 else seen
