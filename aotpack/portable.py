"""The C++ runtime built for the machines a bundle is deployed to, not for this host.

A runtime compiled here needs this host's glibc and libstdc++ (GLIBC 2.34, GLIBCXX 3.4.29 on
the development images): it would not start on Ubuntu 20.04 or RHEL 8, which H100/H200 nodes
still run. The portable runtime is built by zig's clang against glibc 2.28 with its C++ library
linked in (nothing newer than GLIBC_2.28 is needed, no libstdc++ at all), for x86_64 or for
aarch64 (Grace Hopper), cross-compiled from any host. It is built once per platform and source
version into the cache (`AOTPACK_CACHE_DIR`/runtime/), from the runtime's sources (a checkout,
or the copy a wheel carries in aotpack/_runtime/share/aotpack/source), with the `ziglang`
package and cmake (dependencies of aotpack on Linux). `scripts/build-portable-runtime` does the
same by hand. No torch import.

Which runtime an output folder gets (`choose`): `aotpack build --host-platform`, else the
AOTPACK_HOST_PLATFORM knob: `auto` (the default) is this host's platform's portable runtime
where it is cached or can be built, else the one installed here with a note saying why;
`native` is the one installed here; a platform name is that platform's portable runtime, or an
error saying what is missing.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform as _platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aotpack import __version__, knobs, runtime_files

# platform -> (zig target, CMAKE_SYSTEM_PROCESSOR)
PLATFORMS = {
    "linux-x86_64": ("x86_64-linux-gnu.2.28", "x86_64"),
    "linux-aarch64": ("aarch64-linux-gnu.2.28", "aarch64"),
}
GLIBC_BASELINE = (2, 28)
AUTO, NATIVE = "auto", "native"
CHOICES = (AUTO, NATIVE, *PLATFORMS)
SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, when aotpack runs from one
# the files the runtime builds from, relative to a source root (install.cmake ships the same)
_SOURCES = ("CMakeLists.txt", "runtime_cpp/src", "runtime_cpp/include", "runtime_cpp/tools",
            "runtime_cpp/cmake")
INSTALL_HINT = ("pip install ziglang (a dependency of aotpack: missing only after an install "
                "with --no-deps)")


class PortableRuntimeError(RuntimeError):
    """The portable runtime cannot be built here (what is missing and what to do)."""


class BuildFailed(PortableRuntimeError):
    """zig, cmake and the sources were there, and the build itself failed."""


def host_platform() -> str:
    machine = _platform.machine().lower()
    return "linux-aarch64" if machine in ("aarch64", "arm64") else "linux-x86_64"


def _check_platform(name: str) -> None:
    if name not in PLATFORMS:
        raise PortableRuntimeError(f"unknown platform {name!r}: use one of "
                                   f"{', '.join(PLATFORMS)}")


def _has_sources(root: Path | None) -> bool:
    return root is not None and (root / "CMakeLists.txt").is_file() and \
        (root / "runtime_cpp" / "src").is_dir()


def installed_sources() -> Path | None:
    """The copy of the sources a wheel carries (None: not installed with one)."""
    installed = runtime_files.installed_dir()
    return installed / runtime_files.SOURCES if installed is not None else None


def source_root() -> Path | None:
    """The runtime's sources: the checkout aotpack runs from, else the copy installed with it."""
    return next((r for r in (SOURCE_ROOT, installed_sources()) if _has_sources(r)), None)


def _check_sources() -> Path:
    root = source_root()
    if root is None:
        raise PortableRuntimeError(
            f"the runtime's sources are neither beside this aotpack ({SOURCE_ROOT}) nor "
            f"installed with it (aotpack/_runtime/{runtime_files.SOURCES.as_posix()}; wheels "
            f"built before they carried them do not). Reinstall aotpack, or build from a "
            f"checkout (git clone, then pip install -e .), or run "
            f"scripts/build-portable-runtime there and pass the prefix as AOTPACK_RUNTIME_DIR")
    return root


def _source_files(root: Path) -> list[Path]:
    files = []
    for rel in _SOURCES:
        p = root / rel
        files.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p])
    return files


def sources_digest(root: Path | None = None) -> str:
    """What the cache is keyed by besides the platform: the runtime's sources (the same for a
    checkout and for the copy a wheel carries: paths are relative to their root)."""
    root = root or _check_sources()
    h = hashlib.sha256()
    for f in _source_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _has_zig() -> bool:
    try:
        import ziglang  # noqa: F401  (the wheel carries the zig binary)
    except ImportError:
        return False
    return True


def _zig() -> list[str]:
    if not _has_zig():
        raise PortableRuntimeError(f"building the portable runtime needs zig: {INSTALL_HINT}")
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


def _has_cmake() -> bool:
    return shutil.which("cmake") is not None


def _check_tools() -> None:
    _zig()
    if not _has_cmake():
        raise PortableRuntimeError("cmake is needed to build the runtime (pip install cmake)")


def build(name: str, prefix: Path, *, jobs: int | None = None, log=None) -> Path:
    """Configure, build and install the runtime for platform `name` into `prefix` (bin/, lib/,
    include/ as `cmake --install` lays them out; stripped)."""
    _check_platform(name)
    root = _check_sources()
    _check_tools()
    target, processor = PLATFORMS[name]
    with tempfile.TemporaryDirectory(prefix="aotpack-portable-") as tmp:
        cc, cxx = _wrappers(Path(tmp), target)
        build_dir = Path(tmp) / "build"
        # zig caches what it compiles for a target (libc++, glibc stubs) in its own folder
        env = knobs.child_environment(ZIG_GLOBAL_CACHE_DIR=str(knobs.cache_dir() / "zig"))
        steps = [
            ["cmake", "-S", str(root), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
             f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}",
             "-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={processor}",
             "-DAOTPACK_BUILD_TESTS=OFF", "-DAOTPACK_BUILD_EXAMPLES=OFF",
             "-DAOTPACK_INSTALL_SOURCES=OFF"],
            ["cmake", "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 2)],
            ["cmake", "--install", str(build_dir), "--prefix", str(prefix), "--strip"],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if log is not None:
                log.write(r.stdout + r.stderr)
            if r.returncode != 0:
                tail = (r.stdout + r.stderr)[-3000:]
                raise BuildFailed(f"building the {name} runtime failed at "
                                  f"`{' '.join(cmd[:3])}`:\n{tail}")
    return prefix


def cache_folder(name: str) -> Path:
    """Where the runtime for platform `name` built from these sources is cached."""
    _check_platform(name)
    return knobs.cache_dir() / "runtime" / f"{__version__}-{name}-{sources_digest()}"


def _cached(cache: Path) -> bool:
    return (cache / "bin" / "aotpack-run").is_file()


def is_cached(name: str) -> bool:
    return _cached(cache_folder(name))


def _failed_marker(cache: Path) -> Path:
    """Written when a build of `cache` failed: `auto` then falls back at once instead of
    paying the build again on every `aotpack build` (an explicit platform still retries)."""
    return cache.with_name(cache.name + ".failed")


@contextlib.contextmanager
def _lock(cache: Path):
    """One build per cache folder at a time: parallel `aotpack build`s (the GPU suite builds
    in child processes) wait for the first instead of each paying the build."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_name(f".{cache.name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def runtime_for(name: str, announce=None) -> Path:
    """The cached runtime prefix for platform `name`, built first if missing (`announce`,
    if given, is called with the cache folder before a build starts)."""
    cache = cache_folder(name)
    if _cached(cache):
        return cache
    _check_tools()  # a missing tool is no failed build: nothing is marked for it
    with _lock(cache):
        if _cached(cache):  # built by another process while this one waited
            return cache
        shutil.rmtree(cache, ignore_errors=True)  # left incomplete by hand or by a crash
        if announce is not None:
            announce(cache)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.", dir=cache.parent))
        try:
            build(name, tmp / "prefix")
            os.replace(tmp / "prefix", cache)  # atomic: a half-built runtime is never cached
        except BuildFailed as e:
            _failed_marker(cache).write_text(f"{e}\n")
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _failed_marker(cache).unlink(missing_ok=True)
    return cache


# ----------------------------------------------------------------------------- the choice
@dataclass(frozen=True)
class Choice:
    """The runtime an output folder gets: `root`, built for `platform` against glibc 2.28, or
    (root None) the one installed here or named by AOTPACK_RUNTIME_DIR, built for this host's
    libraries; `fallback`: why `auto` could not give the portable one, and what to do."""
    root: Path | None = None
    platform: str | None = None
    fallback: str | None = None


def unavailable(name: str) -> str | None:
    """Why the portable runtime for `name` is neither cached nor buildable here, with what to
    install (None: it is cached, or can be built). Builds nothing."""
    if source_root() is None:
        return ("the runtime's sources are not installed with this aotpack (reinstall it, or "
                "install from a checkout)")
    cache = cache_folder(name)
    if _cached(cache):
        return None
    if _failed_marker(cache).is_file():
        return (f"building it failed before ({_failed_marker(cache)} says why; delete it to "
                f"try again, or ask for it with --host-platform {name})")
    if not _has_zig():
        return f"zig is not installed: {INSTALL_HINT}"
    if not _has_cmake():
        return "cmake is not on the PATH: pip install cmake (a dependency of aotpack)"
    return None


def choose(requested: str, announce=None) -> Choice:
    """The runtime for `--host-platform requested` (auto | native | a platform); a platform
    asked for by name must be had (PortableRuntimeError otherwise), `auto` falls back."""
    if requested not in CHOICES:
        raise PortableRuntimeError(f"unknown platform {requested!r}: use one of "
                                   f"{', '.join(CHOICES)}")
    if requested == NATIVE:
        return Choice()
    if requested != AUTO:
        return Choice(runtime_for(requested, announce), requested)
    if knobs.runtime_dir() is not None:  # AOTPACK_RUNTIME_DIR names the runtime to ship
        return Choice()
    name = host_platform()
    why = unavailable(name)
    if why is None:
        try:
            return Choice(runtime_for(name, announce), name)
        # a folder with the host's runtime is still useful (an unwritable cache: OSError)
        except (PortableRuntimeError, OSError) as e:
            why = f"building it failed: {str(e).splitlines()[0]}"
    return Choice(fallback=why)
