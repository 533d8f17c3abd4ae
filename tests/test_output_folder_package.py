"""An `aotpack build` output folder is an install prefix for CMake and pkg-config: the runtime
installed by `cmake --install` is copied into a folder the way the builder copies it, and
runtime_cpp/tests/consumer/ is built against that folder with find_package(aotpack) and with
`cc $(pkg-config --cflags --libs aotpack)`, then run. Needs cmake, a C/C++ compiler and a
CMake build of the runtime (AOTPACK_CMAKE_BUILD, else the folder of AOTPACK_LIB, else
build/ci as .ci/run builds it)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import aotpack
from aotpack import builder, knobs

ROOT = Path(__file__).resolve().parents[1]
CONSUMER = ROOT / "runtime_cpp" / "tests" / "consumer"


def _cmake_build_dir() -> Path:
    explicit = os.environ.get("AOTPACK_CMAKE_BUILD")
    lib = knobs.lib_path()
    build = (Path(explicit) if explicit else lib.parent if lib is not None
             else ROOT / "build" / "ci")
    if build is None or not (build / "cmake_install.cmake").is_file():
        pytest.skip("no CMake build of the runtime (set AOTPACK_CMAKE_BUILD or AOTPACK_LIB)")
    if shutil.which("cmake") is None or shutil.which("cc") is None:
        pytest.skip("cmake and cc are needed")
    return build


def _run(*cmd, env=None) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture
def output_folder(tmp_path, monkeypatch) -> Path:
    """A folder holding what `aotpack build` copies, from a fresh install of the runtime."""
    prefix = tmp_path / "prefix"
    _run("cmake", "--install", _cmake_build_dir(), "--prefix", prefix)
    if not (prefix / "lib" / "cmake" / "aotpack").is_dir():
        pytest.skip(f"the runtime build at {_cmake_build_dir()} predates the CMake package")
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(prefix))
    out = tmp_path / "out"
    out.mkdir()
    assert builder.copy_launcher(out) == []
    shutil.rmtree(prefix)  # nothing may point back at the installed runtime
    return out


def test_find_package_and_pkg_config_from_an_output_folder(output_folder, tmp_path):
    build = tmp_path / "consumer"
    _run("cmake", "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={output_folder}",
         f"-DAOTPACK_EXPECT_VERSION={aotpack.__version__}",
         "-DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON")
    _run("cmake", "--build", build, "--target", "consumer_c")
    assert f"consumer-c: aotpack {aotpack.__version__} (header" in _run(build / "consumer_c")
    if shutil.which("pkg-config") is None:
        return  # the CMake half still ran; ctest cli.consumer_pkgconfig reports the skip
    env = {**os.environ, "PKG_CONFIG_PATH": str(output_folder / "lib" / "pkgconfig")}
    flags = _run("pkg-config", "--cflags", "--libs", "aotpack", env=env).split()
    assert f"-L{output_folder}/lib/pkgconfig/../../lib" in flags
    exe = tmp_path / "consumer_pkgconfig"
    _run("cc", "-std=c99", CONSUMER / "consumer.c", *flags,
         f"-Wl,-rpath,{output_folder}/lib", "-o", exe)
    assert f"consumer-c: aotpack {aotpack.__version__} (header" in _run(exe)


def test_embed_c_builds_from_an_output_folder_alone(output_folder, tmp_path):
    """examples/embed.c needs only the folder's include/ and lib/ (its device memory and
    stream come from the C API): no CUDA toolkit. ctest examples.embed runs it."""
    _run("cc", "-std=c99", "-O2", ROOT / "examples" / "embed.c",
         f"-I{output_folder}/include", f"-L{output_folder}/lib", "-laotpack",
         f"-Wl,-rpath,{output_folder}/lib", "-o", tmp_path / "embed")
    assert (tmp_path / "embed").is_file()
