"""Lowering of CONV chains and POOL nodes to ConvOp / PoolOp (called from lower.py).

A CONV's weight is a constant (the frontend refuses others), packed here once at build time in
the layout its kernel reads (spec.ConvOp); the unpacked constant is then read by no kernel and
is not stored. The epilogue is built as a GEMM's (bias, activations, residual add, ...).

A pointwise convolution (1x1, stride 1, no padding, one group) over a channels-last tensor is a
plain GEMM of the [pixels, channels] view by the [OC, C] weight: it becomes a GemmOp, so it
runs the GEMM template (TMA loads, its heuristics, its tuned configs and split-K for the few
rows of a squeeze-excitation FC) instead of the implicit GEMM's gathers."""
from __future__ import annotations

from aotpack.ir.graph import Node, Value
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
    x = lw.args[x_val.name]
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
    gemm_a = _pointwise_gemm_operand(x, w_arg, a, (kh, kw)) if len(out2d.shape) == 2 else None
    if gemm_a is not None:
        lw.ops.append(GemmOp(gemm_a, w_arg, out2d, tuple(epilogue)))
        return
    out_hw = tuple(root.output.shape[1:3])
    lw.ops.append(ConvOp(x, w_arg, out2d, (kh, kw), tuple(a.stride), tuple(a.padding),
                         tuple(a.dilation), a.groups, out_hw, tuple(epilogue)))


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


def _flatten_rows(arg):
    from aotpack.passes.lower import _flatten_2d

    return _flatten_2d(arg)


def lower_pool(lw, n: Node) -> None:
    a = n.attrs
    x = lw.args[n.inputs[0].name]
    out = lw._new_storage(n.output)
    lw.ops.append(PoolOp(a.kind, x, out, tuple(a.kernel), tuple(a.stride), tuple(a.padding),
                         a.count_include_pad, a.divisor))
