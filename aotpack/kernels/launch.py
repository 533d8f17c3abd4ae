"""The compiled form of a kernel op: a Launch (compiled kernel, grid, parameter slots) and
the Target it was compiled for. Slots say what each kernel parameter is (a pointer into a
storage, an integer expression, a tensor map, ...); the bundle writer maps them to manifest
JSON (docs/manifest.md). Split from spec.py, which re-exports these names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from aotpack.dtypes import DType

# ----------------------------------------------------------------------------- compiled form
@dataclass(frozen=True)
class PtrSlot:
    """8-byte device address of `storage` + `offset` bytes. `storage` may also name a scratch
    region created by ScratchSlot resolution (see below)."""

    storage: str
    offset: int = 0


@dataclass(frozen=True)
class NullSlot:
    """8 zero bytes (Triton's global/profile scratch pointers when their size is 0)."""


@dataclass(frozen=True)
class ScratchSlot:
    """Pointer to `nbytes` of zero-initialisation-not-required workspace private to this launch
    (Triton's global scratch when its size > 0: grid × global_scratch_size). The memory planner
    turns it into a PtrSlot into the arena.
    `shared`: launches of the SAME op whose slots carry the same key get the same region (as
    large as the largest request), live from the first to the last of them: e.g. split-K
    partial sums written by one launch and reduced by the next."""

    nbytes: int
    align: int = 256
    shared: str | None = None


@dataclass(frozen=True)
class CounterSlot:
    """Pointer to `nbytes` of int32 counters that are ZERO when the launch starts and that the
    launch leaves zero when it ends: a CTA adds 1 when its part of a tile is written, the one
    that brings the count to the total finishes the tile and stores 0 back (split-K and
    split-KV fix-up in the last CTA, instead of a second launch). Launches run one after the
    other on a session's stream, so every launch gets the same session-owned region (manifest
    buffer kind "counters", zeroed at session create: docs/manifest.md); the memory planner
    turns the slot into PtrSlot(COUNTERS)."""

    nbytes: int


COUNTERS = "__counters"  # the storage name of the session's counters (plans and manifests)


@dataclass(frozen=True)
class IntSlot:
    kind: str  # "i32" | "i64" | "u32" | "u64"
    value: int


@dataclass(frozen=True)
class F32Slot:
    value: float


@dataclass(frozen=True)
class FastDivmodSlot:
    """CuTe's `fast_divmod_divisor<32>` by value (12 bytes, align 4): u32 divisor, u32
    multiplier, u8 shift1, u8 shift2, 2 zero bytes. The manifest carries only the divisor; the
    runtime derives the rest (docs/manifest.md), so the two can never disagree.
    (CuTeDSL kernels take them, e.g. the persistent tile scheduler's cluster counts.)"""

    divisor: int  # 1 .. 2^31 - 1


@dataclass(frozen=True)
class TensorMapSlot:
    """A CUtensorMap by value; fields exactly as in docs/manifest.md (dims outermost first)."""

    storage: str
    offset: int  # bytes
    dtype: DType
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # elements, last == 1
    box: tuple[int, ...]
    swizzle: str = "128B"  # none | 32B | 64B | 128B
    l2: str = "128B"  # none | 64B | 128B | 256B
    oob: str = "zero"  # zero | nan


Slot = Union[PtrSlot, NullSlot, ScratchSlot, CounterSlot, IntSlot, F32Slot, FastDivmodSlot, TensorMapSlot]


@dataclass(frozen=True)
class CompiledKernel:
    """One cubin entry point, ready to launch. Identical kernels are shared by launches."""

    entry: str  # symbol name in the cubin
    cubin: bytes
    block: tuple[int, int, int]
    smem: int  # dynamic shared memory bytes
    cluster: tuple[int, int, int] = (1, 1, 1)
    backend: str = "triton"
    fused_ops: tuple[str, ...] = ()
    config: dict = field(default_factory=dict, hash=False, compare=False)
    # launched as a programmatic dependent of the kernel before (kernels/triton/pdl.py): the
    # kernel waits with griddepcontrol.wait before it reads or writes run-time memory
    pdl: bool = False


@dataclass(frozen=True)
class Launch:
    """One kernel launch. Sizes anywhere in it (grid, slot values, offsets, tensor-map dims
    and strides) are ints or expressions of the dims (aotpack/ir/sym.py). `when`: the launch
    runs only for shapes where each (expr, lo, hi) has lo <= expr <= hi (a bucket of a
    symbolic op, kernels/variants.py); () means always."""

    kernel: CompiledKernel
    grid: tuple
    args: tuple[Slot, ...]
    when: tuple = ()


@dataclass(frozen=True)
class Target:
    arch: str = "sm_90a"
    cc: tuple[int, int] = (9, 0)
    sm_count: int = 132
    min_driver: int = 12080
    smem_limit: int = 232448  # opt-in dynamic shared memory per block on H100/H200


SM90 = Target()
