"""A GEMM and the RMSNorm of its output as one op (GemmNormOp), so that a split-K GEMM's reduce
normalizes the rows it finishes (kernels/triton/gemm_norm.py): a pre-norm decoder layer's
attention-output and MLP-down projections (residual add in their epilogue) feed the next
RMSNorm, and at decode each of those norms was a launch of its own.

Runs on the lowered program after --precision (an FP8 norm, which writes the next GEMMs'
scales, stays separate). The norm must read the GEMM's whole output and be free to move up to
the GEMM's place: nothing in between writes what it reads, or reads or writes what it writes.
"""
from __future__ import annotations

import logging

from aotpack.kernels.spec import GemmNormOp, GemmOp, RMSNormOp, op_inputs, op_outputs

log = logging.getLogger(__name__)


def fuse_gemm_norm(program):
    """`program` with each fusable (GemmOp, RMSNormOp) pair replaced by one GemmNormOp at the
    GEMM's place (in place; returned)."""
    ops, fused = list(program.ops), 0
    norms: dict[str, list[int]] = {}  # storage -> the RMSNorms reading it, in order
    for j, op in enumerate(ops):
        if isinstance(op, RMSNormOp):
            norms.setdefault(op.x.storage, []).append(j)
    for i in range(len(ops)):
        if not isinstance(ops[i], GemmOp):
            continue
        j = _norm_of(ops, i, norms.get(ops[i].out.storage, ()))
        if j is not None:
            ops[i] = GemmNormOp(ops[i], ops[j])
            ops[j] = None
            fused += 1
    program.ops = [op for op in ops if op is not None]
    if fused:
        log.debug("fuse_gemm_norm: %d GEMM + RMSNorm pairs fused", fused)
        kinds: dict[str, int] = {}  # inspect's count of kernel ops by kind
        for op in program.ops:
            kinds[type(op).__name__] = kinds.get(type(op).__name__, 0) + 1
        program.summary = dict(program.summary or {}, kernel_ops=kinds)
    return program


def _norm_of(ops: list, i: int, readers) -> int | None:
    """Index of the RMSNorm that can join the GEMM at `i` (`readers`: the norms reading its
    output storage), or None: the first after it, if it reads the whole output and nothing in
    between writes what it reads or touches what it writes."""
    gemm = ops[i]
    j = next((j for j in readers if j > i and ops[j] is not None), None)
    if j is None:
        return None
    norm = ops[j]
    ok = (norm.x == gemm.out and norm.out_scale is None and _weight_ok(norm)
          and norm.out.strides[-1] == 1)
    return j if ok and _movable(ops, i, j) else None


def _weight_ok(norm: RMSNormOp) -> bool:
    n = norm.x.shape[1]
    return norm.weight is None or (norm.weight.shape == (n,) and norm.weight.strides == (1,))


def _movable(ops: list, i: int, j: int) -> bool:
    """The norm at j may run right after the GEMM at i."""
    norm = ops[j]
    reads = _storages(op_inputs(norm))
    writes = _storages(op_outputs(norm))
    for op in ops[i + 1:j]:
        if op is None:
            continue
        their_writes = _storages(op_outputs(op))
        if their_writes & (reads | writes) or _storages(op_inputs(op)) & writes:
            return False
    return True


def _storages(args) -> set[str]:
    return {a.storage for a in args}
