"""Helpers shared by the attention kernels (attention.py, attention_masked.py)."""
import triton
import triton.language as tl


def padded_dim(d: int) -> int:
    """The power-of-two tile width a head dim computes in (80 -> 128: zeros past 80)."""
    return 1 << (d - 1).bit_length()


@triton.jit
def program_rows(HEADS_Q: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr):
    """(batch, query head, kv head) as int64, the first query row and this program's rows.
    The grid is (B*Hq, row blocks) with the row blocks reversed: CTAs are issued x-fastest, so
    every head's last (longest, when causal) row block is scheduled first."""
    batch_head = tl.program_id(0)
    row_block = tl.num_programs(1) - 1 - tl.program_id(1)
    batch = (batch_head // HEADS_Q).to(tl.int64)
    head_q = batch_head % HEADS_Q
    head_kv = (head_q // GROUP).to(tl.int64)
    row_start = row_block * BLOCK_M
    return batch, head_q.to(tl.int64), head_kv, row_start, row_start + tl.arange(0, BLOCK_M)


@triton.jit
def capped(scores, softcap):
    """softcap * tanh(scores / softcap) (Gemma-2's soft-capped logits), tanh from exp2 of a
    non-positive argument (nothing overflows; no libdevice: runs in the interpreter)."""
    x = scores / softcap
    t = tl.exp2(-2.8853900817779268 * tl.abs(x))  # exp(-2|x|) in (0, 1]
    y = (1.0 - t) / (1.0 + t)
    return softcap * tl.where(x < 0, -y, y)


@triton.jit
def softmax_fold(acc, row_sum, row_max, scores, v):
    """Fold one key tile's scores (natural units, -inf where hidden) and values into the
    online softmax (acc, row_sum, row_max). A row with no visible key so far subtracts 0, not
    -inf (-inf - -inf is NaN)."""
    new_max = tl.maximum(row_max, tl.max(scores, 1))
    safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
    p = tl.exp2((scores - safe_max[:, None]) * 1.4426950408889634)
    correction = tl.exp2((row_max - safe_max) * 1.4426950408889634)
    row_sum = row_sum * correction + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * correction[:, None])
    return acc, row_sum, new_max
