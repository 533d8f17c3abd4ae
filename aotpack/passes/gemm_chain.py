"""Which nodes a GEMM absorbs as its epilogue (decided on the graph before lowering).

From a LINEAR (or 2-D MATMUL) node the chain follows single users while they are:
bias-like add ([N] vector) → EpBias, gelu/silu/relu → EpAct, add/mul with a tensor of the
output's shape → EpAdd/EpMul, cast → output dtype. A binary op whose other operand is itself a
direct GEMM output is left to *that* GEMM (so SwiGLU becomes gate+silu, then up*gate), and an
operand defined after the GEMM's position ends the chain (it would not exist yet)."""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import Act

GEMM_ROOTS = (Op.LINEAR, Op.MATMUL)
_ACTS = {Op.SILU: Act.SILU, Op.RELU: Act.RELU}


@dataclass(frozen=True)
class Step:
    """One epilogue step: kind is "bias" | "act" | "add" | "mul" | "cast"."""

    kind: str
    node: Node
    operand: Value | None = None
    act: Act | None = None


@dataclass(frozen=True)
class Chain:
    root: Node
    steps: tuple[Step, ...]

    @property
    def end(self) -> Value:
        return self.steps[-1].node.output if self.steps else self.root.output

    def nodes(self) -> list[Node]:
        return [self.root] + [s.node for s in self.steps]


def find_chains(graph: Graph) -> dict[str, Chain]:
    """root node output name -> Chain, for every GEMM root."""
    users = graph.users()
    producers = graph.producers()
    position = {n.output.name: i for i, n in enumerate(graph.nodes)}
    outputs = graph.output_names()
    chains = {}
    for i, n in enumerate(graph.nodes):
        if n.op in GEMM_ROOTS:
            chains[n.output.name] = _follow(n, i, users, producers, position, outputs)
    return chains


def _follow(root, index, users, producers, position, outputs) -> Chain:
    steps: list[Step] = []
    value = root.output
    while value.name not in outputs:
        us = users.get(value.name, [])
        if len(us) != 1:
            break
        step = _step(us[0], value, index, producers, position)
        if step is None:
            break
        steps.append(step)
        value = us[0].output
    return Chain(root, tuple(steps))


def _step(n: Node, value: Value, index, producers, position) -> Step | None:
    if n.op == Op.CAST:
        return Step("cast", n) if n.output.dtype.is_float else None
    if n.op in _ACTS:
        return Step("act", n, act=_ACTS[n.op])
    if n.op == Op.GELU:
        return Step("act", n, act=Act.GELU_TANH if n.attrs.approximate == "tanh"
                    else Act.GELU_ERF)
    if n.op not in (Op.ADD, Op.MUL) or n.attrs.scalar is not None or len(n.inputs) != 2:
        return None
    if n.inputs[0] == n.inputs[1]:
        return None
    other = n.inputs[1] if n.inputs[0] == value else n.inputs[0]
    other_node = producers.get(other.name)
    if other_node is not None and (other_node.op in GEMM_ROOTS
                                   or position[other.name] > index):
        return None
    if n.output.shape != value.shape:
        return None  # the other operand would enlarge the output: not an epilogue
    if tuple(other.shape) == tuple(value.shape):
        return Step("add" if n.op == Op.ADD else "mul", n, other)
    if n.op == Op.ADD and _is_row_vector(other, value):
        return Step("bias", n, other)
    return None


def _is_row_vector(other: Value, value: Value) -> bool:
    dims = list(other.shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return dims == [value.shape[-1]]
