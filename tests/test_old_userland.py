"""An output folder on a real old userland: Debian 11's glibc 2.31 (Ubuntu 20.04's) and GCC 10's
libstdc++, unpacked by scripts/old-userland (.ci/run puts it in build/old-userland) and entered
with chroot (root only; skipped otherwise). `aotpack build` with its defaults writes, where zig
is installed, a folder whose launcher checks its bundle there and whose libaotpack.so a C
program links and runs there. The runtime `pip install` built on this host does not even start
there: the userland is old enough to tell. (Debian 10's glibc 2.28, RHEL 8's, is no longer on
the mirror; test_portable_runtime.py checks the 2.28 bound on the ELF symbol versions.)
"""
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aotpack import knobs, portable, runtime_files

ROOT = Path(__file__).resolve().parents[1]
APP = r"""#include <stdio.h>
#include "aotpack/aotpack.h"
int main(int argc, char** argv) {
  aotpack_status* s = aotpack_model_check_file(argc > 1 ? argv[1] : NULL, NULL);
  printf("aotpack %s: %s\n", aotpack_version(), s ? aotpack_status_message(s) : "valid");
  aotpack_status_free(s);
  return s != NULL;
}
"""


def _userland() -> Path:
    found = Path(os.environ.get("AOTPACK_TEST_OLD_USERLAND", ROOT / "build" / "old-userland"))
    if not (found / "lib").is_dir():
        pytest.skip(f"no old userland at {found} (scripts/old-userland {found})")
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        pytest.skip("entering the old userland needs chroot, as root")
    return found


@pytest.fixture(scope="module")
def old_root(tmp_path_factory) -> Path:
    """A copy of the userland (tests put files in it) with an output folder built with
    aotpack's defaults at /t/out."""
    pytest.importorskip("triton")
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("zig is not installed: the default folder holds this host's runtime")
    root = tmp_path_factory.mktemp("old") / "root"
    shutil.copytree(_userland(), root, symlinks=True)
    spec = root.parent / "tiny.py"
    spec.write_text("import torch\n\n\ndef make():\n"
                    "    return torch.nn.Linear(64, 32), (torch.randn(4, 64),)\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("AOTPACK_HOST_PLATFORM", raising=False)  # the default: conftest sets native
        mp.delenv("AOTPACK_RUNTIME_DIR", raising=False)
        import aotpack  # its build hides torch's own FutureWarnings, as the CLI does

        aotpack.build(f"{spec}:make", root / "t" / "out", dtype="bf16")
    return root


def _chroot(root: Path, *cmd, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["chroot", str(root), *map(str, cmd)], capture_output=True,
                          text=True, timeout=120, env=knobs.child_environment(**env))


def test_the_userland_is_glibc_2_31(old_root):
    libc = next(old_root.glob("lib/*-linux-gnu/libc.so.6"))  # glibc's libc runs: it says its version
    done = _chroot(old_root, "/" + libc.relative_to(old_root).as_posix())
    assert done.returncode == 0 and "release version 2.31." in done.stdout, done.stdout


def test_the_default_folder_runs_there(old_root):
    assert "against glibc 2.28" in (old_root / "t" / "out" / "README.md").read_text()
    version = _chroot(old_root, "/t/out/aotpack-run", "--version")
    assert version.returncode == 0 and "aotpack-run" in version.stdout, version.stderr
    check = _chroot(old_root, "/t/out/aotpack-run", "/t/out/model.aotpack", "--check")
    assert check.returncode == 0 and "bundle is valid" in check.stdout, check.stdout + check.stderr


def test_its_library_links_and_runs_there(old_root):
    """A C program built as the folder's README says (with zig cc, so that the program itself
    needs no newer glibc) against lib/libaotpack.so, run in the old userland."""
    out = old_root / "t" / "out"
    (out / "app.c").write_text(APP)
    target = portable.PLATFORMS[portable.host_platform()][0]
    cc = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", target, "app.c",
                         "-Iinclude", "-Llib", "-laotpack", "-Wl,-rpath,$ORIGIN/lib", "-o", "app"],
                        cwd=out, capture_output=True, text=True, timeout=300,
                        env=knobs.child_environment(
                            ZIG_GLOBAL_CACHE_DIR=str(knobs.cache_dir() / "zig")))
    assert cc.returncode == 0, cc.stderr
    # the loader finds lib/ through LD_LIBRARY_PATH, not the program's $ORIGIN run path: glibc
    # 2.31 reads $ORIGIN from /proc/self/exe, and the chroot has no /proc
    run = _chroot(old_root, "/t/out/app", "/t/out/model.aotpack", LD_LIBRARY_PATH="/t/out/lib")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == f"aotpack {portable.__version__}: valid"


def test_the_host_built_runtime_does_not_start_there(old_root):
    libc, version = platform.libc_ver()
    if libc != "glibc" or tuple(map(int, version.split("."))) <= (2, 31):
        pytest.skip(f"this host's {libc} {version} is not newer than the old userland's")
    installed = runtime_files.installed_dir()
    if installed is None or not (installed / runtime_files.LAUNCHER).is_file():
        pytest.skip("no installed runtime")
    shutil.copy2(installed / runtime_files.LAUNCHER, old_root / "t" / "host-run")
    done = _chroot(old_root, "/t/host-run", "--version")
    assert done.returncode != 0 and "not found" in done.stderr, done.stdout + done.stderr
