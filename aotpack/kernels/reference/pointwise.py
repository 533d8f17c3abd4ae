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
        "hardsigmoid": F.hardsigmoid, "erf": torch.erf, "log1p": torch.log1p,
        "log2": torch.log2, "exp2": torch.exp2,
        "expm1": torch.expm1, "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil,
        "trunc": torch.trunc, "round": torch.round,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu,
        "not": lambda t: (t == 0).to(t.dtype),
    }
    return table[fn](x)


def _binary(fn: str, a, b):
    import torch

    table = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "floordiv": lambda x, y: torch.div(x, y, rounding_mode="floor"),
        "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
        "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
        "ge": torch.ge, "and": lambda x, y: (x != 0) & (y != 0),
        "or": lambda x, y: (x != 0) | (y != 0),
    }
    out = table[fn](a, b)
    # comparisons and logic: 1 / 0 in the compute type, as the kernel
    return out.to(torch.promote_types(a.dtype, b.dtype)) if out.dtype == torch.bool else out


UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "silu",
         "abs", "recip", "gelu_tanh", "gelu_erf", "relu6", "hardswish", "hardsigmoid", "not",
         "erf", "log2", "exp2", "log1p", "expm1", "sign", "floor", "ceil", "trunc", "round")
BINARY = ("add", "sub", "mul", "div", "floordiv", "max", "min", "pow", "eq", "ne", "lt", "le",
          "gt", "ge", "and", "or")


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
        if node.fn == "where":
            return torch.where(args[0] != 0, args[1], args[2])
    raise ValueError(f"bad pointwise node {node!r}")


def reference(op: PointwiseOp, env) -> None:
    # f32 as the kernel computes, or f64 (exact for integers below 2**53) when the kernel runs
    # an all-integer expression in int64
    from aotpack.kernels.triton._pointwise_codegen import integer_exact

    wide = integer_exact(op.expr, [a.dtype for a in op.inputs], op.out.dtype)
    inputs = [view(env, a).double() if wide else view(env, a).float() for a in op.inputs]
    out = evaluate(op.expr, inputs)
    write(env, op.out, out.expand(op.out.shape))
