"""Causal LMs for the generation benchmark (benchmarks/bench_generate.py): transformers'
LlamaForCausalLM at the real shapes of Llama-3.2-1B and Llama-3-8B, with seeded random weights
(no download), and a tiny one for CPU tests.

Factories for `aotpack build --task text-generation` and `scripts/make-weights`:

    benchmarks/generate_models.py:llama32_1b | :llama3_8b | :tiny

each returning (model, (example_ids,)). The same seed gives the same weights, bit for bit, on
any machine: the bundle is built on a host without a GPU with external weights, and the GPU
machine makes the weights again from the factory (the runtime checks every weight's sha256).

How the weights are made, and why:
- the model is built on the meta device, then given uninitialised CPU storage in its final
  dtype: an 8B model never exists in float32 (32 GB; the build host has 24 GB);
- each parameter is drawn from its own generator, seeded from (seed, its name), so the
  parameters can be drawn in parallel threads (torch releases the GIL) in any order;
- the draw is integers (torch.randint on int16: a serial Mersenne-Twister loop, about ten
  times faster than rand/randn on the CPU, whose float paths may also differ by CPU
  instruction set) scaled by a power of two: int16 -> dtype rounds the same way everywhere,
  and the power-of-two scale is exact. Matrices get uniform values in [-2^-5, 2^-5) (std
  0.018, as N(0, 0.02) initialisation); norm scales 1 + the same.
"""
from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

EXAMPLE_PROMPT_LEN = 8


@dataclass(frozen=True)
class LlamaShape:
    """The facts of a model that set its size and its KV cache."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    rope_theta: float = 500000.0
    max_positions: int = 8192
    rope_scaling: dict = field(default_factory=dict)  # extra rope_parameters (llama3 scaling)
    bos: int = 128000
    eos: int = 128001

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

SHAPES = {
    # meta-llama/Llama-3.2-1B's config.json
    "llama32_1b": LlamaShape(2048, 16, 32, 8, 8192, 128256, tied=True, max_positions=131072,
                             rope_scaling=LLAMA3_SCALING),
    # meta-llama/Meta-Llama-3-8B's config.json
    "llama3_8b": LlamaShape(4096, 32, 32, 8, 14336, 128256, tied=False),
    # a CPU stand-in: the same architecture (GQA) in milliseconds; untied, as Llama-3-8B: a
    # tied random model this small only repeats its last token (its logits are dominated by
    # the token's own embedding), which would make the greedy checks vacuous
    "tiny": LlamaShape(64, 2, 4, 2, 128, 512, tied=False, max_positions=4096, bos=1, eos=2),
}

# the parameter counts of the real checkpoints (tests check the shapes against them)
REAL_PARAMS = {"llama32_1b": 1_235_814_400, "llama3_8b": 8_030_261_248}


def config(name: str, dtype=None):
    """transformers' LlamaConfig of SHAPES[name] (sdpa attention)."""
    from transformers import LlamaConfig

    s = SHAPES[name]
    cfg = LlamaConfig(
        hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads, intermediate_size=s.intermediate, vocab_size=s.vocab,
        head_dim=s.head_dim, tie_word_embeddings=s.tied, max_position_embeddings=s.max_positions,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", **s.rope_scaling,
                                            "rope_theta": s.rope_theta},
        bos_token_id=s.bos, eos_token_id=s.eos, attn_implementation="sdpa")
    if dtype is not None:
        cfg.dtype = dtype
    return cfg


def meta_model(name: str):
    """The model on the meta device (no storage): shapes and parameter counts, instantly."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(config(name))


def param_count(model) -> int:
    """Parameters counted once each (tied embeddings are one tensor)."""
    return sum(p.numel() for p in model.parameters())


def param_seed(seed: int, name: str) -> int:
    """A parameter's own generator seed: the CRC-32 of (model seed, its name), stable across
    Python processes (unlike hash()). 32 bits: torch's CPU generator keeps only the low 32
    bits of a seed."""
    return zlib.crc32(f"{seed}/{name}".encode())


def fill_param(param, seed: int, name: str) -> None:
    """Fill `param` in place with its deterministic values (see the module docstring)."""
    import torch

    gen = torch.Generator().manual_seed(param_seed(seed, name))
    draw = torch.randint(-2 ** 15, 2 ** 15, (param.numel(),), generator=gen, dtype=torch.int16)
    with torch.no_grad():
        flat = param.view(-1)
        flat.copy_(draw)  # int16 -> dtype: exact in float32, round-to-nearest-even in bf16
        flat.mul_(2.0 ** -20)  # a power of two: exact
        if _is_norm_scale(name, param):
            flat.add_(1.0)


def _is_norm_scale(name: str, param) -> bool:
    return param.ndim == 1 and name.endswith("norm.weight")


def build(name: str, seed: int = 0, dtype=None, threads: int | None = None):
    """LlamaForCausalLM of SHAPES[name] on the CPU in `dtype` (default bf16), seeded weights,
    eval mode."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    dtype = dtype or torch.bfloat16
    cfg = config(name, dtype)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype)  # still meta: casts no data
    model.to_empty(device="cpu")
    # to_empty makes new parameters: the tied head would get its own (uninitialised) copy
    model.tie_weights()
    if cfg.tie_word_embeddings and model.lm_head.weight is not model.model.embed_tokens.weight:
        raise RuntimeError("tie_weights() did not tie lm_head to embed_tokens")
    # non-persistent buffers (the rotary frequencies) are computed at construction: to_empty
    # left them uninitialised, so make them again, on the CPU, in float32 as transformers does
    model.model.rotary_emb = LlamaRotaryEmbedding(config=cfg)
    others = [n for n, _ in model.named_buffers() if not n.startswith("model.rotary_emb.")]
    if others:
        raise RuntimeError(f"buffers this factory does not know how to initialise: {others}")
    params = sorted(model.named_parameters())  # named_parameters lists a tied tensor once
    workers = threads or min(len(params), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda item: fill_param(item[1], seed, item[0]), params))
    return model.requires_grad_(False).eval()


def fingerprint(model) -> str:
    """sha256 over every parameter's bytes in name order: two machines made the same weights
    iff their fingerprints agree (bench_generate.py records it)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def example_ids(name: str, batch: int = 1, seq: int = EXAMPLE_PROMPT_LEN):
    import torch

    vocab = SHAPES[name].vocab
    gen = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)


def _factory(name: str, seed: int = 0, dtype=None):
    return build(name, seed, dtype), (example_ids(name),)


# ------------------------------------------------------------------------------- factories
def llama32_1b(seed: int = 0):
    """Llama-3.2-1B's shape: 16 layers, d=2048, GQA 32/8 heads of 64, ffn 8192, vocab 128256,
    tied embeddings, rope theta 500000 with llama3 scaling; bf16, 1.24 B parameters."""
    return _factory("llama32_1b", seed)


def llama3_8b(seed: int = 0):
    """Llama-3-8B's shape: 32 layers, d=4096, GQA 32/8 heads of 128, ffn 14336, vocab 128256,
    untied head, rope theta 500000; bf16, 8.03 B parameters (16 GB)."""
    return _factory("llama3_8b", seed)


def tiny(seed: int = 0):
    """A CPU stand-in (2 layers, d=64, GQA 4/2, vocab 512, untied) in float32: CPU bf16 is
    slow and not what CPU tests check."""
    import torch

    return _factory("tiny", seed, torch.float32)


FACTORIES = {"llama32_1b": llama32_1b, "llama3_8b": llama3_8b, "tiny": tiny}
