"""Strided-view algebra shared by the passes.

A `View` says where each element of a value lives in the contiguous layout of a *base* value:
element i is base flat element `offset + sum(i_k * strides[k])`. Layout ops become views
(`layout_view`), views compose (`compose`), and a composition that is not a strided view (e.g.
merging dims of a transposed tensor) returns None: the caller materializes a copy.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.ir import ops as O
from aotpack.ir.ops import Op
from aotpack.ir.sym import Dim, decided, is_symbolic, term_quotient
from aotpack.ir.types import contiguous_strides, numel


@dataclass(frozen=True)
class View:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0

    @staticmethod
    def contiguous(shape) -> "View":
        return View(tuple(shape), contiguous_strides(tuple(shape)), 0)

    def is_identity_of(self, shape) -> bool:
        return self == View.contiguous(shape)


def is_reshape(attrs: O.StridedAttrs, src_shape) -> bool:
    """The strided view reads every element of its (contiguous) source in order: a reshape."""
    view = View(tuple(attrs.shape), tuple(attrs.strides), attrs.offset)
    return view.is_identity_of(attrs.shape) and numel(attrs.shape) == numel(src_shape)


def normalized(view: View) -> View:
    """The same view with a canonical stride for every size-1 dim (the extent of the dims
    inside it), so that equal views compare equal and no kernel sees a made-up 0 stride."""
    strides = list(view.strides)
    for i, size in enumerate(view.shape):
        if size == 1:
            inner = [view.shape[j] * view.strides[j] for j in range(i + 1, len(view.shape))
                     if view.shape[j] != 1]
            # any stride is right for a size-1 dim; the largest extent when the ranges order
            # them, else the innermost one's (symbolic extents may not be comparable)
            strides[i] = decided(lambda: max(inner, default=1), inner[-1] if inner else 1)
    return View(view.shape, tuple(strides), view.offset)


def layout_view(op: Op, attrs, in_shape: tuple[int, ...]) -> View:
    """The layout op `op` as a view over the contiguous layout of its input."""
    base = View.contiguous(in_shape)
    shape, strides = list(base.shape), list(base.strides)
    if op == Op.VIEW:
        return View.contiguous(attrs.shape)
    if op == Op.PERMUTE:
        return View(tuple(shape[d] for d in attrs.dims), tuple(strides[d] for d in attrs.dims))
    if op == Op.SLICE:
        d = attrs.dim
        size = (attrs.end - attrs.start + attrs.step - 1) // attrs.step
        offset = attrs.start * strides[d]
        shape[d], strides[d] = size, strides[d] * attrs.step
        return View(tuple(shape), tuple(strides), offset)
    if op == Op.SELECT:
        offset = attrs.index * strides[attrs.dim]
        del shape[attrs.dim], strides[attrs.dim]
        return View(tuple(shape), tuple(strides), offset)
    if op == Op.EXPAND:
        lead = len(attrs.shape) - len(shape)
        new_strides = [0] * lead + [0 if s == 1 and n != 1 else st for s, n, st in
                                    zip(shape, attrs.shape[lead:], strides)]
        return View(tuple(attrs.shape), tuple(new_strides))
    if op == Op.UNSQUEEZE:
        d = attrs.dims[0]
        shape.insert(d, 1)
        strides.insert(d, strides[d] * shape[d + 1] if d < len(strides) else 1)
        return View(tuple(shape), tuple(strides))
    if op == Op.SQUEEZE:
        keep = [i for i in range(len(shape)) if not (i in attrs.dims and shape[i] == 1)]
        return View(tuple(shape[i] for i in keep), tuple(strides[i] for i in keep))
    if op == Op.AS_STRIDED:
        return View(attrs.shape, attrs.strides, attrs.offset)
    raise ValueError(f"{op.value} is not a layout op")


def _digits(flat: Dim, shape: tuple) -> list | None:
    """Mixed-radix digits of a flat index in the contiguous layout of `shape`; None when a
    symbolic index has no digit decomposition valid for every value of its dims."""
    if not is_symbolic(flat) and all(not is_symbolic(d) for d in shape):
        out = []
        for d in reversed(shape):
            d = max(d, 1)
            out.append(flat % d)
            flat //= d
        return list(reversed(out))
    # Symbolic: each term goes to the outermost dim whose contiguous stride divides it exactly;
    # compose's range check refuses a split that does not hold for every value of the dims
    # (e.g. an offset of 64 along a dim of size S, which is 1 when S is)
    out = []
    for c in contiguous_strides(shape):
        q = term_quotient(flat, c)
        out.append(q)
        flat = flat - q * c
    if flat != 0 or not all(decided(lambda: q >= 0, False) for q in out):
        return None
    return out  # compose checks that offset + steps stay inside each dim


def compose(inner: View, outer: View) -> View | None:
    """`outer` (a view over the contiguous layout of a value whose own layout is `inner`) as a
    view over inner's base, or None when that is not a strided view.

    Each outer stride is written as a digit vector of inner's shape; if the offset plus every
    dimension's largest step stays inside inner's shape digit-wise, no index ever carries from
    one inner dimension into the next, so the map is linear (a strided view). With symbolic
    dims every step of that must hold for all values of the dims, or the answer is None (the
    caller copies)."""
    if decided(lambda: numel(outer.shape) == 0, False):
        return View(outer.shape, (0,) * len(outer.shape), inner.offset)
    if inner.is_identity_of(inner.shape) and inner.offset == 0:
        return normalized(outer)
    if outer.is_identity_of(outer.shape) and decided(
            lambda: numel(outer.shape) == numel(inner.shape), False):
        strides = reshape_strides(inner.shape, inner.strides, outer.shape)
        if strides is not None:  # a reshape that merges/splits dims whose strides allow it
            return normalized(View(outer.shape, strides, inner.offset))
    high = _digits(outer.offset, inner.shape)
    if high is None:
        return None
    steps = []
    for size, stride in zip(outer.shape, outer.strides):
        big = decided(lambda: size > 1, True)
        if big and decided(lambda: stride >= numel(inner.shape), False):
            return None  # (symbolic: the digit check below decides)
        d = _digits(stride, inner.shape) if big else [0] * len(inner.shape)
        if d is None:
            return None
        steps.append(d)
        high = [h + (size - 1) * x for h, x in zip(high, d)]
    if not all(decided(lambda: h < max(n, 1), False) for h, n in zip(high, inner.shape)):
        return None
    base_off = sum(o * s for o, s in zip(_digits(outer.offset, inner.shape), inner.strides))
    strides = tuple(sum(x * s for x, s in zip(d, inner.strides)) for d in steps)
    return normalized(View(outer.shape, strides, inner.offset + base_off))


def reshape_strides(shape: tuple, strides: tuple, new_shape: tuple) -> tuple | None:
    """Strides for viewing a strided tensor (shape, strides) as new_shape without a copy, or
    None: each run of dims merged or split must be contiguous within itself (torch's view
    rule). Symbolic sizes must decide every comparison."""
    new = [0] * len(new_shape)
    if not shape:
        return tuple(1 for _ in new_shape) if all(d == 1 for d in new_shape) else None
    view_d = len(new_shape) - 1
    base = strides[-1]
    tensor_n = view_n = 1
    for d in reversed(range(len(shape))):
        tensor_n = tensor_n * shape[d]
        chunk_ends = d == 0 or (not decided(lambda: shape[d - 1] == 1, False)
                                and strides[d - 1] != tensor_n * base)
        if not chunk_ends:
            continue
        while view_d >= 0:
            less = decided(lambda: view_n < tensor_n, None)
            if less is None:  # e.g. 1 < B*S: growing is right when this dim ends the chunk
                if not decided(lambda: view_n * new_shape[view_d] == tensor_n, False):
                    return None
                less = True
            # a dim that may be 1 at run time takes any stride: treat it as a real dim
            if not (less or decided(lambda: new_shape[view_d] == 1, False)):
                break
            new[view_d] = view_n * base
            view_n = view_n * new_shape[view_d]
            view_d -= 1
        if not decided(lambda: view_n == tensor_n, False):
            return None
        if d > 0:
            base, tensor_n, view_n = strides[d - 1], 1, 1
    return tuple(new) if view_d == -1 else None


def strided_attrs(view: View) -> O.StridedAttrs:
    return O.StridedAttrs(tuple(view.shape), tuple(view.strides), view.offset)
