"""The operation set of the IR: an `Op` enum and one typed attribute dataclass per op kind.

Layout ops (VIEW ... SQUEEZE) are what the frontend produces; canonicalization turns them into
AS_STRIDED (a strided view over the *contiguous layout* of a non-view value) or COPY + view.
ROPE and SWIGLU are produced by pattern matching (passes/fuse_patterns.py, fuse_swiglu.py),
never by the frontend.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from aotpack.dtypes import DType


class Op(enum.Enum):
    # matrix products
    LINEAR = "linear"  # (x[..., K], w[N, K] [, b[N]]) -> [..., N]
    MATMUL = "matmul"  # (a[..., M, K], b[..., K, N]) -> [..., M, N]
    # rows of a table: (table[V, D], ids[...] integer) -> [..., D] (nn.Embedding)
    EMBEDDING = "embedding"
    # elementwise binary (a second tensor operand or a scalar in BinaryAttrs)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"  # torch.div(rounding_mode="floor"): integers stay integers
    MAX = "max"
    MIN = "min"
    POW = "pow"
    # elementwise unary
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIP = "recip"
    ABS = "abs"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    SILU = "silu"
    GELU = "gelu"
    RELU6 = "relu6"  # min(max(x, 0), 6)
    HARDSWISH = "hardswish"  # x * relu6(x + 3) / 6
    HARDSIGMOID = "hardsigmoid"  # relu6(x + 3) / 6
    ERF = "erf"
    LOG2 = "log2"
    EXP2 = "exp2"
    LOG1P = "log1p"  # log(1 + x), exact for small x
    EXPM1 = "expm1"  # exp(x) - 1, exact for small x
    SIGN = "sign"
    FLOOR = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    ROUND = "round"  # half to even, as torch.round
    CAST = "cast"
    # comparisons (bool results; a scalar operand in BinaryAttrs), logic on bools, selection
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    NOT = "not"
    WHERE = "where"  # (cond, a, b) -> a where cond else b, broadcast
    # reductions and normalizations
    MEAN = "mean"
    SUM = "sum"
    AMAX = "amax"
    AMIN = "amin"
    ARGMAX = "argmax"  # ReduceAttrs with one dim; int64 (the first of equal maxima)
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    RMS_NORM = "rms_norm"  # (x [, w]) over the last `ndim` dims
    LAYER_NORM = "layer_norm"  # (x [, w [, b]])
    CUMSUM = "cumsum"  # prefix sums along `dim` (ScanAttrs), in the result dtype
    # mixture-of-experts routing (frontend/aten_moe.py): one output each, so topk and sort
    # are two nodes (values, indices) over the same input
    TOPK = "topk"  # (x[..., C]) -> [..., k]: the k largest (or smallest) of the last dim
    SORT = "sort"  # (x[..., C]) -> [..., C]: the last dim sorted, stable (SortAttrs)
    HISTC = "histc"  # (x[N]) -> [bins] f32: counts per equal-width bin of [lo, hi] (HistcAttrs)
    INVERSE_PERM = "inverse_perm"  # (order[N] a permutation) -> out[order[i]] = i, int64
    # (table[N, C], rows[R] int, values[R, C]) -> table with row rows[r] set to values[r], or
    # combined with it (ScatterAttrs.reduce: index_put(accumulate=True), scatter_add); rows
    # outside [0, N) are skipped. When the table is session state read by nothing else (a KV
    # cache), the kernel writes it in place.
    SCATTER_ROWS = "scatter_rows"
    # (a[T, K], b[E, K, N], offs[E] int32 cumulative row ends) -> [T, N]: rows
    # offs[g-1]..offs[g] of a times b[g] (torch._grouped_mm); rows past offs[E-1] are 0;
    # GroupedMmAttrs.swiglu_group: the SwiGLU of interleaved gate/up columns, [T, N/2]
    GROUPED_MM = "grouped_mm"
    SDPA = "sdpa"  # (q[B,Hq,S,D], k[B,Hkv,T,D], v[B,Hkv,T,Dv])
    ROPE = "rope"  # (x[B,H,S,D], cos, sin) RopeAttrs: rotate-half or interleaved, partial
    # silu(gate) * up of a gate/up linear whose weight rows are interleaved in blocks of
    # `group` (passes/fuse_swiglu.py): x[..., 2N] -> [..., N]; only that pass produces it
    SWIGLU = "swiglu"
    # convolution and pooling over CHANNELS-LAST activations (the frontend puts permutes
    # around them; passes/channels_last.py moves the permutes out of the way):
    # CONV (x[N, H, W, C], w[OC, C/groups, KH, KW] (torch's layout)) -> [N, OH, OW, OC]
    CONV = "conv"
    # POOL (x[N, H, W, C]) -> [N, OH, OW, C]: max or average over a window
    POOL = "pool"
    # layout
    VIEW = "view"
    PERMUTE = "permute"
    SLICE = "slice"
    SELECT = "select"
    EXPAND = "expand"
    UNSQUEEZE = "unsqueeze"
    SQUEEZE = "squeeze"
    CAT = "cat"
    COPY = "copy"  # materialize a contiguous copy (contiguous/clone)
    AS_STRIDED = "as_strided"


BINARY = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MAX, Op.MIN, Op.POW)
UNARY = (Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.RECIP, Op.ABS, Op.SIN, Op.COS, Op.TANH,
         Op.SIGMOID, Op.RELU, Op.SILU, Op.GELU, Op.RELU6, Op.HARDSWISH, Op.HARDSIGMOID,
         Op.ERF, Op.LOG2, Op.EXP2, Op.LOG1P, Op.EXPM1, Op.SIGN, Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND)
COMPARE = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
LOGIC = (Op.AND, Op.OR)
ELEMENTWISE = BINARY + UNARY + (Op.CAST,) + COMPARE + LOGIC + (Op.NOT, Op.WHERE)
LAYOUT = (Op.VIEW, Op.PERMUTE, Op.SLICE, Op.SELECT, Op.EXPAND, Op.UNSQUEEZE, Op.SQUEEZE,
          Op.AS_STRIDED)


@dataclass(frozen=True)
class NoAttrs:
    pass


@dataclass(frozen=True)
class BinaryAttrs:
    """`scalar` set: the op has one tensor input and computes op(x, scalar), or op(scalar, x)
    when `scalar_first` (e.g. rsub, 1 / x)."""

    scalar: float | int | None = None  # an int: integer tensors stay integer (as in torch)
    scalar_first: bool = False


@dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"  # "none" (erf) | "tanh"


@dataclass(frozen=True)
class CastAttrs:
    dtype: DType


@dataclass(frozen=True)
class ReduceAttrs:
    dims: tuple[int, ...]  # non-negative
    keepdim: bool


@dataclass(frozen=True)
class SoftmaxAttrs:
    """(log_)softmax(x * scale, dim); scale != 1 only after fusion (passes/fuse_patterns.py)."""

    dim: int
    scale: float = 1.0


@dataclass(frozen=True)
class ScanAttrs:
    dim: int  # non-negative
    dtype: DType  # torch's: int64 for integer and bool inputs unless asked


@dataclass(frozen=True)
class TopkAttrs:
    k: int
    indices: bool  # the node's output: the int64 indices, else the values
    largest: bool = True  # else the k smallest, ascending


@dataclass(frozen=True)
class SortAttrs:
    indices: bool  # the node's output: the permutation (int64), else the sorted values
    descending: bool = False


SCATTER_REDUCES = ("none", "sum", "amax", "amin")


@dataclass(frozen=True)
class ScatterAttrs:
    """How a row scatter combines a value with what the table holds: "none" overwrites (of
    duplicate rows, one write wins), "sum" / "amax" / "amin" accumulate every value (atomics:
    f32, int32 and int64 tables only)."""

    reduce: str = "none"


@dataclass(frozen=True)
class HistcAttrs:
    bins: int
    lo: float
    hi: float


@dataclass(frozen=True)
class NormAttrs:
    eps: float
    ndim: int = 1  # number of trailing dims normalized


@dataclass(frozen=True)
class SdpaAttrs:
    causal: bool
    scale: float | None  # None: 1/sqrt(D)
    gqa: bool
    # the 4th operand is the queries' positions (int64 [B, S]), not a mask: key t is seen by
    # query (b, s) iff t <= positions[b, s] (and t > positions[b, s] - window if window > 0).
    # passes/fuse_attention.py makes it from a mask computed that way (a KV cache's)
    positions: bool = False
    window: int = 0
    # > 0: the scaled scores are soft-capped before the mask, softcap * tanh(scores / softcap)
    # (Gemma-2's attn_logit_softcapping); passes/fuse_attention.py finds it written out
    softcap: float = 0.0


@dataclass(frozen=True)
class RopeAttrs:
    """ROPE(x[B, H, S, D], cos, sin): the first `rotary_dim` dims of x (None: all D) become
    x*cos + rot(x)*sin, the rest pass through; cos/sin are [.., S, rotary_dim]. rot is
    rotate-half, cat(-x[.., R/2:], x[.., :R/2]), or with `interleaved` the pairs (2i, 2i+1)
    turned: stack(-x[.., 1::2], x[.., 0::2], -1).flatten(-2) (GLM, Helium, Ernie 4.5).
    The math runs in the dtype x, cos and sin promote to; `dtype` set: the result is rounded
    to it (OLMo-2, Ernie: f32 tables and math, the result cast back to x's dtype)."""

    interleaved: bool = False
    rotary_dim: int | None = None
    dtype: DType | None = None


@dataclass(frozen=True)
class GroupedMmAttrs:
    """`swiglu_group` > 0: b's N columns of each expert interleave gate and up blocks of that
    many (passes/fuse_swiglu.py) and the output is silu(gate) * up, [T, N/2]."""

    swiglu_group: int = 0


@dataclass(frozen=True)
class SwiGLUAttrs:
    """Output column j reads gate column 2G*(j//G) + j%G and up column that + G (G = group),
    the layout of aotpack.kernels.spec.EpSwiGLU."""

    group: int = 64


@dataclass(frozen=True)
class ConvAttrs:
    """2-D convolution geometry (a 1-D convolution is one with H = 1, KH = 1). `padding` is
    ((top, bottom), (left, right)): zeros around the image, possibly asymmetric."""

    stride: tuple[int, int] = (1, 1)
    padding: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


POOL_KINDS = ("max", "avg")


@dataclass(frozen=True)
class PoolAttrs:
    """A pooling window over H and W (channels-last). Output size follows torch's rule:
    floor((H + pt + pb - KH) / SH) + 1, or with `ceil_mode` the ceiling, less one if the last
    window would start in the bottom padding. avg: the divisor is `divisor` if set, else the
    window's size clipped to the padded image (`count_include_pad`) or to the image."""

    kind: str
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int] = (0, 0)
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor: int | None = None


@dataclass(frozen=True)
class ViewAttrs:
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PermuteAttrs:
    dims: tuple[int, ...]


@dataclass(frozen=True)
class SliceAttrs:
    dim: int
    start: int
    end: int  # clamped to the dim size
    step: int = 1


@dataclass(frozen=True)
class SelectAttrs:
    dim: int
    index: int


@dataclass(frozen=True)
class ExpandAttrs:
    shape: tuple[int, ...]


@dataclass(frozen=True)
class DimAttrs:
    """UNSQUEEZE (the new dim), SQUEEZE (dims removed), CAT (the concatenated dim)."""

    dims: tuple[int, ...]


@dataclass(frozen=True)
class StridedAttrs:
    """A view of the input's contiguous layout: element i of the view is flat element
    `offset + sum(i_k * strides[k])` of the input."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0


Attrs = Union[NoAttrs, BinaryAttrs, GeluAttrs, CastAttrs, ReduceAttrs, SoftmaxAttrs, ScanAttrs,
              NormAttrs,
              SdpaAttrs, ViewAttrs, PermuteAttrs, SliceAttrs, SelectAttrs, ExpandAttrs, DimAttrs,
              StridedAttrs, SwiGLUAttrs, RopeAttrs, ConvAttrs, PoolAttrs, TopkAttrs, SortAttrs,
              HistcAttrs, ScatterAttrs, GroupedMmAttrs]

ATTRS_TYPE: dict[Op, type] = {
    **{op: BinaryAttrs for op in BINARY + COMPARE + LOGIC}, Op.GELU: GeluAttrs, Op.CAST: CastAttrs,
    Op.MEAN: ReduceAttrs, Op.SUM: ReduceAttrs, Op.AMAX: ReduceAttrs, Op.AMIN: ReduceAttrs,
    Op.ARGMAX: ReduceAttrs,
    Op.SOFTMAX: SoftmaxAttrs, Op.LOG_SOFTMAX: SoftmaxAttrs, Op.CUMSUM: ScanAttrs,
    Op.RMS_NORM: NormAttrs, Op.LAYER_NORM: NormAttrs, Op.SDPA: SdpaAttrs, Op.VIEW: ViewAttrs,
    Op.PERMUTE: PermuteAttrs, Op.SLICE: SliceAttrs, Op.SELECT: SelectAttrs,
    Op.EXPAND: ExpandAttrs, Op.UNSQUEEZE: DimAttrs, Op.SQUEEZE: DimAttrs, Op.CAT: DimAttrs,
    Op.AS_STRIDED: StridedAttrs, Op.SWIGLU: SwiGLUAttrs, Op.ROPE: RopeAttrs,
    Op.CONV: ConvAttrs, Op.POOL: PoolAttrs,
    Op.TOPK: TopkAttrs, Op.SORT: SortAttrs, Op.HISTC: HistcAttrs, Op.SCATTER_ROWS: ScatterAttrs,
    Op.GROUPED_MM: GroupedMmAttrs,
}


def attrs_type(op: Op) -> type:
    return ATTRS_TYPE.get(op, NoAttrs)
