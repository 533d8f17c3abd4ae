"""Kernel templates: one per fused pattern. Each module gives `run_reference(op, env)` (torch, the
semantics) and `compile(op, target) -> list[Launch]`. This registry dispatches by op type and
imports a template (and triton) only when it is used."""
from __future__ import annotations

import importlib

from aotpack.kernels.spec import (
    AttentionOp, EmbeddingOp, GemmOp, KernelOp, LayerNormOp, PointwiseOp, ReduceOp, RMSNormOp,
    RopeOp, SoftmaxOp, Target, SM90,
)

_TEMPLATES = {
    GemmOp: "aotpack.kernels.triton.gemm",
    AttentionOp: "aotpack.kernels.triton.attention",
    RMSNormOp: "aotpack.kernels.triton.rmsnorm",
    LayerNormOp: "aotpack.kernels.triton.layernorm",
    SoftmaxOp: "aotpack.kernels.triton.softmax",
    ReduceOp: "aotpack.kernels.triton.reduce",
    RopeOp: "aotpack.kernels.triton.rope",
    EmbeddingOp: "aotpack.kernels.triton.embedding",
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


GEMM_BACKENDS = ("triton", "cutedsl", "auto")
# auto: CuTeDSL only where the H200 measured it faster end to end (2026-11-30): the MLP at
# M=4096 (1.52 vs 1.57 ms); the Llama block at M=2048 was slower with it (1.45 vs 1.37 ms), and
# decode-sized M needs split-K, which it lacks. Tuning (per shape) replaces this rule.
AUTO_CUTEDSL_MIN_M = 4096


class BackendCannotCompile(ValueError):
    """The chosen backend cannot run this op (a user choice to revisit, not a compiler bug)."""


def compiler(gemm_backend: str = "triton"):
    """A `compile(op, target)` whose GemmOps go to `gemm_backend`; every other op keeps its
    Triton template. `auto` picks per GEMM: CuTeDSL where it is installed and supports the op
    and M >= AUTO_CUTEDSL_MIN_M (where it measured faster), else Triton.
    Triton stays the default until tuning measures the choice per shape. Raises ValueError
    (unknown backend) or RuntimeError (nvidia-cutlass-dsl missing) with what to do."""
    if gemm_backend == "triton":
        return compile
    if gemm_backend not in GEMM_BACKENDS:
        raise ValueError(f"unknown GEMM backend {gemm_backend!r}: {' or '.join(GEMM_BACKENDS)}")
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        if gemm_backend == "auto":
            return compile
        raise RuntimeError("the cutedsl GEMM backend needs CuTeDSL on the build host: "
                           "pip install nvidia-cutlass-dsl==4.8.1 (or use --gemm-backend triton)")
    cute_build.ensure_env()  # before anything imports cutlass: the cubins must be sm_90a
    from aotpack.kernels.cutedsl import compile as cute_gemm

    def compile_fn(op: KernelOp, target: Target = SM90):
        if not isinstance(op, GemmOp):
            return compile(op, target)
        why = cute_gemm.supports(op)
        if gemm_backend == "auto":
            use_cute = why is None and op.out.shape[0] >= AUTO_CUTEDSL_MIN_M
            return cute_gemm.compile(op, target) if use_cute else compile(op, target)
        if why is not None:  # say so rather than silently mixing backends
            raise BackendCannotCompile(f"the cutedsl GEMM cannot compile {op.out.shape} "
                                       f"{op.a.dtype.value} GEMM: {why} "
                                       f"(use --gemm-backend triton or auto)")
        return cute_gemm.compile(op, target)

    return compile_fn
