"""Issue 19 through the Python binding, on the CMake build's fake driver (skipped when not
built): pointers the GPU cannot use are refused before any launch, the run call takes counts,
zero-initialized session options mean the defaults."""
from __future__ import annotations

import pytest

from test_runtime_binding import _fake_driver, _fake_env, _run_py, write_bundle

needs_fake = pytest.mark.skipif(_fake_driver() is None,
                                reason="fake driver not built (CMake tests)")

_HOST_POINTER = r"""
import ctypes, os
from aotpack.runtime import AotpackError, Model, Session
driver = ctypes.CDLL(os.environ["AOTPACK_LIBCUDA"])
driver.fake_cuda_set_pointer.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
m = Model(PATH)
s = Session(m)
raw = [ctypes.create_string_buffer(1024 + 256) for _ in range(2)]
x, y = [(ctypes.addressof(r) + 255) // 256 * 256 for r in raw]
driver.fake_cuda_set_pointer(x, 1024, 0)   # host memory the driver does not know
try:
    s.run_pointers([x], [y])
    print("RESULT accepted")
except AotpackError as e:
    print("RESULT", e.code.name, "|", e.message)
driver.fake_cuda_set_pointer(x, 0, 0)
s.run_pointers([x], [y])                    # the session is still usable
unchecked = Session(m, check_pointers=False)
driver.fake_cuda_set_pointer(x, 1024, 0)
unchecked.run_pointers([x], [y])            # the caller vouched for its memory
print("RESULT2 ok")
"""


@needs_fake
def test_host_pointer_refused_through_binding(tmp_path):
    path = write_bundle(tmp_path)
    r = _run_py(_HOST_POINTER.replace("PATH", repr(str(path))), **_fake_env())
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("RESULT INVALID_ARGUMENT | input 0 ('x') at 0x"), lines
    assert "not memory the CUDA driver knows" in lines[0]
    assert lines[-1] == "RESULT2 ok"
