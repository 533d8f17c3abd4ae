"""Issue 19 through the Python binding, on the CMake build's fake driver (skipped when not
built): pointers the GPU cannot use are refused before any launch, the run call takes counts,
zero-initialized session options mean the defaults."""
from __future__ import annotations

import json
import random
import struct

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


# --------------------------------------------------------------- one verdict: Python and C
def _c_verdict(path) -> str | None:
    from aotpack.runtime import AotpackError, Model

    try:
        Model.check_file(path)
        return None
    except AotpackError as e:
        return e.message


def _py_verdict(path) -> str | None:
    from aotpack.bundle import BundleError, read_bundle

    try:
        read_bundle(path, checksums=True)
        return None
    except BundleError as e:  # anything else (KeyError, ...) fails the test
        return str(e)


def _edit(path, edit, digest=True):
    from test_bundle import _rewrite_manifest

    _rewrite_manifest(path, edit, digest)


@pytest.mark.parametrize("edit, digest, needle", [
    (lambda m: None, True, None),
    (lambda m: m.update(arena_bytes=1), False, "has sha256"),  # an edit, checksum not updated
    (lambda m: m["kernels"][0].update(smme=0), True, "unknown field 'smme' (did you mean 'smem'?"),
    (lambda m: m["steps"][0]["args"][2].update(offest=0), True, "did you mean 'offset'?"),
    (lambda m: m.update(stpes=[]), True, "unknown field 'stpes' (did you mean 'steps'?"),
    (lambda m: m["target"].update(arch="sm_80"), True, "means compute capability 8.0 but cc"),
    (lambda m: m.update(external_weights={"file": "../w.safetensors"}), True,
     "inside the bundle's folder"),
    (lambda m: m.update(symbols=[]), True, "need bundle format v2"),
])
def test_python_and_runtime_give_one_verdict(tmp_path, edit, digest, needle):
    """The schema rules both readers apply give the same reason, word for word."""
    from handmade_bundle import write_handmade

    path = write_handmade(tmp_path / "m.aotpack")
    _edit(path, edit, digest)
    c, py = _c_verdict(path), _py_verdict(path)
    if needle is None:
        assert c is None and py is None, (c, py)
        return
    assert c is not None and needle in c, c
    assert py is not None and c in py, (c, py)


def test_missing_checksum_means_rebuild(tmp_path):
    from handmade_bundle import write_handmade
    from test_bundle import _header

    path = write_handmade(tmp_path / "m.aotpack")
    header, n, raw = _header(path)
    del header["__metadata__"]["aotpack.manifest_sha256"]
    new = json.dumps(header).encode()
    new += b" " * (-(8 + len(new)) % 256)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])
    c, py = _c_verdict(path), _py_verdict(path)
    assert "no manifest checksum" in c and "rebuild" in c and c in py, (c, py)


def test_byte_flips_one_verdict(tmp_path):
    """Flipped bytes all over a bundle (header, manifest, checksums, weights, cubins, padding):
    the Python reader (with checksums) and the runtime accept or refuse each alike, and the
    Python reader only ever raises BundleError."""
    from handmade_bundle import write_handmade

    path = write_handmade(tmp_path / "m.aotpack")
    good = path.read_bytes()
    n = struct.unpack_from("<Q", good)[0]
    rng = random.Random(19)
    positions = sorted(set(range(0, 8 + n, 3)) | {rng.randrange(8 + n, len(good))
                                                  for _ in range(300)})
    disagree, refused = [], 0
    for i in positions:
        bad = bytearray(good)
        bad[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        c, py = _c_verdict(path), _py_verdict(path)
        refused += c is not None
        if (c is None) != (py is None):
            disagree.append((i, c, py))
    assert not disagree, disagree[:5]
    assert refused > len(positions) // 2


@pytest.mark.parametrize("edit, digest, needle", [
    (lambda m: m["kernels"][0].update(smme=0), True, "unknown field 'smme'"),
    (lambda m: m.update(arena_bytes=1), False, "CHECKSUM_MISMATCH"),
    (lambda m: m.pop("steps"), True, "missing field 'steps'"),
    (lambda m: m["buffers"].append([]), True, "]: expected an object"),
])
def test_inspect_prints_the_runtimes_reason(tmp_path, edit, digest, needle):
    """`aotpack inspect` on a bundle the runtime refuses: one line with the runtime's reason,
    exit status 1, never a traceback (it used to crash with a KeyError)."""
    from handmade_bundle import write_handmade

    path = write_handmade(tmp_path / "m.aotpack")
    _edit(path, edit, digest)
    r = _run_py(f"import sys; sys.argv = ['aotpack', 'inspect', {str(path)!r}]; "
                f"from aotpack.cli.main import main; main()")
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in out, out
    assert "error:" in out and needle in " ".join(out.split()), out
