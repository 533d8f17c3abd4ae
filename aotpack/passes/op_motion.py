"""What a program-level fusion may move: an op's storages read and written, and whether it
can change places with the ops between (passes/fuse_kv_write.py, passes/fuse_gemm_norm.py),
plus the count of kernel ops by kind that inspect shows (kept up to date by such passes)."""
from __future__ import annotations

from aotpack.kernels.spec import op_inputs, op_outputs


def reads(op) -> set[str]:
    return {t.storage for t in op_inputs(op)}


def writes(op) -> set[str]:
    return {t.storage for t in op_outputs(op)}


def free_to_move(ops: list, op, lo: int, hi: int, skip=()) -> bool:
    """`op` may run anywhere between indices lo and hi: no op strictly between them (None
    entries and the indices in `skip` aside) writes what it reads, or reads or writes what it
    writes."""
    r, w = reads(op), writes(op)
    for j in range(lo + 1, hi):
        other = ops[j]
        if other is None or j in skip:
            continue
        if writes(other) & (r | w) or reads(other) & w:
            return False
    return True


def kernel_op_counts(ops: list) -> dict[str, int]:
    """{kernel op kind: how many} in program order of first appearance."""
    kinds: dict[str, int] = {}
    for op in ops:
        kinds[type(op).__name__] = kinds.get(type(op).__name__, 0) + 1
    return kinds
