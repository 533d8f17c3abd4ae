"""The runtime built for deployment platforms (aotpack/portable.py, `aotpack build
--host-platform`): zig's clang against glibc 2.28 with the C++ library linked in.

What "runs wherever an H100/H200 runs" means here, checked on the ELF files themselves: no
symbol version newer than GLIBC_2.28, no libstdc++ (GLIBCXX/CXXABI) at all, only libc's own
libraries needed, the C API alone exported; the x86_64 launcher runs here, the aarch64 one under
qemu-user with an aarch64 glibc (.ci/run installs qemu-user and libc6-arm64-cross). Each
platform's runtime is built once per source version into AOTPACK_CACHE_DIR (~80 s on 2 cores).
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from aotpack import portable

ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                  "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("cmake") is None,
                                reason="needs readelf (binutils) and cmake")


def _zig_or_skip():
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("zig is not installed (pip install ziglang)")


@pytest.fixture(scope="module", params=sorted(portable.PLATFORMS))
def runtime(request):
    _zig_or_skip()
    return request.param, portable.runtime_for(request.param)


def _readelf(*args) -> str:
    return subprocess.run(["readelf", *args], capture_output=True, text=True, check=True).stdout


def _glibc_versions(path: Path) -> set[tuple[int, ...]]:
    found = re.findall(r"GLIBC_(\d+(?:\.\d+)+)", _readelf("-V", "-W", str(path)))
    return {tuple(int(x) for x in v.split(".")) for v in found}


@pytest.mark.parametrize("rel", ["bin/aotpack-run", "lib/libaotpack.so"])
def test_needs_glibc_2_28_and_no_libstdcxx(runtime, rel):
    name, prefix = runtime
    path = prefix / rel
    header = _readelf("-h", str(path))
    assert ("AArch64" if name == "linux-aarch64" else "X86-64") in header, header
    versions = _readelf("-V", "-W", str(path))
    assert "GLIBCXX" not in versions and "CXXABI" not in versions, "needs libstdc++"
    newest = max(_glibc_versions(path))
    assert newest <= portable.GLIBC_BASELINE, f"{rel} needs GLIBC_{'.'.join(map(str, newest))}"
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                            _readelf("-d", str(path))))
    assert needed <= ALLOWED_NEEDED, needed - ALLOWED_NEEDED


def test_library_exports_the_c_api_only(runtime):
    _, prefix = runtime
    symbols = _readelf("--dyn-syms", "-W", str(prefix / "lib" / "libaotpack.so"))
    exported = {line.split()[-1] for line in symbols.splitlines()
                if " GLOBAL " in line and " UND " not in line and "DEFAULT" in line}
    assert "aotpack_model_load" in exported and "aotpack_device_alloc" in exported
    assert {s for s in exported if not s.startswith("aotpack_")} == set()


def _runner(name: str) -> list[str]:
    if name == portable.host_platform():
        return []
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if name != "linux-aarch64" or qemu is None or not (AARCH64_SYSROOT / "lib").is_dir():
        pytest.skip(f"cannot run {name} binaries here (qemu-user and an aarch64 glibc: "
                    f"apt install qemu-user libc6-arm64-cross)")
    return [qemu, "-L", str(AARCH64_SYSROOT)]


def test_launcher_runs_and_checks_a_bundle(runtime, tmp_path):
    """The launcher of each platform starts (natively or under qemu-user), reports its
    version and validates a bundle the compiler wrote: the same verdict as the host's."""
    from handmade_bundle import write_handmade

    import aotpack

    name, prefix = runtime
    run = _runner(name) + [str(prefix / "bin" / "aotpack-run")]
    out = subprocess.run(run + ["--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and aotpack.__version__ in out.stdout, out.stderr
    bundle = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    ok = subprocess.run(run + [str(bundle), "--check"], capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0 and "bundle is valid" in ok.stdout, ok.stdout + ok.stderr
    weights = tmp_path / "weights.safetensors"
    raw = bytearray(weights.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    first = min(v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    raw[8 + n + first + 1] ^= 0xFF  # a byte of the first weight
    weights.write_bytes(bytes(raw))
    bad = subprocess.run(run + [str(bundle), "--check"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "WEIGHTS_MISMATCH" in bad.stderr, bad.stdout + bad.stderr


def test_build_ships_the_platform_runtime(tmp_path):
    """`aotpack build --host-platform linux-aarch64` on this host: the output folder's launcher
    and library are the aarch64 ones (from the cache the fixture filled)."""
    _zig_or_skip()
    from aotpack.builder import build

    spec = tmp_path / "tiny.py"
    spec.write_text("import torch\n\n\ndef make():\n"
                    "    return torch.nn.Linear(64, 32), (torch.randn(4, 64),)\n")
    result = build(f"{spec}:make", tmp_path / "out", dtype="bf16",
                   host_platform="linux-aarch64")
    for rel in ("aotpack-run", "lib/libaotpack.so"):
        assert "AArch64" in _readelf("-h", str(result.out_dir / rel)), rel
    assert (result.out_dir / "include" / "aotpack" / "aotpack.h").is_file()


def test_no_sources_says_what_to_do(monkeypatch, tmp_path):
    """Neither a checkout nor the copy a wheel carries (a wheel built before it did): a clear
    refusal naming the way out, before anything is hashed or built (was a FileNotFoundError)."""
    from aotpack.builder import BuildError, _choose_runtime

    monkeypatch.setattr(portable, "SOURCE_ROOT", tmp_path)
    monkeypatch.setattr(portable, "installed_sources", lambda: tmp_path / "share")
    with pytest.raises(BuildError, match="--host-platform linux-aarch64: the runtime's sources "
                                         "are neither beside this aotpack"):
        _choose_runtime("linux-aarch64")


def test_unknown_platform_and_missing_zig(monkeypatch):
    with pytest.raises(portable.PortableRuntimeError, match="unknown platform 'win-x64'"):
        portable.runtime_for("win-x64")
    import builtins

    real_import = builtins.__import__

    def no_zig(name, *args, **kwargs):
        if name == "ziglang":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zig)
    monkeypatch.setattr(portable, "sources_digest", lambda root=None: "no-such-build")
    with pytest.raises(portable.PortableRuntimeError, match="pip install ziglang"):
        portable.runtime_for("linux-aarch64")
