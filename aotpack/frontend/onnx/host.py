"""Evaluating ONNX nodes on the build host: every node whose inputs are all known (weights,
Constant nodes, shapes) is computed at translation time and never becomes IR.

Known values are numpy arrays. Shapes of inputs with dynamic dims hold aotpack symbolic
expressions (aotpack/ir/sym.py) in object arrays: the shape arithmetic exporters write
(Shape → Gather → Unsqueeze → Concat → Reshape, sizes multiplied or divided) is evaluated on
those, so a dynamic model still gets symbolic reshapes. Numeric values go through the onnx
package's reference implementation of the op (onnx.reference), symbolic ones through the
small set of shape ops below; anything else on a symbolic value is refused by the caller.
"""
from __future__ import annotations

import numpy as np

from aotpack.ir.sym import bounds, is_symbolic, sym_max, sym_min


class HostError(Exception):
    """A known value could not be computed here (the message says why)."""


def is_symbolic_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == object


def simplify(a: np.ndarray) -> np.ndarray:
    """An object array with no symbol left becomes int64."""
    if is_symbolic_array(a) and not any(is_symbolic(x) for x in a.flat):
        return np.array([int(x) for x in a.flat], dtype=np.int64).reshape(a.shape)
    return a


def fold(node, values: list, opset: int) -> list:
    """The node's outputs computed from known `values` (None for absent optional inputs)."""
    if any(is_symbolic_array(v) for v in values if v is not None):
        fn = SYMBOLIC.get(node.op_type)
        if fn is None:
            raise HostError(f"{node.op_type} of sizes that depend on dynamic dims")
        out = fn(node, values)
        return [simplify(np.asarray(o, dtype=object)) if np.asarray(o).dtype == object
                else np.asarray(o) for o in (out if isinstance(out, list) else [out])]
    if node.op_type in NUMERIC:
        return [np.asarray(NUMERIC[node.op_type](node, values))]
    from onnx.reference import ReferenceEvaluator

    feeds = {name: v for name, v in zip(node.input, values) if name and v is not None}
    try:
        ref = ReferenceEvaluator(node, opsets={"": opset})
        outs = ref.run(None, feeds)
    except Exception as e:  # noqa: BLE001 — the reference's own message says why
        raise HostError(f"evaluating {node.op_type} on constants failed: {type(e).__name__}: "
                        f"{e}") from None
    return [np.asarray(o) for o in outs]


# ------------------------------------------------------------------ symbolic shape ops
def _attr(node, name, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _gather(node, v):
    axis = _attr(node, "axis", 0)
    idx = np.asarray(v[1]).astype(np.int64)
    data = np.asarray(v[0], dtype=object)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take(data, idx, axis=axis)


def _unsqueeze(node, v):
    axes = _attr(node, "axes") if len(v) < 2 or v[1] is None else _ints(v[1])
    out = np.asarray(v[0], dtype=object)
    rank = out.ndim + len(axes)
    for a in sorted(x + rank if x < 0 else x for x in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(node, v):
    data = np.asarray(v[0], dtype=object)
    axes = _attr(node, "axes") if len(v) < 2 or v[1] is None else _ints(v[1])
    if axes is None:
        return data.reshape([d for d in data.shape if d != 1])
    return np.squeeze(data, axis=tuple(a % data.ndim for a in axes))


def _concat(node, v):
    return np.concatenate([np.asarray(x, dtype=object).reshape(np.shape(x)) for x in v],
                          axis=_attr(node, "axis"))


def _slice(node, v):
    data = np.asarray(v[0], dtype=object)
    starts, ends = _ints(v[1]), _ints(v[2])
    axes = _ints(v[3]) if len(v) > 3 and v[3] is not None else list(range(len(starts)))
    steps = _ints(v[4]) if len(v) > 4 and v[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % data.ndim] = slice(s, e, st)
    return data[tuple(index)]


def _reshape(node, v):
    data = np.asarray(v[0], dtype=object)
    shape = _ints(v[1])
    shape = [data.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return data.reshape(shape)


def _binary(fn):
    def run(node, v):
        a, b = (np.asarray(x, dtype=object) for x in v)
        return np.vectorize(fn, otypes=[object])(a, b) if a.size and b.size else a + b
    return run


def _div(x, y):
    if is_symbolic(x) or is_symbolic(y) or isinstance(x, (int, np.integer)):
        return x // y
    return x / y


def _equal(node, v):
    a, b = (np.asarray(x, dtype=object) for x in v)
    return np.vectorize(_same_size, otypes=[bool])(a, b)


def _same_size(x, y) -> bool:
    """x == y, decided by the ranges where a side is symbolic (a size is never -1)."""
    if not (is_symbolic(x) or is_symbolic(y)):
        return bool(x == y)
    if is_symbolic(x) and is_symbolic(y) and x == y:
        return True
    lo, hi = bounds(x - y)
    if lo > 0 or hi < 0:
        return False
    raise HostError(f"whether {x} == {y} depends on the dynamic dims")


def _where(node, v):
    return np.where(np.asarray(v[0], dtype=bool), np.asarray(v[1], dtype=object),
                    np.asarray(v[2], dtype=object))


def _identity(node, v):
    return np.asarray(v[0], dtype=object)


def _cast(node, v):
    from onnx import TensorProto

    to = _attr(node, "to")
    if to in (TensorProto.INT64, TensorProto.INT32):
        return np.asarray(v[0], dtype=object)
    raise HostError("a Cast of dynamic sizes to a non-integer type")


def _range(node, v):
    raise HostError("Range over a dynamic size (a value whose length follows a dynamic dim)")


SYMBOLIC = {
    "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Concat": _concat,
    "Slice": _slice, "Reshape": _reshape, "Identity": _identity, "Cast": _cast,
    "Add": _binary(lambda x, y: x + y), "Sub": _binary(lambda x, y: x - y),
    "Mul": _binary(lambda x, y: x * y), "Div": _binary(_div),
    "Max": _binary(sym_max), "Min": _binary(sym_min),
    "Equal": _equal, "Where": _where, "Range": _range,
}


def _gather_elements(node, v):
    data, idx = np.asarray(v[0]), np.asarray(v[1]).astype(np.int64)
    axis = _attr(node, "axis", 0) % data.ndim
    return np.take_along_axis(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis)


# numeric ops computed here rather than by onnx.reference (whose GatherElements fails when the
# indices are smaller than the data: BERT's token-type ids gathered from a buffer)
NUMERIC = {"GatherElements": _gather_elements}
