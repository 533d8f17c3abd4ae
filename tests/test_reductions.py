"""Row-wise reduction kernels (LayerNormOp, SoftmaxOp, ReduceOp), CPU only.

Numerics: every case runs in Triton's interpreter (one child process for all of them) with the
output poisoned with NaN, and is compared with the torch reference (relative error <= 1e-2 for
bf16 outputs, 1e-5 for f32). Cases cover C not a power of two, offset and padded-row views,
transposed (column-strided) views, packed short rows, and the looped form for long rows.
Cross-compiles: each template at realistic sizes to an sm_90a cubin (16-byte vector loads,
slots, recorded config). End to end: small models through to_graph → compile_graph, executed
with the references (aotpack.executor.run_reference), against eager PyTorch.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from aotpack.dtypes import DType  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.kernels import run_reference  # noqa: E402
from aotpack.kernels.reference import view  # noqa: E402
from aotpack.kernels.spec import (  # noqa: E402
    F32Slot, IntSlot, LayerNormOp, NullSlot, PtrSlot, ReduceOp, SoftmaxOp, TensorArg,
    contiguous, op_inputs,
)
from support.interpret import run_interpreted_batch  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from program_checks import check_matches_eager, kinds, sass_or_skip  # noqa: E402

BF16, F32 = DType.BF16, DType.F32
SMALL_LOOP = {"BLOCK_C": 64, "ROWS": 2, "LOOP": True, "num_warps": 4}  # loop on small rows


# ----------------------------------------------------------------------------- op builders
def rows_view(storage, dtype, rows, cols, row_stride=None, offset=0):
    """[rows, cols] with padded rows (row_stride > cols) starting `offset` elements in."""
    return TensorArg(storage, dtype, (rows, cols), (row_stride or cols, 1), offset)


def transposed(storage, dtype, rows, cols):
    """[rows, cols] view of a contiguous [cols, rows] tensor (column stride = rows)."""
    return TensorArg(storage, dtype, (rows, cols), (1, rows))


def layernorm_case(rows, cols, dtype=BF16, weight=True, bias=True, row_stride=None):
    x = rows_view("x", dtype, rows, cols, row_stride, offset=3 * (row_stride or cols))
    w = contiguous("w", dtype, (cols,)) if weight else None
    b = TensorArg("b", dtype, (cols,), (1,), 7) if bias else None  # a view into a longer table
    return LayerNormOp(x, w, b, contiguous("y", dtype, (rows, cols)), 1e-5)


def softmax_case(rows, cols, dtype=BF16, scale=1.0, row_stride=None, x_t=False, log=False):
    x = transposed("x", dtype, rows, cols) if x_t else rows_view("x", dtype, rows, cols,
                                                                  row_stride, offset=cols)
    return SoftmaxOp(x, rows_view("y", dtype, rows, cols, (row_stride or cols) + 8), scale, log)


def reduce_case(kind, rows, cols, dtype=BF16, row_stride=None, x_t=False):
    x = transposed("x", dtype, rows, cols) if x_t else rows_view("x", dtype, rows, cols,
                                                                  row_stride, offset=5)
    out = TensorArg("y", dtype, (rows,), (2,), 1)  # every other element of a longer vector
    return ReduceOp(kind, x, out)


CASES = {
    "layernorm/c300_bf16_padded": (layernorm_case(5, 300, row_stride=320), None),
    "layernorm/c96_rows_packed_noaffine": (layernorm_case(37, 96, weight=False, bias=False),
                                           None),
    "layernorm/c1000_f32_weight_only": (layernorm_case(4, 1000, F32, bias=False), None),
    "layernorm/c300_looped": (layernorm_case(5, 300), SMALL_LOOP),
    "layernorm/c17000_looped_default": (layernorm_case(2, 17000, bias=False), None),
    "softmax/c300_bf16_scaled_padded": (softmax_case(5, 300, scale=0.125, row_stride=304), None),
    "softmax/c50_rows_packed": (softmax_case(45, 50), None),
    "softmax/c1000_f32": (softmax_case(3, 1000, F32, scale=-2.0), None),
    "softmax/transposed_view": (softmax_case(24, 40, x_t=True), None),
    "softmax/c1000_looped": (softmax_case(3, 1000, scale=4.0), SMALL_LOOP),
    "softmax/c17000_looped_default": (softmax_case(2, 17000), None),
    "log_softmax/c300_f32_scaled": (softmax_case(5, 300, F32, scale=0.5, log=True), None),
    "log_softmax/c50_bf16_packed": (softmax_case(45, 50, log=True), None),
    "log_softmax/c1000_looped": (softmax_case(3, 1000, F32, log=True), SMALL_LOOP),
    **{f"reduce/{k}_c300_bf16": (reduce_case(k, 7, 300, row_stride=310), None)
       for k in ("sum", "mean", "amax", "amin")},
    **{f"reduce/{k}_c77_f32_packed": (reduce_case(k, 40, 77, F32), None)
       for k in ("sum", "mean", "amax", "amin")},
    **{f"reduce/{k}_transposed": (reduce_case(k, 24, 33, x_t=True), None)
       for k in ("sum", "amax")},
    **{f"reduce/{k}_looped": (reduce_case(k, 5, 1000), SMALL_LOOP)
       for k in ("sum", "mean", "amax", "amin")},
    "reduce/mean_c17000_looped_default": (reduce_case("mean", 2, 17000), None),
}
# amax/amin propagate NaN like torch (row 1 holds a NaN): both forms
NAN_CASES = {
    f"nan/{k}{'_looped' if cfg else ''}": (reduce_case(k, 4, 300), cfg)
    for k in ("amax", "amin") for cfg in (None, SMALL_LOOP)
}


# ----------------------------------------------------------------------------- environments
def _storages(op) -> dict[str, tuple[int, DType]]:
    sizes: dict[str, tuple[int, DType]] = {}
    for arg in op_inputs(op) + [op.out]:
        end = arg.offset + sum((n - 1) * s for n, s in zip(arg.shape, arg.strides)) + 1
        sizes[arg.storage] = (max(sizes.get(arg.storage, (0,))[0], end), arg.dtype)
    return sizes


def make_env(op, seed, nan_row=None):
    gen = torch.Generator().manual_seed(seed)
    env = {name: (torch.randn(n, generator=gen) * 3).to(dt.to_torch())
           for name, (n, dt) in _storages(op).items()}
    env[op.out.storage].fill_(float("nan"))
    if nan_row is not None:
        view(env, op.x)[nan_row, 17] = float("nan")
    return env


def _tol(op) -> float:
    return 1e-2 if op.out.dtype == BF16 else 1e-5


@pytest.fixture(scope="module")
def interpreted():
    """Every case in one interpreter child; {case: (op, got, ref)}."""
    jobs, refs, ops = [], {}, {}
    for i, (name, (op, cfg)) in enumerate({**CASES, **NAN_CASES}.items()):
        env = make_env(op, 2000 + i, nan_row=1 if name in NAN_CASES else None)
        ref_env = {k: v.clone() for k, v in env.items()}
        run_reference(op, ref_env)
        refs[name], ops[name] = view(ref_env, op.out).float(), op
        jobs.append((op, env, cfg))
    run_interpreted_batch(jobs)
    return {name: (ops[name], view(env, ops[name].out).float(), refs[name])
            for name, (_, env, _) in zip(ops, jobs)}


@pytest.mark.parametrize("case", list(CASES))
def test_interpreted_matches_reference(interpreted, case):
    op, got, ref = interpreted[case]
    assert not torch.isnan(got).any(), "output elements left unwritten (NaN poison) or NaN"
    err = ((got.double() - ref.double()).norm() / ref.double().norm()).item()
    assert err <= _tol(op), f"{case}: relative error {err:.3g}"


@pytest.mark.parametrize("case", list(NAN_CASES))
def test_amax_amin_propagate_nan(interpreted, case):
    _, got, ref = interpreted[case]
    assert torch.isnan(got[1]) and torch.isnan(ref[1])
    keep = torch.tensor([0, 2, 3])
    assert torch.equal(got[keep], ref[keep])


# ----------------------------------------------------------------------------- cross-compiles
def _well_formed(launch, storages):
    ck = launch.kernel
    assert ck.cubin[:4] == b"\x7fELF" and ck.block[0] % 32 == 0 and ck.smem <= 232448
    assert isinstance(launch.args[-1], NullSlot) and isinstance(launch.args[-2], NullSlot)
    assert [s.storage for s in launch.args if isinstance(s, PtrSlot)] == storages


def _ints(launch):
    return [s.value for s in launch.args if isinstance(s, IntSlot)]


def test_layernorm_cubin_2048x4096():
    from aotpack.kernels import compile as compile_op

    op = LayerNormOp(contiguous("h", BF16, (2048, 4096)), contiguous("w", BF16, (4096,)),
                     contiguous("b", BF16, (4096,)), contiguous("hn", BF16, (2048, 4096)), 1e-5)
    (launch,) = compile_op(op)
    _well_formed(launch, ["h", "w", "b", "hn"])
    assert _ints(launch) == [4096, 4096, 2048, 4096]  # row strides of x, out; rows, cols
    assert [s.value for s in launch.args if isinstance(s, F32Slot)] == [pytest.approx(1e-5)]
    assert launch.grid == (2048, 1, 1) and launch.kernel.block == (256, 1, 1)
    assert launch.kernel.fused_ops == ("layer_norm",)
    assert launch.kernel.config["LOOP"] is False and launch.kernel.config["BLOCK_C"] == 4096
    assert compile_op(op)[0] is launch  # memoised
    listing = sass_or_skip(launch.kernel.cubin)
    assert "LDG.E.128" in listing and "STG.E.128" in listing  # 16-byte vectors


def test_layernorm_short_rows_are_packed():
    from aotpack.kernels import compile as compile_op

    op = LayerNormOp(contiguous("h", BF16, (8192, 768)), contiguous("w", BF16, (768,)),
                     contiguous("b", BF16, (768,)), contiguous("hn", BF16, (8192, 768)), 1e-5)
    (launch,) = compile_op(op)
    assert launch.kernel.config["ROWS"] == 2 and launch.grid == (4096, 1, 1)


def test_softmax_cubins_whole_row_and_vocab_loop():
    from aotpack.kernels import compile as compile_op

    (launch,) = compile_op(SoftmaxOp(contiguous("s", BF16, (2048, 4096)),
                                     contiguous("p", BF16, (2048, 4096)), 0.125))
    _well_formed(launch, ["s", "p"])
    assert launch.kernel.fused_ops == ("scale", "softmax")
    assert [s.value for s in launch.args if isinstance(s, F32Slot)] == [0.125]
    assert "LDG.E.128" in sass_or_skip(launch.kernel.cubin)
    # GPT-2 vocabulary: too long for registers, looped (online max/sum, 2 passes)
    (launch,) = compile_op(SoftmaxOp(contiguous("logits", BF16, (8192, 50257)),
                                     contiguous("probs", BF16, (8192, 50257))))
    _well_formed(launch, ["logits", "probs"])
    assert launch.kernel.config["LOOP"] is True and launch.grid == (8192, 1, 1)
    assert launch.kernel.fused_ops == ("softmax",)
    # Llama vocabulary (a multiple of 8): the loop still uses 16-byte vectors
    (launch,) = compile_op(SoftmaxOp(contiguous("logits", BF16, (4096, 32000)),
                                     contiguous("probs", F32, (4096, 32000))))
    assert launch.kernel.config["LOOP"] is True
    assert "LDG.E.128" in sass_or_skip(launch.kernel.cubin)


@pytest.mark.parametrize("kind", ["sum", "mean", "amax", "amin"])
def test_reduce_cubins(kind):
    from aotpack.kernels import compile as compile_op

    (launch,) = compile_op(ReduceOp(kind, contiguous("h", BF16, (2048, 4096)),
                                    contiguous("r", BF16, (2048,))))
    _well_formed(launch, ["h", "r"])
    assert _ints(launch) == [4096, 2048, 4096]  # x row stride, rows, cols (unit strides baked)
    assert launch.kernel.fused_ops == (kind,) and launch.kernel.config["kind"] == kind
    assert "LDG.E.128" in sass_or_skip(launch.kernel.cubin)
    (launch,) = compile_op(ReduceOp(kind, contiguous("h", F32, (64, 50257)),
                                    contiguous("r", F32, (64,))))
    assert launch.kernel.config["LOOP"] is True


def test_identical_reductions_share_a_cubin():
    from aotpack.kernels import compile as compile_op

    a = compile_op(ReduceOp("sum", contiguous("a", BF16, (256, 1024)),
                            contiguous("ra", BF16, (256,))))[0]
    b = compile_op(ReduceOp("sum", contiguous("b", BF16, (256, 1024)),
                            contiguous("rb", BF16, (256,))))[0]
    assert a is not b and a.kernel is b.kernel


# ----------------------------------------------------------------------------- end to end
class GPT2MLPBlock(torch.nn.Module):
    """Pre-LN (GPT-2) MLP half-block, then a final post-LN (BERT style)."""

    def __init__(self, d=64, f=256):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, f)
        self.proj = torch.nn.Linear(f, d)
        self.ln_f = torch.nn.LayerNorm(d, eps=1e-12)

    def forward(self, x):
        h = x + self.proj(torch.nn.functional.gelu(self.fc(self.ln_1(x)), approximate="tanh"))
        return self.ln_f(h)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
def test_gpt2_block_layernorm(dtype, tol):
    model = GPT2MLPBlock().to(dtype)
    p = check_matches_eager(model, (torch.randn(2, 8, 64, dtype=dtype),), tol)
    gemm = "GemmOp" if dtype == torch.bfloat16 else "ConvOp"  # f32: 1x1 convs on tf32
    assert kinds(p) == ["LayerNormOp", gemm, gemm, "LayerNormOp"]
    ln = p.ops[0]
    assert ln.weight is not None and ln.bias is not None and ln.x.shape == (16, 64)
    assert p.ops[-1].eps == 1e-12


def test_layernorm_without_affine_and_without_bias():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.LayerNorm(48, elementwise_affine=False)
            self.b = torch.nn.LayerNorm(48, bias=False)

        def forward(self, x):
            return self.a(x), self.b(x.transpose(0, 1))  # a strided input

    p = check_matches_eager(M(), (torch.randn(3, 5, 48),), 1e-4)
    assert kinds(p) == ["LayerNormOp", "PointwiseOp", "LayerNormOp"]  # transposed: one copy
    assert p.ops[0].weight is None and p.ops[0].bias is None
    assert p.ops[2].weight is not None and p.ops[2].bias is None


class Logits(torch.nn.Module):
    def __init__(self, d=64, vocab=1000, temperature=None):
        super().__init__()
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.temperature = temperature

    def forward(self, x):
        logits = self.head(x)
        if self.temperature is not None:
            logits = logits / self.temperature
        return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
def test_softmax_over_logits(dtype, tol):
    p = check_matches_eager(Logits().to(dtype), (torch.randn(2, 5, 64, dtype=dtype),), tol)
    assert kinds(p) == ["GemmOp" if dtype == torch.bfloat16 else "ConvOp", "SoftmaxOp"]
    assert p.ops[1].x.shape == (10, 1000) and p.ops[1].scale == 1.0


def test_log_softmax_over_logits():
    class M(Logits):
        def forward(self, x):
            return torch.log_softmax(self.head(x) * 0.5, dim=-1)

    p = check_matches_eager(M(), (torch.randn(2, 5, 64),), 1e-4)
    assert kinds(p) == ["ConvOp", "SoftmaxOp"]  # f32: the head is a 1x1 conv on tf32
    assert p.ops[1].log and p.ops[1].scale == 0.5


def test_log_softmax_cubin():
    from aotpack.kernels import compile as compile_op

    (launch,) = compile_op(SoftmaxOp(contiguous("logits", BF16, (512, 50257)),
                                     contiguous("lp", F32, (512, 50257)), log=True))
    assert launch.kernel.fused_ops == ("log_softmax",) and launch.kernel.config["LOOP"] is True


def test_softmax_absorbs_a_temperature():
    p = check_matches_eager(Logits(temperature=0.7), (torch.randn(2, 5, 64),), 1e-4)
    assert kinds(p) == ["ConvOp", "SoftmaxOp"]  # f32: the head is a 1x1 conv on tf32
    assert p.ops[1].scale == pytest.approx(1 / 0.7)


def test_softmax_with_upcast():
    class M(torch.nn.Module):  # HF attention-probability style
        def forward(self, x):
            return torch.softmax(x.float() * 0.125, dim=-1).to(x.dtype)

    p = check_matches_eager(M(), (torch.randn(4, 6, 40, dtype=torch.bfloat16),), 1e-2)
    assert kinds(p) == ["SoftmaxOp"]  # both casts absorbed: reads bf16, writes bf16
    (op,) = p.ops
    assert op.x.dtype == BF16 and op.out.dtype == BF16 and op.scale == 0.125


def test_casts_around_reductions_are_absorbed():
    class M(torch.nn.Module):
        def forward(self, x):
            stats = torch.cat([x.float().mean(-1, keepdim=True).to(x.dtype), x], dim=-1)
            ln = torch.nn.functional.layer_norm(x.float(), (40,)).to(torch.bfloat16)
            return stats, ln, torch.softmax(x, -1, dtype=torch.float32)

    p = check_matches_eager(M(), (torch.randn(4, 6, 40, dtype=torch.bfloat16),), 1e-2)
    assert kinds(p) == ["ReduceOp", "PointwiseOp", "LayerNormOp", "SoftmaxOp"]
    mean, copy, ln, sm = p.ops
    # the mean is written straight into its column of the cat (row stride 41)
    assert mean.x.dtype == BF16 and mean.out.storage == copy.out.storage == "out0"
    assert mean.out.strides == (41,)
    assert ln.x.dtype == BF16 and ln.out.dtype == BF16
    assert sm.x.dtype == BF16 and sm.out.dtype == F32


def test_layernorm_and_softmax_write_into_a_cat():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(24)

        def forward(self, x):
            return torch.cat([self.ln(x), x.softmax(-1)], dim=-1) * 2

    p = check_matches_eager(M(), (torch.randn(2, 3, 24),), 1e-4)
    assert kinds(p) == ["LayerNormOp", "SoftmaxOp", "PointwiseOp"]  # no copies
    ln, sm, _ = p.ops
    assert ln.out.storage == sm.out.storage and ln.out.strides == sm.out.strides == (48, 1)
    assert (ln.out.offset, sm.out.offset) == (0, 24)


class Reductions(torch.nn.Module):
    def forward(self, x):
        return (x.mean(-1), x.sum(-1, keepdim=True), x.amax(-1), x.amin(-1, keepdim=True),
                x - x.mean(-1, keepdim=True))


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
def test_last_dim_reductions(dtype, tol):
    p = check_matches_eager(Reductions(), (torch.randn(3, 4, 50, dtype=dtype),), tol)
    reduces = [op for op in p.ops if isinstance(op, ReduceOp)]
    assert sorted(op.kind for op in reduces) == ["amax", "amin", "mean", "mean", "sum"]
    assert all(op.x.shape == (12, 50) and op.out.shape == (12,) for op in reduces)
    assert kinds(p).count("PointwiseOp") == 1


def test_reduce_over_trailing_dims_and_everything():
    class M(torch.nn.Module):
        def forward(self, x):
            return x.sum((-2, -1)), x.mean()

    p = check_matches_eager(M(), (torch.randn(3, 4, 50),), 1e-4)
    assert [(op.x.shape, op.out.shape) for op in p.ops] == [((3, 200), (3,)), ((1, 600), (1,))]


class OtherDims(torch.nn.Module):
    """Reductions over dims that are not the trailing ones: a leading dim, the middle one,
    the spatial dims of an NHWC map (ConvNeXt V2's global response norm), argmax over one."""

    def forward(self, x, nhwc):
        g = torch.linalg.vector_norm(nhwc, ord=2, dim=(1, 2), keepdim=True)
        return (x.sum(0), x.amax(1), x.mean((0, 2)), x.argmax(1),
                nhwc * (g / (g.mean(-1, keepdim=True) + 1e-6)))


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
def test_reduce_over_other_dims_moves_them_last(dtype, tol):
    x, nhwc = torch.randn(16, 9, 40, dtype=dtype), torch.randn(2, 5, 6, 24, dtype=dtype)
    p = check_matches_eager(OtherDims(), (x, nhwc), tol)
    shapes = sorted((tuple(op.x.shape), tuple(op.out.shape)) for op in p.ops
                    if isinstance(op, ReduceOp))
    # [kept dims, reduced dims] rows: sum(0) (360, 16), amax(1) and argmax(1) (640, 9),
    # mean((0, 2)) (9, 640), the norm's sum over H, W (48, 30), its mean over C (2, 24)
    assert shapes == sorted([((360, 16), (360,)), ((640, 9), (640,)), ((640, 9), (640,)),
                             ((9, 640), (9,)), ((48, 30), (48,)), ((2, 24), (2,))]), shapes


class HandLayerNorm(torch.nn.Module):
    """LayerNorm written out (BERT's original TF port, ConvNeXt's channels-last LayerNorm)."""

    def __init__(self, d, eps=1e-6, rsqrt=False, affine=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d)) if affine else None
        self.bias = torch.nn.Parameter(torch.randn(d)) if affine else None
        self.eps, self.rsqrt = eps, rsqrt

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        if self.rsqrt:
            y = (x - u) * torch.rsqrt(s + self.eps)
        else:
            y = (x - u) / torch.sqrt(s + self.eps)
        return self.weight * y + self.bias if self.weight is not None else y


@pytest.mark.parametrize("rsqrt,affine,dtype", [(False, True, torch.float32),
                                                (True, True, torch.float32),
                                                (False, False, torch.float32),
                                                (True, True, torch.bfloat16)])
def test_written_out_layernorm_is_fused(rsqrt, affine, dtype):
    model = HandLayerNorm(40, rsqrt=rsqrt, affine=affine).to(dtype)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    p = check_matches_eager(model, (torch.randn(3, 7, 40, dtype=dtype),), tol)
    assert kinds(p) == ["LayerNormOp"]
    (op,) = p.ops
    assert op.eps == 1e-6 and (op.weight is not None) == affine == (op.bias is not None)


def test_var_std_and_layernorm_over_var():
    class M(torch.nn.Module):
        def forward(self, x):
            u = x.mean(-1, keepdim=True)
            ln = (x - u) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
            return ln, x.var(-1), x.std(-1, keepdim=True), x.var((1, 2), correction=0), x.std()

    p = check_matches_eager(M(), (torch.randn(3, 5, 40),), 1e-4)
    assert kinds(p)[0] == "LayerNormOp"  # the written-out form over var() is recognised
    assert set(kinds(p)) == {"LayerNormOp", "ReduceOp", "PointwiseOp"}


class _SoftmaxOfCastSum(torch.nn.Module):
    def forward(self, a, b):
        return torch.softmax((a + b).float(), dim=-1)


class _CatOfCastSoftmax(torch.nn.Module):
    def forward(self, a, b):
        return torch.cat([b, a.softmax(-1).to(torch.bfloat16)], dim=1)


def test_cast_rooting_a_pointwise_region_before_a_softmax_still_runs():
    """(a + b).float(): the add is absorbed into the cast's region, so the reduction must not
    absorb the cast too (it did: the add was computed by no kernel, KeyError)."""
    a, b = (torch.randn(4, 40, dtype=torch.bfloat16) for _ in range(2))
    p = check_matches_eager(_SoftmaxOfCastSum(), (a, b), 1e-2)
    assert "SoftmaxOp" in kinds(p)


def test_reduction_with_an_output_cast_is_not_planned_into_a_strided_view():
    """softmax(...).to(bf16) written into a cat slice: the row kernel (not the cast) writes the
    value, so it must not be given a view it cannot flatten (it was: LoweringError)."""
    a = torch.randn(2, 3, 8, dtype=torch.float32)
    b = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    p = check_matches_eager(_CatOfCastSoftmax(), (a, b), 1e-2)
    assert "SoftmaxOp" in kinds(p)


# ----------------------------------------------------------------------------- integer rows
INT_CASES = [  # (kind, x dtype, out dtype, rows, cols): a mask's length, counts, id maxima
    ("sum", DType.I64, DType.I64, 3, 7), ("sum", DType.BOOL, DType.I64, 5, 1500),
    ("sum", DType.I32, DType.I64, 40, 77), ("amax", DType.I64, DType.I64, 4, 1030),
    ("amin", DType.I32, DType.I32, 6, 9), ("amax", DType.BOOL, DType.BOOL, 3, 20),
]


def _int_env(op, seed):
    gen = torch.Generator().manual_seed(seed)
    n = _storages(op)["x"][0]
    if op.x.dtype == DType.BOOL:
        x = torch.rand(n, generator=gen) > 0.5
    else:  # values past 2**24, where an f32 accumulation would round
        x = torch.randint(-(2 ** 30), 2 ** 30, (n,), generator=gen).to(op.x.dtype.to_torch())
    out = torch.full((_storages(op)["y"][0],), -7, dtype=torch.int64).to(op.out.dtype.to_torch())
    return {"x": x, "y": out}


def test_integer_and_bool_rows_reduce_exactly_in_int64():
    """sum / amax / amin of integer or bool rows (ESM's `attention_mask.sum(-1)`): int64
    accumulation, exact where f32 would round (values past 2**24), interpreted like the GPU,
    against torch; and each compiles for sm_90a."""
    from aotpack.kernels import compile as compile_op

    jobs, refs = [], []
    for i, (kind, xd, od, rows, cols) in enumerate(INT_CASES):
        op = ReduceOp(kind, rows_view("x", xd, rows, cols, cols + 3, offset=2),
                      TensorArg("y", od, (rows,), (2,), 1))
        env = _int_env(op, 3000 + i)
        x = view(env, op.x).long()
        refs.append({"sum": x.sum(-1), "amax": x.amax(-1), "amin": x.amin(-1)}[kind])
        jobs.append((op, env, None))
        (launch,) = compile_op(op)
        assert launch.kernel.entry.startswith("reduce_int_kernel") and launch.kernel.cubin
    run_interpreted_batch(jobs)
    for (op, env, _), ref in zip(jobs, refs):
        got = view(env, op.out).long()
        assert torch.equal(got, ref.to(op.out.dtype.to_torch()).long()), op


def test_a_mask_length_lowers_to_an_int64_reduction():
    import torch.nn as nn

    class Lengths(nn.Module):
        def forward(self, h, mask):
            return h.sum(1) / mask.sum(-1, keepdim=True), mask.sum(-1), (mask > 0).sum(-1)

    from aotpack.executor import run_reference as run_program

    h, mask = torch.randn(3, 5, 8), torch.tensor([[1] * 5, [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    program = compile_graph(to_graph(Lengths(), (h, mask)))
    ints = [op for op in program.ops if isinstance(op, ReduceOp) and not op.x.dtype.is_float]
    assert ints and all(op.kind == "sum" for op in ints)
    got, want = run_program(program, [h, mask]), Lengths()(h, mask)
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == w.dtype == torch.int64 and torch.equal(g, w)


def test_sums_of_narrow_integers_and_bools_are_int64_like_torch():
    """torch sums int32, uint8 and bool to int64 (values here past 2**24: exact), keeps the
    dtype of amax, and casts the input first for sum(dtype=...) (a review found the first
    typed i32 and the last refused)."""
    import torch.nn as nn

    from aotpack.executor import run_reference as run_program

    class Sums(nn.Module):
        def forward(self, a32, u8, b, f):
            return (a32.sum(-1), u8.sum(0), b.sum(-1), (a32 > 0).sum(),
                    f.sum(-1, dtype=torch.float32), a32.amax(-1), b.amax(-1))

    g = torch.Generator().manual_seed(0)
    ins = (torch.randint(-2 ** 30, 2 ** 30, (3, 7), generator=g, dtype=torch.int32),
           torch.randint(0, 255, (3, 7), generator=g, dtype=torch.uint8),
           torch.rand(3, 7, generator=g) > 0.5, torch.randn(3, 7, generator=g).to(torch.bfloat16))
    program = compile_graph(to_graph(Sums(), ins))
    for got, want in zip(run_program(program, list(ins)), Sums()(*ins)):
        assert got.dtype == want.dtype
        if want.is_floating_point():
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
        else:
            assert torch.equal(got, want)
