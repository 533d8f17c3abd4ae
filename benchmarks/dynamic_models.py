"""Models for the dynamic-shape measurements (benchmarks/dynamic_bench.py): each with its dims'
ranges and the shapes it is measured at.

Factories for `aotpack build`: `benchmarks/dynamic_models.py:<name>` is the model at its example
shape (build it with `--dynamic` from DIMS), `...:<name>_<AxB>` the same model at one shape
(`gpt2_4x128`: batch 4, sequence 128; `vit_b16_32`: batch 32) for the static bundles beside it.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import suite_models as sm  # noqa: E402

# name: (factory(batch, seq) -> (model, inputs), --dynamic options, example (batch, seq),
#        shapes measured); seq None: the model has no sequence dim (ViT)
MODELS = {
    "llama_prefill": (lambda b, s: _llama(b, s), ["x.1=S:1..4096"], (1, 2048),
                      [(1, 16), (1, 128), (1, 512), (1, 1000), (1, 2048), (1, 4096)]),
    "llama_decode": (lambda b, s: _llama(b, s), ["x.0=B:1..256"], (16, 1),
                     [(1, 1), (8, 1), (16, 1), (50, 1), (128, 1), (256, 1)]),
    "gpt2": (lambda b, s: sm.gpt2(batch=b, seq=s), ["x.0=B:1..64", "x.1=S:1..512"],
             (4, 512), [(1, 128), (4, 512), (8, 100), (16, 256), (32, 77), (64, 512)]),
    "bert_base": (lambda b, s: sm.bert_base(batch=b, seq=s),
                  ["x.0=B:1..64", "x.1=S:1..512"], (8, 128),
                  [(1, 16), (8, 128), (3, 250), (16, 384), (32, 64), (64, 512)]),
    "vit_b16": (lambda b, s: sm.vit_b16(batch=b), ["x.0=B:1..256"], (8, None),
                [(1, None), (8, None), (17, None), (32, None), (100, None), (256, None)]),
}


def _llama(batch: int, seq: int):
    import llama_block

    if seq == 1:
        return llama_block.make(batch=batch, seq=1)
    # rotary tables for the longest sequence: a bundle for S <= 4096 slices them
    model, (x,) = llama_block.make(batch=batch, seq=4096)
    return model, (x[:, :seq].contiguous(),)


def shape_name(b: int, s: int | None) -> str:
    return f"{b}" if s is None else f"{b}x{s}"


def __getattr__(name: str):
    """`gpt2` (example shape) or `gpt2_4x128` / `vit_b16_32` (one shape) as a factory."""
    for model, (factory, _, example, _) in MODELS.items():
        if name == model:
            return lambda: factory(*example)
        if name.startswith(model + "_"):
            dims = [int(x) for x in name[len(model) + 1:].split("x")]
            b, s = dims[0], (dims[1] if len(dims) > 1 else example[1])
            return lambda: factory(b, s)
    raise AttributeError(name)
