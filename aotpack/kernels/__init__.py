"""Kernel templates: one per kind of kernel op, behind one contract (templates.py). This module
keeps the short entry points: the torch reference of an op, and the compile of a static op with
its heuristic config (a build goes through variants.py, which also handles symbolic ops)."""
from __future__ import annotations

from aotpack.kernels.gemm_template import AUTO_CUTEDSL_MIN_M, GEMM_BACKENDS, check_backend  # noqa: F401
from aotpack.kernels.spec import KernelOp, Target, SM90
from aotpack.kernels.templates import (  # noqa: F401
    BackendCannotCompile, Template, template_for, templates,
)


def run_reference(op: KernelOp, env) -> None:
    """Execute `op` with torch on the tensors in `env` (see aotpack.kernels.reference)."""
    template_for(op).reference(op, env)


def compile(op: KernelOp, target: Target = SM90):
    """Cubins + launches for a static `op` on `target` with its heuristic config (needs triton;
    no GPU)."""
    return compiler("triton")(op, target)


def compiler(gemm_backend: str = "triton"):
    """A `compile(op, target)` for static ops whose GEMMs get their default config on
    `gemm_backend` (triton, cutedsl or auto: CuTeDSL where it is installed, supports the op and
    M >= AUTO_CUTEDSL_MIN_M, where it measured faster) and every other op its Triton template.
    Raises ValueError (unknown backend) or RuntimeError (nvidia-cutlass-dsl missing) with what
    to do."""
    check_backend(gemm_backend)

    def compile_fn(op: KernelOp, target: Target = SM90):
        t = template_for(op)
        return t.compile(op, t.default_config(op, target, gemm_backend), target)

    return compile_fn
