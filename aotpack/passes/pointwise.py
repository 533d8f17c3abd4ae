"""Pointwise regions: trees of elementwise nodes that become one PointwiseOp.

A node is *absorbed* into its consumer when it is elementwise, has exactly one user, that user
is elementwise and lowered as pointwise (not a GEMM epilogue), and it is not a graph output.
Every other elementwise node is a region *root*: its output is materialized and the tree of
absorbed producers behind it is its expression."""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import PwConst, PwExpr, PwInput

_UNARY_FN = {
    Op.NEG: "neg", Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt",
    Op.RECIP: "recip", Op.ABS: "abs", Op.SIN: "sin", Op.COS: "cos", Op.TANH: "tanh",
    Op.SIGMOID: "sigmoid", Op.RELU: "relu", Op.SILU: "silu", Op.RELU6: "relu6",
    Op.HARDSWISH: "hardswish", Op.HARDSIGMOID: "hardsigmoid", Op.ERF: "erf", Op.LOG1P: "log1p",
    Op.LOG2: "log2", Op.EXP2: "exp2",
    Op.EXPM1: "expm1", Op.SIGN: "sign", Op.FLOOR: "floor", Op.CEIL: "ceil", Op.TRUNC: "trunc",
    Op.ROUND: "round",
}
_BINARY_FN = {Op.ADD: "add", Op.SUB: "sub", Op.MUL: "mul", Op.DIV: "div", Op.FLOORDIV: "floordiv", Op.MAX: "max",
              Op.MIN: "min", Op.POW: "pow", Op.EQ: "eq", Op.NE: "ne", Op.LT: "lt",
              Op.LE: "le", Op.GT: "gt", Op.GE: "ge", Op.AND: "and", Op.OR: "or"}


def absorbed_nodes(graph: Graph, gemm_nodes: set[str]) -> set[str]:
    """Output names of elementwise nodes folded into a consumer's expression."""
    users = graph.users()
    outputs = graph.output_names()
    absorbed = set()
    for n in graph.nodes:
        name = n.output.name
        if n.op not in O.ELEMENTWISE or name in gemm_nodes or name in outputs:
            continue
        if n.op == Op.CAST and not n.output.dtype.is_float and n.output.dtype != DType.BOOL:
            continue  # the truncation must happen: store it (a cast to bool is x != 0)
        us = users.get(name, [])
        if len(us) == 1 and us[0].op in O.ELEMENTWISE and us[0].output.name not in gemm_nodes:
            absorbed.add(name)
    return absorbed


def build_expr(root: Node, producers, absorbed: set[str], leaves: list[Value]):
    """The PwNode of `root`; `leaves` collects the region's input values (PwInput order)."""
    def operand(v: Value):
        n = producers.get(v.name)
        if n is not None and v.name in absorbed:
            return node_expr(n)
        if v not in leaves:
            leaves.append(v)
        return PwInput(leaves.index(v))

    def node_expr(n: Node):
        args = [operand(v) for v in n.inputs]
        if n.op == Op.CAST and n.output.dtype == DType.BOOL:
            return PwExpr("ne", (args[0], PwConst(0.0)))
        if n.op == Op.CAST:
            return args[0]  # computed in f32; the cast happens when the result is stored
        if n.op == Op.NOT:
            return PwExpr("not", (args[0],))
        if n.op == Op.WHERE:
            return PwExpr("where", tuple(args))
        if n.op == Op.GELU:
            return PwExpr("gelu_tanh" if n.attrs.approximate == "tanh" else "gelu_erf",
                          (args[0],))
        if n.op in _UNARY_FN:
            return PwExpr(_UNARY_FN[n.op], (args[0],))
        if n.attrs.scalar is not None:
            c = PwConst(float(n.attrs.scalar))
            args = [c, args[0]] if n.attrs.scalar_first else [args[0], c]
        return PwExpr(_BINARY_FN[n.op], tuple(args))

    return node_expr(root)


def identity_expr():
    return PwInput(0)
