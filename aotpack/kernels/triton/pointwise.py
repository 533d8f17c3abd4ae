"""Pointwise kernels generated from a PointwiseOp expression tree.

The generated kernel is one flat loop over the output's elements, BLOCK per program. Layouts are
baked into the source as constants: the output's multi-index is recovered with divisions by
constant extents, and each input is addressed through its own broadcast strides (0 on broadcast
dims). Dims that every operand walks contiguously are merged first, so the common cases (same
shape contiguous, a row vector broadcast over rows) become 1-D or 2-D loops whose addresses
Triton can prove contiguous and 16-byte aligned: vector loads/stores.

Math is f32; inputs are widened on load, the result is cast on store. Triton's @jit needs the
source in a real file, so it is written under the cache dir (AOTPACK_CACHE_DIR/kernels) and
imported; the kernel is named by a hash of (expression, dtypes, layouts), so identical ops
share one file and one cubin.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from aotpack import knobs
from aotpack.kernels.spec import PointwiseOp, PwConst, PwExpr, PwInput
from aotpack.kernels.triton._common import KernelPlan, entry_points
from aotpack.kernels.triton._pointwise_codegen import (
    Layout, coalesce, fn_names, kernel_source, needs_wide_index,
)
from aotpack.ir.sym import sym_max, upper_bound
from aotpack.kernels.triton.compile import I32, I64, Const, Ptr, cdiv

CODEGEN_VERSION = 3  # 2: int64 compute for all-integer expressions; 3: -0.0 from neg
BLOCK = 2048
NUM_WARPS = 8  # 8 elements per thread: one 16-byte bf16 vector


def _layout(op: PointwiseOp) -> Layout:
    return coalesce(op.out.shape, op.out.strides,
                    [(a.shape, a.strides) for a in op.inputs])


def kernel_name(op: PointwiseOp) -> str:
    layout = _layout(op)
    template = layout.template()
    key = (CODEGEN_VERSION, BLOCK, op.expr, [a.dtype.value for a in op.inputs],
           op.out.dtype.value, template)
    if template != layout and needs_wide_index(layout, BLOCK):  # static layouts: as before
        key += ("wide",)
    key = repr(key)
    return "pointwise_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _source_dir() -> Path:
    return knobs.cache_dir() / "kernels"


def _write_once(path: Path, text: str) -> None:
    """Atomic write (parallel builds may generate the same kernel at the same time)."""
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def generated_kernel(op: PointwiseOp):
    """The @triton.jit function for `op`: source generated, written under the cache dir,
    imported (memoised per file, so a changed AOTPACK_CACHE_DIR gets its own copy)."""
    name = kernel_name(op)
    path = _source_dir() / f"{name}.py"
    _write_once(path, kernel_source(name, op.expr, [a.dtype for a in op.inputs], _layout(op),
                                    op.out.dtype, BLOCK))
    module_name = f"aotpack_generated_{name}"
    module = sys.modules.get(module_name)
    if module is None or Path(module.__file__) != path:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    return getattr(module, name)


def plan(op: PointwiseOp, config: dict | None = None) -> KernelPlan:
    """The launch for `op` (`config` is accepted for a uniform interface; BLOCK is fixed)."""
    if not isinstance(op.expr, (PwExpr, PwInput, PwConst)):
        raise TypeError(f"pointwise: bad expression {op.expr!r}")
    fn = generated_kernel(op)
    args = {"out_ptr": Ptr(op.out)}
    args.update({f"in{i}_ptr": Ptr(a) for i, a in enumerate(op.inputs)})
    args.update({f"p{i}": I64(v) if upper_bound(abs(v)) >= 2**31 else I32(v)
                 for i, v in enumerate(_layout(op).params())})
    args["BLOCK"] = Const(BLOCK)
    grid = (sym_max(1, cdiv(op.out.numel, BLOCK)), 1, 1)
    if upper_bound(grid[0]) >= 2**31:
        raise ValueError(f"pointwise: {op.out.numel} elements is too many for one grid")
    fused = ("pointwise",) + tuple(fn_names(op.expr, []))
    return KernelPlan(fn, args, grid, NUM_WARPS, 1, fused, {"BLOCK": BLOCK})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)