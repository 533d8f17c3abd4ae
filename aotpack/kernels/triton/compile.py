"""Cross-compile a @triton.jit kernel to an sm_90a cubin on a host with no GPU, and turn the
kernel's arguments into manifest parameter slots.

Every parameter slot comes from what Triton itself reports for the compiled kernel
(`tensordesc_meta` gives each TMA descriptor's box and swizzle; `global_scratch_size` the hidden
scratch pointer): a wrong tensor-map box hangs the GPU, so nothing here is guessed.

Triton's parameter ABI (3.6): constexpr args are dropped; a host tensor descriptor becomes
(CUtensorMap by value, shape as i32 × ndim, strides as i64 × ndim); two hidden pointers follow the
last argument: global_scratch, profile_scratch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from aotpack.dtypes import DType
from aotpack.ir.sym import cdiv, divisible
from aotpack.kernels.spec import (
    SM90, CompiledKernel, CounterSlot, IntSlot, F32Slot, Launch, NullSlot, PtrSlot, ScratchSlot,
    Slot,
    Target, TensorArg, TensorMapSlot,
)

_TRITON_DTYPE = {
    DType.BF16: "bf16", DType.F16: "fp16", DType.F32: "fp32", DType.F64: "fp64",
    DType.I8: "i8", DType.I16: "i16", DType.I32: "i32", DType.I64: "i64", DType.U8: "u8",
    DType.BOOL: "i1", DType.F8E4M3: "fp8e4nv",
}
_SWIZZLE = {0: "none", 1: "32B", 2: "64B", 3: "128B"}


@dataclass(frozen=True)
class Ptr:
    """A pointer argument: the first element of a view (its offset folded into the address)."""

    arg: TensorArg

    @property
    def byte_offset(self):
        return self.arg.offset * self.arg.dtype.nbytes


@dataclass(frozen=True)
class Scratch:
    """A pointer to `nbytes` of workspace private to this launch (ScratchSlot: arena memory,
    contents undefined at entry), viewed as `dtype`."""

    dtype: DType
    nbytes: object  # int or symbolic


@dataclass(frozen=True)
class Counters:
    """A pointer to `nbytes` of int32 counters, zero at entry, that the kernel leaves zero
    (CounterSlot: the session's counters)."""

    nbytes: object


@dataclass(frozen=True)
class Desc:
    """A host-side TMA tensor descriptor argument over a view (`block` = the box in elements,
    outermost first, as the kernel's `tensordesc<dtype[block]>` signature says)."""

    arg: TensorArg
    block: tuple[int, ...]


@dataclass(frozen=True)
class I32:
    value: object  # int, or a symbolic Expr evaluated by the runtime


@dataclass(frozen=True)
class I64:
    value: object


@dataclass(frozen=True)
class F32:
    value: float


@dataclass(frozen=True)
class Const:
    """A constexpr argument (compiled in, no parameter slot)."""

    value: Any


ArgValue = Union[Ptr, Scratch, Counters, Desc, I32, I64, F32, Const]


@dataclass
class TritonKernel:
    kernel: CompiledKernel
    metadata: Any  # triton's CompiledKernel.metadata (namedtuple)
    signature: dict = field(default_factory=dict)


def int_divisibility(value) -> int:
    """The largest power of two up to 16 dividing an integer argument for every value of its
    symbols (0: none, or the value is 0). Triton's own JIT specialises only on 16; the smaller
    ones matter for channels-last rows of 8*odd channels (72, 120, 200: MobileNet,
    EfficientNet): their starts are 16-byte aligned in bf16, and without the fact every load
    of such a row is a scalar one, with registers spilled (measured: 32 registers and 4-6 KB
    of stack per thread in MobileNetV3's depthwise convs)."""
    if value == 0:
        return 0
    return next((d for d in (16, 8, 4, 2) if divisible(value, d)), 0)


def _signature(fn, args: dict[str, ArgValue]) -> tuple[dict, dict, dict]:
    sig, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name not in args:
            raise TypeError(f"{fn.__name__}: no value for argument {name!r}")
        v = args[name]
        if isinstance(v, Const):
            sig[name] = "constexpr"
            constexprs[name] = v.value
        elif isinstance(v, Ptr):
            sig[name] = "*" + _TRITON_DTYPE[v.arg.dtype]
            if divisible(v.byte_offset, 16):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, (Scratch, Counters)):  # 256-byte aligned regions
            sig[name] = "*" + _TRITON_DTYPE[v.dtype if isinstance(v, Scratch) else DType.I32]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, Desc):
            blk = ",".join(str(b) for b in v.block)
            sig[name] = f"tensordesc<{_TRITON_DTYPE[v.arg.dtype]}[{blk}]>"
        elif isinstance(v, I32):
            sig[name] = "i32"
            d = int_divisibility(v.value)
            if d:
                attrs[(i,)] = [["tt.divisibility", d]]
        elif isinstance(v, I64):
            sig[name] = "i64"
        elif isinstance(v, F32):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: bad argument {name!r}: {v!r}")
    return sig, constexprs, attrs


def triton_compile(fn, args: dict[str, ArgValue], num_warps: int, num_stages: int,
                   target: Target = SM90, maxnreg: int | None = None):
    """(signature, Triton's CompiledKernel) of `fn` specialised for `args` as a bundle ships it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, constexprs, attrs = _signature(fn, args)
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    major, minor = target.cc
    return sig, triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32),
                               options=options)


def compile_kernel(fn, args: dict[str, ArgValue], *, num_warps: int, num_stages: int,
                   target: Target = SM90, fused_ops: tuple[str, ...] = (),
                   config: dict | None = None, maxnreg: int | None = None,
                   pdl: bool = False) -> TritonKernel:
    """Compile `fn` specialised for `args` (integer args divisible by 16 are specialised as
    such, so shapes are baked in as facts, not values; a symbolic size only when it is a
    multiple of 16 for every value of its dims). Triton caches compiles on disk."""
    sig, compiled = triton_compile(fn, args, num_warps, num_stages, target, maxnreg)
    md = compiled.metadata
    ck = CompiledKernel(
        entry=md.name,
        cubin=bytes(compiled.asm["cubin"]),
        block=(32 * md.num_warps, 1, 1),
        smem=int(md.shared),
        cluster=(1, 1, 1) if md.num_ctas == 1 else (md.num_ctas, 1, 1),
        backend="triton",
        fused_ops=tuple(fused_ops),
        config=dict(config or {}, num_warps=num_warps, num_stages=num_stages),
        pdl=pdl,
    )
    if ck.smem > target.smem_limit:
        raise ValueError(f"{md.name}: needs {ck.smem} B of shared memory, "
                         f"more than {target.arch} allows ({target.smem_limit} B)")
    return TritonKernel(ck, md, sig)


def launch(tk: TritonKernel, fn, args: dict[str, ArgValue], grid: tuple[int, ...]) -> Launch:
    """Parameter slots for one launch of a compiled kernel, in Triton's parameter order."""
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    slots: list[Slot] = []
    metas = list(getattr(tk.metadata, "tensordesc_meta", None) or [])
    for name in fn.arg_names:
        v = args[name]
        if isinstance(v, Const):
            continue
        if isinstance(v, Ptr):
            slots.append(PtrSlot(v.arg.storage, v.byte_offset))
        elif isinstance(v, Scratch):
            slots.append(ScratchSlot(v.nbytes, 256))
        elif isinstance(v, Counters):
            slots.append(CounterSlot(v.nbytes))
        elif isinstance(v, Desc):
            if not metas:
                raise RuntimeError(f"{tk.kernel.entry}: descriptor {name!r} was not lowered to TMA")
            slots.extend(_desc_slots(v, metas.pop(0), tk.kernel.entry, name))
        elif isinstance(v, I32):
            slots.append(IntSlot("i32", v.value))
        elif isinstance(v, I64):
            slots.append(IntSlot("i64", v.value))
        elif isinstance(v, F32):
            slots.append(F32Slot(float(v.value)))
    nctas = grid3[0] * grid3[1] * grid3[2]
    gs = int(tk.metadata.global_scratch_size)
    slots.append(ScratchSlot(gs * nctas, max(int(tk.metadata.global_scratch_align), 256)) if gs
                 else NullSlot())
    ps = int(tk.metadata.profile_scratch_size)
    slots.append(ScratchSlot(ps * nctas, 256) if ps else NullSlot())
    return Launch(tk.kernel, grid3, tuple(slots))


def _desc_slots(d: Desc, meta: dict, entry: str, name: str) -> list[Slot]:
    # The box is what Triton compiled for (it splits blocks wider than the swizzle span into
    # several boxes), never our request: a wrong box hangs the GPU. It must tile the block.
    box = tuple(int(b) for b in meta["block_size"])
    if len(box) != len(d.block) or any(b <= 0 or blk % b for b, blk in zip(box, d.block)):
        raise RuntimeError(f"{entry}: descriptor {name!r} box {box} does not tile block {d.block}")
    if int(meta["elem_size"]) != d.arg.dtype.nbytes:
        raise RuntimeError(f"{entry}: descriptor {name!r} element size mismatch")
    a = d.arg
    if a.strides[-1] != 1:
        raise ValueError(f"{entry}: descriptor {name!r} needs a unit inner stride, got {a.strides}")
    tm = TensorMapSlot(
        storage=a.storage, offset=a.offset * a.dtype.nbytes, dtype=a.dtype, dims=tuple(a.shape),
        strides=tuple(a.strides), box=box, swizzle=_SWIZZLE[int(meta["swizzle"])], l2="128B",
        oob="zero",
    )
    return ([tm] + [IntSlot("i32", s) for s in a.shape] + [IntSlot("i64", s) for s in a.strides])


__all__ = ["cdiv"]  # re-exported: ceil division of ints and symbolic sizes alike
