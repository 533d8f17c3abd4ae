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


class ShapeError(ValueError):
    """Input shapes a program cannot run (wrong rank, a dim outside its range, dims that must
    be equal and are not); the message names the input, the dim, the value and what is
    allowed, as the C runtime's INVALID_ARGUMENT does."""


@dataclass(frozen=True)
class Storage:
    name: str
    kind: str  # "input" | "output" | "weight" | "intermediate" | "state"
    dtype: DType
    shape: tuple  # ints and symbolic Exprs (aotpack/ir/sym.py)

    @property
    def nbytes(self):
        n = self.dtype.nbytes
        for s in self.shape:
            n = n * s
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
    symbols: list = field(default_factory=list)  # aotpack.ir.sym.Sym: the dynamic dims
    example: dict = field(default_factory=dict)  # symbol name -> the exported example value
    notes: list = field(default_factory=list)  # what the frontend decided for the user to see
    # storages of kind "state": buffers kept per session between runs (docs/generation.md)
    states: list = field(default_factory=list)
    generation: dict | None = None  # the manifest's `generation` section (a generation step)
    # --precision other than the model's: what was quantized and the error measured
    # (aotpack/precision.py; the bundle's provenance `precision`)
    precision: dict | None = None
    # output storage name -> the model's source line of the node its op was lowered from (what
    # a build error about that op names; ops made by later fusions keep their output's entry)
    origins: dict = field(default_factory=dict)
    # weight -> (e4m3 tensor, f32 scale per row): a weight the model computes from FP8 ones
    # (passes/fp8_sources.py), which passes/quantize.keep_checkpoint_fp8 puts back
    fp8_sources: dict = field(default_factory=dict)

    def origin(self, op) -> str | None:
        """The model's source line `op` was lowered from, found by a storage it writes (its
        output; a cache write that rotates nothing has none, so its caches), else None."""
        for arg in (getattr(op, "out", None), getattr(op, "k_cache", None)):
            if arg is not None and arg.storage in self.origins:
                return self.origins[arg.storage]
        return None

    @property
    def dynamic(self) -> bool:
        return bool(self.symbols)

    def bind(self, shapes) -> dict[str, int]:
        """The symbols' values for these input shapes (in signature order); ShapeError for
        shapes the program cannot run."""
        return bind_symbols([(n, self.storages[n].shape) for n in self.inputs], self.symbols,
                            [tuple(int(d) for d in s) for s in shapes])

    def at(self, env: dict) -> "Program":
        """This program with every symbolic size evaluated at `env` (a static program)."""
        from aotpack.ir.sym import subs_tree

        return Program(list(self.inputs), list(self.outputs),
                       {k: subs_tree(s, env) for k, s in self.storages.items()},
                       [subs_tree(op, env) for op in self.ops], self.weights, self.summary,
                       states=list(self.states), generation=self.generation,
                       fp8_sources=self.fp8_sources)

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
    # the session's zeroed counters (CounterSlot; storage COUNTERS, outside the arena)
    counters_bytes: int = 0


def bind_symbols(signature, symbols, shapes) -> dict[str, int]:
    """Bind each symbol from the first input dim that is exactly that symbol, or where none is,
    from the first that is k*S + c (a derived dim); then check every dim and range
    (docs/manifest.md, "Binding a shape"). `signature`: [(input name, shape)]."""
    from aotpack.ir.sym import subs

    if len(shapes) != len(signature):
        raise ShapeError(f"expected {len(signature)} inputs, got {len(shapes)}")
    for (name, dims), shape in zip(signature, shapes):
        if len(shape) != len(dims):
            raise ShapeError(f"input {name!r} has rank {len(shape)}, expected {len(dims)} "
                             f"({_fmt(dims)})")
    env: dict[str, int] = {}
    where: dict[str, str] = {}
    by_name = {s.name: s for s in symbols}
    for exact in (True, False):
        for (name, dims), shape in zip(signature, shapes):
            for k, (d, v) in enumerate(zip(dims, shape)):
                bound = _binds(d, exact)
                if bound is None or bound[0].name not in by_name or bound[0].name in env:
                    continue
                env[bound[0].name] = _bound_value(by_name[bound[0].name], bound, d, v,
                                                  f"input {name!r} dim {k}")
                where[bound[0].name] = f"input {name!r} dim {k}"
    for (name, dims), shape in zip(signature, shapes):
        for k, (d, v) in enumerate(zip(dims, shape)):
            want = subs(d, env)
            if want != v:
                why = f" ({d} = {want}, as {where[str(d)]} says)" if str(d) in where else ""
                raise ShapeError(f"input {name!r} dim {k} is {v} but must be {want}{why}")
    return env


def _binds(d, exact: bool):
    """(symbol, k, c) when the dim `d` binds a symbol: exactly it, or (second pass) k*S + c."""
    from aotpack.ir.sym import affine_symbol

    bound = affine_symbol(d)
    if bound is None or (exact and bound[1:] != (1, 0)):
        return None
    return bound


def _bound_value(s, bound, d, v: int, where: str) -> int:
    _, k, c = bound
    if (k, c) == (1, 0):
        if not s.lo <= v <= s.hi:
            raise ShapeError(f"{where} is {v}, outside the range {s.lo}..{s.hi} of {s.name}")
        return v
    if (v - c) % k or not s.lo <= (v - c) // k <= s.hi:
        sizes = [k * x + c for x in range(s.lo, min(s.lo + 2, s.hi + 1))]
        listed = ", ".join(map(str, sizes)) + (f", ... {k * s.hi + c}" if s.hi > s.lo + 1 else "")
        raise ShapeError(f"{where} is {v}, which is not {d} for a whole {s.name} in "
                         f"{s.lo}..{s.hi} (the size{'s' if s.hi > s.lo else ''} {listed})")
    return (v - c) // k


def _fmt(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"
