"""Configs of the convolution kernels (triton/conv.py): the heuristic default and the space
`aotpack tune` measures. Heuristics only: outside the tuning key's sources would be better, but
the tiles are the kernel's constexprs, so a change here is a change of kernels anyway.

Implicit GEMM: BM x BN output tile over [pixels, channels of a group], BK channels per step
(64 when the group has that many: a full 128-byte bf16 row), FLAT_K when a group has fewer than
16 channels (small grouped convs, a 3-channel image read in place) unless they are 4, 8 or 12
contiguous ones of one group (a folded stem: per-tap loads). Depthwise: BP pixels x BC
channels per program.
"""
from __future__ import annotations

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import ConvOp, Target


def _pow2_at_least(n: int, lo: int, hi: int) -> int:
    p = lo
    while p < n and p < hi:
        p *= 2
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_DW_TILE = 2048  # depthwise: pixels x channels per program of 4 warps
_UNROLLED_TAPS = 49  # depthwise windows up to 7x7 unrolled whole; larger ones loop over rows


def _channel_block(c: int) -> int:
    """Depthwise channels per program: the widest of 64/32/16 that leaves at most 1/8 of its
    lanes idle (C=96: 32, not 64 with a half-empty second block; C=72: 16). Narrow blocks
    still load whole 32-byte sectors (16 bf16), so DRAM efficiency holds."""
    for b in (64, 32, 16):
        if (_cdiv(c, b) * b - c) * 8 <= c:
            return b
    return 16


def _aligned_taps(op: ConvOp) -> bool:
    """One group of 4, 8 or 12 channels, pixels dense (a stem folded 2x2, aten_conv_stem): each
    tap's channels are one aligned 8-24 byte load. Walked per tap it measured 0.9-1.03x the
    gathered walk (FLAT_K) over the same folded image for ResNet-50's stem and 0.73-0.82x for
    EfficientNet-B0's (bench_stem.py, H200, batch 32/128); both stay tuning candidates."""
    cg = op.x.shape[3] // op.groups
    return (op.groups == 1 and cg % 4 == 0 and cg < 16 and op.x.strides[3] == 1
            and op.x.strides[2] == cg)


def default_config(op: ConvOp, target: Target) -> dict:
    m = upper_bound(op.rows)
    c = op.x.shape[3]
    if op.depthwise:
        bc = _channel_block(c)
        # 2048 elements per 128 threads (16 each): measured on the H200 (bench_depthwise.py,
        # MobileNetV3/EfficientNet-B0 at batch 32) within 10 % of the best candidate, where
        # 4096 was up to 1.6x and 8192 (64 per thread) spilled, 7-35x slower
        bp = _DW_TILE // bc
        # a small image (batch 1, the last stages) would leave SMs idle: narrower programs
        while _cdiv(m, bp) * _cdiv(c, bc) < target.sm_count and (bc > 32 or bp > 16):
            bc, bp = (bc // 2, bp) if bc > 32 else (bc, bp // 2)
        # the window's rows looped at run time: a tuning candidate (faster for some 5x5 convs,
        # slower for others); unrolled whole is the better default at 16 elements per thread,
        # up to 7x7: a larger window unrolled whole takes minutes to compile (13x13 ~50 s,
        # 17x17 ~2-7 min, 31x31 did not finish in 7 min on 2 cores), looped it is one row
        row_loop = op.kernel[0] * op.kernel[1] > _UNROLLED_TAPS
        return {"BP": bp, "BC": bc, "num_warps": 4, "num_stages": 2, "ROW_LOOP": row_loop}
    cg, ocg = c // op.groups, op.out_channels // op.groups
    aligned = _aligned_taps(op)
    flat = cg < 16 and not aligned
    bk = 32 if flat else (64 if cg >= 64 else _pow2_at_least(cg, 16, 64))
    if op.x.dtype.nbytes == 4:  # tf32: a 128-byte row is 32 elements; the stages fit in smem
        bk = min(bk, 32)
    bn = _pow2_at_least(ocg, 16, 128)
    bm = 128 if m >= 128 * target.sm_count // max(1, ocg // bn) else 64
    # few output tiles (batch 1, 7x7 or 14x14 images, K up to 4608) leave most SMs idle, each
    # CTA walking a long K loop: narrower N tiles give more CTAs (A is re-read from L2)
    while _cdiv(m, bm) * _cdiv(ocg, bn) * op.groups < target.sm_count and bn > 32:
        bn //= 2
    big = bm * bn >= 128 * 128
    # a folded stem's per-tap K steps are short: 2 stages measured as fast or faster than 4
    # (bench_stem.py: EfficientNet-B0's at batch 128 128 vs 140 us, ResNet-50's equal)
    stages = 3 if big else (2 if aligned else 4)
    return {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8, "FLAT_K": flat,
            "num_warps": 8 if big else 4, "num_stages": stages}


def candidate_configs(op: ConvOp, target: Target) -> list[dict]:
    base = default_config(op, target)
    out = [base]
    cg = op.x.shape[3] // op.groups
    if op.depthwise:
        bp, bc = base["BP"], base["BC"]
        half, quarter = max(16, bp // 2), max(16, bp // 4)
        # at most 32 elements per thread: 64 spilled (bench_depthwise.py)
        variants = [{"ROW_LOOP": True}, {"BP": half}, {"BP": quarter},
                    {"BP": half, "ROW_LOOP": True}, {"BP": bp * 2, "num_warps": 8},
                    {"BP": bp * 2, "num_warps": 8, "ROW_LOOP": True},
                    {"BC": max(16, bc // 2), "BP": bp * 2}, {"BC": min(128, bc * 2), "BP": half},
                    {"BP": 64, "BC": 16, "num_warps": 8}]
    else:
        variants = [{"BM": 128, "BN": 128, "num_warps": 8, "num_stages": 3},
                    {"BM": 64, "BN": 128, "num_warps": 4, "num_stages": 4},
                    {"BM": 128, "BN": 64, "num_warps": 4, "num_stages": 4},
                    {"BM": 64, "BN": 64, "num_warps": 4, "num_stages": 4},
                    {"BM": 128, "BN": 256, "num_warps": 8, "num_stages": 3},
                    {"BM": 64, "BN": 32, "num_warps": 4, "num_stages": 4},
                    {"num_stages": 2}, {"GROUP_M": 1}]
        if not base["FLAT_K"] and cg >= 16:
            variants += [{"BK": 32}, {"BK": 64, "num_stages": 3}]
        if cg < 16:  # the other way of walking K: gathered across taps, or per tap
            variants += [{"FLAT_K": not base["FLAT_K"], "BK": 16 if base["FLAT_K"] else 32,
                          "num_stages": 2 if base["FLAT_K"] else 4}]
    for v in variants:
        c = {**base, **v}
        if c not in out and (op.depthwise or c["BN"] <= max(16, 2 * op.out_channels)):
            out.append(c)
    return out
