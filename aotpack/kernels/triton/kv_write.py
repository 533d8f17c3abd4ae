"""A decoder layer's KV write in one launch (KvWriteOp): the query's rotary embedding, the
new keys rotated and stored into the key cache, the new values stored into the value cache.

At decode each of the four small ops it replaces was its own launch of ~1.2-1.8 us on the
H200 for a few kilobytes (Llama-3.2-1B: 64 launches, ~90 us of a 1.06 ms step); one launch
does the same bytes. Programs: grid (row blocks, Hq + Hkv + value column blocks); program
column h < Hq rotates query head h, the next Hkv rotate key heads into the cache, the rest
copy BLOCK_V value columns. Rows are the step's B*S tokens (r = b*S + s); `rows[r]` is the
cache row a token writes, skipped outside [0, N) as the row scatter does.
The rotation is the rope kernel's (rope.rope_rows): rotate-half or interleaved, of the first
rotary_dim dims of a head, the rest copied. A layer without rope (SmolLM3's NoPE layers) has
no query programs and copies its key heads: the two cache stores still take one launch.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import KvWriteOp
from aotpack.kernels.triton._common import (
    KernelPlan, entry_points, int_arg, require_unit_inner_stride,
)
from aotpack.kernels.triton.compile import Const, Ptr, cdiv
from aotpack.kernels.triton.rope import pair_consts, rope_rows


@triton.jit
def _cache_rows(rows_ptr, r, r_ok, rows_stride, n_table):
    """(cache row of each token, int64; which tokens write: inside the table)."""
    at = tl.load(rows_ptr + r * rows_stride, mask=r_ok, other=-1).to(tl.int64)
    return at, r_ok & (at >= 0) & (at < n_table)


@triton.jit
def kv_write_kernel(q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, rows_ptr, out_ptr, kc_ptr, vc_ptr,
                    q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sr, out_sb, out_sh, out_ss,
                    cos_sb, cos_ss, sin_sb, sin_ss, rows_stride, kc_sr, vc_sr,
                    n_rows, seq, n_table, v_cols,
                    HQ: tl.constexpr, HKV: tl.constexpr, HEAD: tl.constexpr,
                    HEAD_BLOCK: tl.constexpr, ROTATE: tl.constexpr, HALF: tl.constexpr,
                    HALF_BLOCK: tl.constexpr, INTERLEAVED: tl.constexpr, PASS: tl.constexpr,
                    PASS_BLOCK: tl.constexpr, BLOCK_V: tl.constexpr, ROWS: tl.constexpr):
    # each branch keeps its values to itself: Triton's if needs equal types on both sides.
    # Without rope (ROTATE false) q, out, cos and sin are None and HQ is 0: the query branch
    # is compiled empty and the keys are copied as the values are.
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    r_ok = r < n_rows
    b = r // seq
    s = r % seq
    if h < HQ:  # a query head: rotated in place of the rope's output
        if ROTATE:
            rope_rows(q_ptr + b[:, None] * q_sb + h * q_sh + s[:, None] * q_ss,
                      cos_ptr + b[:, None] * cos_sb + s[:, None] * cos_ss,
                      sin_ptr + b[:, None] * sin_sb + s[:, None] * sin_ss,
                      out_ptr + b[:, None] * out_sb + h * out_sh + s[:, None] * out_ss,
                      r_ok, HALF, HALF_BLOCK, INTERLEAVED, PASS, PASS_BLOCK)
    elif h < HQ + HKV:  # a key head: (rotated and) stored into its cache rows
        at, ok = _cache_rows(rows_ptr, r, r_ok, rows_stride, n_table)
        src = k_ptr + b[:, None] * k_sb + (h - HQ) * k_sh + s[:, None] * k_ss
        dst = kc_ptr + at[:, None] * kc_sr + (h - HQ) * HEAD
        if ROTATE:
            rope_rows(src, cos_ptr + b[:, None] * cos_sb + s[:, None] * cos_ss,
                      sin_ptr + b[:, None] * sin_sb + s[:, None] * sin_ss, dst, ok, HALF,
                      HALF_BLOCK, INTERLEAVED, PASS, PASS_BLOCK)
        else:  # a head copied: nothing rotated, all HEAD dims passed through
            rope_rows(src, src, src, dst, ok, 0, 1, False, HEAD, HEAD_BLOCK)
    else:  # BLOCK_V value columns copied into their cache rows
        at, ok = _cache_rows(rows_ptr, r, r_ok, rows_stride, n_table)
        c = (h - HQ - HKV) * BLOCK_V + tl.arange(0, BLOCK_V)
        keep = ok[:, None] & (c[None, :] < v_cols)
        x = tl.load(v_ptr + r[:, None] * v_sr + c[None, :], mask=keep)
        tl.store(vc_ptr + at[:, None] * vc_sr + c[None, :], x.to(vc_ptr.dtype.element_ty),
                 mask=keep)


def check(op: KvWriteOp) -> None:
    """ValueError unless the views have the shapes and unit inner strides the kernel reads."""
    b, hkv, s, d = op.k.shape
    r = op.rot_dim
    tables = ((s, r), (b, s, r))
    problems = []
    if op.rotates != (op.q is not None and op.out is not None and op.sin is not None):
        problems.append("q, out, cos and sin must be all given or all None")
    elif op.rotates:
        if r % 2 or not 0 < r <= d:
            problems.append(f"rotary dim {r} is odd or outside (0, {d}]")
        if tuple(op.out.shape) != tuple(op.q.shape) or \
                (op.q.shape[0], op.q.shape[2], op.q.shape[3]) != (b, s, d):
            problems.append(f"q{op.q.shape} k{op.k.shape} out{op.out.shape} do not match")
        if op.cos.shape not in tables or op.sin.shape not in tables:
            problems.append(f"cos{op.cos.shape} sin{op.sin.shape} are not [S, R] or [B, S, R]")
    if tuple(op.rows.shape) != (b * s,) or op.v.shape[0] != b * s:
        problems.append(f"rows{op.rows.shape} v{op.v.shape} are not [B*S] and [B*S, C]")
    if op.k_cache.shape[1] != hkv * d or op.v_cache.shape[1] != op.v.shape[1] or \
            op.k_cache.shape[0] != op.v_cache.shape[0]:
        problems.append(f"caches {op.k_cache.shape} {op.v_cache.shape} do not fit")
    if problems:
        raise ValueError("kv_write: " + "; ".join(problems))
    for name in ("q", "k", "v", "cos", "sin", "out", "k_cache", "v_cache"):
        if getattr(op, name) is not None:
            require_unit_inner_stride(f"kv_write {name}", getattr(op, name))


def default_config(op: KvWriteOp) -> dict:
    # one token per program at decode; a prefill's thousands of tokens in blocks of rows
    # whose tile stays ~4K elements, as the rope kernel's
    d = op.k.shape[3]
    return {"ROWS": max(1, min(16, 4096 // d)), "num_warps": 4, "num_stages": 1}


def plan(op: KvWriteOp, config: dict | None = None) -> KernelPlan:
    check(op)
    b, hkv, s, d = op.k.shape
    hq = op.q.shape[1] if op.rotates else 0
    cfg = dict(default_config(op), **(config or {}))
    rows = triton.next_power_of_2(cfg["ROWS"])
    block_v = triton.next_power_of_2(d)
    n_table, v_cols = op.v_cache.shape
    args = {name: _ptr(getattr(op, attr)) for name, attr in (
        ("q_ptr", "q"), ("k_ptr", "k"), ("v_ptr", "v"), ("cos_ptr", "cos"), ("sin_ptr", "sin"),
        ("rows_ptr", "rows"), ("out_ptr", "out"), ("kc_ptr", "k_cache"), ("vc_ptr", "v_cache"))}
    for name, t in (("q", op.q), ("k", op.k), ("out", op.out)):
        args.update({f"{name}_s{x}": int_arg(t.strides[i]) if t is not None else Const(0)
                     for i, x in ((0, "b"), (1, "h"), (2, "s"))})
    args["v_sr"] = int_arg(op.v.strides[0])
    for name, t in (("cos", op.cos), ("sin", op.sin)):
        per_batch = t is not None and len(t.shape) == 3
        args[f"{name}_sb"] = int_arg(t.strides[0]) if per_batch else Const(0)
        args[f"{name}_ss"] = int_arg(t.strides[-2]) if t is not None else Const(0)
    args.update({"rows_stride": int_arg(op.rows.strides[0]),
                 "kc_sr": int_arg(op.k_cache.strides[0]), "vc_sr": int_arg(op.v_cache.strides[0]),
                 "n_rows": int_arg(b * s), "seq": int_arg(s), "n_table": int_arg(n_table),
                 "v_cols": int_arg(v_cols), "HQ": Const(hq), "HKV": Const(hkv),
                 "HEAD": Const(d), "HEAD_BLOCK": Const(triton.next_power_of_2(d)),
                 "ROTATE": Const(op.rotates), "BLOCK_V": Const(block_v), "ROWS": Const(rows),
                 **pair_consts(op.rot_dim or 2, d, op.interleaved)})
    grid = (cdiv(b * s, rows), hq + hkv + cdiv(v_cols, block_v), 1)
    return KernelPlan(kv_write_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      ("kv_write", "rope", "scatter_rows"), {"ROWS": rows})


def _ptr(t):
    """A pointer to the view; None (a layer without rope: no q, out, cos, sin): compiled out."""
    return Ptr(t) if t is not None else Const(None)


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
