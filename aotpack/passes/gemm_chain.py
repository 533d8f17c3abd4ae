"""Which nodes a GEMM absorbs as its epilogue (decided on the graph before lowering).

From a LINEAR (or 2-D MATMUL, or CONV: channels-last, so its rows are the pixels) node the chain follows single users while they are:
SWIGLU (first step only, fuse_swiglu.py) → EpSwiGLU, bias-like add ([N] vector) → EpBias,
gelu/silu/relu/relu6/hardswish/hardsigmoid/sigmoid → EpAct, add/mul with a tensor of the output's shape → EpAdd/EpMul, a multiply
by a scale → EpScale, cast → output dtype; and reshapes that keep the last dim and the
contiguous layout (GPT-2 computes [B*S, K] @ [K, N] and views the result back to [B, S, N]
before its bias-free residual add and GELU), which change no byte of the 2-D output. A scale is a Python number (x * c, x / c), or a
constant, or an f32 graph input, of shape [] / [1] (per tensor) or [N] (per channel, leading 1s
allowed). A binary op whose other operand is itself a direct GEMM output is left to *that* GEMM
(an unfused SwiGLU becomes gate+silu, then up*gate), and an operand defined after the GEMM's
position ends the chain (it would not exist yet)."""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.dtypes import DType
from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import EPILOGUE_MAX_STEPS, EPILOGUE_MAX_TENSORS, Act
from aotpack.passes.views import is_reshape

GEMM_ROOTS = (Op.LINEAR, Op.MATMUL, Op.CONV)  # a CONV's output is [N, OH, OW, OC]: rows x OC
_ACTS = {Op.SILU: Act.SILU, Op.RELU: Act.RELU, Op.RELU6: Act.RELU6,
         Op.HARDSWISH: Act.HARDSWISH, Op.HARDSIGMOID: Act.HARDSIGMOID, Op.SIGMOID: Act.SIGMOID}


@dataclass(frozen=True)
class Step:
    """One epilogue step: kind is "swiglu" | "bias" | "act" | "add" | "mul" | "scale" |
    "cast" | "reshape" (nothing to compute). A "scale" has a tensor `operand` or a Python
    number `scale`."""

    kind: str
    node: Node
    operand: Value | None = None
    act: Act | None = None
    scale: float | None = None


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
    ctx = _Context(producers, position, set(graph.constants))
    chains = {}
    for i, n in enumerate(graph.nodes):
        if n.op in GEMM_ROOTS and not is_batched_matmul(n):
            chains[n.output.name] = _follow(n, i, users, outputs, ctx)
    return chains


def is_batched_matmul(n: Node) -> bool:
    """A matmul whose second operand has batch dims: the bmm kernel, not a GEMM chain."""
    return n.op == Op.MATMUL and len(n.inputs[1].shape) > 2


@dataclass(frozen=True)
class _Context:
    producers: dict
    position: dict
    constants: set


_TENSOR_STEPS = ("bias", "add", "mul", "scale")
_FREE_STEPS = ("swiglu", "cast", "reshape")  # not an epilogue step kind of the kernels


def _follow(root, index, users, outputs, ctx: _Context) -> Chain:
    steps: list[Step] = []
    value = root.output
    own_bias = int(root.op == Op.LINEAR and len(root.inputs) == 3)  # lower.py's first EpBias
    room = [EPILOGUE_MAX_STEPS - own_bias, EPILOGUE_MAX_TENSORS - own_bias]
    while value.name not in outputs:
        us = users.get(value.name, [])
        if len(us) != 1:
            break
        n = us[0]
        if n.op == Op.SWIGLU:  # it turns 2N columns into N: only before any other step
            ok = not steps and root.op == Op.LINEAR and len(root.inputs) == 2
            step = Step("swiglu", n) if ok else None
        else:
            step = (_reshape_step(n, value) or _scale_step(n, value, ctx)
                    or _step(n, value, index, ctx))
        if step is None or not _fits(step, room):  # the rest: pointwise ops after the GEMM
            break
        steps.append(step)
        value = n.output
    while steps and steps[-1].kind == "reshape":
        steps.pop()  # a trailing view is the chain end's view, lowered as one
    return Chain(root, tuple(steps))


def _fits(step: Step, room: list[int]) -> bool:
    """Whether the kernel's epilogue has room for `step` (room: [steps, tensor operands]
    left, updated when it does). MobileBERT's NoNorm after a residual add made bias, add, a
    per-channel scale and a second bias: four tensor operands, one more than a kernel takes."""
    if step.kind in _FREE_STEPS:
        return True
    need = (1, int(step.kind in _TENSOR_STEPS))
    if room[0] < need[0] or room[1] < need[1]:
        return False
    room[0], room[1] = room[0] - need[0], room[1] - need[1]
    return True


def _reshape_step(n: Node, value: Value) -> Step | None:
    """A view that only regroups the rows of a contiguous [.., N] value (same last dim)."""
    if (n.op != Op.AS_STRIDED or not n.attrs.shape or not value.shape
            or n.attrs.shape[-1] != value.shape[-1] or not is_reshape(n.attrs, value.shape)):
        return None
    return Step("reshape", n)


def _scale_step(n: Node, value: Value, ctx: _Context) -> Step | None:
    """x * c, x / c (c a number), or x * s with s a constant / f32 graph input of shape [],
    [1] or [N] (see the module doc)."""
    c = scalar_factor(n)
    if c is not None:
        return Step("scale", n, scale=c)
    if n.op != Op.MUL or n.attrs.scalar is not None or len(n.inputs) != 2 \
            or n.inputs[0] == n.inputs[1] or n.output.shape != value.shape:
        return None
    other = n.inputs[1] if n.inputs[0] == value else n.inputs[0]
    if other.name in ctx.producers:
        return None  # computed at run time: an EpMul (same shape) or nothing
    if other.name not in ctx.constants and other.dtype != DType.F32:
        return None  # a graph input would need a conversion kernel to become f32
    dims = _without_leading_ones(other.shape)
    if not other.dtype.is_float or dims not in ([], [value.shape[-1]]):
        return None
    return Step("scale", n, other)


def scalar_factor(n: Node) -> float | None:
    """c for x * c, 1/c for x / c (c a Python number, nonzero for a division), else None."""
    if n.op not in (Op.MUL, Op.DIV) or n.attrs.scalar is None or n.attrs.scalar_first:
        return None
    c = float(n.attrs.scalar)
    if n.op == Op.MUL:
        return c
    return None if c == 0.0 else 1.0 / c


def _step(n: Node, value: Value, index, ctx: _Context) -> Step | None:
    producers, position = ctx.producers, ctx.position
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
    return _without_leading_ones(other.shape) == [value.shape[-1]]


def _without_leading_ones(shape) -> list:
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return dims
