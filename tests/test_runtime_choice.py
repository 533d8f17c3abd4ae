"""Which runtime an output folder gets (aotpack/portable.py `choose`, builder._choose_runtime).

By default (`auto`) it is the portable one (glibc 2.28) for this host's platform where it is
cached or can be built, else the installed one, with one note saying why and what to install;
`native` asks for the installed one; a platform named is strict. Builds here are stand-ins
(portable.build replaced: the real zig build is test_portable_runtime.py's), and the bundle
pipeline is test_build.py's stand-in. Also: the runtime's sources a wheel carries, installed
by their CMake component (runtime_cpp/cmake/install.cmake) and found by portable.source_root.
"""
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from aotpack import builder, portable, runtime_files
from aotpack.builder import BuildError, build
from test_build import pipeline  # noqa: F401  (the stand-in pipeline fixture)

HOST = portable.host_platform()


@pytest.fixture
def env(monkeypatch, tmp_path):
    """The default knob (conftest sets native for the suite), an empty cache of our own, no
    AOTPACK_RUNTIME_DIR, and zig installed as far as portable.py can tell."""
    monkeypatch.delenv("AOTPACK_HOST_PLATFORM", raising=False)
    monkeypatch.delenv("AOTPACK_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "ziglang", types.ModuleType("ziglang"))
    monkeypatch.setattr(portable, "_has_cmake", lambda: True)
    return monkeypatch


def _fake_runtime(prefix: Path, word: str) -> Path:
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "aotpack-run").write_text(f"#!/bin/sh\necho {word}\n")
    (prefix / "lib").mkdir()
    for name in ("libaotpack.so", "libaotpack.a"):
        (prefix / "lib" / name).write_text(word)
    (prefix / "include" / "aotpack").mkdir(parents=True)
    (prefix / "include" / "aotpack" / "aotpack.h").write_text("/* C API */\n")
    return prefix


def _fake_builds(env, fail: bool = False) -> list:
    """portable.build replaced by one writing a stand-in runtime (or failing); the calls."""
    calls = []

    def fake_build(name, prefix, **_):
        calls.append(name)
        if fail:
            raise portable.BuildFailed(f"building the {name} runtime failed at `cmake --build`")
        return _fake_runtime(prefix, "portable")

    env.setattr(portable, "build", fake_build)
    return calls


def _no_zig(env):
    env.setitem(sys.modules, "ziglang", None)  # `import ziglang` raises ImportError


def test_default_builds_the_portable_runtime_once_and_says_so(env, capsys):
    calls = _fake_builds(env)
    first = builder._choose_runtime(None)
    assert (first.platform, first.fallback) == (HOST, None)
    assert first.root == portable.cache_folder(HOST) and calls == [HOST]
    said = capsys.readouterr().err
    assert f"building the {HOST} runtime with zig for glibc 2.28 (once, ~90 s" in said
    assert "--host-platform native skips it" in said
    again = builder._choose_runtime(None)
    assert again == first and calls == [HOST], "cached: built once"
    assert capsys.readouterr().err == ""


def test_default_uses_a_cached_runtime_without_zig(env):
    calls = _fake_builds(env)
    portable.runtime_for(HOST)
    _no_zig(env)
    assert portable.choose("auto") == portable.Choice(portable.cache_folder(HOST), HOST)
    assert calls == [HOST]


def test_default_falls_back_without_zig_and_says_what_to_install(env):
    calls = _fake_builds(env)
    _no_zig(env)
    choice = portable.choose("auto")
    assert (choice.root, choice.platform) == (None, None) and calls == []
    assert "zig is not installed: pip install ziglang" in choice.fallback


def test_default_falls_back_without_sources(env):
    env.setattr(portable, "source_root", lambda: None)
    choice = portable.choose("auto")
    assert choice.root is None and "sources are not installed" in choice.fallback


def test_a_failed_build_falls_back_once_and_is_not_paid_again(env):
    calls = _fake_builds(env, fail=True)
    first = portable.choose("auto")
    assert first.root is None and first.fallback.startswith("building it failed: building the")
    second = portable.choose("auto")
    assert "failed before" in second.fallback and calls == [HOST], "auto does not retry"
    with pytest.raises(BuildError, match=f"--host-platform {HOST}: building the {HOST} runtime "
                                         f"failed"):
        builder._choose_runtime(HOST)  # asked for by name: tried again, and an error
    assert calls == [HOST, HOST]
    _fake_builds(env)
    assert builder._choose_runtime(HOST).root == portable.cache_folder(HOST)
    assert portable.choose("auto").fallback is None, "a success clears the failure"


def test_native_and_runtime_dir_are_kept_as_asked(env, tmp_path):
    calls = _fake_builds(env)
    portable.runtime_for(HOST)
    env.setenv("AOTPACK_HOST_PLATFORM", "native")
    assert builder._choose_runtime(None) == portable.Choice()
    env.delenv("AOTPACK_HOST_PLATFORM")
    assert builder._choose_runtime("native") == portable.Choice()
    env.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path))  # a runtime named by hand: shipped as is
    assert builder._choose_runtime(None) == portable.Choice() and calls == [HOST]


def test_a_named_platform_is_strict(env):
    _no_zig(env)
    with pytest.raises(BuildError, match=r"--host-platform linux-aarch64: building the "
                                         r"portable runtime needs zig: pip install"):
        builder._choose_runtime("linux-aarch64")
    env.setenv("AOTPACK_HOST_PLATFORM", "linux-aarch64")
    with pytest.raises(BuildError, match=r"AOTPACK_HOST_PLATFORM=linux-aarch64: building"):
        builder._choose_runtime(None)
    env.setenv("AOTPACK_HOST_PLATFORM", "win-x64")
    with pytest.raises(BuildError, match="unknown platform 'win-x64': use one of auto, native"):
        builder._choose_runtime(None)


def _installed_runtime(env, tmp_path) -> Path:
    """The stand-in pipeline's runtime as the one installed with aotpack (not named by
    AOTPACK_RUNTIME_DIR, which `auto` would ship as is)."""
    installed = tmp_path / "runtime"
    env.delenv("AOTPACK_RUNTIME_DIR", raising=False)
    env.setattr(runtime_files, "installed_dir", lambda: installed)
    return installed


def test_build_ships_the_portable_runtime_by_default(pipeline, env, tmp_path):  # noqa: F811
    _installed_runtime(env, tmp_path)
    _fake_builds(env)
    result = build(f"{tmp_path / 'model.py'}:make", tmp_path / "out", progress=False)
    assert (result.out_dir / "aotpack-run").read_text() == "#!/bin/sh\necho portable\n"
    assert (result.out_dir / "lib" / "libaotpack.so").read_text() == "portable"
    readme = (result.out_dir / "README.md").read_text()
    assert f"built for {HOST} against glibc 2.28" in readme and "zig cc" in readme
    assert not any("portable" in n for n in result.notes)


def test_build_without_zig_ships_the_installed_runtime_with_one_note(pipeline, env,  # noqa: F811
                                                                     tmp_path):
    installed = _installed_runtime(env, tmp_path)
    _no_zig(env)
    result = build(f"{tmp_path / 'model.py'}:make", tmp_path / "out", progress=False)
    assert (result.out_dir / "aotpack-run").read_bytes() == \
        (installed / "bin" / "aotpack-run").read_bytes()
    notes = [n for n in result.notes if "pip install ziglang" in n]
    assert len(notes) == 1 and "(Ubuntu 20.04, RHEL 8) may not start them" in notes[0]
    readme = " ".join((result.out_dir / "README.md").read_text().split())
    assert "built on the build machine" in readme and "pip install ziglang" in readme
    assert "-lstdc++" in readme


def test_build_with_native_has_no_note(pipeline, env, tmp_path):  # noqa: F811
    _installed_runtime(env, tmp_path)
    _no_zig(env)
    result = build(f"{tmp_path / 'model.py'}:make", tmp_path / "out", progress=False,
                   host_platform="native")
    assert not any("portable" in n for n in result.notes)
    readme = (result.out_dir / "README.md").read_text()
    assert "built on the build machine" in readme and "not available" not in readme


# ----------------------------------------------------------------------------- wheel sources
@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="needs cmake and a C++ compiler")
def test_the_sources_a_wheel_carries_build_the_same_runtime(tmp_path, monkeypatch):
    """`pip install` installs every CMake component; the aotpack_sources one must hold exactly
    the files portable.py builds from (same digest, so the same cache entry), where
    runtime_files.SOURCES says, and portable.source_root must find them without a checkout."""
    build_dir, prefix = tmp_path / "build", tmp_path / "prefix"
    for cmd in (["cmake", "-S", portable.SOURCE_ROOT, "-B", build_dir, "-DAOTPACK_BUILD_TESTS=OFF",
                 "-DAOTPACK_BUILD_EXAMPLES=OFF", "-DAOTPACK_INSTALL_SOURCES=ON"],
                ["cmake", "--install", build_dir, "--component", "aotpack_sources", "--prefix",
                 prefix]):
        done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    shipped = prefix / runtime_files.SOURCES

    def files(root):
        return sorted(f.relative_to(root).as_posix() for f in portable._source_files(root))

    installed = sorted(f.relative_to(shipped).as_posix() for f in shipped.rglob("*")
                       if f.is_file())
    assert installed == files(portable.SOURCE_ROOT) and "CMakeLists.txt" in installed
    assert portable.sources_digest(shipped) == portable.sources_digest(portable.SOURCE_ROOT)
    monkeypatch.setattr(portable, "SOURCE_ROOT", tmp_path / "site-packages")  # no checkout
    monkeypatch.setattr(runtime_files, "installed_dir", lambda: prefix)
    assert portable.source_root() == shipped


def test_the_wheel_installs_every_component():
    """scikit-build-core puts every CMake component in the wheel unless install.components
    names some: then it must name the sources' too."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((portable.SOURCE_ROOT / "pyproject.toml").read_text())
    skbuild = config["tool"]["scikit-build"]
    assert skbuild["wheel"]["install-dir"] == "aotpack/_runtime"  # where installed_dir looks
    components = skbuild.get("install", {}).get("components", [])
    assert not components or "aotpack_sources" in components
