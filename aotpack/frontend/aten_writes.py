"""aten → IR rules for writes into slices, as functionalization exports them:

    x[..., a:b] = y          slice_scatter(x, y, dim, a, b)
    x[..., i] = y            select_scatter(x, y, dim, i)
    x[..., a:b].copy_(y)     slice_scatter(x, copy(slice(x, ...), y), dim, a, b)

Into a computed tensor, a write is a concatenation of the slices it keeps around the new part
(one copy kernel). Into torch.empty (DeepSeek-V3's keys: `k = kv.new_empty(...)`, then
`k[..., :n].copy_(k_nope)` and `k[..., n:].copy_(k_rot)`) the buffer is PartlyWritten: the
parts written so far, along one dim; the write that covers all of it makes it a concatenation
of its parts. Slicing such a buffer gives a written part (or a slice of one), or uninitialised
memory that only a write's destination (copy's first operand) may be; reading it otherwise is
refused. Writes that the one-dim bookkeeping cannot follow (F.pad's circular mode: the middle
written along two dims, then the borders copied from it) make the buffer a tensor first, its
unwritten elements zeros: torch.empty's contents are undefined, so any value is what it holds.
"""
from __future__ import annotations

from aotpack.frontend.aten_moe import Uninitialized
from aotpack.frontend.aten_table import Unsupported, _dim, _slice, _slice_attrs
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op

# the rules here take torch.empty's memory (Uninitialized) as an operand
TAKE_UNINITIALIZED = ("aten.slice.Tensor", "aten.select.int", "aten.copy.default",
                      "aten.slice_scatter.default", "aten.select_scatter.default")


class PartlyWritten(Uninitialized):
    """torch.empty(...) after writes into slices of one dim: {(start, end): Value}."""

    def __init__(self, shape, dim: int, parts: dict):
        super().__init__(shape)
        self.dim, self.parts = dim, parts


def _shape(x) -> tuple:
    return tuple(x.shape) if isinstance(x, Value) else x.shape_


def _copy(cx, dst, src, non_blocking=False):
    """copy(dst, src): src in dst's dtype, broadcast to dst's shape (dst's data is not read)."""
    if not isinstance(src, Value):
        raise Unsupported("copy from uninitialised memory (torch.empty) or a Python value")
    dtype = cx.fx_node.meta["val"].dtype
    shape = cx.out_shape()
    if src.dtype.to_torch() != dtype:
        from aotpack.dtypes import DType

        src = cx.emit(Op.CAST, [src], O.CastAttrs(DType.from_torch(dtype)),
                      final=tuple(src.shape) == shape)
    if tuple(src.shape) != shape:
        src = cx.emit(Op.EXPAND, [src], O.ExpandAttrs(shape), final=True)
    return src


def _slice_any(cx, x, dim=0, start=None, end=None, step=1):
    """A slice of a tensor, or of torch.empty's memory: a written part, else uninitialised."""
    if isinstance(x, Value):
        return _slice(cx, x, dim, start, end, step)
    attrs = _slice_attrs(_Shaped(x), dim, start, end, step)
    if isinstance(x, PartlyWritten) and x.dim == attrs.dim and step == 1:
        part = x.parts.get((attrs.start, attrs.end))
        if part is not None:
            return part
        for (lo, hi), value in x.parts.items():  # inside one written part: a slice of it
            if isinstance(attrs.start, int) and isinstance(attrs.end, int) \
                    and lo <= attrs.start and attrs.end <= hi:
                return _slice(cx, value, attrs.dim, attrs.start - lo, attrs.end - lo)
    return Uninitialized(cx.out_shape())


def _select_any(cx, x, dim, index):
    if isinstance(x, Value):
        from aotpack.frontend.aten_table import RULES

        return RULES["aten.select.int"](cx, x, dim, index)
    return Uninitialized(cx.out_shape())


class _Shaped:
    def __init__(self, x):
        self.shape = _shape(x)


def _slice_scatter(cx, base, src, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise Unsupported(f"a write into a slice of step {step}")
    if isinstance(src, PartlyWritten):
        src = _materialized(cx, src, _arg_dtype(cx, 1))
    elif not isinstance(src, Value):
        raise Unsupported("writing uninitialised memory (torch.empty) into a slice")
    attrs = _slice_attrs(_Shaped(base), dim, start, end, step)
    if isinstance(base, PartlyWritten) and base.dim != attrs.dim:  # two dims: as a tensor
        base = _materialized(cx, base, _arg_dtype(cx, 0))
    if isinstance(base, Value):
        return _into_tensor(cx, base, src, attrs)
    return _into_empty(cx, base, src, attrs)


def _arg_dtype(cx, i: int):
    from aotpack.dtypes import DType

    return DType.from_torch(cx.fx_node.args[i].meta["val"].dtype)


def _materialized(cx, x: PartlyWritten, dtype) -> Value:
    """The parts written so far, zeros between them (uninitialised memory: any value is it)."""
    from types import SimpleNamespace

    from aotpack.frontend.aten_conv import fill_block

    like = SimpleNamespace(shape=x.shape_, dtype=dtype)  # what fill_block reads of a tensor
    pieces, at, size = [], 0, x.shape_[x.dim]
    for lo, hi in sorted(x.parts) + [(size, size)]:
        if lo > at:
            pieces.append(fill_block(cx, like, x.dim, lo - at, 0.0))
        if hi > lo:
            part = x.parts[(lo, hi)]
            pieces.append(part if part.dtype == dtype else
                          cx.emit(Op.CAST, [part], O.CastAttrs(dtype)))
        at = hi
    if len(pieces) == 1:
        return cx.emit(Op.COPY, pieces, O.NoAttrs())
    return cx.emit(Op.CAT, pieces, O.DimAttrs((x.dim,)))


def _select_scatter(cx, base, src, dim, index):
    rank = len(_shape(base))
    dim = _dim(dim, rank)
    size = _shape(base)[dim]
    index = index + size if isinstance(index, int) and index < 0 else index
    src = cx.emit(Op.UNSQUEEZE, [src], O.DimAttrs((dim,)))
    return _slice_scatter(cx, base, src, dim, index, index + 1)


def _into_tensor(cx, base: Value, src: Value, attrs) -> Value:
    """base with base[attrs] replaced by src: cat(base before, src, base after)."""
    dim, size = attrs.dim, base.shape[attrs.dim]
    if src.dtype != base.dtype:
        src = cx.emit(Op.CAST, [src], O.CastAttrs(base.dtype))
    parts = []
    if not (isinstance(attrs.start, int) and attrs.start == 0):
        parts.append(cx.emit(Op.SLICE, [base], O.SliceAttrs(dim, 0, attrs.start)))
    parts.append(src)
    if not (_same(attrs.end, size)):
        parts.append(cx.emit(Op.SLICE, [base], O.SliceAttrs(dim, attrs.end, size)))
    if len(parts) == 1:
        return cx.emit(Op.COPY, parts, O.NoAttrs(), final=True)
    return cx.emit(Op.CAT, parts, O.DimAttrs((dim,)), final=True)


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _into_empty(cx, base: Uninitialized, src: Value, attrs):
    """A write into torch.empty: one more written part; all of it written, their concat."""
    shape = base.shape_
    parts = dict(base.parts) if isinstance(base, PartlyWritten) else {}
    if parts and base.dim != attrs.dim:
        raise Unsupported("writes into torch.empty along more than one dim")
    if not all(isinstance(v, int) for v in (attrs.start, attrs.end, shape[attrs.dim])):
        raise Unsupported("a write into torch.empty at a slice whose bounds vary at run time")
    for lo, hi in parts:
        if lo < attrs.end and attrs.start < hi:
            raise Unsupported("overlapping writes into torch.empty")
    parts[(attrs.start, attrs.end)] = src
    spans = sorted(parts)
    covered = spans[0][0] == 0 and spans[-1][1] == shape[attrs.dim] and all(
        a[1] == b[0] for a, b in zip(spans, spans[1:]))
    if not covered:
        return PartlyWritten(shape, attrs.dim, parts)
    values = [parts[s] for s in spans]
    if len(values) == 1:
        return cx.emit(Op.COPY, values, O.NoAttrs(), final=True)
    return cx.emit(Op.CAT, values, O.DimAttrs((attrs.dim,)), final=True)


RULES = {
    "aten.copy.default": _copy,
    "aten.slice.Tensor": _slice_any, "aten.select.int": _select_any,
    "aten.slice_scatter.default": _slice_scatter,
    "aten.select_scatter.default": _select_scatter,
}
