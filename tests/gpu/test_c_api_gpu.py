"""Bad inputs at the C API on a real GPU, through the Python binding (aotpack.runtime) and
through the launcher (aotpack-run, $AOTPACK_RUN): wrong dtype, rank, device, out-of-range and
inconsistent dims, null and misaligned pointers, host memory, a session used after its model
is released, a closed model, a workspace too small or misaligned, a corrupt bundle, a device
that does not exist. Each must be a clear status (INVALID_ARGUMENT, ... naming what is wrong),
never a crash, and the session must stay usable after a refused run.

    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_c_api_gpu.py
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

import gpu_harness as h

pytestmark = pytest.mark.gpu

SPEC_FILE = h.GPU_TESTS / "template_cases.py"
# gemm_residual: x [R, 256] and extra [R, 200] -> [R, 200], R in 1..8192 (two tied inputs);
# gemm_swiglu: one input, an intermediate in the arena; static_gemm_chain_77: static shapes
BUNDLES = {"residual": "make_gemm_residual", "swiglu": "make_gemm_swiglu",
           "static": "make_static_gemm_chain_77"}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("c_api")
    built = h.build_all({k: (f"{SPEC_FILE}:{fn}", {}) for k, fn in BUNDLES.items()}, root)
    return {k: b.check() for k, b in built.items()}


def _inputs(model, rows: int | None = None, seed: int = 0):
    """CUDA inputs of `model` (bf16 normal), its dims that vary set to `rows`."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [tuple(rows if d < 0 else d for d in t.shape) for t in model.inputs]
    return [torch.randn(s, generator=g, device="cuda").to(torch.bfloat16) for s in shapes]


def _expect(code: str, needle: str, fn):
    from aotpack.runtime import AotpackError, StatusCode

    with pytest.raises(AotpackError) as e:
        fn()
    assert e.value.code == StatusCode[code], str(e.value)
    assert needle in e.value.message, str(e.value)
    return e.value


@pytest.fixture
def residual(bundles):
    import aotpack

    with aotpack.load(bundles["residual"]) as model, model.session() as session:
        yield model, session


def _good_run(model, session, rows=77):
    """A run that must work (after the refused ones): its output against torch."""
    import torch

    module, _ = h.load_factory(f"{SPEC_FILE}:{BUNDLES['residual']}")
    x, extra = _inputs(model, rows, seed=rows)
    (y,) = session.run([x, extra])
    with torch.no_grad():
        want = module(x, extra)
    torch.cuda.synchronize()
    assert h.compare_outputs(["y"], [y], [want], module, [x, extra], f"R={rows}") == []


# ---------------------------------------------------------------- tensors at Session.run
def test_wrong_dtype_rank_device_layout(residual):
    import torch

    model, session = residual
    x, extra = _inputs(model, 77)
    _expect("INVALID_ARGUMENT", "dtype", lambda: session.run([x.float(), extra]))
    _expect("INVALID_ARGUMENT", "rank", lambda: session.run([x.reshape(-1), extra]))
    _expect("INVALID_ARGUMENT", "is on cpu", lambda: session.run([x.cpu(), extra]))
    _expect("INVALID_ARGUMENT", "contiguous", lambda: session.run([x.t().contiguous().t(),
                                                                   extra]))
    _expect("INVALID_ARGUMENT", "expected 2 inputs", lambda: session.run([x]))
    _expect("INVALID_ARGUMENT", "must be a torch tensor", lambda: session.run([x, 3]))
    wrong_out = torch.empty(76, 200, dtype=torch.bfloat16, device="cuda")
    _expect("INVALID_ARGUMENT", "has shape", lambda: session.run([x, extra], [wrong_out]))
    _good_run(model, session)


@pytest.mark.parametrize("rows_x, rows_extra, cols, needle", [
    (0, 0, 256, "outside the range 1..8192 of symbol R"),
    (8193, 8193, 256, "outside the range 1..8192 of symbol R"),
    (5, 6, 256, "must equal R = 5"),
    (5, 5, 255, "expected 256"),
])
def test_dims_out_of_range_or_inconsistent(residual, rows_x, rows_extra, cols, needle):
    """The C runtime binds R from the inputs and checks every dim before any launch."""
    import torch

    model, session = residual
    x = torch.zeros(rows_x, cols, dtype=torch.bfloat16, device="cuda")
    extra = torch.zeros(rows_extra, 200, dtype=torch.bfloat16, device="cuda")
    _expect("INVALID_ARGUMENT", needle, lambda: session.run([x, extra]))
    _expect("INVALID_ARGUMENT", needle,
            lambda: model.output_shapes([tuple(x.shape), tuple(extra.shape)]))
    _good_run(model, session)


def test_raw_pointers_null_misaligned_and_shapes(residual):
    """run_pointers goes straight to aotpack_session_run_shaped: null pointers, a pointer off
    the 16-byte alignment TMA needs, a missing shape list, a wrong rank."""
    import torch

    model, session = residual
    x, extra = _inputs(model, 77)
    y = torch.empty(77, 200, dtype=torch.bfloat16, device="cuda")
    shapes = [(77, 256), (77, 200)]
    run = session.run_pointers
    _expect("INVALID_ARGUMENT", "null pointer",
            lambda: run([0, extra.data_ptr()], [y.data_ptr()], input_shapes=shapes))
    _expect("INVALID_ARGUMENT", "null pointer",
            lambda: run([x.data_ptr(), extra.data_ptr()], [0], input_shapes=shapes))
    _expect("INVALID_ARGUMENT", "16-byte aligned",
            lambda: run([x.data_ptr() + 2, extra.data_ptr()], [y.data_ptr()],
                        input_shapes=shapes))
    _expect("INVALID_ARGUMENT", "input_shapes",
            lambda: run([x.data_ptr(), extra.data_ptr()], [y.data_ptr()]))
    _expect("INVALID_ARGUMENT", "rank",
            lambda: run([x.data_ptr(), extra.data_ptr()], [y.data_ptr()],
                        input_shapes=[(77,), (77, 200)]))
    _expect("INVALID_ARGUMENT", "rank",
            lambda: run([x.data_ptr(), extra.data_ptr()], [y.data_ptr()],
                        input_shapes=[(77, 256, 1, 1, 1, 1, 1, 1, 1), (77, 200)]))
    _expect("INVALID_ARGUMENT", "expected 2 input and 1 output pointers",
            lambda: run([x.data_ptr()], [y.data_ptr()], input_shapes=shapes))
    _good_run(model, session)


def test_static_model_refuses_other_shapes(bundles):
    import aotpack
    import torch

    with aotpack.load(bundles["static"]) as model, model.session() as session:
        assert not model.is_dynamic
        x, extra = _inputs(model)
        session.run([x, extra])
        bad = torch.zeros(78, 256, dtype=torch.bfloat16, device="cuda")
        _expect("INVALID_ARGUMENT", "has shape", lambda: session.run([bad, extra]))
        y = torch.empty(77, 200, dtype=torch.bfloat16, device="cuda")
        _expect("INVALID_ARGUMENT", "",
                lambda: session.run_pointers([bad.data_ptr(), extra.data_ptr()],
                                             [y.data_ptr()],
                                             input_shapes=[(78, 256), (77, 200)]))
        _expect("INVALID_ARGUMENT", "null pointer",
                lambda: session.run_pointers([0, extra.data_ptr()], [y.data_ptr()]))


_HOST_MEMORY = r"""
import ctypes, sys
import torch
import aotpack
from aotpack.runtime import AotpackError
model = aotpack.load(sys.argv[1])
session = model.session()
x = torch.randn(77, 256).bfloat16()
extra = torch.randn(77, 200, device="cuda").bfloat16()
(want,) = session.run([x.cuda(), extra])
y = torch.full((77, 200), float("nan"), device="cuda", dtype=torch.bfloat16)
host = ctypes.create_string_buffer(x.numel() * 2 + 256)
addr = (ctypes.addressof(host) + 255) // 256 * 256  # aligned, but not device memory
ctypes.memmove(addr, x.data_ptr(), x.numel() * 2)
try:
    session.run_pointers([addr, extra.data_ptr()], [y.data_ptr()],
                         input_shapes=[(77, 256), (77, 200)])
    torch.cuda.synchronize()
    print("RESULT accepted", "same" if torch.equal(y, want) else "DIFFERENT")
except AotpackError as e:
    print("RESULT", e.code.name, "|", e.message)
except Exception as e:
    print("RESULT other", type(e).__name__, "|", str(e)[:300])
"""


def test_host_memory_is_refused_or_served(bundles):
    """A host address where device memory belongs: refused with a clear status, or (where the
    driver lets the GPU read pageable host memory, HMM) served correctly; never a fault. In a
    child process: a kernel that faults poisons the CUDA context for everything after it."""
    proc = subprocess.run([sys.executable, "-c", _HOST_MEMORY, str(bundles["residual"])],
                          capture_output=True, text=True, timeout=120, cwd=h.REPO,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [str(h.REPO), os.environ.get("PYTHONPATH", "")])))
    assert proc.returncode == 0, f"the child died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert result and (result[-1].startswith("RESULT INVALID_ARGUMENT") or
                       result[-1] == "RESULT accepted same"), (
        f"{result or proc.stdout[-2000:]}: the runtime launched on memory the GPU cannot read; "
        f"it should refuse it first (cuPointerGetAttribute when a pointer set is first seen)")


# ------------------------------------------------------------- model, session, workspace
def test_session_outlives_its_model(bundles):
    """aotpack.h: sessions keep their model alive. Closing the Python Model releases the
    caller's reference only; the session still runs, correctly; the closed Model refuses
    new sessions and queries with a status."""
    import aotpack
    import torch

    model = aotpack.load(bundles["residual"])
    session = model.session()
    x, extra = _inputs(model, 129)
    (before,) = session.run([x, extra])
    model.close()
    (after,) = session.run([x, extra])  # the shape seen before: its output shape is cached
    torch.cuda.synchronize()
    assert torch.equal(before, after)
    _expect("INVALID_ARGUMENT", "closed", lambda: model.session())
    _expect("INVALID_ARGUMENT", "closed", lambda: model.output_shapes([(5, 256), (5, 200)]))
    _expect("INVALID_ARGUMENT", "closed", lambda: model.kernel_names())
    session.close()
    _expect("INVALID_ARGUMENT", "session", lambda: session.run([x, extra]))


def test_workspace_too_small_or_misaligned(bundles):
    import aotpack
    import torch

    from aotpack.runtime import Session

    with aotpack.load(bundles["swiglu"]) as model:
        need = model.arena_bytes
        assert need > 0, "the SwiGLU case was chosen for its intermediate in the arena"
        ws = torch.empty(need + 512, dtype=torch.uint8, device="cuda")
        _expect("INVALID_ARGUMENT", "the model needs arena_bytes",
                lambda: Session(model, workspace=(ws.data_ptr(), need - 1)))
        _expect("INVALID_ARGUMENT", "256-byte aligned",
                lambda: Session(model, workspace=(ws.data_ptr() + 16, need)))
        _expect("INVALID_ARGUMENT", "max_cached_plans", lambda: Session(model, max_cached_plans=-1))
        x = torch.randn(1000, 128, device="cuda").bfloat16()
        with Session(model, workspace=(ws.data_ptr(), need)) as session:  # exactly enough
            (y,) = session.run([x])
        with model.session() as own:
            (want,) = own.run([x])
        torch.cuda.synchronize()
        assert torch.equal(y, want)


def test_load_errors(bundles, tmp_path):
    import aotpack

    _expect("IO", "nope.aotpack", lambda: aotpack.load(tmp_path / "nope.aotpack"))
    _expect("INVALID_ARGUMENT", "does not exist", lambda: aotpack.load(bundles["static"],
                                                                       device=97))
    bad = _corrupt_cubin(bundles["static"], tmp_path)
    _expect("CHECKSUM_MISMATCH", "kernel", lambda: aotpack.load(bad))
    cut = tmp_path / "cut.aotpack"
    cut.write_bytes(bundles["static"].read_bytes()[:-64])
    _expect("CORRUPT_BUNDLE", "", lambda: aotpack.load(cut))


def _retarget(bundle, tmp_path, **target):
    """A copy of `bundle` whose manifest target says `target`, its checksum recomputed: a bundle
    built for another machine (not a corrupt one)."""
    import hashlib

    data = bundle.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header["__metadata__"]
    m = json.loads(meta["aotpack.manifest"])
    m["target"].update(target)
    meta["aotpack.manifest"] = json.dumps(m, sort_keys=True, separators=(",", ":"))
    meta["aotpack.manifest_sha256"] = hashlib.sha256(meta["aotpack.manifest"].encode()).hexdigest()
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 256)
    out = tmp_path / f"retarget_{len(list(tmp_path.iterdir()))}.aotpack"
    out.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])
    return out


def test_load_says_what_the_bundle_needs_and_what_the_machine_has(bundles, tmp_path):
    """Issue 19: arch, compute capability and driver checked at load, the message naming both
    sides (this H200: compute capability 9.0, a CUDA 13 driver)."""
    import aotpack

    e = _expect("DEVICE_MISMATCH", "has compute capability 9.0",
                lambda: aotpack.load(_retarget(bundles["static"], tmp_path, arch="sm_80a",
                                               cc=[8, 0])))
    assert "needs a GPU of compute capability 8.0 exactly (sm_80a)" in e.message, e.message
    e = _expect("DRIVER_TOO_OLD", "a driver for CUDA 99.0 (99000) or newer",
                lambda: aotpack.load(_retarget(bundles["static"], tmp_path, min_driver=99000)))
    assert "this machine's NVIDIA driver supports CUDA 1" in e.message, e.message
    _expect("CORRUPT_BUNDLE", "contradicts itself",
            lambda: aotpack.load(_retarget(bundles["static"], tmp_path, arch="sm_100a")))
    with aotpack.load(_retarget(bundles["static"], tmp_path, min_driver=12000)) as model:
        assert model.num_kernels > 0  # the control: a retargeted copy loads when it fits


_PINNED = r"""
import sys
import torch
import aotpack
from aotpack.runtime import AotpackError
model = aotpack.load(sys.argv[1])
session = model.session()
x = torch.randn(77, 256).bfloat16().pin_memory()
extra = torch.randn(77, 200, device="cuda").bfloat16()
y = torch.empty(77, 200, device="cuda", dtype=torch.bfloat16)
try:
    session.run_pointers([x.data_ptr(), extra.data_ptr()], [y.data_ptr()],
                         input_shapes=[(77, 256), (77, 200)])
    torch.cuda.synchronize()
    print("RESULT accepted")
except AotpackError as e:
    print("RESULT", e.code.name, "|", e.message)
(want,) = session.run([x.cuda(), extra])  # the session is still usable
torch.cuda.synchronize()
print("RESULT2 ok")
"""


def test_pinned_host_memory_refused(bundles):
    """Page-locked host memory is not device memory either: refused by name, in a child (a
    faulting kernel would poison the context)."""
    proc = subprocess.run([sys.executable, "-c", _PINNED, str(bundles["residual"])],
                          capture_output=True, text=True, timeout=120, cwd=h.REPO,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [str(h.REPO), os.environ.get("PYTHONPATH", "")])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert lines[0].startswith("RESULT INVALID_ARGUMENT | input 0 ('x')"), lines
    assert "is host memory (page-locked or mapped)" in lines[0], lines
    assert lines[-1] == "RESULT2 ok", lines


def test_execute_takes_counts_and_zeroed_options_are_defaults(bundles):
    """aotpack_session_execute refuses a short pointer array instead of reading past it, and a
    session made from zero-initialized options (only struct_size set) runs with the defaults
    (CUDA graphs on) and gives the same output."""
    import ctypes

    import aotpack
    import torch
    from aotpack.runtime import AotpackError, StatusCode
    from aotpack.runtime._lib import SessionOptionsC, ShapeC
    from aotpack.runtime.errors import raise_if_error

    with aotpack.load(bundles["residual"]) as model, model.session() as session:
        lib = model._lib
        x, extra = _inputs(model, 77)
        y = torch.empty(77, 200, dtype=torch.bfloat16, device="cuda")
        ins = (ctypes.c_uint64 * 2)(x.data_ptr(), extra.data_ptr())
        outs = (ctypes.c_uint64 * 1)(y.data_ptr())
        shapes = (ShapeC * 2)()
        for s, t in zip(shapes, (x, extra)):
            s.rank = 2
            s.dims[0], s.dims[1] = t.shape
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
        with pytest.raises(AotpackError) as e:
            raise_if_error(lib, lib.aotpack_session_execute(session._handle, ins, 1, shapes,
                                                            outs, 1, None, stream))
        assert e.value.code == StatusCode.INVALID_ARGUMENT and "num_inputs = 1" in e.value.message
        o = SessionOptionsC()
        o.struct_size = ctypes.sizeof(SessionOptionsC)
        zeroed = ctypes.c_void_p()
        raise_if_error(lib, lib.aotpack_session_create(model._live(), ctypes.byref(o),
                                                       ctypes.byref(zeroed)))
        try:
            out_shape = ShapeC()
            raise_if_error(lib, lib.aotpack_session_execute(zeroed, ins, 2, shapes, outs, 1,
                                                            ctypes.byref(out_shape), stream))
            assert out_shape.rank == 2 and list(out_shape.dims[:2]) == [77, 200]
            (want,) = session.run([x, extra])
            torch.cuda.synchronize()
            assert torch.equal(y, want)
        finally:
            lib.aotpack_session_free(zeroed)


def _corrupt_cubin(bundle, tmp_path):
    """A copy of `bundle` with one byte flipped inside its first cubin."""
    data = bytearray(bundle.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k.startswith("__aotpack__.cubin."))
    start, end = header[name]["data_offsets"]
    data[8 + n + (start + end) // 2] ^= 0xFF
    out = tmp_path / "corrupt.aotpack"
    out.write_bytes(bytes(data))
    return out


# ----------------------------------------------------------------------------- aotpack-run
def _launcher(aotpack_run, *args):
    proc = subprocess.run([str(aotpack_run), *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("args, code, needle", [
    (["--shape", "x=0x256,extra=0x200"], "INVALID_ARGUMENT", "symbol R"),
    (["--shape", "x=8193x256,extra=8193x200"], "INVALID_ARGUMENT", "symbol R"),
    (["--shape", "x=5x256,extra=6x200"], "INVALID_ARGUMENT", "must equal R = 5"),
    (["--shape", "x=5x255,extra=5x200"], "INVALID_ARGUMENT", "expected 256"),
    (["--shape", "x=77,extra=77x200"], "INVALID_ARGUMENT", "rank"),
    (["--shape", "y=5x256"], "INVALID_ARGUMENT", "no input 'y'"),
    (["--device", "97"], "INVALID_ARGUMENT", "does not exist"),
])
def test_launcher_refuses_bad_shapes(bundles, aotpack_run, args, code, needle):
    rc, out = _launcher(aotpack_run, bundles["residual"], *args)
    assert rc == 1 and code in out and needle in out, (rc, out[-2000:])


def test_launcher_runs_good_shapes_and_refuses_bad_files(bundles, aotpack_run, tmp_path):
    import torch
    from safetensors.torch import save_file

    rc, out = _launcher(aotpack_run, bundles["residual"], "--shape",
                        "x=77x256,extra=77x200", "--bench", "3")
    assert rc == 0, out[-2000:]  # the control: the refusals below are about what they change
    rc, out = _launcher(aotpack_run, tmp_path / "nope.aotpack")
    assert rc == 1 and "IO" in out, out[-2000:]
    rc, out = _launcher(aotpack_run, _corrupt_cubin(bundles["static"], tmp_path))
    assert rc == 1 and "CHECKSUM_MISMATCH" in out, out[-2000:]
    wrong_dtype = tmp_path / "f32.safetensors"
    save_file({"x": torch.zeros(77, 256), "extra": torch.zeros(77, 200)}, str(wrong_dtype))
    rc, out = _launcher(aotpack_run, bundles["residual"], "--inputs", wrong_dtype)
    assert rc == 1 and "INVALID_ARGUMENT" in out and "'x'" in out, out[-2000:]
    missing = tmp_path / "missing.safetensors"
    save_file({"x": torch.zeros(77, 256, dtype=torch.bfloat16)}, str(missing))
    rc, out = _launcher(aotpack_run, bundles["residual"], "--inputs", missing)
    assert rc == 1 and "'extra' is not in" in out, out[-2000:]
    rc, out = _launcher(aotpack_run, bundles["residual"], "--bench", "0")
    assert rc == 2 and "--bench" in out, out[-2000:]
