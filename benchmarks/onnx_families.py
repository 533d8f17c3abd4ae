"""transformers GPT-2, BERT, Llama and ViT exported to ONNX the way a user does, beside the same
module for the PyTorch front door: the CPU tests (tests/test_onnx_models.py) and the H200
comparison (benchmarks/onnx_vs_torch.py) share them.

Export path: `torch.onnx.export(..., dynamo=False)` (the TorchScript exporter: it needs no
onnxscript, which the H200 host lacks). transformers' mask code calls torch.diff (no ONNX
symbolic) when no attention mask is given, so the wrapper passes an all-ones mask made from
the ids, as a tokenizer's output would; the mask then folds at build time. Attention is
exported as written by `attn_implementation` ("eager": MatMul-Softmax-MatMul; "sdpa": the
exporter's own expansion with its NaN guard), both fused into the attention kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# (layers, hidden, heads, ffn, vocab, positions) per size: "tiny" for CPU tests, "real" at the
# models' real widths with fewer layers for the H200 comparison
SIZES = {
    "tiny": dict(layers=2, hidden=64, heads=4, ffn=128, vocab=100, positions=64, image=32,
                 patch=8),
    "real": dict(layers=4, hidden=768, heads=12, ffn=3072, vocab=50257, positions=1024,
                 image=224, patch=16),
}


@dataclass
class Family:
    name: str
    module: torch.nn.Module  # what is exported: one input tensor -> one output tensor
    example: torch.Tensor
    input_name: str

    def torch_module(self) -> torch.nn.Module:
        """The same weights as the PyTorch front door takes them: no mask argument (the
        torch frontend reads transformers' own mask code) and sdpa attention."""
        inner = self.module.inner
        inner.set_attn_implementation("sdpa")
        return _Plain(inner).eval()


class _Plain(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)[0]


class _Text(torch.nn.Module):
    """ids -> last hidden state, with the all-ones mask a tokenizer gives."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        mask = torch.ones_like(input_ids)
        return self.inner(input_ids=input_ids, attention_mask=mask, use_cache=False
                          ).last_hidden_state


class _Bert(_Text):
    def forward(self, input_ids):
        return self.inner(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)
                          ).last_hidden_state


class _Vision(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, pixel_values):
        return self.inner(pixel_values=pixel_values).last_hidden_state


def make(name: str, size: str = "tiny", batch: int = 2, seq: int = 16,
         attn: str = "eager") -> Family:
    import transformers

    s = SIZES[size]
    torch.manual_seed(0)
    common = dict(attn_implementation=attn)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=s["layers"], n_embd=s["hidden"], n_head=s["heads"],
                                      n_inner=s["ffn"], vocab_size=s["vocab"],
                                      n_positions=s["positions"], **common)
        module = _Text(transformers.GPT2Model(cfg))
    elif name == "bert":
        cfg = transformers.BertConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                      num_attention_heads=s["heads"],
                                      intermediate_size=s["ffn"], vocab_size=s["vocab"],
                                      max_position_embeddings=s["positions"], **common)
        module = _Bert(transformers.BertModel(cfg, add_pooling_layer=False))
    elif name == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                       num_attention_heads=s["heads"],
                                       num_key_value_heads=max(1, s["heads"] // 2),
                                       intermediate_size=s["ffn"], vocab_size=s["vocab"],
                                       max_position_embeddings=s["positions"], **common)
        module = _Text(transformers.LlamaModel(cfg))
    elif name == "vit":
        cfg = transformers.ViTConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                     num_attention_heads=s["heads"],
                                     intermediate_size=s["ffn"], image_size=s["image"],
                                     patch_size=s["patch"], **common)
        module = _Vision(transformers.ViTModel(cfg, add_pooling_layer=False))
        example = torch.randn(batch, 3, s["image"], s["image"])
        return Family(name, module.eval(), example, "pixel_values")
    else:
        raise ValueError(f"unknown family {name!r}")
    example = torch.randint(0, s["vocab"], (batch, seq))
    return Family(name, module.eval(), example, "input_ids")


class WithMask(torch.nn.Module):
    """ids, attention_mask -> last hidden state: the mask a real graph input (padding)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask):
        kw = {} if isinstance(self.inner, _bert_model()) else {"use_cache": False}
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kw
                          ).last_hidden_state


def _bert_model():
    import transformers

    return transformers.BertModel


def padding_mask(batch: int, seq: int, lengths, left: bool = False) -> torch.Tensor:
    """[batch, seq] int64 ones over each row's `lengths` tokens (at the end if `left`)."""
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for row, n in enumerate(lengths):
        if left:
            mask[row, seq - n:] = 1
        else:
            mask[row, :n] = 1
    return mask


def export(family: Family, path, opset: int = 17, dynamic: bool = False,
           with_mask: bool = False) -> str:
    """The family's module as an ONNX file at `path`, exported with its own attention
    implementation: static shapes of its example, or (`dynamic`) batch and sequence as the
    named dims "batch" and "seq"; `with_mask`: attention_mask is a second graph input (the
    example pads its first row)."""
    import warnings

    inner = family.module.inner
    inner.set_attn_implementation(inner.config._attn_implementation)
    module, args, names = family.module, (family.example,), [family.input_name]
    if with_mask:
        b, s = family.example.shape
        module = WithMask(inner).eval()
        args = (family.example, padding_mask(b, s, [s // 2] + [s] * (b - 1)))
        names.append("attention_mask")
    axes = {n: {0: "batch", 1: "seq"} for n in names} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset,
                          input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes)
    return str(path)


def programs(family: Family, onnx_path: str, dtype: str | None = None):
    """(program from the ONNX file, program from the PyTorch module), same dtype."""
    from aotpack.frontend import load_spec, to_graph
    from aotpack.frontend.prepare import prepare
    from aotpack.passes import compile_graph

    loaded = prepare(load_spec(onnx_path), dtype=dtype)
    from_onnx = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    module = family.torch_module()
    module = module if dtype is None else module.to(torch.bfloat16)
    example = family.example if not family.example.is_floating_point() or dtype is None \
        else family.example.to(torch.bfloat16)
    from_torch = compile_graph(to_graph(module, (example,)))
    return from_onnx, from_torch


def compile_loaded(loaded):
    """The program of a prepared model (load_spec → prepare)."""
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    return compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))


def kernel_kinds(program) -> list[str]:
    return [type(op).__name__ for op in program.ops]


# ----------------------------------------------------------------------------- PyTorch side
# `aotpack build benchmarks/onnx_families.py:torch_gpt2` etc.: the same weights (seeded) as
# make(), at the size and shape ONNX_FAMILY_SIZE / ONNX_FAMILY_BATCH / ONNX_FAMILY_SEQ give.
def _torch_factory(name: str):
    import os

    family = make(name, os.environ.get("ONNX_FAMILY_SIZE", "tiny"),
                  int(os.environ.get("ONNX_FAMILY_BATCH", "2")),
                  int(os.environ.get("ONNX_FAMILY_SEQ", "16")))
    return family.torch_module(), (family.example,)


def torch_gpt2():
    return _torch_factory("gpt2")


def torch_bert():
    return _torch_factory("bert")


def torch_llama():
    return _torch_factory("llama")


def torch_vit():
    return _torch_factory("vit")
