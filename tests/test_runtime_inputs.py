"""Session.run's inputs (aotpack/runtime/arrays.py, session.py): torch tensors, DLPack and
__cuda_array_interface__ objects, their checks, and the per-call fast path that skips the
checks of tensors seen before — it must still refuse a tensor changed in place.

Runs on the CMake build's fake libcuda (skipped when not built), where device memory is host
memory: CPU tensors and numpy arrays stand in for CUDA ones once the session's device is set
to cpu (`s._device`); without that, the device checks are exercised as they are on a GPU.
"""
from __future__ import annotations

import pytest
from test_runtime_binding import (_fake_driver, _fake_env, _run_py, manifest_v2, needs_v2,
                                  write_bundle)

needs_fake = pytest.mark.skipif(_fake_driver() is None,
                                reason="fake driver not built (CMake tests)")

# Shared by the subprocesses: a session on the CPU stand-in, y = x + 1.5 * w, error checks.
_PRELUDE = """
import numpy as np, torch
from aotpack.runtime import AotpackError, Model, StatusCode
W = torch.tensor([0.25 * i - 3.0 for i in range(64)])
def expect_error(fn, needle):
    try:
        fn()
    except AotpackError as e:
        assert e.code == StatusCode.INVALID_ARGUMENT and needle in e.message, str(e)
        return
    raise AssertionError("no error: " + needle)
class Cai:
    '''An object with only __cuda_array_interface__, as a CuPy or Numba array has.'''
    def __init__(self, t, **change):
        self.t = t
        self.__cuda_array_interface__ = dict(shape=tuple(t.shape), typestr="<f4", version=3,
                                             data=(t.data_ptr(), False), strides=None)
        self.__cuda_array_interface__.update(change)
"""


@needs_fake
def test_run_takes_torch_dlpack_and_cuda_array_interface(tmp_path):
    """Every kind of tensor runs and gives y = x + 1.5 * w, through the fast path too."""
    path = write_bundle(tmp_path)
    r = _run_py(_PRELUDE + f"""
import aotpack
with aotpack.load({str(path)!r}, verify="full") as m, m.session() as s:
    s._device = torch.device("cpu")
    x = torch.randn(4, 64)
    for _ in range(2):  # the second run takes the fast path
        (y,) = s.run([x], stream=0)  # outputs allocated
        assert torch.equal(y, x + 1.5 * W)
    y = torch.empty(4, 64)
    for _ in range(2):
        assert s.run([x], [y], stream=0)[0] is y and torch.equal(y, x + 1.5 * W)
    xn, yn = x.numpy().copy(), np.zeros((4, 64), np.float32)  # DLPack objects
    assert s.run([xn], [yn], stream=0)[0] is yn
    assert np.array_equal(yn, (x + 1.5 * W).numpy())
    y.zero_()
    yc = Cai(y)
    assert s.run([Cai(x)], [yc], stream=0)[0] is yc and torch.equal(y, x + 1.5 * W)
    assert len(s._plans) == 3, len(s._plans)  # x, xn, Cai(x): one plan each
print("ok")
""", **_fake_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@needs_fake
def test_fast_path_catches_tensors_changed_in_place(tmp_path):
    """After a run has checked (and remembered) x and y, the same objects changed in place —
    shape, dtype, layout — or moved to another device are refused; the originals still run."""
    path = write_bundle(tmp_path)
    r = _run_py(_PRELUDE + f"""
m = Model({str(path)!r})
s = m.session()
s._device = torch.device("cpu")
x, y = torch.randn(4, 64), torch.empty(4, 64)
s.run([x], [y], stream=0)
plan = next(iter(s._plans.values()))
s.run([x], [y], stream=0)
assert len(s._plans) == 1 and next(iter(s._plans.values())) is plan  # reused, not rebuilt
x.resize_(2, 128)  # same pointer, same bytes, another shape
expect_error(lambda: s.run([x], [y], stream=0), "input 'x' has shape (2, 128), expected (4, 64)")
x.resize_(4, 64)
y.resize_(256)
expect_error(lambda: s.run([x], [y], stream=0), "output 'y' has shape (256,), expected (4, 64)")
y.resize_(4, 64)
keep = x.data
x.data = keep.view(torch.int32)  # same pointer and shape, another dtype
expect_error(lambda: s.run([x], [y], stream=0), "input 'x' has dtype torch.int32")
x.data = keep
# torch refuses `.data =` across devices: the same shape and dtype elsewhere
expect_error(lambda: s.run([x.to("meta")], [y], stream=0), "input 'x' is on meta")
x.set_(keep.untyped_storage(), 0, (4, 64), (1, 4))  # same pointer and shape, transposed
expect_error(lambda: s.run([x], [y], stream=0), "input 'x' must be contiguous")
x.set_(keep.untyped_storage(), 0, (4, 64), (64, 1))
s.run([x], [y], stream=0)
assert torch.equal(y, x + 1.5 * W)
c = Cai(x)
s.run([c], [y], stream=0)
c.__cuda_array_interface__["shape"] = (2, 128)  # a CUDA array interface is read every run
expect_error(lambda: s.run([c], [y], stream=0), "input 'x' has shape (2, 128)")
print("ok")
""", **_fake_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@needs_fake
def test_run_refuses_bad_tensors_with_their_name(tmp_path):
    path = write_bundle(tmp_path)
    r = _run_py(_PRELUDE + f"""
m = Model({str(path)!r})
s = m.session()  # the model's device: cuda:0 (nothing here is on it)
x, y = torch.randn(4, 64), torch.empty(4, 64)
expect_error(lambda: s.run([x], [y], stream=0), "input 'x' is on cpu, the model runs on cuda:0")
expect_error(lambda: s.run([x.numpy()], [y], stream=0),
             "input 'x' is on cpu:0 (its __dlpack_device__), the model runs on cuda:0")
s._device = torch.device("cpu")
expect_error(lambda: s.run([x, x], [y], stream=0), "expected 1 inputs, got 2")
expect_error(lambda: s.run([x], [], stream=0), "expected 1 outputs, got 0")
expect_error(lambda: s.run([[0.0] * 256], [y], stream=0),
             "input 'x' must be a torch tensor, a DLPack object or an object with "
             "__cuda_array_interface__, got list")
expect_error(lambda: s.run([x.double().numpy()], [y], stream=0), "has dtype torch.float64")
expect_error(lambda: s.run([Cai(x, typestr="<f8")], [y], stream=0),
             "input 'x' has typestr '<f8', expected <f4 (f32)")
expect_error(lambda: s.run([Cai(x, typestr=">f4")], [y], stream=0), "typestr '>f4'")
expect_error(lambda: s.run([Cai(x, strides=(4, 16))], [y], stream=0), "must be contiguous")
expect_error(lambda: s.run([Cai(x, mask=object())], [y], stream=0), "has a mask")
expect_error(lambda: s.run([x], [Cai(y, data=(y.data_ptr(), True))], stream=0),
             "output 'y' is read-only")
expect_error(lambda: s.run([x], [y], stream="s"), "stream must be None, an int")
s.run([Cai(x, strides=(256, 4))], [y], stream=0)  # packed strides spelled out are fine
print("ok")
""", **_fake_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@needs_v2
@needs_fake
def test_dynamic_run_through_the_fast_path(tmp_path):
    """A model whose dims vary: each shape checked by the runtime once, then remembered;
    a tensor resized in place out of range is refused."""
    path = write_bundle(tmp_path, manifest_v2())
    r = _run_py(_PRELUDE + f"""
m = Model({str(path)!r})
s = m.session()
s._device = torch.device("cpu")
x, aux = torch.randn(64, 64), torch.zeros(64, 128)
for B in (3, 20, 3, 20):
    xb, ab = x[:B], aux[:B, :2 * B].contiguous()
    (y,) = s.run([xb, ab], stream=0)
    assert y.shape == (B, 64) and torch.equal(y, xb + 1.5 * W), B
assert sorted(s._shaped) == [((3, 64), (3, 6)), ((20, 64), (20, 40))]
xb, ab = x[:3].clone(), aux[:3, :6].contiguous()
y = torch.empty(3, 64)
s.run([xb, ab], [y], stream=0)
ab.resize_(3, 8)
expect_error(lambda: s.run([xb, ab], [y], stream=0), "input 'aux' dim 1 is 8")
ab.resize_(3, 6)
expect_error(lambda: s.run([xb, ab], [torch.empty(4, 64)], stream=0),
             "output 'y' has shape (4, 64), expected (3, 64)")
print("ok")
""", **_fake_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_cuda_array_contiguity():
    from aotpack.runtime.arrays import CudaArray

    def contiguous(shape, strides, typestr="<f4"):
        cai = {"shape": shape, "strides": strides, "typestr": typestr, "data": (256, False)}
        return CudaArray(None, cai).is_contiguous()

    assert contiguous((4, 64), None) and contiguous((4, 64), (256, 4))
    assert contiguous((4, 1, 64), (256, 999, 4))  # a dim of one element: any stride
    assert contiguous((0, 64), (4, 8))  # no elements
    assert not contiguous((4, 64), (4, 16))  # transposed
    assert not contiguous((4, 64), (512, 4))  # rows with gaps
    assert contiguous((3,), (8,), "<f8") and not contiguous((3,), (4,), "<f8")


def test_stream_handle_forms():
    import types

    import torch

    from aotpack.runtime.arrays import stream_handle

    assert stream_handle(torch, 7, 0) == 7
    assert stream_handle(torch, types.SimpleNamespace(cuda_stream=9), 0) == 9
    assert stream_handle(torch, types.SimpleNamespace(ptr=11), 0) == 11  # cupy.cuda.Stream


class _DLPackOnly:
    """A torch tensor seen only through the DLPack protocol (as a JAX array is)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.mark.gpu
def test_gpu_dlpack_and_cuda_array_interface(tmp_path):
    """On the GPU: DLPack and __cuda_array_interface__ objects in and out, a producer's
    stream (interface version 3) waited for, another GPU's tensor refused."""
    import struct

    import torch
    from test_runtime_binding import WEIGHT, _triton_bundle

    from aotpack.runtime import AotpackError, Model

    w = torch.tensor(struct.unpack("<64f", WEIGHT), device="cuda")
    with Model(_triton_bundle(tmp_path)) as model, model.session() as session:
        x, y = torch.randn(4, 64, device="cuda"), torch.empty(4, 64, device="cuda")
        (out,) = session.run([_DLPackOnly(x)])
        torch.testing.assert_close(out, x + 1.5 * w)
        producer = torch.cuda.Stream()
        with torch.cuda.stream(producer):  # written on a side stream, read on the current
            torch.cuda._sleep(10_000_000)
            x2 = x * 2
        cai = dict(x2.__cuda_array_interface__, stream=producer.cuda_stream)
        holder = type("Cai", (), {"__cuda_array_interface__": cai})()
        y_cai = type("Cai", (), {"__cuda_array_interface__": y.__cuda_array_interface__})()
        session.run([holder], [y_cai])
        torch.testing.assert_close(y, x * 2 + 1.5 * w)
        if torch.cuda.device_count() > 1:
            with pytest.raises(AotpackError, match="cuda:1"):
                session.run([torch.randn(4, 64, device="cuda:1")])


def test_the_legacy_default_stream_is_torchs_default_stream():
    """0 and 1 both name the legacy default stream; torch.cuda.ExternalStream refuses them
    ('invalid StreamId', seen on the H200), so waits go through torch's default stream."""
    from types import SimpleNamespace

    from aotpack.runtime.arrays import _torch_stream

    cuda = SimpleNamespace(default_stream=lambda device: ("default", device),
                           ExternalStream=lambda handle, device: ("external", handle, device))
    fake = SimpleNamespace(cuda=cuda)
    # the model's device, not torch's current one (a model on cuda:1)
    assert _torch_stream(fake, 0, "cuda:1") == _torch_stream(fake, 1, "cuda:1") == \
        ("default", "cuda:1")
    assert _torch_stream(fake, 0x7f00, "cuda:1") == ("external", 0x7f00, "cuda:1")
