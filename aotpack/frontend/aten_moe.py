"""aten → IR rules for mixture-of-experts routing, as transformers' grouped-GEMM experts export
it (Mixtral, Qwen2-MoE, OLMoE):

    softmax(router logits) -> topk -> (values / sum)         the experts of each token
    ids.view(-1) -> sort -> (sorted ids, order)               tokens in expert order
    histc(sorted ids, E, 0, E-1) -> cumsum                    each expert's row range
    _grouped_mm(x[order // k], W[E, K, N], offsets)           the experts' GEMMs
    index_put(empty, [order], arange) -> index(out, [.])      back to token order

topk and sort (frontend/aten_sort.py) have two results: each becomes two IR nodes (values,
indices) over the same input (k and E are small: recomputing is cheaper than a second kind
of node). The scatter
`index_put(empty, [order], arange)` writes every slot of the buffer exactly when `order` is a
permutation, which a sort's order is: it is the inverse permutation of `order`, one op.
"""
from __future__ import annotations

from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


class Uninitialized:
    """torch.empty(...): memory no one wrote. Only a scatter that overwrites all of it (the
    inverse permutation above) may read it; any other reader is refused."""

    def __init__(self, shape):
        self.shape_ = tuple(shape)


def _histc(cx, x, bins=100, min=0, max=0):
    if not isinstance(x, Value):
        raise Unsupported("histc of a Python value")
    if float(min) == float(max):
        raise Unsupported("histc with min == max (a range taken from the data; give the "
                          "range, e.g. histc(ids, E, 0, E - 1))")
    return cx.emit(Op.HISTC, [x], O.HistcAttrs(int(bins), float(min), float(max)), final=True)


def _empty(cx, size, *args, **kwargs):
    return Uninitialized(size)


def _index_put(cx, x, indices, values, accumulate=False):
    """index_put(empty, [order], arange(N)) with `order` a sort's permutation: the inverse
    permutation; into a tensor at run-time indices: a row scatter (aten_scatter.index_put:
    a KV cache's write, index_add, x[mask] = 0). Other writes into torch.empty are refused."""
    by_order = len(indices) == 1 and isinstance(indices[0], Value) \
        and _is_sort_order(cx, indices[0])
    if isinstance(x, Value) and (accumulate or not by_order):
        from aotpack.frontend.aten_scatter import index_put

        return index_put(cx, x, list(indices), values, bool(accumulate))
    if accumulate:
        raise Unsupported("index_put(accumulate=True) into uninitialised memory (torch.empty)")
    if len(indices) != 1 or not isinstance(indices[0], Value):
        raise Unsupported("index_put with other than one index tensor")
    order = indices[0]
    if not _is_sort_order(cx, order):
        raise Unsupported("index_put at indices that are not a sort's permutation (only "
                          "the inverse permutation index_put(empty, [order], arange) is "
                          "supported)")
    samples = cx.constant_samples(values) if isinstance(values, Value) else None
    if not samples or not all(_is_arange(t) for _, t in samples):
        raise Unsupported("index_put of values other than arange(N) (only the inverse "
                          "permutation index_put(empty, [order], arange) is supported)")
    if not isinstance(x, Uninitialized):
        if not isinstance(x, Value) or tuple(x.shape) != tuple(order.shape):
            raise Unsupported("index_put into a tensor of another shape than the permutation")
    return cx.emit(Op.INVERSE_PERM, [order], O.NoAttrs(), final=True)


def _is_sort_order(cx, v: Value) -> bool:
    node = cx.producer(v)
    return node is not None and node.op == Op.SORT and node.attrs.indices


def _is_arange(t) -> bool:
    import torch

    return t.dim() == 1 and bool((t.long() == torch.arange(t.numel())).all())


def _grouped_mm(cx, a, b, offs=None, bias=None, out_dtype=None):
    if offs is None:
        raise Unsupported("_grouped_mm without offsets (only a [T, K] x [E, K, N] grouped "
                          "GEMM with per-group row ends)")
    if bias is not None:
        raise Unsupported("_grouped_mm with a bias")
    if not (isinstance(a, Value) and isinstance(b, Value) and len(a.shape) == 2
            and len(b.shape) == 3):
        raise Unsupported("_grouped_mm of other than a [T, K] and a [E, K, N] tensor")
    if not all(isinstance(d, int) for d in b.shape):
        raise Unsupported(f"_grouped_mm with dynamic expert weights {b.shape}")
    return cx.emit(Op.GROUPED_MM, [a, b, offs], O.GroupedMmAttrs(), final=out_dtype is None)


def _max_dim(cx, x, dim, keepdim=False):
    """max over a dim with its index (PhiMoE's and GPT-OSS's routers): amax and argmax, two
    reductions of the same input (the index: the first of equal maxima)."""
    if not isinstance(x, Value):
        raise Unsupported("max of a Python value")
    rank = len(x.shape)
    dim = dim + rank if dim < 0 else dim
    attrs = O.ReduceAttrs((dim,), bool(keepdim))
    return [cx.emit(Op.AMAX, [x], attrs), cx.emit(Op.ARGMAX, [x], attrs)]


RULES = {
    "aten.max.dim": _max_dim,
    "aten.histc.default": _histc, "aten.index_put.default": _index_put,
    "aten.empty_permuted.default": _empty, "aten.empty.memory_format": _empty,
    "aten._grouped_mm.default": _grouped_mm,
    "transformers.grouped_mm_fallback.default": _grouped_mm,
}
