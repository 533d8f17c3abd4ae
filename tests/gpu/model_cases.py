"""Whole models for tests/gpu/test_examples_gpu.py: the examples under examples/ (their own
factories at full size, and their `make_dynamic` at test sizes) and transformers models from
small random-init configs (GPT-2, BERT, ViT, Llama, and Qwen2 and OPT, which no example
covers), each with dims that vary at run time. Every function here is a model spec
(`tests/gpu/model_cases.py:<function>`); `MODELS` lists them with what the tests need."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))

import llama_block  # noqa: E402
import mlp  # noqa: E402


@dataclass(frozen=True)
class ModelCase:
    """`spec`: the model spec (relative to the repository); `dynamic`: whether the bundle must
    have symbols; `cpu_verify`: small enough for the CPU references (the CPU build test)."""

    name: str
    spec: str
    dynamic: bool = True
    cpu_verify: bool = True
    # the oldest torch whose torch.export takes the model's dynamic dims (the H200's torch
    # 2.11 refuses transformers' Llama-family mask code with a dynamic S; bundles are built on
    # the build host, whose torch is newer)
    min_torch: tuple = ()


# ------------------------------------------------------------------------------- examples
def mlp_dynamic():
    """examples/mlp.py's make_dynamic at test sizes: B in 1..8, S in 1..256."""
    return mlp.make_dynamic(max_batch=8, max_seq=256, d=256, f=1024, batch=2, seq=16)


def llama_block_dynamic():
    """examples/llama_block.py's make_dynamic at test sizes (GQA 4/2, head dim 64, causal)."""
    return llama_block.make_dynamic(max_batch=4, max_seq=256, batch=2, seq=16, d=256, heads=4,
                                    kv_heads=2, head_dim=64, ffn=512)


def llama_block_dynamic_d128():
    """The same block with head dim 128 (Llama-3's), B in 1..2, S in 1..1024."""
    return llama_block.make_dynamic(max_batch=2, max_seq=1024, batch=2, seq=16, d=256, heads=2,
                                    kv_heads=1, head_dim=128, ffn=512)


# ------------------------------------------------------------------------- transformers
def _seeded(model, seed: int = 0):
    """Parameters drawn from our own generator in name order (transformers' initialisers
    change between releases): norm scales ~1, everything else N(0, 0.02); bf16, eval."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.02
            p.copy_(draw + 1.0 if p.ndim == 1 and name.endswith("weight") else draw)
    return model.to(torch.bfloat16).eval()


class FirstOutput(torch.nn.Module):
    """forward returns the last hidden state only (tensors, not ModelOutput)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x, return_dict=False)[0]


def _text(model, max_batch: int = 4, max_seq: int = 128):
    ids = torch.randint(2, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    ids[0, 0], ids[0, 1] = 2, 99  # fresh ids are drawn in the example's range
    dims = ({0: torch.export.Dim("B", min=1, max=max_batch),
             1: torch.export.Dim("S", min=1, max=max_seq)},)
    return _seeded(FirstOutput(model)), (ids,), dims


class WithMask(torch.nn.Module):
    """(input_ids, attention_mask) -> the last hidden state: a padded batch, the mask a
    run-time input (the masked attention kernel; causal models keep the causal one)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, ids, mask):
        return self.inner(input_ids=ids, attention_mask=mask, return_dict=False)[0]


def _padded(model, max_batch: int = 4, max_seq: int = 128):
    """Fresh masks are drawn 0/1 per token (the example spans both), so rows are padded
    anywhere, the first token included."""
    ids = torch.randint(2, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    ids[0, 0], ids[0, 1] = 2, 99
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 9:] = 0
    b, s = torch.export.Dim("B", min=1, max=max_batch), torch.export.Dim("S", min=1, max=max_seq)
    return _seeded(WithMask(model)), (ids, mask), ({0: b, 1: s}, {0: b, 1: s})


_SMALL = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
              intermediate_size=256, vocab_size=100, max_position_embeddings=128)


def gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=100, n_positions=128,
                     use_cache=False, attn_implementation="sdpa")
    return _text(GPT2Model(cfg))


def bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(**_SMALL, attn_implementation="sdpa")
    return _text(BertModel(cfg, add_pooling_layer=False))


def llama():
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(**_SMALL, num_key_value_heads=2, use_cache=False,
                      attn_implementation="sdpa")
    return _text(LlamaModel(cfg))


def qwen2():
    """Qwen2: biased q/k/v projections and GQA (no example has them)."""
    from transformers import Qwen2Config, Qwen2Model

    cfg = Qwen2Config(**_SMALL, num_key_value_heads=2, use_cache=False,
                      attn_implementation="sdpa")
    return _text(Qwen2Model(cfg))


def opt():
    """OPT: learned positions with an offset, ReLU MLP, pre-LayerNorm decoder."""
    from transformers import OPTConfig, OPTModel

    cfg = OPTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, ffn_dim=256,
                    vocab_size=100, max_position_embeddings=128, word_embed_proj_dim=128,
                    use_cache=False, attn_implementation="sdpa", pad_token_id=1)
    return _text(OPTModel(cfg))


def bert_padded():
    from transformers import BertConfig, BertModel

    return _padded(BertModel(BertConfig(**_SMALL, attn_implementation="sdpa"),
                             add_pooling_layer=False))


def roberta_padded():
    """Position ids from the ids (ne, cumsum) and the padding mask."""
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(**{**_SMALL, "max_position_embeddings": 132}, pad_token_id=1,
                        attn_implementation="sdpa")
    return _padded(RobertaModel(cfg, add_pooling_layer=False))


def gpt2_padded():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=100, n_positions=128,
                     use_cache=False, attn_implementation="sdpa")
    return _padded(GPT2Model(cfg))


def phi_d80():
    """A head dim that is no power of two (80: Phi-2, StableLM; zero-padded to 128)."""
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=160, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=256, vocab_size=100,
                      max_position_embeddings=128, use_cache=False, attn_implementation="sdpa")
    return _text(LlamaModel(cfg))


def clip_text():
    """CLIP's text tower: causal attention, quick-GELU, pooling at the end token (argmax and a
    row gather); S fixed at 77 as CLIP runs, batch dynamic."""
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, vocab_size=100, max_position_embeddings=77,
                         eos_token_id=2, attn_implementation="sdpa")

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = CLIPTextModel(cfg)

        def forward(self, ids):
            return self.inner(input_ids=ids).pooler_output

    ids = torch.randint(3, 100, (2, 77), generator=torch.Generator().manual_seed(1))
    ids[0, 0], ids[1, 30] = 2, 2  # fresh ids (drawn in the example's range) hold 2 too
    return _seeded(Pooled()), (ids,), ({0: torch.export.Dim("B", min=1, max=16)},)


def vit():
    """A small ViT (32x32 images, 8x8 patches: 17 tokens, head dim 32), batch in 1..64."""
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256, image_size=32, patch_size=8,
                    attn_implementation="sdpa")
    model = _seeded(FirstOutput(ViTModel(cfg, add_pooling_layer=False)))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    return model, (x,), ({0: torch.export.Dim("B", min=1, max=64)},)


def unet_dynamic():
    """examples/conv_nets.py's U-Net (ConvTranspose up, skip cats) in f32 (convs on tf32, as
    cuDNN's) for any batch in 1..4 and sides 16*h, 16*w in 32..128 (derived Dims: the runtime
    reads h, w back). f32: in bf16 its 2-class head has rows of small values whose per-row
    error (bf16 rounding of the batch-norm-folded weights) exceeds the row check's 5 %."""
    import conv_nets

    model, inputs, dims = conv_nets.make_unet_dynamic(max_batch=4, max_side=128)
    return model, inputs, dims


def upsample_dynamic():
    """An FPN-style neck at any image size: a stride-2 conv, then bilinear (x2) and nearest
    (x2) upsampling of dynamic sides added to the skip, f32 (convs on tf32: the rows of a
    narrow image are a few values, too few for the row check in bf16)."""
    import torch.nn.functional as F

    class Neck(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.lat = torch.nn.Conv2d(16, 8, 1)

        def forward(self, x):
            y = self.lat(torch.relu(self.down(x)))
            return (F.interpolate(y, scale_factor=2, mode="bilinear"),
                    x + F.interpolate(y, scale_factor=2, mode="nearest"))

    h, w = (torch.export.Dim(n, min=1, max=48) for n in ("h", "w"))
    x = torch.randn(2, 8, 32, 48, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)  # torch's own init: the convs' outputs are not small next to x
    return (Neck().eval(), (x,),
            ({0: torch.export.Dim("B", min=1, max=4), 2: 2 * h, 3: 2 * w},))


def math_functions():
    """The elementwise functions with kernels of their own (erf, log1p, expm1, sign, rounding)
    and what torch writes with them (Mish, ELU, logsigmoid, softplus), bf16 rows of any count,
    a bidirectional GRU's flip and a min over a dim."""
    import torch.nn.functional as F

    class Math(torch.nn.Module):
        def forward(self, x):
            a = F.mish(x) + F.elu(x) - F.logsigmoid(x) * torch.erf(x)
            b = torch.expm1(x.clamp(max=4)) + torch.log1p(x.abs()) + torch.sign(x)
            c = torch.round(x * 4) + torch.floor(x) - torch.ceil(x) + torch.trunc(x * 3)
            return a + b * c.to(x.dtype), torch.min(x.flip(-1)[:, :50], dim=-1)[0]

    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(1)) * 2
    return (Math(), (x.to(torch.bfloat16),), ({0: torch.export.Dim("R", min=1, max=512)},))


def transformer_f32():
    """torch.nn.TransformerEncoder in f32 (its linears as 1x1 convs on tf32 tensor cores) with a
    run-time padding mask, batch 1..8, and a linear head on the mean. The sequence is static:
    torch 2.11's export refuses it dynamic (a guard min(T, 4T) == T); 2.13's takes it."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.head = encoder, torch.nn.Linear(64, 10)

        def forward(self, x, pad):
            # the first position always attends (random masks would pad whole rows: NaN)
            pad = pad & (torch.arange(x.shape[1], device=x.device) > 0)
            return self.head(self.encoder(x, src_key_padding_mask=pad).mean(1))

    x = torch.randn(2, 12, 64, generator=torch.Generator().manual_seed(1))
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, 9:] = True
    dims = {0: torch.export.Dim("B", min=1, max=8)}
    return Classifier().eval(), (x, pad), (dims, dims)


def gemma2_capped():
    """Gemma-2's eager attention: scores soft-capped (the cap in the attention kernel, masked
    kernel without a mask on the global layer), a sliding window of 6 on the other, GQA. Cap 2
    and scaling 1 (query_pre_attn_scalar) so the cap bends the scores: without it the output
    moves by 20 % (at the config's defaults, 0.3 %: a kernel ignoring the cap would pass).
    Static shapes: torch 2.11 refuses its mask code with a dynamic S."""
    from transformers import Gemma2Config, Gemma2Model

    cfg = Gemma2Config(**_SMALL, num_key_value_heads=2, head_dim=32, sliding_window=6,
                       attn_logit_softcapping=2.0, query_pre_attn_scalar=1, use_cache=False,
                       attn_implementation="eager")
    model, inputs, _ = _text(Gemma2Model(cfg))
    return model, inputs


def bloom_padded():
    """BLOOM's eager attention: ALiBi through baddbmm over [B*H, S, T] scores plus the causal
    and padding mask; the two terms become one f32 mask operand of the masked attention
    kernel (passes/attention_terms.py). Static shapes (the C runtime's dims stay exercised by
    the other cases)."""
    from transformers import BloomConfig, BloomModel

    cfg = BloomConfig(hidden_size=128, n_layer=2, n_head=4, vocab_size=100, use_cache=False)
    model, inputs, _ = _padded(BloomModel(cfg))
    return model, inputs


def mobilenet_v3():
    """MobileNetV3-Large (examples/vision_nets.py) at 96x96, bf16, batch 1..4: depthwise convs
    over 8*odd channels (72, 120, 200, 184: rows whose 16-byte loads need the kernel to know
    the stride divides by 8; they spilled without), squeeze-excitation gates, hardswish."""
    import conv_nets

    model, (x,) = conv_nets.make_vision("mobilenet_v3_large", batch=2, size=96,
                                        source="plain")
    return model, (x,), ({0: torch.export.Dim("B", min=1, max=4)},)


_HERE = "tests/gpu/model_cases.py"
MODELS = [
    ModelCase("mlp_dynamic", f"{_HERE}:mlp_dynamic"),
    ModelCase("llama_block_dynamic", f"{_HERE}:llama_block_dynamic"),
    ModelCase("llama_block_dynamic_d128", f"{_HERE}:llama_block_dynamic_d128"),
    # the examples' own factories, unchanged (full size: GPU only)
    ModelCase("example_mlp", "examples/mlp.py:make_decode", dynamic=False, cpu_verify=False),
    ModelCase("example_llama_block", "examples/llama_block.py:make", dynamic=False,
              cpu_verify=False),
    ModelCase("gpt2", f"{_HERE}:gpt2"),
    ModelCase("bert", f"{_HERE}:bert"),
    ModelCase("vit", f"{_HERE}:vit"),
    ModelCase("llama", f"{_HERE}:llama", min_torch=(2, 13)),
    ModelCase("qwen2", f"{_HERE}:qwen2", min_torch=(2, 13)),
    ModelCase("opt", f"{_HERE}:opt"),
    ModelCase("bert_padded", f"{_HERE}:bert_padded"),
    ModelCase("roberta_padded", f"{_HERE}:roberta_padded"),
    ModelCase("gpt2_padded", f"{_HERE}:gpt2_padded"),
    ModelCase("phi_d80", f"{_HERE}:phi_d80"),
    ModelCase("clip_text", f"{_HERE}:clip_text"),
    ModelCase("unet_dynamic", f"{_HERE}:unet_dynamic"),
    ModelCase("upsample_dynamic", f"{_HERE}:upsample_dynamic"),
    ModelCase("math_functions", f"{_HERE}:math_functions"),
    ModelCase("transformer_f32", f"{_HERE}:transformer_f32"),
    ModelCase("mobilenet_v3", f"{_HERE}:mobilenet_v3", cpu_verify=False),  # 1 min on 2 cores
    ModelCase("gemma2_capped", f"{_HERE}:gemma2_capped", dynamic=False),
    ModelCase("bloom_padded", f"{_HERE}:bloom_padded", dynamic=False),
]
