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


# ----------------------------------------------------------------------------- kernels
# (interleaved, rotary_dim of D=16, table dtype); None: a layer without rope
KERNEL_FORMS = {
    "interleaved": (True, None, BF16),
    "partial": (False, 8, BF16),
    "interleaved_partial": (True, 8, BF16),
    "f32_tables": (False, None, F32),
    "interleaved_partial_f32": (True, 4, F32),
    "no_rope": None,
}
SHAPES = {"decode": (2, 1), "prefill": (1, 21)}  # (B, S); prefill: several row blocks


def _layer(b, s, form, hq=4, hkv=2, d=16):
    """The ops lowering writes for one layer (two RopeOps of `form` and two row scatters over
    a fused qkv [B*S, (Hq+2Hkv)*D], or the scatters alone), the attention, the storages."""
    width, n = (hq + 2 * hkv) * d, b * s + 5

    def heads(h, offset):
        return TensorArg("qkv", BF16, (b, h, s, d), (s * width, d, width, 1), offset)

    rows = contiguous("rows", DType.I64, (b * s,))
    k_cache, v_cache = (contiguous(f"cache.{x}", BF16, (n, hkv * d)) for x in "kv")
    v_rows = TensorArg("qkv", BF16, (b * s, hkv * d), (width, 1), (hq + hkv) * d)
    shapes = {"qkv": (b * s * width,), "rows": (b * s,), "cache.k": (n, hkv * d),
              "cache.v": (n, hkv * d), "att": (b, hq, s, d)}
    if form is None:
        ops = [ScatterRowsOp(rows, TensorArg("qkv", BF16, (b * s, hkv * d), (width, 1), hq * d),
                             k_cache), ScatterRowsOp(rows, v_rows, v_cache)]
        q = heads(hq, 0)
    else:
        interleaved, rotary, table_dtype = form
        r = rotary or d
        cos, sin = (contiguous(t, table_dtype, (b, s, r)) for t in ("cos", "sin"))
        q = contiguous("q_rot", BF16, (b, hq, s, d))
        k_rot = TensorArg("k_rot", BF16, (b, hkv, s, d), (s * hkv * d, d, hkv * d, 1))
        ops = [RopeOp(heads(hq, 0), cos, sin, q, interleaved, rotary),
               RopeOp(heads(hkv, hq * d), cos, sin, k_rot, interleaved, rotary),
               ScatterRowsOp(rows, contiguous("k_rot", BF16, (b * s, hkv * d)), k_cache),
               ScatterRowsOp(rows, v_rows, v_cache)]
        shapes.update({"cos": (b * s * r,), "sin": (b * s * r,), "q_rot": (b, hq, s, d),
                       "k_rot": (b, s, hkv, d)})
    t = n // b
    cache_k = TensorArg("cache.k", BF16, (b, hkv, t, d), (t * hkv * d, d, hkv * d, 1))
    att = AttentionOp(q, cache_k, dataclasses.replace(cache_k, storage="cache.v"),
                      contiguous("att", BF16, (b, hq, s, d)), False, d ** -0.5)
    kinds = {"rows": "input", "cache.k": "state", "cache.v": "state"}
    storages = {name: Storage(name, kinds.get(name, "intermediate"),
                              F32 if name in ("cos", "sin") and form[2] == F32 else
                              (DType.I64 if name == "rows" else BF16), shape)
                for name, shape in shapes.items()}
    return ops + [att], storages


def _env(storages, n_rows, seed):
    g = torch.Generator().manual_seed(seed)
    env = {name: torch.randn(int(torch.tensor(st.shape).prod()), generator=g)
           .to(st.dtype.to_torch()) for name, st in storages.items() if st.dtype != DType.I64}
    n_table = storages["cache.k"].shape[0]
    rows = torch.randperm(n_table, generator=g)[:n_rows]
    rows[0] = -1  # outside the table: skipped
    env["rows"] = rows
    return env


def _fused(b, s, form):
    ops, storages = _layer(b, s, form)
    fused = fuse_kv_write(list(ops), dict(storages))
    assert [type(o) for o in fused] == [KvWriteOp, AttentionOp]
    return ops, fused[0], storages


@pytest.mark.parametrize("form", KERNEL_FORMS)
def test_fused_reference_matches_the_ops_it_replaces(form):
    ops, op, storages = _fused(2, 3, KERNEL_FORMS[form])
    assert op.rotates == (KERNEL_FORMS[form] is not None)
    env = _env(storages, 6, 0)
    want = {k: v.clone() for k, v in env.items()}
    for o in ops[:-1]:
        template_for(o).reference(o, want)
    template_for(op).reference(op, env)
    for name in ("cache.k", "cache.v") + (("q_rot",) if op.rotates else ()):
        assert torch.equal(env[name], want[name]), name


def _config(op):
    return {k: v for k, v in template_for(op).default_config(op, None).items()
            if k != "template"}


@pytest.mark.parametrize("shape", SHAPES)
def test_kernels_match_references_interpreted(shape):
    """Every form's KvWriteOp and RopeOp at one shape, in one interpreter child."""
    from support.interpret import run_interpreted_batch

    b, s = SHAPES[shape]
    jobs, wants = [], []
    for i, form in enumerate(KERNEL_FORMS.values()):
        ops, op, storages = _fused(b, s, form)
        cases = [op] + ([ops[0], ops[1]] if form is not None else [])  # + the q and k ropes
        for j, case in enumerate(cases):
            env = _env(storages, b * s, seed=10 * i + j)
            want = {k: v.clone() for k, v in env.items()}
            template_for(case).reference(case, want)
            if case.out is not None:
                env[case.out.storage].fill_(float("nan"))  # every element must be written
            jobs.append((case, env, _config(case)))
            wants.append(want)
    run_interpreted_batch(jobs)
    for (case, env, _), want in zip(jobs, wants):
        what = type(case).__name__
        assert torch.equal(env["cache.k"], want["cache.k"]), what
        assert torch.equal(env["cache.v"], want["cache.v"]), what
        if case.out is not None:
            assert torch.equal(view(env, case.out), view(want, case.out)), what


def test_kernels_compile_for_sm90_in_every_form():
    """The interpreter accepts code the compiler refuses (non-constexpr globals, an if whose
    branches differ in types, a None pointer used): cross-compile each form's cubin."""
    from aotpack.kernels.spec import SM90

    for form in KERNEL_FORMS.values():
        for b, s in SHAPES.values():
            ops, op, _ = _fused(b, s, form)
            for case in [op] + ([ops[0]] if form is not None else []):
                template = template_for(case)
                launches = template.compile(case, template.default_config(case, SM90), SM90)
                assert len(launches) == 1 and launches[0].kernel.cubin
