"""Flash-attention forward (FlashAttention-2 style online softmax) for AttentionOp on Hopper.

One program computes BLOCK_M query rows of one (batch, query head) against all keys it may see,
streaming K/V in BLOCK_N tiles: S = Q K^T (wgmma, f32), running row max m and row sum l in f32,
P = exp2(S * scale*log2(e) - m), acc = acc * exp2(m_old - m) + P V, out = acc / l at the end.

- q/k/v/out are arbitrary [B, H, S, D] views with a unit inner stride: the kernel takes base
  pointers + (batch, head, seq) strides, so a q that is a transposed view of a projection output
  ([B, S, H*D] seen as [B, H, S, D]) is read in place, no transpose copy.
- GQA: query head h reads kv head h // GROUP.
- Causal (mask aligned top-left, like the reference: row i sees keys j <= i): the key loop is
  split into the blocks left of the diagonal (no mask, no bounds checks) and the few diagonal /
  tail blocks (masked), so the hot loop carries no masking work.
- Grid is (B*Hq, row blocks) with the row-block index reversed: CTAs are issued x-fastest, so
  every head's *last* (longest, in causal) row block is scheduled first and the short ones fill
  the tail of the wave. Query heads sharing a kv head are neighbours, so K/V tiles hit in L2.
- Two kernels share the softmax step: `attention_fwd_kernel` (pointer loads, cp.async when
  pipelined; any 16-byte-friendly or not view) and `attention_fwd_tma_kernel` (config TMA=True:
  4-D TMA descriptors over the views, hardware bounds and zero fill, fewer registers spent on
  addresses). Both are in `candidate_configs`; the pointer kernel is the default until the
  target measurements say otherwise.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import (
    SM90, AttentionOp, Launch, PtrSlot, ScratchSlot, Target,
)
from aotpack.kernels.triton import attention_positional as positional
from aotpack.kernels.triton._common import (
    compile_plan,
    KernelPlan, entry_points, int_arg, require_unit_inner_stride, strides_args,
)
from aotpack.ir.sym import divisible, upper_bound
from aotpack.kernels.triton._attention_jit import padded_dim, program_rows
from aotpack.kernels.triton.attention_masked import plan_masked
from aotpack.kernels.triton.compile import F32, Const, Desc, Ptr, cdiv

_LOG2E = 1.4426950408889634


@triton.jit
def _softmax_step(acc, row_sum, row_max, q, k, v, rows, cols, seq_kv, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold one key tile (k, v: [BLOCK_N, D]) into the running (acc, row_sum, row_max)."""
    scores = tl.dot(q, tl.trans(k))
    if MASKED:
        keep = cols[None, :] < seq_kv
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        scores = tl.where(keep, scores * qk_scale, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        p = tl.exp2(scores - new_max[:, None])
    else:
        new_max = tl.maximum(row_max, tl.max(scores, 1) * qk_scale)
        p = tl.exp2(scores * qk_scale - new_max[:, None])  # one FMA per score
    correction = tl.exp2(row_max - new_max)
    row_sum = row_sum * correction + tl.sum(p, 1)
    acc = acc * correction[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, row_sum, new_max


@triton.jit
def _attend_tiles(acc, row_sum, row_max, q, k_base, v_base, k_stride_s, v_stride_s,
                  rows, kv_start, kv_end, seq_kv, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, D_VALID: tl.constexpr):
    """Key tiles [kv_start, kv_end) through pointer loads (cp.async when pipelined). A head
    dim that is no power of two (80, 96) is padded to HEAD_DIM with zeros (D_VALID real)."""
    dims = tl.arange(0, HEAD_DIM)
    dim_ok = dims[None, :] < D_VALID
    for start in range(kv_start, kv_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + cols[:, None] * k_stride_s + dims[None, :]
        v_ptrs = v_base + cols[:, None] * v_stride_s + dims[None, :]
        if MASKED:
            # Out-of-range K/V rows must load as 0, not garbage: 0 * NaN would poison acc.
            in_range = (cols[:, None] < seq_kv) & dim_ok
            k = tl.load(k_ptrs, mask=in_range, other=0.0)
            v = tl.load(v_ptrs, mask=in_range, other=0.0)
        elif D_VALID != HEAD_DIM:
            k = tl.load(k_ptrs, mask=dim_ok, other=0.0)
            v = tl.load(v_ptrs, mask=dim_ok, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        acc, row_sum, row_max = _softmax_step(acc, row_sum, row_max, q, k, v, rows, cols,
                                              seq_kv, qk_scale, MASKED, CAUSAL)
    return acc, row_sum, row_max


@triton.jit
def _attend_tiles_tma(acc, row_sum, row_max, q, k_desc, v_desc, batch, head_kv,
                      rows, kv_start, kv_end, seq_kv, qk_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                      MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Key tiles [kv_start, kv_end) through TMA: rows past the end of the view arrive as zeros,
    so no load masks and no per-thread address math."""
    for start in range(kv_start, kv_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = k_desc.load([batch, head_kv, start, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = v_desc.load([batch, head_kv, start, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, row_sum, row_max = _softmax_step(acc, row_sum, row_max, q, k, v, rows, cols,
                                              seq_kv, qk_scale, MASKED, CAUSAL)
    return acc, row_sum, row_max


@triton.jit
def _key_ranges(seq_kv, row_start, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr):
    """(full_end, kv_end): key tiles [0, full_end) need neither the causal mask nor bounds
    checks; [full_end, kv_end) are the diagonal / tail tiles, masked."""
    full_end = (seq_kv // BLOCK_N) * BLOCK_N
    kv_end = seq_kv
    if CAUSAL:
        # row_start is a multiple of BLOCK_M, hence of BLOCK_N (plan() checks).
        full_end = tl.minimum(full_end, row_start)
        kv_end = tl.minimum(seq_kv, row_start + BLOCK_M)
    return full_end, kv_end


@triton.jit
def attention_fwd_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr,
    q_stride_b, q_stride_h, q_stride_s,
    k_stride_b, k_stride_h, k_stride_s,
    v_stride_b, v_stride_h, v_stride_s,
    out_stride_b, out_stride_h, out_stride_s,
    seq_q, seq_kv, qk_scale,
    HEADS_Q: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    D_VALID: tl.constexpr,
):
    batch, head_q, head_kv, row_start, rows = program_rows(HEADS_Q, GROUP, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < seq_q
    io_ok = row_ok & (dims[None, :] < D_VALID)

    q_base = q_ptr + batch * q_stride_b + head_q * q_stride_h
    q = tl.load(q_base + rows[:, None] * q_stride_s + dims[None, :], mask=io_ok, other=0.0)
    k_base = k_ptr + batch * k_stride_b + head_kv * k_stride_h
    v_base = v_ptr + batch * v_stride_b + head_kv * v_stride_h

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)

    full_end, kv_end = _key_ranges(seq_kv, row_start, BLOCK_M, BLOCK_N, CAUSAL)
    acc, row_sum, row_max = _attend_tiles(
        acc, row_sum, row_max, q, k_base, v_base, k_stride_s, v_stride_s, rows, 0, full_end,
        seq_kv, qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL, D_VALID)
    acc, row_sum, row_max = _attend_tiles(
        acc, row_sum, row_max, q, k_base, v_base, k_stride_s, v_stride_s, rows, full_end, kv_end,
        seq_kv, qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL, D_VALID)

    out = acc / row_sum[:, None]
    out_base = out_ptr + batch * out_stride_b + head_q * out_stride_h
    out_ptrs = out_base + rows[:, None] * out_stride_s + dims[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=io_ok)


@triton.jit
def attention_fwd_tma_kernel(
    q_desc, k_desc, v_desc, out_desc, seq_kv, qk_scale,
    HEADS_Q: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    """Same algorithm, all tiles moved by TMA through 4-D descriptors over the [B, H, S, D]
    views (box [1, 1, rows, D]); the store is clipped to the view by the hardware."""
    batch_head = tl.program_id(0)
    row_block = tl.num_programs(1) - 1 - tl.program_id(1)  # longest causal rows first
    batch = batch_head // HEADS_Q
    head_q = batch_head % HEADS_Q
    head_kv = head_q // GROUP
    row_start = row_block * BLOCK_M
    rows = row_start + tl.arange(0, BLOCK_M)
    q = q_desc.load([batch, head_q, row_start, 0]).reshape(BLOCK_M, HEAD_DIM)

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    full_end, kv_end = _key_ranges(seq_kv, row_start, BLOCK_M, BLOCK_N, CAUSAL)
    acc, row_sum, row_max = _attend_tiles_tma(
        acc, row_sum, row_max, q, k_desc, v_desc, batch, head_kv, rows, 0, full_end,
        seq_kv, qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL)
    acc, row_sum, row_max = _attend_tiles_tma(
        acc, row_sum, row_max, q, k_desc, v_desc, batch, head_kv, rows, full_end, kv_end,
        seq_kv, qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL)

    out = (acc / row_sum[:, None]).to(out_desc.dtype)
    out_desc.store([batch, head_q, row_start, 0], out.reshape(1, 1, BLOCK_M, HEAD_DIM))


# ----------------------------------------------------------------------------- host side
SMALL_SQ = 64  # query rows up to which a decode-sized tile replaces the 128-row one


def default_config(op: AttentionOp) -> dict:
    """Positional attention (op.kv_limit, attention_positional.py) has its own. Otherwise:
    Hopper heuristics (the bench script sweeps the candidates): 128-row tiles and two
    warpgroups; a 64-key tile with a 3-stage K/V ring. Measured on the H200 (2026-11-30,
    B=1 Hq=32 Hkv=8 S=2048 D=128 causal): 0.095 ms against 0.104 ms for 128 keys x 2 stages.
    Decode-sized queries (S_q <= 64) get the smallest square tile that holds them (16 rows at
    S_q = 1): a 128-row tile spent 17.6 us on 16x32 one-row heads (llama decode, H200).
    Pointer loads (cp.async) by default; TMA=True selects the descriptor kernel."""
    if op.kv_limit is not None:
        return positional.default_config(op)
    sq = op.q.shape[2]
    if sq <= SMALL_SQ:
        block = max(16, 1 << (sq - 1).bit_length())
        return {"BLOCK_M": block, "BLOCK_N": block, "num_warps": 4, "num_stages": 2,
                "TMA": False}
    if padded_dim(op.q.shape[3]) > 128:  # head dim 256: a 128-row f32 accumulator would spill;
        # one warpgroup per 64 rows (Gemma-2-2B, S=2048, soft cap, H200 2026-12-03: 141 us
        # against 162 us causal, 229 against 373 us with a window mask, for 8 warps)
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "TMA": False}
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "TMA": False}


_CONFIG_KEYS = {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA"}


def candidate_configs(op: AttentionOp) -> list[dict]:
    """Configs worth measuring on the target (offline tuning); the first is the default."""
    base = default_config(op)
    if op.kv_limit is not None:
        return [base] + [dict(base, SPLITS=n) for n in (1, 4, 8, 16) if n != base["SPLITS"]]
    if op.q.shape[2] <= SMALL_SQ:
        others = [{"num_warps": w, "num_stages": s} for w in (1, 2, 4) for s in (1, 2)]
        if tma_possible(op):
            others += [{"TMA": True, "num_warps": w} for w in (1, 4)]
    elif padded_dim(op.q.shape[3]) > 128:  # head dim 256: K/V tiles of 32 KB a stage
        others = [{"num_warps": 8}, {"num_stages": 1}, {"BLOCK_N": 32},
                  {"BLOCK_N": 32, "num_warps": 8}, {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8},
                  {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1}]
    else:
        others = [{"BLOCK_N": 128, "num_stages": 2}, {"BLOCK_N": 128, "num_stages": 3},
                  {"BLOCK_N": 64, "num_stages": 2}]
        if tma_possible(op):
            others += [{"TMA": True}, {"TMA": True, "BLOCK_N": 64, "num_stages": 3},
                       {"TMA": True, "num_stages": 3}]
    configs = [base]
    for o in others:
        cfg = dict(base, **o)
        if cfg not in configs:
            configs.append(cfg)
    return configs


def tma_possible(op: AttentionOp) -> bool:
    """TMA needs 16-byte aligned view starts and 16-byte multiple outer strides (and no mask
    or soft cap: the masked kernel loads through pointers)."""
    if op.mask is not None or op.bias is not None or op.softcap > 0 \
            or padded_dim(op.q.shape[3]) != op.q.shape[3] or op.v.shape[3] != op.q.shape[3]:
        return False
    for t in (op.q, op.k, op.v, op.out):
        nbytes = t.dtype.nbytes
        if not divisible(t.offset * nbytes, 16) or any(not divisible(s * nbytes, 16)
                                                       for s in t.strides[:-1]):
            return False
    return True


def _check(op: AttentionOp) -> None:
    b, hq, sq, d = op.q.shape
    bk, hkv, skv, dk = op.k.shape
    dv = op.v.shape[3]
    if op.v.shape[:3] != op.k.shape[:3] or op.out.shape != op.q.shape[:3] + (dv,) \
            or (bk, dk) != (b, d):
        raise ValueError(f"attention: incompatible shapes q{op.q.shape} k{op.k.shape} "
                         f"v{op.v.shape} out{op.out.shape}")
    if hq % hkv:
        raise ValueError(f"attention: {hq} query heads not a multiple of {hkv} kv heads")
    for what, n in (("head dim", d), ("value head dim", dv)):
        if not 16 <= n <= 256 or n % 8:
            raise ValueError(f"attention: {what} {n} not supported (16 to 256, a multiple of "
                             f"8: rows of 16 bytes)")
    if skv == 0:
        raise ValueError("attention: no keys (S_kv = 0)")
    if not op.scale > 0:  # the unmasked loop scales the row max: needs a positive scale
        raise ValueError(f"attention: scale must be positive, got {op.scale}")
    if op.softcap < 0:
        raise ValueError(f"attention: soft cap must be positive (or 0: none), got {op.softcap}")
    for name in ("q", "k", "v", "out"):
        require_unit_inner_stride(f"attention {name}", getattr(op, name))
    for name, t in (("mask", op.mask), ("bias", op.bias)):  # i32 offsets within one
        if t is None:  # (batch, head) of the mask and of the bias
            continue
        _, _, sq_, skv_ = t.shape
        if upper_bound(sq_ * abs(t.strides[2]) + skv_ * abs(t.strides[3])) >= 2**31:
            raise ValueError(f"attention {name}: one head's extent exceeds 2^31 elements")
    if op.bias is not None and (op.mask is None or not op.bias.dtype.is_float):
        raise ValueError("attention: a bias is a floating second term beside a mask")
    for name, t in (("q", op.q), ("k", op.k), ("v", op.v), ("out", op.out)):
        if upper_bound(t.shape[2] * abs(t.strides[2])) >= 2**31:  # i32 row offsets
            raise ValueError(f"attention {name}: sequence extent exceeds 2^31 elements")


def plan(op: AttentionOp, config: dict | None = None) -> KernelPlan:
    """The launch for `op` (config defaults to `default_config`)."""
    _check(op)
    config = config or {}
    # a complete config (what a build passes) needs no default: a symbolic op has none
    cfg = dict(config) if _CONFIG_KEYS <= set(config) else dict(default_config(op), **config)
    if cfg["BLOCK_M"] % cfg["BLOCK_N"]:  # the causal split puts the diagonal on a key tile edge
        raise ValueError(f"attention: BLOCK_M {cfg['BLOCK_M']} not a multiple of "
                         f"BLOCK_N {cfg['BLOCK_N']}")
    if (op.mask is not None or op.bias is not None) and op.kv_limit is not None:
        raise ValueError("attention: a mask and positions together (lowering makes one)")
    if op.kv_limit is None and (op.mask is not None or op.softcap > 0
                                or op.v.shape[3] != op.q.shape[3]):
        return plan_masked(op, cfg)
    if op.kv_limit is not None:
        plans = positional.plans_positional(op, cfg)
        if len(plans) > 1:
            raise ValueError("attention with split keys: two launches (use compile)")
        return plans[0]
    b, hq, sq, d = op.q.shape
    hkv = op.k.shape[1]
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    if cfg["TMA"]:
        if not tma_possible(op):
            raise ValueError("attention: TMA needs 16-byte aligned views and strides")
        fn = attention_fwd_tma_kernel
        args = {"q_desc": Desc(op.q, (1, 1, block_m, d)), "k_desc": Desc(op.k, (1, 1, block_n, d)),
                "v_desc": Desc(op.v, (1, 1, block_n, d)),
                "out_desc": Desc(op.out, (1, 1, block_m, d))}
    else:
        fn = attention_fwd_kernel
        args = {"q_ptr": Ptr(op.q), "k_ptr": Ptr(op.k), "v_ptr": Ptr(op.v),
                "out_ptr": Ptr(op.out)}
        for name in ("q", "k", "v", "out"):
            args.update(strides_args(name, getattr(op, name), ("b", "h", "s")))
        args["seq_q"] = int_arg(sq)
    args.update({
        "seq_kv": int_arg(op.k.shape[2]), "qk_scale": F32(op.scale * _LOG2E),
        "HEADS_Q": Const(hq), "GROUP": Const(hq // hkv), "HEAD_DIM": Const(padded_dim(d)),
        "BLOCK_M": Const(block_m), "BLOCK_N": Const(block_n), "CAUSAL": Const(bool(op.causal)),
    })
    if not cfg["TMA"]:
        args["D_VALID"] = Const(d)
    fused = ("attention",) + (("causal",) if op.causal else ()) + (("gqa",) if hq != hkv else ())
    return KernelPlan(fn, args, (b * hq, cdiv(sq, block_m), 1), cfg["num_warps"],
                      cfg["num_stages"], fused,
                      {"BLOCK_M": block_m, "BLOCK_N": block_n, "TMA": cfg["TMA"]})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
_compile_one, _run_one_here, run_jit = entry_points(plan)


def _positional_config(op: AttentionOp, config: dict | None) -> dict:
    return dict(positional.default_config(op), **(config or {}))


def compile(op: AttentionOp, target: Target = SM90, config: dict | None = None) -> list:
    """Launches of `op`: one, or for positional attention with split keys two sharing their
    partials (a ScratchSlot both launches name)."""
    if op.kv_limit is None:
        return _compile_one(op, target, config)
    cfg = _positional_config(op, config)
    nbytes = positional.workspace_bytes(op, cfg)
    return [_workspace_to_scratch(compile_plan(p, target), nbytes)
            for p in positional.plans_positional(op, cfg)]


def _workspace_to_scratch(launch: Launch, nbytes) -> Launch:
    args = tuple(ScratchSlot(nbytes, 256, shared="attention.partials")
                 if isinstance(s, PtrSlot) and s.storage == positional.WORKSPACE else s
                 for s in launch.args)
    return Launch(launch.kernel, launch.grid, args)


def run_plan_interpreted_here(op: AttentionOp, env, config: dict | None = None,
                              point: dict | None = None) -> None:
    if op.kv_limit is None:
        return _run_one_here(op, env, config, point)
    import torch

    from aotpack.ir.sym import subs_tree
    from aotpack.kernels.triton._interpret import run_plan_here

    cfg = _positional_config(op, config)
    env = dict(env)
    nbytes = positional.workspace_bytes(op, cfg)
    nbytes = subs_tree(nbytes, point) if point else nbytes
    if nbytes:
        env[positional.WORKSPACE] = torch.empty(int(nbytes) // 4, dtype=torch.float32)
    for p in positional.plans_positional(op, cfg):
        run_plan_here(subs_tree(p, point) if point else p, env)


def flops(op: AttentionOp) -> float:
    """Useful FLOPs (2 GEMMs; causal counts the visible half, top-left aligned)."""
    b, hq, sq, d = op.q.shape
    skv = op.k.shape[2]
    pairs = sum(min(i + 1, skv) for i in range(sq)) if op.causal else sq * skv
    return 2.0 * b * hq * pairs * (d + op.v.shape[3])
