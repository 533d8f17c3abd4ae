"""Torch reference of PointwiseOp: evaluate the expression tree in f32 with broadcasting."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import PointwiseOp, PwConst, PwExpr, PwInput


def _unary(fn: str, x):
    import torch
    import torch.nn.functional as F

    table = {
        "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
        "sigmoid": torch.sigmoid, "relu": F.relu, "silu": F.silu, "abs": torch.abs,
        "recip": torch.reciprocal, "relu6": F.relu6, "hardswish": F.hardswish,
        "hardsigmoid": F.hardsigmoid,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu,
    }
    return table[fn](x)


def _binary(fn: str, a, b):
    import torch

    table = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
    }
    return table[fn](a, b)


UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "silu",
         "abs", "recip", "gelu_tanh", "gelu_erf", "relu6", "hardswish", "hardsigmoid")
BINARY = ("add", "sub", "mul", "div", "max", "min", "pow")


def evaluate(node, inputs):
    import torch

    if isinstance(node, PwInput):
        return inputs[node.index]
    if isinstance(node, PwConst):
        return torch.tensor(node.value, dtype=torch.float32)
    if isinstance(node, PwExpr):
        args = [evaluate(a, inputs) for a in node.args]
        if node.fn in UNARY:
            return _unary(node.fn, *args)
        if node.fn in BINARY:
            return _binary(node.fn, *args)
    raise ValueError(f"bad pointwise node {node!r}")


def reference(op: PointwiseOp, env) -> None:
    inputs = [view(env, a).float() for a in op.inputs]
    out = evaluate(op.expr, inputs)
    write(env, op.out, out.expand(op.out.shape))
