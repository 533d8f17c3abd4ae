"""Compile a `GemmConfig` to an sm_90a cubin on a host with no GPU.

CuTeDSL reads its settings from the environment once, when `cutlass.cute` is first imported
(it builds its DSL objects then): without `CUTE_DSL_ARCH=sm_90a` it silently targets sm_100a,
and `CUTE_DSL_KEEP=ptx,cubin` makes it write the PTX and cubin to `CUTE_DSL_DUMP_DIR`
(`compiled.artifacts.CUBIN/PTX` are their paths). So `import_cutlass()` imports it with those
set, and puts the caller's environment back right after: nothing else in the process sees them.

The kernel is compiled once per (config, dtypes) with symbolic M, N, K and leading dimensions
(`cute.sym_int*`): the compiled host function is never called; only its cubin, the kernel's
parameter list (read from the PTX `.entry`) and the host function exported as an object file
(`export_to_c`, used by the ABI test) are kept.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aotpack import knobs

ARCH = "sm_90a"
_KEEP = "ptx,cubin"
_dump_dir: str | None = None  # this process's, once cutlass is imported


def available() -> bool:
    """nvidia-cutlass-dsl is installed (checked without importing cutlass, see import_cutlass)."""
    from importlib import metadata

    try:
        metadata.version("nvidia-cutlass-dsl")
        return True
    except metadata.PackageNotFoundError:
        return False


def import_cutlass() -> str:
    """Import cutlass set up for sm_90a cubins, once per process; returns the folder CuTeDSL
    writes its PTX and cubins to. Refuses if cutlass was imported already with another target
    (the cubins would be for the wrong GPU)."""
    global _dump_dir
    if _dump_dir is not None:
        return _dump_dir
    if "cutlass" in sys.modules:  # imported by someone else: it read the environment then
        keep = knobs.variable("CUTE_DSL_KEEP") or ""
        if knobs.variable("CUTE_DSL_ARCH") != ARCH or "cubin" not in keep or "ptx" not in keep:
            raise RuntimeError("cutlass was imported before aotpack set CUTE_DSL_ARCH=sm_90a and "
                               "CUTE_DSL_KEEP=ptx,cubin: call aotpack.kernels.cutedsl.build."
                               "import_cutlass() before importing cutlass")
        _dump_dir = knobs.variable("CUTE_DSL_DUMP_DIR") or os.getcwd()  # CuTeDSL's default
        return _dump_dir
    dump = _own_dump_dir()
    settings = {"CUTE_DSL_ARCH": ARCH, "CUTE_DSL_KEEP": _KEEP, "CUTE_DSL_DUMP_DIR": dump}
    with knobs.environment(settings):
        import cutlass  # noqa: F401
        import cutlass.cute  # noqa: F401  (builds the DSL objects, which read the settings)
    _dump_dir = dump  # only now: an import that failed is tried again, and fails again
    return dump


def _own_dump_dir() -> str:
    """A dump folder of this process alone, removed when it exits. CuTeDSL names the files
    after the kernel, and two configs can give one name: processes sharing a folder read each
    other's cubins (seen on the H200 with tuning's compile workers: "entry symbol ... is not in
    the cubin"). The cubins are read into the launches, so nothing in it outlives the process
    (before, every compile process left a folder of them in /tmp)."""
    dump = tempfile.mkdtemp(prefix=f"aotpack_cute_{os.getpid()}_")
    atexit.register(shutil.rmtree, dump, ignore_errors=True)
    return dump


@dataclass(frozen=True)
class PtxParam:
    """One `.param` of the kernel entry as PTX declares it."""

    index: int
    size: int  # bytes
    align: int
    ptx_type: str  # ".u32", ".u64", ".b8" (aggregate) ...


@dataclass
class BuiltGemm:
    entry: str
    cubin: bytes
    ptx: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int  # dynamic shared memory, bytes (SharedStorage size)
    params: list[PtxParam]
    tma: dict  # "a"/"b"/"c" -> {"box": (outer, inner), "swizzle": "128B", ...}
    ab_stage: int
    compiled: object = field(repr=False, default=None)  # CuTeDSL's JitCompiledFunction


_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?(\.\w+)"
                       r"(?:\s+\.ptr\s+\.\w+\s+\.align\s+\d+)?"  # .u64 .ptr .global .align 4
                       r"\s+\S+?_param_(\d+)(?:\[(\d+)\])?")
_SCALAR = {".u32": 4, ".s32": 4, ".b32": 4, ".f32": 4, ".u64": 8, ".s64": 8, ".b64": 8,
           ".u16": 2, ".b16": 2, ".u8": 1, ".b8": 1}


def parse_entry(ptx: str) -> tuple[str, list[PtxParam]]:
    """The (single) `.entry` of a CuTeDSL PTX module and its parameters, in order."""
    m = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise RuntimeError("no .entry in CuTeDSL's PTX")
    params = []
    for pm in _PARAM_RE.finditer(m.group(2)):
        align, ty, idx, arr = pm.groups()
        size = int(arr) if arr else _SCALAR[ty]
        params.append(PtxParam(int(idx), size, int(align) if align else size, ty))
    if [p.index for p in params] != list(range(len(params))):
        raise RuntimeError(f"{m.group(1)}: could not parse the parameter list")
    return m.group(1), params


def compile_gemm(cfg, ab_dtype: str = "bf16", max_clusters: int = 132) -> BuiltGemm:
    """Compile `cfg` (a gemm.GemmConfig) for sm_90a. M, N, K, leading dims are symbolic.
    `max_clusters` only bounds the grid of CuTeDSL's host function (used as the reference in
    tests); the cubin does not depend on it."""
    import_cutlass()
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    from aotpack.kernels.cutedsl.epilogue import F32_OPERAND_KINDS
    from aotpack.kernels.cutedsl.gemm import _CUTE_DTYPE, Sm90Gemm

    ab_t, c_t = _CUTE_DTYPE[ab_dtype], _CUTE_DTYPE[cfg.out_dtype]
    m = cute.sym_int32(symbol="M")
    n = cute.sym_int32(divisibility=8, symbol="N")
    k = cute.sym_int32(divisibility=8, symbol="K")
    # Leading dimensions are separate symbols (strided views); 16-byte aligned rows for TMA.
    lda, ldb, ldc = (cute.sym_int64(divisibility=8, symbol=s) for s in ("lda", "ldb", "ldc"))
    a = make_fake_tensor(ab_t, (m, k, 1), (lda, 1, 0), assumed_align=16)
    b = make_fake_tensor(ab_t, (n, k, 1), (ldb, 1, 0), assumed_align=16)
    # SwiGLU: C has half of B's rows as columns; its own symbol (not N) says they differ
    n_c = cute.sym_int32(divisibility=8, symbol="N_out") if cfg.swiglu_group else n
    c = make_fake_tensor(c_t, (m, n_c, 1), (ldc, 1, 0), assumed_align=16)
    # Epilogue operands have the output's element type (aotpack's fused graphs keep one
    # activation dtype), EpScale's are f32; always three pointer + three stride arguments (see
    # Sm90Gemm.__call__; unused pointers keep the output type).
    kinds = [cfg.epilogue[i] for i in cfg.operand_steps] + [""] * 3
    ptr_t = [cutlass.Float32 if kinds[j] in F32_OPERAND_KINDS else c_t for j in range(3)]
    ptrs = [cute.runtime.make_ptr(t, 16, cute.AddressSpace.gmem, assumed_align=t.width // 8)
            for t in ptr_t]
    lds = [cutlass.Int32(8) for _ in range(3)]
    gemm = Sm90Gemm(cfg)
    # max_clusters only sizes the grid the host function would launch; the kernel itself
    # loops over tiles with gridDim, so the value does not reach the cubin.
    compiled = cute.compile(gemm, a, b, c, *ptrs, *lds, max_clusters, make_fake_stream())
    art = compiled.artifacts
    cubin, ptx = _artifact(art.CUBIN), _artifact(art.PTX).decode()
    entry, params = parse_entry(ptx)
    return BuiltGemm(
        entry=entry, cubin=cubin, ptx=ptx, block=(gemm.threads, 1, 1),
        cluster=(cfg.cluster_m, cfg.cluster_n, 1), smem=int(gemm.shared_storage.size_in_bytes()),
        params=params, tma=gemm.traced, ab_stage=int(gemm.ab_stage), compiled=compiled)


def _artifact(x) -> bytes:
    """CuTeDSL reports a kept artifact as the dumped file's path or as its content (bytes, or
    str for PTX) depending on the version and on compile-cache hits."""
    if x is None:
        raise RuntimeError("CuTeDSL kept no artifact: is CUTE_DSL_KEEP=ptx,cubin set?")
    if isinstance(x, bytes):
        return x
    if len(x) < 4096 and "\n" not in x and Path(x).is_file():
        return Path(x).read_bytes()
    return x.encode()
