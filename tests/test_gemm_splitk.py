"""The swap-AB split-K GEMM (gemm_splitk.py) for decode-sized M, without a GPU:
- numerics: Triton's interpreter (one child process for all cases) against the torch reference,
  for every epilogue step kind (EpScale per tensor and per channel, EpSwiGLU included),
  M in {1, 5, 16, 64}, N and K not multiples of the tile, SPLIT_K 1 and > 1, TMA and pointer
  loads; the output is poisoned first and must be written exactly inside its view;
- cross-compilation to sm_90a: launches, grids, the shared workspace scratch, TMA boxes, SASS;
- configs: dict round trip, candidate spaces, choose_config's split-K picks; the benchmark.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.reference.gemm import reference
from aotpack.kernels.spec import (
    SM90, Act, CounterSlot, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, GemmOp, PtrSlot,
    ScratchSlot, TensorArg, TensorMapSlot, contiguous,
)
from support.sass import count_instructions
from program_checks import (
    bench_smoke_rows, gemm_storage_sizes, interpret_gemm_cases, sass_or_skip,
)

gemm = pytest.importorskip("aotpack.kernels.triton.gemm")
from aotpack.kernels.triton import gemm_splitk  # noqa: E402
from aotpack.kernels.triton.gemm_configs import (  # noqa: E402
    GemmConfig, SplitKConfig, cdiv, config_from_dict,
)
from aotpack.kernels.triton.gemm_heuristic import (  # noqa: E402
    MAX_CANDIDATES, candidate_configs, choose_config, config_for,
)

BF, F16, F32 = DType.BF16, DType.F16, DType.F32
# small tiles: the interpreter walks several weight tiles and K splits with ragged edges
SK = SplitKConfig(BN=64, BM=16, BK=16, SPLIT_K=3, num_warps=4, num_stages=2)
SKF = SK.with_(FIXUP=True)  # partials finished by each unit's last CTA, no reduce launch
N, K = 72, 88  # not multiples of BN=64 or BK=16 (88 * 2 B keeps TMA rows 16-byte aligned)


# ----------------------------------------------------------------------------- op builders
def _op(M, n=N, k=K, epilogue=(), dtype=BF, out_dtype=None, out=None, n_acc=None):
    out = out or contiguous("out", out_dtype or dtype, (M, n))
    return GemmOp(contiguous("a", dtype, (M, k)), contiguous("b", dtype, (n_acc or n, k)), out,
                  tuple(epilogue))


def _bias(n=N, dtype=BF):
    return EpBias(contiguous("bias", dtype, (n,)))


def _scale(n=N):  # n = 1: per tensor
    return EpScale(contiguous("scale", F32, (n,)))


def _add(M, n=N):
    return EpAdd(contiguous("res", BF, (M, n)))


def _mul(M, n=N):
    return EpMul(contiguous("up", BF, (M, n)))


def _fp8(op: GemmOp) -> GemmOp:
    """`op` with an f8e4m3 weight and a dequantization scale per weight row (fp8-weights)."""
    b = replace(op.b, dtype=DType.F8E4M3)
    return replace(op, b=b, b_scale=contiguous("bscale", F32, (op.b.shape[0],)))


def _w8a8(op: GemmOp) -> GemmOp:
    """_fp8(op) with its activations quantized too (--precision fp8)."""
    return replace(_fp8(op), quantize_a=True)


def _swiglu_op(M, n, k, group, epilogue=(), cfg_dtype=BF):
    return _op(M, n, k, (EpSwiGLU(group), *epilogue), n_acc=2 * n, dtype=cfg_dtype)


def _env(op: GemmOp, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    env = {name: torch.randn(n, generator=g).to(dt.to_torch())
           for name, (n, dt) in gemm_storage_sizes(op).items()}
    for name in ("scale", "bscale", "ascale"):  # keep scales away from zero (dequantization)
        if name in env:
            env[name] = env[name].abs() + 0.5
    env[op.out.storage] = torch.full_like(env[op.out.storage], float("nan"))  # poison
    return env


# name -> (op, config or None for the heuristic)
CASES = {
    "none_s3": (_op(5), SK),
    "none_s1": (_op(5), SK.with_(SPLIT_K=1)),
    "m1": (_op(1, epilogue=[_bias()]), SK.with_(SPLIT_K=2)),
    "m16_bias_gelu_tanh": (_op(16, epilogue=[_bias(), EpAct(Act.GELU_TANH)]), SK),
    "m16_direct_gelu_erf": (_op(16, epilogue=[EpAct(Act.GELU_ERF)]), SK.with_(SPLIT_K=1)),
    "m5_silu_mul_add": (_op(5, epilogue=[EpAct(Act.SILU), _mul(5), _add(5)]), SKF),
    "m5_direct_relu_add": (_op(5, epilogue=[EpAct(Act.RELU), _add(5)]), SK.with_(SPLIT_K=1)),
    "m64_bias_relu": (_op(64, epilogue=[_bias(), EpAct(Act.RELU)]),
                      SK.with_(BM=64, SPLIT_K=2)),
    # several M tiles (grid x): BM = 16 over 64 rows, direct and split
    "m64_bm16_direct_add": (_op(64, epilogue=[_add(64)]), SK.with_(SPLIT_K=1)),
    "m64_bm32_s2_mul": (_op(64, epilogue=[_mul(64)]), SK.with_(BM=32, SPLIT_K=2)),
    "scale_tensor_s1": (_op(5, epilogue=[_scale(1)]), SK.with_(SPLIT_K=1)),
    "scale_tensor_s4": (_op(5, epilogue=[_bias(), _scale(1)]), SKF.with_(SPLIT_K=4)),
    "scale_channel_s1": (_op(16, epilogue=[_scale()]), SK.with_(SPLIT_K=1)),
    "scale_channel_s2": (_op(16, epilogue=[_scale(), EpAct(Act.SILU)]), SK.with_(SPLIT_K=2)),
    # 6 K tiles in 4 splits of 2: the last split is empty and must contribute zeros
    "empty_split": (_op(5), SK.with_(SPLIT_K=4)),
    "empty_split_fixup": (_op(5), SKF.with_(SPLIT_K=4)),
    # SwiGLU: 2N = 144 interleaved rows in groups of 8; with SPLIT_K = 1 a BN=64 tile holds
    # whole gate/up blocks and pairs them in registers (direct, no reduce); split, the reduce
    # kernel pairs them by indexing
    "swiglu_s1": (_swiglu_op(5, N, K, 8), SK.with_(SPLIT_K=1)),
    "swiglu_direct_g32_scale_add": (_swiglu_op(16, 96, K, 32, [_scale(96), _add(16, 96)]),
                                    SK.with_(SPLIT_K=1)),
    "swiglu_direct_fp8_bn128": (_fp8(_swiglu_op(3, 128, 96, 32, [_add(3, 128)])),
                                SK.with_(SPLIT_K=1, BN=128)),
    # blocks of 2 x 64 rows across two 64-row tiles: not direct, the reduce pairs them
    "swiglu_g64_s1_bn64": (_swiglu_op(3, 128, K, 64), SK.with_(SPLIT_K=1)),
    "swiglu_s3_scale_add": (_swiglu_op(16, N, K, 8, [_scale(), _add(16)]), SK),
    "swiglu_s3_fixup": (_swiglu_op(16, N, K, 8, [_scale(), _add(16)]), SKF),
    "swiglu_g64_m1": (_swiglu_op(1, 128, K, 64, [_scale(1)]), SK.with_(SPLIT_K=2, BN=128)),
    # gate/up blocks of 2 x 64 rows span two 64-row tiles: one counter per pair of tiles
    "swiglu_g64_bn64": (_swiglu_op(3, 128, K, 64, [_add(3, 128)]), SKF.with_(SPLIT_K=2)),
    # fix-up over several row blocks (BM = 32)
    "fixup_m40_bm32": (_op(40, epilogue=[_bias()]), SKF.with_(BM=32, SPLIT_K=2)),
    # tile-starved GEMMs above decode sizes (gemm_heuristic.tile_starved): 128-row blocks,
    # the last one ragged, split and direct, N = 8 (an MoE router)
    "starved_m300_bm128": (_op(300, epilogue=[_bias()]), SK.with_(BM=128, SPLIT_K=3)),
    "starved_m300_n8_fixup": (_op(300, n=8, epilogue=[_add(300, 8)]),
                              SKF.with_(BM=128, SPLIT_K=2)),
    # pointer loads: K = 90 (180 B rows) cannot be a TMA tensor map
    "ptr_unaligned_k": (_op(5, k=90, epilogue=[_bias()]), SK.with_(TMA=False)),
    "ptr_direct": (_op(16, epilogue=[_add(16)]), SK.with_(TMA=False, SPLIT_K=1)),
    # output = a column slice of a wider buffer (pointer stores into any strided view)
    "strided_out": (_op(5, epilogue=[_bias()], out=TensorArg("out", BF, (5, N), (N + 19, 1), 3)),
                    SK),
    "f16_in_f32_out": (_op(5, epilogue=[_bias(dtype=F16), _mul(5)], dtype=F16, out_dtype=F32),
                       SK),
    # FP8 weights (widened in registers, each partial scaled per weight row): split, direct,
    # fix-up, SwiGLU (scales in accumulator columns, before the pairing), pointer loads
    # (K = 96: 96-byte f8 rows keep TMA's 16-byte pitch)
    "fp8_s3_bias": (_fp8(_op(5, k=96, epilogue=[_bias()])), SK),
    "fp8_direct_add": (_fp8(_op(16, k=96, epilogue=[_add(16)])), SK.with_(SPLIT_K=1)),
    "fp8_fixup": (_fp8(_op(5, k=96, epilogue=[_bias()])), SKF),
    "fp8_swiglu": (_fp8(_swiglu_op(5, N, 96, 8, [_add(5)])), SK),
    "fp8_heuristic_unaligned_k": (_fp8(_op(3, 72, 88)), None),
    # FP8 activations too (the e4m3 wgmma): one K split, so the kernel's row scales are the
    # reference's (splits: test_fp8_activations_per_split below); TMA, pointers, SwiGLU
    "w8a8_direct_bias": (_w8a8(_op(5, k=96, epilogue=[_bias()])), SK.with_(BK=32, SPLIT_K=1)),
    "w8a8_swiglu": (_w8a8(_swiglu_op(16, N, 96, 8, [_add(16)])), SK.with_(BK=32, SPLIT_K=1)),
    "w8a8_ptr_f16": (_w8a8(_op(3, k=90, dtype=F16)), SK.with_(BK=32, SPLIT_K=1, TMA=False)),
    # the input already in e4m3 with its scale per row: K split freely, SwiGLU
    "fp8_input_s3": (replace(_fp8(_swiglu_op(5, N, 96, 8)), a=contiguous("a", DType.F8E4M3,
                             (5, 96)), a_scale=contiguous("ascale", F32, (5,))),
                     SK.with_(BK=32, SPLIT_K=3)),
    "fp8_ptr_f16": (_fp8(_op(3, k=90, dtype=F16)), SK.with_(TMA=False)),
    # launched as a programmatic dependent with the L2 prefetch (the weight pointer travels
    # beside its tensor map; the prefetch is a no-op in the interpreter, the arguments are not)
    "pdl_prefetch_tma": (_op(5, epilogue=[_bias()]), SK.with_(PDL=True, PREFETCH=2)),
    "pdl_prefetch_ptr_fp8": (_fp8(_op(3, k=90, dtype=F16)),
                             SK.with_(TMA=False, PDL=True, PREFETCH=9)),
    "pdl_wait_only_fixup": (_op(5), SKF.with_(PDL=True)),
    # the heuristic (gemm.config_for): split-K for decode M, adapted to the op (pointer loads)
    "heuristic": (_op(5, 136, 256, [_bias(136)]), None),
    "heuristic_unaligned_k": (_op(3, 72, 90), None),
    # rows of 6 bytes at a tile-sized M (VGG's adaptive pool to 7x7 over a 3x3 map): no tensor
    # map can load them, so the heuristic takes split-K's pointer loads (was a build error)
    "heuristic_tall_rows_of_3": (_op(384, 7, 3, [_bias(7)]), None),
}


@pytest.fixture(scope="module")
def interpreted():
    return interpret_gemm_cases(CASES, _env, seed0=100)


def _view(env, storage, arg):
    return torch.as_strided(env[storage], arg.shape, arg.strides, arg.offset)


@pytest.mark.parametrize("name", list(CASES))
def test_interpreter_matches_reference(interpreted, name):
    op, env = interpreted[name]
    ref_op = replace(op, out=TensorArg("ref_out", op.out.dtype, op.out.shape, op.out.strides,
                                       op.out.offset))
    reference(ref_op, env)
    got, want = _view(env, op.out.storage, op.out).float(), _view(env, "ref_out", op.out).float()
    assert not torch.isnan(got).any(), f"{name}: output elements left unwritten"
    rel = ((got - want).norm() / want.norm()).item()
    assert rel <= 1e-2, f"{name}: relative error {rel:.3g}"
    inside = torch.zeros(env["orig_out"].numel(), dtype=torch.bool)
    torch.as_strided(inside, op.out.shape, op.out.strides, op.out.offset).fill_(True)
    assert torch.equal(env[op.out.storage][~inside].isnan(), env["orig_out"][~inside].isnan())


def _per_split_reference(op: GemmOp, env, cfg: SplitKConfig):
    """quantize_a as the split-K kernel does it: each K split's rows with their own scale."""
    M, K = op.a.shape
    a = _view(env, op.a.storage, op.a).float()
    b = _view(env, op.b.storage, op.b).float() * env["bscale"][:, None]
    per = cdiv(cdiv(K, cfg.BK), cfg.SPLIT_K) * cfg.BK
    acc = torch.zeros(M, b.shape[0])
    for lo in range(0, K, per):
        part = a[:, lo:lo + per]
        amax = part.abs().amax(1, keepdim=True)
        scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
        acc += ((part / scale).to(torch.float8_e4m3fn).float() * scale) @ b[:, lo:lo + per].t()
    return acc


def test_fp8_activations_per_split():
    """With K split over CTAs each split scales its activation rows itself (finer than the
    reference's one scale per row): exactly what _per_split_reference computes."""
    cfg = SK.with_(BK=32, SPLIT_K=3)
    op = _w8a8(_op(5, k=208))  # 7 K tiles of 32 in 3 splits of 3, 3, 1
    (_, env), = interpret_gemm_cases({"split": (op, cfg)}, _env, seed0=7).values()
    got = _view(env, op.out.storage, op.out).float()
    want = _per_split_reference(op, env, cfg)
    assert float((got - want).norm() / want.norm()) < 1e-2


# ----------------------------------------------------------------------------- cross-compile
LLAMA_M16 = [(4096, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336)]


@pytest.mark.parametrize("n,k", LLAMA_M16)
def test_compile_llama_decode_shapes(n, k):
    M = 16
    op = _op(M, n, k, [_bias(n)])
    cfg = gemm.config_for(op)
    assert isinstance(cfg, SplitKConfig) and cfg.TMA
    launches = gemm.compile(op, SM90)
    first = launches[0]
    assert first.grid == (cdiv(M, cfg.BM), cdiv(n, cfg.BN), cfg.SPLIT_K)
    assert first.kernel.block == (32 * cfg.num_warps, 1, 1) and first.kernel.smem <= SM90.smem_limit
    assert first.kernel.config["kind"] == "splitk"
    maps = [s for s in first.args if isinstance(s, TensorMapSlot)]
    assert [(m.storage, m.box) for m in maps] == [("b", (cfg.BN, cfg.BK)), ("a", (cfg.BM, cfg.BK))]
    assert maps[0].dims == (n, k) and maps[0].swizzle == "128B"
    listing = sass_or_skip(first.kernel.cubin)
    assert count_instructions(listing, "HGMMA") > 0 and count_instructions(listing, "UTMALDG") > 0
    assert count_instructions(listing, "STL") == 0, "register spills"
    if cfg.SPLIT_K == 1:  # direct: the bias is applied by the GEMM kernel itself
        assert len(launches) == 1 and not any(isinstance(s, ScratchSlot) for s in first.args)
        # the weight's pointer too when its CTAs prefetch it (programmatic dependent launch)
        assert [s.storage for s in first.args if isinstance(s, PtrSlot)] == \
            ["b"] * (cfg.PREFETCH > 0) + ["out", "bias"]
        return
    _check_split_launches(op, cfg, launches)


def _check_split_launches(op, cfg, launches):
    """Split-K: one launch whose last CTA per unit finishes it (counters), or (FIXUP=False)
    partials and a reduce launch sharing the workspace."""
    M, n_out = op.out.shape
    n_acc = op.b.shape[0]
    nbytes = cfg.SPLIT_K * M * n_acc * 4
    scratch = [[s for s in la.args if isinstance(s, ScratchSlot)] for la in launches]
    if cfg.FIXUP:
        (first,) = launches
        unit = gemm_splitk.fixup_unit(op, cfg)
        assert scratch[0] == [ScratchSlot(nbytes, 256, shared="splitk.partials")]
        assert [s for s in first.args if isinstance(s, CounterSlot)] == \
            [CounterSlot(cdiv(M, cfg.BM) * cdiv(n_acc, unit) * 4)]
        ptrs = [s.storage for s in first.args if isinstance(s, PtrSlot)]
        assert ptrs[0] == (op.b.storage if cfg.PREFETCH else op.out.storage)  # b: prefetched
        assert op.out.storage in ptrs
        assert first.kernel.fused_ops[-2:] == ("splitk", "fixup")
        return
    first, second = launches
    assert scratch[0] == scratch[1] == [ScratchSlot(nbytes, 256, shared="splitk.partials")]
    assert not any(isinstance(s, PtrSlot) and s.storage == op.out.storage for s in first.args)
    block_m, block_n = gemm_splitk.reduce_blocks(M)
    assert second.grid == (cdiv(n_out, block_n), cdiv(M, block_m), 1)
    assert second.kernel.fused_ops[0] == "splitk_reduce"
    assert [s.storage for s in second.args if isinstance(s, PtrSlot)][0] == op.out.storage


@pytest.mark.parametrize("fixup", [True, False])
def test_compile_swiglu_decode_is_finished_by_the_fixup_or_the_reduce(fixup):
    op = _swiglu_op(16, 14336, 4096, 64, [_scale(14336), _add(16, 14336)])
    cfg = gemm.config_for(op).with_(FIXUP=fixup)
    cfg = cfg.with_(SPLIT_K=max(2, cfg.SPLIT_K))  # (one split with whole blocks is direct)
    launches = gemm.compile_config(op, cfg, SM90)
    assert len(launches) == (1 if fixup else 2)
    assert launches[0].grid[1] == cdiv(2 * 14336, cfg.BN)
    _check_split_launches(op, cfg, launches)
    assert count_instructions(sass_or_skip(launches[0].kernel.cubin), "STL") == 0, "spills"
    if fixup:
        assert launches[0].kernel.fused_ops == ("gemm", "swiglu", "scale_n", "add", "splitk",
                                                "fixup")
    else:
        assert launches[1].kernel.fused_ops == ("splitk_reduce", "swiglu", "scale_n", "add")


def test_compile_swiglu_decode_direct_pairs_in_registers():
    """SPLIT_K = 1 with whole gate/up blocks per tile: one launch, no workspace, outputs
    written by the GEMM (N columns, half the accumulator's)."""
    op = _swiglu_op(1, 8192, 2048, 32, [_add(1, 8192)])
    cfg = gemm.config_for(op).with_(SPLIT_K=1)
    assert cfg.BN % 64 == 0 and gemm_splitk.is_direct(op, cfg)
    (launch,) = gemm.compile_config(op, cfg, SM90)
    assert not any(isinstance(s, ScratchSlot) for s in launch.args)
    assert launch.kernel.fused_ops == ("gemm", "swiglu", "add", "splitk")
    assert {s.storage for s in launch.args if isinstance(s, PtrSlot)} >= {"out", "res"}
    assert count_instructions(sass_or_skip(launch.kernel.cubin), "STL") == 0, "spills"


def test_compile_pointer_loads_and_plan_memory_shares_the_workspace():
    from aotpack.passes.plan_memory import plan_memory
    from aotpack.program import Program, Storage

    op = _op(16, 4096, 4097, [_bias(4096)])  # K*2 B = 8194: not a TMA row pitch
    cfg = gemm.config_for(op).with_(FIXUP=False)
    assert not cfg.TMA and cfg.SPLIT_K > 1
    launches = gemm.compile_config(op, cfg, SM90)
    assert not any(isinstance(s, TensorMapSlot) for s in launches[0].args)
    listing = sass_or_skip(launches[0].kernel.cubin)
    # rows of unknown alignment: plain loads (Triton pipelines only >= 4-byte-aligned cp.async)
    assert count_instructions(listing, "HGMMA") > 0 and count_instructions(listing, "LDG") > 0
    assert count_instructions(listing, "LDGSTS") == 0
    # rows 8200 bytes apart (K = 4100, a multiple of 4): the kernel is told, and pipelines its
    # 8-byte loads with cp.async (compile.py passes divisibility 4, not only 16)
    four = gemm.compile_config(_op(16, 4096, 4100, [_bias(4096)]), cfg, SM90)[0]
    assert count_instructions(sass_or_skip(four.kernel.cubin), "LDGSTS") > 0
    aligned = gemm.compile_config(_op(16, 4096, 4096), cfg.with_(TMA=False), SM90)[0]
    # a cp.async pipeline
    assert count_instructions(sass_or_skip(aligned.kernel.cubin), "LDGSTS") > 0
    storages = {"a": Storage("a", "input", BF, (16, 4100)), "b": Storage("b", "weight", BF,
                (4096, 4100)), "bias": Storage("bias", "weight", BF, (4096,)),
                "out": Storage("out", "output", BF, (16, 4096))}
    plan = plan_memory(Program(["a"], ["out"], storages, [op]), [launches])
    ws = [[s for s in la.args if isinstance(s, PtrSlot) and s.storage.startswith("__scratch")]
          for la in plan.launches]
    assert ws[0] == ws[1] and len(ws[0]) == 1
    assert plan.nbytes[ws[0][0].storage] == cfg.SPLIT_K * 16 * 4096 * 4


def test_compile_wide_epilogue_index():
    """An epilogue operand whose offsets pass 2^31 elements: 64-bit indexing, both paths."""
    res = EpAdd(TensorArg("big", BF, (16, 4096), (2**28, 1), 0))  # row 15 starts past 2^31
    for split in (1, 4):
        op = _op(16, 4096, 4096, [_bias(4096), res])
        cfg = SplitKConfig(SPLIT_K=split)
        for fixup in (True, False):
            launches = gemm.compile_config(op, cfg.with_(FIXUP=fixup), SM90)
            assert len(launches) == (1 if split == 1 or fixup else 2)
            plan = gemm_splitk.plans(op, cfg.with_(FIXUP=fixup))[-1]
            assert plan.args["WIDE_INDEX"].value is True


# ----------------------------------------------------------------------------- configs
SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (16, 28672, 4096), (64, 1024, 4096),
          (100, 4096, 14336), (128, 14336, 4096), (512, 4096, 4096)]


@pytest.mark.parametrize("shape", SHAPES)
def test_candidates_round_trip_and_heuristic_first(shape):
    M, n, k = shape
    cands = candidate_configs(M, n, k, BF, SM90)
    assert cands == candidate_configs(M, n, k, BF, SM90)  # deterministic
    assert cands[0] == choose_config(M, n, k, BF, SM90)
    assert len(cands) == len(set(cands)) and len(cands) <= MAX_CANDIDATES
    kinds = {type(c) for c in cands}
    assert kinds == ({GemmConfig, SplitKConfig} if M <= 128 else {GemmConfig})
    for c in cands:
        d = json.loads(json.dumps(c.as_dict()))
        assert d["kind"] == ("splitk" if isinstance(c, SplitKConfig) else "tile")
        assert config_from_dict(d) == c


def test_config_from_dict_errors_and_legacy_tile_dicts():
    tile = GemmConfig(BM=64, BN=64, BK=64)
    legacy = {k: v for k, v in tile.as_dict().items() if k != "kind"}
    assert config_from_dict(legacy) == tile
    with pytest.raises(ValueError, match="kind"):
        config_from_dict({"kind": "streamk"})
    with pytest.raises(ValueError, match="splitk"):
        config_from_dict({"kind": "splitk", "EPI_SPLIT": 2})


@pytest.mark.parametrize("n,k", LLAMA_M16)
def test_choose_config_picks_splitk_for_m16_llama(n, k):
    cfg = choose_config(16, n, k, BF, SM90)
    assert isinstance(cfg, SplitKConfig) and cfg.BM == 16
    ctas = cdiv(n, cfg.BN) * cfg.SPLIT_K
    # every SM busy, all CTAs resident in one wave (3 per SM at these stage counts)
    assert 0.9 * SM90.sm_count <= ctas <= 3 * SM90.sm_count
    assert cdiv(k, cfg.BK) // cfg.SPLIT_K >= 4  # K runs long enough to fill the pipeline


@pytest.mark.parametrize("shape, splitk", [
    ((64, 4096, 4096), True),      # decode sizes: always
    # tile-starved above them (H200, benchmarks/bench_starved_gemm.py, CUDA graphs, us tile ->
    # split-K): an MoE router 19.5 -> 10.8, 65 rows 22.9 -> 16.3, 128 rows 23.1 -> 18.9,
    # 256x256 over K = 8192 40.3 -> 9.9, 512x1024 22.9 -> 15.1
    ((2048, 8, 4096), True), ((65, 4096, 4096), True), ((128, 4096, 4096), True),
    ((256, 256, 8192), True), ((512, 1024, 4096), True),
    # enough tiles: the tile kernel (128 x 14336: 38.0 against 46.1 us split)
    ((65, 14336, 4096), False), ((128, 14336, 4096), False), ((2048, 4096, 4096), False),
    ((2048, 8, 512), False),  # a short K: nothing to split
])
def test_choose_config_splits_k_for_decode_and_tile_starved_shapes(shape, splitk):
    cfg = choose_config(*shape, BF, SM90)
    assert isinstance(cfg, SplitKConfig) is splitk, cfg
    if splitk:  # every SM gets a CTA
        m, n, _ = shape
        assert cdiv(m, cfg.BM) * cdiv(n, cfg.BN) * cfg.SPLIT_K >= 0.9 * SM90.sm_count


def test_operands_no_tensor_map_can_load_take_pointer_loads():
    cfg = config_for(_op(384, 7, 3))
    assert isinstance(cfg, SplitKConfig) and not cfg.TMA
    assert isinstance(config_for(_op(384, 8, 64)), GemmConfig)  # aligned rows: the tile kernel


def test_supports_config_says_why():
    op = _op(16, 4096, 4096)
    ok = SplitKConfig(SPLIT_K=8)
    assert gemm.supports_config(op, ok) is None
    assert "SPLIT_K" in gemm.supports_config(op, ok.with_(SPLIT_K=65))
    assert "tile" in gemm.supports_config(op, ok.with_(BN=96))
    odd_k = _op(16, 4096, 4100)
    assert "TMA" in gemm.supports_config(odd_k, ok)
    assert gemm.supports_config(odd_k, ok.with_(TMA=False)) is None
    assert gemm.supports_config(odd_k, GemmConfig(BM=64, BN=64, BK=64)) is not None
    assert gemm.supports_config(op, GemmConfig(BM=64, BN=64, BK=64)) is None


# ----------------------------------------------------------------------------- benchmark
@pytest.mark.bench  # the benchmark's plumbing: run on request (pytest -m bench)
def test_bench_decode_smoke(tmp_path):
    """benchmarks/bench_decode.py end to end on tiny shapes under the interpreter (the lead
    runs it on the H200)."""
    rows = bench_smoke_rows("bench_decode.py", "bench_decode.json", tmp_path)
    assert rows and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert sum(r["chosen"] for r in rows) == 2 and any(r["swiglu"] for r in rows)


_RERUN_SCRIPT = """
import sys, torch
sys.path.insert(0, 'tests')
import test_gemm_splitk as t
from aotpack.kernels.spec import COUNTERS
from aotpack.kernels.triton import gemm_splitk as sk
for name in ("swiglu_g64_bn64", "fixup_m40_bm32", "m5_silu_mul_add"):
    op, cfg = t.CASES[name]
    env = t._env(op, seed=7)
    env[COUNTERS] = torch.zeros(sk.counters_bytes(op, cfg) // 4, dtype=torch.int32)
    run = sk.jit_runner(op, env, cfg)
    run()
    first = env[op.out.storage].clone()
    env[op.out.storage].fill_(float("nan"))
    run()
    assert not torch.isnan(first).any(), name
    print(name, int(env[COUNTERS].abs().sum()), torch.equal(first, env[op.out.storage]))
"""


def test_fixup_leaves_its_counters_zero_and_reruns_bit_exact():
    """The last CTA of each unit stores its counter back to 0: a second run of the same launch
    (the next CUDA-graph replay) finds them zero and gives the same bits."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [".", os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _RERUN_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split("\n")
    rows = [ln.split() for ln in lines if ln.strip()]
    assert [r[0] for r in rows] == ["swiglu_g64_bn64", "fixup_m40_bm32", "m5_silu_mul_add"]
    assert all(r[1] == "0" and r[2] == "True" for r in rows), proc.stdout
