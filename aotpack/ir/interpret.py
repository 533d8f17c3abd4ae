"""Run a Graph eagerly with torch (CPU). Used to check the frontend against eager PyTorch and
for constant folding; not a performance path."""
from __future__ import annotations


from aotpack.ir.graph import Graph, Node
from aotpack.ir import ops as O
from aotpack.ir.ops import Op


def run_graph(graph: Graph, inputs) -> list:
    """Outputs of `graph` (torch tensors, in graph output order) for `inputs` (graph order)."""
    env = {v.name: t for v, t in zip(graph.inputs, inputs)}
    env.update({name: c.tensor for name, c in graph.constants.items()})
    for n in graph.nodes:
        env[n.output.name] = eval_node(n, [env[v.name] for v in n.inputs])
    return [env[o.value.name] for o in graph.outputs]


def eval_node(n: Node, args: list):
    fn = _EVAL.get(n.op)
    if fn is None:
        raise NotImplementedError(f"interpreter has no rule for {n.op.value}")
    out = fn(n.attrs, *args)
    return out.to(n.output.dtype.to_torch())


def _tensors(fn):
    """fn over two operands of which one may be a Python number (a BinaryAttrs scalar)."""
    import torch

    return lambda x, y: fn(torch.as_tensor(x), torch.as_tensor(y))


def _binary(fn):
    def run(a, x, y=None):
        if a.scalar is not None:
            return fn(a.scalar, x) if a.scalar_first else fn(x, a.scalar)
        return fn(x, y)
    return run


def _sdpa(a, q, k, v, mask=None, bias=None):
    import torch
    import torch.nn.functional as F

    if bias is not None:  # one additive mask: the bias plus the mask (-inf where it hides)
        hidden = None if mask.dtype != torch.bool else torch.zeros(
            mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
        mask = bias.float() + (mask.float() if hidden is None else hidden)
    if a.softcap > 0:
        return _capped_sdpa(a, q, k, v, mask)
    if mask is not None and a.positions:
        from aotpack.kernels.reference.attention import positional_mask

        mask = positional_mask(mask, a.window, k.shape[-2])
    if mask is not None and mask.dtype.is_floating_point:
        mask = mask.to(q.dtype)
    if mask is not None and a.causal:  # sdpa takes one or the other
        causal = mask.new_ones(q.shape[-2], k.shape[-2], dtype=bool).tril()
        mask = (mask & causal) if mask.dtype == bool else mask.masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                          is_causal=a.causal and mask is None, scale=a.scale,
                                          enable_gqa=a.gqa)


def _capped_sdpa(a, q, k, v, mask):
    """Soft-capped attention (sdpa has no cap): the kernel reference's, in f32."""
    from aotpack.kernels.reference.attention import attend, positional_mask

    if mask is not None and a.positions:
        mask = positional_mask(mask, a.window, k.shape[-2])
    scale = a.scale if a.scale is not None else q.shape[-1] ** -0.5
    return attend(q, k, v, scale, a.causal, mask, a.softcap).to(q.dtype)


def _rope(a, x, cos, sin):
    """What the model wrote: torch's promotions, then the optional rounding (RopeAttrs)."""
    import torch

    r = a.rotary_dim if a.rotary_dim is not None else x.shape[-1]
    xr = x[..., :r]
    if a.interleaved:
        turned = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-xr[..., r // 2:], xr[..., :r // 2]), dim=-1)
    out = xr * cos + turned * sin
    if r < x.shape[-1]:
        out = torch.cat((out, x[..., r:].to(out.dtype)), dim=-1)
    return out if a.dtype is None else out.to(a.dtype.to_torch())


def _swiglu(a, x):
    import torch.nn.functional as F

    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // (2 * a.group), 2, a.group)
    return (F.silu(pairs[..., 0, :]) * pairs[..., 1, :]).reshape(*x.shape[:-1], -1)


def _as_strided(a, x):
    import torch

    flat = x.contiguous().view(-1)  # as_strided offsets are absolute in the storage
    return torch.as_strided(flat, a.shape, a.strides, flat.storage_offset() + a.offset)


def _conv(a, x, w):
    """Channels-last in and out; torch computes it NCHW (f32 on the CPU: bf16 convs there
    round differently from the GPU's f32 accumulation)."""
    import torch.nn.functional as F

    (pt, pb), (pl, pr) = a.padding
    xc = F.pad(x.permute(0, 3, 1, 2).float(), (pl, pr, pt, pb))
    y = F.conv2d(xc, w.float(), None, a.stride, 0, a.dilation, a.groups)
    return y.permute(0, 2, 3, 1)


def _pool(a, x):
    import torch.nn.functional as F

    xc = x.permute(0, 3, 1, 2).float()
    if a.kind == "max":
        y = F.max_pool2d(xc, a.kernel, a.stride, a.padding, ceil_mode=a.ceil_mode)
    else:
        y = F.avg_pool2d(xc, a.kernel, a.stride, a.padding, ceil_mode=a.ceil_mode,
                         count_include_pad=a.count_include_pad, divisor_override=a.divisor)
    return y.permute(0, 2, 3, 1)


def _topk(a, x):
    # the kernel's rule for equal values: the first index (torch.topk leaves it open)
    values, indices = x.sort(dim=-1, descending=a.largest, stable=True)
    return (indices if a.indices else values)[..., :a.k]


def _sort(a, x):
    values, order = x.sort(dim=-1, descending=a.descending, stable=True)
    return order if a.indices else values


def _scatter_rows(a, table, rows, values):
    return scatter_rows_reference(table.clone(), rows, values, a.reduce)


def scatter_rows_reference(out, rows, values, reduce: str):
    """out[rows[r]] = values[r] (reduce "none"), or combined by sum / amax / amin, in place;
    rows outside out's rows are skipped (as the kernel skips them)."""
    rows = rows.long()
    inside = (rows >= 0) & (rows < out.shape[0])
    rows, values = rows[inside], values[inside].to(out.dtype)
    if reduce == "none":
        out[rows] = values
    else:  # (every value counts: duplicate rows accumulate)
        where = rows[:, None].expand(-1, out.shape[1])
        out.scatter_reduce_(0, where, values, reduce)
    return out


def _inverse_perm(a, order):
    import torch

    out = torch.empty_like(order, dtype=torch.int64)
    out[order.long()] = torch.arange(order.numel())
    return out


def _grouped_mm(a, x, w, offs):
    """Group g: rows offs[g-1]..offs[g] of x times w[g], f32 accumulation; rows past the
    last offset are 0."""
    import torch

    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float32)
    start = 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].float() @ w[g].float()
        start = end
    return _swiglu(O.SwiGLUAttrs(a.swiglu_group), out) if a.swiglu_group else out


def _build():
    import torch
    import torch.nn.functional as F

    T = torch
    return {
        Op.LINEAR: lambda a, x, w, b=None: F.linear(x, w, b), Op.MATMUL: lambda a, x, y: x @ y,
        Op.EMBEDDING: lambda a, table, ids: F.embedding(ids.long(), table),
        Op.ADD: _binary(lambda x, y: x + y), Op.SUB: _binary(lambda x, y: x - y),
        Op.MUL: _binary(lambda x, y: x * y), Op.DIV: _binary(lambda x, y: x / y),
        Op.FLOORDIV: _binary(lambda x, y: T.div(T.as_tensor(x), T.as_tensor(y),
                                                rounding_mode="floor")),
        Op.MAX: _binary(lambda x, y: T.maximum(T.as_tensor(x), T.as_tensor(y))),
        Op.MIN: _binary(lambda x, y: T.minimum(T.as_tensor(x), T.as_tensor(y))),
        Op.POW: _binary(lambda x, y: x ** y),
        Op.NEG: lambda a, x: -x, Op.EXP: lambda a, x: x.exp(), Op.LOG: lambda a, x: x.log(),
        Op.SQRT: lambda a, x: x.sqrt(), Op.RSQRT: lambda a, x: x.rsqrt(),
        Op.RECIP: lambda a, x: x.reciprocal(), Op.ABS: lambda a, x: x.abs(),
        Op.SIN: lambda a, x: x.sin(), Op.COS: lambda a, x: x.cos(),
        Op.TANH: lambda a, x: x.tanh(), Op.SIGMOID: lambda a, x: x.sigmoid(),
        Op.RELU: lambda a, x: F.relu(x), Op.SILU: lambda a, x: F.silu(x),
        Op.GELU: lambda a, x: F.gelu(x, approximate=a.approximate),
        Op.RELU6: lambda a, x: F.relu6(x), Op.HARDSWISH: lambda a, x: F.hardswish(x),
        Op.HARDSIGMOID: lambda a, x: F.hardsigmoid(x), Op.CONV: _conv, Op.POOL: _pool,
        Op.ERF: lambda a, x: x.erf(), Op.LOG1P: lambda a, x: x.log1p(),
        Op.LOG2: lambda a, x: x.log2(), Op.EXP2: lambda a, x: x.exp2(),
        Op.EXPM1: lambda a, x: x.expm1(), Op.SIGN: lambda a, x: x.sign(),
        Op.FLOOR: lambda a, x: x.floor(), Op.CEIL: lambda a, x: x.ceil(),
        Op.TRUNC: lambda a, x: x.trunc(), Op.ROUND: lambda a, x: x.round(),
        Op.CAST: lambda a, x: x.to(a.dtype.to_torch()),
        **{op: _binary(_tensors(fn)) for op, fn in (
            (Op.EQ, T.eq), (Op.NE, T.ne), (Op.LT, T.lt), (Op.LE, T.le), (Op.GT, T.gt),
            (Op.GE, T.ge), (Op.AND, T.logical_and), (Op.OR, T.logical_or))},
        Op.NOT: lambda a, x: T.logical_not(x),
        Op.CUMSUM: lambda a, x: x.cumsum(a.dim, dtype=a.dtype.to_torch()),
        Op.WHERE: lambda a, c, x, y: T.where(c, x, y),
        Op.TOPK: _topk, Op.SORT: _sort, Op.INVERSE_PERM: _inverse_perm,
        Op.SCATTER_ROWS: _scatter_rows,
        Op.HISTC: lambda a, x: T.histc(x.float(), a.bins, a.lo, a.hi),
        Op.GROUPED_MM: _grouped_mm,
        Op.MEAN: lambda a, x: x.mean(dim=a.dims, keepdim=a.keepdim),
        Op.SUM: lambda a, x: x.sum(dim=a.dims, keepdim=a.keepdim),
        Op.AMAX: lambda a, x: x.amax(dim=a.dims, keepdim=a.keepdim),
        Op.AMIN: lambda a, x: x.amin(dim=a.dims, keepdim=a.keepdim),
        Op.ARGMAX: lambda a, x: x.argmax(dim=a.dims[0], keepdim=a.keepdim),
        Op.SOFTMAX: lambda a, x: (x * a.scale if a.scale != 1.0 else x).softmax(a.dim),
        Op.LOG_SOFTMAX: lambda a, x: (x * a.scale if a.scale != 1.0 else x).log_softmax(a.dim),
        Op.RMS_NORM: lambda a, x, w=None: F.rms_norm(x, x.shape[-a.ndim:], w, a.eps),
        Op.LAYER_NORM: lambda a, x, w=None, b=None: F.layer_norm(x, x.shape[-a.ndim:], w, b,
                                                                 a.eps),
        Op.SDPA: _sdpa, Op.ROPE: _rope, Op.SWIGLU: _swiglu,
        Op.VIEW: lambda a, x: x.reshape(a.shape), Op.PERMUTE: lambda a, x: x.permute(a.dims),
        Op.SLICE: lambda a, x: x.narrow(a.dim, a.start, a.end - a.start)[
            (slice(None),) * a.dim + (slice(None, None, a.step),)],
        Op.SELECT: lambda a, x: x.select(a.dim, a.index),
        Op.EXPAND: lambda a, x: x.expand(a.shape),
        Op.UNSQUEEZE: lambda a, x: x.unsqueeze(a.dims[0]),
        Op.SQUEEZE: lambda a, x: x.squeeze(a.dims) if a.dims else x,
        Op.CAT: lambda a, *xs: T.cat(xs, dim=a.dims[0]),
        Op.COPY: lambda a, x: x.contiguous().clone(),
        Op.AS_STRIDED: _as_strided,
    }


class _Lazy(dict):
    """The rule table, built on first use so that importing the IR never imports torch."""

    def get(self, key, default=None):
        if not len(self):
            self.update(_build())
        return super().get(key, default)


_EVAL = _Lazy()
