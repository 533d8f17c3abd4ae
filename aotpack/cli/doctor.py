"""`aotpack doctor`: what this machine has for building and running bundles."""
from __future__ import annotations

import ctypes
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _cuobjdump() -> str:
    from aotpack.kernels.sass import find_cuobjdump  # the triton wheel's, then PATH, then CUDA

    return find_cuobjdump() or "not found (optional: the triton wheel or the CUDA toolkit " \
                               "ships it; used to check kernels' SASS)"


def _driver() -> str:
    """The NVIDIA driver's CUDA version through libcuda itself (no toolkit, no torch)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found): building works, running needs a GPU"
    v = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return "libcuda.so.1 found but cuDriverGetVersion failed"
    return f"CUDA {v.value // 1000}.{v.value % 1000 // 10} (driver API {v.value})"


def _gpus() -> str:
    try:
        import torch

        if not torch.cuda.is_available():
            return "none visible to torch"
        names = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            names.append(f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs)")
        return "; ".join(names)
    except Exception as e:  # a broken torch install is itself a finding to report
        return f"cannot ask torch: {e}"


def _folder_runtime() -> str:
    """Which runtime `aotpack build` would put in an output folder (builds nothing)."""
    from aotpack import knobs, portable

    requested = knobs.host_platform()
    if requested == portable.NATIVE:
        return "the installed one (AOTPACK_HOST_PLATFORM=native)"
    if requested == portable.AUTO and knobs.runtime_dir():
        return "AOTPACK_RUNTIME_DIR's"
    name = portable.host_platform() if requested == portable.AUTO else requested
    try:
        why = portable.unavailable(name)
        cached = why is None and portable.is_cached(name)
    except portable.PortableRuntimeError as e:
        why = str(e)
    if why is not None:
        return (f"this machine's, built for its glibc and libstdc++: {why}"
                if requested == portable.AUTO else f"none: {requested} cannot be built: {why}")
    return f"{name}, glibc 2.28 ({'cached' if cached else 'built by the next build, ~90 s'})"


def rows() -> list[tuple[str, str]]:
    from aotpack import __version__, knobs, runtime_files

    lib, launcher = runtime_files.library_path(), runtime_files.launcher_path()
    found = [
        ("python", f"{sys.version.split()[0]} ({platform.machine()}, {platform.system()})"),
        ("aotpack", __version__),
        ("torch", _version("torch")),
        ("triton", _version("triton")),
        ("nvidia-cutlass-dsl", _version("nvidia-cutlass-dsl")),
        ("cuobjdump", _cuobjdump()),
        ("runtime library", str(lib) if lib else "not found (pip install . builds it, or set "
                                                  "AOTPACK_LIB)"),
        ("aotpack-run", str(launcher) if launcher else "not found"),
        ("output folder runtime", _folder_runtime()),
        ("driver", _driver()),
        ("GPU", _gpus()),
    ]
    for name, value, _help in knobs.describe():
        if value is not None:
            found.append((name, value))
    return found


def run_doctor(out: Console) -> None:
    table = Table(title="aotpack doctor", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("found")
    for what, value in rows():
        table.add_row(escape(what), escape(value))
    out.print(table)
