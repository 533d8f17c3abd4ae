"""Torch reference of GemmOp: f32 accumulation, epilogue steps in order, cast at the end."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import Act, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, GemmOp


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
    if act is Act.RELU6:
        return F.relu6(x)
    if act is Act.HARDSWISH:
        return F.hardswish(x)
    if act is Act.HARDSIGMOID:
        return F.hardsigmoid(x)
    if act is Act.SIGMOID:
        return x.sigmoid()
    raise ValueError(f"unknown activation {act}")


def swiglu(acc, group: int):
    """silu(gate) * up of interleaved accumulator columns (see EpSwiGLU)."""
    import torch.nn.functional as F

    m, n_acc = acc.shape
    pairs = acc.reshape(m, n_acc // (2 * group), 2, group)
    return (F.silu(pairs[:, :, 0]) * pairs[:, :, 1]).reshape(m, n_acc // 2)


def reference(op: GemmOp, env) -> None:
    b = view(env, op.b).float()
    if op.b_scale is not None:  # a quantized weight: dequantize row by row
        b = b * view(env, op.b_scale).float()[:, None]
    a = view(env, op.a).float()
    if op.a_scale is not None:  # an FP8 input with its scale per row
        a = a * view(env, op.a_scale).float()[:, None]
    if op.quantize_a:  # e4m3 activations with a scale per row (GemmOp.quantize_a)
        import torch

        amax = a.abs().amax(dim=1, keepdim=True)
        scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        a = (a / scale).to(torch.float8_e4m3fn).float() * scale
    acc = a @ b.t()
    write(env, op.out, apply_epilogue(acc, op.epilogue, env))


def apply_epilogue(acc, epilogue, env):
    """The f32 [M, N] accumulator after the epilogue steps (GemmOp's and ConvOp's)."""
    for i, step in enumerate(epilogue):
        if isinstance(step, EpSwiGLU):
            if i != 0:
                raise ValueError("EpSwiGLU must be the first epilogue step")
            acc = swiglu(acc, step.group)
            continue
        if isinstance(step, EpBias):
            acc = acc + view(env, step.bias).float()
        elif isinstance(step, EpAct):
            acc = apply_act(acc, step.act)
        elif isinstance(step, EpAdd):
            acc = acc + view(env, step.other).float()
        elif isinstance(step, EpMul):
            acc = acc * view(env, step.other).float()
        elif isinstance(step, EpScale):
            acc = acc * view(env, step.scale).float()  # (1,) or (N,) broadcasts over rows
        else:
            raise TypeError(f"unknown epilogue step {step!r}")
    return acc
