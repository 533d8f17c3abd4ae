"""Run our @triton.jit kernels through Triton's CPU interpreter (numerics checks without a GPU).

Triton picks interpreter or compiler when a function is *decorated* (`@triton.jit` reads
TRITON_INTERPRET), and that includes its own standard library (`tl.sum`, `tl.max`, `tl.zeros`
are @jit functions too). So interpretation is only reliable in a process that had
TRITON_INTERPRET=1 before triton was imported. `run_interpreted_batch` therefore:
 - runs in this process when that is already the case (the kernels are InterpretedFunctions);
 - otherwise runs the jobs in one child Python started with TRITON_INTERPRET=1 (the op
   dataclasses and the CPU tensors travel through a temporary torch.save file) and copies the
   results back into the caller's tensors. One child for many jobs: startup is ~2 s.
Before running, three small fixes to Triton 3.6's interpreter are applied (each documented
below, each only in interpreter runs): scalar-to-int with numpy >= 2.4, bf16 `tl.dot`, and
round-to-nearest-even f32 -> bf16 casts like the GPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from aotpack import knobs


def in_interpreter_process() -> bool:
    """True when this process's triton was imported with TRITON_INTERPRET=1."""
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return bool(triton.knobs.runtime.interpret) and isinstance(tl.zeros, InterpretedFunction)


def run_plan_here(plan, env) -> None:
    """Launch a KernelPlan with the interpreter in this (interpreter) process."""
    from aotpack.kernels.triton._common import torch_args

    plan.fn[plan.grid](**torch_args(plan, env))


def _patch_scalar_index() -> None:
    """Triton 3.6's interpreter turns a scalar tensor into an int with `int(array)`, and its
    scalars are 1-element 1-D arrays, which numpy >= 2.4 refuses: every `range(lo, hi)` over
    runtime bounds then fails. Use `.item()` instead (same value, any numpy)."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_aotpack_patched", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patch_lang_tensor._aotpack_patched = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def _patch_bf16_dot() -> None:
    """Triton 3.6's interpreter keeps bf16 as raw uint16 bits and `tl.dot` multiplies those bits
    as integers. Widen bf16 operands to f32 first (exact), then multiply-accumulate in f32."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "_aotpack_patched", False):
        return

    def widen(handle):
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        bits = handle.data.astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    create_dot._aotpack_patched = True
    builder.create_dot = create_dot


def _patch_bf16_rounding() -> None:
    """Triton 3.6's interpreter casts f32 -> bf16 by truncation; the GPU (cvt.rn.bf16.f32)
    rounds to nearest even. Round like the GPU so the checks measure the kernel, not the cast."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl
    if getattr(original, "_aotpack_patched", False):
        return

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return original(self, src, dst_type)
        bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(src.data)
        rounded[nan] = 0x7FC0
        return interpreter.TensorHandle(rounded, tl.bfloat16)

    cast_impl._aotpack_patched = True
    builder.cast_impl = cast_impl


def _run_jobs_here(jobs) -> None:
    _patch_scalar_index()
    _patch_bf16_dot()
    _patch_bf16_rounding()
    from aotpack.kernels.templates import template_for

    for op, env, config, *point in jobs:  # point: the dims of a symbolic op
        module = template_for(op).triton()  # the registry names each op's kernel module
        module.run_plan_interpreted_here(op, env, config, *point)


def run_interpreted_batch(jobs, timeout: float = 1800) -> None:
    """jobs: [(op, env, config or None[, point])]; every env (storage -> flat CPU tensor) is
    updated in place with what the kernel wrote. A symbolic op needs its `point` (the dims'
    values) and a complete config."""
    jobs = list(jobs)
    if not jobs:
        return
    if in_interpreter_process():
        _run_jobs_here(jobs)
        return
    import torch

    repo_root = str(Path(__file__).resolve().parents[3])
    with tempfile.TemporaryDirectory(prefix="aotpack-interp-") as tmp:
        job_file, result_file = os.path.join(tmp, "jobs.pt"), os.path.join(tmp, "envs.pt")
        torch.save(jobs, job_file)
        child_env = knobs.child_environment(TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
            p for p in (repo_root, knobs.value("PYTHONPATH")) if p))
        proc = subprocess.run(
            [sys.executable, "-m", "aotpack.kernels.triton._interpret", job_file, result_file],
            env=child_env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError("interpreter child failed:\n" + proc.stderr[-6000:])
        envs = torch.load(result_file, weights_only=False)
    for (_, env, *_), result in zip(jobs, envs):
        for name, tensor in env.items():
            tensor.copy_(result[name])


def _child_main(job_file: str, result_file: str) -> None:
    import torch

    if not in_interpreter_process():
        raise SystemExit("aotpack interpreter child: TRITON_INTERPRET=1 was not in effect")
    jobs = torch.load(job_file, weights_only=False)
    _run_jobs_here(jobs)
    torch.save([env for _, env, *_ in jobs], result_file)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
