"""Tile configurations of the Triton Hopper GEMM templates: what a config is, what it needs.

A config fixes everything compiled into the kernel besides the op itself: tile (BM, BN, BK),
rasterization group, warps, pipeline depth, and how the epilogue stores. This file is part of
the GEMM family's tuning key (aotpack/tuning/space.py): a measured config means the same kernel
only while these definitions stay. Which config a shape gets without measurements, and the
tuning space, are in gemm_heuristic.py, outside the key: changing a heuristic keeps a tuning
database valid. Nothing here imports triton or torch.
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
    # persistent CTAs per SM (the grid is sm_count x this, registers capped to fit). 2 for
    # GEMMs of few K steps (ConvNeXt's and mobile nets' 1x1 convs, K <= 128): one CTA's
    # epilogue (a GELU over 64 values per thread) runs while the other's loads stream; with
    # one CTA the two take turns (gemm_heuristic.few_k_steps)
    CTAS_PER_SM: int = 1

    def as_dict(self) -> dict:
        return dict(asdict(self), kind="tile")

    def maxnreg(self) -> int | None:
        """The register cap that lets CTAS_PER_SM CTAs share an SM's 64K registers."""
        if self.CTAS_PER_SM <= 1:
            return None
        return min(255, 65536 // (self.CTAS_PER_SM * self.num_warps * 32)) // 8 * 8

    def with_(self, **changes) -> "GemmConfig":
        return replace(self, **changes)


@dataclass(frozen=True)
class SplitKConfig:
    """The swap-AB split-K kernel (gemm_splitk.py) for decode-sized M: a CTA multiplies BN weight
    rows (wgmma's M side) by the BM-row-padded activations (wgmma's N side) over one of SPLIT_K
    equal runs of K tiles. SPLIT_K > 1 (or a SwiGLU) writes f32 partial sums that the last CTA
    of each tile (FIXUP) or a second, small kernel adds up and finishes with the epilogue."""

    BN: int = 64  # weight rows per CTA (64 per warpgroup)
    BM: int = 16  # activation rows per CTA (M padded; 16..128)
    BK: int = 64
    SPLIT_K: int = 1
    num_warps: int = 4
    num_stages: int = 6
    # load both operands with TMA (host descriptors); otherwise masked pointer loads (cp.async)
    TMA: bool = True
    # partial sums finished in the same launch by the last CTA of each tile (counters) instead
    # of a second, reduce launch. Off by default: measured on the H200 (llama-1B decode, same
    # call) the last CTA's serial tail costs more than the launch it saves (852 vs 715 + 99 us
    # per step, benchmarks/results/2026-12-02-h200-decode-fixup.json); a tuning candidate.
    FIXUP: bool = False
    # launched as a programmatic dependent (kernels/triton/pdl.py): the CTAs may start while
    # the kernel before runs, request their first PREFETCH weight K tiles into L2, then wait
    PDL: bool = False
    PREFETCH: int = 0

    def as_dict(self) -> dict:
        return dict(asdict(self), kind="splitk")

    def with_(self, **changes) -> "SplitKConfig":
        return replace(self, **changes)


AnyGemmConfig = Union[GemmConfig, SplitKConfig]


def splitk_label(cfg: SplitKConfig) -> str:
    """A short name for tables and logs, e.g. 'splitk 64x16x64 S4 w4 s6 tma'."""
    return (f"splitk {cfg.BN}x{cfg.BM}x{cfg.BK} S{cfg.SPLIT_K} w{cfg.num_warps} "
            f"s{cfg.num_stages} {'tma' if cfg.TMA else 'ptr'}{'' if cfg.FIXUP else ' reduce'}")
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
