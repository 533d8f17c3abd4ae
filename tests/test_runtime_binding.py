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
    """A safetensors file with every tensor `align`-aligned from the file start."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offsets, cursor = [], 0
    for name, dtype, shape, data in tensors:
        cursor = -(-cursor // align) * align
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, cursor + len(data)]}
        offsets.append(cursor)
        cursor += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((-(8 + len(text))) % align)
    body = bytearray(cursor)
    for (_, _, _, data), off in zip(tensors, offsets):
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
    write_safetensors(path, tensors, {"aotpack.manifest": json.dumps(m)})
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


def _fake_driver() -> Path | None:
    """The fake libcuda of the top-level CMake build (`cmake -S . -B build`), if built."""
    p = REPO / "build" / "runtime_cpp" / "tests" / "libfake_cuda.so"
    return p if p.is_file() and (REPO / "build" / "libaotpack.so").is_file() else None


@pytest.mark.skipif(_fake_driver() is None, reason="fake driver not built (CMake tests)")
def test_run_on_fake_driver(tmp_path):
    """Model + Session + run_pointers end to end on the CMake build's fake libcuda (device
    memory is host memory there, the kernel runs on the CPU)."""
    m = manifest()
    m["kernels"][0]["pdl"] = True  # so programmatic_launch shows in the driver's counters
    path = write_bundle(tmp_path, m)
    env = {"AOTPACK_LIBCUDA": str(_fake_driver()),
           "AOTPACK_LIB": str(REPO / "build" / "libaotpack.so")}  # the same build's library
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
print("ok")
""", **env)
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


def _triton_bundle(folder: Path) -> Path:
    """Compiles add_scale for this GPU and bundles it (Triton's hidden scratch pointers are
    null: the kernel needs no scratch)."""
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
    cubin = bytes(compiled.asm["cubin"])
    m = manifest(cubin, entry=md.name, cc=(major, minor), tensormap=False,
                 block=32 * md.num_warps, grid=2, smem=int(md.shared))
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
