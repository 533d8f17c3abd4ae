"""Flash-attention over a KV cache with per-token positions (AttentionOp.kv_limit): key t is
visible to query (b, s) iff t <= kv_limit[b, s] (and t > kv_limit[b, s] - window with a
sliding window). A generation step's attention (docs/generation.md): the cache holds
max_seq_len keys, a query sees only the ones up to its own position.

One program serves one (batch, kv head, block of BLOCK_S query positions) and all GROUP query
heads of that kv head: its rows are (query head, position) pairs, so each K/V tile is loaded
once for the whole group (GQA without repeating K/V) and a decode step (S = 1) still fills a
16-row tile. The key loop runs only over [lowest visible, highest visible] of the block, read
from the positions: a decode at position 130 of a 4096-key cache reads 3 key tiles, not 64.

With SPLITS > 1 (a decode with few programs), the key range is cut into SPLITS parts, each
program folds one part and writes its unnormalised partial (acc, row max, row sum) to a
workspace, and the parts are merged (flash-decoding), so a long context uses every SM: by the
program that finishes its (batch, kv head, block) last (FIXUP, the default: an int32 counter
per block, CounterSlot, zero before and reset to zero by that program), or by a second launch,
`combine_kernel`.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.kernels.spec import AttentionOp, TensorArg
from aotpack.kernels.triton._attention_jit import capped, padded_dim, softmax_fold
from aotpack.kernels.triton._common import KernelPlan, int_arg, strides_args
from aotpack.kernels.triton.compile import F32, Const, Counters, Ptr, cdiv
from aotpack.kernels.triton.pdl import release_dependents

WORKSPACE = "__attention.partials"
# key tiles a split launch folds in one pass (part 0 stores the rows; no partials or merge).
# Measured on the H100 (Llama-3.2-1B decode at position 128, 3 tiles): one pass over the 3
# tiles took 5.4 us per layer against 5.15 us for 3 parts of one tile + the merge, so only a
# range that part 0 would fold alone anyway (one tile) skips the merge.
SHORT_TILES = 1


@triton.jit
def attention_fwd_positional_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, pos_ptr, ws_ptr,
    q_stride_b, q_stride_h, q_stride_s,
    k_stride_b, k_stride_h, k_stride_s,
    v_stride_b, v_stride_h, v_stride_s,
    out_stride_b, out_stride_h, out_stride_s,
    pos_stride_b, pos_stride_s,
    seq_q, seq_kv, sm_scale, window, cnt_ptr, softcap,
    HEADS_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, D_VALID: tl.constexpr,
    BLOCK_S: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, WINDOW: tl.constexpr,
    SPLITS: tl.constexpr, FIXUP: tl.constexpr, SHORT: tl.constexpr, SOFTCAP: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, DV_VALID: tl.constexpr,
):
    release_dependents()  # the output projection may start streaming its weights (pdl.py)
    pid = tl.program_id(0)
    batch = (pid // HEADS_KV).to(tl.int64)
    head_kv = (pid % HEADS_KV).to(tl.int64)
    s_block = tl.program_id(1)
    split = tl.program_id(2)
    r = tl.arange(0, ROWS)
    g = r // BLOCK_S
    s = s_block * BLOCK_S + r % BLOCK_S
    row_ok = (g < GROUP) & (s < seq_q)
    head_q = head_kv * GROUP + g
    dims = tl.arange(0, HEAD_DIM)
    dim_ok = dims[None, :] < D_VALID
    vdims = tl.arange(0, HEAD_DIM_V)  # the values' head dim (MLA: 128 against keys' 192)
    vdim_ok = vdims[None, :] < DV_VALID
    s = s.to(tl.int64)  # row offsets past 2^31 elements at long contexts

    q = tl.load(q_ptr + batch * q_stride_b + head_q[:, None] * q_stride_h
                + s[:, None] * q_stride_s + dims[None, :],
                mask=row_ok[:, None] & dim_ok, other=0.0)
    pos = tl.load(pos_ptr + batch * pos_stride_b + s * pos_stride_s, mask=row_ok, other=-1)
    hi = tl.minimum(tl.max(pos) + 1, seq_kv)  # keys past every row's position: unread
    lo = 0
    if WINDOW:
        lo = tl.maximum(tl.min(tl.where(row_ok, pos, seq_kv)) - window + 1, 0)
        lo = (lo // BLOCK_N) * BLOCK_N
    single = False
    if SPLITS > 1:  # this program's part of [lo, hi), in whole key tiles
        tiles = tl.cdiv(hi - lo, BLOCK_N)
        # a range of at most SHORT tiles (an early decode step of a long cache) in one pass
        # by part 0: no partials, counter or merge (SHORT_TILES says why only one tile)
        if SHORT > 0:
            single = tiles <= SHORT
        part = tl.cdiv(tiles, SPLITS) * BLOCK_N
        hi = tl.where(single, tl.where(split == 0, hi, lo),
                      tl.minimum(hi, lo + split * part + part))
        lo = tl.where(single, lo, lo + split * part)

    k_base = k_ptr + batch * k_stride_b + head_kv * k_stride_h
    v_base = v_ptr + batch * v_stride_b + head_kv * v_stride_h
    acc = tl.zeros([ROWS, HEAD_DIM_V], dtype=tl.float32)
    row_sum = tl.zeros([ROWS], dtype=tl.float32)
    row_max = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N).to(tl.int64)
        k = tl.load(k_base + cols[:, None] * k_stride_s + dims[None, :],
                    mask=(cols[:, None] < seq_kv) & dim_ok, other=0.0)
        v = tl.load(v_base + cols[:, None] * v_stride_s + vdims[None, :],
                    mask=(cols[:, None] < seq_kv) & vdim_ok, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * sm_scale
        if SOFTCAP:  # Gemma-2: softcap * tanh(scores / softcap), before the mask
            scores = capped(scores, softcap)
        keep = (cols[None, :] <= pos[:, None]) & (cols[None, :] < seq_kv)
        if WINDOW:
            keep = keep & (cols[None, :] > pos[:, None] - window)
        acc, row_sum, row_max = softmax_fold(acc, row_sum, row_max,
                                             tl.where(keep, scores, float("-inf")), v)

    if single:  # part 0 holds every key: store the rows, no partials, no merge
        out = tl.where(row_sum[:, None] > 0, acc / row_sum[:, None], 0.0)
        tl.store(out_ptr + batch * out_stride_b + head_q[:, None] * out_stride_h
                 + s[:, None] * out_stride_s + vdims[None, :],
                 out.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & vdim_ok & (split == 0))
    elif SPLITS == 1:
        out = tl.where(row_sum[:, None] > 0, acc / row_sum[:, None], 0.0)
        tl.store(out_ptr + batch * out_stride_b + head_q[:, None] * out_stride_h
                 + s[:, None] * out_stride_s + vdims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & vdim_ok)
    else:  # partials of (program, split): acc [ROWS, HEAD_DIM_V], then max and sum [ROWS]
        slot = ((pid * tl.num_programs(1) + s_block) * SPLITS + split).to(tl.int64)
        base = ws_ptr + slot * (ROWS * (HEAD_DIM_V + 2))
        tl.store(base + r[:, None] * HEAD_DIM_V + vdims[None, :], acc)
        tl.store(base + ROWS * HEAD_DIM_V + r, row_max)
        tl.store(base + ROWS * HEAD_DIM_V + ROWS + r, row_sum)
        if FIXUP:  # the block's last program to finish merges every part
            tl.debug_barrier()  # every thread's partials are written before the release
            cnt = cnt_ptr + pid * tl.num_programs(1) + s_block
            if tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu") == SPLITS - 1:
                _combine(ws_ptr, out_ptr, out_stride_b, out_stride_h, out_stride_s, seq_q,
                         pid, s_block, HEADS_KV, GROUP, HEAD_DIM_V, DV_VALID, BLOCK_S, ROWS,
                         SPLITS, ".cg")
                tl.atomic_xchg(cnt, 0)  # ready for the next launch


@triton.jit
def combine_kernel(ws_ptr, out_ptr, out_stride_b, out_stride_h, out_stride_s, seq_q,
                   HEADS_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                   D_VALID: tl.constexpr, BLOCK_S: tl.constexpr, ROWS: tl.constexpr,
                   SPLITS: tl.constexpr):
    release_dependents()
    _combine(ws_ptr, out_ptr, out_stride_b, out_stride_h, out_stride_s, seq_q,
             tl.program_id(0), tl.program_id(1), HEADS_KV, GROUP, HEAD_DIM, D_VALID, BLOCK_S,
             ROWS, SPLITS, "")


@triton.jit
def _combine(ws_ptr, out_ptr, out_stride_b, out_stride_h, out_stride_s, seq_q, pid, s_block,
             HEADS_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
             D_VALID: tl.constexpr, BLOCK_S: tl.constexpr, ROWS: tl.constexpr,
             SPLITS: tl.constexpr, CACHE: tl.constexpr):
    """Merge the SPLITS partials of program (pid, s_block) and store its rows. CACHE ".cg"
    reads past L1 (partials other SMs just wrote)."""
    batch = (pid // HEADS_KV).to(tl.int64)
    head_kv = (pid % HEADS_KV).to(tl.int64)
    r = tl.arange(0, ROWS)
    g = r // BLOCK_S
    s = (s_block * BLOCK_S + r % BLOCK_S).to(tl.int64)
    row_ok = (g < GROUP) & (s < seq_q)
    dims = tl.arange(0, HEAD_DIM)
    first = ((pid * tl.num_programs(1) + s_block) * SPLITS).to(tl.int64)
    stride = ROWS * (HEAD_DIM + 2)
    best = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    for i in tl.static_range(SPLITS):
        best = tl.maximum(best, tl.load(ws_ptr + (first + i) * stride + ROWS * HEAD_DIM + r,
                                        cache_modifier=CACHE))
    safe = tl.where(best == float("-inf"), 0.0, best)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    total = tl.zeros([ROWS], dtype=tl.float32)
    for i in tl.static_range(SPLITS):
        base = ws_ptr + (first + i) * stride
        w = tl.exp2((tl.load(base + ROWS * HEAD_DIM + r, cache_modifier=CACHE) - safe)
                    * 1.4426950408889634)
        total += w * tl.load(base + ROWS * HEAD_DIM + ROWS + r, cache_modifier=CACHE)
        acc += w[:, None] * tl.load(base + r[:, None] * HEAD_DIM + dims[None, :],
                                    cache_modifier=CACHE)
    out = tl.where(total[:, None] > 0, acc / total[:, None], 0.0)
    head_q = head_kv * GROUP + g
    tl.store(out_ptr + batch * out_stride_b + head_q[:, None] * out_stride_h
             + s[:, None] * out_stride_s + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (dims[None, :] < D_VALID))


def shape(op: AttentionOp, cfg: dict) -> tuple[int, int, int]:
    """(BLOCK_S, ROWS, SPLITS): positions per program, its rows (GROUP x BLOCK_S, at least 16,
    a power of two) and key-range parts."""
    from aotpack.ir.sym import upper_bound

    group = op.q.shape[1] // op.k.shape[1]
    # decode-sized query counts: one position per program (its group of heads fills the
    # rows); longer ones: 64 rows of (head, position) pairs
    block_s = cfg.get("BLOCK_S") or (1 if upper_bound(op.q.shape[2]) <= 16
                                     else max(1, 64 // triton.next_power_of_2(group)))
    rows = max(16, triton.next_power_of_2(group * block_s))
    return block_s, rows, int(cfg.get("SPLITS", 1))


def workspace_bytes(op: AttentionOp, cfg: dict):
    b, hq, sq, d = op.q.shape
    block_s, rows, splits = shape(op, cfg)
    if splits == 1:
        return 0
    programs = b * op.k.shape[1] * cdiv(sq, block_s)
    return programs * splits * rows * (padded_dim(op.v.shape[3]) + 2) * 4


def _workspace(op: AttentionOp, cfg: dict) -> Ptr:
    return Ptr(TensorArg(WORKSPACE, DType.F32, (workspace_bytes(op, cfg) // 4,), (1,)))


def uses_fixup(op: AttentionOp, cfg: dict) -> bool:
    """Split parts merged by the last program of each block, in the same launch."""
    return shape(op, cfg)[2] > 1 and cfg.get("FIXUP", True)


def short_tiles(op: AttentionOp, cfg: dict) -> int:
    """Key tiles up to which a split launch folds the whole range in part 0 and stores the
    rows itself (only with the fix-up: a separate merge launch would read no partials)."""
    return SHORT_TILES if uses_fixup(op, cfg) else 0


def counters_bytes(op: AttentionOp, cfg: dict):
    """One int32 per (batch, kv head, query block) with the fix-up; 0 without."""
    if not uses_fixup(op, cfg):
        return 0
    b, hq, sq, d = op.q.shape
    return b * op.k.shape[1] * cdiv(sq, shape(op, cfg)[0]) * 4


def plans_positional(op: AttentionOp, cfg: dict) -> list[KernelPlan]:
    b, hq, sq, d = op.q.shape
    hkv = op.k.shape[1]
    block_s, rows, splits = shape(op, cfg)
    if tuple(op.kv_limit.shape) != (b, sq):
        raise ValueError(f"attention: kv_limit {op.kv_limit.shape} is not [B, S] = {(b, sq)}")
    dv = op.v.shape[3]
    # the merge sees values only: its HEAD_DIM is theirs
    common = {"HEADS_KV": Const(hkv), "GROUP": Const(hq // hkv),
              "HEAD_DIM": Const(padded_dim(dv)), "D_VALID": Const(dv), "BLOCK_S": Const(block_s),
              "ROWS": Const(rows), "SPLITS": Const(splits)}
    args = {"q_ptr": Ptr(op.q), "k_ptr": Ptr(op.k), "v_ptr": Ptr(op.v), "out_ptr": Ptr(op.out),
            "pos_ptr": Ptr(op.kv_limit),
            "ws_ptr": _workspace(op, cfg) if splits > 1 else Const(None),
            "cnt_ptr": Counters(counters_bytes(op, cfg)) if uses_fixup(op, cfg) else Const(None)}
    for name in ("q", "k", "v", "out"):
        args.update(strides_args(name, getattr(op, name), ("b", "h", "s")))
    args.update({"pos_stride_b": int_arg(op.kv_limit.strides[0]),
                 "pos_stride_s": int_arg(op.kv_limit.strides[1]),
                 "seq_q": int_arg(sq), "seq_kv": int_arg(op.k.shape[2]),
                 "sm_scale": F32(op.scale), "window": int_arg(max(op.window, 1)),
                 "softcap": F32(op.softcap), "SOFTCAP": Const(op.softcap > 0),
                 "BLOCK_N": Const(cfg["BLOCK_N"]), "WINDOW": Const(op.window > 0),
                 "FIXUP": Const(uses_fixup(op, cfg)), "SHORT": Const(short_tiles(op, cfg)),
                 **common, "HEAD_DIM": Const(padded_dim(d)), "D_VALID": Const(d),
                 "HEAD_DIM_V": Const(padded_dim(dv)), "DV_VALID": Const(dv)})
    fused = ("attention", "positions") + (("window",) if op.window else ()) + \
        (("softcap",) if op.softcap > 0 else ()) + \
        (("gqa",) if hq != hkv else ()) + (("split_kv",) if splits > 1 else ()) + \
        (("fixup",) if uses_fixup(op, cfg) else ())
    config = {"BLOCK_N": cfg["BLOCK_N"], "BLOCK_S": block_s, "SPLITS": splits, "TMA": False,
              "FIXUP": uses_fixup(op, cfg), "SHORT": short_tiles(op, cfg)}
    grid = (b * hkv, cdiv(sq, block_s), splits)
    first = KernelPlan(attention_fwd_positional_kernel, args, grid, cfg["num_warps"],
                       cfg["num_stages"], fused, config)
    if splits == 1 or uses_fixup(op, cfg):
        return [first]
    combine = {"ws_ptr": _workspace(op, cfg), "out_ptr": Ptr(op.out),
               **strides_args("out", op.out, ("b", "h", "s")), "seq_q": int_arg(sq), **common}
    return [first, KernelPlan(combine_kernel, combine, (b * hkv, cdiv(sq, block_s), 1), 4, 1,
                              fused, config)]


def default_config(op: AttentionOp) -> dict:
    """Decode-sized query blocks with few programs split the key range so every SM works."""
    from aotpack.ir.sym import lower_bound, upper_bound

    b, hq, sq, d = op.q.shape
    # the fewest programs the bucket runs (batch 1): split until they cover the SMs
    programs = lower_bound(b * op.k.shape[1] * cdiv(sq, shape(op, {})[0]))
    long_keys = upper_bound(op.k.shape[2]) >= 1024
    splits = 1
    if upper_bound(sq) <= 16 and long_keys:
        splits = max(1, min(16, 132 // max(programs, 1)))
    return {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "SPLITS": splits,
            "BLOCK_M": 64, "TMA": False}
