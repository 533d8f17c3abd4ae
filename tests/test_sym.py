"""aotpack/ir/sym.py: symbolic sizes. Canonical forms compare equal, every operation agrees
with Python's integer arithmetic at every point of the ranges, decisions that depend on the
dims raise with the dim's name, and the manifest syntax round-trips."""
import random
import re

import pytest

from aotpack.ir import sym
from aotpack.ir.sym import (
    SymbolicError, bounds, cdiv, divisible, floordiv, mod, subs, subs_tree, sym_max, sym_min,
    symbol,
)
from aotpack.ir.sym_parse import parse
from aotpack.ir.sym_ranges import bound_under, restrict

B, S = symbol("B", 1, 64), symbol("S", 1, 4096)
SYMS = {"B": sym.Sym("B", 1, 64), "S": sym.Sym("S", 1, 4096)}


def _points(n=40, seed=0):
    rng = random.Random(seed)
    fixed = [{"B": 1, "S": 1}, {"B": 64, "S": 4096}, {"B": 1, "S": 4096}, {"B": 64, "S": 1}]
    return fixed + [{"B": rng.randint(1, 64), "S": rng.randint(1, 4096)} for _ in range(n)]


def test_canonical_forms_compare_and_hash_equal():
    assert B * S == S * B and hash(B * S) == hash(S * B)
    assert 4096 * S * B == (B * S) * 4096
    assert (S - S) == 0 and isinstance(S - S, int)  # a constant result is a plain int
    assert (B * S * 128) // (S * 128) == B
    assert str(4096 * B * S + 7) == "7 + 4096*B*S"


_SYM_OPS = {"+": (lambda a, b: a + b, lambda x, y: x + y),
            "-": (lambda a, b: a - b, lambda x, y: x - y),
            "*": (lambda a, b: a * b, lambda x, y: x * y),
            "//": (floordiv, lambda x, y: x // y), "%": (mod, lambda x, y: x % y),
            "cdiv": (cdiv, lambda x, y: -(-x // y)),
            "min": (sym_min, min), "max": (sym_max, max)}


def _random_expr(rng, depth=3):
    """(a random expression built with sym's operations, the same computation on ints)."""
    if depth == 0 or rng.random() < 0.3:
        leaf = rng.choice([B, S, rng.randint(1, 300)])
        return leaf, lambda p, leaf=leaf: subs(leaf, p)
    name = rng.choice(list(_SYM_OPS))
    (a, fa), (b, fb) = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1)
    if name in ("//", "%", "cdiv"):  # positive divisors, constant or symbolic
        b = rng.choice([rng.randint(1, 257), B, S + 1])
        fb = lambda p, b=b: subs(b, p)  # noqa: E731
    symbolic, concrete = _SYM_OPS[name]
    return symbolic(a, b), lambda p: concrete(fa(p), fb(p))


@pytest.mark.parametrize("seed", range(30))
def test_operations_agree_with_python_at_every_point(seed):
    """Random expression trees: the simplified Expr, evaluated at a point, equals the same
    arithmetic done on Python ints at that point; its text parses back to the same values;
    its bounds hold the values."""
    rng = random.Random(seed)
    for _ in range(20):
        expr, reference = _random_expr(rng)
        text = str(expr)
        back = parse(text, SYMS) if not isinstance(expr, int) else expr
        lo, hi = bounds(expr)
        for p in _points(8, seed):
            want = reference(p)
            assert subs(expr, p) == want, (text, p)
            assert subs(back, p) == want, (text, p)
            assert lo <= want <= hi, (text, p, lo, hi)


def test_decisions_by_ranges_and_refusals_naming_the_dim():
    assert B * S >= 1 and not (S > 4096) and max(S, 1) == S
    with pytest.raises(SymbolicError, match=r"S in 1\.\.4096"):
        _ = S <= 64
    with pytest.raises(SymbolicError, match="depends on the dims"):
        int(B * S)
    with pytest.raises(SymbolicError):
        range(S)
    assert sym.decided(lambda: S <= 64, "open") == "open"


def test_divisibility_is_for_every_value():
    assert divisible(B * S * 4096, 16) and divisible(256 * S - 256, 16)
    assert not divisible(B * S, 16) and not divisible(8 * S, 16)


def test_restrict_narrows_a_bucket_and_bound_under_sizes_scratch():
    r = restrict(SYMS.values(), B * S, 17, 64)
    assert {k: bounds(v) for k, v in r.items()} == {"B": (1, 64), "S": (1, 64)}
    r = restrict(SYMS.values(), B * S, 4097, 262144)
    assert {k: bounds(v) for k, v in r.items()} == {"B": (2, 64), "S": (65, 4096)}
    # a split-K workspace of 4 splits x 512 columns x 4 B per row, in the bucket M <= 64
    assert bound_under(4 * 512 * 4 * B * S + 1024, B * S, 64) == 4 * 512 * 4 * 64 + 1024
    narrowed = subs_tree((cdiv(B * S, 128), 7), restrict(SYMS.values(), B * S, 1, 64))
    assert bounds(narrowed[0]) == (1, 32) and narrowed[1] == 7


def test_subs_with_dims_and_partial_points():
    assert subs(B * S + 1, {"B": 2}) == 2 * S + 1
    assert subs(cdiv(B * S, 128), {"B": 3, "S": 100}) == 3
    assert subs_tree({"x": (B, S, 3)}, {"B": 2, "S": 5}) == {"x": (2, 5, 3)}


@pytest.mark.parametrize("text, why", [("B +", "expected"), ("T * 2", "unknown symbol"),
                                       ("min(B S)", "expected ','"), ("(B", "expected ')'")])
def test_parse_refuses_bad_text(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        parse(text, SYMS)


def test_nested_floors_reach_torchs_single_floor():
    """Two strided convs in a row: floor((floor((H+1)/2) + 1) / 2) must be the very Expr torch
    writes, floor((H+3)/4), or the frontend sees two sizes it cannot prove equal."""
    H = symbol("H", 32, 128)
    assert floordiv(floordiv(H + 1, 2) + 1, 2) == floordiv(H + 3, 4)
    assert floordiv(floordiv(H - 1, 2) + 1, 2) == floordiv(H + 1, 4)
    for a, b, p, c in [(3, 2, 1, 2), (0, 3, 2, 5), (7, 4, -1, 3), (1, 2, 0, 2)]:
        nested = floordiv(floordiv(H + a, b) + p, c)
        single = floordiv(H + a + p * b, b * c)
        assert nested == single, (nested, single)
        for h in range(32, 129):
            assert subs(nested, {"H": h}) == ((h + a) // b + p) // c
    # floor(n/m) appearing elsewhere in the sum is not of the form: left alone, still exact
    mixed = floordiv(floordiv(H, 2) * H + floordiv(H, 2), 3)
    for h in (32, 77, 128):
        assert subs(mixed, {"H": h}) == ((h // 2) * h + h // 2) // 3


def test_a_common_factor_of_a_floor_is_divided_out():
    """A stride-5 conv over a dim declared 2*T (a derived Dim): aotpack writes (2*T)//10 where
    torch writes T//5; both must be one Expr, and the reduction exact at every value."""
    T = symbol("T", 2000, 8000)
    assert floordiv(2 * T, 10) == floordiv(T, 5)
    assert floordiv(4 * T + 2, 6) == floordiv(2 * T + 1, 3)
    for a, k, b in [(2, 4, 10), (-10, 2, 10), (3, 6, 9)]:
        e = floordiv(k * T + a, b)
        for t in (2000, 2001, 4999, 8000):
            assert subs(e, {"T": t}) == (k * t + a) // b
