"""GemmOp -> Launch for aotpack's CuTeDSL Hopper GEMM (gemm.py), launched by the generic
runtime through manifest slots only (never through CuTeDSL's host code).

The kernel's parameter list, as the PTX `.entry` of every config shows it (CuTeDSL 4.8.1):
  0 CUtensorMap A (128 B)   1 A coord shape {i32 M, i32 K} (passed as a u64 slot M | K << 32)
  2 CUtensorMap B           3 B coord shape {i32 N, i32 K}
  4 CUtensorMap C           5 C coord shape {i32 M, i32 N}   (SwiGLU: N = B's rows / 2)
  6-8  epilogue operand pointers p0..p2 (u64; unused ones are kept, we pass NULL): bias/add/mul
       in the output dtype, scale/scale_n f32
  9-11 epilogue operand row strides ld0..ld2 (i32, elements)
  12-19 persistent scheduler, twice the same 4 values: i32 tiles_m, i32 tiles_n,
        fastdivmod(clusters along the raster dim), fastdivmod(clusters along the other dim)
Descriptor boxes: A (tile_m / cluster_n, 64), B (tile_n / cluster_m, 64) (a multicast load
brings 1/cluster of the tile into each CTA), C the epilogue sub-tile; swizzle from the smem
layout CuTe built. The grid is (cluster_m, cluster_n, min(#clusters, sm_count / cluster size)):
the kernel loops over tiles with gridDim, so the SM count is only a launch value.
tests/test_cutedsl_gemm.py checks all of this against CuTeDSL's own host function.
"""
from __future__ import annotations

import functools
import re

from aotpack.dtypes import DType
from aotpack.ir.sym import cdiv, divisible, sym_min
from aotpack.kernels.cutedsl.slots import i32_pair
from aotpack.kernels.spec import (
    SM90, Act, CompiledKernel, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, FastDivmodSlot,
    GemmOp, IntSlot, Launch, NullSlot, PtrSlot, Target, TensorArg, TensorMapSlot,
    epilogue_operands, swiglu_group,
)

_DT = {DType.BF16: "bf16", DType.F16: "f16", DType.F32: "f32"}
_ACT = {Act.GELU_TANH: "gelu_tanh", Act.GELU_ERF: "gelu_erf", Act.SILU: "silu", Act.RELU: "relu"}


def epilogue_kinds(op: GemmOp) -> tuple[str, ...]:
    """The kernel's static step kinds (epilogue.py); a leading EpSwiGLU is the config's
    swiglu_group instead."""
    out = []
    for i, s in enumerate(op.epilogue):
        if isinstance(s, EpSwiGLU):
            if i != 0:
                raise ValueError("EpSwiGLU must be the first epilogue step")
            continue
        if isinstance(s, EpScale):
            out.append("scale" if tuple(s.scale.shape) == (1,) else "scale_n")
        elif isinstance(s, EpBias):
            out.append("bias")
        elif isinstance(s, EpAdd):
            out.append("add")
        elif isinstance(s, EpMul):
            out.append("mul")
        elif isinstance(s, EpAct):
            out.append(_ACT[s.act])
        else:
            raise TypeError(f"unknown epilogue step {s!r}")
    return tuple(out)


def supports(op: GemmOp) -> str | None:
    """None if the kernel can run `op`, else why not."""
    a, b, o = op.a, op.b, op.out
    if op.b_scale is not None:
        return "FP8 weights (a dequantization scale per row) run on the Triton GEMM"
    if a.dtype not in (DType.BF16, DType.F16) or b.dtype != a.dtype:
        return "A and B must both be bf16 or f16"
    if o.dtype not in _DT:
        return f"output dtype {o.dtype} not supported"
    acts = [s.act.value for s in op.epilogue if isinstance(s, EpAct) and s.act not in _ACT]
    if acts:
        return f"its epilogue has no {', '.join(acts)} (the Triton GEMM has)"
    for t in (a, b, o):
        if len(t.shape) != 2 or t.strides[1] != 1:
            return "operands must be 2-D with unit inner stride"
        if not (divisible(t.strides[0] * t.dtype.nbytes, 16)
                and divisible(t.offset * t.dtype.nbytes, 16)):
            return "TMA needs 16-byte aligned rows and base addresses"
    if not (divisible(a.shape[1] * a.dtype.nbytes, 16)
            and divisible(o.shape[1] * o.dtype.nbytes, 16)):
        return "K and N must span a multiple of 16 bytes"
    why = _swiglu_problem(op)
    if why:
        return why
    try:
        kinds = [k for k in epilogue_kinds(op) if k in _OPERAND_KINDS]
    except ValueError as e:
        return str(e)
    operands = epilogue_operands(op.epilogue)
    if len(operands) > 3:
        return "at most 3 epilogue operands"
    for kind, t in zip(kinds, operands):
        want = DType.F32 if kind.startswith("scale") else o.dtype
        if t.dtype != want or t.strides[-1] != 1:
            return ("epilogue operands must have a unit inner stride and the output dtype "
                    "(EpScale: f32)")
    return None


_INT_BYTES = {"i32": 4, "u32": 4, "i64": 8, "u64": 8}

# steps whose operand is a pointer parameter (epilogue.OPERAND_KINDS; kept here so that this
# module does not import cutlass)
_OPERAND_KINDS = ("bias", "add", "mul", "scale", "scale_n")


def _swiglu_problem(op: GemmOp) -> str | None:
    g = swiglu_group(op)
    if g is None:
        return None
    if g % 8 or 256 % (2 * g):
        return f"SwiGLU group {g} must be a multiple of 8 with 2 * group dividing the 256 tile"
    if op.b.shape[0] != 2 * op.out.shape[1] or op.b.shape[0] % (2 * g):
        return f"SwiGLU: B must have 2 x {op.out.shape[1]} rows in whole gate/up pairs"
    return None


def default_config(op: GemmOp, **over):
    from aotpack.kernels.cutedsl.gemm import GemmConfig

    m, n = op.out.shape[0], op.b.shape[0]  # accumulator columns (SwiGLU: 2x the output's)
    # a given tile is not decided again (a symbolic M has no single value to decide it on)
    tile_m = over.get("tile_m") or (64 if m <= 64 else 128)
    tile_n = over.get("tile_n") or (256 if n >= 256 and tile_m == 128 else 128)
    g = swiglu_group(op) or 0
    if g and tile_n % (2 * g) and "tile_n" not in over:
        tile_n = 256  # whole gate/up pairs per tile
    kw = dict(tile_m=tile_m, tile_n=tile_n, epilogue=epilogue_kinds(op),
              out_dtype=_DT[op.out.dtype], swiglu_group=g)
    kw.update(over)
    return GemmConfig(**kw)


def candidates(op: GemmOp) -> list:
    """Configs worth measuring for `op` (the tuner compiles each and times it on the GPU)."""
    out = []
    g = swiglu_group(op) or 0
    for tm, tn in ((128, 256), (128, 128), (64, 128), (64, 256)):
        if g and tn % (2 * g):
            continue  # a tile must hold whole gate/up pairs
        for cm, cn in ((1, 1), (2, 1), (1, 2)):
            out.append(default_config(op, tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn))
    return out


@functools.lru_cache(maxsize=64)
def _built(cfg, ab: str, max_clusters: int):
    from aotpack.kernels.cutedsl.build import compile_gemm

    return compile_gemm(cfg, ab, max_clusters=max_clusters)


def max_clusters(cfg, target: Target) -> int:
    return target.sm_count // (cfg.cluster_m * cfg.cluster_n)


def check_op(op: GemmOp) -> None:
    why = supports(op)
    if why is not None:
        raise ValueError(f"cutedsl gemm cannot run this op: {why}")


def config_for(op: GemmOp, target: Target = SM90):
    """Heuristic config without tuning data (same role as the Triton template's)."""
    return default_config(op)


def compile_config(op: GemmOp, cfg, target: Target = SM90) -> list[Launch]:
    """Launches of `op` compiled with exactly `cfg` (a gemm.GemmConfig from candidates())."""
    return compile(op, target, cfg)


def compile(op: GemmOp, target: Target = SM90, cfg=None) -> list[Launch]:
    check_op(op)
    cfg = cfg or config_for(op, target)
    built = _built(cfg, _DT[op.a.dtype], max_clusters(cfg, target))
    if built.smem > target.smem_limit:
        raise ValueError(f"{built.entry}: {built.smem} B of shared memory > {target.smem_limit}")
    kernel = CompiledKernel(
        entry=built.entry, cubin=built.cubin, block=built.block, smem=built.smem,
        cluster=built.cluster, backend="cutedsl",
        fused_ops=("linear",) + (("swiglu",) if cfg.swiglu_group else ()) + cfg.epilogue,
        config=dict(tile_m=cfg.tile_m, tile_n=cfg.tile_n, tile_k=64, cluster_m=cfg.cluster_m,
                    cluster_n=cfg.cluster_n, ab_stage=built.ab_stage,
                    raster_along_m=cfg.raster_along_m,
                    **({"swiglu_group": cfg.swiglu_group} if cfg.swiglu_group else {})))
    slots = param_slots(op, cfg, built)
    return [Launch(kernel, grid(op, cfg, target), tuple(slots))]


def grid(op: GemmOp, cfg, target: Target) -> tuple:
    cm, cn = _clusters(op, cfg)
    return (cfg.cluster_m, cfg.cluster_n, sym_min(cm * cn, max_clusters(cfg, target)))


def _tiles(op: GemmOp, cfg) -> tuple:
    m, n = op.out.shape
    return cdiv(m, cfg.tile_m), cdiv(n, cfg.out_tile_n)  # = B's rows / tile_n with SwiGLU


def _clusters(op: GemmOp, cfg) -> tuple:
    tm, tn = _tiles(op, cfg)
    return cdiv(tm, cfg.cluster_m), cdiv(tn, cfg.cluster_n)


def param_slots(op: GemmOp, cfg, built) -> list:
    m, n = op.out.shape
    k = op.a.shape[1]
    tma = {name: _tma_geometry(name, cfg, built) for name in ("a", "b", "c")}
    slots = [
        _tmap(op.a, *tma["a"]), i32_pair(m, k),
        _tmap(op.b, *tma["b"]), i32_pair(op.b.shape[0], k),
        _tmap(op.out, *tma["c"]), i32_pair(m, n),
    ]
    operands = epilogue_operands(op.epilogue)
    ptrs = [PtrSlot(t.storage, t.offset * t.dtype.nbytes) for t in operands]
    lds = [IntSlot("i32", t.strides[0] if len(t.shape) == 2 else 0) for t in operands]
    slots += ptrs + [NullSlot()] * (3 - len(ptrs))
    slots += lds + [IntSlot("i32", 0)] * (3 - len(lds))
    slots += _scheduler_slots(op, cfg) * 2
    _check_sizes(slots, built)
    return slots


def _scheduler_slots(op: GemmOp, cfg) -> list:
    tm, tn = _tiles(op, cfg)
    cm, cn = _clusters(op, cfg)
    first, second = (cm, cn) if cfg.raster_along_m else (cn, cm)
    if cfg.swizzle != 1:
        raise NotImplementedError("scheduler swizzle > 1 changes the parameter list; not mapped")
    return [IntSlot("i32", tm), IntSlot("i32", tn), FastDivmodSlot(first), FastDivmodSlot(second)]


def _tma_geometry(name: str, cfg, built) -> tuple[tuple[int, int], str]:
    """(box outermost-first, swizzle) of descriptor `name`, from what CuTeDSL traced."""
    atom_type, smem_layout = built.tma[name]
    g = re.search(r'tma_gbasis = <"\((\d+),(\d+)\):\(1@1,1@0\)">', atom_type)
    s = re.match(r"S<(\d),(\d),(\d)>", smem_layout)
    if g is None or s is None:
        raise RuntimeError(f"unexpected TMA atom for {name}: {atom_type} / {smem_layout}")
    inner, outer = int(g.group(1)), int(g.group(2))
    # A multicast load brings 1/cluster of the tile into each CTA of the cluster.
    mcast = {"a": cfg.cluster_n, "b": cfg.cluster_m, "c": 1}[name]
    swizzle = {0: "none", 1: "32B", 2: "64B", 3: "128B"}[int(s.group(1))]
    return (outer // mcast, inner), swizzle


def _tmap(t: TensorArg, box: tuple[int, int], swizzle: str) -> TensorMapSlot:
    return TensorMapSlot(storage=t.storage, offset=t.offset * t.dtype.nbytes, dtype=t.dtype,
                         dims=tuple(t.shape), strides=tuple(t.strides), box=box,
                         swizzle=swizzle, l2="256B", oob="zero")


def _check_sizes(slots: list, built) -> None:
    """The slot list must match the cubin's parameter list one to one, size for size."""
    if len(slots) != len(built.params):
        raise RuntimeError(f"{built.entry}: {len(slots)} slots for {len(built.params)} parameters")
    for s, p in zip(slots, built.params):
        size = (128 if isinstance(s, TensorMapSlot) else 8 if isinstance(s, (PtrSlot, NullSlot))
                else 12 if isinstance(s, FastDivmodSlot) else _INT_BYTES[s.kind])
        if size != p.size:
            raise RuntimeError(f"{built.entry}: parameter {p.index} is {p.size} B, "
                               f"slot {s} is {size} B")
