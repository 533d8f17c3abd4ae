"""The Triton Hopper GEMM template, without a GPU:
- numerics: the kernel source run by Triton's interpreter (in one child process) against the
  torch reference, for every epilogue, ragged shapes, strided views, f16/f32 dtypes;
- cross-compilation to sm_90a: cubins, launch slots, HGMMA in the SASS;
- the config heuristic and the errors for what the template refuses.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.reference.gemm import reference
from aotpack.kernels.spec import (
    SM90, Act, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, GemmOp, IntSlot, NullSlot, PtrSlot,
    TensorArg, TensorMapSlot, contiguous,
)
from support.sass import count_instructions
from program_checks import (
    bench_smoke_rows, gemm_storage_sizes, interpret_gemm_cases, sass_or_skip,
)

gemm = pytest.importorskip("aotpack.kernels.triton.gemm")
from aotpack.kernels.triton.gemm_configs import (  # noqa: E402
    LARGE, LARGE_LONG_K, MEDIUM, SMALL_M, SMALL_M_NARROW, SMALL_M_NARROWEST, GemmConfig,
    SplitKConfig,
)
from aotpack.kernels.triton.gemm_heuristic import (  # noqa: E402
    choose_config, choose_tile_config, large_tiles_win,
)

BF, F16, F32 = DType.BF16, DType.F16, DType.F32
# small tiles so that the interpreter walks many tiles with ragged edges in a few seconds
TINY = GemmConfig(BM=32, BN=32, BK=16, GROUP_M=2, num_warps=4, num_stages=2, EPI_SPLIT=2)
TINY_SPLIT4 = TINY.with_(BN=64, EPI_SPLIT=4)


# ----------------------------------------------------------------------------- op builders
def _bias(N, dtype=BF):
    return EpBias(contiguous("bias", dtype, (N,)))


def _add(M, N, dtype=BF):
    return EpAdd(contiguous("res", dtype, (M, N)))


def _mul(M, N, dtype=BF):
    return EpMul(contiguous("up", dtype, (M, N)))


def _scale(n, storage="scale"):
    """EpScale: per-tensor for n == 1, else per-channel (f32, as the spec requires)."""
    return EpScale(contiguous(storage, F32, (n,)))


def _op(M, N, K, epilogue=(), dtype=BF, out_dtype=None, out=None, a=None):
    out = out or contiguous("out", out_dtype or dtype, (M, N))
    a = a or contiguous("a", dtype, (M, K))
    return GemmOp(a, contiguous("b", dtype, (N, K)), out, tuple(epilogue))


def _swiglu_op(M, N, K, group, epilogue=(), dtype=BF):
    """SwiGLU GEMM: b holds 2N interleaved gate/up rows, out has N columns."""
    return GemmOp(contiguous("a", dtype, (M, K)), contiguous("b", dtype, (2 * N, K)),
                  contiguous("out", dtype, (M, N)), (EpSwiGLU(group), *epilogue))


def _env(op: GemmOp, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(n, generator=g).to(dt.to_torch())
            for name, (n, dt) in gemm_storage_sizes(op).items()}


def _with_out(op: GemmOp, storage: str) -> GemmOp:
    o = op.out
    return replace(op, out=TensorArg(storage, o.dtype, o.shape, o.strides, o.offset))


def _fp8(op: GemmOp) -> GemmOp:
    """`op` with an f8e4m3 weight and a positive dequantization scale per weight row."""
    return replace(op, b=replace(op.b, dtype=DType.F8E4M3),
                   b_scale=contiguous("bscale", F32, (op.b.shape[0],)))


def _env_scaled(op: GemmOp, seed: int) -> dict:
    env = _env(op, seed)
    for name in ("bscale", "ascale"):
        if name in env:
            env[name] = env[name].abs() + 0.5
    return env


# name -> (op, config or None for the heuristic's choice)
M, N, K = 67, 45, 40  # not multiples of any tile; K*2 = 80 B keeps TMA rows 16-aligned
CASES = {
    "none": (_op(M, N, K), TINY),
    "bias": (_op(M, N, K, [_bias(N)]), TINY),
    "gelu_tanh": (_op(M, N, K, [EpAct(Act.GELU_TANH)]), TINY),
    "gelu_erf": (_op(M, N, K, [EpAct(Act.GELU_ERF)]), TINY),
    "silu": (_op(M, N, K, [EpAct(Act.SILU)]), TINY),
    "relu": (_op(M, N, K, [EpAct(Act.RELU)]), TINY),
    "add": (_op(M, N, K, [_add(M, N)]), TINY),
    "mul": (_op(M, N, K, [_mul(M, N)]), TINY),
    "bias_gelu_add": (_op(M, N, K, [_bias(N), EpAct(Act.GELU_TANH), _add(M, N)]), TINY),
    "bias_silu_mul_add": (_op(M, N, K, [_bias(N), EpAct(Act.SILU), _mul(M, N), _add(M, N)]),
                          TINY),
    # N*2 = 96 B rows: the output goes through a TMA store (clipped at the edges)
    "tma_store_split4": (_op(M, 48, K, [_bias(48), EpAct(Act.RELU)]), TINY_SPLIT4),
    "pointer_store": (_op(M, 48, K, [_add(M, 48)]), TINY.with_(TMA_STORE=False)),
    "no_flatten": (_op(M, 48, K, [_bias(48)]), TINY.with_(FLATTEN=False, GROUP_M=1)),
    # output = a column slice of a wider buffer (offset 8 B: not TMA-aligned -> pointer store)
    "strided_out": (_op(M, N, K, [_bias(N), EpAct(Act.SILU)],
                        out=TensorArg("out", BF, (M, N), (N + 19, 1), 4)), TINY),
    # a = rows of a wider buffer starting at column 8 (16 B aligned): still TMA
    "strided_a": (_op(M, N, K, a=TensorArg("a", BF, (M, K), (K + 24, 1), 8)), TINY),
    "f16_in_f32_out": (_op(M, N, K, [_bias(N, F32), _mul(M, N, F16)], dtype=F16,
                           out_dtype=F32), TINY),
    # the heuristic's own configs: 128x128 tiles (EPI_SPLIT 2) and decode-sized M
    "default_medium": (_op(130, 96, 64, [_bias(96), EpAct(Act.GELU_ERF), _add(130, 96)]), None),
    "default_decode": (_op(5, 72, 64, [_bias(72)]), None),
    # EpScale: per-tensor after a bias, per-channel before an activation
    "scale_tensor": (_op(M, N, K, [_bias(N), _scale(1)]), TINY),
    "scale_channel_silu": (_op(M, N, K, [_scale(N), EpAct(Act.SILU), _add(M, N)]), TINY),
    # SwiGLU, group 16: 96 accumulator columns = one 64-wide tile and a ragged one (zero-filled
    # half pair), 32 output columns per tile in two subtiles, TMA store
    "swiglu_g16": (_swiglu_op(M, 48, K, 16), TINY.with_(BN=64)),
    # group 64 (what the fusion makes) with a residual and a per-channel scale after it; pointer
    # store and the TMA store
    "swiglu_g64_add_scale": (_swiglu_op(M, 192, K, 64, [_add(M, 192), _scale(192)]),
                             TINY.with_(BN=128, TMA_STORE=False)),
    "swiglu_g64_tma": (_swiglu_op(M, 64, K, 64, [_scale(1)]), TINY.with_(BN=128, EPI_SPLIT=4)),
    # the heuristic's decode config widened to whole pairs (BN 32 -> 128)
    "swiglu_default_decode": (_swiglu_op(5, 64, 64, 64), None),
    # FP8 weights (K = 48: 48-byte f8 rows stay TMA-aligned): widened in registers, the
    # accumulator scaled per column before the epilogue and before SwiGLU's pairing
    "fp8_bias_silu": (_fp8(_op(M, N, 48, [_bias(N), EpAct(Act.SILU)])), TINY),
    "fp8_f16_add": (_fp8(_op(M, N, 48, [_add(M, N, F16)], dtype=F16)), TINY),
    "fp8_swiglu": (_fp8(_swiglu_op(M, 48, 48, 16)), TINY.with_(BN=64)),
    "fp8_default_medium": (_fp8(_op(130, 96, 64, [_bias(96)])), None),
    # FP8 activations too (--precision fp8): row scales over all of K, the e4m3 wgmma
    "w8a8_bias": (replace(_fp8(_op(M, N, 64, [_bias(N)])), quantize_a=True),
                  TINY.with_(BK=32)),  # an e4m3 wgmma takes K = 32
    "w8a8_swiglu": (replace(_fp8(_swiglu_op(M, 48, 64, 16)), quantize_a=True),
                    TINY.with_(BN=64, BK=32)),
    # the input already in e4m3 with its scale per row (an RMSNorm wrote it so)
    "fp8_input": (replace(_fp8(_op(M, N, 64, [_bias(N)])), a=contiguous("a", DType.F8E4M3,
                          (M, 64)), a_scale=contiguous("ascale", F32, (M,))),
                   TINY.with_(BK=32)),
}


@pytest.fixture(scope="module")
def interpreted():
    """Every case run once by the interpreter (one child process) and by the reference."""
    return interpret_gemm_cases(CASES, _env_scaled, seed0=0)


@pytest.mark.parametrize("name", list(CASES))
def test_interpreter_matches_reference(interpreted, name):
    op, env = interpreted[name]
    ref_op = _with_out(op, "ref_out")
    reference(ref_op, env)
    got = torch.as_strided(env[op.out.storage], op.out.shape, op.out.strides, op.out.offset)
    want = torch.as_strided(env["ref_out"], op.out.shape, op.out.strides, op.out.offset)
    rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert rel <= 1e-2, f"{name}: relative error {rel:.3g}"
    # masked stores: nothing outside the output view (a strided view's gaps) was written
    outside = ~_view_mask(op.out, env["orig_out"].numel())
    assert torch.equal(env[op.out.storage][outside], env["orig_out"][outside])


def _view_mask(arg: TensorArg, numel: int) -> torch.Tensor:
    mask = torch.zeros(numel, dtype=torch.bool)
    torch.as_strided(mask, arg.shape, arg.strides, arg.offset).fill_(True)
    return mask


# ----------------------------------------------------------------------------- cross-compile
BIG_SHAPES = [(4096, 4096, 4096), (4096, 16384, 4096), (4096, 4096, 16384), (2048, 4096, 4096),
              (2048, 6144, 4096), (2048, 14336, 4096), (2048, 4096, 14336), (2048, 14336, 14336),
              (2048, 6144, 14336)]


def _check_launch(launch, op, cfg):
    k = launch.kernel
    assert k.cubin[:4] == b"\x7fELF"
    assert k.block == (32 * cfg.num_warps, 1, 1)
    assert k.smem <= SM90.smem_limit
    assert k.config["BM"] == cfg.BM and k.config["num_stages"] == cfg.num_stages
    assert launch.grid[0] <= SM90.sm_count and launch.grid[1:] == (1, 1)
    assert launch.grid[0] == min(gemm.num_tiles(op, cfg), SM90.sm_count)
    maps = [s for s in launch.args if isinstance(s, TensorMapSlot)]
    assert maps[0].storage == op.a.storage and maps[0].box == (cfg.BM, cfg.BK)
    assert maps[1].storage == op.b.storage and maps[1].box == (cfg.BN, cfg.BK)
    if gemm.uses_tma_store(op, cfg):
        assert maps[2].storage == op.out.storage
        assert maps[2].box == (cfg.BM, cfg.BN // cfg.EPI_SPLIT)
    for m in maps:
        row_bytes = m.box[-1] * m.dtype.nbytes
        assert m.swizzle == {128: "128B", 64: "64B", 32: "32B"}.get(row_bytes, "none")
        assert m.dims == tuple(m.dims) and m.strides[-1] == 1
    assert isinstance(launch.args[-1], NullSlot)  # profile scratch
    return maps


def test_compile_large_mlp_gemm_with_epilogue():
    M_, N_, K_ = 2048, 14336, 4096
    op = _op(M_, N_, K_, [_bias(N_), EpAct(Act.GELU_TANH), _add(M_, N_)])
    (launch,) = gemm.compile(op, SM90)
    cfg = choose_config(M_, N_, K_, BF, SM90)
    assert cfg == LARGE
    maps = _check_launch(launch, op, cfg)
    assert len(maps) == 3
    assert launch.kernel.fused_ops == ("gemm", "bias", "gelu_tanh", "add")
    assert launch.kernel.config["EPI_SPLIT"] == 4 and launch.kernel.config["num_warps"] == 8
    ptrs = [s.storage for s in launch.args if isinstance(s, PtrSlot)]
    assert ptrs == ["bias", "res"]
    ints = [s.value for s in launch.args if isinstance(s, IntSlot)]
    assert {M_, N_, K_} <= set(ints)


def test_compile_is_memoized_and_sass_has_hgmma():
    op = _op(4096, 4096, 4096)
    (first,) = gemm.compile(op, SM90)
    (second,) = gemm.compile(_op(4096, 4096, 4096, a=contiguous("x", BF, (4096, 4096))), SM90)
    assert second.kernel is first.kernel  # same specialisation, other storage: one cubin
    _check_launch(first, op, LARGE)
    listing = sass_or_skip(first.kernel.cubin)
    assert count_instructions(listing, "HGMMA") > 0, "no wgmma in the SASS"
    assert count_instructions(listing, "UTMALDG") > 0, "operands not loaded by TMA"
    assert count_instructions(listing, "STL") == 0, "register spills"


@pytest.mark.parametrize("out", ["f32_pointer_store", "strided", "wide_index", "f16", "decode"])
def test_compile_output_variants(out):
    M_, N_, K_ = 2048, 4096, 4096
    cfg = LARGE
    if out == "decode":  # BN=32: 64-byte output rows, 64B swizzle
        M_, cfg = 16, SMALL_M_NARROWEST
        op = _op(M_, N_, K_, [_bias(N_), _add(M_, N_)])
    elif out == "f16":
        op = _op(M_, N_, K_, [_bias(N_, F16), EpAct(Act.GELU_ERF)], dtype=F16)
    elif out == "f32_pointer_store":
        op = _op(M_, N_, K_, [EpAct(Act.SILU), _mul(M_, N_, F32)], out_dtype=F32)
    elif out == "strided":  # a column slice of a [M, 3N] buffer (fused QKV output)
        op = _op(M_, N_, K_, out=TensorArg("qkv", BF, (M_, N_), (3 * N_, 1), N_))
    else:  # residual offsets pass 2^31 elements: 64-bit epilogue indexing
        res = EpAdd(TensorArg("big", BF, (M_, N_), (2**21, 1), 0))
        op = _op(M_, N_, K_, [_bias(N_), res])
        assert gemm.kernel_args(op, LARGE)["WIDE_INDEX"].value is True
    (launch,) = gemm.compile_config(op, cfg, SM90)
    maps = _check_launch(launch, op, cfg)
    assert len(maps) == (2 if out == "f32_pointer_store" else 3)
    # the config records the store actually compiled in (f32 rows of 64 columns are 256 B)
    assert launch.kernel.config["TMA_STORE"] is (out != "f32_pointer_store")


@pytest.mark.parametrize("M_,N_,K_", [(2048, 14336, 4096), (512, 4096, 4096), (16, 14336, 4096)])
def test_compile_swiglu_gemm(M_, N_, K_):
    """A fused gate/up GEMM (B = 2N interleaved rows): tiles of whole gate/up pairs, the grid
    over the 2N accumulator columns, an output box half the tile wide; wgmma, no spills."""
    op = _swiglu_op(M_, N_, K_, 64, [_scale(N_), _add(M_, N_)])
    cfg = gemm.config_for(op)
    if M_ <= 64:  # decode M goes to split-K by default; this checks the tile kernel
        cfg = gemm.swiglu_config(choose_tile_config(M_, 2 * N_, K_, BF, SM90), 64, op)
    (launch,) = gemm.compile_config(op, cfg, SM90)
    assert cfg.BN % 128 == 0 and cfg.BM == (64 if M_ <= 64 else 128)
    assert launch.grid[0] == min(-(-M_ // cfg.BM) * (2 * N_ // cfg.BN), SM90.sm_count)
    maps = [s for s in launch.args if isinstance(s, TensorMapSlot)]
    assert maps[1].box == (cfg.BN, cfg.BK) and maps[1].dims == (2 * N_, K_)
    assert maps[2].dims == (M_, N_) and maps[2].box == (cfg.BM, cfg.BN // 2 // cfg.EPI_SPLIT)
    assert launch.kernel.fused_ops == ("gemm", "swiglu", "scale_n", "add")
    assert [s.storage for s in launch.args if isinstance(s, PtrSlot)] == ["scale", "res"]
    listing = sass_or_skip(launch.kernel.cubin)
    assert count_instructions(listing, "HGMMA") > 0 and count_instructions(listing, "STL") == 0


def test_swiglu_config_widens_narrow_tiles():
    # decode with few output columns: the heuristic's BN=32 becomes one gate/up pair (128)
    op = _swiglu_op(4, 256, 4096, 64)
    assert choose_tile_config(4, 512, 4096, BF, SM90).BN == 32
    cfg = gemm.swiglu_config(choose_tile_config(4, 512, 4096, BF, SM90), 64, op)
    assert cfg.BN == 128 and cfg.EPI_SPLIT == 1
    assert gemm.config_for(_swiglu_op(4096, 4096, 4096, 64)).EPI_SPLIT == 2  # LARGE's 4 halved


def test_swiglu_and_scale_refusals():
    with pytest.raises(ValueError, match="BN a multiple of 128"):
        gemm.kernel_args(_swiglu_op(64, 64, 64, 64), TINY.with_(BN=64))
    with pytest.raises(ValueError, match="first epilogue step"):
        gemm.check_op(_op(8, 128, 64, [EpAct(Act.RELU), EpSwiGLU(64)]))
    with pytest.raises(ValueError, match="power of two"):
        gemm.check_op(_swiglu_op(8, 48, 64, 24))
    with pytest.raises(ValueError, match="shapes do not match"):  # out must be half of B's rows
        gemm.check_op(GemmOp(contiguous("a", BF, (8, 64)), contiguous("b", BF, (256, 64)),
                             contiguous("o", BF, (8, 256)), (EpSwiGLU(64),)))
    with pytest.raises(ValueError, match="must be f32"):
        gemm.check_op(_op(8, 8, 16, [EpScale(contiguous("s", BF, (8,)))]))
    with pytest.raises(ValueError, match="scale_n operand has shape"):
        gemm.check_op(_op(8, 8, 16, [_scale(4)]))


# ----------------------------------------------------------------------------- heuristic
@pytest.mark.parametrize("shape", BIG_SHAPES)
def test_big_shapes_use_the_large_config(shape):
    cfg = choose_config(*shape, BF, SM90)
    assert (cfg.BM, cfg.BN, cfg.BK, cfg.num_warps, cfg.num_stages) == (128, 256, 64, 8, 3)
    # long K: pointer-stored epilogue in two subtiles (measured faster on the H200)
    assert cfg == (LARGE_LONG_K if shape[2] >= 8192 else LARGE)


@pytest.mark.parametrize("M_,N_,want", [(1, 4096, SMALL_M_NARROWEST), (16, 14336, SMALL_M_NARROW),
                                        (64, 32000, SMALL_M), (128, 4096, MEDIUM),
                                        (512, 4096, MEDIUM)])
def test_small_shapes(M_, N_, want):
    assert choose_tile_config(M_, N_, 4096, BF, SM90) == want
    assert choose_tile_config(M_, N_, 4096, BF, SM90).BM == (64 if M_ <= 64 else 128)
    if M_ > 128:  # (128 x 4096: 32 tiles over K = 4096, split-K: test_gemm_splitk.py)
        assert choose_config(M_, N_, 4096, BF, SM90) == want


@pytest.mark.parametrize("M_,N_,large", [
    (1576, 3072, False),  # ViT-B/16 fc1: 2 waves of 156 large tiles vs 3 of 312 small
    (1576, 2304, True),   # its qkv: 1 wave of 117 large tiles vs 2 of 234 small
    (2048, 4096, True), (2048, 14336, True), (4096, 16384, True),
    (128, 4096, False), (512, 4096, False)])
def test_large_tiles_only_when_they_take_fewer_waves(M_, N_, large):
    assert large_tiles_win(M_, N_, SM90.sm_count) is large
    assert (choose_tile_config(M_, N_, 768, BF, SM90).BN == 256) is large


def test_an_erf_gelu_epilogue_is_not_flattened_with_128_accumulator_registers():
    from aotpack.kernels.spec import Act, EpAct

    erf = _op(2048, 4096, 4096, [EpAct(Act.GELU_ERF)])
    tanh = _op(2048, 4096, 4096, [EpAct(Act.GELU_TANH)])
    assert gemm.config_for(erf) == LARGE.with_(FLATTEN=False)
    assert gemm.config_for(tanh) == LARGE
    small = _op(1576, 3072, 768, [EpAct(Act.GELU_ERF)])  # 128x128 on 8 warps: 64 registers
    assert gemm.config_for(small) == MEDIUM


@pytest.mark.parametrize("M_,N_,K_,bk", [(401408, 384, 96, 32), (401408, 72, 24, 32),
                                         (100352, 24, 64, 64), (401408, 96, 48, 64)])
def test_few_k_steps_run_two_ctas_per_sm(M_, N_, K_, bk):
    """ConvNeXt's fc1 and mobile nets' 1x1 convs (K <= 128, thousands of tiles): two
    persistent CTAs per SM (twice the grid, registers capped at 128 so both fit, both CTAs'
    stages in shared memory), BK padding K least. The cubin keeps to the cap without
    spilling; transformer shapes and few-tile problems keep one CTA."""
    from aotpack.kernels.triton.gemm_configs import smem_estimate
    from support.sass import resource_usage

    cfg = choose_config(M_, N_, K_, BF, SM90)
    assert (cfg.CTAS_PER_SM, cfg.BK, cfg.maxnreg()) == (2, bk, 128)
    assert 2 * (smem_estimate(cfg, BF, BF) + 1024) <= SM90.smem_limit + 1024
    op = _op(M_, N_, K_, [_bias(N_), EpAct(Act.GELU_ERF)])
    assert gemm.config_for(op).CTAS_PER_SM == 2
    (launch,) = gemm.compile(op)
    assert launch.grid[0] == 2 * SM90.sm_count
    sass_or_skip(launch.kernel.cubin)
    usage = resource_usage(launch.kernel.cubin)
    assert usage["REG"] <= 128 and usage["STACK"] == 0 and usage["LOCAL"] == 0
    for shape in [(2048, 4096, 4096), (1576, 3072, 768), (4096, 4096, 128), (2048, 384, 96)]:
        assert choose_config(*shape, BF, SM90).CTAS_PER_SM == 1, shape


def test_fewer_stages_when_smem_is_short():
    from aotpack.kernels.spec import Target

    small = Target(smem_limit=120 * 1024)
    cfg = choose_config(4096, 4096, 4096, BF, small)
    assert cfg.num_stages == 2


# ----------------------------------------------------------------------------- refusals
def test_refuses_more_than_three_tensor_operands():
    op = _op(64, 64, 64, [_bias(64), _add(64, 64), _mul(64, 64), _add(64, 64)])
    with pytest.raises(ValueError, match="tensor operands"):
        gemm.compile(op, SM90)


def test_refuses_unaligned_k_for_tma():
    op = _op(128, 64, 45)  # M > 64, 90-byte rows: the tile kernel's tensor maps cannot
    with pytest.raises(ValueError, match="TMA"):
        gemm.compile_fitting(op, choose_tile_config(128, 64, 45, BF, SM90), SM90)
    # so the heuristic takes split-K's pointer loads for it (it takes any K)
    assert isinstance(gemm.config_for(op, SM90), SplitKConfig)
    assert gemm.compile(op, SM90)


def test_refuses_bad_shapes_and_dtypes():
    with pytest.raises(ValueError, match="shapes"):
        gemm.check_op(GemmOp(contiguous("a", BF, (8, 16)), contiguous("b", BF, (8, 32)),
                             contiguous("o", BF, (8, 8))))
    with pytest.raises(ValueError, match="bf16 or f16"):
        gemm.check_op(_op(8, 8, 16, dtype=F32))
    with pytest.raises(ValueError, match="bias operand"):
        gemm.check_op(_op(8, 8, 16, [_bias(9)]))


# ----------------------------------------------------------------------------- benchmark script
@pytest.mark.bench  # the benchmark's plumbing: run on request (pytest -m bench)
def test_bench_script_smoke(tmp_path):
    """benchmarks/bench_gemm.py end to end on tiny shapes under the interpreter (the lead runs
    it on the H200; this keeps its plumbing and every config's numerics checked here)."""
    rows = bench_smoke_rows("bench_gemm.py", "gemm_bench.json", tmp_path)
    assert rows and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert sum(r["chosen"] for r in rows) == 3
