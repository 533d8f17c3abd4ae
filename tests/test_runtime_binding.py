"""The Python binding of the C runtime (aotpack.runtime, ctypes over libaotpack.so).

CPU tests (CI): check_file on bundles this file writes itself (plain json + struct + hashlib,
independent of aotpack.bundle), error codes, the missing-driver error, no torch at import, and
a full run against the fake driver that the CMake build produces (skipped when not built).
GPU tests (`@pytest.mark.gpu`): a Triton kernel compiled for the local GPU, bundled here and run
through Session.run with torch CUDA tensors.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lib_available() -> bool:
    try:
        from aotpack.runtime import library_path

        library_path()
        return True
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _lib_available(),
                                reason="libaotpack.so not built (cmake -S . -B build && ...)")

# ----------------------------------------------------------------------- bundle writing


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int], bytes]],
                      metadata: dict[str, str] | None = None, align: int = 256) -> None:
    """A safetensors file with every tensor `align`-aligned from the file start; the zero
    bytes before an aligned tensor are a U8 tensor `__aotpack__.pad.<i>` (bundles may have no
    gaps, as aotpack's writer makes them)."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offsets, cursor, padded = [], 0, []
    for t in tensors:
        gap = -cursor % align
        if gap:
            padded.append((f"__aotpack__.pad.{len(padded)}", "U8", [gap], bytes(gap)))
        padded.append(t)
        cursor += gap + len(t[3])
    cursor = 0
    for name, dtype, shape, data in padded:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, cursor + len(data)]}
        offsets.append(cursor)
        cursor += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((-(8 + len(text))) % align)
    body = bytearray(cursor)
    for (_, _, _, data), off in zip(padded, offsets):
        body[off:off + len(data)] = data
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(body))


WEIGHT = struct.pack("<64f", *[0.25 * i - 3.0 for i in range(64)])
FAKE_CUBIN = b"\x7fELF fake cubin bytes for tests"


def manifest(cubin: bytes = FAKE_CUBIN, entry: str = "add_kernel", cc=(9, 0),
             external: bool = False, n: int = 256, tensormap: bool = True, block: int = 128,
             grid: int = 2, smem: int = 0, extra_args: list | None = None) -> dict:
    """The runtime tests' model: y[4,64] = x[4,64] + 1.5 * w[64] (broadcast over rows)."""
    args = [{"kind": "ptr", "buffer": 0}, {"kind": "ptr", "buffer": 2},
            {"kind": "ptr", "buffer": 1}]
    if tensormap:
        args.append({"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "f32",
                     "dims": [4, 64], "strides": [64, 1], "box": [4, 32], "swizzle": "128B",
                     "l2": "128B", "oob": "zero"})
        args.append({"kind": "ptr", "buffer": 3, "offset": 512})
    args += [{"kind": "i32", "value": n}, {"kind": "f32", "value": 1.5}]
    args += extra_args if extra_args is not None else [{"kind": "null"}, {"kind": "null"}]
    return {
        "format": "aotpack", "version": 1,
        "target": {"arch": f"sm_{cc[0]}{cc[1]}", "cc": list(cc), "min_driver": 12000,
                   "sm_count": 132},
        "inputs": [{"name": "x", "dtype": "f32", "shape": [4, 64]}],
        "outputs": [{"name": "y", "dtype": "f32", "shape": [4, 64]}],
        "weights": [{"name": "w", "dtype": "f32", "shape": [64], "nbytes": 256,
                     "sha256": _sha(WEIGHT)}],
        "external_weights": {"file": "weights.safetensors"} if external else None,
        "arena_bytes": 4096,
        "buffers": [{"kind": "input", "index": 0}, {"kind": "output", "index": 0},
                    {"kind": "weight", "index": 0},
                    {"kind": "arena", "offset": 0, "nbytes": 1024}],
        "kernels": [{"name": "add_0", "entry": entry, "cubin": 0, "cubin_sha256": _sha(cubin),
                     "block": [block, 1, 1], "cluster": [1, 1, 1], "smem": smem,
                     "backend": "triton"}],
        "steps": [{"kernel": 0, "grid": [grid, 1, 1], "args": args}],
        "provenance": {"aotpack": "0.1.0", "created_by": "tests/test_runtime_binding.py"},
    }


def write_bundle(folder: Path, m: dict | None = None, cubin: bytes = FAKE_CUBIN,
                 weight: bytes = WEIGHT) -> Path:
    m = m or manifest(cubin)
    tensors = [("__aotpack__.cubin.0", "U8", [len(cubin)], cubin)]
    if m["external_weights"]:
        write_safetensors(folder / m["external_weights"]["file"],
                          [("w", "F32", [64], weight)])
    else:
        tensors.insert(0, ("w", "F32", [64], weight))
    path = folder / "model.aotpack"
    text = json.dumps(m)
    write_safetensors(path, tensors, {"aotpack.manifest": text,
                                      "aotpack.manifest_sha256": _sha(text.encode())})
    return path


def _run_py(code: str, **env) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter: the driver is loaded once per process, so tests
    that pick a driver (missing / fake) must not share a process with other tests."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=120)


# ------------------------------------------------------------------------------ CPU tests


def test_import_does_not_import_torch_or_triton():
    r = _run_py("import sys, aotpack.runtime as r; r.load_library(); "
                "print('torch' in sys.modules, 'triton' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_check_file_valid(tmp_path):
    from aotpack.runtime import Model

    Model.check_file(write_bundle(tmp_path))


def test_check_file_external_weights(tmp_path):
    from aotpack.runtime import AotpackError, Model, StatusCode

    path = write_bundle(tmp_path, manifest(external=True))
    Model.check_file(path)
    moved = tmp_path / "other.safetensors"
    (tmp_path / "weights.safetensors").rename(moved)
    with pytest.raises(AotpackError) as e:
        Model.check_file(path)
    assert e.value.code == StatusCode.IO
    Model.check_file(path, weights_path=moved)


@pytest.mark.parametrize("corrupt, code, needle", [
    ("truncate", "CORRUPT_BUNDLE", "truncated"),
    ("cubin_sha", "CHECKSUM_MISMATCH", "kernel 'add_0'"),
    ("weight_sha", "WEIGHTS_MISMATCH", "weight 'w'"),
    ("version", "UNSUPPORTED_VERSION", "version 7"),
    ("symbolic", "UNSUPPORTED_VERSION", "symbolic"),
    ("box", "CORRUPT_BUNDLE", "box[1] = 512"),
    ("buffer", "CORRUPT_BUNDLE", "buffer index 9 out of range"),
])
def test_check_file_corrupt(tmp_path, corrupt, code, needle):
    from aotpack.runtime import AotpackError, Model, StatusCode

    m = manifest()
    weight = WEIGHT
    if corrupt == "cubin_sha":
        m["kernels"][0]["cubin_sha256"] = "0" * 64
    elif corrupt == "weight_sha":
        weight = WEIGHT[:-4] + struct.pack("<f", 99.0)
    elif corrupt == "version":
        m["version"] = 7
    elif corrupt == "symbolic":
        m["inputs"][0]["shape"] = ["batch", 64]
    elif corrupt == "box":
        m["steps"][0]["args"][3]["box"] = [4, 512]
    elif corrupt == "buffer":
        m["steps"][0]["args"][0]["buffer"] = 9
    path = write_bundle(tmp_path, m, weight=weight)
    if corrupt == "truncate":
        path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(AotpackError) as e:
        Model.check_file(path)
    assert e.value.code == StatusCode[code], str(e.value)
    assert needle in e.value.message


def test_check_file_missing(tmp_path):
    from aotpack.runtime import AotpackError, Model, StatusCode

    with pytest.raises(AotpackError) as e:
        Model.check_file(tmp_path / "nope.aotpack")
    assert e.value.code == StatusCode.IO and "nope.aotpack" in str(e.value)


def test_missing_driver(tmp_path):
    path = write_bundle(tmp_path)
    r = _run_py(f"""
from aotpack.runtime import AotpackError, Model
try:
    Model({str(path)!r})
except AotpackError as e:
    print(e.code.name, '|', e.message)
""", AOTPACK_LIBCUDA="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    code, message = r.stdout.split("|", 1)
    assert code.strip() == "DRIVER_NOT_FOUND"
    assert "NVIDIA" in message and "driver" in message


def _fake_build() -> Path | None:
    """A CMake build folder (`build/` or `build/<name>/`, the newest; not a sanitizer build,
    which a plain Python cannot load) holding libaotpack.so and the tests' fake libcuda."""
    found = []
    for d in [REPO / "build", *sorted((REPO / "build").glob("*"))]:
        fake = d / "runtime_cpp" / "tests" / "libfake_cuda.so"
        cache = d / "CMakeCache.txt"
        if fake.is_file() and (d / "libaotpack.so").is_file() and cache.is_file() and \
                "AOTPACK_SANITIZE:BOOL=ON" not in cache.read_text(errors="replace"):
            found.append(d)
    return max(found, key=lambda d: (d / "libaotpack.so").stat().st_mtime, default=None)


def _fake_driver() -> Path | None:
    """The fake libcuda of that build, if built."""
    d = _fake_build()
    return d / "runtime_cpp" / "tests" / "libfake_cuda.so" if d else None


def _fake_env() -> dict:
    """Environment of a subprocess that runs on the fake driver with the same build's library."""
    return {"AOTPACK_LIBCUDA": str(_fake_driver()), "AOTPACK_LIB": str(_fake_build() / "libaotpack.so")}


@pytest.mark.skipif(_fake_driver() is None, reason="fake driver not built (CMake tests)")
def test_run_on_fake_driver(tmp_path):
    """Model + Session + run_pointers end to end on the CMake build's fake libcuda (device
    memory is host memory there, the kernel runs on the CPU)."""
    m = manifest()
    m["kernels"][0]["pdl"] = True  # so programmatic_launch shows in the driver's counters
    path = write_bundle(tmp_path, m)
    env = _fake_env()
    r = _run_py(f"""
import array, ctypes, os
from aotpack.runtime import Model, Session
m = Model({str(path)!r})
assert [(t.name, t.dtype, t.shape, t.nbytes) for t in m.inputs] == [("x", "f32", (4, 64), 1024)]
assert m.outputs[0].name == "y" and m.arena_bytes == 4096 and m.kernel_names() == ["add_0"]
def buf(vals):
    raw = ctypes.create_string_buffer(1024 + 256)
    addr = (ctypes.addressof(raw) + 255) // 256 * 256
    ctypes.memmove(addr, array.array("f", vals).tobytes(), 1024)
    return raw, addr
x = [float(i % 7) - 2.0 for i in range(256)]
driver = ctypes.CDLL(os.environ["AOTPACK_LIBCUDA"])
def pdl_launches():
    stats = (ctypes.c_int * 6)()
    driver.fake_cuda_stats(stats)
    return stats[5]
for graph, pdl in ((True, True), (False, True), (True, False), (False, False)):
    xr, xa = buf(x)
    yr, ya = buf([0.0] * 256)
    s = Session(m, use_cuda_graph=graph, programmatic_launch=pdl)
    before = pdl_launches()
    s.run_pointers([xa], [ya])
    assert pdl_launches() == before + (1 if pdl else 0), (graph, pdl)
    y = array.array("f", ctypes.string_at(ya, 1024))
    w = [0.25 * i - 3.0 for i in range(64)]
    assert all(y[i] == x[i] + 1.5 * w[i % 64] for i in range(256)), list(y[:8])
# context managers close the handles; a closed session refuses a run with a status
from aotpack.runtime import AotpackError
import aotpack
with aotpack.load({str(path.parent)!r}) as m2, m2.session() as s2:  # the folder: its bundle
    s2.run_pointers([xa], [ya])
assert m2._handle is None and s2._handle is None
try:
    s2.run_pointers([xa], [ya])
    raise SystemExit("a closed session ran")
except AotpackError as e:
    assert e.code.name == "INVALID_ARGUMENT", e
print("ok")
""", **env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ------------------------------------------------------------- bundle format v2 (dynamic dims)


def _lib_has_v2() -> bool:
    from aotpack.runtime import load_library
    from aotpack.runtime._lib import has_dynamic_shapes

    return has_dynamic_shapes(load_library())


needs_v2 = pytest.mark.skipif(not _lib_available() or not _lib_has_v2(),
                              reason="this libaotpack.so predates bundle format v2: rebuild it")


def manifest_v2(entry_small: str = "dyn_add_small", entry_big: str = "dyn_add_big",
                cubin: bytes = FAKE_CUBIN, cc=(9, 0), tensormap: bool = True) -> dict:
    """runtime_cpp's TestBundle::dynamic(): B in 1..64 (example 4); x f32[B, 64], aux
    f32[B, 2*B] (unused) -> y f32[B, 64] = x + 1.5 * w. Step 0 (B <= 8) runs the `small`
    kernel on grid [B, 1, 1], step 1 (B >= 9) the `big` one on [(B + 7)/8, 1, 1]; both take
    ptr x, ptr w, ptr y, a tensor map of x [B, 64] (the fake kernels check it), i32 64*B and
    f32 1.5."""
    m = manifest(cubin, cc=cc)
    tmap = [{"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "f32", "dims": ["B", 64],
             "strides": [64, 1], "box": [1, 32], "swizzle": "128B"}] if tensormap else []
    args = ([{"kind": "ptr", "buffer": 0}, {"kind": "ptr", "buffer": 2},
             {"kind": "ptr", "buffer": 1}] + tmap +
            [{"kind": "i32", "value": "64*B"}, {"kind": "f32", "value": 1.5}])
    kernel = m["kernels"][0]
    m.update(
        version=2, symbols=[{"name": "B", "min": 1, "max": 64, "example": 4}], arena_bytes=0,
        inputs=[{"name": "x", "dtype": "f32", "shape": ["B", 64]},
                {"name": "aux", "dtype": "f32", "shape": ["B", "2*B"]}],
        outputs=[{"name": "y", "dtype": "f32", "shape": ["B", 64]}],
        buffers=m["buffers"][:3],
        kernels=[dict(kernel, name="dyn_small", entry=entry_small),
                 dict(kernel, name="dyn_big", entry=entry_big)],
        steps=[{"kernel": 0, "grid": ["B", 1, 1], "args": args,
                "when": [{"expr": "B", "min": 1, "max": 8}]},
               {"kernel": 1, "grid": ["(B + 7)/8", 1, 1], "args": args,
                "when": [{"expr": "B", "min": 9, "max": 64}]}])
    return m


@needs_v2
def test_ctypes_structs_match_header(tmp_path):
    """The ctypes mirrors of aotpack.h's structs have its sizes and offsets, as a C compiler
    sees them (skipped when there is none)."""
    import ctypes
    import shutil

    from aotpack.runtime import _lib

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's layout")
    structs = {"aotpack_tensor_info": _lib.TensorInfoC, "aotpack_shape": _lib.ShapeC,
               "aotpack_symbol_info": _lib.SymbolInfoC,
               "aotpack_model_options": _lib.ModelOptionsC,
               "aotpack_session_options": _lib.SessionOptionsC}
    lines = []
    for cname, ct in structs.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in ct._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "aotpack/aotpack.h"\n'
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    include = REPO / "runtime_cpp" / "include"
    subprocess.run([cc, "-std=c99", f"-I{include}", str(src), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    want = []
    for cname, ct in structs.items():
        want.append(f"{cname} size {ctypes.sizeof(ct)}")
        want += [f"{cname} {f} {getattr(ct, f).offset}" for f, _ in ct._fields_]
    assert got.split("\n")[:-1] == want


@needs_v2
@pytest.mark.parametrize("change, code, needle", [
    (None, "OK", ""),
    ("unbindable", "CORRUPT_BUNDLE", "symbol 'T' is not the whole of any input dim"),
    ("expr_in_block", "CORRUPT_BUNDLE", "kernels[0].block[0]: expected an integer"),
    ("unknown_symbol", "CORRUPT_BUNDLE", "inputs[1].shape[1]: expression '2*T'"),
    ("escapes_at_max", "CORRUPT_BUNDLE", "at shape B=64: steps[1] (kernel 'dyn_big') args[3]"),
    ("v1_string", "UNSUPPORTED_VERSION", "symbolic"),
])
def test_check_file_v2(tmp_path, change, code, needle):
    from aotpack.runtime import AotpackError, Model, StatusCode

    m = manifest_v2()
    if change == "unbindable":
        m["symbols"].append({"name": "T", "min": 1, "max": 8})
        m["inputs"][1]["shape"][1] = "T/2"  # (2*T would bind T: a derived dim)
    elif change == "expr_in_block":
        m["kernels"][0]["block"][0] = "B"
    elif change == "unknown_symbol":
        m["inputs"][1]["shape"][1] = "2*T"
    elif change == "escapes_at_max":
        m["steps"][1]["args"] = [dict(a) for a in m["steps"][1]["args"]]
        m["steps"][1]["args"][3]["dims"] = ["B*B", 64]
    elif change == "v1_string":
        m["version"] = 1
    path = write_bundle(tmp_path, m)
    if code == "OK":
        Model.check_file(path)
        return
    with pytest.raises(AotpackError) as e:
        Model.check_file(path)
    assert e.value.code == StatusCode[code] and needle in e.value.message, str(e.value)


@needs_v2
@pytest.mark.skipif(_fake_driver() is None, reason="fake driver not built (CMake tests)")
def test_dynamic_run_on_fake_driver(tmp_path):
    """A v2 bundle through the binding on the fake driver: symbols and dims, output shapes,
    runs at several shapes (the `when` group each picks, from the driver's launch log),
    binding errors that leave the session usable, and a plan cache of one."""
    path = write_bundle(tmp_path, manifest_v2())
    r = _run_py(f"""
import array, ctypes, os
from aotpack.runtime import AotpackError, DimInfo, Model, Session, StatusCode, Symbol
m = Model({str(path)!r})
assert m.is_dynamic and m.symbols == [Symbol("B", 1, 64, 4)], m.symbols
x, aux = m.inputs
assert x.shape == (-1, 64) and x.nbytes == 64 * 64 * 4 and not x.is_static
assert x.dims == (DimInfo("B", 1, 64), DimInfo(None, 64, 64))
assert aux.dims[1] == DimInfo("2*B", 2, 128) and m.outputs[0].shape == (-1, 64)
assert m.output_shapes([(3, 64), (3, 6)]) == [(3, 64)]
def expect_error(fn, needle):
    try:
        fn()
    except AotpackError as e:
        assert e.code == StatusCode.INVALID_ARGUMENT and needle in e.message, str(e)
        return
    raise AssertionError("no error: " + needle)
expect_error(lambda: m.output_shapes([(65, 64), (65, 130)]), "outside the range 1..64 of symbol B")
def buf(nfloats, vals=None):
    raw = ctypes.create_string_buffer(nfloats * 4 + 256)
    addr = (ctypes.addressof(raw) + 255) // 256 * 256
    if vals:
        ctypes.memmove(addr, array.array("f", vals).tobytes(), len(vals) * 4)
    return raw, addr
driver = ctypes.CDLL(os.environ["AOTPACK_LIBCUDA"])
def log():
    out = (ctypes.c_int * 30)()
    n = driver.fake_cuda_launch_log(out, 30)
    return list(out[:n])
def captures():
    stats = (ctypes.c_int * 6)()
    driver.fake_cuda_stats(stats)
    return stats[2]
xs = [float(i % 11) - 5.0 for i in range(64 * 64)]
w = [0.25 * i - 3.0 for i in range(64)]
xr, xa = buf(64 * 64, xs)
ar, aa = buf(64 * 128)
outs = {{B: buf(64 * 64) for B in (3, 20)}}  # one output per shape: its pointer stays the same
for max_plans, want_captures in ((0, 2), (1, 4)):
    s = Session(m, max_cached_plans=max_plans)
    before = captures()
    for B in (3, 20, 3, 20):
        yr, ya = outs[B]
        ctypes.memset(ya, 0, 64 * 64 * 4)
        log()
        s.run_pointers([xa, aa], [ya], input_shapes=[(B, 64), (B, 2 * B)])
        assert log() == ([5, B, 64 * B] if B <= 8 else [6, (B + 7) // 8, 64 * B]), B
        y = array.array("f", ctypes.string_at(ya, 64 * 64 * 4))
        n = 64 * B
        assert all(y[i] == xs[i] + 1.5 * w[i % 64] for i in range(n)) and y[n] == 0.0
    assert captures() - before == want_captures, (max_plans, captures() - before)
expect_error(lambda: s.run_pointers([xa, aa], [ya], input_shapes=[(3, 64), (2, 6)]),
             "input 'aux' dim 0 is 2 but must equal B = 3 (as input 'x' dim 0 says)")
expect_error(lambda: s.run_pointers([xa, aa], [ya]), "symbols B")
assert log() == []
s.run_pointers([xa, aa], [ya], input_shapes=[(2, 64), (2, 4)])  # still usable
assert len(log()) == 3
print("ok")
""", **_fake_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_error_str_has_code_name():
    from aotpack.runtime import AotpackError, StatusCode

    e = AotpackError(3, "bad")
    assert e.code is StatusCode.CORRUPT_BUNDLE and str(e) == "CORRUPT_BUNDLE: bad"


# ------------------------------------------------------------------------------ GPU tests

_KERNEL_SRC = '''
import triton
import triton.language as tl


@triton.jit
def add_scale(x_ptr, w_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    w = tl.load(w_ptr + offs % 64, mask=mask)
    tl.store(y_ptr + offs, x + alpha * w, mask=mask)
'''


def _compile_add_scale(folder: Path):
    """add_scale compiled for this GPU: (cubin, metadata, (major, minor))."""
    import importlib.util

    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = folder / "aotpack_test_kernel.py"
    src.write_text(_KERNEL_SRC)
    spec = importlib.util.spec_from_file_location("aotpack_test_kernel", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    major, minor = torch.cuda.get_device_capability()
    sig = {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "alpha": "fp32",
           "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(fn=mod.add_scale, signature=sig,
                                        constexprs={"BLOCK": 128}),
                              target=GPUTarget("cuda", major * 10 + minor, 32),
                              options={"num_warps": 4})
    md = compiled.metadata
    assert int(getattr(md, "global_scratch_size", 0)) == 0
    return bytes(compiled.asm["cubin"]), md, (major, minor)


def _triton_bundle(folder: Path) -> Path:
    """Bundles add_scale for this GPU (Triton's hidden scratch pointers are null: the kernel
    needs no scratch)."""
    cubin, md, cc = _compile_add_scale(folder)
    m = manifest(cubin, entry=md.name, cc=cc, tensormap=False,
                 block=32 * md.num_warps, grid=2, smem=int(md.shared))
    return write_bundle(folder, m, cubin=cubin)


def _triton_dynamic_bundle(folder: Path) -> Path:
    """manifest_v2 with add_scale in both step groups: 128 elements per program, so the grid
    is ceil(64*B / 128) in both."""
    cubin, md, cc = _compile_add_scale(folder)
    m = manifest_v2(md.name, md.name, cubin=cubin, cc=cc, tensormap=False)
    for k in m["kernels"]:
        k.update(block=[32 * md.num_warps, 1, 1], smem=int(md.shared))
    for st in m["steps"]:  # + Triton's two hidden scratch pointers (null: none needed)
        st.update(grid=["(64*B + 127)/128", 1, 1],
                  args=st["args"] + [{"kind": "null"}, {"kind": "null"}])
    return write_bundle(folder, m, cubin=cubin)


@pytest.mark.gpu
@pytest.mark.parametrize("use_graph", [True, False])
def test_gpu_run_triton_kernel(tmp_path, use_graph):
    import torch

    from aotpack.runtime import Model, Session

    model = Model(_triton_bundle(tmp_path))
    session = Session(model, use_cuda_graph=use_graph)
    w = torch.tensor(struct.unpack("<64f", WEIGHT), device="cuda")
    for seed in range(3):  # new pointer sets each time, then a replay
        x = torch.randn(4, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        (y,) = session.run([x])
        torch.testing.assert_close(y, x + 1.5 * w)
        out = torch.empty_like(x)
        session.run([x], [out])
        session.run([x], [out])  # same pointers: graph replay
        torch.testing.assert_close(out, x + 1.5 * w)


@pytest.mark.gpu
def test_gpu_run_on_side_stream_and_checks(tmp_path):
    import torch

    from aotpack.runtime import AotpackError, Model, Session

    model = Model(_triton_bundle(tmp_path))
    session = Session(model)
    x = torch.randn(4, 64, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (y,) = session.run([x])
    s.synchronize()
    w = torch.tensor(struct.unpack("<64f", WEIGHT), device="cuda")
    torch.testing.assert_close(y, x + 1.5 * w)
    for bad in (x.half(), x.t(), x.cpu(), x[:2]):
        with pytest.raises(AotpackError):
            session.run([bad])
    ws = torch.empty(model.arena_bytes, dtype=torch.uint8, device="cuda")
    (y2,) = Session(model, workspace=ws).run([x])
    torch.testing.assert_close(y2, y)


@pytest.mark.gpu
def test_gpu_wrong_compute_capability(tmp_path):
    from aotpack.runtime import AotpackError, Model, StatusCode

    path = write_bundle(tmp_path, manifest(cc=(1, 0)))
    with pytest.raises(AotpackError) as e:
        Model(path)
    assert e.value.code == StatusCode.DEVICE_MISMATCH and "rebuild" in e.value.message


@pytest.mark.gpu
@needs_v2
def test_gpu_dynamic_shapes(tmp_path):
    """Session.run on a v2 bundle takes inputs of any shape in range, sizes the outputs, and
    refuses shapes out of range without launching."""
    import torch

    from aotpack.runtime import AotpackError, Model, Session, StatusCode

    model = Model(_triton_dynamic_bundle(tmp_path))
    session = Session(model)
    w = torch.tensor(struct.unpack("<64f", WEIGHT), device="cuda")
    for b in (1, 3, 8, 9, 64, 3):
        x = torch.randn(b, 64, device="cuda")
        (y,) = session.run([x, torch.zeros(b, 2 * b, device="cuda")])
        assert y.shape == (b, 64)
        torch.testing.assert_close(y, x + 1.5 * w)
    assert model.output_shapes([(5, 64), (5, 10)]) == [(5, 64)]
    with pytest.raises(AotpackError) as e:
        session.run([torch.randn(65, 64, device="cuda"), torch.zeros(65, 130, device="cuda")])
    assert e.value.code == StatusCode.INVALID_ARGUMENT and "symbol B" in e.value.message
    out = torch.empty(4, 64, device="cuda")
    with pytest.raises(AotpackError, match="has shape"):
        session.run([torch.randn(3, 64, device="cuda"), torch.zeros(3, 6, device="cuda")], [out])
