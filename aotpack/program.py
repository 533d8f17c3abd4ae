"""A compiled-to-be program: the fusion pass's output and the input of codegen and bundling.

`ops` run in order. Every TensorArg in them names a storage in `storages`. Storages of kind
"input"/"output" are the caller's tensors (signature order = the lists below), "weight" are
constants (tensors in `weights`), "intermediate" live in the arena (placed by the memory planner).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aotpack.dtypes import DType
from aotpack.kernels.spec import KernelOp


@dataclass(frozen=True)
class Storage:
    name: str
    kind: str  # "input" | "output" | "weight" | "intermediate"
    dtype: DType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = self.dtype.nbytes
        for s in self.shape:
            n *= s
        return n


@dataclass
class Program:
    inputs: list[str]  # storage names, signature order
    outputs: list[str]
    storages: dict[str, Storage]
    ops: list[KernelOp]
    weights: dict[str, Any] = field(default_factory=dict)  # name -> contiguous torch.Tensor (CPU)
    # Frontend facts kept for inspect: e.g. {"nodes": 42, "ops": {"linear": 2, ...}}
    summary: dict = field(default_factory=dict)

    def storage(self, name: str) -> Storage:
        return self.storages[name]

    def by_kind(self, kind: str) -> list[Storage]:
        return [s for s in self.storages.values() if s.kind == kind]


@dataclass
class MemoryPlan:
    """Where every intermediate lives: `offsets[storage] = byte offset in the arena`.
    Scratch regions (ScratchSlot in a launch) are named `__scratch.<step>.<slot>` and placed too
    (one region shared by an op's launches, ScratchSlot.shared: `__scratch.<first step>.<key>`).
    `launches` are the program's launches, flattened in execution order, with every ScratchSlot
    replaced by PtrSlot(scratch name). `nbytes[name]` is each placed region's size."""

    arena_bytes: int
    offsets: dict[str, int]
    nbytes: dict[str, int]
    launches: list  # list[Launch]
    naive_bytes: int = 0  # sum of all intermediates + scratch (what no reuse would need)
