"""TensorArg helpers of the lowering: the views kernels read their operands through (2-D
rows, broadcasts, RoPE tables, 1-D weights) and the permutation a kernel writes a copy's
layout in. Split from lower.py, which imports them.
"""
from __future__ import annotations

from collections import Counter

from aotpack.ir import ops as O
from aotpack.kernels.spec import TensorArg


def _rope_table(t: TensorArg) -> TensorArg:
    """[S, D] (leading 1s dropped), or [B, S, D] from a per-sequence [B, 1, S, D] table."""
    if len(t.shape) == 4 and t.shape[1] == 1 and t.shape[0] != 1:
        return TensorArg(t.storage, t.dtype, (t.shape[0],) + tuple(t.shape[2:]),
                         (t.strides[0],) + tuple(t.strides[2:]), t.offset)
    return _drop_leading_ones(t)


def _flatten_2d(arg: TensorArg) -> TensorArg | None:
    """[d0, ..., dn-1, K] → [M, K] if the leading dims merge into one stride, else None."""
    if len(arg.shape) == 1:
        return TensorArg(arg.storage, arg.dtype, (1, arg.shape[0]),
                         (arg.shape[0] * arg.strides[0], arg.strides[0]), arg.offset)
    lead = [(d, s) for d, s in zip(arg.shape[:-1], arg.strides[:-1]) if d != 1]
    m = 1
    for d, _ in lead:
        m *= d
    for (d0, s0), (d1, s1) in zip(lead, lead[1:]):
        if s0 != s1 * d1:
            return None
    row = lead[-1][1] if lead else arg.shape[-1] * arg.strides[-1]
    return TensorArg(arg.storage, arg.dtype, (m, arg.shape[-1]), (row, arg.strides[-1]),
                     arg.offset)


def broadcast_to(arg: TensorArg, shape: tuple) -> TensorArg:
    """`arg` seen as `shape` (numpy broadcasting): new leading dims and size-1 dims that
    repeat get stride 0."""
    pad = len(shape) - len(arg.shape)
    sizes, strides = (1,) * pad + tuple(arg.shape), (0,) * pad + tuple(arg.strides)
    new = tuple(0 if n == 1 and want != 1 else st for n, st, want in zip(sizes, strides, shape))
    return TensorArg(arg.storage, arg.dtype, tuple(shape), new, arg.offset)


def _drop_leading_ones(arg: TensorArg, keep: int = 2) -> TensorArg:
    """`arg` without its leading size-1 dims, down to `keep` dims at least."""
    shape, strides = list(arg.shape), list(arg.strides)
    while len(shape) > keep and shape[0] == 1:
        shape.pop(0)
        strides.pop(0)
    return TensorArg(arg.storage, arg.dtype, tuple(shape), tuple(strides), arg.offset)


def _as_1d(arg: TensorArg) -> TensorArg:
    return _drop_leading_ones(arg, keep=1)


def _inverse_permutation(attrs: O.StridedAttrs, src_shape) -> tuple[int, ...] | None:
    """If the view is a pure permutation of src's contiguous layout, the strides that write src
    into the contiguous layout of the view; else None."""
    from aotpack.ir.types import contiguous_strides

    src_strides = contiguous_strides(src_shape)

    def sizes(shape):  # dims of size 1 hold no data (a Conv1d's H = 1)
        return Counter(d for d in shape if d != 1)

    if attrs.offset != 0 or sizes(attrs.shape) != sizes(src_shape):
        return None
    view_strides = contiguous_strides(attrs.shape)
    out = [0] * len(src_shape)
    used = set()
    for k, (size, stride) in enumerate(zip(attrs.shape, attrs.strides)):
        if size == 1:
            continue
        dims = [m for m in range(len(src_shape)) if src_strides[m] == stride
                and src_shape[m] == size and m not in used]
        if not dims:
            return None
        used.add(dims[0])
        out[dims[0]] = view_strides[k]
    return tuple(out)
