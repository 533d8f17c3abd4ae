"""f32 GEMMs of upcast 16-bit operands run on the 16-bit tensor cores, exactly.

A bf16 model that computes one product in f32 (DeepSeek-V3's and other MoE routers:
`F.linear(x.float(), w.float())`, for the expert choice's precision) upcasts operands that
are bf16 values: the product of two bf16 (or two f16) numbers is exact in f32, and the GEMM
kernels accumulate in f32, so `linear(cast_f32(a16), cast_f32(w16))` equals
`cast_f32(linear(a16, w16))` computed with an f32 output (the cast is the GEMM's output
dtype: gemm_chain's "cast" step, no rounding to 16 bits in between). Only the order of the
additions differs, as between any two GEMM kernels. An f32 operand that is not such an upcast
(computed in f32) keeps the GEMM f32: in a 16-bit model refused by the GEMM template with what
to do; in an f32 model a tf32 1x1 convolution (lower_conv.f32_gemm_as_conv).
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op

_NARROW = (DType.BF16, DType.F16)


def exact_gemm(graph: Graph) -> Graph:
    producers = graph.producers()
    b = GraphBuilder(graph)
    for n in graph.nodes:
        narrow = _narrow_operands(n, producers)
        if narrow is None:
            b.keep(n)
            continue
        a16, w16 = narrow
        out = n.output
        prod = b.emit(n.op, [a16, w16], n.attrs, a16.dtype, out.shape, f"{out.name}_16", n.loc)
        wide = b.emit(Op.CAST, [prod], O.CastAttrs(out.dtype), out.dtype, out.shape,
                      f"{out.name}_f32", n.loc)
        if n.op == Op.LINEAR and len(n.inputs) == 3:  # the bias, added in f32 as before
            wide = b.emit(Op.ADD, [wide, b.get(n.inputs[2])], O.BinaryAttrs(), out.dtype,
                          out.shape, f"{out.name}_bias", n.loc)
        b.replace(out, wide)
    return b.finish()


def _narrow_operands(n: Node, producers) -> tuple[Value, Value] | None:
    """(a, b) before their upcasts, when `n` is an f32 GEMM of two upcast 16-bit values."""
    if n.op not in (Op.LINEAR, Op.MATMUL) or n.output.dtype != DType.F32:
        return None
    if n.op == Op.MATMUL and len(n.inputs[1].shape) != 2:
        return None  # batched: the bmm kernel
    a, w = (_upcast_source(v, producers) for v in n.inputs[:2])
    if a is None or w is None or a.dtype != w.dtype:
        return None
    return a, w


def _upcast_source(v: Value, producers) -> Value | None:
    node = producers.get(v.name)
    if node is None or node.op != Op.CAST or v.dtype != DType.F32:
        return None
    src = node.inputs[0]
    return src if src.dtype in _NARROW else None
