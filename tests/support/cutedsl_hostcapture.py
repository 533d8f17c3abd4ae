"""Run CuTeDSL's own host launch function on a machine with no GPU and record what it would
pass to the kernel: every parameter's bytes, grid, block, dynamic smem, launch attributes.

How: `compiled.export_to_c()` writes the host function as a relocatable object. Its only
external references are a handful of CUDA-runtime entry points that CuTeDSL's runtime library
normally provides (`_cudaLibraryLoadData`, `_cudaLibraryGetKernel`, `_cudaLaunchKernelEx`, ...).
We link the object against our own stubs of those (C source below) instead of
libcute_dsl_runtime, call the host function through ctypes with fake device addresses, and the
`_cudaLaunchKernelEx` stub copies the kernel arguments out (their sizes come from the PTX entry).
CuTe packs the TMA descriptors itself inside that host code (it does not call
cuTensorMapEncodeTiled), so the captured 128-byte descriptors are CuTe's packing.

Used by tests/test_cutedsl_gemm.py to check the manifest slots aotpack derives. Needs a C
compiler (`cc`) on the build host; nothing here runs on a GPU.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_STUBS_C = r"""
#include <string.h>
#include <stddef.h>
typedef struct { unsigned x, y, z; } dim3_t;
typedef struct { int id; int pad; unsigned char val[64]; } attr_t;   /* cudaLaunchAttribute */
typedef struct {
  dim3_t grid; dim3_t block; size_t smem; void *stream; attr_t *attrs; unsigned nattrs;
} cfg_t;                                                               /* cudaLaunchConfig_t */

#define MAXP 64
int aot_nparams = 0;
int aot_sizes[MAXP];
int aot_offsets[MAXP];
unsigned char aot_bytes[8192];
unsigned aot_grid[3], aot_block[3];
unsigned long long aot_smem = 0;
int aot_nattrs = 0;
int aot_attr_ids[16];
unsigned aot_attr_vals[16][4];
int aot_launches = 0;
int aot_func_attr[4];   /* last cudaFuncSetAttribute: attr, value */

void aot_set_sizes(int n, const int *sizes) {
  int off = 0;
  aot_nparams = n;
  for (int i = 0; i < n; i++) { aot_sizes[i] = sizes[i]; aot_offsets[i] = off; off += sizes[i]; }
}
static int fake_lib, fake_kernel;
int _cudaLibraryLoadData(void **lib, ...) { *lib = &fake_lib; return 0; }
int _cudaLibraryGetKernel(void **k, ...) { *k = &fake_kernel; return 0; }
int _cuKernelGetAttribute(int *v, ...) { *v = 0; return 0; }
int _cudaFuncSetAttribute(const void *f, int attr, int value) {
  aot_func_attr[0] = attr; aot_func_attr[1] = value; return 0; }
int _cudaKernelSetAttributeForDevice(void *k, int attr, int value, int dev) {
  aot_func_attr[2] = attr; aot_func_attr[3] = value; return 0; }
int _cudaGetDevice(int *d) { *d = 0; return 0; }
int _cudaDeviceGetAttribute(int *v, int attr, int dev) {
  *v = attr == 97 ? 232448 : (attr == 16 ? 132 : 0); return 0; }
int _cudaLaunchKernelEx(const cfg_t *cfg, const void *func, void **args) {
  aot_grid[0] = cfg->grid.x; aot_grid[1] = cfg->grid.y; aot_grid[2] = cfg->grid.z;
  aot_block[0] = cfg->block.x; aot_block[1] = cfg->block.y; aot_block[2] = cfg->block.z;
  aot_smem = cfg->smem;
  aot_nattrs = cfg->nattrs < 16 ? (int)cfg->nattrs : 16;
  for (int i = 0; i < aot_nattrs; i++) {
    aot_attr_ids[i] = cfg->attrs[i].id; memcpy(aot_attr_vals[i], cfg->attrs[i].val, 16); }
  for (int i = 0; i < aot_nparams; i++)
    memcpy(aot_bytes + aot_offsets[i], args[i], (size_t)aot_sizes[i]);
  aot_launches++;
  return 0;
}
"""


@dataclass
class HostTensor:
    """A 2-D row-major tensor argument of the host function: (rows, cols) with a row stride."""

    address: int
    rows: int
    cols: int
    ld: int


@dataclass
class Captured:
    params: list[bytes]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    attrs: dict[int, tuple[int, ...]] = field(default_factory=dict)  # launch attribute id -> vals


def available() -> bool:
    return shutil.which("cc") is not None


def build_host_library(compiled, workdir: str | None = None) -> tuple[ctypes.CDLL, str]:
    """Export CuTeDSL's host function and link it with the stubs; returns (library, the
    host entry's symbol)."""
    d = Path(workdir or tempfile.mkdtemp(prefix="aotpack_capture_"))
    d.mkdir(parents=True, exist_ok=True)
    compiled.export_to_c(str(d), "host", function_prefix="aotcap")
    (d / "stubs.c").write_text(_STUBS_C)
    so = d / "libhost.so"
    # -Bsymbolic: bind to our stubs even though libcute_dsl_runtime (same symbol names, real
    # CUDA runtime behind them) is already loaded into this process by `import cutlass`.
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o", str(so), str(d / "host.o"),
                    str(d / "stubs.c")], check=True, capture_output=True)
    header = (d / "host.h").read_text()
    m = re.search(r"void (_mlir_aotcap__mlir_ciface_\w+)\(void \*\*args", header)
    if m is None:
        raise RuntimeError("export_to_c wrote no host entry point")
    return ctypes.CDLL(str(so)), m.group(1)


class _Tensor2D(ctypes.Structure):
    # export_to_c's struct for a (?, ?, 1):(?, 1, 0) tensor: data, i32 shapes[2], i64 strides[1]
    _fields_ = [("data", ctypes.c_void_p), ("shapes", ctypes.c_int32 * 2),
                ("strides", ctypes.c_int64 * 1)]


def run_host(lib: ctypes.CDLL, entry: str, param_sizes: list[int], tensors: list[HostTensor],
             pointers: list[int], ints: list[int]) -> Captured:
    """Call the host function as `(tensors..., pointers..., ints..., stream)` (the order of
    Sm90Gemm.__call__) and return what it launched."""
    sizes = (ctypes.c_int * len(param_sizes))(*param_sizes)
    lib.aot_set_sizes(len(param_sizes), sizes)
    _load_module(lib)
    keep = [_Tensor2D(t.address, (t.rows, t.cols), (t.ld,)) for t in tensors]
    keep += [ctypes.c_void_p(p) for p in pointers]
    keep += [ctypes.c_int32(v) for v in ints]
    stream, ret = ctypes.c_void_p(0), ctypes.c_int32(0)
    argv = [ctypes.cast(ctypes.pointer(x), ctypes.c_void_p) for x in keep]
    argv += [ctypes.cast(ctypes.pointer(stream), ctypes.c_void_p),
             ctypes.cast(ctypes.pointer(ret), ctypes.c_void_p)]
    arr = (ctypes.c_void_p * len(argv))(*argv)
    before = ctypes.c_int.in_dll(lib, "aot_launches").value
    getattr(lib, entry)(arr, ctypes.c_int32(len(argv)))
    if ret.value != 0 or ctypes.c_int.in_dll(lib, "aot_launches").value != before + 1:
        raise RuntimeError(f"CuTeDSL's host function did not launch (status {ret.value})")
    return _read(lib, param_sizes)


def _load_module(lib) -> None:
    """What the generated Kernel_Module_Load does: cuda_init, then load for device 0."""
    library = ctypes.c_void_p()
    plib = ctypes.pointer(library)
    err = ctypes.c_int32(0)
    init = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.pointer(plib), ctypes.c_void_p),
                                 ctypes.cast(ctypes.pointer(err), ctypes.c_void_p))
    lib._mlir_aotcap_cuda_init(init)
    dev = ctypes.c_int32(0)
    load = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.pointer(plib), ctypes.c_void_p),
                                 ctypes.cast(ctypes.pointer(dev), ctypes.c_void_p),
                                 ctypes.cast(ctypes.pointer(err), ctypes.c_void_p))
    lib._mlir_aotcap_cuda_load_to_device(load)
    if err.value != 0:
        raise RuntimeError(f"module load stub failed: {err.value}")


def _read(lib, sizes: list[int]) -> Captured:
    raw = bytes((ctypes.c_ubyte * 8192).in_dll(lib, "aot_bytes"))
    offs = (ctypes.c_int * 64).in_dll(lib, "aot_offsets")
    params = [raw[offs[i]:offs[i] + s] for i, s in enumerate(sizes)]
    grid = tuple((ctypes.c_uint * 3).in_dll(lib, "aot_grid"))
    block = tuple((ctypes.c_uint * 3).in_dll(lib, "aot_block"))
    smem = ctypes.c_ulonglong.in_dll(lib, "aot_smem").value
    n = ctypes.c_int.in_dll(lib, "aot_nattrs").value
    ids = (ctypes.c_int * 16).in_dll(lib, "aot_attr_ids")
    vals = ((ctypes.c_uint * 4) * 16).in_dll(lib, "aot_attr_vals")
    attrs = {ids[i]: tuple(vals[i]) for i in range(n)}
    return Captured(params, grid, block, smem, attrs)


def cleanup(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
