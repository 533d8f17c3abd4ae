"""Flash-attention forward with a run-time mask (AttentionOp.mask): a padding mask built from
`attention_mask`, a sliding window, a relative-position or ALiBi bias, a mask the model
computed; beside it a second, floating term (AttentionOp.bias: a per-head bias beside a mask
the heads share), each read through its own strides. Same online softmax as attention.py, but
every key tile goes through the masked step: the mask tile [BLOCK_M, BLOCK_N] is loaded
through its 4-D strides (0 on broadcast dims, so a [B, 1, 1, T] padding mask is one row per
batch, read from L2). A tile that the mask hides from every row of the block is skipped (the
padded tail of a short sequence costs no products).

Scores are kept in natural units (scale * q.k + bias) and exponentiated as
exp2((s - max) * log2 e): a bias of finfo.min (how transformers writes "masked") stays finite,
so a row that is masked that way everywhere gets the uniform weights torch gives it, while a
row whose keys are all -inf / False gets zeros (torch's scaled_dot_product_attention does the
same; a plain softmax would give NaN).

Soft-capped attention (AttentionOp.softcap, Gemma-2) runs here too, with or without a mask
(MASK_KIND 0): the cap is applied to the scaled scores before the mask, in natural units; and
so does attention whose values have another head dim than the keys (DeepSeek's MLA: 128 and
192; HEAD_DIM_V).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import AttentionOp, TensorArg
from aotpack.kernels.triton._attention_jit import (
    capped, padded_dim, program_rows, softmax_fold,
)
from aotpack.kernels.triton._common import KernelPlan, int_arg, strides_args
from aotpack.kernels.triton.compile import F32, Const, Ptr, cdiv

MASK_NONE, MASK_BOOL, MASK_ADD = 0, 1, 2


@triton.jit
def _masked_step(acc, row_sum, row_max, q, k, v, mask_tile, bias_tile, rows, cols, seq_kv,
                 sm_scale, softcap, MASK_KIND: tl.constexpr, CAUSAL: tl.constexpr,
                 SOFTCAP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Fold one key tile into (acc, row_sum, row_max); row_max in natural units."""
    scores = tl.dot(q, tl.trans(k)) * sm_scale
    if SOFTCAP:
        scores = capped(scores, softcap)
    if HAS_BIAS:
        scores = scores + bias_tile.to(tl.float32)
    keep = cols[None, :] < seq_kv
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    if MASK_KIND == 1:
        keep = keep & (mask_tile != 0)
    elif MASK_KIND == 2:
        scores = scores + mask_tile.to(tl.float32)
    return softmax_fold(acc, row_sum, row_max, tl.where(keep, scores, float("-inf")), v)


@triton.jit
def attention_fwd_masked_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, mask_ptr, bias_ptr,
    q_stride_b, q_stride_h, q_stride_s,
    k_stride_b, k_stride_h, k_stride_s,
    v_stride_b, v_stride_h, v_stride_s,
    out_stride_b, out_stride_h, out_stride_s,
    mask_stride_b, mask_stride_h, mask_stride_q, mask_stride_k,
    bias_stride_b, bias_stride_h, bias_stride_q, bias_stride_k,
    seq_q, seq_kv, sm_scale, softcap,
    HEADS_Q: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    MASK_KIND: tl.constexpr, D_VALID: tl.constexpr, SOFTCAP: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, DV_VALID: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    batch, head_q, head_kv, row_start, rows = program_rows(HEADS_Q, GROUP, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < seq_q
    dim_ok = dims[None, :] < D_VALID  # a head dim padded to a power of two (80 -> 128)
    vdims = tl.arange(0, HEAD_DIM_V)  # the values' (MLA: 128 against the keys' 192)
    vdim_ok = vdims[None, :] < DV_VALID

    q_base = q_ptr + batch * q_stride_b + head_q * q_stride_h
    q = tl.load(q_base + rows[:, None] * q_stride_s + dims[None, :], mask=row_ok & dim_ok,
                other=0.0)
    k_base = k_ptr + batch * k_stride_b + head_kv * k_stride_h
    v_base = v_ptr + batch * v_stride_b + head_kv * v_stride_h
    if MASK_KIND != 0:
        m_base = (mask_ptr + batch * mask_stride_b + head_q * mask_stride_h
                  + rows[:, None] * mask_stride_q)
    if HAS_BIAS:
        b_base = (bias_ptr + batch * bias_stride_b + head_q * bias_stride_h
                  + rows[:, None] * bias_stride_q)

    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    kv_end = seq_kv
    if CAUSAL:
        kv_end = tl.minimum(seq_kv, row_start + BLOCK_M)
    for start in range(0, kv_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        tile_ok = row_ok & (cols[None, :] < seq_kv)
        # a tile every row of the block hides (padding past a sequence's end) changes nothing:
        # skip its loads and both products
        if MASK_KIND == 0:
            mask_tile = tile_ok
            seen = tile_ok
        elif MASK_KIND == 1:
            mask_tile = tl.load(m_base + cols[None, :] * mask_stride_k, mask=tile_ok, other=0)
            seen = tile_ok & (mask_tile != 0)
        else:
            mask_tile = tl.load(m_base + cols[None, :] * mask_stride_k, mask=tile_ok, other=0)
            seen = tile_ok & (mask_tile.to(tl.float32) > float("-inf"))
        if tl.max(seen.to(tl.int32)) > 0:
            k = tl.load(k_base + cols[:, None] * k_stride_s + dims[None, :],
                        mask=(cols[:, None] < seq_kv) & dim_ok, other=0.0)
            v = tl.load(v_base + cols[:, None] * v_stride_s + vdims[None, :],
                        mask=(cols[:, None] < seq_kv) & vdim_ok, other=0.0)
            bias_tile = mask_tile
            if HAS_BIAS:
                bias_tile = tl.load(b_base + cols[None, :] * bias_stride_k, mask=tile_ok,
                                    other=0)
            acc, row_sum, row_max = _masked_step(acc, row_sum, row_max, q, k, v, mask_tile,
                                                 bias_tile, rows, cols, seq_kv, sm_scale,
                                                 softcap, MASK_KIND, CAUSAL, SOFTCAP,
                                                 HAS_BIAS)

    out = tl.where(row_sum[:, None] > 0, acc / row_sum[:, None], 0.0)
    out_base = out_ptr + batch * out_stride_b + head_q * out_stride_h
    out_ptrs = out_base + rows[:, None] * out_stride_s + vdims[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_ok & vdim_ok)


def mask_kind(mask: TensorArg | None) -> int:
    if mask is None:
        return MASK_NONE
    return MASK_BOOL if not mask.dtype.is_float else MASK_ADD


def plan_masked(op: AttentionOp, cfg: dict) -> KernelPlan:
    """The launch of the masked kernel (pointer loads; a TMA config is refused): an op with a
    mask, or a soft-capped one without."""
    if cfg.get("TMA"):
        raise ValueError("attention with a mask or a soft cap: no TMA kernel (pointer loads)")
    b, hq, sq, d = op.q.shape
    hkv = op.k.shape[1]
    if op.mask is not None and tuple(op.mask.shape) != (b, hq, sq, op.k.shape[2]):
        raise ValueError(f"attention: mask {op.mask.shape} is not broadcast to "
                         f"{(b, hq, sq, op.k.shape[2])}")
    if op.bias is not None and tuple(op.bias.shape) != (b, hq, sq, op.k.shape[2]):
        raise ValueError(f"attention: bias {op.bias.shape} is not broadcast to "
                         f"{(b, hq, sq, op.k.shape[2])}")
    args = {"q_ptr": Ptr(op.q), "k_ptr": Ptr(op.k), "v_ptr": Ptr(op.v), "out_ptr": Ptr(op.out),
            "mask_ptr": Ptr(op.mask) if op.mask is not None else Const(None),
            "bias_ptr": Ptr(op.bias) if op.bias is not None else Const(None)}
    for name in ("q", "k", "v", "out"):
        args.update(strides_args(name, getattr(op, name), ("b", "h", "s")))
    if op.mask is not None:
        args.update(strides_args("mask", op.mask, ("b", "h", "q", "k")))
    else:
        args.update({f"mask_stride_{a}": Const(0) for a in ("b", "h", "q", "k")})
    if op.bias is not None:
        args.update(strides_args("bias", op.bias, ("b", "h", "q", "k")))
    else:
        args.update({f"bias_stride_{a}": Const(0) for a in ("b", "h", "q", "k")})
    args.update({
        "seq_q": int_arg(sq), "seq_kv": int_arg(op.k.shape[2]), "sm_scale": F32(op.scale),
        "softcap": F32(op.softcap), "SOFTCAP": Const(op.softcap > 0),
        "HEADS_Q": Const(hq), "GROUP": Const(hq // hkv),
        "HEAD_DIM": Const(padded_dim(d)), "D_VALID": Const(d),
        "HEAD_DIM_V": Const(padded_dim(op.v.shape[3])), "DV_VALID": Const(op.v.shape[3]),
        "BLOCK_M": Const(cfg["BLOCK_M"]), "BLOCK_N": Const(cfg["BLOCK_N"]),
        "CAUSAL": Const(bool(op.causal)), "MASK_KIND": Const(mask_kind(op.mask)),
        "HAS_BIAS": Const(op.bias is not None),
    })
    fused = ("attention",) + (("mask",) if op.mask is not None else ()) + \
        (("bias",) if op.bias is not None else ()) + \
        (("softcap",) if op.softcap > 0 else ()) + (("causal",) if op.causal else ()) + \
        (("gqa",) if hq != hkv else ())
    return KernelPlan(attention_fwd_masked_kernel, args, (b * hq, cdiv(sq, cfg["BLOCK_M"]), 1),
                      cfg["num_warps"], cfg["num_stages"], fused,
                      {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "TMA": False})
