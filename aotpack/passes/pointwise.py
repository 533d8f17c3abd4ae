"""Pointwise regions: DAGs of elementwise nodes that become one PointwiseOp.

A node is *absorbed* into the region of its consumers when it is elementwise, not a graph
output, and every user is elementwise, lowered as pointwise (not a GEMM epilogue) and in one
and the same region (a value two parts of one expression read: atan2's decomposition reads its
quotient a dozen times; x * x + exp(x * x) reads x * x twice). Every other elementwise node is
a region *root*: its output is materialized and the DAG of absorbed producers behind it is its
expression (the code generator computes a repeated subexpression once). The expression
*tree* repeats a shared value, so one whose tree is already large (over SHARED_TREE_LIMIT
nodes) stays a root of its own; the small producers it shares with the rest of its former
region are then computed by both kernels (a few elementwise ops again, cheaper than storing
and loading them), each at most SHARED_TREE_LIMIT nodes, or a root too."""
from __future__ import annotations

from collections import Counter

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


SHARED_TREE_LIMIT = 256  # nodes of a shared value's expression tree that may be repeated


def absorbed_nodes(graph: Graph, gemm_nodes: set[str]) -> set[str]:
    """Output names of elementwise nodes folded into a consumer's expression."""
    users = graph.users()
    outputs = graph.output_names()
    reads = Counter(v.name for n in graph.nodes for v in n.inputs)  # y * y reads y twice
    absorbed = _regions(graph, users, gemm_nodes, outputs)
    return absorbed - _large_shared(graph, reads, absorbed)


def _regions(graph: Graph, users, gemm_nodes: set[str], outputs) -> set[str]:
    """The nodes whose users are all elementwise and in one region."""
    region: dict[str, str] = {}  # absorbed node -> the root whose expression holds it
    for n in reversed(graph.nodes):  # users before producers: their regions are known
        if not _absorbable(n, gemm_nodes, outputs):
            continue
        us = users.get(n.output.name, [])
        if not us or any(u.op not in O.ELEMENTWISE or len(u.outputs) != 1
                         or u.output.name in gemm_nodes for u in us):
            continue
        roots = {region.get(u.output.name, u.output.name) for u in us}
        if len(roots) == 1:
            region[n.output.name] = roots.pop()
    return set(region)


def _absorbable(n: Node, gemm_nodes: set[str], outputs) -> bool:
    if n.op not in O.ELEMENTWISE or len(n.outputs) != 1:
        return False
    name = n.output.name
    if name in gemm_nodes or name in outputs:
        return False
    dtype = n.output.dtype
    if dtype.is_float or dtype == DType.BOOL:  # (a cast to bool is x != 0)
        return True
    if n.op == Op.CAST:  # to an integer: a truncation must be stored, a widening need not
        src = n.inputs[0].dtype
        widening = not src.is_float and src.nbytes <= dtype.nbytes
        return src == DType.BOOL or (widening and dtype.nbytes >= 4)
    # arithmetic in 8/16-bit integers wraps in torch, not in the kernel's int64: store it
    return dtype.nbytes >= 4


def _large_shared(graph: Graph, reads: Counter, absorbed: set[str]) -> set[str]:
    """Absorbed values read more than once whose expression trees pass SHARED_TREE_LIMIT
    (each decided after its producers, so the sizes it sees are final)."""
    tree: dict[str, int] = {}
    large: set[str] = set()
    for n in graph.nodes:
        if len(n.outputs) != 1:
            continue
        name = n.output.name
        tree[name] = 1 + sum(tree.get(v.name, 1) for v in n.inputs
                             if v.name in absorbed and v.name not in large)
        if name in absorbed and reads[name] > 1 and tree[name] > SHARED_TREE_LIMIT:
            large.add(name)
    return large


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
