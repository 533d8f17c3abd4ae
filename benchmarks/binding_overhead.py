"""Python cost of one Session.run when the same tensors are reused (issue 19: target <= 5 us).

    python benchmarks/binding_overhead.py                  # CPU: the CMake build's fake driver
    python benchmarks/binding_overhead.py --build /tmp/b   # that build folder's fake driver
    python benchmarks/binding_overhead.py --bundle out/llama/model.aotpack   # on the GPU

Without --bundle (no GPU needed): the runtime tests' bundle (one add kernel over 4x64 f32,
tests/test_runtime_binding.py) on the fake libcuda of a CMake build with AOTPACK_BUILD_TESTS,
where device memory is host memory: CPU tensors stand in for CUDA ones (the session's device
is set to cpu, the stream is 0). Each way of calling is timed over --calls runs, best of 5:
`aotpack_session_execute` called directly on prepared arrays (the floor: the C runtime and the
fake driver), Session.run_pointers, and Session.run on torch tensors, on
__cuda_array_interface__ objects and on DLPack objects (numpy arrays). "overhead" is each
minus the floor: what the binding adds.

--bundle: a real bundle on the GPU, static inputs of its shapes (random values), torch CUDA
tensors on the current stream; the same comparison, every loop ending with a synchronize. A
kernel sequence longer than the Python work hides it: the C floor is then the GPU time, and
the difference is what the binding adds beyond it.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def best_us(fn, calls: int, sync=lambda: None) -> float:
    """Best of 5 loops of `calls` calls, microseconds per call."""
    for _ in range(min(calls, 200)):  # warm-up: first runs capture graphs, fill caches
        fn()
    sync()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return min(times)


def fake_build(explicit: str | None) -> Path:
    """The build folder holding libaotpack.so and the fake libcuda (as the tests find it)."""
    if explicit:
        return Path(explicit)
    sys.path.insert(0, str(REPO / "tests"))
    from test_runtime_binding import _fake_build

    found = _fake_build()
    if found is None:
        sys.exit("no CMake build with the fake driver: cmake -S . -B build "
                 "-DAOTPACK_BUILD_TESTS=ON && cmake --build build, or pass --build")
    return found


class CudaArrayLike:
    """An object with only __cuda_array_interface__ (as a CuPy or Numba array has)."""

    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = {"shape": tuple(t.shape), "typestr": "<f4",
                                         "data": (t.data_ptr(), False), "version": 3,
                                         "strides": None, "stream": None}


def fake_driver_rows(build: Path, calls: int) -> dict:
    os.environ["AOTPACK_LIBCUDA"] = str(build / "runtime_cpp" / "tests" / "libfake_cuda.so")
    os.environ["AOTPACK_LIB"] = str(build / "libaotpack.so")
    sys.path.insert(0, str(REPO / "tests"))
    import numpy as np
    import torch
    from test_runtime_binding import write_bundle

    from aotpack.runtime import Model

    model = Model(write_bundle(Path(tempfile.mkdtemp())))
    session = model.session()
    session._device = torch.device("cpu")  # the fake driver's device memory is host memory
    x, y = torch.randn(4, 64), torch.empty(4, 64)
    xn, yn = np.random.rand(4, 64).astype(np.float32), np.empty((4, 64), np.float32)
    xc, yc = CudaArrayLike(x), CudaArrayLike(y)
    return {
        "C execute (floor)": best_us(raw_execute(session, [x], [y]), calls),
        "run_pointers": best_us(lambda: session.run_pointers([x.data_ptr()], [y.data_ptr()]),
                                calls),
        "run(torch)": best_us(lambda: session.run([x], [y], stream=0), calls),
        "run(__cuda_array_interface__)": best_us(lambda: session.run([xc], [yc], stream=0),
                                                 calls),
        "run(DLPack)": best_us(lambda: session.run([xn], [yn], stream=0), calls),
    }


def raw_execute(session, ins, outs):
    """aotpack_session_execute on arrays built once: no Python work beyond ctypes'."""
    lib, h = session._lib, session._handle
    ci = (ctypes.c_uint64 * len(ins))(*[t.data_ptr() for t in ins])
    co = (ctypes.c_uint64 * len(outs))(*[t.data_ptr() for t in outs])
    return lambda: lib.aotpack_session_execute(h, ci, len(ins), None, co, len(outs), None, None)


def gpu_rows(bundle: str, calls: int) -> dict:
    import torch

    from aotpack.dtypes import DType
    from aotpack.runtime import Model

    model = Model(bundle)
    if model.is_dynamic:
        sys.exit("--bundle: a static bundle, please (the inputs take its shapes)")
    session = model.session()

    def tensors(infos):
        return [torch.rand(t.shape, device="cuda").to(DType(t.dtype).to_torch()) for t in infos]

    ins, outs = tensors(model.inputs), tensors(model.outputs)
    sync = torch.cuda.synchronize
    stream = torch.cuda.current_stream().cuda_stream
    lib, h = session._lib, session._handle
    ci = (ctypes.c_uint64 * len(ins))(*[t.data_ptr() for t in ins])
    co = (ctypes.c_uint64 * len(outs))(*[t.data_ptr() for t in outs])
    s = ctypes.c_void_p(stream or None)
    return {
        "C execute (floor)": best_us(lambda: lib.aotpack_session_execute(
            h, ci, len(ins), None, co, len(outs), None, s), calls, sync),
        "run(torch)": best_us(lambda: session.run(ins, outs), calls, sync),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="CMake build folder with the fake driver")
    ap.add_argument("--bundle", help="a static bundle to time on the GPU instead")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    rows = (gpu_rows(args.bundle, args.calls) if args.bundle
            else fake_driver_rows(fake_build(args.build), args.calls))
    floor = rows["C execute (floor)"]
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in rows.items()}))
        return
    print(f"{'call':32s} {'us/call':>8s} {'overhead':>9s}")
    for name, us in rows.items():
        print(f"{name:32s} {us:8.2f} {us - floor:9.2f}")


if __name__ == "__main__":
    main()
