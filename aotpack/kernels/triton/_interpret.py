"""aotpack's Triton kernels under Triton's CPU interpreter: what the kernels themselves need.

Triton picks interpreter or compiler when a function is *decorated* (`@triton.jit` reads
TRITON_INTERPRET), and that includes its own standard library, so a process either interprets
every kernel or none (`in_interpreter_process`; fp8.py picks its conversion by it). In such a
process a plan is launched with `run_plan_here`, after `patch_interpreter()` has fixed three
things in Triton 3.6's interpreter (each documented below, each only in interpreter runs):
scalar-to-int with numpy >= 2.4, bf16 `tl.dot`, and round-to-nearest-even f32 -> bf16 casts like
the GPU. The harness that runs jobs in such a process (a child Python started with
TRITON_INTERPRET=1) is test code: tests/support/interpret.py.
"""
from __future__ import annotations


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


def patch_interpreter() -> None:
    """Apply the three fixes above (each once per process); call before running a kernel in
    an interpreter process."""
    _patch_scalar_index()
    _patch_bf16_dot()
    _patch_bf16_rounding()
