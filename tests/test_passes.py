"""Passes: canonicalization, pattern/horizontal fusion, lowering to kernel ops — and the Program
executed with the kernel references matches eager PyTorch (CPU, small sizes)."""
import importlib
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aotpack.frontend import to_graph
from aotpack.ir import Op
from aotpack.kernels.spec import Act, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU
from aotpack.passes import canonicalize, compile_graph
from aotpack.passes.fuse_swiglu import GROUP
from aotpack.passes.lower import LoweringError
from aotpack.passes.pipeline import optimize
from aotpack.passes.views import View, compose, layout_view
from aotpack.executor import run_reference
from program_checks import check_matches_eager, kinds, rel_err
from aotpack.ir import ops as O

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"mlp": dict(d=64, f=256, batch=2, seq=8),
         "llama_block": dict(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, seq=16)}


def small(example: str, dtype=torch.bfloat16):
    spec = importlib.util.spec_from_file_location(f"ex_{example}", ROOT / "examples" /
                                                  f"{example}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(dtype=dtype, **SMALL[example])


# ----------------------------------------------------------------------------- examples
def test_mlp_is_two_fused_gemms():
    model, inputs = small("mlp")
    p = compile_graph(to_graph(model, inputs))
    assert kinds(p) == ["GemmOp", "GemmOp"]
    g1, g2 = p.ops
    assert [type(s) for s in g1.epilogue] == [EpBias, EpAct]
    assert g1.epilogue[1].act == Act.GELU_TANH and g1.epilogue[0].bias.storage == "fc1.bias"
    assert [type(s) for s in g2.epilogue] == [EpBias]
    assert g1.a.storage == "x" and g1.a.shape == (16, 64) and g1.b.storage == "fc1.weight"
    assert g2.a.storage == g1.out.storage and g2.out.storage == "out0"
    assert p.storages["out0"].kind == "output" and p.storages[g1.out.storage].kind == \
        "intermediate"
    assert p.summary["kernel_ops"] == {"GemmOp": 2}


def test_llama_block_kernel_ops():
    model, inputs = small("llama_block")
    p = compile_graph(to_graph(model, inputs))
    assert kinds(p) == ["RMSNormOp", "GemmOp", "RopeOp", "RopeOp", "AttentionOp", "GemmOp",
                        "RMSNormOp", "GemmOp", "GemmOp"]
    norm1, qkv, rope_q, rope_k, attn, o_proj, norm2, gate_up, down = p.ops
    # horizontal q/k/v fusion: one GEMM over the concatenated weight
    assert qkv.b.storage == "qkv.weight" and qkv.b.shape == (512, 256) and qkv.epilogue == ()
    assert torch.equal(p.weights["qkv.weight"], torch.cat(
        [model.q_proj.weight, model.k_proj.weight, model.v_proj.weight]))
    # RoPE reads the transposed head view of the projection output, writes [B, H, S, D]
    assert rope_q.x.storage == qkv.out.storage and rope_q.x.strides == (8192, 64, 512, 1)
    assert rope_k.x.offset == 256 and rope_q.out.is_contiguous()
    assert rope_q.cos.shape == (16, 64) and rope_q.cos.storage == "cos"
    # attention: GQA 4/2, causal, default scale; v is a view of the qkv output
    assert attn.q.storage == rope_q.out.storage and attn.k.storage == rope_k.out.storage
    assert attn.v.storage == qkv.out.storage and attn.v.offset == 384
    assert attn.causal and attn.scale == pytest.approx(64 ** -0.5)
    # attention writes [B, S, H, D] directly: the transpose+reshape costs no copy
    assert attn.out.strides == (4096, 64, 256, 1) and o_proj.a.storage == attn.out.storage
    assert [type(s) for s in o_proj.epilogue] == [EpAdd] and o_proj.epilogue[0].other.storage \
        == "x"
    assert norm2.x.storage == o_proj.out.storage
    # SwiGLU: one GEMM over gate/up rows interleaved in blocks of 64 (fuse_swiglu.py)
    assert gate_up.epilogue == (EpSwiGLU(GROUP),) and gate_up.a.storage == norm2.out.storage
    assert gate_up.b.storage == "gate_up.weight" and gate_up.b.shape == (1024, 256)
    assert gate_up.out.shape == (16, 512)
    w = p.weights["gate_up.weight"].view(512 // GROUP, 2, GROUP, 256)
    assert torch.equal(w[:, 0].reshape(512, 256), model.gate_proj.weight)
    assert torch.equal(w[:, 1].reshape(512, 256), model.up_proj.weight)
    assert down.a.storage == gate_up.out.storage and down.out.storage == "out0"
    assert [type(s) for s in down.epilogue] == [EpAdd] and down.epilogue[0].other.storage == \
        o_proj.out.storage


@pytest.mark.parametrize("example", ["mlp", "llama_block"])
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
def test_program_matches_eager(example, dtype, tol):
    model, inputs = small(example, dtype)
    check_matches_eager(model, inputs, tol)


# ----------------------------------------------------------------------------- patterns
class HFRMSNorm(torch.nn.Module):
    """The decomposed (Hugging Face) RMSNorm form."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decomposed_rms_norm_becomes_rmsnorm_op(dtype):
    model = HFRMSNorm(32).to(dtype)
    p = check_matches_eager(model, (torch.randn(2, 4, 32, dtype=dtype),), 1e-2
                            if dtype == torch.bfloat16 else 1e-5)
    assert kinds(p) == ["RMSNormOp"]
    assert p.ops[0].eps == 1e-6 and p.ops[0].weight.storage == "weight"


class T5RMSNorm(HFRMSNorm):
    """T5's form: the statistics of an f32 copy, the 16-bit x itself times the f32 factor."""

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6)).to(x.dtype)


def test_t5_rms_norm_becomes_rmsnorm_op():
    model = T5RMSNorm(32).to(torch.bfloat16)
    p = check_matches_eager(model, (torch.randn(2, 4, 32, dtype=torch.bfloat16),), 1e-2)
    assert kinds(p) == ["RMSNormOp"] and p.ops[0].x.storage == "x"


class NotAnRMSNorm(torch.nn.Module):
    """x * rsqrt(mean(2 ** x) + eps): shaped like RMSNorm, but 2 ** x is no square."""

    def forward(self, x):
        return x * torch.rsqrt(torch.pow(2.0, x).mean(-1, keepdim=True) + 1e-6)


def test_exponential_is_not_fused_as_rms_norm():
    p = check_matches_eager(NotAnRMSNorm(), (torch.randn(2, 4, 32),), 1e-5)
    assert "RMSNormOp" not in kinds(p)


class Pointwise(torch.nn.Module):
    def forward(self, x, y):
        a = torch.tanh(x) * 0.5 + y.exp()  # one region
        return a, a.sigmoid() - 1.0 / (y * y + 1.0)  # `a` is shared: materialized once


def test_pointwise_regions():
    inputs = (torch.randn(3, 5), torch.randn(1, 5))
    p = check_matches_eager(Pointwise(), inputs, 1e-5)
    assert kinds(p) == ["PointwiseOp", "PointwiseOp"]
    assert p.ops[0].out.storage == "out0"  # written in place as the first output
    assert {a.storage for a in p.ops[1].inputs} == {"out0", "y"}


class Views(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6))

    def forward(self, x):
        t = x.transpose(0, 1)  # output is a view of an input: copied into the output
        m = x @ self.w  # matmul with a constant: weight transposed at build time
        c = torch.cat([m, x], dim=-1)  # cat: copies into slices of one storage
        return t, c.reshape(4, 2, 6)[:, 1:], F.relu(m) + 1.0


def test_views_matmul_cat_and_outputs():
    p = check_matches_eager(Views(), (torch.randn(4, 6),), 1e-5)
    assert "w.T" in p.weights and p.weights["w.T"].shape == (6, 6)
    assert "ConvOp" in kinds(p)  # an f32 GEMM: a 1x1 conv on tf32 (lower_conv.f32_gemm_as_conv)
    assert all(p.storages[o].kind == "output" for o in p.outputs)


class GqaExpand(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3,
                                              enable_gqa=True)


def test_attention_gqa_and_scale():
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16)
    p = check_matches_eager(GqaExpand(), (q, k, torch.randn(2, 2, 8, 16)), 1e-5)
    assert kinds(p) == ["AttentionOp"] and p.ops[0].scale == 0.3


class RepeatKV(torch.nn.Module):
    """GQA written with repeated kv heads (Hugging Face repeat_kv and repeat_interleave)."""

    def forward(self, q, k, v):
        b, h, s, d = k.shape
        k = k[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
        v = v.repeat_interleave(2, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_repeated_kv_heads_become_gqa_attention():
    q, k, v = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    p = check_matches_eager(RepeatKV(), (q, k, v), 1e-5)
    assert kinds(p) == ["AttentionOp"]
    assert p.ops[0].k.storage == "k" and p.ops[0].v.storage == "v"


class TransposedOutputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        a = self.proj(x).relu().transpose(0, 1).contiguous()  # GEMM out is 2-D: a real copy
        b = (y * 2).transpose(0, 1).contiguous()  # pointwise writes transposed: no copy
        return a, b


def test_copy_elision_only_where_the_kernel_can_write_strided():
    p = check_matches_eager(TransposedOutputs(), (torch.randn(4, 8), torch.randn(3, 5)), 1e-5)
    assert kinds(p) == ["ConvOp", "PointwiseOp", "PointwiseOp"]  # f32 GEMM: a 1x1 conv
    mul = p.ops[1]  # y * 2 written transposed straight into the output
    assert mul.inputs[0].storage == "y" and mul.out.storage == "out1"
    assert mul.out.strides == (1, 3)
    assert p.ops[2].inputs[0].storage == p.ops[0].out.storage  # the GEMM result is copied


def test_tables_computed_from_buffers_fold_to_constants():
    from test_frontend import ComputedTables

    p = check_matches_eager(ComputedTables(), (torch.randn(2, 6, 4, dtype=torch.bfloat16),),
                            1e-2)
    assert kinds(p) == ["PointwiseOp"]  # x * table + x * 0.5, the table precomputed
    assert any(w.shape == (6, 4) for w in p.weights.values())


class CatInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 6)

    def forward(self, x):
        return torch.cat([self.proj(x), x.exp()], dim=-1) * 2


def test_cat_inputs_are_written_in_place():
    p = check_matches_eager(CatInPlace(), (torch.randn(2, 3, 8),), 1e-5)
    assert kinds(p) == ["ConvOp", "PointwiseOp", "PointwiseOp"]  # no copies (f32: a 1x1 conv)
    gemm, exp, _ = p.ops
    assert gemm.out.storage == exp.out.storage and gemm.out.strides == (14, 1)
    assert exp.out.offset == 6 and exp.out.shape == (2, 3, 8)


def test_unsupported_kernel_is_a_clear_error():
    class ScalarSoftmax(torch.nn.Module):  # torch takes a 0-d softmax; no kernel does
        def forward(self, x):
            return torch.softmax(x.sum(), 0)

    with pytest.raises(LoweringError, match="cannot lower softmax.*at least one dim"):
        compile_graph(to_graph(ScalarSoftmax(), (torch.randn(4, 8),)))


# ----------------------------------------------------------------------------- canonicalize
def test_canonical_graph_has_only_strided_views():
    model, inputs = small("llama_block")
    g = canonicalize(to_graph(model, inputs))
    ops = {n.op for n in g.nodes}
    assert not ops & {Op.VIEW, Op.PERMUTE, Op.SLICE, Op.EXPAND, Op.UNSQUEEZE}
    producers = g.producers()
    for n in g.nodes:
        if n.op == Op.AS_STRIDED:
            base = producers.get(n.inputs[0].name)
            assert base is None or base.op != Op.AS_STRIDED


def test_optimize_is_idempotent():
    model, inputs = small("llama_block")
    once = optimize(to_graph(model, inputs))
    assert str(optimize(once)) == str(once)


def test_noop_folding_and_dead_code():
    class M(torch.nn.Module):
        def forward(self, x):
            unused = x.exp()  # noqa: F841
            return (x.to(torch.float32).contiguous().view(2, 3) + 0).clone() * 2

    g = canonicalize(to_graph(M(), (torch.randn(2, 3),)))
    assert [n.op for n in g.nodes] == [Op.MUL]


def test_compose_views():
    inner = layout_view(Op.SLICE, O.SliceAttrs(1, 4, 8), (6, 10))
    split = compose(inner, layout_view(Op.VIEW, O.ViewAttrs((6, 2, 2)), (6, 4)))
    assert split == View((6, 2, 2), (10, 2, 1), 4)
    perm = compose(split, layout_view(Op.PERMUTE, O.PermuteAttrs((1, 0, 2)), (6, 2, 2)))
    t = torch.arange(60).view(6, 10)
    assert torch.equal(t.as_strided(perm.shape, perm.strides, perm.offset),
                       t[:, 4:8].reshape(6, 2, 2).permute(1, 0, 2))
    # merging a transposed pair of dims is not a strided view
    assert compose(perm, layout_view(Op.VIEW, O.ViewAttrs((12, 2)), (2, 6, 2))) is None


def test_inspect_summary():
    model, inputs = small("llama_block")
    p = compile_graph(to_graph(model, inputs))
    assert p.summary["kernel_ops"] == {"RMSNormOp": 2, "GemmOp": 4, "RopeOp": 2,
                                       "AttentionOp": 1}
    assert p.summary["ops"]["linear"] == 7 and p.summary["nodes"] == 38
    assert p.summary["fused_ops"]["linear"] == 4 and p.summary["fused_ops"]["swiglu"] == 1
    assert p.summary["aten_ops"]["aten.linear.default"] == 7



class Conv1D(torch.nn.Module):
    """GPT-2's projection: y = addmm(b, x, W) with W stored [K, N]."""

    def __init__(self, k=64, n=96):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(k, n) * 0.05)
        self.b = torch.nn.Parameter(torch.randn(n) * 0.05)

    def forward(self, x):
        return torch.addmm(self.b, x.view(-1, x.shape[-1]), self.w).view(*x.shape[:-1], -1)


def test_matmul_weight_is_stored_once_transposed():
    """The [K, N] weight is transposed once at build time for the GEMM's [N, K] operand; the
    original, which no kernel reads, is not stored beside it."""
    model = Conv1D().to(torch.bfloat16)
    program = check_matches_eager(model, (torch.randn(2, 8, 64, dtype=torch.bfloat16),), 1e-2)
    assert kinds(program) == ["GemmOp"]
    assert sorted(program.weights) == ["b", "w.T"] and tuple(program.weights["w.T"].shape) == (96, 64)
    assert set(program.weights) <= set(program.storages)
    assert not any(s.kind == "weight" and n not in program.weights
                   for n, s in program.storages.items())


class TransposedTable(torch.nn.Module):
    """An embedding table read through a transpose (inner stride V), and a single id."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 50))  # [D, V]

    def forward(self, ids, one):
        table = self.w.t()
        return F.embedding(ids, table) + F.embedding(one, table)


def test_embedding_of_a_strided_table_and_of_one_id_compile():
    """The lookup reads a table with a unit inner stride (a transposed one is copied first)
    and takes a 0-d id; both kernels compile for sm_90a and the program matches eager."""
    from aotpack.kernels import compile as compile_op
    from aotpack.kernels.spec import EmbeddingOp

    model = TransposedTable().to(torch.bfloat16)
    ids, one = torch.randint(0, 50, (3, 7)), torch.tensor(4)
    program = compile_graph(to_graph(model, (ids, one)))
    lookups = [op for op in program.ops if isinstance(op, EmbeddingOp)]
    assert len(lookups) == 2 and all(op.table.strides[-1] == 1 for op in lookups)
    for op in lookups:
        compile_op(op)  # the template's own checks (unit strides, shapes) pass
    fresh = [torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(5)),
             torch.tensor(49)]
    (got,) = run_reference(program, fresh)
    assert rel_err(got, model(*fresh)) < 1e-2


class EmptyPart(torch.nn.Module):
    """A cat with an empty part (what partial rotary code does at a rotary factor of 1)."""

    def forward(self, x):
        a, b = x[..., :16], x[..., 16:]
        return torch.cat((a * 2.0, b), dim=-1)


def test_ops_that_write_nothing_are_not_launched():
    program = check_matches_eager(EmptyPart(), (torch.randn(2, 8, 16),), 1e-6)
    assert kinds(program) == ["PointwiseOp"]


class GateUpChunk(torch.nn.Module):
    """One gate/up projection split in halves (Phi-3's MLP); `up_first`: the silu is on the
    second half."""

    def __init__(self, up_first=False):
        super().__init__()
        self.gate_up = torch.nn.Linear(64, 2 * 128, bias=False)
        self.down = torch.nn.Linear(128, 64, bias=False)
        self.up_first = up_first

    def forward(self, x):
        a, b = self.gate_up(x).chunk(2, dim=-1)
        gate, up = (b, a) if self.up_first else (a, b)
        return self.down(up * F.silu(gate))


@pytest.mark.parametrize("up_first,shape", [(False, (2, 8, 64)), (True, (2, 8, 64)),
                                            (False, (2, 1, 64)), (True, (1, 64))])
def test_stacked_gate_up_projection_fuses_to_swiglu(up_first, shape):
    """silu(first half) * second half of one linear (or the other way round) becomes one GEMM
    with the SwiGLU epilogue over the halves interleaved; the stacked weight is not stored.
    Decode shapes too (size-1 dims, whose view strides are free)."""
    model = GateUpChunk(up_first).to(torch.bfloat16)
    program = check_matches_eager(model, (torch.randn(*shape, dtype=torch.bfloat16),), 1e-2)
    assert kinds(program) == ["GemmOp", "GemmOp"]
    assert [type(e).__name__ for e in program.ops[0].epilogue] == ["EpSwiGLU"]
    assert sorted(program.weights) == ["down.weight", "gate_up_swiglu.weight"]


def test_an_f32_stacked_gate_up_projection_is_not_fused():
    """An f32 model (Phi-3, GLM-4 as saved): its GEMMs run as 1x1 convolutions on tf32 tensor
    cores, which take no SwiGLU epilogue, so the halves stay a pointwise kernel and nothing
    reaches the bf16/f16 GEMM template (which refused the build)."""
    program = check_matches_eager(GateUpChunk(), (torch.randn(2, 8, 64),), 1e-5)
    assert "GemmOp" not in kinds(program) and kinds(program).count("ConvOp") == 2
    assert not any(type(e).__name__ == "EpSwiGLU" for op in program.ops
                   for e in getattr(op, "epilogue", ()))


class UpcastNorm(torch.nn.Module):
    """Norms computed on an f32 copy with f32 weights, cast back (Gemma's RMSNorm, and the
    same for LayerNorm)."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.w = torch.nn.Parameter(torch.randn(64) * 0.1)
        self.b = torch.nn.Parameter(torch.randn(64) * 0.1)

    def forward(self, x):
        h = x.float()
        if self.kind == "rms":
            y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + self.w.float())
        else:
            y = F.layer_norm(h, (64,), self.w.float(), self.b.float(), 1e-5)
        return y.to(x.dtype)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_norm_on_an_upcast_copy_is_one_kernel(kind):
    """One norm kernel (f32 math, one rounding at the store), bit for bit what eager gives."""
    model = UpcastNorm(kind).to(torch.bfloat16)
    x = torch.randn(4, 8, 64, dtype=torch.bfloat16)
    program = compile_graph(to_graph(model, (x,)))
    assert kinds(program) == ["RMSNormOp" if kind == "rms" else "LayerNormOp"]
    (got,) = run_reference(program, [x])
    with torch.no_grad():
        assert torch.equal(got, model(x))
