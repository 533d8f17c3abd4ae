"""Lowering of CONV chains and POOL nodes to ConvOp / PoolOp (called from lower.py).

A CONV's weight is a constant (the frontend refuses others), packed here once at build time in
the layout its kernel reads (spec.ConvOp); the unpacked constant is then read by no kernel and
is not stored. The epilogue is built as a GEMM's (bias, activations, residual add, ...).

A pointwise convolution (1x1, stride 1, no padding, one group) over a channels-last tensor is a
plain GEMM of the [pixels, channels] view by the [OC, C] weight: it becomes a GemmOp, so it
runs the GEMM template (TMA loads, its heuristics, its tuned configs and split-K for the few
rows of a squeeze-excitation FC) instead of the implicit GEMM's gathers.

A squeeze-excitation's channel gate x * s[n, c] read only by the next (not depthwise) conv is
applied by that conv as it loads x (ConvOp.x_scale; the conv then stays an implicit GEMM):
the gated tensor, the block's largest, is neither written nor read again, and one launch per
block goes. The pool, the FCs and the gate stay kernels of their own: the gate activation is
the second FC's epilogue; the pool has its own streaming kernel (triton/pool.py)."""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir.graph import Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import ConvOp, GemmOp, PoolOp, TensorArg
from aotpack.passes.fold_conv_bn import constant_tensor


def pack_conv_weight(w, groups: int, depthwise: bool):
    """torch's [OC, C/g, KH, KW] → [KH*KW, C] (depthwise) or [OC, KH*KW*C/g]."""
    oc, cg, kh, kw = w.shape
    if depthwise:
        return w.reshape(oc, kh * kw).t().contiguous()
    return w.permute(0, 2, 3, 1).reshape(oc, kh * kw * cg).contiguous()


def lower_conv(lw, chain) -> None:
    """`lw`: the lower.py _Lowering; `chain`: the CONV's gemm_chain.Chain."""
    root: Node = chain.root
    x_val, w_val = root.inputs
    a = root.attrs
    x, x_scale = _scaled_input(lw, x_val)
    w = constant_tensor(w_val, lw.g, lw.producers)
    if w is None:
        lw._fail(root, "its weight is computed at run time (a convolution's weight must be a "
                       "parameter or buffer of the model)")
    oc, cg, kh, kw = w.shape
    c = x.shape[3]
    depthwise = a.groups == c == oc and c > 1
    packed = pack_conv_weight(w, a.groups, depthwise)
    name = lw._fresh_storage_name(f"{w_val.name}.packed")
    w_arg = lw._add_weight(name, packed, Value(name, w_val.dtype, tuple(packed.shape)))
    epilogue = lw._epilogue(chain)
    out = lw._new_storage(chain.end)
    out2d = _flatten_rows(out)
    if out2d is None and len(out.shape) == 3 and root.output.shape[1] == 1:  # Conv1d: [N, L, C]
        n, length, oc = out.shape
        out = TensorArg(out.storage, out.dtype, (n, 1, length, oc),
                        (out.strides[0], 0, out.strides[1], out.strides[2]), out.offset)
    if out2d is None and len(out.shape) != 4:
        lw._fail(root, f"its output view {out.shape} / {out.strides} is not [pixels, channels]")
    # (not 2-D: the conv writes the model's NCHW output in place, lower.py _try_elide)
    out2d = out if out2d is None else out2d
    gemm_a = _pointwise_gemm_operand(x, w_arg, a, (kh, kw)) \
        if len(out2d.shape) == 2 and x_scale is None else None
    if gemm_a is not None:
        lw.ops.append(GemmOp(gemm_a, w_arg, out2d, tuple(epilogue)))
        return
    out_hw = tuple(root.output.shape[1:3])
    lw.ops.append(ConvOp(x, w_arg, out2d, (kh, kw), tuple(a.stride), tuple(a.padding),
                         tuple(a.dilation), a.groups, out_hw, tuple(epilogue), x_scale))


def scaled_conv_inputs(graph, users, absorbed: set[str], chained: set[str]) -> set[str]:
    """Products x * s (x [N, H, W, C], s [N or 1, 1, 1, C]: a squeeze-excitation's gate) read
    only by a convolution (not depthwise) as its input: that convolution multiplies as it
    loads x (ConvOp.x_scale), which saves writing and re-reading the gated tensor. Not a
    product that a GEMM or conv chain already computes in its epilogue (`chained`: at a 1x1
    map the gate [N, 1, 1, C] has x's shape, and the gate's conv takes x * s as an EpMul)."""
    out = set()
    outputs = graph.output_names()
    for n in graph.nodes:
        us = users.get(n.output.name, [])
        if (n.op != Op.MUL or n.attrs.scalar is not None or len(n.inputs) != 2
                or n.output.name in chained
                or n.output.name in outputs or len(us) != 1 or us[0].op != Op.CONV
                or us[0].inputs[0] != n.output or len(n.output.shape) != 4
                or any(v.name in absorbed or v.dtype != n.output.dtype for v in n.inputs)):
            continue
        conv = us[0]
        c, oc = n.output.shape[3], conv.output.shape[3]
        if conv.attrs.groups == c == oc and c > 1:
            continue  # depthwise: its own kernel
        if _split_scale(n) is not None:
            out.add(n.output.name)
    return out


def _split_scale(mul: Node):
    """(x, s) of a product x * s with s of shape [N or 1, 1, 1, C], else None."""
    shape = tuple(mul.output.shape)
    for x, s in (mul.inputs, mul.inputs[::-1]):
        if tuple(x.shape) == shape and tuple(s.shape[1:]) == (1, 1, shape[3]) \
                and (s.shape[0] == shape[0] or s.shape[0] == 1) and x != s:
            return x, s
    return None


def _scaled_input(lw, x_val: Value):
    """The conv's input and its x_scale ([N, C] view, stride 0 over a broadcast batch)."""
    if x_val.name not in lw.conv_scaled:
        return lw.args[x_val.name], None
    x, s = _split_scale(lw.producers[x_val.name])
    xa, sa = lw.args[x.name], lw.args[s.name]
    stride_n = sa.strides[0] if s.shape[0] != 1 else 0
    return xa, TensorArg(sa.storage, sa.dtype, (xa.shape[0], xa.shape[3]),
                         (stride_n, sa.strides[3]), sa.offset)


def _pointwise_gemm_operand(x, w_arg, attrs, kernel):
    """x as the [pixels, C] A operand of a GEMM when the conv is one (1x1, stride 1, no
    padding, one group, x viewable as rows of contiguous channels the GEMM template can load
    by TMA, a dtype it runs); else None."""
    from aotpack.kernels.gemm_template import GemmTemplate
    from aotpack.kernels.triton.gemm import tma_problem

    if kernel != (1, 1) or tuple(attrs.stride) != (1, 1) or attrs.groups != 1 \
            or any(map(any, attrs.padding)):
        return None
    a = _flatten_rows(x)
    if a is None or a.strides[1] != 1 or tma_problem(a) or tma_problem(w_arg):
        return None
    probe = GemmOp(a, w_arg, a)  # supports() looks at the operands' dtypes only
    return a if GemmTemplate().supports(probe) is None else None


def f32_gemm_as_conv(op: GemmOp) -> ConvOp | None:
    """An f32 GEMM of an f32 model as a 1x1 convolution over M pixels, or None. The GEMM
    template runs bf16 and f16 only; the implicit-GEMM conv kernel runs f32 on tf32 tensor
    cores (10-bit mantissa, f32 accumulation: about 1e-3 relative, what torch gives with
    torch.backends.cuda.matmul.allow_tf32, not its default full f32), with the same epilogue,
    so an f32 model's linears build instead of being refused. SwiGLU-paired and FP8-scaled
    GEMMs are not f32."""
    from aotpack.kernels.spec import swiglu_group

    if {op.a.dtype, op.b.dtype} != {DType.F32} or swiglu_group(op) or op.b_scale is not None \
            or op.a_scale is not None or not op.b.is_contiguous() or op.a.strides[1] != 1:
        return None
    m, k = op.a.shape
    rows = op.a.strides[0]
    x = TensorArg(op.a.storage, op.a.dtype, (m, 1, 1, k), (rows, rows, rows, 1), op.a.offset)
    return ConvOp(x, op.b, op.out, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, (1, 1),
                  op.epilogue)


def _flatten_rows(arg):
    from aotpack.passes.lower import _flatten_2d

    return _flatten_2d(arg)


def lower_pool(lw, n: Node) -> None:
    a = n.attrs
    x = lw.args[n.inputs[0].name]
    out = lw._new_storage(n.output)
    lw.ops.append(PoolOp(a.kind, x, out, tuple(a.kernel), tuple(a.stride), tuple(a.padding),
                         a.count_include_pad, a.divisor))
