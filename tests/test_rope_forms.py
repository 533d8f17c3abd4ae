"""The rotary-embedding forms beyond Llama's (passes/fuse_rope.py, RopeOp/KvWriteOp attributes):
interleaved pairs (GLM, Helium, Ernie 4.5), f32 tables and math cast back (OLMo-2, Ernie),
partial rotary (StableLM, Phi, GLM), and layers without rope (SmolLM3's NoPE layers).

- each form written as the model writes it becomes one ROPE node whose meaning (ir/interpret)
  is the model's math bit for bit, and lowers to one RopeOp;
- a tiny random model of each family gets one KvWriteOp per layer of its generation step;
- the rope and KV-write kernels, in Triton's interpreter, match their references at decode and
  prefill shapes for every form, and compile for sm_90; the references match the ops fused.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.reference import view
from aotpack.kernels.spec import (
    AttentionOp, KvWriteOp, RopeOp, ScatterRowsOp, TensorArg, contiguous,
)
from aotpack.kernels.templates import template_for
from aotpack.passes.fuse_kv_write import fuse_kv_write
from aotpack.program import Storage

BF16, F32 = DType.BF16, DType.F32
TESTS = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- the IR node
def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)


def _rotate_pairs(x):  # GLM's rotate_half
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


class _Rope(torch.nn.Module):
    """q's rope as the families write it: cos/sin [B, S, W] (W = rotary dim), q [B, H, S, D]."""

    def __init__(self, interleaved=False, rotary=None, f32=False, widen=False):
        super().__init__()
        self.interleaved, self.rotary, self.f32, self.widen = interleaved, rotary, f32, widen

    def forward(self, q, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        if self.interleaved:  # GLM: the half table, each entry twice
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
        r = self.rotary or q.shape[-1]
        x, rest = q[..., :r], q[..., r:]
        turn = _rotate_pairs if self.interleaved else _rotate_half
        if self.widen:  # Ernie: q.float() * cos + rotate_half(q).float() * sin
            out = x.float() * cos + turn(x).float() * sin
        else:  # OLMo-2 with f32 tables: bf16 * f32 promotes
            out = x * cos + turn(x) * sin
        if self.f32:
            out = out.to(q.dtype)
        return torch.cat((out, rest), dim=-1) if r < q.shape[-1] else out


FORMS = {  # name: (module, table dtype, expected RopeAttrs fields)
    "half": (_Rope(), torch.bfloat16, (False, None)),
    "interleaved": (_Rope(interleaved=True), torch.bfloat16, (True, None)),
    "f32_tables": (_Rope(f32=True), torch.float32, (False, None)),
    "interleaved_widened_f32": (_Rope(True, f32=True, widen=True), torch.float32, (True, None)),
    "partial": (_Rope(rotary=8), torch.bfloat16, (False, 8)),
    "interleaved_partial": (_Rope(True, rotary=8), torch.bfloat16, (True, 8)),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_one_rope_node_with_the_models_numbers(form):
    from aotpack.frontend import to_graph
    from aotpack.ir import Op
    from aotpack.ir.interpret import run_graph
    from aotpack.passes import compile_graph
    from aotpack.passes.pipeline import optimize

    module, table_dtype, (interleaved, rotary) = FORMS[form]
    g = torch.Generator().manual_seed(1)
    width = rotary or 32
    inputs = [torch.randn(2, 3, 5, 32, generator=g).bfloat16(),
              torch.randn(2, 5, width, generator=g).to(table_dtype),
              torch.randn(2, 5, width, generator=g).to(table_dtype)]
    graph = optimize(to_graph(module, inputs))
    ropes = [n for n in graph.nodes if n.op == Op.ROPE]
    assert len(ropes) == 1, str(graph)
    assert (ropes[0].attrs.interleaved, ropes[0].attrs.rotary_dim) == (interleaved, rotary)
    assert ropes[0].output.dtype == BF16
    with torch.no_grad():
        want = module(*inputs)
    (got,) = run_graph(graph, inputs)
    assert got.dtype == want.dtype and torch.equal(got, want)  # the node means the model's math
    program = compile_graph(to_graph(module, inputs))
    assert [type(op).__name__ for op in program.ops].count("RopeOp") == 1


# ----------------------------------------------------------------------------- families
def _families():
    import transformers as T

    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
    # (config, model class, (interleaved, rotary_dim) of the layers' KvWriteOps; None: no rope)
    return {
        "glm": (T.GlmConfig(**common, head_dim=16), T.GlmForCausalLM, [(True, 8)] * 2),
        "helium": (T.HeliumConfig(**common, head_dim=16), T.HeliumForCausalLM,
                   [(True, None)] * 2),
        "ernie4_5": (T.Ernie4_5Config(**common, head_dim=16), T.Ernie4_5ForCausalLM,
                     [(True, None)] * 2),
        "olmo2": (T.Olmo2Config(**common), T.Olmo2ForCausalLM, [(False, None)] * 2),
        "stablelm": (T.StableLmConfig(**common), T.StableLmForCausalLM, [(False, 4)] * 2),
        "phi": (T.PhiConfig(**{k: v for k, v in common.items() if k != "num_key_value_heads"}),
                T.PhiForCausalLM, [(False, 8)] * 2),
        # layer 1 of 2 has no rope (no_rope_layer_interval=2)
        "smollm3": (T.SmolLM3Config(**common, no_rope_layer_interval=2),
                    T.SmolLM3ForCausalLM, [(False, None), None]),
    }


FAMILIES = ["glm", "helium", "ernie4_5", "olmo2", "stablelm", "phi", "smollm3"]


def build(family: str):
    """The tiny random model of `family` (the factories the build test writes call this)."""
    config, cls, _ = _families()[family]
    torch.manual_seed(0)
    return cls(config).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_of_the_family_writes_its_cache_in_one_op(family, tmp_path):
    from aotpack.builder import load_program
    from aotpack.generation.task import GenerationOptions

    factory = tmp_path / "lm.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                       f"from test_rope_forms import build\n"
                       f"def make():\n    return build({family!r})\n")
    program = load_program(f"{factory}:make", dtype="bf16",
                           generation=GenerationOptions(max_seq_len=64, max_batch=2),
                           measure_error=False)
    kinds = [type(op).__name__ for op in program.ops]
    assert kinds.count("KvWriteOp") == 2, kinds
    assert "RopeOp" not in kinds and "ScatterRowsOp" not in kinds, kinds
    got = [(op.interleaved, op.rotary_dim) if op.rotates else None
           for op in program.ops if isinstance(op, KvWriteOp)]
    assert got == _families()[family][2]
