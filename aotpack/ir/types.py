"""Value types of the IR: a dtype and a shape.

A dimension is an `int` or a symbolic `Expr` (aotpack/ir/sym.py): a polynomial over named dims
with ranges, e.g. `B*S`. Code that needs a concrete number calls `static_shape`, which refuses
symbols with a clear message instead of silently mis-computing.
"""
from __future__ import annotations

from typing import Union

from aotpack.dtypes import DType
from aotpack.ir.sym import Expr, prod, sym_max

Dim = Union[int, Expr]
Shape = tuple[Dim, ...]


def static_shape(shape: Shape) -> tuple[int, ...]:
    for d in shape:
        if not isinstance(d, int):
            raise NotImplementedError(f"symbolic dimension {d} is not supported here "
                                      f"(shape {format_shape(shape)})")
    return tuple(shape)  # type: ignore[return-value]


def is_static(shape: Shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def numel(shape: Shape) -> Dim:
    return prod(shape)


def contiguous_strides(shape: Shape) -> tuple[Dim, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * sym_max(d, 1)
    return tuple(reversed(strides))


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy broadcasting; ValueError when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op on two tensors (torch's rules for the dtypes we support)."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if {a, b} == {DType.BF16, DType.F16}:
        return DType.F32
    if a == DType.BOOL or b == DType.BOOL:
        return b if a == DType.BOOL else a
    return a if a.nbytes >= b.nbytes else b


def format_shape(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
