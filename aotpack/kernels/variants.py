"""Variants of one kernel op over the range of its symbolic sizes (dynamic shapes).

A template names the size that decides its config (`Template.bucket_size`: GEMM M, attention's
query length, the rows of a row-wise kernel). That size's range is split at powers of two into
buckets; each bucket's config is chosen (heuristic, or the tuning database) at a representative
size, the bucket's largest, and adjacent buckets with the same config are merged. Each merged
bucket is compiled once, with the dims' ranges narrowed to it (so index widths and scratch
sizes fit the bucket, not the whole range), and its launches carry a `when` condition: the
runtime launches exactly one bucket's launches for any shape. A static op, or a symbolic op
whose template has no bucket size, is one variant with no condition.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from aotpack.ir import sym
from aotpack.kernels.spec import KernelOp, Launch, Target
from aotpack.kernels.templates import Template, template_for

# bucket edges: a bucket ends at each of these (and at the range's end)
EDGES = tuple(1 << k for k in range(4, 31))


@dataclass(frozen=True)
class Bucket:
    """`size` (an expression of the dims) in lo..hi; decided and tuned at `point` (a value per
    dim) where size == rep."""

    size: object
    lo: int
    hi: int
    rep: int
    point: tuple  # ((dim name, value), ...)

    @property
    def env(self) -> dict[str, int]:
        return dict(self.point)


def representative_point(size, target: int, symbols, example: dict) -> dict[str, int]:
    """A point of the dims where `size` is as close to `target` from below as a search along
    each dim of `size` finds (dims of `size` start at their minimum; the others at the
    example's value): e.g. B*S = 512 at B=1, S=512."""
    point = {s.name: min(max(example.get(s.name, s.lo), s.lo), s.hi) for s in symbols}
    inside = sorted(sym.free_symbols(size), key=lambda s: (-(s.hi - s.lo), s.name))
    for s in inside:
        point[s.name] = s.lo
    for s in inside:
        lo, hi = s.lo, s.hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sym.subs(size, {**point, s.name: mid}) <= target:
                lo = mid
            else:
                hi = mid - 1
        point[s.name] = lo
    return point


def buckets(op: KernelOp, template: Template, symbols, example: dict) -> list[Bucket]:
    size = template.bucket_size(op)
    free = sym.free_symbols(op)
    if not free:
        return [Bucket(size or 0, 0, 0, 0, ())]
    if size is None or isinstance(size, int):  # one variant, decided at the example shape
        point = representative_point(0, 0, symbols, example)
        return [Bucket(0, 0, 0, 0, tuple(sorted(point.items())))]
    lo, hi = sym.bounds(size)
    ends = [e for e in EDGES if lo <= e < hi] + [hi]
    out, start = [], lo
    for end in ends:
        point = representative_point(size, end, symbols, example)
        rep = sym.subs(size, point)
        out.append(Bucket(size, start, end, rep, tuple(sorted(point.items()))))
        start = end + 1
    return out


def compile_variants(op: KernelOp, target: Target, choose: Callable, symbols,
                     example: dict, template: Template | None = None) -> list[Launch]:
    """Launches of every variant of `op`, each launch with the `when` of its bucket.
    `choose(op_at_rep, template)` gives a concrete op's config (heuristic or tuned)."""
    template = template or template_for(op)
    groups: list[tuple[Bucket, dict]] = []
    for b in buckets(op, template, symbols, example):
        config = choose(sym.subs_tree(op, b.env), template)
        if groups and groups[-1][1] == config:
            first = groups[-1][0]
            groups[-1] = (replace(first, hi=b.hi), config)
        else:
            groups.append((b, config))
    if len(groups) == 1:
        return list(template.compile(op, groups[0][1], target))
    launches = []
    for b, config in groups:
        narrowed = sym.restrict(symbols, b.size, b.lo, b.hi)
        when = ((b.size, b.lo, b.hi),)
        for launch in template.compile(sym.subs_tree(op, narrowed), config, target):
            launches.append(replace(launch, when=launch.when + when))
    return launches
