"""Tile configurations of the Triton Hopper GEMM template and the no-GPU heuristic that picks one.

A config fixes everything compiled into the kernel besides the op itself: tile (BM, BN, BK),
rasterization group, warps, pipeline depth, and how the epilogue stores. Without tuning data
`choose_config` decides from the problem shape alone (a later tuning pass measures the space).
Nothing here imports triton or torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Union

from aotpack.dtypes import DType
from aotpack.kernels.spec import SM90, Target

# bytes of shared memory Triton needs on top of the operand stages (barriers, layout-conversion
# scratch of the epilogue); an estimate, compile_kernel reports the real figure.
_SMEM_SLACK = 8 * 1024


@dataclass(frozen=True)
class GemmConfig:
    BM: int
    BN: int
    BK: int
    GROUP_M: int = 8
    num_warps: int = 8
    num_stages: int = 3
    # epilogue subtiles along N (1, 2 or 4): the accumulator is finished and stored in EPI_SPLIT
    # column blocks, which cuts the epilogue's live registers and store staging. A TMA store
    # needs a subtile row of at most 128 bytes (64 bf16 columns).
    EPI_SPLIT: int = 1
    # store the output through a TMA descriptor (needs a 16-byte aligned output view);
    # otherwise masked pointer stores
    TMA_STORE: bool = True
    # flatten the persistent tile loop with the K loop so loads of the next tile overlap
    # the epilogue of this one
    FLATTEN: bool = True

    def as_dict(self) -> dict:
        return dict(asdict(self), kind="tile")

    def with_(self, **changes) -> "GemmConfig":
        return replace(self, **changes)


@dataclass(frozen=True)
class SplitKConfig:
    """The swap-AB split-K kernel (gemm_splitk.py) for decode-sized M: a CTA multiplies BN weight
    rows (wgmma's M side) by the BM-row-padded activations (wgmma's N side) over one of SPLIT_K
    equal runs of K tiles. SPLIT_K > 1 (or a SwiGLU) writes f32 partial sums that a second,
    small kernel adds up and finishes with the epilogue."""

    BN: int = 64  # weight rows per CTA (64 per warpgroup)
    BM: int = 16  # activation rows per CTA (M padded; 16..128)
    BK: int = 64
    SPLIT_K: int = 1
    num_warps: int = 4
    num_stages: int = 6
    # load both operands with TMA (host descriptors); otherwise masked pointer loads (cp.async)
    TMA: bool = True

    def as_dict(self) -> dict:
        return dict(asdict(self), kind="splitk")

    def with_(self, **changes) -> "SplitKConfig":
        return replace(self, **changes)


AnyGemmConfig = Union[GemmConfig, SplitKConfig]


def splitk_label(cfg: SplitKConfig) -> str:
    """A short name for tables and logs, e.g. 'splitk 64x16x64 S4 w4 s6 tma'."""
    return (f"splitk {cfg.BN}x{cfg.BM}x{cfg.BK} S{cfg.SPLIT_K} w{cfg.num_warps} "
            f"s{cfg.num_stages} {'tma' if cfg.TMA else 'ptr'}")
_CONFIG_KINDS = {"tile": GemmConfig, "splitk": SplitKConfig}


def config_from_dict(d: dict) -> AnyGemmConfig:
    """Inverse of `as_dict()` for either kind (a dict without "kind" is a tile config, as
    written before split-K existed)."""
    fields = dict(d)
    kind = fields.pop("kind", "tile")
    if kind not in _CONFIG_KINDS:
        raise ValueError(f"unknown GEMM config kind {kind!r} (tile or splitk)")
    try:
        return _CONFIG_KINDS[kind](**fields)
    except TypeError as e:
        raise ValueError(f"bad {kind} GEMM config {d}: {e}") from None


# The high-throughput config for large shapes: 2 consumer warpgroups each own a 64x256 wgmma
# accumulator (128 f32 registers per thread); 3 stages of 48 KiB; BK=64 = one 128-byte row.
LARGE = GemmConfig(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3, EPI_SPLIT=4)
# Long K (>= 8192): the same tile with two pointer-stored epilogue subtiles. Measured on the H200
# (2026-11-30, benchmarks/results/2026-11-30-h200-skeleton.json): 722 vs 692 TFLOP/s at
# 2048x4096x14336, 712 vs 697 at 2048x6144x14336, 702 vs 693 at 4096x4096x16384; at K=4096
# the TMA-store config is as fast or faster, so it stays the default there.
LARGE_LONG_K = GemmConfig(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3,
                          EPI_SPLIT=2, TMA_STORE=False)
# Mid-sized problems (too few 128x256 tiles to fill the GPU).
MEDIUM = GemmConfig(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=4, EPI_SPLIT=2)
# Decode-sized M: one 64-row warpgroup tile, deep K pipeline; the GEMM is bound by reading B.
SMALL_M = GemmConfig(BM=64, BN=128, BK=64, GROUP_M=1, num_warps=4, num_stages=6, EPI_SPLIT=2)
# narrower B slices for decode shapes with small N: more CTAs streaming the weights
SMALL_M_NARROW = SMALL_M.with_(BN=64, EPI_SPLIT=1)
SMALL_M_NARROWEST = SMALL_M.with_(BN=32, EPI_SPLIT=1, num_stages=8)

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


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def smem_estimate(cfg: GemmConfig, in_dtype: DType, out_dtype: DType) -> int:
    """Shared memory the config needs (operand stages + TMA-store staging + slack)."""
    stages = cfg.num_stages * (cfg.BM + cfg.BN) * cfg.BK * in_dtype.nbytes
    store = cfg.BM * (cfg.BN // cfg.EPI_SPLIT) * out_dtype.nbytes if cfg.TMA_STORE else 0
    return stages + store + _SMEM_SLACK


def fit_smem(cfg: GemmConfig, in_dtype: DType, out_dtype: DType, target: Target) -> GemmConfig:
    """Drop pipeline stages (not below 2) until the estimate fits the target's shared memory."""
    while cfg.num_stages > 2 and smem_estimate(cfg, in_dtype, out_dtype) > target.smem_limit:
        cfg = cfg.with_(num_stages=cfg.num_stages - 1)
    return cfg


def choose_config(M: int, N: int, K: int, dtype: DType = DType.BF16, target: Target = SM90,
                  out_dtype: DType | None = None) -> AnyGemmConfig:
    """A config from the shape alone (no measurements).

    - M <= 64 (decode): the swap-AB split-K kernel (splitk_config): the GEMM is bound by
      streaming B once, and only split-K lets a narrow N give every SM a share of B; the tile
      kernel (choose_tile_config) stays in the tuning space;
    - otherwise the tile kernel: choose_tile_config.
    """
    if M <= SPLITK_MAX_M_DEFAULT:
        return splitk_config(M, N, K, dtype, target)
    return choose_tile_config(M, N, K, dtype, target, out_dtype)


def choose_tile_config(M: int, N: int, K: int, dtype: DType = DType.BF16, target: Target = SM90,
                       out_dtype: DType | None = None) -> GemmConfig:
    """A tile-kernel config from the shape alone.

    - M <= 64: a 64-row tile; the widest BN of 128/64/32 that still gives every SM a tile
      (else 32): the problem is bound by streaming B, so CTAs in flight matter more than reuse.
    - enough 128x256 tiles for at least ~one full wave: the 128x256x64 config (pointer-stored
      epilogue when K >= 8192, as measured).
    - otherwise 128x128 tiles, which give twice as many CTAs.
    """
    out_dtype = out_dtype or dtype
    if M <= 64:
        wide_enough = [c for c in (SMALL_M, SMALL_M_NARROW) if cdiv(N, c.BN) >= target.sm_count]
        cfg = wide_enough[0] if wide_enough else SMALL_M_NARROWEST
    elif cdiv(M, LARGE.BM) * cdiv(N, LARGE.BN) >= target.sm_count:
        cfg = LARGE_LONG_K if K >= 8192 else LARGE
    else:
        cfg = MEDIUM
    return fit_smem(cfg, dtype, out_dtype, target)


# ----------------------------------------------------------------------------- split-K
SPLITK_MAX_M_DEFAULT = 64  # choose_config picks split-K up to this M
SPLITK_MAX_M_TUNED = 128  # candidate_configs offers split-K up to this M
MAX_SPLIT_K = 32
MIN_K_TILES_PER_SPLIT = 4  # shorter K runs spend most of their time filling the pipeline
_CTAS_PER_SM_WANTED = 3  # stages are sized so that this many CTAs share an SM
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
    return cfg.with_(SPLIT_K=split)


def _splitk_variants(M: int, N: int, K: int, dtype: DType, target: Target) -> list[SplitKConfig]:
    """The heuristic split-K config and its neighbours, most promising first."""
    h = splitk_config(M, N, K, dtype, target)
    other_bn = splitk_config(M, N, K, dtype, target, BN=192 - h.BN)  # 64 <-> 128
    out = [h, h.with_(SPLIT_K=h.SPLIT_K * 2), h.with_(SPLIT_K=max(1, h.SPLIT_K // 2)), other_bn,
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
    tiles = _tile_candidates(M, dtype, out_dtype, target)
    splitk = _splitk_variants(M, N, K, dtype, target) if M <= SPLITK_MAX_M_TUNED else []
    # split-K first for decode M; for 64 < M <= 128 its three best guesses still come early
    # (the tile heuristic has few CTAs there), so a short tuning run measures both kinds
    rest = splitk + tiles if isinstance(first, SplitKConfig) else splitk[:3] + tiles + splitk[3:]
    out = [first]
    for cfg in rest:
        if cfg not in out:
            out.append(cfg)
    return out[:MAX_CANDIDATES]
