"""Where the installed C++ runtime lives: `aotpack/_runtime/{bin,lib,include}`, and which of
its files an `aotpack build` output folder gets (`output_folder_files`).

scikit-build-core installs the CMake outputs there, as a prefix (pyproject.toml:
wheel.install-dir: lib/cmake/aotpack and lib/pkgconfig/aotpack.pc name paths relative to it).
In a regular install that folder is next to this file; in an editable install ("redirect"
mode) the Python sources stay in the checkout while the CMake outputs land in site-packages,
so the package's RECORD is searched too.
No torch import.
"""
from __future__ import annotations

import re
from pathlib import Path

from aotpack import knobs

LAUNCHER = Path("bin") / "aotpack-run"
SHARED_LIB = Path("lib") / "libaotpack.so"
STATIC_LIB = Path("lib") / "libaotpack.a"
INCLUDE = Path("include") / "aotpack"
# find_package(aotpack CONFIG) and pkg-config files; their paths are relative to themselves, so
# the output folder is a prefix for both (runtime_cpp/cmake/install.cmake).
CMAKE_PACKAGE = Path("lib") / "cmake" / "aotpack"
PKG_CONFIG = Path("lib") / "pkgconfig" / "aotpack.pc"
# The runtime's own sources, which a wheel carries so that portable.py can build the portable
# runtime from them with zig; runtime_cpp/cmake/install.cmake installs them there.
SOURCES = Path("share") / "aotpack" / "source"


def _from_record() -> Path | None:
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        files = distribution("aotpack").files or []
    except PackageNotFoundError:
        return None
    for f in files:
        if f.as_posix().endswith("_runtime/" + SHARED_LIB.as_posix()) or \
                f.as_posix().endswith("_runtime/" + LAUNCHER.as_posix()):
            return Path(f.locate()).resolve().parents[1]
    return None


def installed_dir() -> Path | None:
    """The runtime `pip install` put beside this package (AOTPACK_RUNTIME_DIR aside)."""
    here = Path(__file__).resolve().parent / "_runtime"
    if here.is_dir():
        return here
    return _from_record()


def runtime_dir() -> Path | None:
    """The folder holding bin/, lib/, include/ of the C++ runtime, or None if not installed.
    AOTPACK_RUNTIME_DIR overrides."""
    override = knobs.runtime_dir()
    if override is not None:
        return override
    return installed_dir()


def library_path() -> Path | None:
    """libaotpack.so to load: AOTPACK_LIB, else the installed one, else None."""
    explicit = knobs.lib_path()
    if explicit is not None:
        return explicit
    root = runtime_dir()
    if root is not None and (root / SHARED_LIB).is_file():
        return root / SHARED_LIB
    return None


def launcher_path() -> Path | None:
    root = runtime_dir()
    if root is not None and (root / LAUNCHER).is_file():
        return root / LAUNCHER
    return None


def output_folder_files(root: Path) -> list[tuple[Path, Path]]:
    """(path in the runtime folder `root`, path in an output folder) of each piece `aotpack
    build` copies: the launcher at the top (it links libaotpack.a: standalone), the libraries,
    headers, CMake package and pkg-config file as a prefix (lib/, include/)."""
    pieces = [(LAUNCHER, Path("aotpack-run")), (STATIC_LIB, STATIC_LIB), (INCLUDE, INCLUDE),
              (CMAKE_PACKAGE, CMAKE_PACKAGE), (PKG_CONFIG, PKG_CONFIG)]
    # libaotpack.so plus its versioned names where the runtime has them (a system install):
    # a program linked against it records the SONAME (libaotpack.so.0), and the CMake package
    # names the fully versioned file (libaotpack.so.0.2.0).
    versioned = sorted(p.relative_to(root) for p in (root / "lib").glob("libaotpack.so.*")
                       if re.fullmatch(r"libaotpack\.so(\.\d+)+", p.name))
    pieces += [(p, p) for p in versioned]
    pieces.append((SHARED_LIB, SHARED_LIB))
    return pieces
