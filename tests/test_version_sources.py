"""One version: CMakeLists.txt's project(VERSION), the Python package's __version__ (which
pyproject.toml reads from aotpack/__init__.py), the C header's AOTPACK_VERSION_* macros and,
where a runtime library is at hand, what aotpack_version() returns must all agree."""
import ctypes
import re
from pathlib import Path

import pytest

import aotpack
from aotpack import runtime_files

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "runtime_cpp" / "include" / "aotpack" / "aotpack.h"


def _cmake_version() -> str:
    m = re.search(r"^project\(aotpack VERSION (\d+\.\d+\.\d+)\b",
                  (ROOT / "CMakeLists.txt").read_text(), re.M)
    assert m, "CMakeLists.txt has no project(aotpack VERSION X.Y.Z ...)"
    return m.group(1)


def _header_macros() -> dict[str, str]:
    return dict(re.findall(r'^#define (AOTPACK_(?:VERSION_\w+|ABI_VERSION)) "?([0-9.]+)"?$',
                           HEADER.read_text(), re.M))


def test_pyproject_takes_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    source = project["tool"]["scikit-build"]["metadata"]["version"]["input"]
    assert source == "aotpack/__init__.py"
    assert re.search(r'^__version__ = "([^"]+)"$', (ROOT / source).read_text(), re.M).group(1) \
        == aotpack.__version__


def test_cmake_python_and_header_agree():
    macros = _header_macros()
    header = ".".join(macros[f"AOTPACK_VERSION_{p}"] for p in ("MAJOR", "MINOR", "PATCH"))
    assert _cmake_version() == aotpack.__version__ == header == macros["AOTPACK_VERSION_STRING"]
    assert macros["AOTPACK_ABI_VERSION"].isdigit()


def test_the_library_reports_the_header_version():
    lib = runtime_files.library_path()
    if lib is None or not lib.is_file():
        pytest.skip("no libaotpack.so (set AOTPACK_LIB)")
    fn = ctypes.CDLL(str(lib)).aotpack_version
    fn.restype = ctypes.c_char_p
    assert fn().decode() == _header_macros()["AOTPACK_VERSION_STRING"]


def test_version_options():
    """`aotpack --version` says the package's version (aotpack-run's is checked by ctest)."""
    import subprocess
    import sys

    import aotpack

    out = subprocess.run([sys.executable, "-m", "aotpack", "--version"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"aotpack {aotpack.__version__}"
