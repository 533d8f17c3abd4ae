"""A Mixtral-shaped mixture-of-experts layer for tests/gpu/test_moe_gpu.py (a model spec:
`tests/gpu/moe_cases.py:mixtral_moe_layer`): transformers' MixtralSparseMoeBlock at Mixtral
8x7B's sizes (hidden 4096, experts' intermediate 14336, 8 experts, top-2), bf16, with the
token count T dynamic in 1..2048 (decode to a 2,048-token prefill)."""
from __future__ import annotations

import math
import os

import torch

HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, MAX_TOKENS = 4096, 14336, 8, 2, 2048
if os.environ.get("AOTPACK_TEST_MOE") == "small":  # a quarter of the widths: 16x fewer
    HIDDEN, INTERMEDIATE = 1024, 3584  # weight bytes, for a short device call


class MoeLayer(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, hidden):
        out = self.block(hidden)
        return out[0] if isinstance(out, tuple) else out


def _block(hidden, intermediate, experts, top_k):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    cfg = MixtralConfig(hidden_size=hidden, intermediate_size=intermediate,
                        num_local_experts=experts, num_experts_per_tok=top_k,
                        experts_implementation="grouped_mm")  # a bare block defaults to a
    # loop over the experts hit (data-dependent shapes torch.export cannot trace)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # 1.4 G parameters: never materialised in f32
    try:
        block = MixtralSparseMoeBlock(cfg)
    finally:
        torch.set_default_dtype(default)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # the block's parameters are torch.empty: N(0, 1/fan_in)
        for name, p in sorted(block.named_parameters()):
            fan_in = p.shape[-1]
            for chunk in p.view(-1, p.shape[-1]).split(4096):
                chunk.copy_(torch.randn(chunk.shape, generator=gen) / math.sqrt(fan_in))
    return MoeLayer(block).eval()


def mixtral_moe_layer():
    model = _block(HIDDEN, INTERMEDIATE, EXPERTS, TOP_K)
    hidden = torch.randn(1, 16, HIDDEN, generator=torch.Generator().manual_seed(1))
    tokens = torch.export.Dim("T", min=1, max=MAX_TOKENS)
    return model, (hidden.to(torch.bfloat16),), ({1: tokens},)
