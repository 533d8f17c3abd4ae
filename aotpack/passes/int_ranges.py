"""Integer value ranges, and the comparisons and selections they decide at build time.

transformers' grouped-GEMM experts (Mixtral, Qwen2-MoE, OLMoE) guard against expert ids a
model split over GPUs marks invalid: `where(sorted_ids >= E, 0, rows)` on the gathered
activations, on the [T*k, 2I] gate/up output and on the down projection's output. The ids come
from a topk over E router columns, so they never reach E: the guard is always false, but as
three run-time selections it read and wrote ~600 MB per 2,048-token Mixtral prefill (0.15 ms on
an H200). Ranges known from how a value is made decide such comparisons:

- topk / sort / argmax indices over C columns: [0, C-1]; an inverse permutation of N: [0, N-1];
- views, copies, sorted values and exact casts keep their input's range; max/min with a
  scalar clamp it; + - * // by an integer scalar move it; cat and where join their inputs';
  small integer constants have theirs.

A comparison of a ranged value with a scalar that holds (or fails) for the whole range is
decided; views and NOT of it too; `where` on a decided condition becomes the operand it picks
when that operand already has the result's type (dead code removes the rest).
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import COMPARE, LAYOUT, Op

_KEEPS_RANGE = LAYOUT + (Op.COPY,)
_SMALL_CONSTANT = 1 << 16  # elements: larger integer constants are not scanned
_EXACT_F32 = 1 << 24


def fold_known_comparisons(graph: Graph) -> Graph:
    ranges = _constant_ranges(graph)
    decided: dict[str, bool] = {}
    b = GraphBuilder(graph)
    for n in graph.nodes:
        r = _range(n, ranges)
        if r is not None:
            ranges[n.output.name] = r
        truth = _decided(n, ranges, decided)
        if truth is not None:
            decided[n.output.name] = truth
        picked = _picked(n, decided)
        if picked is not None:
            b.replace(n.output, b.get(picked))
        else:
            b.keep(n)
    return b.finish()


def _constant_ranges(graph: Graph) -> dict[str, tuple[int, int]]:
    out = {}
    for name, c in graph.constants.items():
        t = c.tensor
        if t.is_meta or t.dtype.is_floating_point or t.is_complex() or not 0 < t.numel() \
                <= _SMALL_CONSTANT:
            continue
        out[name] = (int(t.min()), int(t.max()))
    return out


def _static_int(v) -> int | None:
    return v if isinstance(v, int) else None


def _range(n: Node, ranges: dict) -> tuple[int, int] | None:
    """The range of n's (single) output, if it is integer-valued and known."""
    if len(n.outputs) != 1:
        return None
    x = ranges.get(n.inputs[0].name) if n.inputs else None
    a = n.attrs
    if n.op in (Op.TOPK, Op.SORT) and a.indices or n.op == Op.ARGMAX:
        size = _static_int(n.inputs[0].shape[-1] if n.op != Op.ARGMAX
                           else n.inputs[0].shape[a.dims[0]])
        return (0, size - 1) if size else None
    if n.op == Op.INVERSE_PERM:
        size = _static_int(n.inputs[0].shape[0])
        return (0, size - 1) if size else None
    if n.op in (Op.CAT, Op.WHERE):  # the union of what the values come from
        parts = [ranges.get(v.name) for v in (n.inputs if n.op == Op.CAT else n.inputs[1:])]
        if any(r is None for r in parts) or n.output.dtype.is_float:
            return None
        return min(r[0] for r in parts), max(r[1] for r in parts)
    if x is None:
        return None
    if n.op in _KEEPS_RANGE or n.op == Op.SORT:
        return x
    if n.op == Op.CAST:
        return x if _holds(n.output.dtype, x) else None
    r = _scalar_arithmetic(n, x)
    # a result its dtype cannot hold wraps (integers) or rounds (floats): no range then
    return r if r is not None and _holds(n.output.dtype, r) else None


def _scalar_arithmetic(n: Node, x: tuple[int, int]) -> tuple[int, int] | None:
    """max/min with an integer scalar clamp the range; + - * // by one move it."""
    a = n.attrs
    scalar = getattr(a, "scalar", None)
    if not isinstance(scalar, int) or isinstance(scalar, bool) or len(n.inputs) != 1:
        return None
    lo, hi = x
    if n.op == Op.MAX:
        return max(lo, scalar), max(hi, scalar)
    if n.op == Op.MIN:
        return min(lo, scalar), min(hi, scalar)
    if n.op == Op.ADD:
        return lo + scalar, hi + scalar
    if n.op == Op.SUB and not a.scalar_first:
        return lo - scalar, hi - scalar
    if n.op == Op.MUL and scalar >= 0:
        return lo * scalar, hi * scalar
    if n.op == Op.FLOORDIV and not a.scalar_first and scalar > 0:
        return lo // scalar, hi // scalar
    return None


def _holds(dtype: DType, r: tuple[int, int]) -> bool:
    if dtype.is_float:
        return dtype.nbytes >= 4 and -_EXACT_F32 <= r[0] and r[1] <= _EXACT_F32
    if dtype == DType.BOOL:
        return False
    import torch

    info = torch.iinfo(dtype.to_torch())
    return info.min <= r[0] and r[1] <= info.max


def _decided(n: Node, ranges: dict, decided: dict) -> bool | None:
    """True/False when n's (bool) output is the same at every element whatever the inputs."""
    if not n.inputs or len(n.outputs) != 1:
        return None
    first = decided.get(n.inputs[0].name)
    if n.op in _KEEPS_RANGE:
        return first
    if n.op == Op.NOT:
        return None if first is None else not first
    if n.op not in COMPARE or len(n.inputs) != 1:
        return None
    r, s = ranges.get(n.inputs[0].name), n.attrs.scalar
    if r is None or s is None or isinstance(s, bool):
        return None
    lo, hi = r
    op = n.op
    if n.attrs.scalar_first:  # s op x  ==  x op' s
        op = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE}.get(op, op)
    always = {Op.LT: hi < s, Op.LE: hi <= s, Op.GT: lo > s, Op.GE: lo >= s,
              Op.EQ: lo == hi == s, Op.NE: s < lo or s > hi}[op]
    never = {Op.LT: lo >= s, Op.LE: lo > s, Op.GT: hi <= s, Op.GE: hi < s,
             Op.EQ: s < lo or s > hi, Op.NE: lo == hi == s}[op]
    return True if always else False if never else None


def _picked(n: Node, decided: dict) -> Value | None:
    """The operand a `where` on a decided condition selects, when it can stand for the
    result as it is (same dtype and shape: no broadcast or promotion to apply)."""
    if n.op != Op.WHERE or len(n.inputs) != 3:
        return None
    truth = decided.get(n.inputs[0].name)
    if truth is None:
        return None
    picked = n.inputs[1] if truth else n.inputs[2]
    return picked if picked.type == n.output.type else None
