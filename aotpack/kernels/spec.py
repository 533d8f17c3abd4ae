"""The interface between the fusion pass, the kernel templates and the bundle writer.

The fusion pass turns the graph into a program: an ordered list of *kernel ops* (one fused
pattern each: GemmOp, AttentionOp, ...). Every operand is a `TensorArg`, a strided view over a
named *storage* (a graph input, output, weight or intermediate). A kernel template gives each op
 - `reference(op, env)`: the semantics in torch (runs on the CPU; used by `verify --reference cpu`)
 - `compile(op, target)`: one or more `Launch`es (cubin + grid + parameter slots)
The bundle writer maps storages to manifest buffers and slots to manifest JSON
(docs/manifest.md). Nothing here imports torch or triton at import time.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from aotpack.dtypes import DType


# ----------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class TensorArg:
    """A strided view (`shape`, `strides`, `offset` in elements) over storage `storage`.
    Sizes are ints or symbolic expressions of the dims (aotpack/ir/sym.py)."""

    storage: str
    dtype: DType
    shape: tuple
    strides: tuple
    offset: object = 0

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n = n * s
        return n

    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def contiguous(storage: str, dtype: DType, shape: tuple[int, ...]) -> TensorArg:
    return TensorArg(storage, dtype, tuple(shape), contiguous_strides(tuple(shape)))


# ----------------------------------------------------------------------------- kernel ops
class Act(enum.Enum):
    GELU_TANH = "gelu_tanh"
    GELU_ERF = "gelu_erf"
    SILU = "silu"
    RELU = "relu"
    RELU6 = "relu6"
    HARDSWISH = "hardswish"
    HARDSIGMOID = "hardsigmoid"
    SIGMOID = "sigmoid"


@dataclass(frozen=True)
class EpBias:
    """acc += bias[n] (bias is a 1-D TensorArg of length N)."""

    bias: TensorArg


@dataclass(frozen=True)
class EpAct:
    act: Act


@dataclass(frozen=True)
class EpAdd:
    """acc += other[m, n] (residual add; `other` has the output's 2-D shape [M, N])."""

    other: TensorArg


@dataclass(frozen=True)
class EpMul:
    """acc *= other[m, n] (e.g. SwiGLU's up * silu(gate))."""

    other: TensorArg


@dataclass(frozen=True)
class EpScale:
    """acc *= scale: `scale` is an f32 TensorArg of shape (1,) (per-tensor: one value for the
    whole output) or (N,) (per-channel: broadcast over rows, like a bias). Dequantization
    scales of FP8/INT8 GEMMs and folded constant multipliers."""

    scale: TensorArg


@dataclass(frozen=True)
class EpSwiGLU:
    """silu(gate) * up of a gate/up GEMM whose weight rows are interleaved in blocks of
    `group`: the accumulator has N_acc = 2 * N columns laid out [g_0..g_{G-1}, u_0..u_{G-1},
    g_G..g_{2G-1}, u_G.., ...] (G = group); output column j is
    silu(acc[:, 2G*(j//G) + j%G]) * acc[:, 2G*(j//G) + G + j%G]. Only as the FIRST epilogue
    step (it turns N_acc columns into N); later steps see the N output columns.
    `b` is [N_acc, K], `out` is [M, N]. A tile of BN = 2G*k accumulator columns holds whole
    pairs, so the pairing stays inside one thread's registers (wgmma fragments)."""

    group: int = 64


EpilogueStep = Union[EpBias, EpAct, EpAdd, EpMul, EpScale, EpSwiGLU]
# what one GEMM/conv kernel's epilogue holds (EpSwiGLU not counted): steps, and of them the
# ones with a tensor operand (bias/add/mul/scale: each 2-D one is a tile of registers). The
# fusion pass (passes/gemm_chain.py) stops a chain there; the rest are pointwise ops.
EPILOGUE_MAX_STEPS = 5
EPILOGUE_MAX_TENSORS = 3


def epilogue_operands(epilogue) -> list[TensorArg]:
    """The tensors an epilogue reads, in step order."""
    out = []
    for s in epilogue:
        if isinstance(s, EpBias):
            out.append(s.bias)
        elif isinstance(s, (EpAdd, EpMul)):
            out.append(s.other)
        elif isinstance(s, EpScale):
            out.append(s.scale)
    return out


def swiglu_group(op: "GemmOp") -> int | None:
    """EpSwiGLU's group if the op's epilogue starts with one, else None."""
    if op.epilogue and isinstance(op.epilogue[0], EpSwiGLU):
        return op.epilogue[0].group
    return None


@dataclass(frozen=True)
class GemmOp:
    """out[M, N] = epilogue(a[M, K] @ b[N, K]^T), accumulate in f32, steps applied in order,
    then cast to out.dtype. `b` is the Linear weight layout [N, K]. All operands 2-D views.
    `b_scale`: a quantized weight's dequantization, f32 [N_acc] (one scale per row of b, i.e.
    per accumulator column): acc = a @ (b * b_scale[:, None])^T, applied to the accumulator
    before every epilogue step (SwiGLU's pairing included); b is then f8e4m3 (--precision
    fp8-weights / fp8, passes/quantize.py).
    `quantize_a` (--precision fp8, with b_scale): the product is taken on e4m3 activations:
    each row of a divided by its scale amax(|row|) / 448, rounded to e4m3, the accumulator
    multiplied back. The reference scales each row over all of K; a kernel may use finer
    ranges (the split-K kernel: each K split its own scale), which only rounds differently.
    `a_scale` (--precision fp8, with b_scale): a arrives in f8e4m3 with its dequantization
    scale per row, f32 [M] (written so by the op before: RMSNormOp.out_scale)."""

    a: TensorArg
    b: TensorArg
    out: TensorArg
    epilogue: tuple[EpilogueStep, ...] = ()
    b_scale: TensorArg | None = None
    quantize_a: bool = False
    a_scale: TensorArg | None = None

    @property
    def fp8_activations(self) -> bool:
        """The product is taken on e4m3 activations (quantized here, or arriving so)."""
        return self.quantize_a or self.a_scale is not None


@dataclass(frozen=True)
class GemmNormOp:
    """A GEMM and the RMSNorm of its output rows, as one op (passes/fuse_gemm_norm.py): the
    GEMM's out (the residual stream) is written as before and norm.out = RMSNormOp(x =
    gemm.out). One op so that a split-K GEMM's reduce, which holds whole output rows, can
    normalize them too (triton/gemm_norm.py); other configs run the two kernels in turn."""

    gemm: GemmOp
    norm: "RMSNormOp"

    @property
    def out(self) -> TensorArg:
        return self.gemm.out


@dataclass(frozen=True)
class AttentionOp:
    """out[B, Hq, S, D] = softmax(q k^T * scale [+ causal mask] [+ mask]) v, with GQA: query
    head h reads kv head h // (Hq // Hkv). q/k/v/out are 4-D strided views [B, H, S, D].
    `mask`, a run-time input broadcast to [B, Hq, S, T] (stride 0 where it is broadcast): bool
    (True: the key is seen) or floating (added to the scaled scores). A query row that sees no
    key gives zeros, as torch's scaled_dot_product_attention does."""

    q: TensorArg
    k: TensorArg
    v: TensorArg
    out: TensorArg
    causal: bool
    scale: float
    mask: TensorArg | None = None
    # positions of the queries (int64 [B, S], a generation step's): key t is seen by query
    # (b, s) iff t <= kv_limit[b, s] (and t > kv_limit[b, s] - window when window > 0)
    kv_limit: TensorArg | None = None
    window: int = 0
    # > 0: scores = softcap * tanh(q k^T * scale / softcap) before the masks (Gemma-2)
    softcap: float = 0.0
    # a second run-time term, floating, added with the mask (which it accompanies): a
    # per-head bias beside a mask shared by the heads (ALiBi and a padding mask), each read
    # through its own broadcast strides (passes/attention_terms.py)
    bias: TensorArg | None = None


@dataclass(frozen=True)
class RMSNormOp:
    """out[R, C] = x / sqrt(mean(x^2, -1) + eps) * weight[C], computed in f32.
    x and out are 2-D views; weight is 1-D (or None for no affine).
    `out_scale` (--precision fp8: the next GEMMs' FP8 input): out is f8e4m3, each row divided
    by its scale amax(|row|) / 448, which the op writes to out_scale, f32 [R]."""

    x: TensorArg
    weight: TensorArg | None
    out: TensorArg
    eps: float
    out_scale: TensorArg | None = None


@dataclass(frozen=True)
class LayerNormOp:
    """out[R, C] = (x - mean(x, -1)) / sqrt(var(x, -1) + eps) [* weight[C]] [+ bias[C]],
    biased variance, statistics in f32. x and out are 2-D views (any strides); weight and bias
    are 1-D views (or None)."""

    x: TensorArg
    weight: TensorArg | None
    bias: TensorArg | None
    out: TensorArg
    eps: float


@dataclass(frozen=True)
class SoftmaxOp:
    """out[R, C] = softmax(x * scale, -1) over the last dim (log_softmax when `log`), f32 math,
    max-subtracted (stable). x and out are 2-D views (any strides)."""

    x: TensorArg
    out: TensorArg
    scale: float = 1.0
    log: bool = False


REDUCE_KINDS = ("sum", "mean", "amax", "amin", "argmax")  # argmax: int64, first of equals


@dataclass(frozen=True)
class ReduceOp:
    """out[R] = kind(x[R, C], -1) for kind in REDUCE_KINDS, accumulated in f32 (integer and
    bool x: sum, amax, amin in int64), cast to out.dtype. x is a 2-D view, out a 1-D view
    (keepdim is only the IR value's shape)."""

    kind: str
    x: TensorArg
    out: TensorArg


@dataclass(frozen=True)
class RopeOp:
    """Rotary embedding on a 4-D view x[B, H, S, D], of its first R = rotary_dim dims (None:
    all D; the others are copied): out[.., :R] = x * cos[s, :] + rot(x) * sin[s, :] with
    rot(x) = cat(-x[.., R/2:R], x[.., :R/2]) (rotate-half) or, `interleaved`, the pairs
    (2i, 2i+1) turned: rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i].
    cos/sin are 2-D views [S, R] (every sequence's) or 3-D [B, S, R] (each sequence at its own
    positions: a generation step), of any float dtype; out is a 4-D view [B, H, S, D]. The math
    is f32, rounded once to out's dtype."""

    x: TensorArg
    cos: TensorArg
    sin: TensorArg
    out: TensorArg
    interleaved: bool = False
    rotary_dim: int | None = None

    @property
    def rot_dim(self) -> int:
        """R: how many leading dims of each head are rotated."""
        return self.rotary_dim if self.rotary_dim is not None else self.x.shape[3]


@dataclass(frozen=True)
class EmbeddingOp:
    """out[i, :] = table[ids[i // C, i % C], :] for i < R * C: rows of a [V, D] table picked
    by integer ids, a 2-D view [R, C] (int32 or int64) read in row-major order; out is [R * C,
    D]. An id outside [0, V) reads row clamp(id, 0, V - 1): torch raises there, a kernel
    cannot."""

    table: TensorArg
    ids: TensorArg
    out: TensorArg


# Pointwise expressions: a small tree over the op's inputs, evaluated in f32.
@dataclass(frozen=True)
class PwInput:
    index: int  # into PointwiseOp.inputs


@dataclass(frozen=True)
class PwConst:
    value: float


@dataclass(frozen=True)
class PwUnary:
    fn: str  # neg exp log sqrt rsqrt sin cos tanh sigmoid relu silu gelu_tanh gelu_erf abs recip


@dataclass(frozen=True)
class PwExpr:
    """fn in: add sub mul div max min pow (binary) or a PwUnary name (unary); args are
    PwExpr | PwInput | PwConst."""

    fn: str
    args: tuple["PwNode", ...]


PwNode = Union[PwExpr, PwInput, PwConst]


@dataclass(frozen=True)
class PointwiseOp:
    """out[...] = expr(inputs broadcast to out.shape) (numpy broadcasting, inputs are views
    whose shapes broadcast to out.shape), computed in f32, cast to out.dtype."""

    inputs: tuple[TensorArg, ...]
    expr: PwNode
    out: TensorArg


@dataclass(frozen=True)
class ConvOp:
    """2-D convolution (1-D: H = KH = 1), channels-last, f32 accumulation, then the epilogue
    (as GemmOp's: the output is out[M = N*OH*OW, OC], a pixel per row) and a cast to out.dtype.
    x is a 4-D view [N, H, W, C] (any strides: a model's NCHW input is read where it lies).
    out is a 2-D view [M, OC], or a 4-D view [N, OH, OW, OC] of any strides (a model's NCHW
    output written where it lies); the epilogue's tensor operands are [M, OC] views.
    x_scale, a [N, C] view: x is multiplied by it per image and input channel as it is loaded
    (a squeeze-excitation's channel gate, applied by the convolution that reads its result).
    w is packed at build time, contiguous: [OC, KH*KW*C/groups] with K ordered (kh, kw, c) for
    the implicit GEMM; for a depthwise conv (`depthwise`: groups == C == OC) [KH*KW, C].
    padding is ((top, bottom), (left, right)); out_hw = (OH, OW)."""

    x: TensorArg
    w: TensorArg
    out: TensorArg
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[tuple[int, int], tuple[int, int]]
    dilation: tuple[int, int]
    groups: int
    out_hw: tuple
    epilogue: tuple[EpilogueStep, ...] = ()
    x_scale: TensorArg | None = None

    @property
    def rows(self):
        """M = N*OH*OW: the output pixels."""
        s = self.out.shape
        return s[0] if len(s) == 2 else s[0] * s[1] * s[2]

    @property
    def out_channels(self) -> int:
        return self.out.shape[-1]

    @property
    def depthwise(self) -> bool:
        c = self.x.shape[3]
        return self.groups == c and self.out_channels == c and c > 1


@dataclass(frozen=True)
class PoolOp:
    """Max or average pooling, channels-last: x [N, H, W, C] and out [N, OH, OW, C] 4-D views.
    Windows start at oh * stride - padding; avg divides by `divisor` if set, else by the window
    clipped to the padded image (`count_include_pad`) or to the image (torch's rule, ceil_mode
    included: the output size already says it)."""

    kind: str
    x: TensorArg
    out: TensorArg
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    count_include_pad: bool = True
    divisor: int | None = None


@dataclass(frozen=True)
class BmmOp:
    """out[Bt, M, N] = a[Bt, M, K] @ b[Bt, K, N], f32 accumulation: two computed operands
    (batch dims of either may be broadcast: stride 0). All 3-D strided views."""

    a: TensorArg
    b: TensorArg
    out: TensorArg


@dataclass(frozen=True)
class ScanOp:
    """out[R, C] = cumsum(x[R, C], -1): exact in int64 for integer/bool x, f32 accumulation
    for floating x, cast to out.dtype. x and out are 2-D views."""

    x: TensorArg
    out: TensorArg


MAX_TOPK_COLS = 4096  # a TopkOp's whole row lives in registers


@dataclass(frozen=True)
class TopkOp:
    """out[R, k] = the k largest (`largest`, descending) or smallest (ascending) of each row
    of x[R, C] (equal values in index order, as a stable sort; torch.topk leaves that order
    open): their values (cast to out.dtype) or, with `indices`, their int64 column indices.
    Compared in f32: for float x."""

    x: TensorArg
    out: TensorArg
    k: int
    indices: bool
    largest: bool = True


@dataclass(frozen=True)
class SortOp:
    """Each row of x[R, C] (integers, bool or floats up to 32 bits) sorted ascending or
    `descending`, stable, NaN after every number (first when descending), as torch: out
    [R, C] the sorted values or, with `indices`, the int64 permutation (out[r, i] = the
    column of the row's i-th element)."""

    x: TensorArg
    out: TensorArg
    indices: bool
    descending: bool = False


@dataclass(frozen=True)
class HistcOp:
    """out[bins] = counts of x[N] in equal-width bins of [lo, hi] (torch.histc: hi falls in
    the last bin, values outside are not counted)."""

    x: TensorArg
    out: TensorArg
    lo: float
    hi: float


@dataclass(frozen=True)
class InversePermOp:
    """out[order[i]] = i for a permutation order[N] (int64 out)."""

    order: TensorArg
    out: TensorArg


@dataclass(frozen=True)
class ScatterRowsOp:
    """out[rows[r], :] = values[r, :] for r < R; rows outside [0, N) are skipped (a bad index
    never writes outside the table). out [N, C] is written in place: the rows not named keep
    what they held (a KV cache: session state). With `reduce` "sum", "amax" or "amin" each
    value is combined with what out holds by an atomic (f32 / int32 / int64 out), so rows
    named twice accumulate; a float sum's order of additions varies from run to run."""

    rows: TensorArg
    values: TensorArg
    out: TensorArg
    reduce: str = "none"


@dataclass(frozen=True)
class KvWriteOp:
    """A decoder layer's write of its new keys and values, in one kernel (what RopeOp(q),
    RopeOp(k), ScatterRowsOp(k) and ScatterRowsOp(v) do one after the other;
    passes/fuse_kv_write.py forms it):
      out = rope(q)                                  q, out: [B, Hq, S, D] strided views
      k_cache[rows[b*S + s], h*D + d] = rope(k)[b, h, s, d]       k: [B, Hkv, S, D]
      v_cache[rows[r], c] = v[r, c]                  v: [B*S, C]
    rope as RopeOp with its `interleaved` and `rotary_dim` (cos/sin [S, R] or [B, S, R]); rows
    outside [0, N) are skipped, as ScatterRowsOp. The caches ([N, Hkv*D] and [N, C]) are
    written in place (session state). A layer without rotary embedding (SmolLM3's NoPE
    layers, learned positions) has q, out, cos and sin None: the keys are only stored."""

    q: TensorArg | None
    k: TensorArg
    v: TensorArg
    cos: TensorArg | None
    sin: TensorArg | None
    rows: TensorArg
    out: TensorArg | None
    k_cache: TensorArg
    v_cache: TensorArg
    interleaved: bool = False
    rotary_dim: int | None = None

    @property
    def rotates(self) -> bool:
        return self.cos is not None

    @property
    def rot_dim(self) -> int:
        """R: how many leading dims of each head are rotated (0: none)."""
        if not self.rotates:
            return 0
        return self.rotary_dim if self.rotary_dim is not None else self.k.shape[3]


@dataclass(frozen=True)
class GroupedMmOp:
    """out[T, N] = a[T, K] @ b[g] for the rows of group g, offs[g-1] <= row < offs[g]
    (offs[-1] = 0; offs int32/int64 cumulative ends, E of them); rows past offs[E-1] are 0.
    f32 accumulation; b a strided [E, K, N] view (a weight's permute). `swiglu_group` > 0:
    b's columns interleave gate and up blocks of that many, out[T, N/2] = silu(gate) * up."""

    a: TensorArg
    b: TensorArg
    offs: TensorArg
    out: TensorArg
    swiglu_group: int = 0


KernelOp = Union[GemmOp, AttentionOp, RMSNormOp, LayerNormOp, SoftmaxOp, ReduceOp, RopeOp,
                 EmbeddingOp, PointwiseOp, ConvOp, PoolOp, ScanOp, BmmOp, TopkOp, SortOp,
                 HistcOp, InversePermOp, GroupedMmOp, KvWriteOp, GemmNormOp]


def op_outputs(op: KernelOp) -> list[TensorArg]:
    """Every tensor the op writes: its out, an RMSNormOp's out_scale (--precision fp8), a
    KvWriteOp's caches."""
    if isinstance(op, RMSNormOp) and op.out_scale is not None:
        return [op.out, op.out_scale]
    if isinstance(op, KvWriteOp):  # (no out when the layer has no rope)
        return [t for t in (op.out, op.k_cache, op.v_cache) if t is not None]
    if isinstance(op, GemmNormOp):
        return [op.gemm.out, op.norm.out]
    return [op.out]


def op_inputs(op: KernelOp) -> list[TensorArg]:
    """Every operand the op reads (for liveness)."""
    if isinstance(op, GemmOp):
        return [op.a, op.b, *epilogue_operands(op.epilogue)] + [
            t for t in (op.b_scale, op.a_scale) if t is not None]
    if isinstance(op, GemmNormOp):  # the norm reads the GEMM's output: written here
        return op_inputs(op.gemm) + ([op.norm.weight] if op.norm.weight is not None else [])
    if isinstance(op, AttentionOp):
        return [op.q, op.k, op.v] + [t for t in (op.mask, op.kv_limit, op.bias)
                                     if t is not None]
    if isinstance(op, RMSNormOp):  # out_scale is written, listed for its lifetime
        return [op.x] + [t for t in (op.weight, op.out_scale) if t is not None]
    if isinstance(op, LayerNormOp):
        return [op.x] + [t for t in (op.weight, op.bias) if t is not None]
    if isinstance(op, (SoftmaxOp, ReduceOp, ScanOp, TopkOp, SortOp, HistcOp)):
        return [op.x]
    if isinstance(op, InversePermOp):
        return [op.order]
    if isinstance(op, ScatterRowsOp):
        return [op.rows, op.values]
    if isinstance(op, GroupedMmOp):
        return [op.a, op.b, op.offs]
    if isinstance(op, BmmOp):
        return [op.a, op.b]
    if isinstance(op, RopeOp):
        return [op.x, op.cos, op.sin]
    if isinstance(op, KvWriteOp):
        return [t for t in (op.q, op.k, op.v, op.cos, op.sin, op.rows) if t is not None]
    if isinstance(op, EmbeddingOp):
        return [op.table, op.ids]
    if isinstance(op, PointwiseOp):
        return list(op.inputs)
    if isinstance(op, ConvOp):
        scale = [op.x_scale] if op.x_scale is not None else []
        return [op.x, op.w, *scale, *epilogue_operands(op.epilogue)]
    if isinstance(op, PoolOp):
        return [op.x]
    raise TypeError(f"not a kernel op: {type(op).__name__}")


def op_output(op: KernelOp) -> TensorArg:
    return op.out


from aotpack.kernels.launch import (  # noqa: E402,F401  (the compiled form: launch.py)
    PtrSlot, NullSlot, ScratchSlot, CounterSlot, COUNTERS, IntSlot, F32Slot, FastDivmodSlot,
    TensorMapSlot, Slot, CompiledKernel, Launch, Target, SM90,
)
