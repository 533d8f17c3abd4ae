"""Tile configurations of the Triton Hopper GEMM template and the no-GPU heuristic that picks one.

A config fixes everything compiled into the kernel besides the op itself: tile (BM, BN, BK),
rasterization group, warps, pipeline depth, and how the epilogue stores. Without tuning data
`choose_config` decides from the problem shape alone (a later tuning pass measures the space).
Nothing here imports triton or torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

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
        return asdict(self)

    def with_(self, **changes) -> "GemmConfig":
        return replace(self, **changes)


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
                  out_dtype: DType | None = None) -> GemmConfig:
    """A config from the shape alone (no measurements).

    - M <= 64 (decode): a 64-row tile; the widest BN of 128/64/32 that still gives every SM a
      tile (else 32): the problem is bound by streaming B, so CTAs in flight matter more than
      reuse.
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
