"""Kernel templates: one per fused pattern. Each module gives `run_reference(op, env)` (torch, the
semantics) and `compile(op, target) -> list[Launch]`. This registry dispatches by op type and
imports a template (and triton) only when it is used."""
from __future__ import annotations

import importlib

from aotpack.kernels.spec import (
    AttentionOp, GemmOp, KernelOp, PointwiseOp, RMSNormOp, RopeOp, Target, SM90,
)

_TEMPLATES = {
    GemmOp: "aotpack.kernels.triton.gemm",
    AttentionOp: "aotpack.kernels.triton.attention",
    RMSNormOp: "aotpack.kernels.triton.rmsnorm",
    RopeOp: "aotpack.kernels.triton.rope",
    PointwiseOp: "aotpack.kernels.triton.pointwise",
}
# References live beside their templates but must import without triton.
_REFERENCES = {k: v.replace(".triton.", ".reference.") for k, v in _TEMPLATES.items()}


def _module(table, op):
    try:
        name = table[type(op)]
    except KeyError:
        raise TypeError(f"no kernel template for {type(op).__name__}") from None
    return importlib.import_module(name)


def run_reference(op: KernelOp, env) -> None:
    """Execute `op` with torch on the tensors in `env` (see aotpack.kernels.reference)."""
    _module(_REFERENCES, op).reference(op, env)


def compile(op: KernelOp, target: Target = SM90):
    """Cubins + launches for `op` on `target` (needs triton; no GPU)."""
    return _module(_TEMPLATES, op).compile(op, target)
