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

from aotpack.kernels.spec import GemmNormOp, GemmOp, RMSNormOp
from aotpack.passes.op_motion import free_to_move, kernel_op_counts

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
        program.summary = dict(program.summary or {},
                               kernel_ops=kernel_op_counts(program.ops))
    return program


def _norm_of(ops: list, i: int, readers) -> int | None:
    """Index of the RMSNorm that can join the GEMM at `i` (`readers`: the norms reading its
    output storage), or None: the first after it, if the fused kernel takes the pair and the
    norm can move up to the GEMM."""
    from aotpack.kernels.triton import gemm_norm

    j = next((j for j in readers if j > i and ops[j] is not None), None)
    if j is None:
        return None
    try:  # reads the GEMM's whole output; no FP8 scales; views the kernel takes
        gemm_norm.check(GemmNormOp(ops[i], ops[j]))
    except ValueError:
        return None
    return j if free_to_move(ops, ops[j], i, j) else None
