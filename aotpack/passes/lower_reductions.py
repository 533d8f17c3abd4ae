"""Lowering rules for the row-wise reductions: LAYER_NORM → LayerNormOp, SOFTMAX and
LOG_SOFTMAX → SoftmaxOp, SUM / MEAN / AMAX / AMIN → ReduceOp. Each kernel reduces the last dim
of a 2-D view [R, C]: the IR value is viewed as [leading dims merged, reduced dims merged] (a
copy is made first when the leading dims do not merge into one stride). A reduction over other
dims (SUM / MEAN / AMAX / AMIN / ARGMAX) reads them moved last (`_dims_last`: a copy where that
is no view). Softmax, log-softmax and cumsum over another dim read it moved last the same way
and write their result with that dim last too (`_moved_out`): an intermediate is stored in that
order and its users read it through the permuted strides; a destination whose layout is fixed
(a graph output, a cat slice) that the moved view does not flatten gets a copy after the kernel.

Casts around them are free: the kernels widen on load and compute in f32, so a widening cast
of the input (bf16 → f32, HF's softmax(x.float())) is read through, and a cast of an f32
result (`.to(bf16)`) becomes the kernel's output dtype (`fuse_casts`; the same rounding).

Every rule is `rule(lowering, node)` (lowering is passes.lower._Lowering), hooked in lower.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotpack.dtypes import DType
from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import (LayerNormOp, ReduceOp, ScanOp, SoftmaxOp, TensorArg,
                                  contiguous)
from aotpack.program import Storage

_KIND = {Op.SUM: "sum", Op.MEAN: "mean", Op.AMAX: "amax", Op.AMIN: "amin",
         Op.ARGMAX: "argmax"}


# ----------------------------------------------------------------------------- casts
_NARROW = (DType.BF16, DType.F16)


@dataclass
class FusedCasts:
    skip: set[str] = field(default_factory=set)  # cast nodes a reduction kernel covers
    source: dict[str, Value] = field(default_factory=dict)  # input cast -> the value it reads
    out_cast: dict[str, Node] = field(default_factory=dict)  # reduction -> its output cast


def fuse_casts(graph: Graph, producers, users, taken: set[str]) -> FusedCasts:
    """Casts the reduction kernels absorb. `taken`: values other fusions own (GEMM chains,
    pointwise regions), left alone."""
    fused, outputs = FusedCasts(), graph.output_names()
    for n in graph.nodes:
        if n.op not in RULES:
            continue
        cast = producers.get(n.inputs[0].name)
        if (cast is not None and cast.op == Op.CAST and cast.output.dtype == DType.F32
                and cast.inputs[0].dtype in _NARROW and cast.output.name not in taken
                and cast.output.name not in outputs
                # a cast that roots a pointwise region (its input was absorbed into it) must
                # run: skipping it would leave the absorbed nodes computed by no kernel
                and cast.inputs[0].name not in taken
                and len(users.get(cast.output.name, [])) == 1):
            fused.skip.add(cast.output.name)
            fused.source[cast.output.name] = cast.inputs[0]
        us = users.get(n.output.name, [])
        if (n.output.dtype == DType.F32 and len(us) == 1 and us[0].op == Op.CAST
                and us[0].output.dtype in _NARROW + (DType.F32,)
                and us[0].output.name not in taken and n.output.name not in outputs):
            fused.skip.add(us[0].output.name)
            fused.out_cast[n.output.name] = us[0]
    return fused


def _input(lw, n: Node) -> Value:
    """The value the kernel reads for n.inputs[0] (through an absorbed widening cast)."""
    v = n.inputs[0]
    return lw.fused_casts.source.get(v.name, v)


# ----------------------------------------------------------------------------- views
def merge_dims(shape, strides) -> tuple[int, int] | None:
    """(size, stride) of dims that walk memory as one strided dim, or None."""
    size = 1
    for d in shape:
        size *= d
    dims = [(d, s) for d, s in zip(shape, strides) if d != 1]
    if not dims:
        return size, 1
    for (_, s0), (d1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * d1:
            return None
    return size, dims[-1][1]


def merge_2d(arg: TensorArg, ncols: int) -> TensorArg | None:
    """arg as [prod(leading dims), prod(last `ncols` dims)], or None if that is no view."""
    k = len(arg.shape) - ncols
    lead = merge_dims(arg.shape[:k], arg.strides[:k])
    tail = merge_dims(arg.shape[k:], arg.strides[k:])
    if lead is None or tail is None:
        return None
    return TensorArg(arg.storage, arg.dtype, (lead[0], tail[0]), (lead[1], tail[1]), arg.offset)


def merge_1d(arg: TensorArg) -> TensorArg | None:
    m = merge_dims(arg.shape, arg.strides)
    return None if m is None else TensorArg(arg.storage, arg.dtype, (m[0],), (m[1],), arg.offset)


def _rows(lw, v: Value, ncols: int) -> TensorArg:
    """The [R, C] view of value `v` (a contiguous copy first if it has none)."""
    arg = merge_2d(lw.args[v.name], ncols)
    return arg if arg is not None else merge_2d(lw._materialize(lw.args[v.name], v.name), ncols)


def _vector(lw, v: Value) -> TensorArg:
    arg = merge_1d(lw.args[v.name])
    return arg if arg is not None else merge_1d(lw._materialize(lw.args[v.name], v.name))


def out_ncols(n: Node) -> int | None:
    """How reduction node `n`'s kernel writes: [R, C] over the last `ncols` dims, or [R]."""
    if n.op == Op.LAYER_NORM:
        return n.attrs.ndim
    return 1 if n.op in (Op.SOFTMAX, Op.LOG_SOFTMAX) else None


def moved_dim(n: Node) -> int | None:
    """The dim a softmax / log-softmax / cumsum runs over when it is not the last (the kernel
    then reads and writes it moved last), else None."""
    rank = len(n.inputs[0].shape)
    if n.op not in (Op.SOFTMAX, Op.LOG_SOFTMAX, Op.CUMSUM) or rank < 2:
        return None
    dim = n.attrs.dim % rank
    return None if dim == rank - 1 else dim


def _moved(arg: TensorArg, dim: int) -> TensorArg:
    """`arg` with `dim` moved last (a permuted view: strides follow the dims)."""
    order = [i for i in range(len(arg.shape)) if i != dim] + [dim]
    return TensorArg(arg.storage, arg.dtype, tuple(arg.shape[i] for i in order),
                     tuple(arg.strides[i] for i in order), arg.offset)


def writes_view(n: Node, dest: TensorArg) -> bool:
    """Whether `n`'s kernel can write its result straight into `dest` (e.g. a cat slice):
    the view flattens as the kernel writes it, rows with unit inner stride (over a moved dim:
    any column stride, the softmax and scan kernels take one)."""
    dim = moved_dim(n)
    if dim is not None:
        return merge_2d(_moved(dest, dim), 1) is not None
    ncols = out_ncols(n)
    if ncols is None:
        return merge_1d(dest) is not None
    flat = merge_2d(dest, ncols)
    return flat is not None and (flat.strides[1] == 1 or flat.shape[1] == 1)


def _out(lw, n: Node, ncols: int | None) -> TensorArg:
    """The storage the kernel writes, as [R, C] (ncols given) or [R] (ncols None): the
    node's value, or the value of its absorbed output cast."""
    cast = lw.fused_casts.out_cast.get(n.output.name)
    out = lw._new_storage(_written(lw, n))
    if cast is not None:
        lw.args[n.output.name] = out
    arg = merge_1d(out) if ncols is None else merge_2d(out, ncols)
    if arg is None:  # only a preset (in-place) destination could be like this
        lw._fail(n, f"its output view {out.shape} / {out.strides} does not flatten")
    return arg


def _written(lw, n: Node) -> Value:
    """The value n's kernel writes: n's own, or its absorbed output cast's."""
    cast = lw.fused_casts.out_cast.get(n.output.name)
    return n.output if cast is None else cast.output


def _moved_out(lw, n: Node, dim: int):
    """([R, C] the kernel writes with `dim` last, None or (src, dst) to copy after it) for a
    softmax / cumsum over a dim that is not the last."""
    v = _written(lw, n)
    order = [i for i in range(len(v.shape)) if i != dim] + [dim]
    moved_shape = tuple(v.shape[i] for i in order)
    if v.name not in lw.preset and v.name not in lw.out_storage:
        # an intermediate: stored with `dim` last, the value is the permuted view of it (its
        # users read through strides, as they read any permute), so nothing is copied back
        lw.storages[v.name] = Storage(v.name, "intermediate", v.dtype, moved_shape)
        store = contiguous(v.name, v.dtype, moved_shape)
        lw.args[v.name] = lw.args[n.output.name] = _unmoved(store, dim)
        return merge_2d(store, 1), None
    dest = lw._new_storage(v)  # a fixed layout: written in place if the moved view flattens
    lw.args[n.output.name] = dest
    flat = merge_2d(_moved(dest, dim), 1)
    if flat is not None:
        return flat, None
    name = lw._fresh_storage_name(f"{v.name}_moved")
    lw.storages[name] = Storage(name, "intermediate", v.dtype, moved_shape)
    tmp = contiguous(name, v.dtype, moved_shape)
    return merge_2d(tmp, 1), (_unmoved(tmp, dim), dest)


def _unmoved(arg: TensorArg, dim: int) -> TensorArg:
    """The inverse of _moved: `arg`'s last dim put back at `dim`."""
    rank = len(arg.shape)
    order = list(range(rank - 1))
    order.insert(dim, rank - 1)
    return TensorArg(arg.storage, arg.dtype, tuple(arg.shape[i] for i in order),
                     tuple(arg.strides[i] for i in order), arg.offset)


def _require_float(lw, n: Node) -> None:
    x = n.inputs[0]
    if not x.dtype.is_float:
        lw._fail(n, f"{n.op.value} of a {x.dtype.value} tensor (reduction kernels compute in "
                    f"f32 and support floating-point inputs only; cast to float first)")


# ----------------------------------------------------------------------------- rules
def lower_layer_norm(lw, n: Node) -> None:
    _require_float(lw, n)
    k = n.attrs.ndim
    if not 1 <= k <= len(n.inputs[0].shape):
        lw._fail(n, f"layer_norm over {k} dims of a {list(n.inputs[0].shape)} tensor")
    x = _rows(lw, _input(lw, n), k)
    weight = _vector(lw, n.inputs[1]) if len(n.inputs) > 1 else None
    bias = _vector(lw, n.inputs[2]) if len(n.inputs) > 2 else None
    lw.ops.append(LayerNormOp(x, weight, bias, _out(lw, n, k), float(n.attrs.eps)))


def lower_softmax(lw, n: Node) -> None:
    _require_float(lw, n)
    if not n.inputs[0].shape:
        lw._fail(n, f"{n.op.value} of a 0-d tensor (give it at least one dim)")
    dim = moved_dim(n)
    if dim is None:
        x, out, copy_back = _rows(lw, _input(lw, n), 1), _out(lw, n, 1), None
    else:  # over another dim: moved last (softmax(dim=1) of an NCHW map, of [B, S, S] keys)
        x = _dims_last(lw, _input(lw, n), (dim,))
        out, copy_back = _moved_out(lw, n, dim)
    lw.ops.append(SoftmaxOp(x, out, float(n.attrs.scale), n.op == Op.LOG_SOFTMAX))
    if copy_back is not None:
        lw._copy(*copy_back)


def lower_reduce(lw, n: Node) -> None:
    # argmax of ids or of 0/1 flags (CLIP's end token): f32 is exact below 2**24; sum, amax
    # and amin of integers or bools (a mask's length: ESM) accumulate in int64
    if n.op not in (Op.ARGMAX, Op.SUM, Op.AMAX, Op.AMIN):
        _require_float(lw, n)
    shape = list(n.inputs[0].shape)
    rank = len(shape)
    dims = tuple(sorted(d % rank for d in n.attrs.dims)) if rank else ()
    k = len(dims)
    if rank == 0:
        k = 0
    if dims == tuple(range(rank - k, rank)):
        x = _rows(lw, _input(lw, n), k)
    else:  # reduced dims moved last (a copy when that view does not flatten: ConvNeXt V2's
        x = _dims_last(lw, _input(lw, n), dims)  # norm over H, W of an NHWC map)
    lw.ops.append(ReduceOp(_KIND[n.op], x, _out(lw, n, None)))


def _dims_last(lw, v: Value, dims: tuple[int, ...]) -> TensorArg:
    """[kept dims (in order), reduced dims] of value `v` as [R, C]: the permuted view, or a
    contiguous copy of it. The kernel's R rows are the output's elements in order."""
    arg = lw.args[v.name]
    order = [i for i in range(len(arg.shape)) if i not in dims] + list(dims)
    moved = TensorArg(arg.storage, arg.dtype, tuple(arg.shape[i] for i in order),
                      tuple(arg.strides[i] for i in order), arg.offset)
    flat = merge_2d(moved, len(dims))
    return flat if flat is not None else merge_2d(lw._materialize(moved, v.name), len(dims))


def lower_cumsum(lw, n: Node) -> None:
    dim = moved_dim(n)
    if dim is None:
        x, out, copy_back = _rows(lw, n.inputs[0], 1), _out(lw, n, 1), None
    else:  # over another dim (a cumsum over the sequence of [B, S, D]): moved last
        x = _dims_last(lw, n.inputs[0], (dim,))
        out, copy_back = _moved_out(lw, n, dim)
    lw.ops.append(ScanOp(x, out))
    if copy_back is not None:
        lw._copy(*copy_back)


RULES = {Op.LAYER_NORM: lower_layer_norm, Op.CUMSUM: lower_cumsum, Op.SOFTMAX: lower_softmax,
         Op.LOG_SOFTMAX: lower_softmax,
         **{op: lower_reduce for op in _KIND}}
