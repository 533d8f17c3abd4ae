"""aten → IR rules for vector norms: `torch.linalg.vector_norm`, which `F.normalize` and
`x.norm(dim=...)` export to (SwinV2's cosine attention, normalized embeddings and qk-norms),
as reductions the reduction kernels run: sqrt(sum(x * x)) for the 2-norm, sum(|x|) for the
1-norm, amax/amin(|x|) for ±inf, (sum |x|^p)^(1/p) otherwise. A 16-bit input is reduced in
f32 and the result cast back, as torch computes it."""
from __future__ import annotations

import math

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported, _reduce_dims
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _vector_norm(cx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if not isinstance(x, Value) or not x.dtype.is_float:
        raise Unsupported("a norm of other than a floating-point tensor")
    ord = float(ord)
    if ord == 0:
        raise Unsupported("ord=0 (a count of nonzeros)")
    out_dtype = DType.from_torch(cx.fx_node.meta["val"].dtype)
    wide = x if x.dtype == DType.F32 else cx.emit(Op.CAST, [x], O.CastAttrs(DType.F32))
    attrs = O.ReduceAttrs(_reduce_dims(dim, len(x.shape)), bool(keepdim))
    if ord == 2:
        square = cx.emit(Op.MUL, [wide, wide], O.BinaryAttrs())
        norm = cx.emit(Op.SQRT, [cx.emit(Op.SUM, [square], attrs)], O.NoAttrs())
    else:
        size = cx.emit(Op.ABS, [wide], O.NoAttrs())
        if math.isinf(ord):
            norm = cx.emit(Op.AMAX if ord > 0 else Op.AMIN, [size], attrs)
        elif ord == 1:
            norm = cx.emit(Op.SUM, [size], attrs)
        else:
            powered = cx.emit(Op.POW, [size], O.BinaryAttrs(ord))
            norm = cx.emit(Op.POW, [cx.emit(Op.SUM, [powered], attrs)], O.BinaryAttrs(1 / ord))
    if norm.dtype == out_dtype:
        return cx.emit(Op.COPY, [norm], O.NoAttrs(), final=True)
    return cx.emit(Op.CAST, [norm], O.CastAttrs(out_dtype), final=True)


def _batch_stats_norm(cx, x, weight, bias, training, momentum, eps):
    """Batch norm over the input's own statistics (no running ones): InstanceNorm, which torch
    exports as this over [1, N*C, H, W], and BatchNorm(track_running_stats=False). Each
    channel (dim 1) normalized over every other dim: a LayerNorm over [C, rest] (the channel
    dim moved first when the batch is not 1), then the per-channel affine map."""
    if not isinstance(x, Value) or not x.dtype.is_float or len(x.shape) < 2:
        raise Unsupported("a batch-statistics norm of other than a float [N, C, ...] tensor")
    shape = tuple(x.shape)
    c = shape[1]
    y = x if shape[0] == 1 else cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(
        (1, 0) + tuple(range(2, len(shape)))))
    moved = tuple(y.shape)
    flat = cx.emit(Op.VIEW, [y], O.ViewAttrs((c, math.prod(moved) // c)))
    y = cx.emit(Op.LAYER_NORM, [flat], O.NormAttrs(float(eps), 1))
    y = cx.emit(Op.VIEW, [y], O.ViewAttrs(moved))
    if shape[0] != 1:
        y = cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((1, 0) + tuple(range(2, len(shape)))))
    per_channel = (c,) + (1,) * (len(shape) - 2)
    for param, op in ((weight, Op.MUL), (bias, Op.ADD)):
        if param is not None:
            y = cx.emit(op, [y, cx.emit(Op.VIEW, [param], O.ViewAttrs(per_channel))],
                        O.BinaryAttrs())
    return [y, None, None]  # (out, mean, rstd)


RULES = {"aten.linalg_vector_norm.default": _vector_norm,
         "aten._native_batch_norm_legit.no_stats": _batch_stats_norm}
