"""Shared planning for the row-wise reduction templates (layernorm, softmax, reduce).

All three reduce the last dim of a 2-D view [R, C]. Two shapes of kernel:
 - whole row in registers (C <= MAX_COLS): x is read once; short rows are packed several per
   program so every program still moves >= 2K elements (all threads busy, 16-byte vectors);
   warps grow with C so each thread keeps 8-32 elements;
 - looped (C > MAX_COLS, e.g. a 50257-word vocabulary): one row per program walks the row in
   LOOP_BLOCK chunks with per-lane f32 accumulators (combined once at the end), re-reading x
   for each later pass (it is in L2 for rows up to a few MB).
Column strides are kernel arguments: a unit stride is compiled in (`int_arg(1)` is a
constexpr), so the contiguous case vectorises, and any strided view still works.
"""
from __future__ import annotations

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import TensorArg
from aotpack.kernels.triton._common import _I32_MAX, int_arg
from aotpack.kernels.triton.compile import I64, ArgValue

MAX_COLS = 16384  # whole row in registers up to here (16 warps x 32 elements per thread)
LOOP_BLOCK = 4096  # chunk of the looped form (8 warps x 16 elements per thread)
ROW_ELEMS = 2048  # short rows: pack rows until a program holds this many elements


def next_pow2(n) -> int:
    """The smallest power of two >= n (>= the largest value of a symbolic n)."""
    n = upper_bound(n)
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def default_config(n_cols, n_rows=None) -> dict:
    """Whole rows (packed up to ROW_ELEMS elements, never more rows than there are) or the
    looped form (symbolic sizes: as for their largest values)."""
    if upper_bound(n_cols) > MAX_COLS:
        return {"BLOCK_C": LOOP_BLOCK, "ROWS": 1, "LOOP": True, "num_warps": 8,
                "num_stages": 1}
    block = next_pow2(n_cols)
    rows = max(1, ROW_ELEMS // block)
    if n_rows is not None:
        rows = min(rows, next_pow2(n_rows))
    warps = 4 if block * rows <= 2048 else 8 if block <= 4096 else 16
    return {"BLOCK_C": block, "ROWS": rows, "LOOP": False, "num_warps": warps, "num_stages": 1}


def config(n_rows: int, n_cols: int, override: dict | None) -> dict:
    cfg = dict(default_config(n_cols, n_rows), **(override or {}))
    if not cfg["LOOP"] and cfg["BLOCK_C"] < upper_bound(n_cols):
        raise ValueError(f"BLOCK_C={cfg['BLOCK_C']} < {n_cols} columns without LOOP")
    return cfg


def check_2d(what: str, arg: TensorArg) -> tuple[int, int]:
    if len(arg.shape) != 2:
        raise ValueError(f"{what}: expected a 2-D view [R, C], got shape {arg.shape}")
    return arg.shape


def check_vector(what: str, arg: TensorArg, n: int) -> None:
    if arg.shape != (n,):
        raise ValueError(f"{what}: expected a [{n}] vector, got shape {arg.shape}")


def view_args(prefix: str, arg: TensorArg) -> dict[str, ArgValue]:
    """{prefix_stride_r, prefix_stride_c} for a 2-D view."""
    return {f"{prefix}_stride_r": int_arg(arg.strides[0]),
            f"{prefix}_stride_c": _col_stride(arg.shape[1], arg.strides[1])}


def _col_stride(n_cols: int, stride: int) -> ArgValue:
    """Kernels index columns in i32 (rows in i64); a column stride whose span does not fit in
    i32 (a transposed view of a huge tensor) is passed as i64 so the products widen."""
    return I64(stride) if upper_bound((n_cols - 1) * abs(stride)) > _I32_MAX else int_arg(stride)


def plan_config(cfg: dict) -> dict:
    """What CompiledKernel.config records (besides num_warps/num_stages)."""
    return {k: cfg[k] for k in ("BLOCK_C", "ROWS", "LOOP")}
