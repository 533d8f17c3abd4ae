"""Symbolic sizes: integer expressions over named dims that vary at run time.

A dimension is an `int` or an `Expr`. An `Expr` is never constant: every operation whose result
is constant returns a plain `int`, so `d == 1` and `isinstance(d, int)` keep their meaning in
code written for static shapes.

An Expr is a polynomial with integer coefficients over *atoms*: symbols (`Sym`: a name and an
inclusive range) and opaque terms (`floor(e / d)`, `e % d`, `min(a, b)`, `max(a, b)`), kept in a
canonical form so that equal polynomials compare (and hash) equal: `S*4096 == 4096*S`.

Decisions a pass takes on sizes go through interval arithmetic over the symbols' ranges:
`B*S >= 1` is True for B, S >= 1; `S <= 64` for S in 1..4096 cannot be decided and raises
`SymbolicError` naming the expression, so nothing silently specialises to an example shape.
`subs(x, env)` evaluates at a concrete point (run time, tests, heuristics at a bucket's
representative size). `str(e)` is the manifest's expression syntax (docs/manifest.md), read
back by sym_parse.py; sym_ranges.py narrows dims to a bucket and bounds sizes inside one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from aotpack.errors import UserError


class SymbolicError(UserError):
    """A decision (comparison, truth value, integer conversion) that depends on symbolic dims.
    The message names the expression and its possible values."""


@dataclass(frozen=True)
class Sym:
    """A symbol: `name` takes any integer value in [lo, hi] at run time."""

    name: str
    lo: int
    hi: int

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"symbol name {self.name!r} is not an identifier")
        if not 0 <= self.lo <= self.hi:
            raise ValueError(f"symbol {self.name}: range {self.lo}..{self.hi} is empty or "
                             f"negative")

    def key(self) -> tuple:
        return (0, self.name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class _Fn:
    """An opaque atom: fn in floordiv / mod (args: expr, positive int divisor), min / max."""

    fn: str
    args: tuple

    def key(self) -> tuple:
        return (1, self.fn, tuple(_sort_key(a) for a in self.args))

    def __str__(self) -> str:
        a = self.args
        divisor = a[1] if isinstance(a[1], int) or _is_symbol(a[1]) else f"({a[1]})"
        if self.fn == "floordiv":
            return f"({a[0]})/{divisor}"
        if self.fn == "mod":
            return f"({a[0]})%{divisor}"
        return f"{self.fn}({a[0]}, {a[1]})"


Atom = Union[Sym, _Fn]


def _is_symbol(x) -> bool:
    return isinstance(x, Expr) and len(x.terms) == 1 and x.terms[0][1] == 1 \
        and len(x.terms[0][0]) == 1 and x.terms[0][0][0][1] == 1 \
        and isinstance(x.terms[0][0][0][0], Sym)
Monomial = tuple  # ((atom, power), ...) sorted by atom key; () is the constant term


def _sort_key(x) -> tuple:
    if isinstance(x, int):
        return (-1, x)
    if isinstance(x, Expr):
        return (2, tuple((tuple((a.key(), p) for a, p in m), c) for m, c in x.terms))
    return x.key()


class Expr:
    """A non-constant integer polynomial over atoms (see module doc). Build with `symbol()`
    and Python arithmetic; never construct directly."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms  # ((monomial, coeff), ...) sorted, coeff != 0
        self._hash = hash(terms)

    def __reduce__(self):
        # the cached hash must not travel: string hashes differ between processes
        return (Expr, (self.terms,))

    # -------------------------------------------------------------- construction
    @staticmethod
    def _make(d: dict) -> "Dim":
        items = [(m, c) for m, c in d.items() if c != 0]
        if not items:
            return 0
        if len(items) == 1 and items[0][0] == ():
            return items[0][1]
        items.sort(key=lambda mc: tuple((a.key(), p) for a, p in mc[0]))
        return Expr(tuple(items))

    @staticmethod
    def _atom(atom: Atom) -> "Expr":
        return Expr((((((atom, 1),)), 1),))

    # -------------------------------------------------------------- arithmetic
    def __add__(self, other):
        other = _check(other)
        if other is NotImplemented:
            return other
        d = dict(self.terms)
        for m, c in _terms(other):
            d[m] = d.get(m, 0) + c
        return Expr._make(d)

    __radd__ = __add__

    def __neg__(self):
        return Expr._make({m: -c for m, c in self.terms})

    def __sub__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else self + (-other)

    def __rsub__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else (-self) + other

    def __mul__(self, other):
        other = _check(other)
        if other is NotImplemented:
            return other
        d: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in _terms(other):
                m = _mul_monomials(m1, m2)
                d[m] = d.get(m, 0) + c1 * c2
        return Expr._make(d)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else floordiv(self, other)

    def __rfloordiv__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else floordiv(other, self)

    def __mod__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else mod(self, other)

    def __rmod__(self, other):
        other = _check(other)
        return NotImplemented if other is NotImplemented else mod(other, self)

    def __abs__(self):
        lo, hi = bounds(self)
        if lo >= 0:
            return self
        if hi <= 0:
            return -self
        raise SymbolicError(f"the sign of {self} depends on the dims ({_describe(self)})")

    def __pow__(self, k):
        if not isinstance(k, int) or k < 0:
            return NotImplemented
        out: Dim = 1
        for _ in range(k):
            out = out * self
        return out

    # -------------------------------------------------------------- comparisons
    def __eq__(self, other):
        return isinstance(other, Expr) and self.terms == other.terms

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return self._hash

    def __lt__(self, other):
        return _decide(other - self, lambda lo, hi: (lo > 0, hi <= 0), f"{self} < {other}")

    def __le__(self, other):
        return _decide(other - self, lambda lo, hi: (lo >= 0, hi < 0), f"{self} <= {other}")

    def __gt__(self, other):
        return _decide(self - other, lambda lo, hi: (lo > 0, hi <= 0), f"{self} > {other}")

    def __ge__(self, other):
        return _decide(self - other, lambda lo, hi: (lo >= 0, hi < 0), f"{self} >= {other}")

    def __bool__(self):
        lo, hi = bounds(self)
        if lo > 0 or hi < 0:
            return True
        raise SymbolicError(f"whether {self} is zero depends on the dims "
                            f"({_describe(self)})")

    def __int__(self):
        raise SymbolicError(f"{self} has no single value: it depends on the dims "
                            f"({_describe(self)})")

    __index__ = __int__

    def __float__(self):
        raise SymbolicError(f"{self} has no single value: it depends on the dims "
                            f"({_describe(self)})")

    # -------------------------------------------------------------- printing
    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            factors = [(str(a) if isinstance(a, Sym) or a.fn in ("min", "max") else f"({a})")
                       if p == 1 else "*".join([_paren(a)] * p) for a, p in m]
            body = "*".join(factors)
            if not body:
                text = str(abs(c))
            elif abs(c) == 1:
                text = body
            else:
                text = f"{abs(c)}*{body}"
            parts.append(("-" if c < 0 else "+", text))
        out = ("-" if parts[0][0] == "-" else "") + parts[0][1]
        for sign, text in parts[1:]:
            out += f" {sign} {text}"
        return out

    def __repr__(self) -> str:
        return f"Expr({self})"


Dim = Union[int, Expr]


def _paren(a: Atom) -> str:
    return str(a) if isinstance(a, Sym) or a.fn in ("min", "max") else f"({a})"


def _check(x):
    if isinstance(x, bool) or not isinstance(x, (int, Expr)):
        return NotImplemented
    return x


def _terms(x: Dim) -> tuple:
    return x.terms if isinstance(x, Expr) else (((), x),)


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    d: dict = {}
    for atom, p in a + b:
        d[atom] = d.get(atom, 0) + p
    return tuple(sorted(d.items(), key=lambda ap: ap[0].key()))


# ---------------------------------------------------------------------------- constructors
def symbol(name: str, lo: int, hi: int) -> Expr:
    """The symbol `name` in [lo, hi] as an expression."""
    return Expr._atom(Sym(name, lo, hi))


def affine_symbol(x: Dim) -> tuple[Sym, int, int] | None:
    """(S, k, c) when x is k*S + c for one symbol S and an integer k >= 1, else None: an input
    dim of that form (a torch.export derived Dim, 16*h) binds S at run time."""
    if not isinstance(x, Expr):
        return None
    linear = [(m, c) for m, c in x.terms if m != ()]
    if len(linear) != 1 or linear[0][1] < 1:
        return None
    (monomial, k), = linear
    if len(monomial) != 1 or monomial[0][1] != 1 or not isinstance(monomial[0][0], Sym):
        return None
    return monomial[0][0], k, dict(x.terms).get((), 0)


def is_symbolic(x) -> bool:
    return isinstance(x, Expr)


def floordiv(a: Dim, b: Dim) -> Dim:
    """floor(a / b) for b > 0. Exact parts are divided out: (4096*S + 64) // 128 = 32*S, and
    (3*S) // 2 = S + floor(S / 2)."""
    if isinstance(b, Expr):
        if isinstance(a, Expr):
            q = _exact_quotient(a, b)
            if q is not None:
                return q
            a, b = _cancel_common(a, b)
            if isinstance(b, int):
                return floordiv(a, b)
        _require_positive(b, "divisor")
        (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
        corners = [alo // blo, alo // bhi, ahi // blo, ahi // bhi]
        if min(corners) == max(corners):
            return corners[0]
        return Expr._atom(_Fn("floordiv", (a, b)))
    if b <= 0:
        raise ValueError(f"floordiv by {b}: the divisor must be positive")
    if isinstance(a, int):
        return a // b
    if b == 1:
        return a
    nested = _nested_floor(a)
    if nested is not None:  # floor((floor(n/m) + p) / b) = floor((n + p*m) / (m*b))
        n, m, p = nested
        return floordiv(n + p * m, m * b)
    g = math.gcd(b, *(c for _, c in a.terms))
    if g > 1:  # (2*T) // 10 is T // 5: one canonical form, whichever way a size was written
        return floordiv(Expr._make({m: c // g for m, c in a.terms}), b // g)
    q, r = _split_by(a, b)
    if isinstance(r, int):
        return q + r // b
    lo, hi = bounds(r)
    if lo // b == hi // b:
        return q + lo // b
    return q + Expr._atom(_Fn("floordiv", (r, b)))


def _nested_floor(a: Expr):
    """(n, m, p) when a = floor(n / m) + p with m an int and p free of that floor (coefficient
    1): two strided convs or pools in a row give floor((floor(n/m) + p) / b), which torch
    writes as the single floor((n + p*m) / (m*b)); both must reach one canonical form."""
    floors = [(m, c) for m, c in a.terms if len(m) == 1 and m[0][1] == 1
              and isinstance(m[0][0], _Fn) and m[0][0].fn == "floordiv"
              and isinstance(m[0][0].args[1], int)]
    if len(floors) != 1 or floors[0][1] != 1:
        return None
    (fn_monomial, _), = floors
    atom = fn_monomial[0][0]
    if any(x == atom for m, _ in a.terms if m != fn_monomial for x, _ in m):
        return None  # floor(n/m) * S + floor(n/m): not of that form
    rest = Expr._make({m: c for m, c in a.terms if m != fn_monomial})
    return atom.args[0], atom.args[1], rest


def cdiv(a: Dim, b: Dim) -> Dim:
    """ceil(a / b) for b > 0."""
    return floordiv(a + b - 1, b)


def mod(a: Dim, b: Dim) -> Dim:
    """a - b * floor(a / b) (Python's %, the sign of b) for b > 0."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int):
        if b <= 0:
            raise ValueError(f"mod by {b}: the divisor must be positive")
        _, r = _split_by(a, b)
        if isinstance(r, int):
            return r % b
        lo, hi = bounds(r)
        if lo // b == hi // b:
            return r - (lo // b) * b
        return Expr._atom(_Fn("mod", (r, b)))
    _require_positive(b, "divisor")
    return a - b * floordiv(a, b)


def sym_min(a: Dim, b: Dim) -> Dim:
    """min(a, b), decided now where the ranges decide it."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    lo, hi = bounds(a - b) if a != b else (0, 0)
    if hi <= 0:
        return a
    if lo >= 0:
        return b
    x, y = sorted((a, b), key=_sort_key)
    return Expr._atom(_Fn("min", (x, y)))


def sym_max(a: Dim, b: Dim) -> Dim:
    """max(a, b), decided now where the ranges decide it."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    lo, hi = bounds(a - b) if a != b else (0, 0)
    if lo >= 0:
        return a
    if hi <= 0:
        return b
    x, y = sorted((a, b), key=_sort_key)
    return Expr._atom(_Fn("max", (x, y)))


def _split_by(a: Expr, b: int) -> tuple[Dim, Dim]:
    """a = b*q + r with r's coefficients in [0, b)."""
    q = Expr._make({m: c // b for m, c in a.terms})
    r = Expr._make({m: c % b for m, c in a.terms})
    return q, r


def _exact_quotient(a: Expr, b: Expr) -> Dim | None:
    """a / b when b is one monomial (times a coefficient) that divides every term of a."""
    if len(b.terms) != 1:
        return None
    (bm, bc), = b.terms
    d: dict = {}
    for m, c in a.terms:
        if c % bc:
            return None
        powers = dict(m)
        for atom, p in bm:
            if powers.get(atom, 0) < p:
                return None
            powers[atom] -= p
        key = tuple(sorted(((x, p) for x, p in powers.items() if p), key=lambda ap: ap[0].key()))
        d[key] = d.get(key, 0) + c // bc
    return Expr._make(d)


def term_quotient(a: Dim, b: Dim) -> Dim:
    """The sum of a's terms that b divides exactly, each divided by b (b a positive int or one
    monomial); 0 when none is. a - b * term_quotient(a, b) keeps the terms b does not divide:
    how a symbolic offset splits into digits of a contiguous layout."""
    if isinstance(b, int):
        if isinstance(a, int):
            return a // b if a % b == 0 else 0
        return Expr._make({m: c // b for m, c in a.terms if c % b == 0})
    if len(b.terms) != 1:  # a polynomial divisor: a's whole multiple of it, if a is one
        return _multiple_of(a, b)
    d: dict = {}
    for m, c in _terms(a):
        q = _exact_quotient(Expr(((m, c),)) if m else Expr((((), c),)), b) if m else None
        if q is not None:
            for qm, qc in _terms(q):
                d[qm] = d.get(qm, 0) + qc
    return Expr._make(d)


def _multiple_of(a: Dim, b: Expr) -> Dim:
    """q with a == q * b, q an int or one monomial of a (64 + 64*S over 1 + S: 64); else 0."""
    if not isinstance(a, Expr):
        return 0
    (bm, bc) = b.terms[-1]
    for am, ac in a.terms:
        q = _exact_quotient(Expr(((am, ac),)), Expr(((bm, bc),))) if bm else None
        if bm == () and ac % bc == 0:
            q = Expr._make({am: ac // bc})
        if q is not None and q * b == a:
            return q
    return 0


def _cancel_common(a: Expr, b: Expr) -> tuple[Dim, Dim]:
    """a / b with the monomial factor common to every term of both divided out (symbols are
    positive, so floor(a*m / (b*m)) = floor(a / b)): 32*S / (128*S) → 32 / 128."""
    common = None
    for m, _ in a.terms + b.terms:
        powers = dict(m)
        common = powers if common is None else {x: min(p, powers.get(x, 0))
                                                 for x, p in common.items()}
    common = {x: p for x, p in (common or {}).items() if p and isinstance(x, Sym) and x.lo >= 1}
    if not common:
        return a, b

    def divide(e: Expr) -> Dim:
        d: dict = {}
        for m, c in e.terms:
            rest = tuple((x, p - common.get(x, 0)) for x, p in m if p - common.get(x, 0))
            d[rest] = d.get(rest, 0) + c
        return Expr._make(d)

    return divide(a), divide(b)


def _require_positive(x: Dim, what: str) -> None:
    lo, _ = bounds(x)
    if lo <= 0:
        raise SymbolicError(f"{what} {x} may be {lo} ({_describe(x)}); it must be positive")


# ---------------------------------------------------------------------------- evaluation
def subs(x, env: Mapping[str, Dim]):
    """`x` (a Dim, or a tuple/list of them) with every symbol named in `env` replaced by its
    value there (ints or other Dims); symbols `env` does not name stay."""
    if isinstance(x, int):
        return x
    if isinstance(x, (tuple, list)):
        return type(x)(subs(v, env) for v in x)
    if not isinstance(x, Expr):
        raise TypeError(f"subs: {x!r} is not a dimension")
    total = 0
    for m, c in x.terms:
        v = c
        for atom, p in m:
            v = v * _atom_value(atom, env) ** p
        total = total + v
    return total


def _atom_value(atom: Atom, env: Mapping[str, Dim]) -> Dim:
    if isinstance(atom, Sym):
        return env[atom.name] if atom.name in env else Expr._atom(atom)  # unnamed: kept
    a = [subs(v, env) for v in atom.args]
    if atom.fn == "floordiv":
        return floordiv(a[0], a[1])
    if atom.fn == "mod":
        return mod(a[0], a[1])
    return sym_min(*a) if atom.fn == "min" else sym_max(*a)


def subs_tree(obj, env: Mapping[str, int]):
    """`obj` (a dataclass, tuple, list or dict holding Dims anywhere) with every Expr
    evaluated at `env`; everything else is kept as is."""
    import dataclasses

    if isinstance(obj, Expr):
        return subs(obj, env)
    if isinstance(obj, (tuple, list)):
        return type(obj)(subs_tree(v, env) for v in obj)
    if isinstance(obj, dict):
        return {k: subs_tree(v, env) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: subs_tree(getattr(obj, f.name), env)
                   for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def free_symbols(x) -> set[Sym]:
    """The symbols `x` (a Dim or nested tuples/lists of them) depends on."""
    out: set[Sym] = set()
    _collect(x, out)
    return out


def _collect(x, out: set) -> None:
    import dataclasses

    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            _collect(getattr(x, f.name), out)
    elif isinstance(x, dict):
        for v in x.values():
            _collect(v, out)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _collect(v, out)
    elif isinstance(x, Expr):
        for m, _ in x.terms:
            for atom, _ in m:
                if isinstance(atom, Sym):
                    out.add(atom)
                else:
                    _collect(atom.args, out)


def bounds(x: Dim) -> tuple[int, int]:
    """Smallest and largest value of `x` over its symbols' ranges (interval arithmetic: exact
    for sums of products of symbols with positive coefficients, an enclosure otherwise)."""
    if isinstance(x, int):
        return x, x
    factored = _factor_common(x)
    if factored is not None:  # correlated terms: 64*B*S - 64*B is 64*B*(S - 1), never 0
        (alo, ahi), (blo, bhi) = (bounds(f) for f in factored)
        corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return min(corners), max(corners)
    lo = hi = 0
    for m, c in x.terms:
        mlo, mhi = 1, 1
        for atom, p in m:
            alo, ahi = _atom_bounds(atom)
            for _ in range(p):
                corners = (mlo * alo, mlo * ahi, mhi * alo, mhi * ahi)
                mlo, mhi = min(corners), max(corners)
        tlo, thi = sorted((c * mlo, c * mhi))
        lo, hi = lo + tlo, hi + thi
    return _split_bounds(x, lo, hi)


def _split_bounds(x: Expr, lo: int, hi: int) -> tuple[int, int]:
    """(lo, hi) narrowed by writing x = s*q + r for each symbol s that several terms share
    (to the first power): W - 1 - H*W is W*(1 - H) - 1, below 0 wherever H >= 1, which the
    term-by-term sum cannot see. Every form encloses x, so their intersection does too."""
    if len(x.terms) > 12:
        return lo, hi
    shared: dict = {}
    for m, _ in x.terms:
        for atom, p in m:
            if isinstance(atom, Sym):
                shared.setdefault(atom, []).append(p)
    for s in sorted(shared, key=lambda a: a.key()):
        if len(shared[s]) < 2 or any(p != 1 for p in shared[s]):
            continue
        inside = Expr._make({tuple(ap for ap in m if ap[0] != s): c
                             for m, c in x.terms if (s, 1) in m})
        rest = Expr._make({m: c for m, c in x.terms if (s, 1) not in m})
        (qlo, qhi), (rlo, rhi) = bounds(inside), bounds(rest)
        corners = (s.lo * qlo, s.lo * qhi, s.hi * qlo, s.hi * qhi)
        lo, hi = max(lo, min(corners) + rlo), min(hi, max(corners) + rhi)
    return lo, hi


def _factor_common(x: Expr):
    """(m, x / m) for the largest monomial m of symbols dividing every term of x (more than
    one term), or None."""
    if len(x.terms) < 2:
        return None
    common = None
    for m, _ in x.terms:
        powers = dict(m)
        common = powers if common is None else {a: min(p, powers.get(a, 0))
                                                 for a, p in common.items()}
    common = {a: p for a, p in (common or {}).items() if p and isinstance(a, Sym)}
    if not common:
        return None
    factor = Expr._make({tuple(sorted(common.items(), key=lambda ap: ap[0].key())): 1})
    return factor, _exact_quotient(x, factor)


def _atom_bounds(atom: Atom) -> tuple[int, int]:
    if isinstance(atom, Sym):
        return atom.lo, atom.hi
    if atom.fn == "mod":
        return 0, atom.args[1] - 1
    (alo, ahi), (blo, bhi) = bounds(atom.args[0]), bounds(atom.args[1])
    if atom.fn == "floordiv":
        corners = [alo // blo, alo // bhi, ahi // blo, ahi // bhi]
        return min(corners), max(corners)
    if atom.fn == "min":
        return min(alo, blo), min(ahi, bhi)
    return max(alo, blo), max(ahi, bhi)


def is_polynomial(x: Dim) -> bool:
    """No opaque atoms (floor division, modulo, min, max) in `x`."""
    return isinstance(x, int) or all(isinstance(a, Sym) for m, _ in x.terms for a, _ in m)


def upper_bound(x: Dim) -> int:
    return bounds(x)[1]


def lower_bound(x: Dim) -> int:
    return bounds(x)[0]


def divisible(x: Dim, n: int) -> bool:
    """True when `x` is a multiple of `n` for every value of its symbols (a sufficient test:
    every coefficient is a multiple of n)."""
    if isinstance(x, int):
        return x % n == 0
    return all(c % n == 0 for _, c in x.terms)


def _decide(diff: Dim, rule, what: str) -> bool:
    lo, hi = bounds(diff)
    yes, no = rule(lo, hi)
    if yes:
        return True
    if no:
        return False
    raise SymbolicError(f"{what} depends on the dims ({_describe(diff)})")


def _describe(x) -> str:
    syms = sorted(free_symbols(x), key=lambda s: s.name)
    return ", ".join(f"{s.name} in {s.lo}..{s.hi}" for s in syms) or "no dims"


def decided(fn, default=None):
    """fn() where the ranges decide it, else `default` (for checks that may stay open)."""
    try:
        return fn()
    except SymbolicError:
        return default


def prod(xs: Iterable[Dim]) -> Dim:
    return math.prod(xs, start=1)


def structural_key(x) -> tuple:
    """A total order over Dims (for sorting); says nothing about their values."""
    return _sort_key(x)
