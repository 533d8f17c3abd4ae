"""Triton source text for a pointwise expression over broadcast, strided operands.

`coalesce` reduces the output shape and every operand's broadcast strides to the fewest dims
(merging dims that all operands walk contiguously); `kernel_source` writes the @triton.jit
kernel. Pure string work: no torch, no triton import.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.dtypes import DType
from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import PwConst, PwExpr, PwInput

_TL_DTYPE = {
    DType.BF16: "tl.bfloat16", DType.F16: "tl.float16", DType.F32: "tl.float32",
    DType.F64: "tl.float64", DType.I8: "tl.int8", DType.I16: "tl.int16", DType.I32: "tl.int32",
    DType.I64: "tl.int64", DType.U8: "tl.uint8", DType.BOOL: "tl.int1",
}

# Unary/binary functions as expression templates over already-computed f32 values. (neg is
# x * -1: Triton's unary minus computes 0 - x, which is +0 for +0, not -0 as torch.)
UNARY = {
    "neg": "({0} * -1)", "exp": "tl.exp({0})", "log": "tl.log({0})", "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "tanh": "_tanh({0})", "sigmoid": "_sigmoid({0})", "relu": "tl.maximum({0}, 0.0)",
    "silu": "({0} * _sigmoid({0}))", "gelu_tanh": "_gelu_tanh({0})",
    "gelu_erf": "_gelu_erf({0})", "abs": "tl.abs({0})", "recip": "(1.0 / {0})",
    "relu6": "tl.minimum(tl.maximum({0}, 0.0), 6.0)",
    "hardswish": "({0} * (tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) * (1.0 / 6.0)))",
    "hardsigmoid": "(tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) * (1.0 / 6.0))",
    "erf": "tl.erf({0})", "log1p": "_log1p({0})", "expm1": "_expm1({0})",
    "log2": "tl.log2({0})", "exp2": "tl.exp2({0})",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",  # NaN and -0: 0, as torch
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))", "round": "_round_even({0})",
}
BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "floordiv": "tl.floor({0} / {1})",  # in int64: _Emitter._call
    "max": "tl.maximum({0}, {1})", "min": "tl.minimum({0}, {1})", "pow": "_pow({0}, {1})",
}
# Comparisons and logic give 1 / 0 in the compute type (so they can be summed, multiplied or
# stored as bool, which is != 0).
PREDICATES = {
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "and": "(({0} != 0) & ({1} != 0))",
    "or": "(({0} != 0) | ({1} != 0))", "not": "({0} == 0)",
}
# What an all-integer expression may use and stay exact in int64 (ids past 2**24 compared,
# offset, masked: f32 would round them)
INTEGER_EXACT = {"add", "sub", "mul", "floordiv", "max", "min", "neg", "abs", *PREDICATES, "where"}
# pow by a constant exponent: cheaper and exact forms.
_POW_CONST = {2.0: "({0} * {0})", 3.0: "({0} * {0} * {0})", 1.0: "({0} + 0.0)",
              0.5: "tl.sqrt({0})", -1.0: "(1.0 / {0})", -0.5: "tl.rsqrt({0})"}

# Helpers shared by every generated file. tanh/sigmoid use exp2 of a non-positive argument so
# nothing overflows; no libdevice call, so the same text runs in Triton's interpreter.
_HELPERS = '''
@triton.jit
def _tanh(x):
    t = tl.exp2(-2.8853900817779268 * tl.abs(x))  # exp(-2|x|) in (0, 1]
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def _floordiv_int(a, b):
    # torch's floor division of integers rounds toward -inf, Triton's // toward 0
    q = a // b
    return q - ((q * b != a) & ((a < 0) != (b < 0))).to(q.dtype)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp2(-1.4426950408889634 * x))


@triton.jit
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@triton.jit
def _log1p(x):
    # Kahan: log(u) * x / (u - 1) with u = 1 + x rounded cancels the rounding of u
    u = 1.0 + x
    d = u - 1.0
    y = tl.where(d == 0.0, x, tl.log(u) * (x / tl.where(d == 0.0, 1.0, d)))
    return tl.where(x == float("inf"), x, y)  # inf / inf above


@triton.jit
def _expm1(x):
    # Kahan: (u - 1) * x / log(u) with u = exp(x); exp(x) - 1 where it cannot cancel
    u = tl.exp(x)
    lu = tl.log(u)
    small = (u == 1.0) | (lu == 0.0)
    near = (u - 1.0) * (x / tl.where(small, 1.0, lu))
    return tl.where(small, x, tl.where(tl.abs(x) < 0.5, near, u - 1.0))


@triton.jit
def _round_even(x):
    # half to even, as torch.round: floor(x + 0.5), one less where that is an odd tie
    r = tl.floor(x + 0.5)
    tie = (r - x) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    # from 2**23 up every f32 is an integer (and x + 0.5 would round to even)
    return tl.where(tl.abs(x) >= 8388608.0, x, tl.where(tie & odd, r - 1.0, r))


@triton.jit
def _pow(a, b):
    # torch.pow for real results: |a|^b; a negative base keeps its sign for odd integral b
    # and gives NaN for a fractional b; x^0 == 1 (also for x = 0 and NaN).
    mag = tl.exp2(b * tl.log2(tl.abs(a)))
    integral = tl.floor(b) == b
    odd = integral & (tl.floor(b * 0.5) * 2.0 != b)
    signed = tl.where(integral, tl.where(odd, -mag, mag), float("nan"))
    return tl.where(b == 0.0, 1.0, tl.where(a < 0, signed, mag))
'''


@dataclass(frozen=True)
class Layout:
    """Coalesced iteration space: extents (outermost first) and per-operand element strides.
    A symbolic extent or stride (an Expr of the dims) is a kernel parameter, not a constant."""

    sizes: tuple
    out_strides: tuple
    in_strides: tuple

    @property
    def numel(self):
        n = 1
        for s in self.sizes:
            n = n * s
        return n

    def params(self) -> list:
        """The distinct symbolic values the kernel takes as parameters, in order of use
        (extents, element count, strides)."""
        out: list = []
        for v in (*self.sizes, self.numel, *self.out_strides,
                  *(s for st in self.in_strides for s in st)):
            if not isinstance(v, int) and v not in out:
                out.append(v)
        return out

    def template(self) -> "Layout":
        """The layout with each symbolic value replaced by its parameter name: what decides
        the kernel's code (two ops differing only in symbolic values share a kernel)."""
        names = {v: f"p{i}" for i, v in enumerate(self.params())}

        def name(v):
            return names[v] if not isinstance(v, int) else v
        return Layout(tuple(map(name, self.sizes)), tuple(map(name, self.out_strides)),
                      tuple(tuple(map(name, st)) for st in self.in_strides))


def _broadcast_strides(out_shape, shape, strides) -> list[int]:
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise ValueError(f"pointwise: input shape {shape} has more dims than out {out_shape}")
    shape, strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    result = []
    for o, s, st in zip(out_shape, shape, strides):
        if s not in (1, o):
            raise ValueError(f"pointwise: input shape {shape} does not broadcast to {out_shape}")
        result.append(0 if s == 1 else st)
    return result


def coalesce(out_shape, out_strides, inputs) -> Layout:
    """Drop unit dims, then merge each dim into the inner one when every operand's stride
    satisfies stride_outer == stride_inner * size_inner (the pair walks like one dim)."""
    operands = [list(out_strides)] + [_broadcast_strides(out_shape, s, st) for s, st in inputs]
    if 0 in out_shape:  # nothing to write: one empty dim (no division by a zero extent)
        return Layout((0,), (0,), tuple((0,) for _ in inputs))
    keep = [d for d, n in enumerate(out_shape) if n != 1]
    sizes: list[int] = []
    strides: list[list[int]] = [[] for _ in operands]
    for d in reversed(keep):  # innermost first
        n = out_shape[d]
        if sizes and all(op[d] == st[0] * sizes[0] for op, st in zip(operands, strides)):
            sizes[0] *= n  # the inner strides stay: the merged dim starts where they start
            continue
        sizes.insert(0, n)
        for op, st in zip(operands, strides):
            st.insert(0, op[d])
    if not sizes:  # a scalar output
        sizes, strides = [1], [[0] for _ in operands]
    return Layout(tuple(sizes), tuple(strides[0]), tuple(tuple(s) for s in strides[1:]))


def _const_literal(value: float) -> str:
    v = float(value)
    if v != v:
        return 'float("nan")'
    if v in (float("inf"), float("-inf")):
        return f'float("{"-" if v < 0 else ""}inf")'
    return repr(v)


class _Emitter:
    """Turns the expression tree into straight-line statements, one variable per distinct
    subtree (a repeated input or subexpression is computed once), in the compute type `ctype`
    (tl.float32, or tl.int64 for all-integer expressions)."""

    def __init__(self, ctype: str = "tl.float32"):
        self.lines: list[str] = []
        self.names: dict[object, str] = {}
        self.ctype = ctype

    def emit(self, node) -> str:
        if node in self.names:
            return self.names[node]
        if isinstance(node, PwInput):
            return f"x{node.index}"  # loaded before the expression
        if isinstance(node, PwConst):
            literal = (str(int(node.value)) if self.ctype == "tl.int64"
                       else _const_literal(node.value))
            text = f"tl.full([BLOCK], {literal}, {self.ctype})"
        elif isinstance(node, PwExpr):
            text = self._call(node)
        else:
            raise ValueError(f"pointwise: bad node {node!r}")
        name = f"v{len(self.names)}"
        self.lines.append(f"    {name} = {text}")
        self.names[node] = name
        return name

    def _call(self, node: PwExpr) -> str:
        if node.fn in UNARY and len(node.args) == 1:
            return UNARY[node.fn].format(self.emit(node.args[0]))
        if node.fn == "pow" and len(node.args) == 2 and isinstance(node.args[1], PwConst):
            form = _POW_CONST.get(float(node.args[1].value))
            if form is not None:
                return form.format(self.emit(node.args[0]))
        if node.fn == "floordiv" and self.ctype == "tl.int64" and len(node.args) == 2:
            return f"_floordiv_int({self.emit(node.args[0])}, {self.emit(node.args[1])})"
        if node.fn in BINARY and len(node.args) == 2:
            return BINARY[node.fn].format(self.emit(node.args[0]), self.emit(node.args[1]))
        if node.fn in PREDICATES and len(node.args) == (1 if node.fn == "not" else 2):
            cond = PREDICATES[node.fn].format(*(self.emit(a) for a in node.args))
            return f"tl.where({cond}, 1, 0).to({self.ctype})"
        if node.fn == "where" and len(node.args) == 3:
            c, a, b = (self.emit(x) for x in node.args)
            return f"tl.where({c} != 0, {a}, {b})"
        raise ValueError(f"pointwise: unsupported function {node.fn!r} with {len(node.args)} args")


def _index_lines(layout: Layout, wide: bool, names: dict) -> list[str]:
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines = [f"    offs = {pid} * BLOCK + tl.arange(0, BLOCK)",
             f"    mask = offs < {_text(layout.numel, names)}"]
    dims = len(layout.sizes)
    if dims == 1:
        return lines + ["    i0 = offs"]
    lines.append("    rest = offs")
    for d in range(dims - 1, 0, -1):  # innermost first; division by constants (or params)
        lines.append(f"    i{d} = rest % {_text(layout.sizes[d], names)}")
        lines.append(f"    rest = rest // {_text(layout.sizes[d], names)}")
    return lines + ["    i0 = rest"]


def _text(v, names: dict) -> str:
    return str(v) if isinstance(v, int) else names[v]


def _address(strides: tuple, names: dict) -> str:
    terms = [f"i{d}" if s == 1 else f"i{d} * {_text(s, names)}"
             for d, s in enumerate(strides) if s != 0]
    return " + ".join(terms) if terms else "offs * 0"


def _max_offset(layout: Layout) -> int:
    """The largest element offset any operand reaches (at the dims' maxima)."""
    spans = [layout.out_strides] + list(layout.in_strides)
    return max(sum(upper_bound(abs(s) * (n - 1)) for s, n in zip(st, layout.sizes))
               for st in spans)


def needs_wide_index(layout: Layout, block: int) -> bool:
    """64-bit offsets: the element count or an operand's reach can pass 2^31 (at the dims'
    maxima). Part of the generated kernel's identity (pointwise.kernel_name): two layouts with
    the same template can differ in it."""
    return max(upper_bound(layout.numel) + block, _max_offset(layout)) >= 2**31


def fn_names(node, acc: list[str]) -> list[str]:
    """The functions an expression uses, in order of first use."""
    if isinstance(node, PwExpr):
        if node.fn not in acc:
            acc.append(node.fn)
        for a in node.args:
            fn_names(a, acc)
    return acc


def integer_exact(expr, in_dtypes, out_dtype: DType) -> bool:
    """The expression runs in int64: integer/bool operands and result, integral constants,
    and only functions that are exact on integers."""
    def consts(node):
        if isinstance(node, PwConst):
            return [node.value]
        return [c for a in getattr(node, "args", ()) for c in consts(a)]
    return (not out_dtype.is_float and all(not d.is_float for d in in_dtypes)
            and set(fn_names(expr, [])) <= INTEGER_EXACT
            and all(float(c).is_integer() for c in consts(expr)))


def kernel_source(name: str, expr, in_dtypes, layout: Layout, out_dtype: DType,
                  block: int) -> str:
    wide = needs_wide_index(layout, block)
    n_inputs = len(in_dtypes)
    ctype = "tl.int64" if integer_exact(expr, in_dtypes, out_dtype) else "tl.float32"
    names = {v: f"p{i}" for i, v in enumerate(layout.params())}
    params = ", ".join(["out_ptr"] + [f"in{i}_ptr" for i in range(n_inputs)] +
                       list(names.values()) + ["BLOCK: tl.constexpr"])
    body = _index_lines(layout, wide, names)
    # an integer copy (ids, index outputs) stays integer: f32 holds integers exactly only
    # below 2**24
    exact_copy = isinstance(expr, PwInput) and not out_dtype.is_float
    for i, strides in enumerate(layout.in_strides):
        body.append(f"    x{i} = tl.load(in{i}_ptr + ({_address(strides, names)}), mask=mask, "
                    f"other=0)" + ("" if exact_copy else f".to({ctype})"))
    emitter = _Emitter(ctype)
    result = emitter.emit(expr)
    body += emitter.lines
    if isinstance(expr, PwInput) and not exact_copy:
        result = f"({result} + 0)"
    body.append(f"    tl.store(out_ptr + ({_address(layout.out_strides, names)}), "
                f"{result}.to({_TL_DTYPE[out_dtype]}), mask=mask)")
    shown = repr(expr)  # a DAG's tree can be long (pointwise.SHARED_TREE_LIMIT): cut
    shown = shown if len(shown) <= 400 else shown[:400] + " ..."
    header = (f'"""Generated by aotpack (pointwise codegen): {shown}; '
              f'layout {layout.template()!r}."""\n'
              "import triton\nimport triton.language as tl\n"
              "from aotpack.kernels.triton.gemm_epilogue import gelu_erf as _gelu_erf\n")
    return (header + _HELPERS + f"\n\n@triton.jit\ndef {name}({params}):\n"
            + "\n".join(body) + "\n")
