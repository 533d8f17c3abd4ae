"""Edges that uncovered model families hit (found by trying transformers' RegNet, LeViT,
SwinV2, BEiT as a new user would): each a tiny module with the same construct, compiled and
its program (kernel references) compared with eager on the CPU."""
import pytest
import torch
from torch import nn

from program_checks import check_matches_eager, kinds


class GateAtOnePixel(nn.Module):
    """RegNet-Y's last stage at a 1x1 map: conv -> squeeze-excitation gate -> conv. The gate
    [N, 1, 1, C] has the activation's shape, so the gate conv's epilogue takes the product as
    an EpMul; the next conv must then not also claim it as its input scale (KeyError)."""

    def __init__(self, c=16):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 1)
        self.se1 = nn.Conv2d(c, 4, 1)
        self.se2 = nn.Conv2d(4, c, 1)
        self.conv2 = nn.Conv2d(c, c, 1)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        gate = torch.sigmoid(self.se2(torch.relu(self.se1(h.mean((2, 3), keepdim=True)))))
        return self.conv2(h * gate)


def test_squeeze_excitation_gate_at_a_one_pixel_map():
    torch.manual_seed(0)
    check_matches_eager(GateAtOnePixel().eval(), [torch.randn(2, 16, 1, 1)], 1e-5)


class BiasTable(nn.Module):
    """LeViT's attention biases: a [heads, offsets] weight indexed as table[:, idx] by a
    constant index buffer (aten.index with a None for the whole first dim), folded at build
    time; was an IndexError (Python indexing reads None as a new axis)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(2, 5))
        self.register_buffer("idx", torch.tensor([[0, 1, 4], [3, 2, 2], [4, 0, 1]]))

    def forward(self, scores):
        return scores + self.table[:, self.idx]


def test_weight_indexed_by_a_constant_after_a_whole_dim():
    program = check_matches_eager(BiasTable(), [torch.randn(4, 2, 3, 3)], 1e-6)
    assert "GatherOp" not in kinds(program) and "EmbeddingOp" not in kinds(program)


class Norms(torch.nn.Module):
    """SwinV2's cosine attention normalizes q and k (F.normalize: linalg_vector_norm, was
    refused); the 1-, inf- and 3-norms take the other forms of the same rule."""

    def forward(self, q, k):
        n = torch.nn.functional.normalize
        scores = n(q, dim=-1) @ n(k, dim=-1).transpose(-1, -2)
        other = (q.norm(p=1, dim=-1) + torch.linalg.vector_norm(k, float("inf"), dim=-1)
                 + torch.linalg.vector_norm(q, 3, dim=-1, keepdim=True).squeeze(3))
        return scores, other


def test_vector_norms():
    q, k = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 5, 16)
    check_matches_eager(Norms(), [q, k], 1e-5)
    check_matches_eager(Norms().to(torch.bfloat16), [q.bfloat16(), k.bfloat16()], 1e-2)


class ResizedTable(torch.nn.Module):
    """BEiT's relative-position bias: a slice of a weight, reshaped, permuted and resized by
    F.interpolate (an op aotpack has no kernel for), then indexed: all of it on weights, so
    it folds at build time (was refused: upsample_bilinear2d)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(3 * 3 + 3, 2))

    def forward(self, x):
        sub = self.table[:9].reshape(1, 3, 3, 2).permute(0, 3, 1, 2)
        big = torch.nn.functional.interpolate(sub, size=(5, 5), mode="bilinear")
        return x + big.permute(0, 2, 3, 1).reshape(25, 2)[:, 0]


def test_interpolation_of_a_weight_view_folds():
    program = check_matches_eager(ResizedTable(), [torch.randn(4, 25)], 1e-6)
    assert kinds(program) == ["PointwiseOp"]


class OddAttention(torch.nn.Module):
    """Attention shapes the kernel does not take: head dim 8 (MobileViT), values wider than
    the keys (LeViT, DeepSeek-V3's MLA), with GQA, causal and a bool mask; they were a
    ValueError traceback from the kernel's compile."""

    def forward(self, q, k, v, v_wide, mask):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        a = sdpa(q, k, v, is_causal=True, enable_gqa=True)
        b = sdpa(q, k, v_wide, attn_mask=mask, enable_gqa=True, scale=0.3)
        return a, b


def test_attention_the_kernel_cannot_take_is_written_out():
    from aotpack.executor import run_reference
    from aotpack.frontend import to_graph
    from aotpack.kernels import compile as compile_op
    from aotpack.passes import compile_graph

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    v_wide, mask = torch.randn(2, 2, 6, 24), torch.rand(2, 1, 6, 6) > 0.3
    mask[..., 0] = True
    inputs = [t.bfloat16() if t.is_floating_point() else t for t in (q, k, v, v_wide, mask)]
    model = OddAttention()
    program = compile_graph(to_graph(model, inputs))
    assert "AttentionOp" not in kinds(program) and "BmmOp" in kinds(program)
    with torch.no_grad():
        want = model(*inputs)
    for got, ref in zip(run_reference(program, inputs), want):
        assert ((got.float() - ref.float()).norm() / ref.float().norm()) < 2e-2
    for op in program.ops:  # every kernel cross-compiles for sm_90a
        if type(op).__name__ in ("BmmOp", "SoftmaxOp"):
            assert compile_op(op)


class F32ScoresAttention(torch.nn.Module):
    """GPT-J-style attention at head dim 8 (written out): f32 scores of upcast q and k plus an
    f32 additive mask, softmax in f32, back to bf16 for the values."""

    def forward(self, q, k, v, bias):
        s = (q.float() @ k.float().transpose(-1, -2)) * 8 ** -0.5 + bias
        return s.softmax(-1).to(torch.bfloat16) @ v


class MaskedRowsAttention(torch.nn.Module):
    """sdpa at head dim 8 with a bool mask that hides every key from some queries: torch
    gives those rows zeros, as the attention kernel does."""

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("case", ["f32_scores", "masked_rows"])
def test_written_out_attention_keeps_the_models_dtypes_and_masked_rows(case):
    from aotpack.executor import run_reference
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.bfloat16) for _ in range(3))
    if case == "f32_scores":
        model, extra = F32ScoresAttention(), torch.randn(1, 1, 5, 5)
    else:
        model, extra = MaskedRowsAttention(), torch.rand(1, 1, 5, 5) > 0.4
        extra[..., 2, :] = False  # query 2 sees no key
    inputs = [q, k, v, extra]
    program = compile_graph(to_graph(model, inputs))
    assert "AttentionOp" not in kinds(program)
    with torch.no_grad():
        want = model(*inputs).float()
    got = run_reference(program, inputs)[0].float()
    assert ((got - want).norm() / want.norm()) < 2e-2
    if case == "masked_rows":
        assert torch.equal(got[..., 2, :], torch.zeros_like(got[..., 2, :]))


class UpsampleNeck(torch.nn.Module):
    """An FPN / U-Net neck: conv, nearest upsampling by 2 (and by 3x1), a skip add, conv
    (upsample_nearest2d was refused)."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.out = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        up = torch.nn.functional.interpolate(self.down(x), scale_factor=2, mode="nearest")
        tall = torch.nn.Upsample(scale_factor=(3, 1))(x[:, :, :2])
        return self.out(up + x), tall


def test_nearest_upsampling_by_whole_factors():
    torch.manual_seed(0)
    check_matches_eager(UpsampleNeck().eval(), [torch.randn(2, 8, 6, 6)], 1e-5)


class Resizes(torch.nn.Module):
    """Bilinear resizing of activations (DPT / Depth-Anything, SegFormer heads): to a size, by
    a factor (whole and not), with aligned corners; was refused (upsample_bilinear2d)."""

    def forward(self, x):
        f = torch.nn.functional.interpolate
        return (f(x, size=(9, 13), mode="bilinear"), f(x, scale_factor=2, mode="bilinear"),
                f(x, size=(7, 3), mode="bilinear", align_corners=True),
                f(x, scale_factor=1.5, mode="bilinear"))


def test_bilinear_resizing_matches_torch():
    program = check_matches_eager(Resizes(), [torch.randn(2, 3, 5, 6)], 1e-5)
    assert set(kinds(program)) == {"EmbeddingOp", "PointwiseOp"}  # row gathers, blends
    check_matches_eager(Resizes().to(torch.bfloat16), [torch.randn(2, 3, 5, 6).bfloat16()],
                        2e-3)


def test_bicubic_resizing_decomposes_and_matches_torch():
    class Bicubic(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, size=(8, 7), mode="bicubic")

    check_matches_eager(Bicubic(), [torch.randn(1, 2, 4, 5)], 1e-5)


class _TwoInputs(nn.Module):
    def forward(self, a, b):
        return a + 2 * b


def test_example_inputs_that_alias_stay_separate_inputs():
    """`[torch.randn(4)] * 2` as example inputs: torch.export traces aliased inputs as one
    (the first unused), so the program computed 3*b; aliased examples are cloned first."""
    from aotpack.executor import run_reference
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    program = compile_graph(to_graph(_TwoInputs(), [torch.randn(4)] * 2))
    a, b = torch.randn(4), torch.randn(4)
    (got,) = run_reference(program, [a, b])
    assert torch.allclose(got, a + 2 * b)


class _TimeShift(nn.Module):
    """RWKV's time shift: ZeroPad2d((0, 0, 1, -1)), one row of zeros in front and the last
    row cropped (a negative pad, was refused)."""

    def __init__(self, pad=(0, 0, 1, -1)):
        super().__init__()
        self.shift = nn.ZeroPad2d(pad)

    def forward(self, x):
        return self.shift(x) * 2


@pytest.mark.parametrize("pad", [(0, 0, 1, -1), (-1, 2, 0, 0), (0, 0, -2, -1)])
def test_negative_pads_crop(pad):
    check_matches_eager(_TimeShift(pad), [torch.randn(2, 8, 16)], 1e-6)


def test_f32_linears_run_as_convolutions_on_tf32():
    """The GEMM template runs bf16/f16; an f32 model's linears (bias, ReLU, residual fused)
    lower to 1x1 convolutions, whose kernel runs f32 on tf32 tensor cores, instead of being
    refused. Their kernels match the f32 references within tf32's precision."""
    from conv_checks import check_kernels_interpreted
    from aotpack.kernels.spec import ConvOp

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(32, 64), nn.Linear(64, 32)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    torch.manual_seed(0)
    x = torch.randn(3, 5, 32)
    program = check_matches_eager(Mlp().eval(), [x], 1e-6)
    assert kinds(program).count("ConvOp") == 2 and "GemmOp" not in kinds(program)
    conv = next(op for op in program.ops if isinstance(op, ConvOp))
    assert conv.kernel == (1, 1) and conv.x.shape == (15, 1, 1, 32)
    assert check_kernels_interpreted(program, [x], tol=2e-3, kinds=(ConvOp,)) == 2


class _DataBounds(nn.Module):
    """An arange with a bound read from the input's values (.item() of run-time data)."""

    def forward(self, x):
        return torch.arange(x[0, 0].clamp(0, 7).long() + 1).float()


class _Spectrum(nn.Module):
    """FNet's Fourier mixing: complex tensors."""

    def forward(self, x):
        return torch.fft.fftn(x, dim=(1, 2)).real


@pytest.mark.parametrize("model, x, words", [
    (_DataBounds(), torch.randn(2, 8), ["depends on the input data", "test_model_edges.py"]),
    (_Spectrum(), torch.randn(2, 8, 16), ["complex64", "node:", "test_model_edges.py"]),
])
def test_what_a_rule_was_not_written_for_is_a_one_line_refusal(model, x, words):
    """Were a sympy TypeError (an assert on .item() values) and a ValueError (no complex
    dtype) with a traceback; now the refusal with node and source line."""
    from aotpack.errors import UserError
    from aotpack.frontend import to_graph

    with pytest.raises(UserError) as e:
        to_graph(model, [x])
    for w in words:
        assert w in str(e.value), str(e.value)


class _AdaptivePool(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x, self.out) * 2


@pytest.mark.parametrize("shape, out", [((2, 8, 32, 32), 7), ((2, 8, 32, 20), (3, 6)),
                                        ((1, 8, 15, 15), 6)])
def test_adaptive_average_pooling_to_sizes_that_do_not_divide(shape, out):
    """VGG's 7x7 head on a 32x32 map, PSPNet's bins: overlapping blocks of unequal sizes
    (were refused), two GEMMs by constant averaging matrices."""
    program = check_matches_eager(_AdaptivePool(out), [torch.randn(shape)], 1e-5)
    assert "PoolOp" not in kinds(program)


@pytest.mark.parametrize("norm, shape", [
    (nn.InstanceNorm2d(8, affine=True), (2, 8, 6, 6)), (nn.InstanceNorm2d(8), (3, 8, 5, 7)),
    (nn.InstanceNorm1d(4, affine=True), (2, 4, 9)),
    (nn.BatchNorm2d(8, track_running_stats=False), (3, 8, 4, 4))])
def test_norms_over_the_inputs_own_statistics(norm, shape):
    """InstanceNorm (style transfer, GAN generators) and BatchNorm without running stats
    export as _native_batch_norm_legit.no_stats (was refused): a LayerNorm per channel."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in norm.parameters():
            p.normal_()
    program = check_matches_eager(norm.eval(), [torch.randn(shape)], 1e-5)
    assert "LayerNormOp" in kinds(program)


class _Reversed(nn.Module):
    """x[:, [2, 1, 0]]: BGR to RGB. A descending constant index stepped evenly was made a
    view with a negative stride, which no kernel or reference reads: a row gather now."""

    def forward(self, x):
        return x[:, [2, 1, 0]] * 2 + x[..., [3, 2, 1, 0]]


def test_descending_constant_indices_are_a_gather():
    program = check_matches_eager(_Reversed(), [torch.randn(2, 3, 4, 4)], 1e-6)
    assert "EmbeddingOp" in kinds(program)


class NoNormAfterResidual(nn.Module):
    """MobileBERT's NoNorm (x * w + b) after a linear's bias and a residual add: four tensor
    operands for one epilogue, which takes three. The chain stops there (the rest is a
    pointwise op); it used to be built whole and the kernel refused it with a traceback."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.w, self.b = nn.Parameter(torch.randn(64)), nn.Parameter(torch.randn(64))

    def forward(self, x, r):
        return (self.lin(x) + r) * self.w + self.b


def test_a_gemm_chain_stops_where_the_kernels_epilogue_is_full():
    from aotpack.kernels import compile as compile_op
    from aotpack.kernels.spec import EPILOGUE_MAX_STEPS, EPILOGUE_MAX_TENSORS, GemmOp
    from aotpack.kernels.triton.gemm_epilogue import epilogue_steps

    torch.manual_seed(0)
    model = NoNormAfterResidual().eval().to(torch.bfloat16)
    x, r = (torch.randn(2, 8, 64).to(torch.bfloat16) for _ in range(2))
    program = check_matches_eager(model, [x, r], 2e-2)
    (gemm,) = [op for op in program.ops if isinstance(op, GemmOp)]
    steps = epilogue_steps(gemm)
    assert len(steps) <= EPILOGUE_MAX_STEPS
    assert len([t for _, t in steps if t is not None]) == EPILOGUE_MAX_TENSORS
    assert kinds(program) == ["GemmOp", "PointwiseOp"]
    for op in program.ops:
        compile_op(op)  # every kernel takes what it is given


class AttentionThenHeadDimFirst(nn.Module):
    """SqueezeBERT: the attention's [B, H, S, D] output permuted to [B, H, D, S] and made
    contiguous. The attention kernel stores whole head rows, so it must not be told to
    write that layout in place (it was, and refused it with a traceback): a copy after."""

    def forward(self, q, k, v):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return o.permute(0, 1, 3, 2).contiguous()


def test_attention_output_permuted_off_its_head_rows_is_copied():
    from aotpack.kernels import compile as compile_op
    from aotpack.kernels.spec import AttentionOp

    q, k, v = (torch.randn(2, 4, 32, 32).to(torch.bfloat16) for _ in range(3))
    program = check_matches_eager(AttentionThenHeadDimFirst(), [q, k, v], 2e-2)
    (attn,) = [op for op in program.ops if isinstance(op, AttentionOp)]
    assert attn.out.strides[-1] == 1
    for op in program.ops:
        compile_op(op)


class RelativePositions(nn.Module):
    """Funnel's relative_pos: torch.arange over .item() of tensors computed from an arange of
    the (static) sequence length. Export makes the values unbacked symbols (data-dependent
    sizes); the build knows them (the tensors come from constants), binds the symbols and
    folds the aranges (it refused them)."""

    def forward(self, x):
        pos = torch.arange(0, x.shape[1], 1.0, dtype=torch.float32)
        pooled = pos[::2]
        max_dist = pooled[0] - pos[0] + len(pooled) * 2
        min_dist = pooled[0] - pos[-1]
        rel = torch.arange(max_dist, min_dist - 1, -2, dtype=torch.long)
        return x[:, : rel.shape[0]] * rel.to(x.dtype)[None, :]


class _FloatBounds(nn.Module):
    """The same with float bounds, descending."""

    def forward(self, x):
        pos = torch.arange(x.shape[1]).float()
        return x + torch.arange(pos[-1], pos[0] - 1, -1).float()


@pytest.mark.parametrize("model", [RelativePositions(), _FloatBounds()])
def test_aranges_over_values_the_build_computes_fold(model):
    program = check_matches_eager(model, [torch.randn(2, 16 if isinstance(
        model, RelativePositions) else 8)], 1e-6)
    assert kinds(program) == ["PointwiseOp"]


class EinsumAttention(nn.Module):
    """CvT's attention: heads by view + permute, scores by einsum("bhlk,bhtk->bhlt"), which
    materialises the keys transposed ([.., D, S]). The fused attention saw keys with a
    non-unit inner stride and the kernel refused them at build time ("a defect of aotpack");
    lowering now copies such an operand to rows of D first."""

    def __init__(self, c=64, h=2):
        super().__init__()
        self.h = h
        self.q, self.k, self.v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)

    def heads(self, x):
        b, t, c = x.shape
        return x.view(b, t, self.h, c // self.h).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        p = torch.softmax(torch.einsum("bhlk,bhtk->bhlt", [q, k]) * 0.125, dim=-1)
        return torch.einsum("bhlt,bhtv->bhlv", [p, v])


def test_einsum_attention_keys_reach_the_kernel_as_rows():
    from aotpack.frontend import to_graph
    from aotpack.kernels.spec import AttentionOp
    from aotpack.kernels.triton import attention
    from aotpack.passes import compile_graph
    from conv_checks import check_kernels_interpreted

    torch.manual_seed(0)
    model = EinsumAttention().eval().to(torch.bfloat16)
    x = torch.randn(2, 16, 64).to(torch.bfloat16)
    check_matches_eager(model, [x], 2e-2)
    program = compile_graph(to_graph(model, [x]))
    (op,) = [o for o in program.ops if isinstance(o, AttentionOp)]
    assert all(t.strides[-1] == 1 for t in (op.q, op.k, op.v))
    attention.compile(op)  # sm_90a: refused before
    assert check_kernels_interpreted(program, [x], kinds=(AttentionOp,)) == 1


class TensorScale(nn.Module):
    """An attention whose scale is a one-element tensor (as TorchScript's converter and ONNX
    keep 1/sqrt(d)): it fuses like a Python-number scale (it was left as bmm + softmax + bmm)."""

    def __init__(self, shape=(1,)):
        super().__init__()
        self.register_buffer("scale", torch.full(shape, 0.125))

    def forward(self, q, k, v):
        return torch.softmax((q @ k.transpose(-1, -2)) * self.scale, dim=-1) @ v


@pytest.mark.parametrize("shape", [(), (1,)])
def test_a_one_element_tensor_scale_joins_the_attention(shape):
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 32) for _ in range(3))
    model = TensorScale(shape).eval()
    check_matches_eager(model, [q, k, v], 1e-5)
    assert kinds(compile_graph(to_graph(model, [q, k, v]))) == ["AttentionOp"]


def test_a_promoting_tensor_factor_stays_a_tensor():
    """bf16 x times an f32 [1] tensor is f32 in torch: that product keeps its tensor form
    (a scalar would keep bf16)."""
    class Promote(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.full((1,), 3.0))

        def forward(self, x):
            return x * self.c

    x = torch.randn(4, 8).to(torch.bfloat16)
    assert Promote()(x).dtype == torch.float32
    check_matches_eager(Promote().eval(), [x], 1e-6)
