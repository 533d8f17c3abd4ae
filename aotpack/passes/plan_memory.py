"""Memory planning: every intermediate and scratch region gets a byte offset in one arena.

Lifetimes are measured in launch steps (an op may need several launches). Regions whose
lifetimes overlap never share bytes; the others are packed greedily, largest first, at the
lowest offset that fits (the classic offline strategy: good on transformer graphs, where a few
large activations dominate). An op's output may take over the storage of an operand that dies at
that op when the kernel reads and writes it element for element (pointwise inputs, GEMM
residual/mul operands with the output's exact view): that is the "in place where safe" rule.

With dynamic dims every size is its largest over the dims' ranges (a scratch region of one
bucket's launches: its largest inside that bucket), so the offsets are plain numbers and one
arena serves every shape: nothing is allocated per call.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from aotpack.ir.sym import Expr, subs, subs_tree, upper_bound
from aotpack.ir.sym_ranges import bound_under
from aotpack.kernels.spec import (
    COUNTERS, CounterSlot, EpAdd, EpMul, GemmNormOp, GemmOp, Launch, PointwiseOp, PtrSlot,
    ScratchSlot, TensorArg, op_inputs, op_outputs,
)
from aotpack.program import MemoryPlan, Program

ALIGN = 256


@dataclass
class _Region:
    name: str
    nbytes: int
    first: int  # first step that touches it
    last: int  # last step that touches it
    alias_of: str | None = None


log = logging.getLogger(__name__)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _elementwise_operands(op) -> list[TensorArg]:
    """Operands that the op's kernel reads exactly where it writes (same view as the output)."""
    if isinstance(op, GemmNormOp):  # the GEMM's residual may be its output (the norm's not)
        op = op.gemm
    if isinstance(op, PointwiseOp):
        cands = list(op.inputs)
    elif isinstance(op, GemmOp):
        cands = [s.other for s in op.epilogue if isinstance(s, (EpAdd, EpMul))]
    else:
        return []
    return [a for a in cands if (a.shape, a.strides, a.offset, a.dtype) ==
            (op.out.shape, op.out.strides, op.out.offset, op.out.dtype)]


def _step_spans(launches_per_op: list[list[Launch]]) -> list[tuple[int, int]]:
    spans, step = [], 0
    for launches in launches_per_op:
        if not launches:
            raise ValueError("every op needs at least one launch")
        spans.append((step, step + len(launches) - 1))
        step += len(launches)
    return spans


def _intermediate_regions(program: Program, spans) -> dict[str, _Region]:
    regions: dict[str, _Region] = {}
    for i, op in enumerate(program.ops):
        first, last = spans[i]
        for arg in [*op_inputs(op), *op_outputs(op)]:
            st = program.storages[arg.storage]
            if st.kind != "intermediate":
                continue
            r = regions.get(st.name)
            if r is None:
                regions[st.name] = _Region(st.name, upper_bound(st.nbytes), first, last)
            else:
                r.first, r.last = min(r.first, first), max(r.last, last)
    return regions


def _apply_inplace(program: Program, spans, regions: dict[str, _Region]) -> None:
    """Let an op's output reuse a dying operand's bytes (see module doc). Chains are fine: each
    link dies at the op that creates the next, so a root's bytes hold one live value at a time.
    The root's lifetime is extended to cover every alias."""
    for i, op in enumerate(program.ops):
        if op.out is None:  # a KvWriteOp of a layer without rope writes only its caches
            continue
        out = regions.get(op.out.storage)
        if out is None or out.first != spans[i][0] or out.alias_of:
            continue
        for arg in _elementwise_operands(op):
            src = regions.get(arg.storage)
            if src is None or arg.storage == op.out.storage or src.last != spans[i][1]:
                continue
            root = regions[src.alias_of] if src.alias_of else src
            if root.nbytes >= out.nbytes:
                out.alias_of = root.name
                root.last = max(root.last, out.last)
                break


def _place(regions: list[_Region]) -> dict[str, int]:
    placed: list[tuple[int, int, _Region]] = []  # (offset, end, region)
    offsets: dict[str, int] = {}
    for r in sorted(regions, key=lambda r: (-r.nbytes, r.first, r.name)):
        live = sorted((o, e) for o, e, q in placed if not (q.last < r.first or r.last < q.first))
        offset = 0
        for o, e in live:
            if offset + _align(r.nbytes) <= o:
                break
            offset = max(offset, e)
        offsets[r.name] = offset
        placed.append((offset, offset + _align(r.nbytes), r))
    return offsets


def _scratch_bytes(slot: ScratchSlot, when: tuple, full: dict) -> int:
    """A scratch request's largest size: over the dims' ranges, or inside the launch's
    bucket (`when`), whichever is smaller. The request was made with the bucket's narrowed
    dims; `full` (name -> the program's symbol) puts the program's back, so that the bucket's
    size expression divides it (4*N*splits*B*S bytes for B*S <= 64: 256*N*splits)."""
    n = upper_bound(slot.nbytes)
    nbytes = subs(slot.nbytes, full)
    for expr, _, hi in when:
        n = min(n, bound_under(nbytes, expr, hi))
    return n


def _scratch_region(slot: ScratchSlot, nbytes: int, step: int, j: int, shared: dict[str, str],
                    regions: dict[str, _Region]) -> str:
    """The region of one scratch slot: private to its launch, or (slot.shared) one region per
    key of the op and bucket (`shared`: key -> region), as large as the largest request and
    live across all launches that use it."""
    if slot.shared is None:
        name = f"__scratch.{step}.{j}"
        regions[name] = _Region(name, nbytes, step, step)
        return name
    name = shared.get(slot.shared)
    if name is None:
        name = shared[slot.shared] = f"__scratch.{step}.{slot.shared}"
        regions[name] = _Region(name, nbytes, step, step)
    r = regions[name]
    r.nbytes, r.last = max(r.nbytes, nbytes), step
    return name


def _resolve_scratch(launches_per_op: list[list[Launch]], regions: dict[str, _Region],
                     full: dict) -> tuple[list[Launch], int]:
    """The launches flattened in execution order, every ScratchSlot replaced, and every
    CounterSlot pointed at the session's counters (one region for all: launches run one after
    the other and leave their counters zero), with the bytes the largest request needs."""
    out, counters = [], 0
    for launches in launches_per_op:
        shared: dict[str, str] = {}  # an op's buckets never run together: they share too
        for la in launches:
            step, args = len(out), list(la.args)
            for j, slot in enumerate(args):
                if isinstance(slot, ScratchSlot):
                    region = _scratch_region(slot, _scratch_bytes(slot, la.when, full), step,
                                             j, shared, regions)
                    args[j] = PtrSlot(region, 0)
                elif isinstance(slot, CounterSlot):
                    counters = max(counters, _align(upper_bound(slot.nbytes)))
                    args[j] = PtrSlot(COUNTERS, 0)
            out.append(replace(la, args=tuple(args)))
    return out, counters


def plan_memory(program: Program, launches_per_op: list[list[Launch]]) -> MemoryPlan:
    if len(launches_per_op) != len(program.ops):
        raise ValueError(f"{len(launches_per_op)} launch lists for {len(program.ops)} ops")
    spans = _step_spans(launches_per_op)
    regions = _intermediate_regions(program, spans)
    _apply_inplace(program, spans, regions)
    full = {s.name: Expr._atom(s) for s in program.symbols}
    flat, counters = _resolve_scratch(launches_per_op, regions, full)
    roots = [r for r in regions.values() if not r.alias_of]
    offsets = _place(roots)
    for r in regions.values():
        if r.alias_of:
            offsets[r.name] = offsets[r.alias_of]
    arena = max((offsets[r.name] + _align(r.nbytes) for r in roots), default=0)
    naive = sum(_align(r.nbytes) for r in regions.values())
    log.debug("memory: %d regions (%d in place) in an arena of %s bytes (naive: %s)",
              len(regions), len(regions) - len(roots), arena, naive)
    return MemoryPlan(
        arena_bytes=arena,
        offsets=offsets,
        nbytes={r.name: r.nbytes for r in regions.values()},
        launches=flat,
        naive_bytes=naive,
        counters_bytes=counters,
    )


def runs_at(launch: Launch, env: dict) -> bool:
    """Whether a launch's bucket condition holds at one point of the dims."""
    return all(lo <= subs(e, env) <= hi for e, lo, hi in launch.when)


def arena_at(program: Program, launches_per_op: list[list[Launch]], env: dict) -> int:
    """The arena one shape would need on its own (inspect shows it beside the planned one,
    which serves the largest shape)."""
    per_op = [[subs_tree(la, env) for la in launches if runs_at(la, env)]
              for launches in launches_per_op]
    return plan_memory(program.at(env), per_op).arena_bytes
