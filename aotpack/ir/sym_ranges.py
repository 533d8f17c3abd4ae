"""Symbolic sizes over ranges (aotpack/ir/sym.py): narrowing the dims to one bucket of a size,
points of the dims where a size reaches a value, and bounds of a size inside a bucket. Used
to compile and plan the variants of an op (kernels/variants.py, passes/plan_memory.py)."""
from __future__ import annotations

from typing import Mapping

from aotpack.ir.sym import (
    Dim, Expr, Sym, bounds, free_symbols, is_polynomial, subs, term_quotient, upper_bound,
)


def restrict(symbols, expr: Dim, lo: int, hi: int) -> dict[str, "Expr"]:
    """{name: the symbol with a narrower range} for the symbols of `expr` (a sum of products of
    symbols with positive coefficients: increasing in each), so that the box of their ranges
    is the smallest one holding every point where lo <= expr <= hi. Substituted into an op
    (`subs_tree`), it lets decisions that depend on ranges (index widths, scratch sizes) see
    one bucket's sizes instead of the whole range."""
    syms = {s.name: s for s in symbols}
    if isinstance(expr, int) or not is_polynomial(expr) or any(c < 0 for _, c in expr.terms):
        return {}
    inside = sorted(free_symbols(expr), key=lambda s: s.name)
    out = {}
    for s in inside:
        s = syms.get(s.name, s)
        at_lo = {t.name: syms.get(t.name, t).lo for t in inside}
        at_hi = {t.name: syms.get(t.name, t).hi for t in inside}
        new_hi = _search(s, lambda v: subs(expr, {**at_lo, s.name: v}) <= hi, last_true=True)
        new_lo = _search(s, lambda v: subs(expr, {**at_hi, s.name: v}) >= lo, last_true=False)
        if new_hi is None or new_lo is None or new_lo > new_hi:
            continue  # no point of this bucket moves s: keep its range
        out[s.name] = Expr._atom(Sym(s.name, new_lo, new_hi))
    return out


def _search(s: Sym, ok, last_true: bool):
    """Largest v in [s.lo, s.hi] with ok(v) (ok decreasing) or smallest (ok increasing)."""
    lo, hi = s.lo, s.hi
    if last_true:
        if not ok(lo):
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
        return lo
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def point_near(expr: Dim, target: int, symbols, base: Mapping[str, int],
               lo: int | None = None) -> dict[str, int]:
    """A point of the dims (a value per symbol: `base`, clipped to the ranges, for those
    `expr` does not use) where `expr` (increasing in each of its symbols) is as large as it can
    be without passing `target`, and at least `lo` when some point reaches it. For a product
    of dims (B*S, 197*B) the search is exact: every value of all but the widest dim is tried
    (B*S = 959 is found at B=7, S=137 where a greedy search stops at 64*14 = 896)."""
    point = {s.name: min(max(base.get(s.name, s.lo), s.lo), s.hi) for s in symbols}
    inside = sorted(free_symbols(expr), key=lambda s: (s.hi - s.lo, s.name))
    if not inside:
        return point
    widest, rest = inside[-1], inside[:-1]
    combos = 1
    for s in rest:
        combos *= s.hi - s.lo + 1
    best = None
    for values in (_grid(rest) if combos <= 4096 else _greedy_orders(expr, target, rest)):
        p = dict(point, **values)
        v = _search(widest, lambda v: subs(expr, {**p, widest.name: v}) <= target,
                    last_true=True)
        p[widest.name] = widest.lo if v is None else v
        value = subs(expr, p)
        rank = (value <= target, (lo is None or value >= lo), value if value <= target else -value)
        if best is None or rank > best[0]:
            best = (rank, p)
    return best[1]


def _grid(syms) -> list[dict[str, int]]:
    out = [{}]
    for s in syms:
        out = [dict(d, **{s.name: v}) for d in out for v in range(s.lo, s.hi + 1)]
    return out


def _greedy_orders(expr, target, syms) -> list[dict[str, int]]:
    """Too many combinations to try: each dim in turn as large as expr <= target allows."""
    import itertools

    out = []
    for order in itertools.islice(itertools.permutations(syms), 24):
        p = {s.name: s.lo for s in syms}
        for s in order:
            p[s.name] = _search(s, lambda v: subs(expr, {**p, s.name: v}) <= target,
                                last_true=True) or s.lo
        out.append(p)
    return out


def bound_under(x: Dim, expr: Dim, hi: int) -> int:
    """An upper bound of `x` where expr <= hi: x = q*expr + r (q the terms of x that expr
    divides), bounded as upper(q)*hi + upper(r) when q is never negative. E.g. a split-K
    workspace of 4*N*K_splits*M bytes in a bucket M <= 64."""
    q = term_quotient(x, expr) if isinstance(expr, Expr) and len(expr.terms) == 1 else 0
    if isinstance(q, int) and q == 0 or bounds(q)[0] < 0:
        return upper_bound(x)
    return upper_bound(q) * hi + upper_bound(x - q * expr)
