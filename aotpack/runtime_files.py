"""Where the installed C++ runtime lives: `aotpack/_runtime/{bin,lib,include}`.

scikit-build-core installs the CMake outputs there. In a regular install that folder is next to
this file; in an editable install ("redirect" mode) the Python sources stay in the checkout
while the CMake outputs land in site-packages, so the package's RECORD is searched too.
No torch import.
"""
from __future__ import annotations

from pathlib import Path

from aotpack import knobs

LAUNCHER = Path("bin") / "aotpack-run"
SHARED_LIB = Path("lib") / "libaotpack.so"
STATIC_LIB = Path("lib") / "libaotpack.a"
INCLUDE = Path("include") / "aotpack"


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


def runtime_dir() -> Path | None:
    """The folder holding bin/, lib/, include/ of the C++ runtime, or None if not installed.
    AOTPACK_RUNTIME_DIR overrides."""
    override = knobs.runtime_dir()
    if override is not None:
        return override
    here = Path(__file__).resolve().parent / "_runtime"
    if here.is_dir():
        return here
    return _from_record()


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
