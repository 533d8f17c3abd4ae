"""Torch reference of GemmOp: f32 accumulation, epilogue steps in order, cast at the end."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import Act, EpAct, EpAdd, EpBias, EpMul, GemmOp


def apply_act(x, act: Act):
    import torch.nn.functional as F

    if act is Act.GELU_TANH:
        return F.gelu(x, approximate="tanh")
    if act is Act.GELU_ERF:
        return F.gelu(x)
    if act is Act.SILU:
        return F.silu(x)
    if act is Act.RELU:
        return F.relu(x)
    raise ValueError(f"unknown activation {act}")


def reference(op: GemmOp, env) -> None:
    acc = view(env, op.a).float() @ view(env, op.b).float().t()
    for step in op.epilogue:
        if isinstance(step, EpBias):
            acc = acc + view(env, step.bias).float()
        elif isinstance(step, EpAct):
            acc = apply_act(acc, step.act)
        elif isinstance(step, EpAdd):
            acc = acc + view(env, step.other).float()
        elif isinstance(step, EpMul):
            acc = acc * view(env, step.other).float()
        else:
            raise TypeError(f"unknown epilogue step {step!r}")
    write(env, op.out, acc)
