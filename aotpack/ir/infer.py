"""Type rules: the dtype and shape each op produces from its inputs and attrs.

`infer(op, input_types, attrs)` returns the output TensorType or raises TypeError with the
reason. Graph.verify compares every node's declared output against it.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.ops import Op
from aotpack.ir import sym
from aotpack.ir.sym import decided
from aotpack.ir.types import Shape, broadcast_shapes, numel, promote


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: Shape


def infer(op: Op, ins: list[TensorType], attrs) -> TensorType:
    rule = _RULES.get(op)
    if rule is None:
        raise TypeError(f"no type rule for {op.value}")
    return rule(ins, attrs)


def _arity(ins, lo, hi=None):
    hi = lo if hi is None else hi
    if not lo <= len(ins) <= hi:
        raise TypeError(f"expected {lo}..{hi} inputs, got {len(ins)}")


def _binary(op: Op):
    def rule(ins, a: O.BinaryAttrs):
        if a.scalar is not None:
            _arity(ins, 1)
            dt = ins[0].dtype
            if not dt.is_float:  # torch: an int scalar keeps integers (bool -> int64), a
                # float one and true division give float32
                keep = isinstance(a.scalar, int) and op != Op.DIV
                dt = (DType.I64 if dt == DType.BOOL else dt) if keep else DType.F32
            return TensorType(dt, ins[0].shape)
        _arity(ins, 2)
        dt = _promote_operands(ins[0], ins[1])
        if op == Op.DIV and not dt.is_float:
            dt = DType.F32
        return TensorType(dt, broadcast_shapes(ins[0].shape, ins[1].shape))
    return rule


def _promote_operands(a: TensorType, b: TensorType):
    """torch's rule: a 0-d tensor only decides the dtype when it is of a higher category
    (float vs integer) than the other operand."""
    for zero_d, other in ((a, b), (b, a)):
        if len(zero_d.shape) == 0 and len(other.shape) > 0 \
                and zero_d.dtype.is_float == other.dtype.is_float:
            return other.dtype
    return promote(a.dtype, b.dtype)


def _unary(ins, a):
    _arity(ins, 1)
    return ins[0]


def _compare(ins, a: O.BinaryAttrs):
    """Comparisons and logic: bool, of the operands' broadcast shape."""
    _arity(ins, 1 if a.scalar is not None else 2)
    return TensorType(DType.BOOL, broadcast_shapes(*(t.shape for t in ins)))


def _cumsum(ins, a: O.ScanAttrs):
    _arity(ins, 1)
    if not 0 <= a.dim < max(len(ins[0].shape), 1):
        raise TypeError(f"cumsum: dim {a.dim} of a {len(ins[0].shape)}-D tensor")
    return TensorType(a.dtype, ins[0].shape)


def _topk(ins, a: O.TopkAttrs):
    _arity(ins, 1)
    x = ins[0]
    if not x.shape or not isinstance(x.shape[-1], int) or not 1 <= a.k <= x.shape[-1]:
        raise TypeError(f"topk: k={a.k} of a last dim of {x.shape[-1:] or 'none'}")
    return TensorType(DType.I64 if a.indices else x.dtype, tuple(x.shape[:-1]) + (a.k,))


def _sort(ins, a: O.SortAttrs):
    _arity(ins, 1)
    if not ins[0].shape:
        raise TypeError("sort: a 0-d tensor (along its last dim: 1-D at least)")
    return TensorType(DType.I64 if a.indices else ins[0].dtype, ins[0].shape)


def _histc(ins, a: O.HistcAttrs):
    _arity(ins, 1)
    if a.bins < 1 or not a.lo < a.hi:
        raise TypeError(f"histc: {a.bins} bins over [{a.lo}, {a.hi}]")
    return TensorType(ins[0].dtype if ins[0].dtype.is_float else DType.F32, (a.bins,))


def _inverse_perm(ins, a):
    _arity(ins, 1)
    if len(ins[0].shape) != 1 or ins[0].dtype not in (DType.I64, DType.I32):
        raise TypeError(f"inverse_perm: {ins[0].dtype.value}{list(ins[0].shape)} (1-D ints)")
    return TensorType(DType.I64, ins[0].shape)


def _scatter_rows(ins, a):
    _arity(ins, 3)
    table, rows, values = ins
    if len(table.shape) != 2 or len(rows.shape) != 1 or len(values.shape) != 2:
        raise TypeError(f"scatter_rows: table {list(table.shape)}, rows {list(rows.shape)}, "
                        f"values {list(values.shape)} (expected [N, C], [R], [R, C])")
    if rows.dtype not in (DType.I64, DType.I32):
        raise TypeError(f"scatter_rows: rows are {rows.dtype.value}, not integers")
    if values.dtype != table.dtype:
        raise TypeError(f"scatter_rows: values {values.dtype.value} into {table.dtype.value}")
    if a.reduce not in O.SCATTER_REDUCES:
        raise TypeError(f"scatter_rows: reduce={a.reduce!r}")
    if a.reduce != "none" and table.dtype not in (DType.F32, DType.I32, DType.I64):
        raise TypeError(f"scatter_rows: reduce={a.reduce!r} of {table.dtype.value} (the "
                        f"atomics take f32, int32 and int64)")
    return TensorType(table.dtype, table.shape)


def _grouped_mm(ins, a):
    _arity(ins, 3)
    x, w, offs = ins
    if len(x.shape) != 2 or len(w.shape) != 3 or x.shape[1] != w.shape[1]:
        raise TypeError(f"grouped_mm: a {x.shape} @ b {w.shape} (a [T, K], b [E, K, N])")
    if tuple(offs.shape) != (w.shape[0],) or offs.dtype not in (DType.I32, DType.I64):
        raise TypeError(f"grouped_mm: offsets {offs.dtype.value}{list(offs.shape)}, not "
                        f"[{w.shape[0]}] integers")
    n, g = w.shape[2], a.swiglu_group
    if g and (not isinstance(n, int) or n % (2 * g)):
        raise TypeError(f"grouped_mm: SwiGLU of {n} columns in gate/up blocks of {g}")
    return TensorType(promote(x.dtype, w.dtype), (x.shape[0], n // 2 if g else n))


def _not(ins, a):
    _arity(ins, 1)
    return TensorType(DType.BOOL, ins[0].shape)


def _where(ins, a):
    _arity(ins, 3)
    if ins[0].dtype != DType.BOOL:
        raise TypeError(f"where: condition of {ins[0].dtype.value}, not bool")
    return TensorType(_promote_operands(ins[1], ins[2]),
                      broadcast_shapes(ins[0].shape, ins[1].shape, ins[2].shape))


def _cast(ins, a: O.CastAttrs):
    _arity(ins, 1)
    return TensorType(a.dtype, ins[0].shape)


def _linear(ins, a):
    _arity(ins, 2, 3)
    x, w = ins[0], ins[1]
    if len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        raise TypeError(f"linear: x {x.shape} does not match weight {w.shape}")
    if len(ins) == 3 and tuple(ins[2].shape) != (w.shape[0],):
        raise TypeError(f"linear: bias {ins[2].shape} is not [{w.shape[0]}]")
    return TensorType(x.dtype, tuple(x.shape[:-1]) + (w.shape[0],))


def _matmul(ins, a):
    _arity(ins, 2)
    x, y = ins
    if len(x.shape) < 2 or len(y.shape) < 2 or x.shape[-1] != y.shape[-2]:
        raise TypeError(f"matmul: {x.shape} @ {y.shape}")
    batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    return TensorType(promote(x.dtype, y.dtype), tuple(batch) + (x.shape[-2], y.shape[-1]))


def _embedding(ins, a):
    _arity(ins, 2)
    table, ids = ins
    if len(table.shape) != 2:
        raise TypeError(f"embedding: table {table.shape} is not [V, D]")
    if ids.dtype.is_float or ids.dtype == DType.BOOL:
        raise TypeError(f"embedding: ids are {ids.dtype.value}, not integers")
    return TensorType(table.dtype, tuple(ids.shape) + (table.shape[1],))


def _argmax(ins, a: O.ReduceAttrs):
    if len(a.dims) != 1:
        raise TypeError(f"argmax over dims {a.dims}: one dim")
    return TensorType(DType.I64, _reduce(ins, a).shape)


def _reduce(ins, a: O.ReduceAttrs):
    _arity(ins, 1)
    dims = ins[0].shape
    if a.keepdim:
        return TensorType(ins[0].dtype, tuple(1 if i in a.dims else d for i, d in enumerate(dims)))
    return TensorType(ins[0].dtype, tuple(d for i, d in enumerate(dims) if i not in a.dims))


def _norm(ins, a):
    _arity(ins, 1, 3)
    for extra in ins[1:]:
        if tuple(extra.shape) != tuple(ins[0].shape[-a.ndim:]):
            raise TypeError(f"norm: affine {extra.shape} does not match {ins[0].shape}")
    return ins[0]


def _sdpa(ins, a: O.SdpaAttrs):
    """(q, k, v [, mask [, bias]]): the mask, bool (True: seen) or floating (added to the
    scaled scores), and the bias (floating, added too), broadcast to [B, Hq, S, T]."""
    _arity(ins, 3, 5)
    q, k, v = ins[:3]
    if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise TypeError("sdpa: q, k, v must be 4-D [B, H, S, D]")
    if k.shape[1] != q.shape[1] and (not a.gqa or q.shape[1] % k.shape[1]):
        raise TypeError(f"sdpa: {q.shape[1]} query heads vs {k.shape[1]} kv heads")
    if len(ins) == 5 and a.positions:
        raise TypeError("sdpa: positions take no bias")
    if len(ins) == 4 and a.positions:
        if ins[3].dtype not in (DType.I64, DType.I32) or len(ins[3].shape) != 2:
            raise TypeError(f"sdpa: positions {ins[3].dtype.value}{list(ins[3].shape)} are "
                            f"not integers [B, S]")
    elif len(ins) >= 4:
        scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        for what, t in zip(("mask", "bias"), ins[3:]):
            if len(t.shape) > 4 or broadcast_shapes(t.shape, scores) != scores:
                raise TypeError(f"sdpa: {what} {t.shape} does not broadcast to {scores}")
        if ins[3].dtype != DType.BOOL and not ins[3].dtype.is_float:
            raise TypeError(f"sdpa: mask of {ins[3].dtype.value} (bool or floating only)")
        if len(ins) == 5 and not ins[4].dtype.is_float:
            raise TypeError(f"sdpa: bias of {ins[4].dtype.value} (floating only)")
    return TensorType(q.dtype, tuple(q.shape[:-1]) + (v.shape[-1],))


def _rope(ins, a: O.RopeAttrs):
    _arity(ins, 3)
    x = ins[0]
    rot = x.shape[:-1] + (a.rotary_dim if a.rotary_dim is not None else x.shape[-1],)
    broadcast_shapes(rot, ins[1].shape, ins[2].shape)  # the tables span the rotated dims
    dtype = a.dtype or promote(promote(x.dtype, ins[1].dtype), ins[2].dtype)
    return TensorType(dtype, x.shape)


def _swiglu(ins, a: O.SwiGLUAttrs):
    _arity(ins, 1)
    x = ins[0]
    n = x.shape[-1] if x.shape else None
    if not isinstance(n, int) or a.group <= 0 or n % (2 * a.group):
        raise TypeError(f"swiglu: last dim {n} is not a multiple of 2 * group ({a.group})")
    return TensorType(x.dtype, tuple(x.shape[:-1]) + (n // 2,))


def conv_out_size(size, pad: tuple[int, int], kernel: int, stride: int, dilation: int = 1):
    """Output length of a convolution/pool window along one dim (torch's floor rule)."""
    return (size + pad[0] + pad[1] - dilation * (kernel - 1) - 1) // stride + 1


def pool_out_size(size, pad: int, kernel: int, stride: int, ceil_mode: bool):
    """torch's pooling output length: with ceil_mode a partial last window counts, unless it
    would start inside the right padding."""
    if not ceil_mode:
        return conv_out_size(size, (pad, pad), kernel, stride)
    if isinstance(size, int):
        out = -(-(size + 2 * pad - kernel) // stride) + 1
        return out - 1 if (out - 1) * stride >= size + pad else out
    # A dynamic size: the windows' count less the one that would start in the right padding.
    # With c = ceil((size + 2p - k) / s), c * s = size + 2p - k + r, r = (k - 2p - size) mod s
    # in [0, s): the last window starts there when r >= k - p, never when k - p >= s (a 3x3
    # pool of stride 2, SqueezeNet's and GoogLeNet's, unpadded or not)
    windows = sym.cdiv(size + 2 * pad - kernel, stride) + 1
    if kernel - pad >= stride:
        return windows
    r = sym.mod(kernel - 2 * pad - size, stride)
    return windows - sym.sym_min(1, sym.sym_max(0, r - (kernel - pad) + 1))


def _conv(ins, a: O.ConvAttrs):
    _arity(ins, 2)
    x, w = ins
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise TypeError(f"conv: x {x.shape} must be [N, H, W, C], w {w.shape} [OC, C/g, KH, KW]")
    n, h, wd, c = x.shape
    oc, cg, kh, kw = w.shape
    if a.groups < 1 or c != cg * a.groups or oc % a.groups:
        raise TypeError(f"conv: {c} input channels, weight {w.shape}, groups {a.groups}")
    oh = conv_out_size(h, a.padding[0], kh, a.stride[0], a.dilation[0])
    ow = conv_out_size(wd, a.padding[1], kw, a.stride[1], a.dilation[1])
    if (isinstance(oh, int) and oh <= 0) or (isinstance(ow, int) and ow <= 0):
        raise TypeError(f"conv: kernel {kh}x{kw} does not fit the padded {h}x{wd} input")
    return TensorType(x.dtype, (n, oh, ow, oc))


def _pool(ins, a: O.PoolAttrs):
    _arity(ins, 1)
    x = ins[0]
    if len(x.shape) != 4 or a.kind not in O.POOL_KINDS:
        raise TypeError(f"pool: {a.kind} over {x.shape} (want max/avg over [N, H, W, C])")
    n, h, w, c = x.shape
    oh = pool_out_size(h, a.padding[0], a.kernel[0], a.stride[0], a.ceil_mode)
    ow = pool_out_size(w, a.padding[1], a.kernel[1], a.stride[1], a.ceil_mode)
    return TensorType(x.dtype, (n, oh, ow, c))


def _view(ins, a: O.ViewAttrs):
    _arity(ins, 1)
    if numel(a.shape) != numel(ins[0].shape):
        raise TypeError(f"view {ins[0].shape} -> {a.shape} changes the element count")
    return TensorType(ins[0].dtype, a.shape)


def _permute(ins, a: O.PermuteAttrs):
    _arity(ins, 1)
    if sorted(a.dims) != list(range(len(ins[0].shape))):
        raise TypeError(f"permute dims {a.dims} for rank {len(ins[0].shape)}")
    return TensorType(ins[0].dtype, tuple(ins[0].shape[d] for d in a.dims))


def _slice(ins, a: O.SliceAttrs):
    _arity(ins, 1)
    shape = list(ins[0].shape)
    if not 0 <= a.start <= a.end <= shape[a.dim]:
        raise TypeError(f"slice {a} out of range for {shape}")
    shape[a.dim] = (a.end - a.start + a.step - 1) // a.step
    return TensorType(ins[0].dtype, tuple(shape))


def _select(ins, a: O.SelectAttrs):
    _arity(ins, 1)
    shape = list(ins[0].shape)
    del shape[a.dim]
    return TensorType(ins[0].dtype, tuple(shape))


def _expand(ins, a: O.ExpandAttrs):
    _arity(ins, 1)
    src = ins[0].shape
    if broadcast_shapes(src, a.shape) != tuple(a.shape):
        raise TypeError(f"cannot expand {src} to {a.shape}")
    return TensorType(ins[0].dtype, a.shape)


def _unsqueeze(ins, a: O.DimAttrs):
    _arity(ins, 1)
    shape = list(ins[0].shape)
    shape.insert(a.dims[0], 1)
    return TensorType(ins[0].dtype, tuple(shape))


def _squeeze(ins, a: O.DimAttrs):
    _arity(ins, 1)
    shape = [d for i, d in enumerate(ins[0].shape) if not (i in a.dims and d == 1)]
    return TensorType(ins[0].dtype, tuple(shape))


def _cat(ins, a: O.DimAttrs):
    if not ins:
        raise TypeError("cat of nothing")
    dim = a.dims[0]
    base = list(ins[0].shape)
    for t in ins[1:]:
        if len(t.shape) != len(base) or any(
                t.shape[i] != base[i] for i in range(len(base)) if i != dim):
            raise TypeError(f"cat: {t.shape} does not match {ins[0].shape} outside dim {dim}")
    base[dim] = sum(t.shape[dim] for t in ins)
    dtype = ins[0].dtype
    for t in ins[1:]:
        dtype = promote(dtype, t.dtype)
    return TensorType(dtype, tuple(base))


def _as_strided(ins, a: O.StridedAttrs):
    _arity(ins, 1)
    if len(a.shape) != len(a.strides):
        raise TypeError("as_strided: shape and strides differ in rank")
    last = a.offset + sum((d - 1) * s for d, s in zip(a.shape, a.strides) if d > 0)
    # a bound the ranges cannot decide is not taken for a fault (the probes check the values)
    if numel(a.shape) and decided(lambda: a.offset < 0 or last >= numel(ins[0].shape), False):
        raise TypeError(f"as_strided {a} reads outside its input of {numel(ins[0].shape)}")
    return TensorType(ins[0].dtype, a.shape)


_RULES = {
    **{op: _binary(op) for op in O.BINARY}, **{op: _unary for op in O.UNARY},
    **{op: _compare for op in O.COMPARE + O.LOGIC}, Op.NOT: _not, Op.WHERE: _where,
    Op.CUMSUM: _cumsum, Op.TOPK: _topk, Op.SORT: _sort, Op.HISTC: _histc,
    Op.INVERSE_PERM: _inverse_perm, Op.GROUPED_MM: _grouped_mm,
    Op.SCATTER_ROWS: _scatter_rows,
    Op.CAST: _cast, Op.LINEAR: _linear, Op.MATMUL: _matmul, Op.EMBEDDING: _embedding,
    Op.MEAN: _reduce, Op.SUM: _reduce,
    Op.AMAX: _reduce, Op.AMIN: _reduce, Op.ARGMAX: _argmax,
    Op.SOFTMAX: _unary, Op.LOG_SOFTMAX: _unary, Op.RMS_NORM: _norm, Op.LAYER_NORM: _norm,
    Op.SDPA: _sdpa,
    Op.ROPE: _rope, Op.SWIGLU: _swiglu, Op.VIEW: _view, Op.PERMUTE: _permute, Op.SLICE: _slice,
    Op.SELECT: _select, Op.EXPAND: _expand, Op.UNSQUEEZE: _unsqueeze, Op.SQUEEZE: _squeeze,
    Op.CAT: _cat, Op.COPY: _unary, Op.AS_STRIDED: _as_strided, Op.CONV: _conv, Op.POOL: _pool,
}
