"""Dynamic dims from torch.export: symbols, sympy → Expr, and values computed from constants
whose size depends on a symbol.

torch.export names its dims s0, s27, ... and keeps their ranges in `range_constraints`;
`SymbolTable` gives each one the user's name (the `torch.export.Dim` name when aotpack exported
the model itself, else `<input>_<dim>`) and an aotpack `Expr` (aotpack/ir/sym.py).

A value computed only from constants and dims (`arange(S)`, a rotary table for S positions, a
causal mask [B, 1, S, S]) cannot be folded into one constant: its size changes with the dims.
`LazyConstants` keeps the exported node instead and evaluates the exported graph at concrete
points (a value per dim) when a rule needs it: masks are classified at several points, tables
are stored once at the dims' maxima and read through a slice of the symbolic size, after
checking at smaller points that a smaller table is a prefix of the largest one.
"""
from __future__ import annotations

import operator
import re
from typing import Mapping

from aotpack.errors import UserError
from aotpack.ir import sym
from aotpack.ir.sym import Dim, Sym

# Points with these values per dim (clipped to each range) check prefix tables and masks; they
# differ per dim, so a table that swaps two dims is not mistaken for a prefix.
_PROBES = ((2, 3), (5, 7), (11, 13))


class SymbolError(UserError):
    """A dynamic dim aotpack cannot use as declared (no upper bound, only derived, ...)."""


def _is_symint(x) -> bool:
    import torch

    return isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat))


def _clean_name(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit() or name in ("min", "max"):
        name = "d_" + name
    return name


class SymbolTable:
    """torch.export's sympy symbols ↔ aotpack symbols (name, range, example value)."""

    def __init__(self, ep, dim_names: Mapping[tuple[str, int], str] | None = None,
                 example_inputs=None):
        self.by_torch: dict[str, Sym] = {}  # sympy symbol name -> Sym
        self.examples: dict[str, int] = {}
        self.sources: dict[str, tuple[str, int]] = {}  # aotpack name -> (input, dim)
        self._sympy = {str(k): k for k in ep.range_constraints}  # with torch's assumptions
        self.derived: dict[str, str] = {}  # torch symbol -> where an input uses it derived
        # torch's unbacked symbols (an .item(), the size of an arange of them) whose value the
        # build knows: read from a constant tensor (translate._bind_known)
        self.known: dict = {}  # sympy symbol -> value
        # unbacked symbols that stand for a size of the inputs (the .item() of a size held in
        # a tensor, size_held_by): sympy symbol -> aotpack Dim
        self.bound: dict = {}
        self._build(ep, dict(dim_names or {}), example_inputs)

    def _build(self, ep, dim_names, example_inputs) -> None:
        import sympy

        ranges = {str(k): v for k, v in ep.range_constraints.items()}
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"
                        and n.name in ep.graph_signature.user_inputs]
        taken: set[str] = set()
        dims = [(i, node, d, size) for i, node in enumerate(placeholders)
                for d, size in enumerate(getattr(node.meta.get("val"), "shape", ()))
                if _is_symint(size)]
        # dims that are a symbol first, then derived ones (16*s75: s75 read as (dim - c)/k)
        for exact in (True, False):
            for i, node, d, size in dims:
                if isinstance(size.node.expr, sympy.Symbol) == exact:
                    self._add_dim(i, node, d, size, dim_names, ranges, taken, example_inputs)

    def _add_dim(self, i, node, d, size, dim_names, ranges, taken, example_inputs) -> None:
        """The symbol of input `node`'s dim d: torch's symbol itself, or the one symbol of a
        derived dim k*s + c (its Dim's root)."""
        import sympy

        expr = size.node.expr
        k, c = 1, 0
        if not isinstance(expr, sympy.Symbol):
            affine = _affine(expr)
            if affine is None:
                for s in expr.free_symbols:  # s75 // 2, s75*s76: not readable from the dim
                    self.derived.setdefault(str(s), f"dim {d} of input {node.name!r} is {expr}")
                return
            expr, k, c = affine
        tname = str(expr)
        if tname in self.by_torch:
            return
        declared = dim_names.get((node.name, d))
        name = _clean_name(declared or f"{node.name}_{d}")
        vr = ranges.get(tname)
        same = self._declared_twice(declared, name, vr)
        if same is not None:  # one torch.export.Dim on two inputs: one symbol
            self.by_torch[tname] = same
            return
        while name in taken:
            name += "_"
        taken.add(name)
        lo, hi = (int(vr.lower), vr.upper) if vr is not None else (1, None)
        if hi is None or not isinstance(hi, (int, sympy.Integer)) or hi == sympy.oo \
                or str(hi) in ("int_oo", "oo"):
            raise SymbolError(
                f"dim {d} of input {node.name!r} is dynamic with no upper bound: aotpack "
                f"plans memory for the largest shape, so give it a maximum "
                f"(--dynamic {node.name}.{d}=1..N, or torch.export.Dim(..., max=N))")
        self.by_torch[tname] = Sym(name, max(lo, 1), int(hi))
        self.sources[name] = (node.name, d)
        if example_inputs is not None and i < len(example_inputs):
            size_now = int(example_inputs[i].shape[d])
        else:
            size_now = int(size.node.hint) if size.node.hint is not None else k * max(lo, 1) + c
        self.examples[name] = (size_now - c) // k

    def _declared_twice(self, declared, name: str, vr) -> Sym | None:
        """The symbol already made for the Dim `declared`, when another input's dim had the
        same Dim: torch.export keeps two symbols where the model never mixes the dims, but the
        user declared them equal (the runtime checks it: both dims bind one symbol)."""
        if declared is None or name not in self.sources:
            return None
        sym = next(s for s in self.by_torch.values() if s.name == name)
        lo, hi = (int(vr.lower), vr.upper) if vr is not None else (1, None)
        return sym if (max(lo, 1), hi) == (sym.lo, sym.hi) else None

    @property
    def symbols(self) -> list[Sym]:
        return list(dict.fromkeys(self.by_torch.values()))

    def rename(self, text: str) -> str:
        """torch's symbol names (s27) in `text` replaced by aotpack's (S)."""
        return re.sub(r"\b[su]\d+\b", lambda m: self.by_torch[m.group()].name
                      if m.group() in self.by_torch else m.group(), text)

    # -------------------------------------------------------------- conversion
    def dim(self, d) -> Dim:
        """A torch size (int or SymInt) as an aotpack Dim."""
        if isinstance(d, int):
            return d
        if _is_symint(d):
            return self.expr(d.node.expr)
        raise TypeError(f"not a size: {d!r}")

    def expr(self, e) -> Dim:
        """A sympy expression over torch's symbols as an aotpack Dim."""
        import sympy

        if isinstance(e, (int, sympy.Integer)):
            return int(e)
        if self.known and e.free_symbols and e.free_symbols <= self.known.keys():
            value = e.xreplace(self.known)
            if value.is_integer or (value.is_number and float(value) == int(value)):
                return int(value)
        if isinstance(e, sympy.Symbol):
            if e in self.bound:
                return self.bound[e]
            s = self.by_torch.get(str(e))
            if s is None and str(e) in self.derived:
                raise SymbolError(f"{self.derived[str(e)]}: a dim given only through another "
                                  f"(a derived Dim, e.g. 4*K); aotpack needs every dynamic dim "
                                  f"to be an input dim on its own: declare the whole size as "
                                  f"a Dim and split it inside the model")
            if s is None:
                raise SymbolError(f"the size {e} depends on the input data (a data-dependent "
                                  f"shape), which aotpack cannot plan ahead")
            return sym.Expr._atom(s)
        args = [self.expr(a) for a in e.args]
        kind = type(e).__name__
        if isinstance(e, sympy.Add):
            return sum(args[1:], args[0])
        if isinstance(e, sympy.Mul):
            return sym.prod(args)
        if isinstance(e, sympy.Pow) and isinstance(args[1], int) and args[1] >= 0:
            return args[0] ** args[1]
        if kind in ("FloorDiv",):
            return sym.floordiv(args[0], args[1])
        if kind in ("CeilDiv",):
            return sym.cdiv(args[0], args[1])
        if kind in ("Mod", "PythonMod"):
            return sym.mod(args[0], args[1])
        if kind in ("Max",):
            return _fold(sym.sym_max, args)
        if kind in ("Min",):
            return _fold(sym.sym_min, args)
        raise SymbolError(f"size expression {e} ({kind}) is not supported")

    # -------------------------------------------------------------- points
    def max_point(self) -> dict[str, int]:
        return {s.name: s.hi for s in self.symbols}

    def example_point(self) -> dict[str, int]:
        return dict(self.examples)

    def probe_points(self) -> list[dict[str, int]]:
        return probe_points(self.symbols)

    def knows(self, torch_shape) -> bool:
        """Whether every size in `torch_shape` is an int or an expression of known symbols."""
        try:
            for d in torch_shape:
                self.dim(d)
        except SymbolError:
            return False
        return True

    def unify(self, torch_shape, dims) -> None:
        """torch's unbacked symbols in `torch_shape` (a slice up to an .item(), whose length
        torch cannot tell) bound to the sizes aotpack computed for the same dims."""
        import sympy

        if len(torch_shape) != len(dims):
            return
        for d, ours in zip(torch_shape, dims):
            e = getattr(getattr(d, "node", None), "expr", None)
            if isinstance(e, sympy.Symbol) and re.fullmatch(r"u\d+", str(e)) \
                    and e not in self.bound and e not in self.known:
                self.bound[e] = ours

    def torch_env(self, point: Mapping[str, int]) -> dict:
        """sympy substitutions {torch symbol: value} for an aotpack point (and the unbacked
        symbols the build knows)."""
        env = {self._sympy[t]: point[s.name] for t, s in self.by_torch.items()}
        bound = {u: int(sym.subs(d, point)) for u, d in self.bound.items()}
        return {**self.known, **bound, **env}


def _affine(expr):
    """(s, k, c) when the sympy expression is k*s + c (one symbol, integer k >= 1, integer c):
    a derived Dim the runtime can read s back from."""
    import sympy

    if len(expr.free_symbols) != 1:
        return None
    (s,) = expr.free_symbols
    poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
    if poly is None or poly.degree() != 1:
        return None
    k, c = poly.all_coeffs()
    if not (k.is_Integer and c.is_Integer and k >= 1):
        return None
    return s, int(k), int(c)


def probe_points(syms: list[Sym]) -> list[dict[str, int]]:
    """Small points (each dim at its minimum, then distinct small values per dim) and, per
    dim, that dim at its maximum with the others at their minimum: what a mask or a table
    must look like at every size, checked where it is cheap."""
    points = [{s.name: s.lo for s in syms}]
    for probe in _PROBES:
        points.append({s.name: min(max(probe[i % 2] + i // 2, s.lo), s.hi)
                       for i, s in enumerate(syms)})
    for s in syms:
        points.append({t.name: (t.hi if t is s else t.lo) for t in syms})
    unique = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


def table_at_maxima(evaluate, shape: tuple, max_point, points, what: str):
    """A value computed from constants and dims (`evaluate(point)` → tensor), as the tensor
    to store: its value at the dims' maxima, cut to size 1 along the dims it does not vary
    over. SymbolError unless its value at each of `points` is exactly the leading part of
    that tensor (`shape`, symbolic, says which part): a table indexed by position, not a
    value whose entries depend on the dims."""
    full = _reduce_broadcast(evaluate(max_point).detach().cpu(), shape)
    for p in points:
        want = _slice_to(full, sym.subs(tuple(shape), p))
        if not _same(evaluate(p), want):
            raise SymbolError(
                f"{what} is computed from constants, and at dims {p} it is not the leading "
                f"part of its value at the maxima: its entries depend on the dims, which "
                f"aotpack cannot store as a table")
    return full


def _reduce_broadcast(t, shape):
    """`t` with every symbolic dim along which it does not vary cut to size 1."""
    import torch

    for i, d in enumerate(shape):
        if not isinstance(d, int) and t.shape[i] > 1:
            first = t.narrow(i, 0, 1)
            if _same(t, first.expand_as(t)):
                t = first
    return t.contiguous() if isinstance(t, torch.Tensor) else t


def _slice_to(t, sizes):
    """`t`'s leading part of `sizes` (dims of size 1 broadcast)."""
    for i, n in enumerate(sizes):
        if t.shape[i] == 1 and n != 1:
            t = t.expand(*t.shape[:i], n, *t.shape[i + 1:])
        elif t.shape[i] < n:
            return None
        else:
            t = t.narrow(i, 0, n)
    return t


def _same(a, b) -> bool:
    """Exactly equal (NaN equal to NaN): a value computed elementwise is bit for bit the same
    at every size; anything that is not is not a table aotpack may store."""
    import torch

    if b is None or not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _fold(fn, args):
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out


class LazyConstants:
    """Values computed from constants and dims only, evaluated at concrete points on demand
    by replaying the exported graph (memoised per point)."""

    def __init__(self, table: SymbolTable, constant_tensor, limit_bytes: int):
        self.table = table
        self.constant_tensor = constant_tensor  # fx node -> tensor for weights/static constants
        self.limit = limit_bytes
        self._memo: dict[tuple, object] = {}

    def value(self, node, point: Mapping[str, int]):
        key = (node.name, tuple(sorted(point.items())))
        if key not in self._memo:
            self._memo[key] = self._compute(node, point)
        return self._memo[key]

    def _compute(self, node, point):
        import torch
        import torch.fx

        known = self.constant_tensor(node)
        if known is not None:
            return known
        val = node.meta.get("val")
        if _is_symint(val):
            return self.size(val, point)
        if node.op != "call_function":
            raise SymbolError(f"{node.name} depends on run-time data")
        if isinstance(val, torch.Tensor):
            nbytes = val.element_size()
            for d in val.shape:
                nbytes *= self.size(d, point)
            if nbytes > self.limit:
                raise SymbolError(
                    f"{node.name} ({node.target}) computed from constants would take "
                    f"{nbytes >> 20} MiB at dims {dict(point)} on the build host (more than "
                    f"{self.limit >> 20} MiB): lower the dims' maxima")

        def arg(a):
            return self.value(a, point) if isinstance(a, torch.fx.Node) else a

        args = torch.fx.node.map_aggregate(node.args, arg)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, arg)
        return node.target(*args, **kwargs)

    def size(self, d, point) -> int:
        if isinstance(d, int):
            return d
        return int(d.node.expr.xreplace(self.table.torch_env(point)))


# A TorchScript trace keeps the sizes it computes with as 0-d tensors (prim::NumToTensor, then
# aten::Int to use one): converted to torch.export, `seq_length + past` becomes
# scalar_tensor(S) + 0 read back with .item(), an unbacked symbol torch knows nothing about.
_INT_ARITHMETIC = {"aten.add.Tensor": "+", "aten.add.Scalar": "+", "aten.sub.Tensor": "-",
                   "aten.sub.Scalar": "-", "aten.mul.Tensor": "*", "aten.mul.Scalar": "*",
                   "aten.floor_divide.default": "//", "aten.floor_divide.Scalar": "//",
                   "aten.div.Tensor_mode": "//", "aten.div.Scalar_mode": "//"}
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": sym.floordiv}
_SAME_VALUE = {"aten._to_copy.default", "aten.clone.default", "aten.alias.default",
               "aten.lift_fresh_copy.default", "aten.detach.default"}


def size_held_by(node, table: SymbolTable, constant, depth: int = 0):
    """The size a one-element int32/int64 tensor holds when it is computed from the inputs'
    dims by scalar_tensor and integer arithmetic: an aotpack Dim, else None (it depends on
    data, on an op this does not follow, or could wrap around in its dtype). `constant(node)`:
    the tensor a node computes from constants only, else None."""
    import torch

    if isinstance(node, bool):
        return None
    if isinstance(node, int) or _is_symint(node):
        return table.dim(node)
    if depth > 32 or not hasattr(node, "meta"):
        return None
    val = node.meta.get("val")
    if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
        return table.dim(val)
    if not isinstance(val, torch.Tensor) or val.dim() != 0 \
            or val.dtype not in (torch.int32, torch.int64):
        return None  # (a narrower integer would wrap a size around: uint8(40 * S))
    t = constant(node)
    if t is not None:
        return int(t.reshape(-1)[0])
    target, args = str(node.target), node.args
    if target == "aten.scalar_tensor.default" or target in _SAME_VALUE:
        return size_held_by(args[0], table, constant, depth + 1)
    op = _INT_ARITHMETIC.get(target)
    if op is None or len(args) < 2 or (target.startswith("aten.div.") and node.kwargs.get(
            "rounding_mode") != "floor"):  # true division is a float; trunc is not floor
        return None
    a, b = (size_held_by(x, table, constant, depth + 1) for x in args[:2])
    alpha = node.kwargs.get("alpha", 1)
    if a is None or b is None or not isinstance(alpha, int) or isinstance(alpha, bool):
        return None
    if op == "//" and sym.lower_bound(b) < 1:
        return None  # a divisor that may be 0 or negative: not a size's arithmetic
    value = _APPLY[op](a, b * alpha if op in ("+", "-") else b)
    lo, hi = sym.bounds(value)
    limit = torch.iinfo(val.dtype)
    return value if limit.min <= lo and hi <= limit.max else None
