"""The C++ runtime built for the machines a bundle is deployed to, not for this host.

A runtime compiled here needs this host's glibc and libstdc++ (GLIBC 2.34, GLIBCXX 3.4.29 on
the development images): it would not start on Ubuntu 20.04 or RHEL 8, which H100/H200 nodes
still run. `aotpack build --host-platform linux-x86_64 | linux-aarch64` instead ships a runtime
built by zig's clang against glibc 2.28 with its C++ library linked in (nothing newer than
GLIBC_2.28 is needed, no libstdc++ at all), for x86_64 or for aarch64 (Grace Hopper),
cross-compiled from any host. It is built once per platform and source version into the cache
(`AOTPACK_CACHE_DIR`/runtime/), from the runtime's sources (a checkout of aotpack installed with
`pip install -e`: a wheel carries the built runtime, not its sources), with the `ziglang`
package (`pip install -e '.[portable]'`). `scripts/build-portable-runtime` does the same by
hand. No torch import.
"""
from __future__ import annotations

import hashlib
import os
import platform as _platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aotpack import __version__, knobs

# platform -> (zig target, CMAKE_SYSTEM_PROCESSOR)
PLATFORMS = {
    "linux-x86_64": ("x86_64-linux-gnu.2.28", "x86_64"),
    "linux-aarch64": ("aarch64-linux-gnu.2.28", "aarch64"),
}
GLIBC_BASELINE = (2, 28)
SOURCE_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("CMakeLists.txt", "runtime_cpp/src", "runtime_cpp/include", "runtime_cpp/tools",
            "runtime_cpp/cmake")


class PortableRuntimeError(RuntimeError):
    """The portable runtime cannot be built here (what is missing and what to do)."""


def host_platform() -> str:
    machine = _platform.machine().lower()
    return "linux-aarch64" if machine in ("aarch64", "arm64") else "linux-x86_64"


def _check_platform(name: str) -> None:
    if name not in PLATFORMS:
        raise PortableRuntimeError(f"unknown platform {name!r}: use one of "
                                   f"{', '.join(PLATFORMS)}")


def _check_sources() -> None:
    if not (SOURCE_ROOT / "CMakeLists.txt").is_file() or not (SOURCE_ROOT / "runtime_cpp").is_dir():
        raise PortableRuntimeError(
            f"the runtime's sources are not beside this aotpack ({SOURCE_ROOT}): a wheel carries "
            f"the runtime built for its own host only. Build from a checkout (git clone, then "
            f"pip install -e '.[portable]'), or run scripts/build-portable-runtime there and "
            f"pass the prefix as AOTPACK_RUNTIME_DIR")


def _source_files(root: Path) -> list[Path]:
    files = []
    for rel in _SOURCES:
        p = root / rel
        files.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p])
    return files


def sources_digest(root: Path = SOURCE_ROOT) -> str:
    """What the cache is keyed by besides the platform: the runtime's sources."""
    h = hashlib.sha256()
    for f in _source_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _zig() -> list[str]:
    try:
        import ziglang  # noqa: F401  (the wheel carries the zig binary)
    except ImportError:
        raise PortableRuntimeError(
            "building the runtime for another platform needs zig: pip install "
            "'aotpack[portable]' (the ziglang package)") from None
    return [sys.executable, "-m", "ziglang"]


def _wrappers(folder: Path, target: str) -> tuple[Path, Path]:
    """`cc` and `c++` scripts running zig's clang for `target` (CMake takes one path each)."""
    zig = " ".join(shlex.quote(part) for part in _zig())
    out = []
    for name, tool in (("zcc", "cc"), ("zcxx", "c++")):
        p = folder / name
        p.write_text(f'#!/bin/sh\nexec {zig} {tool} -target {target} "$@"\n')
        p.chmod(0o755)
        out.append(p)
    return out[0], out[1]


def build(name: str, prefix: Path, *, jobs: int | None = None, log=None) -> Path:
    """Configure, build and install the runtime for platform `name` into `prefix` (bin/, lib/,
    include/ as `cmake --install` lays them out; stripped)."""
    _check_platform(name)
    _check_sources()
    if shutil.which("cmake") is None:
        raise PortableRuntimeError("cmake is needed to build the runtime (pip install cmake)")
    target, processor = PLATFORMS[name]
    with tempfile.TemporaryDirectory(prefix="aotpack-portable-") as tmp:
        cc, cxx = _wrappers(Path(tmp), target)
        build_dir = Path(tmp) / "build"
        # zig caches what it compiles for a target (libc++, glibc stubs) in its own folder
        env = knobs.child_environment(ZIG_GLOBAL_CACHE_DIR=str(knobs.cache_dir() / "zig"))
        steps = [
            ["cmake", "-S", str(SOURCE_ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
             f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}",
             "-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={processor}",
             "-DAOTPACK_BUILD_TESTS=OFF", "-DAOTPACK_BUILD_EXAMPLES=OFF"],
            ["cmake", "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 2)],
            ["cmake", "--install", str(build_dir), "--prefix", str(prefix), "--strip"],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if log is not None:
                log.write(r.stdout + r.stderr)
            if r.returncode != 0:
                tail = (r.stdout + r.stderr)[-3000:]
                raise PortableRuntimeError(f"building the {name} runtime failed at "
                                           f"`{' '.join(cmd[:3])}`:\n{tail}")
    return prefix


def runtime_for(name: str, announce=None) -> Path:
    """The cached runtime prefix for platform `name`, built first if missing (`announce`,
    if given, is called with the cache folder before a build starts)."""
    _check_platform(name)
    _check_sources()
    cache = knobs.cache_dir() / "runtime" / f"{__version__}-{name}-{sources_digest()}"
    if (cache / "bin" / "aotpack-run").is_file():
        return cache
    shutil.rmtree(cache, ignore_errors=True)  # a folder left incomplete by hand or by a crash
    cache.parent.mkdir(parents=True, exist_ok=True)
    if announce is not None:
        announce(cache)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.", dir=cache.parent))
    try:
        build(name, tmp / "prefix")
        os.replace(tmp / "prefix", cache)  # atomic: a half-built runtime is never cached
    except OSError:
        if not (cache / "bin" / "aotpack-run").is_file():  # not built by a concurrent call
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cache
