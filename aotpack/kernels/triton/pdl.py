"""Device helpers for programmatic dependent launch (PDL) between a plan's kernels.

A decode step is a chain of short kernels, and the weight-streaming GEMMs in it pay a ramp
each: their first weight bytes are requested only when the kernel before has ended. With PDL
(the runtime launches a kernel the manifest marks `pdl` with programmatic stream
serialization, kept by graph capture) that GEMM's CTAs may start while the kernel before still
runs, request their first weight tiles into L2 (weights are never written by a plan, so reading
them early is safe), and then wait for the producer (`wait_for_producers`) before they read
anything a kernel wrote or write anything. The kernel before lets them start early by calling
`release_dependents` first thing: the dependents launch once every CTA of the releasing grid
has called it (or ended), so they only take SM room its own CTAs do not need.

Rules (docs/manifest.md, a kernel's "pdl"): a kernel marked `pdl` calls
`wait_for_producers` before any load of a run-time tensor and before any store. Releasing is
always safe (a dependent that is not marked `pdl` starts after the grid ends, as without).
Triton's interpreter cannot run PTX: there the helpers do nothing (kernels run one at a time).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.triton._interpret import in_interpreter_process

_INTERPRETED = tl.constexpr(in_interpreter_process())
L2_LINE_BYTES = 128


@triton.jit
def wait_for_producers():
    """Block until the grids this one depends on have ended and their writes are visible (a
    no-op when the kernel was not launched as a programmatic dependent)."""
    if not _INTERPRETED:
        tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def release_dependents():
    """Let the next kernel, if it is a programmatic dependent, start its prologue now."""
    if not _INTERPRETED:
        tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_l2(ptrs):
    """Ask for the 128-byte lines holding `ptrs` (any shape) to be brought into L2; nothing
    waits for them. Every pointer must be in bounds (clamp, do not mask)."""
    if not _INTERPRETED:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
