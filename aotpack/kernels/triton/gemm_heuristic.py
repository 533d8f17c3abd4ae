"""Which Triton GEMM config a shape gets without measurements, and the tuning space around it.

Outside the GEMM family's tuning key (aotpack/tuning/space.py hashes the kernel and config
definitions, not this file): a better heuristic keeps every measured database entry valid.
`config_for(op)` is the entry point (gemm.config_for calls it); `candidate_configs` is what
`aotpack tune` measures for a shape, the heuristic's choice first.
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.kernels.spec import SM90, Act, EpAct, GemmOp, Target, swiglu_group
from aotpack.kernels.triton import gemm_splitk
from aotpack.kernels.triton.gemm_configs import (
    LARGE, LARGE_LONG_K, MEDIUM, SMALL_M, SMALL_M_NARROW, SMALL_M_NARROWEST, AnyGemmConfig,
    _SMEM_SLACK, GemmConfig, SplitKConfig, cdiv, fit_smem, smem_estimate,
)
from aotpack.kernels.triton.gemm_epilogue import swiglu_config

# the tile configs aotpack tune measures (those valid for a shape and fitting shared memory)
CONFIG_SPACE: tuple[GemmConfig, ...] = (
    LARGE,
    LARGE.with_(num_stages=4),
    LARGE_LONG_K,
    LARGE.with_(FLATTEN=False),
    GemmConfig(BM=256, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3, EPI_SPLIT=2),
    MEDIUM,
    MEDIUM.with_(num_warps=4),
    SMALL_M,
    SMALL_M_NARROW,
    SMALL_M_NARROWEST,
)


def config_for(op: GemmOp, target: Target = SM90) -> AnyGemmConfig:
    """The config of `op` from its shape and epilogue: choose_config, then what the op needs
    (split-K adapted to its operands, an erf epilogue, SwiGLU pairs)."""
    M, K = op.a.shape
    cfg = choose_config(M, op.b.shape[0], K, op.a.dtype, target, op.out.dtype)
    if isinstance(cfg, GemmConfig) and not _tma_loadable(op):
        # rows of a few bytes (K = 3: VGG's adaptive pool to 7x7 over a 3x3 map by averaging
        # matrices) are no tensor-map operand: the split-K kernel loads through pointers
        cfg = splitk_config(M, op.b.shape[0], K, op.a.dtype, target)
    if isinstance(cfg, SplitKConfig):  # decode-sized M: gemm_splitk.py
        if op.b.dtype is DType.F8E4M3:  # the same bytes per stage as bf16's BK=64; fewer
            # stages. On the H200 (M = 1, Llama-3.2-1B's GEMMs) 5-11 % faster than BK=64.
            cfg = cfg.with_(BK=128, num_stages=min(cfg.num_stages, 4))
        return with_prefetch(op, gemm_splitk.adapt_config(op, cfg))
    cfg = unflatten_for_erf(op, cfg)
    if op.fp8_activations and cfg.BK < 32:  # an e4m3 wgmma's K
        cfg = cfg.with_(BK=32)
    g = swiglu_group(op)
    return cfg if g is None else swiglu_config(cfg, g, op, target)


def _tma_loadable(op: GemmOp) -> bool:
    from aotpack.kernels.triton.gemm import tma_problem

    return tma_problem(op.a) is None and tma_problem(op.b) is None


def with_prefetch(op: GemmOp, cfg: SplitKConfig) -> SplitKConfig:
    """A decode GEMM launched as a programmatic dependent, each CTA asking its first weight
    K tiles into L2 while the kernel before (a reduce, a norm, the attention: a few us with
    HBM mostly idle) still runs: about knobs.DECODE_PREFETCH bytes in all, at least one tile
    per CTA, at most its run. CTAs of other row blocks ask for the same lines (no more bytes),
    so the budget is shared by one row block's CTAs."""
    from aotpack import knobs

    budget = knobs.decode_prefetch_bytes()
    if budget is None:
        return cfg.with_(PDL=False, PREFETCH=0)
    K = op.a.shape[1]
    ctas = cdiv(op.b.shape[0], cfg.BN) * cfg.SPLIT_K
    run = cdiv(cdiv(K, cfg.BK), cfg.SPLIT_K)
    tile_bytes = cfg.BN * cfg.BK * op.b.dtype.nbytes
    tiles = min(run, max(1, budget // (ctas * tile_bytes))) if budget else 0
    return cfg.with_(PDL=True, PREFETCH=tiles)


def unflatten_for_erf(op: GemmOp, cfg: GemmConfig) -> GemmConfig:
    """An erf GELU epilogue next to a 128-register accumulator per thread (128x256 on 8 warps)
    in the flattened tile loop spills: 61.8 us flattened, 37.8 us not, at M=1576 N=3072 K=768 on
    the H200 (ViT-B/16's fc1, 2026-11-30 tuning job). The tanh GELU does not (mlp prefill runs
    at 87 % of the GEMM ceiling flattened)."""
    erf = any(isinstance(s, EpAct) and s.act == Act.GELU_ERF for s in op.epilogue)
    if erf and cfg.BM * cfg.BN // (cfg.num_warps * 32) >= 128:
        return cfg.with_(FLATTEN=False)
    return cfg


def choose_config(M: int, N: int, K: int, dtype: DType = DType.BF16, target: Target = SM90,
                  out_dtype: DType | None = None) -> AnyGemmConfig:
    """A config from the shape alone (no measurements).

    - M <= 64 (decode): the swap-AB split-K kernel (splitk_config): the GEMM is bound by
      streaming B once, and only split-K lets a narrow N give every SM a share of B; the tile
      kernel (choose_tile_config) stays in the tuning space;
    - otherwise the tile kernel (choose_tile_config), unless its tiles would leave most SMs
      idle over a long K (tile_starved): split-K again.
    """
    if M <= SPLITK_MAX_M_DEFAULT:
        return splitk_config(M, N, K, dtype, target)
    tile = choose_tile_config(M, N, K, dtype, target, out_dtype)
    if tile_starved(M, N, K, tile, target):
        return splitk_config(M, N, K, dtype, target)
    return tile


STARVED_FRACTION = 4  # fewer tiles than SMs / this: split K instead


def tile_starved(M, N, K, tile: GemmConfig, target: Target) -> bool:
    """Whether the tile kernel would leave most SMs idle on a long K loop: fewer output tiles
    than a quarter of the SMs (an MoE router, N = 8 experts over 2,048 tokens: 16 tiles; a
    256 x 256 output over K = 8192: 4), with K long enough for the split-K kernel to give
    every CTA several K tiles. Its CTAs take row blocks of up to 128 activation rows, so M
    is not bounded there."""
    if not all(isinstance(d, int) for d in (M, N, K)):
        return False
    tiles = cdiv(M, tile.BM) * cdiv(N, tile.BN)
    return tiles * STARVED_FRACTION < target.sm_count and \
        cdiv(K, 64) >= 4 * MIN_K_TILES_PER_SPLIT


def choose_tile_config(M: int, N: int, K: int, dtype: DType = DType.BF16, target: Target = SM90,
                       out_dtype: DType | None = None) -> GemmConfig:
    """A tile-kernel config from the shape alone.

    - M <= 64: a 64-row tile; the widest BN of 128/64/32 that still gives every SM a tile
      (else 32): the problem is bound by streaming B, so CTAs in flight matter more than reuse.
    - otherwise the 128x256x64 config (pointer-stored epilogue when K >= 8192, as measured) or
      128x128 tiles, whichever needs less time counted in waves (large_tiles_win).
    """
    out_dtype = out_dtype or dtype
    if M <= 64:
        wide_enough = [c for c in (SMALL_M, SMALL_M_NARROW) if cdiv(N, c.BN) >= target.sm_count]
        cfg = wide_enough[0] if wide_enough else SMALL_M_NARROWEST
    elif large_tiles_win(M, N, target.sm_count):
        cfg = LARGE_LONG_K if K >= 8192 else LARGE
    else:
        cfg = MEDIUM
    cfg = fit_smem(fit_narrow(cfg, N, K), dtype, out_dtype, target)
    return few_k_steps(cfg, M, N, K, dtype, out_dtype, target)


FEW_K_MAX = 128  # K up to this: a tile is a few K steps, its epilogue as long as its loads


def few_k_steps(cfg: GemmConfig, M, N, K, dtype: DType, out_dtype: DType,
                target: Target) -> GemmConfig:
    """Two persistent CTAs per SM for GEMMs of a few K steps and many tiles (1x1 convs of
    ConvNeXt and mobile nets: M = batch x pixels, K <= 128). Such a tile loads in about the
    time its epilogue takes (a bias + erf GELU over 64 values per thread), and one CTA per SM
    does the two in turn: ConvNeXt-T's fc1 at batch 128 (M=401408 N=384 K=96) ran at 1.1 TB/s
    (345 us) against 3 TB/s for its fc2. BK the 64 or 32 that pads K least (K=96: 3 steps of
    32, not 2 of 64 with a quarter of zeros); stages as many (<= 4) as two CTAs' shared
    memory allows."""
    if not (isinstance(M, int) and isinstance(K, int)) or K > FEW_K_MAX or cfg.BK < 32 \
            or cfg.BM * cfg.BN > 128 * 128:  # two 128x256 accumulators exceed the registers
        return cfg
    if cdiv(M, cfg.BM) * cdiv(N, cfg.BN) < 2 * target.sm_count:
        return cfg
    bk = min((64, 32), key=lambda b: (cdiv(K, b) * b, -b))
    budget = (target.smem_limit + 1024) // 2 - 1024  # per CTA, the driver's 1 KB each
    for stages in (4, 3, 2):
        two = cfg.with_(BK=bk, num_stages=stages, CTAS_PER_SM=2)
        if smem_estimate(two, dtype, out_dtype) <= budget:
            return two
    return cfg


def fit_narrow(cfg: GemmConfig, N, K) -> GemmConfig:
    """A tile no wider than the problem: BN the smallest power of two >= N (at least 32), BK
    the smallest >= K (at least 16). Pointwise convolutions of mobile nets have 16..96 output
    or input channels and millions of rows: a 128x128x64 tile over N=16, K=32 issues 16x the
    useful MMAs, which turns a GEMM bound by reading its rows into one bound by the MMAs.
    (Transformer GEMMs never have N < 128 or K < 64: they keep their tiles.)"""
    if not (isinstance(N, int) and isinstance(K, int)):
        return cfg
    bn, bk = 32, 16
    while bn < N and bn < cfg.BN:
        bn *= 2
    while bk < K and bk < cfg.BK:
        bk *= 2
    bn, bk = min(bn, cfg.BN), min(bk, cfg.BK)
    if (bn, bk) == (cfg.BN, cfg.BK):
        return cfg
    return cfg.with_(BN=bn, BK=bk, EPI_SPLIT=max(1, min(cfg.EPI_SPLIT, bn // 32)))


# A 128x256 tile takes this many times as long as a 128x128 one (twice the work, better reuse).
# H200, 2026-11-30 (tuning job of ViT-B/16, benchmarks/results/2026-11-30-h200-tuning-db.json):
# M=1576 N=2304 K=768 ran 117 tiles of 128x256 in 15.8 us and 234 of 128x128 in 16.9 us, one
# and two waves of 132 SMs: 1.87.
LARGE_TILE_COST = 1.87


def large_tiles_win(M: int, N: int, sm_count: int) -> bool:
    """Whether 128x256 tiles finish before 128x128 ones, counting whole waves of a persistent
    grid: a last wave that is mostly empty costs a full one. M=1576 N=3072 (ViT-B/16's fc1)
    needs 2 waves of 156 large tiles (the second 18 % full) against 3 of 312 small ones;
    2048x4096 (a Llama projection) 2 waves of 256 large against 4 of 512 small."""
    large = cdiv(cdiv(M, LARGE.BM) * cdiv(N, LARGE.BN), sm_count)
    small = cdiv(cdiv(M, MEDIUM.BM) * cdiv(N, MEDIUM.BN), sm_count)
    return large * LARGE_TILE_COST <= small


# ----------------------------------------------------------------------------- split-K
SPLITK_MAX_M_DEFAULT = 64  # choose_config picks split-K up to this M
SPLITK_MAX_M_TUNED = 128  # candidate_configs offers split-K up to this M
MAX_SPLIT_K = 32
MIN_K_TILES_PER_SPLIT = 4  # shorter K runs spend most of their time filling the pipeline
_CTAS_PER_SM_WANTED = 3  # stages are sized so that this many CTAs share an SM
# Weight bytes a split must take off each CTA's run to pay for its reduce launch. Measured on
# the H200 (CUDA-graph replays, benchmarks/results/2026-12-04-h200-small-decode-gemms.json): a
# direct CTA streams ~57 GB/s after ~2 us, the reduce adds ~1.2-1.3 us: ResNet's classifier
# (1x1000x512) 3.0 us direct vs 3.7 split in 2, 1x1000x768 3.6 vs 4.0, Qwen2-0.5B's 1x1152x896
# 3.9 vs 4.2; 1x1000x1280 4.7 direct vs 3.9 split in 4.
MIN_SPLIT_SAVING = 72 << 10
_SMEM_PER_CTA_RESERVED = 1024  # the driver's per-CTA reservation


def splitk_bm(M: int) -> int:
    """Activation rows per CTA: M rounded up to a power of two, 16..128 (wgmma N side)."""
    bm = 16
    while bm < min(M, 128):
        bm *= 2
    return bm


def splitk_smem_estimate(cfg: SplitKConfig, in_dtype: DType) -> int:
    return cfg.num_stages * (cfg.BN + cfg.BM) * cfg.BK * in_dtype.nbytes + _SMEM_SLACK


def _ctas_per_sm(cfg: SplitKConfig, in_dtype: DType, target: Target) -> int:
    per_cta = splitk_smem_estimate(cfg, in_dtype) + _SMEM_PER_CTA_RESERVED
    return max(1, min(8, (target.smem_limit + _SMEM_PER_CTA_RESERVED) // per_cta))


def _stages_for(BN: int, BM: int, BK: int, in_dtype: DType, target: Target) -> int:
    """Deepest pipeline (3..8 stages) that still lets _CTAS_PER_SM_WANTED CTAs share an SM: the
    weight is read once, so what matters is bytes in flight per SM (several CTAs each with
    stages - 1 loads outstanding), not reuse."""
    budget = (target.smem_limit + _SMEM_PER_CTA_RESERVED) // _CTAS_PER_SM_WANTED
    budget -= _SMEM_SLACK + _SMEM_PER_CTA_RESERVED
    return max(3, min(8, budget // ((BN + BM) * BK * in_dtype.nbytes)))


def max_split_k(M: int, K: int, BK: int, tiles: int, sm_count: int) -> int:
    """Splits worth making: each run of K at least MIN_K_TILES_PER_SPLIT tiles, and the f32
    partial sums (S * M * N * 4 bytes written, then read) at most 1/4 of the weight's N * K * 2
    bytes, i.e. S <= K / (16 M), unless fewer splits would leave SMs without a CTA (an idle SM
    costs more than partials that mostly stay in L2)."""
    by_k = max(1, cdiv(K, BK) // MIN_K_TILES_PER_SPLIT)
    by_bytes = max(1, K // (16 * max(M, 1)))
    fill = 1
    while tiles * fill * 10 < sm_count * 9:  # ~all SMs busy (128 CTAs on 132 SMs will do)
        fill *= 2
    return min(MAX_SPLIT_K, by_k, max(by_bytes, fill))


def _pow2_split(tiles: int, slots: int, cap: int) -> int:
    """Largest power of two S <= cap with tiles * S <= slots (all CTAs resident: one wave)."""
    split = 1
    while split * 2 <= cap and tiles * split * 2 <= slots:
        split *= 2
    return split


def splitk_config(M: int, N: int, K: int, dtype: DType = DType.BF16,
                  target: Target = SM90, BN: int | None = None) -> SplitKConfig:
    """The heuristic split-K config: fill every SM with several CTAs in ONE wave.

    A decode GEMM is bound by reading the weight once. Each CTA keeps (stages - 1) loads in
    flight; 3 CTAs per SM give the 5-10 MB in flight that the H200's bandwidth x latency needs.
    SPLIT_K is the largest power of two whose CTAs (tiles x SPLIT_K, about 2-3 x sm_count for
    small N) are all resident at once: a second partial wave would stream with a fraction of
    the SMs, and every doubling of SPLIT_K doubles the partial sums to write and reduce.
    BN = 64 for BM <= 32 (twice the CTAs per split, half the partials of BN = 128 at the same
    CTA count); BN = 128 for larger BM (A is re-read per weight tile) or when 64-row tiles
    alone overfill one wave."""
    BM = splitk_bm(M)
    num_warps = 8 if BM >= 128 else 4
    candidates = (BN,) if BN else ((64, 128) if BM <= 32 else (128,))
    cfg = None
    for bn in candidates:
        stages = _stages_for(bn, BM, 64, dtype, target)
        cfg = SplitKConfig(BN=bn, BM=BM, BK=64, num_warps=num_warps, num_stages=stages)
        slots = target.sm_count * _ctas_per_sm(cfg, dtype, target)
        tiles = cdiv(M, BM) * cdiv(N, bn)
        if tiles <= slots or bn == candidates[-1]:
            break
    split = _pow2_split(tiles, slots, max_split_k(M, K, cfg.BK, tiles, target.sm_count))
    if split > 1 and cfg.BN * K * dtype.nbytes * (split - 1) // split < MIN_SPLIT_SAVING:
        split = 1  # one launch: the reduce would cost more than the shorter runs save
    return cfg.with_(SPLIT_K=split)


def _splitk_variants(M: int, N: int, K: int, dtype: DType, target: Target) -> list[SplitKConfig]:
    """The heuristic split-K config and its neighbours, most promising first."""
    h = splitk_config(M, N, K, dtype, target)
    other_bn = splitk_config(M, N, K, dtype, target, BN=192 - h.BN)  # 64 <-> 128
    out = [h, h.with_(SPLIT_K=h.SPLIT_K * 2), h.with_(SPLIT_K=max(1, h.SPLIT_K // 2)), other_bn,
           h.with_(FIXUP=h.SPLIT_K > 1),  # the same as h when it is direct: dropped below
           h.with_(TMA=False), h.with_(num_stages=max(2, h.num_stages - 2)),
           h.with_(BK=128, num_stages=max(2, h.num_stages // 2)),
           h.with_(SPLIT_K=h.SPLIT_K * 4)]
    return [c for c in out if c.SPLIT_K <= cdiv(K, c.BK)
            and splitk_smem_estimate(c, dtype) <= target.smem_limit]


def _tile_candidates(M: int, dtype: DType, out_dtype: DType, target: Target) -> list[GemmConfig]:
    """CONFIG_SPACE entries that are valid and fit shared memory; for small M only tiles no
    taller than needed (a 256-row tile of a 16-row problem is all padding)."""
    max_bm = 10**9 if M > SPLITK_MAX_M_TUNED else max(64, splitk_bm(M))
    out = []
    for cfg in CONFIG_SPACE:
        cfg = fit_smem(cfg, dtype, out_dtype, target)
        valid = cfg.BK * dtype.nbytes <= 128 and cfg.EPI_SPLIT in (1, 2, 4) and \
            cfg.BN % cfg.EPI_SPLIT == 0
        if valid and cfg.BM <= max_bm and smem_estimate(cfg, dtype, out_dtype) <= target.smem_limit:
            out.append(cfg)
    return out


MAX_CANDIDATES = 16


def candidate_configs(M: int, N: int, K: int, dtype: DType = DType.BF16, target: Target = SM90,
                      out_dtype: DType | None = None) -> list[AnyGemmConfig]:
    """The tuning space of one GEMM shape, heuristic choice first, in a deterministic order:
    valid tile configs that fit shared memory, plus split-K variants when M <= 128."""
    out_dtype = out_dtype or dtype
    first = choose_config(M, N, K, dtype, target, out_dtype)
    tiles = [fit_narrow(c, N, K) for c in _tile_candidates(M, dtype, out_dtype, target)]
    splitk = _splitk_variants(M, N, K, dtype, target) if M <= SPLITK_MAX_M_TUNED else []
    # split-K first for decode M; for 64 < M <= 128 its three best guesses still come early
    # (the tile heuristic has few CTAs there), so a short tuning run measures both kinds
    rest = splitk + tiles if isinstance(first, SplitKConfig) else splitk[:3] + tiles + splitk[3:]
    if isinstance(first, GemmConfig) and first.BM * first.BN <= 128 * 128:
        # one and two CTAs per SM (few_k_steps; a 128x256 accumulator needs more registers
        # than two CTAs of 8 warps have)
        rest = [first.with_(CTAS_PER_SM=3 - first.CTAS_PER_SM)] + rest
    out = [first]
    for cfg in rest:
        if cfg not in out:
            out.append(cfg)
    return out[:MAX_CANDIDATES]
