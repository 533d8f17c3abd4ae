"""Torch references of every kernel op, importable without triton.

`env` maps storage name -> flat 1-D torch tensor holding that storage's elements (dtype as
declared). `view(env, arg)` gives the strided view a TensorArg describes; a reference computes in
f32 and writes its result into `view(env, op.out)` (copy_, cast to out dtype).
"""
from __future__ import annotations

from aotpack.kernels.spec import TensorArg


def view(env, arg: TensorArg):
    import torch

    return torch.as_strided(env[arg.storage], arg.shape, arg.strides, arg.offset)


def write(env, arg: TensorArg, value) -> None:
    view(env, arg).copy_(value.to(arg.dtype.to_torch()))
