"""The models of issue 15's proof (benchmarks/bench_models.py): real families at real sizes,
each a build spec (`benchmarks/coverage_models.py:NAME`) and the inputs it is measured at.

- bert_base_padded: BERT-base (12 layers, hidden 768), a padded batch of 8 x 128 whose
  `attention_mask` comes from real lengths (the masked attention kernel).
- t5_base_encoder: T5-base's encoder (12 layers, relative-position bias), 8 x 256, padded.
- gemma2_block: two Gemma-2-2B layers (hidden 2304, head dim 256, GQA 8/4, logit soft cap,
  one sliding-window and one global layer), 1 x 2048 tokens, eager attention (sdpa has no
  soft cap).
- mixtral_moe: tests/gpu/moe_cases.py's Mixtral-8x7B MoE layer (8 experts of 14336, top-2),
  one bundle for 1..2048 tokens, measured at decode (1 token) and prefill (2,048).
- mpnet_base_padded, bloom_padded: attention with a per-head bias beside the mask (relative
  positions; ALiBi through BLOOM's 3-D baddbmm) (not measured yet: added 2026-12-03 after
  the session's device time).

Weights are drawn from a seeded generator in name order (tests/gpu/model_cases.py's _seeded:
norm scales ~1, the rest N(0, 0.02)), bf16, so every contender runs the same numbers.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))

from model_cases import FirstOutput, WithMask, _seeded  # noqa: E402  (the GPU suite's)

BATCH_LENGTHS = (128, 97, 64, 120, 33, 128, 80, 111)  # bert: real lengths of a padded batch
T5_LENGTHS = (256, 190, 77, 256, 31, 144, 256, 208)


def _ids_and_mask(lengths, seq: int, vocab: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (len(lengths), seq), generator=gen)
    mask = (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def bert_base_padded():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(attn_implementation="sdpa")  # bert-base-uncased's sizes
    model = _seeded(WithMask(BertModel(cfg, add_pooling_layer=False)))
    return model, _ids_and_mask(BATCH_LENGTHS, 128, cfg.vocab_size)


def t5_base_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12,
                   vocab_size=32128, feed_forward_proj="relu")  # t5-base
    model = _seeded(WithMask(T5EncoderModel(cfg)))
    return model, _ids_and_mask(T5_LENGTHS, 256, cfg.vocab_size)


def gemma2_block():
    from transformers import Gemma2Config, Gemma2Model

    cfg = Gemma2Config(hidden_size=2304, intermediate_size=9216, num_attention_heads=8,
                       num_key_value_heads=4, head_dim=256, num_hidden_layers=2,
                       vocab_size=4096, sliding_window=1024, query_pre_attn_scalar=256,
                       attn_logit_softcapping=50.0, use_cache=False,
                       attn_implementation="eager")  # gemma-2-2b's layer sizes
    # (a window of 1,024, not 4,096, so the 2,048-token input sees it)
    ids = torch.randint(3, cfg.vocab_size, (1, 2048), generator=torch.Generator().manual_seed(1))
    return _seeded(FirstOutput(Gemma2Model(cfg))), (ids,)


def mpnet_base_padded():
    """MPNet-base (all-mpnet-base-v2's encoder): a relative-position bias per head beside the
    padding mask (the kernel's bias and mask operands), a padded batch of 8 x 128."""
    from transformers import MPNetConfig, MPNetModel

    cfg = MPNetConfig(vocab_size=30527)  # mpnet-base's sizes
    model = _seeded(WithMask(MPNetModel(cfg, add_pooling_layer=False)))
    return model, _ids_and_mask(BATCH_LENGTHS, 128, cfg.vocab_size)


def bloom_padded():
    """BLOOM-560m's layer sizes (hidden 1024, 16 heads), 4 layers, a small vocabulary: ALiBi
    through baddbmm beside the causal + padding mask, a padded batch of 4 x 512."""
    from transformers import BloomConfig, BloomModel

    cfg = BloomConfig(hidden_size=1024, n_head=16, n_layer=4, vocab_size=4096, use_cache=False)
    model = _seeded(WithMask(BloomModel(cfg)))
    return model, _ids_and_mask((512, 301, 448, 77), 512, cfg.vocab_size)


def mixtral_moe():
    from moe_cases import mixtral_moe_layer

    return mixtral_moe_layer()


def mixtral_points():
    """The token counts the MoE bundle is measured at: decode and a 2,048-token prefill."""
    from moe_cases import HIDDEN

    gen = torch.Generator().manual_seed(2)
    return {f"T={t}": (torch.randn(1, t, HIDDEN, generator=gen).to(torch.bfloat16),)
            for t in (1, 2048)}


MODELS = ("bert_base_padded", "t5_base_encoder", "gemma2_block", "mixtral_moe",
          "mpnet_base_padded", "bloom_padded")
