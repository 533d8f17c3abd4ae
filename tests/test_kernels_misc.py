"""Attention / RMSNorm / RoPE / pointwise templates, CPU only.

Numerics: every kernel runs in Triton's interpreter (one child process for all cases, see
aotpack/kernels/triton/_interpret.py) on fresh random inputs with the output poisoned with NaN,
and is compared with the torch reference: ||out - ref|| / ||ref|| <= 1e-2.
Cross-compiles: each template at Llama-3-8B prefill sizes to an sm_90a cubin; attention's SASS
must use wgmma (HGMMA); parameter slots must name the right storages and strides.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels import run_reference  # noqa: E402
from aotpack.kernels.spec import (  # noqa: E402
    AttentionOp, EmbeddingOp, F32Slot, IntSlot, NullSlot, PointwiseOp, PtrSlot, PwConst, PwExpr,
    PwInput, RMSNormOp, RopeOp, TensorArg, contiguous,
)
from support.interpret import run_interpreted_batch  # noqa: E402
from program_checks import sass_or_skip  # noqa: E402

BF16 = DType.BF16
TOL = 1e-2


# ----------------------------------------------------------------------------- op builders
def attention_case(b, hq, hkv, sq, skv, d, causal, q_transposed=True):
    """q as a transposed view of a [B, S, Hq*D] projection output; k/v contiguous."""
    if q_transposed:
        q = TensorArg("q_proj", BF16, (b, hq, sq, d), (sq * hq * d, d, hq * d, 1))
    else:
        q = contiguous("q_proj", BF16, (b, hq, sq, d))
    k = contiguous("k", BF16, (b, hkv, skv, d))
    v = contiguous("v", BF16, (b, hkv, skv, d))
    out = contiguous("attn_out", BF16, (b, hq, sq, d))
    return AttentionOp(q, k, v, out, causal, 1.0 / math.sqrt(d))


def masked_attention_case(b, hq, hkv, sq, skv, d, causal, mask_shape, mask_dtype):
    """attention_case with a run-time mask of `mask_shape` broadcast to [B, Hq, Sq, Skv]
    (stride 0 on its size-1 and missing leading dims), as lowering passes it."""
    from aotpack.passes.lower import broadcast_to

    op = attention_case(b, hq, hkv, sq, skv, d, causal)
    mask = broadcast_to(contiguous("mask", mask_dtype, mask_shape), (b, hq, sq, skv))
    return AttentionOp(op.q, op.k, op.v, op.out, causal, op.scale, mask)


def rmsnorm_case(rows, cols, weight=True, row_stride=None):
    stride = row_stride or cols
    x = TensorArg("x", BF16, (rows, cols), (stride, 1), 3 * stride)  # offset view
    w = contiguous("w", BF16, (cols,)) if weight else None
    return RMSNormOp(x, w, contiguous("y", BF16, (rows, cols)), 1e-5)


def rope_case(b, h, s, d):
    """x: the transposed view of a [B, S, H*D] projection; out contiguous [B, H, S, D]."""
    x = TensorArg("x", BF16, (b, h, s, d), (s * h * d, d, h * d, 1))
    cos = contiguous("cos", BF16, (s, d))
    sin = TensorArg("sin", BF16, (s, d), (d, 1), 5 * d)  # a view into a longer table
    return RopeOp(x, cos, sin, contiguous("y", BF16, (b, h, s, d)))


def embedding_case(vocab, d, r, c, ids_dtype=DType.I64, expanded=False):
    """ids: a [r, c] view; `expanded`: one row of c ids broadcast over r rows (stride 0), as
    position ids are; the table a row-offset view of a longer one."""
    ids = (TensorArg("ids", ids_dtype, (r, c), (0, 1)) if expanded
           else contiguous("ids", ids_dtype, (r, c)))
    table = TensorArg("table", BF16, (vocab, d), (d, 1), 2 * d)
    return EmbeddingOp(table, ids, contiguous("y", BF16, (r * c, d)))


def _x(i):
    return PwInput(i)


def _f(fn, *args):
    return PwExpr(fn, tuple(args))


POINTWISE_EXPRS = {
    # residual add with a broadcast row vector times a scalar constant
    "add_mul_bcast": (_f("add", _x(0), _f("mul", _x(1), PwConst(0.5))), [(4, 33, 48), (48,)]),
    # SwiGLU-like: silu(a) * b, b broadcast along the middle dim, repeated input a
    "silu_mul": (_f("mul", _f("silu", _x(0)), _x(1)), [(4, 33, 48), (4, 1, 48)]),
    "repeat_input": (_f("add", _f("mul", _x(0), _x(0)), _f("gelu_tanh", _x(0))), [(5, 77)]),
    "unary_mix": (_f("add", _f("tanh", _x(0)),
                     _f("sub", _f("sigmoid", _x(0)), _f("gelu_erf", _f("abs", _x(1))))),
                  [(3, 64), (3, 1)]),
    "exp_log_sqrt": (_f("div", _f("exp", _f("neg", _f("relu", _x(0)))),
                        _f("sqrt", _f("add", _f("abs", _x(1)), PwConst(1.0)))),
                     [(130,), (130,)]),
    "trig_rsqrt_recip": (_f("mul", _f("sin", _x(0)),
                            _f("add", _f("cos", _x(0)),
                                _f("rsqrt", _f("add", _f("mul", _x(1), _x(1)), PwConst(2.0))))),
                         [(7, 9), (9,)]),
    "max_min_pow": (_f("max", _f("min", _x(0), PwConst(1.5)),
                       _f("pow", _f("add", _f("abs", _x(1)), PwConst(0.5)), PwConst(1.7))),
                    [(2, 3, 40), (40,)]),
    "log_recip_pow2": (_f("add", _f("log", _f("add", _f("abs", _x(0)), PwConst(0.1))),
                          _f("recip", _f("add", _f("pow", _x(0), PwConst(2.0)), PwConst(1.0)))),
                       [(257,)]),
    # negative bases: x^3 (a constant form) and x^4 (the general exp2/log2 path, sign fixed up)
    "pow_negative_base": (_f("sub", _f("pow", _x(0), PwConst(3.0)), _f("pow", _x(0), PwConst(4.0))),
                          [(6, 50)]),
}


def pointwise_case(name):
    expr, shapes = POINTWISE_EXPRS[name]
    out_shape = max(shapes, key=len)
    inputs = tuple(contiguous(f"in{i}", BF16, s) for i, s in enumerate(shapes))
    # write through a transposed (non-contiguous) output view when 2-D or more
    out = contiguous("out", BF16, out_shape)
    if len(out_shape) >= 2:
        *lead, r, c = out_shape
        base = contiguous("out", BF16, (*lead, c, r))
        strides = list(base.strides)
        strides[-1], strides[-2] = strides[-2], strides[-1]
        out = TensorArg("out", BF16, tuple(out_shape), tuple(strides))
    return PointwiseOp(inputs, expr, out)


# ----------------------------------------------------------------------------- environments
def _storage_sizes(op) -> dict[str, int]:
    from aotpack.kernels.spec import op_inputs

    sizes: dict[str, int] = {}
    for arg in op_inputs(op) + [op.out]:
        end = arg.offset + sum((n - 1) * s for n, s in zip(arg.shape, arg.strides)) + 1
        sizes[arg.storage] = max(sizes.get(arg.storage, 0), end)
    return sizes


def make_env(op, seed):
    """Fresh random inputs; the output storage poisoned with NaN (unwritten -> test fails).
    Embedding ids: integers over the table's rows and a few past either end (clamped)."""
    gen = torch.Generator().manual_seed(seed)
    env = {name: torch.randn(n, generator=gen).to(torch.bfloat16)
           for name, n in _storage_sizes(op).items()}
    if isinstance(op, AttentionOp) and op.mask is not None:
        # keys hidden at random, and whole rows (the first and every 7th element of the
        # mask's own storage runs): a row that sees nothing must come out as zeros
        n = env[op.mask.storage].numel()
        hidden = torch.rand(n, generator=gen) < 0.4
        hidden[: op.mask.shape[3]] = True
        if op.mask.dtype == DType.BOOL:
            env[op.mask.storage] = ~hidden
        else:
            bias = torch.randn(n, generator=gen).masked_fill(hidden, float("-inf"))
            env[op.mask.storage] = bias.to(op.mask.dtype.to_torch())
    if isinstance(op, EmbeddingOp):
        n, vocab = env[op.ids.storage].numel(), op.table.shape[0]
        env[op.ids.storage] = torch.randint(-3, vocab + 3, (n,), generator=gen).to(
            op.ids.dtype.to_torch())
    env[op.out.storage].fill_(float("nan"))
    return env


def expected(op, env):
    ref_env = {k: v.clone() for k, v in env.items()}
    run_reference(op, ref_env)
    return run_reference_view(op, ref_env)


def run_reference_view(op, env):
    from aotpack.kernels.reference import view

    return view(env, op.out).float()


ATTENTION_CASES = {
    "s37_gqa_causal": attention_case(1, 4, 2, 37, 37, 64, True),
    "s64_mha_noncausal": attention_case(2, 4, 4, 64, 64, 64, False),
    "s100_gqa_noncausal": attention_case(1, 4, 2, 100, 100, 64, False),
    "s100_mha_causal_contig_q": attention_case(2, 4, 4, 100, 100, 64, True, q_transposed=False),
    "sq100_skv37_causal": attention_case(1, 4, 2, 100, 37, 64, True),
    "sq37_skv100_noncausal": attention_case(1, 4, 2, 37, 100, 64, False),
    "d128_causal": attention_case(1, 4, 2, 100, 100, 128, True),
    # decode-sized queries: the default picks a 16-row tile (one real row)
    "sq1_skv1_decode": attention_case(16, 4, 2, 1, 1, 128, True),
    "sq1_skv37_noncausal": attention_case(3, 4, 2, 1, 37, 64, False),
    "sq5_skv40_causal": attention_case(2, 4, 4, 5, 40, 64, True),
    # run-time masks: a padding mask [B, 1, 1, T], a full bool mask with causal, an additive
    # per-head bias (ALiBi-like) with GQA, an f32 [S, T] bias, a decode row
    "mask_padding_bool": masked_attention_case(2, 4, 4, 37, 50, 64, False, (2, 1, 1, 50),
                                               DType.BOOL),
    "mask_full_bool_causal": masked_attention_case(2, 2, 2, 40, 40, 64, True, (2, 2, 40, 40),
                                                   DType.BOOL),
    "mask_head_bias_gqa": masked_attention_case(1, 4, 2, 33, 70, 128, False, (1, 4, 33, 70),
                                                BF16),
    "mask_f32_bias_2d": masked_attention_case(2, 2, 2, 19, 19, 64, False, (19, 19), DType.F32),
    "mask_decode": masked_attention_case(3, 4, 2, 1, 45, 64, False, (3, 1, 1, 45), DType.BOOL),
    # head dims that are no power of two (zero-padded to 128) and the largest, 256
    "d80_causal": attention_case(1, 2, 2, 70, 70, 80, True),
    "d96_gqa_noncausal": attention_case(1, 4, 2, 33, 50, 96, False),
    "d256_causal": attention_case(1, 2, 1, 40, 40, 256, True),
    "d160_gqa_causal": attention_case(1, 4, 2, 37, 37, 160, True),  # zero-padded to 256
    "mask_d192_padding": masked_attention_case(2, 2, 1, 20, 45, 192, False, (2, 1, 1, 45),
                                               DType.BOOL),
    "mask_d80_padding": masked_attention_case(2, 2, 2, 20, 30, 80, False, (2, 1, 1, 30),
                                              DType.BOOL),
}
MASKED = {k for k in ATTENTION_CASES if k.startswith(("mask_", "d80", "d96", "d160"))}
# (no TMA kernel: masks, padded head dims)
# Small tiles exercise several row blocks, the unmasked loop and the diagonal split; every
# case also runs through the TMA (tensor descriptor) kernel.
SMALL_TILES = {"BLOCK_M": 32, "BLOCK_N": 16}
CASES = {
    **{f"attention/{k}": (op, SMALL_TILES if i % 2 == 0 else None)
       for i, (k, op) in enumerate(ATTENTION_CASES.items())},
    **{f"attention_tma/{k}": (op, dict(SMALL_TILES if i % 2 else {}, TMA=True))
       for i, (k, op) in enumerate(ATTENTION_CASES.items()) if k not in MASKED},
    "rmsnorm/c300_weight": (rmsnorm_case(5, 300), None),
    "rmsnorm/c1000_noweight_strided": (rmsnorm_case(4, 1000, weight=False, row_stride=1024), None),
    "rmsnorm/c96_rows_packed": (rmsnorm_case(37, 96), None),  # 16 rows per program, tail
    "rope/transposed_d64": (rope_case(2, 3, 37, 64), None),
    "rope/transposed_d128": (rope_case(1, 2, 20, 128), None),
    **{f"pointwise/{k}": (pointwise_case(k), None) for k in POINTWISE_EXPRS},
    "embedding/d768_i64": (embedding_case(50, 768, 3, 7), None),
    "embedding/d100_i32_expanded": (embedding_case(30, 100, 4, 9, DType.I32, True), None),
    "embedding/d64_rows_tail": (embedding_case(20, 64, 1, 70), {"ROWS": 16}),
}


@pytest.fixture(scope="module")
def interpreted_results():
    """Run every case in one interpreter child; {case: (got, ref)}."""
    jobs, refs = [], {}
    for i, (name, (op, cfg)) in enumerate(CASES.items()):
        env = make_env(op, seed=1000 + i)
        refs[name] = expected(op, env)
        jobs.append((op, env, cfg))
    run_interpreted_batch(jobs)
    return {name: (run_reference_view(op, env), refs[name])
            for (name, (op, _)), (_, env, _) in zip(CASES.items(), jobs)}


@pytest.mark.parametrize("case", list(CASES))
def test_interpreted_matches_reference(interpreted_results, case):
    got, ref = interpreted_results[case]
    assert not torch.isnan(got).any(), "output elements left unwritten (NaN poison) or NaN"
    err = ((got - ref).norm() / ref.norm()).item()
    assert err <= TOL, f"{case}: relative error {err:.3g}"


def test_masked_attention_skips_key_tiles_every_row_hides():
    """Padding past each sequence's end hides whole key tiles: the masked kernel skips their
    loads, so NaN in the padded keys' K and V rows (memory nothing should read) cannot reach
    the output; a partly hidden tile is read and its hidden keys weigh exactly zero. The
    reference runs with those rows zeroed."""
    b, h, sq, skv, d = 2, 2, 20, 64, 64
    op = masked_attention_case(b, h, h, sq, skv, d, False, (b, 1, 1, skv), DType.BOOL)
    env = make_env(op, seed=7)
    lengths = (32, 40)  # 16-key tiles: batch 0 hides tiles 2-3, batch 1 tile 3 (and half of 2)
    mask = torch.zeros(b, skv, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    env["mask"] = mask.reshape(-1)
    ref_env = {k: v.clone() for k, v in env.items()}
    for name, store in (("k", env), ("v", env), ("k", ref_env), ("v", ref_env)):
        rows = store[name].view(b, h, skv, d)
        for i, n in enumerate(lengths):
            skipped = (n + 15) // 16 * 16  # from the first tile no row sees
            rows[i, :, skipped:] = float("nan") if store is env else 0.0
            if store is ref_env:
                rows[i, :, n:] = 0.0
    run_interpreted_batch([(op, env, {"BLOCK_M": 32, "BLOCK_N": 16})])
    got = run_reference_view(op, env)
    assert not torch.isnan(got).any()
    want = expected(op, ref_env)
    assert ((got - want).norm() / want.norm()).item() <= TOL


# ----------------------------------------------------------------------------- codegen units
def test_pointwise_coalesces_contiguous_and_row_broadcast():
    from aotpack.kernels.triton._pointwise_codegen import coalesce

    same = coalesce((8, 16, 32), (512, 32, 1), [((8, 16, 32), (512, 32, 1))])
    assert same.sizes == (4096,) and same.in_strides == ((1,),)
    row = coalesce((8, 16, 32), (512, 32, 1), [((32,), (1,))])
    assert row.sizes == (128, 32) and row.in_strides == ((0, 1),)


def test_pointwise_identical_ops_share_a_kernel(tmp_path, monkeypatch):
    from aotpack.kernels.triton import pointwise

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    op = pointwise_case("silu_mul")
    renamed = PointwiseOp(tuple(TensorArg("other_" + a.storage, a.dtype, a.shape, a.strides)
                                for a in op.inputs), op.expr, op.out)
    assert pointwise.kernel_name(op) == pointwise.kernel_name(renamed)
    fn = pointwise.generated_kernel(op)
    assert Path(fn.fn.__code__.co_filename).parent == tmp_path / "kernels"


# ----------------------------------------------------------------------------- cross-compiles
def _llama_attention():
    """Llama-3-8B prefill: q/k/v are views of one fused QKV projection [1, 2048, 48*128]."""
    b, hq, hkv, s, d = 1, 32, 8, 2048, 128
    row = (hq + 2 * hkv) * d
    strides = (s * row, d, row, 1)
    q = TensorArg("qkv", BF16, (b, hq, s, d), strides)
    k = TensorArg("qkv", BF16, (b, hkv, s, d), strides, hq * d)
    v = TensorArg("qkv", BF16, (b, hkv, s, d), strides, (hq + hkv) * d)
    return AttentionOp(q, k, v, contiguous("attn", BF16, (b, hq, s, d)), True, d ** -0.5)


def _well_formed(launch, storages):
    ck = launch.kernel
    assert ck.cubin[:4] == b"\x7fELF" and ck.block[0] % 32 == 0 and ck.smem <= 232448
    assert isinstance(launch.args[-1], NullSlot) and isinstance(launch.args[-2], NullSlot)
    assert [s.storage for s in launch.args if isinstance(s, PtrSlot)] == storages


def test_attention_llama_cubin_uses_wgmma_and_slots():
    from aotpack.kernels import compile as compile_op

    op = _llama_attention()
    (launch,) = compile_op(op)
    _well_formed(launch, ["qkv", "qkv", "qkv", "attn"])
    ptrs = [s for s in launch.args if isinstance(s, PtrSlot)]
    assert [p.offset for p in ptrs] == [0, 32 * 128 * 2, 40 * 128 * 2, 0]
    ints = [s.value for s in launch.args if isinstance(s, IntSlot)]
    # (batch, head, seq) strides of q, k, v, out, then seq_q, seq_kv
    row = 48 * 128
    assert ints == [2048 * row, 128, row] * 3 + [32 * 2048 * 128, 2048 * 128, 128, 2048, 2048]
    assert [s.value for s in launch.args if isinstance(s, F32Slot)] == [
        pytest.approx(128 ** -0.5 * 1.4426950408889634)]
    assert launch.grid == (32, 2048 // 128, 1)
    assert launch.kernel.fused_ops == ("attention", "causal", "gqa")
    assert launch.kernel.block == (256, 1, 1)
    assert "HGMMA" in sass_or_skip(launch.kernel.cubin)
    assert compile_op(op)[0] is launch  # memoised


def test_rmsnorm_rope_pointwise_llama_cubins():
    from aotpack.kernels import compile as compile_op

    norm = RMSNormOp(contiguous("h", BF16, (2048, 4096)), contiguous("w", BF16, (4096,)),
                     contiguous("hn", BF16, (2048, 4096)), 1e-5)
    (launch,) = compile_op(norm)
    _well_formed(launch, ["h", "w", "hn"])
    # row strides of x and out, rows, cols
    assert [s.value for s in launch.args if isinstance(s, IntSlot)] == [4096, 4096, 2048, 4096]
    assert launch.grid == (2048, 1, 1) and launch.kernel.fused_ops == ("rmsnorm",)

    s, d = 2048, 128
    x = TensorArg("qkv", BF16, (1, 32, s, d), (s * 48 * d, d, 48 * d, 1))
    rope = RopeOp(x, contiguous("cos", BF16, (s, d)), contiguous("sin", BF16, (s, d)),
                  contiguous("q_rot", BF16, (1, 32, s, d)))
    (launch,) = compile_op(rope)
    _well_formed(launch, ["qkv", "cos", "sin", "q_rot"])
    assert [s.value for s in launch.args if isinstance(s, IntSlot)] == [
        # x strides b, h, s; cos b (0: one table), s; sin b, s; out b, h, s; seq
        2048 * 48 * 128, 128, 48 * 128, 0, 128, 0, 128, 32 * 2048 * 128, 2048 * 128, 128, 2048]

    shape = (2048, 14336)
    swiglu = PointwiseOp((contiguous("gate", BF16, shape), contiguous("up", BF16, shape)),
                         _f("mul", _f("silu", _x(0)), _x(1)), contiguous("act", BF16, shape))
    (launch,) = compile_op(swiglu)
    _well_formed(launch, ["act", "gate", "up"])
    assert launch.kernel.fused_ops == ("pointwise", "mul", "silu")
    assert "LDG.E.128" in sass_or_skip(launch.kernel.cubin)  # 16-byte vector loads

    gelu = PointwiseOp((contiguous("a", BF16, (2048, 4096)), contiguous("bias", BF16, (4096,))),
                       _f("gelu_tanh", _f("add", _x(0), _x(1))),
                       contiguous("g", BF16, (2048, 4096)))
    (launch,) = compile_op(gelu)
    _well_formed(launch, ["g", "a", "bias"])


def test_pointwise_every_function_compiles_for_sm90a():
    from aotpack.kernels import compile as compile_op
    from aotpack.kernels.reference.pointwise import BINARY, UNARY

    node = _x(0)
    for fn in UNARY:
        node = _f("add", node, _f(fn, _x(1)))
    for fn in BINARY:
        node = _f(fn, node, _f("add", _x(1), PwConst(3.0)))
    shape = (64, 256)
    op = PointwiseOp((contiguous("a", BF16, shape), contiguous("b", BF16, (256,))), node,
                     contiguous("o", DType.F32, shape))
    (launch,) = compile_op(op)
    _well_formed(launch, ["o", "a", "b"])
    assert set(launch.kernel.fused_ops) == {"pointwise", *UNARY, *BINARY}


def test_attention_tma_llama_cubin_and_tensormap_slots():
    from aotpack.kernels.spec import TensorMapSlot
    from aotpack.kernels.triton import attention

    op = _llama_attention()
    cfg = dict(attention.default_config(op), TMA=True)
    assert cfg in attention.candidate_configs(op)
    (launch,) = attention.compile(op, config=cfg)
    maps = [s for s in launch.args if isinstance(s, TensorMapSlot)]
    assert [m.storage for m in maps] == ["qkv", "qkv", "qkv", "attn"]
    assert [m.offset for m in maps] == [0, 32 * 128 * 2, 40 * 128 * 2, 0]
    row = 48 * 128
    assert maps[0].dims == (1, 32, 2048, 128) and maps[0].strides == (2048 * row, 128, row, 1)
    assert maps[1].dims == (1, 8, 2048, 128) and maps[3].strides == (32 * 2048 * 128,
                                                                         2048 * 128, 128, 1)
    # Triton splits the 256-byte rows into two 128-byte swizzled boxes: the slot says so
    # (q and out boxes have BLOCK_M rows, k and v boxes BLOCK_N rows)
    rows = [cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_N"], cfg["BLOCK_M"]]
    assert [m.box for m in maps] == [(1, 1, r, 64) for r in rows]
    assert all(m.swizzle == "128B" for m in maps)
    listing = sass_or_skip(launch.kernel.cubin)
    assert "UTMALDG" in listing and "HGMMA" in listing


def test_attention_decode_sized_queries_get_a_small_tile():
    """S_q = 1 (decode): a 16-row tile, not the 128-row prefill tile (17.6 us of the 141 us
    llama decode block on the H200 went to 128-row tiles holding one real row each)."""
    from aotpack.kernels.triton import attention

    op = ATTENTION_CASES["sq1_skv1_decode"]
    cfg = attention.default_config(op)
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"]) == (16, 16)
    cands = attention.candidate_configs(op)
    assert cands[0] == cfg and all(c["BLOCK_M"] == 16 for c in cands)
    assert attention.default_config(ATTENTION_CASES["d128_causal"])["BLOCK_M"] == 128
    (launch,) = attention.compile(op, config=cands[-1])
    assert launch.grid == (16 * 4, 1, 1) and launch.kernel.cubin[:4] == b"\x7fELF"


def test_embedding_gpt2_cubin_and_slots():
    """GPT-2's token lookup: 4x512 ids into a 50257x768 table; the row loads and stores are
    16-byte vectors (the table's rows are contiguous)."""
    from aotpack.kernels import compile as compile_op

    op = EmbeddingOp(contiguous("wte", BF16, (50257, 768)), contiguous("ids", DType.I64, (4, 512)),
                     contiguous("emb", BF16, (2048, 768)))
    (launch,) = compile_op(op)
    _well_formed(launch, ["wte", "ids", "emb"])
    # n, vocab, table row stride, ids row stride (ids column stride 1 is compiled in), out
    # stride, ids per row (a run-time value: the sequence length may be symbolic)
    assert [s.value for s in launch.args if isinstance(s, IntSlot)] == [2048, 50257, 768, 512, 768,
                                                                        512]
    assert launch.grid == (2048 // 4, 1, 1) and launch.kernel.fused_ops == ("embedding",)
    sass = sass_or_skip(launch.kernel.cubin)
    assert "LDG.E.128" in sass and "STG.E.128" in sass


def test_integer_copy_is_exact_past_float32_precision():
    """A pointwise copy of int64 values (ids copied into a flat layout) keeps every bit: the
    generated kernel does not pass them through f32 (exact only below 2**24)."""
    src = TensorArg("ids", DType.I64, (3, 5), (1, 3))  # a transposed view: a real copy
    op = PointwiseOp((src,), PwInput(0), contiguous("flat", DType.I64, (3, 5)))
    values = (torch.arange(15, dtype=torch.int64) * 7919 + (1 << 40) + 1)
    env = {"ids": values.clone(), "flat": torch.zeros(15, dtype=torch.int64)}
    run_interpreted_batch([(op, env, None)])
    want = torch.as_strided(values, (3, 5), (1, 3)).reshape(-1)
    assert torch.equal(env["flat"], want)
