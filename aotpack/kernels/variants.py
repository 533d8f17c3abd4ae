"""Variants of one kernel op over the range of its symbolic sizes (dynamic shapes).

A template names the size that decides its config (`Template.bucket_size`: GEMM M, attention's
query length, the rows of a row-wise kernel). That size's range is split at powers of two, and
again where the heuristic changes its mind, into buckets; each bucket's config is chosen
(heuristic, or the tuning database) at a representative size, the bucket's largest, and
adjacent buckets with the same config are merged. Each merged
bucket is compiled once, with the dims' ranges narrowed to it (so index widths and scratch
sizes fit the bucket, not the whole range), and its launches carry a `when` condition: the
runtime launches exactly one bucket's launches for any shape. A static op, or a symbolic op
whose template has no bucket size, is one variant with no condition.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable

from aotpack.ir import sym
from aotpack.ir.sym_ranges import point_near, restrict
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


log = logging.getLogger(__name__)


def _brief(config: dict) -> str:
    """A config on one line, without its template name (the op's description says it)."""
    return " ".join(f"{k}={v}" for k, v in config.items() if k != "template") or "default"


def buckets(op: KernelOp, template: Template, symbols, example: dict,
            target: Target | None = None, backend: str = "triton") -> list[Bucket]:
    """The op's buckets: its bucket size's range cut at powers of two, and each piece cut again
    where the template's heuristic changes its config (found by bisection), so that every
    size gets the config a static build for that size would (GEMM tiles follow waves of SMs:
    M = 2464 and M = 4096 want different tiles). A bucket's representative is its largest
    size. The cuts depend on the heuristic only: `aotpack tune` and the build agree on them."""
    size = template.bucket_size(op)
    free = sym.free_symbols(op)
    if not free:
        return [Bucket(size or 0, 0, 0, 0, ())]
    if size is None or isinstance(size, int):  # one variant, decided at the example shape
        point = point_near(0, 0, symbols, example)
        return [Bucket(0, 0, 0, 0, tuple(sorted(point.items())))]
    lo, hi = sym.bounds(size)
    ends = [e for e in EDGES if lo <= e < hi] + [hi]

    def bucket(start: int, end: int) -> Bucket:
        # as close to `end` from below as the dims allow, inside [start, end] when it can be
        # (the other dims at the example's values): e.g. B*S = 512 at B=1, S=512
        point = point_near(size, end, symbols, example, start)
        return Bucket(size, start, end, sym.subs(size, point), tuple(sorted(point.items())))

    heuristic = _heuristic(op, template, target, backend)
    out, start = [], lo
    for end in ends:
        out += _cut(bucket, heuristic, start, end)
        start = end + 1
    return out


_SAMPLES = 129  # sizes per power-of-two range at which the heuristic is asked first


def _heuristic(op, template: Template, target, backend: str):
    from aotpack.kernels.spec import SM90

    def config(b: Bucket):
        try:
            return template.default_config(sym.subs_tree(op, b.env), target or SM90, backend)
        except Exception:  # noqa: BLE001 — a size the heuristic cannot decide: no cut there
            return None
    return config


def _cut(bucket, heuristic, lo: int, hi: int) -> list[Bucket]:
    """[lo, hi] as buckets of constant heuristic config: the heuristic is asked at _SAMPLES
    sizes spread over the range (it need not be monotone: ViT's GEMM at M = 197*B wants
    128x256 tiles at B=11 and B=32 but 128x128 at B=17), and between two samples that disagree
    the boundary is found by bisection. Each bucket's config is its top size's."""
    if lo == hi:
        return [bucket(lo, hi)]
    step = max(1, (hi - lo) // (_SAMPLES - 1))
    tops = sorted(set(list(range(lo, hi, step)) + [hi]))
    configs = [heuristic(bucket(lo, top)) for top in tops]
    out, start = [], lo
    for (a, ca), (b, cb) in zip(zip(tops, configs), zip(tops[1:], configs[1:])):
        if ca == cb:
            continue
        left, right = a, b - 1  # the largest size still configured as `a` lies in [a, b)
        while left < right:
            mid = (left + right + 1) // 2
            left, right = (mid, right) if heuristic(bucket(lo, mid)) == ca else (left, mid - 1)
        out.append(bucket(start, left))
        start = left + 1
    return out + [bucket(start, hi)]


def compile_variants(op: KernelOp, target: Target, choose: Callable, symbols,
                     example: dict, template: Template | None = None,
                     backend: str = "triton") -> list[Launch]:
    """Launches of every variant of `op`, each launch with the `when` of its bucket.
    `choose(op_at_rep, template)` gives a concrete op's config (heuristic or tuned); the
    buckets are cut by the heuristic of the GEMM `backend` the build uses."""
    template = template or template_for(op)
    groups: list[tuple[Bucket, dict]] = []
    for b in buckets(op, template, symbols, example, target, backend):
        config = choose(sym.subs_tree(op, b.env), template)
        if groups and groups[-1][1] == config:
            first = groups[-1][0]
            groups[-1] = (replace(first, hi=b.hi), config)
        else:
            groups.append((b, config))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s: %s", template.describe(op), "; ".join(
            f"{b.size} in {b.lo}..{b.hi}: {_brief(c)}" if len(groups) > 1 else _brief(c)
            for b, c in groups))
    if len(groups) == 1:
        return list(template.compile(op, groups[0][1], target))
    launches = []
    for b, config in groups:
        narrowed = restrict(symbols, b.size, b.lo, b.hi)
        when = ((b.size, b.lo, b.hi),)
        for launch in template.compile(sym.subs_tree(op, narrowed), config, target):
            launches.append(replace(launch, when=launch.when + when))
    return launches
