"""The shapes `aotpack verify` checks a bundle with dynamic dims at, and the options that name
them: the dims' points (`shape_points`: example, both ends, random odd/prime sizes), input
shapes at a point, `--shape`/`--input`/`--dynamic` options for aotpack-run and the build.
Split from verify.py, which re-exports the public names."""
from __future__ import annotations

import re


def _shape_text(spec: dict) -> str:
    """One input at a concrete shape as aotpack-run's --shape writes it: NAME=AxB."""
    return f"{spec['name']}=" + "x".join(str(d) for d in spec["shape"])


def _shapes_label(inputs: list[dict], signature: list[dict]) -> str:
    """The shapes of the inputs whose dims vary, as aotpack-run's --shape writes them (a dim
    derived from a symbol, 2*_H, is named by its size, not by _H's value)."""
    return ",".join(_shape_text(s) for i, s in zip(inputs, signature)
                    if any(not isinstance(d, int) for d in i["shape"]))


def _example_options(manifest: dict) -> list[str]:
    """`--input` options that give the bundle's inputs at its example shape (the dims' example
    values), as the build was given them."""
    example = example_point(manifest.get("symbols") or [])
    return [f"{s['name']}={'x'.join(str(int(d)) for d in s['shape'])}:{s['dtype']}"
            for s in _signature_at(manifest["inputs"], example or None)]


def example_point(symbols: list[dict]) -> dict[str, int]:
    """A v2 manifest's symbols at their example values (the shape the model was exported at)."""
    return {s["name"]: s.get("example", s["max"]) for s in symbols}


def run_shape_options(manifest: dict) -> list[str]:
    """aotpack-run `--shape` options running a bundle with dynamic dims at every dim's minimum
    and at every dim's maximum ([] for a static bundle): what `aotpack build` prints."""
    symbols = manifest.get("symbols") or []
    if not symbols:
        return []
    ends = ({s["name"]: s["min"] for s in symbols}, {s["name"]: s["max"] for s in symbols})
    return ["--shape " + ",".join(map(_shape_text, _signature_at(manifest["inputs"], point)))
            for point in ends]


def dynamic_options(manifest: dict) -> list[str]:
    """`--dynamic` options that declare a v2 manifest's dims again: each symbol on every input
    dim that is exactly it."""
    ranges = {s["name"]: (s["min"], s["max"]) for s in manifest.get("symbols") or []}
    out, seen = [], set()
    for spec in manifest["inputs"]:
        for d, dim in enumerate(spec["shape"]):
            if dim in ranges:
                rng = "" if dim in seen else ":{}..{}".format(*ranges[dim])
                out.append(f"{spec['name']}.{d}={dim}{rng}")
                seen.add(dim)
            elif stepped := _stepped(dim, ranges):
                (step, root), (lo, hi) = stepped, ranges[stepped[1]]
                rng = "" if root in seen else f":{step * lo}..{step * hi}:{step}"
                out.append(f"{spec['name']}.{d}={root[1:]}{rng}")
                seen.add(root)
    return out


def _stepped(dim, ranges: dict) -> tuple[int, str] | None:
    """(step, symbol) for a dim `--dynamic NAME.DIM=LABEL:LO..HI:STEP` declared: STEP*_LABEL
    (frontend/dynamic.py names the symbol so)."""
    m = re.fullmatch(r"(\d+)\*(_\w+)", str(dim))
    return (int(m[1]), m[2]) if m and m[2] in ranges else None


def shape_points(symbols: list[dict], seed: int = 0, random_points: int = 2) -> list[dict]:
    """The dims' values a dynamic bundle is checked at: the example, all at their minimum,
    all at their maximum, each alone at its maximum, then random values in the ranges (odd
    ones, and primes where the range has one)."""
    import random

    rng = random.Random(seed)
    lo = {s["name"]: s["min"] for s in symbols}
    hi = {s["name"]: s["max"] for s in symbols}
    points = [example_point(symbols), lo, hi]
    if len(symbols) > 1:
        points += [{**lo, n: hi[n]} for n in hi]
    for _ in range(random_points):
        points.append({n: _odd_or_prime(rng, lo[n], hi[n]) for n in lo})
    unique = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


def _odd_or_prime(rng, lo: int, hi: int) -> int:
    primes = [n for n in range(max(lo, 2), min(hi, 10_000) + 1)
              if all(n % k for k in range(2, int(n ** 0.5) + 1))]
    if primes and rng.random() < 0.5:
        return rng.choice(primes)
    odd = [n for n in (rng.randint(lo, hi) | 1, rng.randint(lo, hi)) if lo <= n <= hi]
    return odd[0] if odd else rng.randint(lo, hi)


def points_from_shapes(manifest: dict, shapes: list[str]) -> list[dict]:
    """Each `NAME=AxB[,NAME2=CxD]` (input shapes, as aotpack-run --shape takes them) as the
    dims' values it binds; inputs not named keep their example shape."""
    from aotpack.bundle.manifest import evaluate, parse_symbols
    from aotpack.program import ShapeError, bind_symbols
    from aotpack.verify import VerifyError

    symbols = parse_symbols(manifest)
    example = example_point(manifest["symbols"])
    names = [s["name"] for s in manifest["inputs"]]
    signature = [(s["name"], [_expr(d, symbols) for d in s["shape"]]) for s in manifest["inputs"]]
    points = []
    for text in shapes:
        given = {}
        for part in text.split(","):
            name, _, dims = part.partition("=")
            if name.strip() not in names or not dims:
                raise VerifyError(f"--shape {text!r}: expected NAME=AxB with NAME one of "
                                  f"{', '.join(names)}")
            try:
                given[name.strip()] = tuple(int(x) for x in dims.lower().split("x"))
            except ValueError:
                raise VerifyError(f"--shape {text!r}: {dims!r} is not like 4x128") from None
        shapes_ = [given.get(n) or tuple(evaluate(d, symbols, example, n) for d in s["shape"])
                   for n, s in zip(names, manifest["inputs"])]
        try:
            points.append(bind_symbols(signature, symbols.values(), shapes_))
        except ShapeError as e:
            raise VerifyError(f"--shape {text!r}: {e}") from None
    return points


def _expr(d, symbols):
    from aotpack.ir.sym_parse import parse

    return parse(d, symbols) if isinstance(d, str) else d


def _signature_at(inputs: list[dict], point: dict | None) -> list[dict]:
    if point is None:
        return inputs
    from aotpack.bundle.manifest import evaluate
    from aotpack.ir.sym import Sym

    symbols = {n: Sym(n, v, v) for n, v in point.items()}
    return [dict(s, shape=[evaluate(d, symbols, point, s["name"]) for d in s["shape"]])
            for s in inputs]
