"""Every environment variable aotpack reads, in one place.

Read the value through these functions (never `os.environ` elsewhere) so that `aotpack doctor`
can list them and so that a test can change one with `monkeypatch.setenv`: each function reads
the environment when called, nothing is cached at import time. No torch import here.

aotpack never changes the process's environment for good: a library that takes a setting only
from the environment gets it inside `environment(...)`, which puts the old values back, and a
child process gets its own copy (`child_environment`).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Knob:
    name: str
    help: str
    default: str | None = None

    def get(self) -> str | None:
        value = os.environ.get(self.name)
        return value if value not in (None, "") else self.default


CACHE_DIR = Knob("AOTPACK_CACHE_DIR", "folder of aotpack's compile cache",
                 str(Path.home() / ".cache" / "aotpack"))
LIB = Knob("AOTPACK_LIB", "path of libaotpack.so to load instead of the packaged one")
RUNTIME_DIR = Knob("AOTPACK_RUNTIME_DIR",
                   "folder holding the C++ launcher (bin/, lib/, include/) to copy into builds")
RUN = Knob("AOTPACK_RUN", "path of the aotpack-run launcher to use (tuning, benchmarks) instead "
           "of the installed one")
LOG = Knob("AOTPACK_LOG", "log level: debug | info | warning | error", "warning")
NO_PROGRESS = Knob("AOTPACK_NO_PROGRESS", "set to 1 to hide progress bars (CI logs)")
TRITON_CACHE_DIR = Knob("TRITON_CACHE_DIR", "Triton's compile cache (aotpack's default: "
                        "triton/ under AOTPACK_CACHE_DIR)")
HOST_PLATFORM = Knob("AOTPACK_HOST_PLATFORM",
                     "the runtime an output folder gets when `aotpack build` has no "
                     "--host-platform: auto (built for glibc 2.28 where zig is installed, else "
                     "this machine's), native, linux-x86_64 or linux-aarch64", "auto")

DECODE_PREFETCH = Knob("AOTPACK_DECODE_PREFETCH_MIB",
                       "MiB of its weights a decode (split-K) GEMM asks into L2 while the kernel "
                       "before it still runs (programmatic dependent launch); 0, the default: "
                       "PDL without the prefetch (on the H200 a prefetch did not pay, "
                       "docs/performance.md); off: no PDL", "0")

ALL: tuple[Knob, ...] = (CACHE_DIR, LIB, RUNTIME_DIR, RUN, LOG, NO_PROGRESS, TRITON_CACHE_DIR,
                         HOST_PLATFORM, DECODE_PREFETCH)


def cache_dir() -> Path:
    return Path(CACHE_DIR.get()).expanduser()


def triton_cache_dir() -> Path:
    """Where Triton caches what aotpack compiles: the user's TRITON_CACHE_DIR, else under
    aotpack's cache (Triton's own default, ~/.triton, would hold kernels aotpack never reuses)."""
    value = TRITON_CACHE_DIR.get()
    return Path(value).expanduser() if value else cache_dir() / "triton"


def lib_path() -> Path | None:
    value = LIB.get()
    return Path(value).expanduser() if value else None


def runtime_dir() -> Path | None:
    value = RUNTIME_DIR.get()
    return Path(value).expanduser() if value else None


def launcher_path() -> Path | None:
    value = RUN.get()
    return Path(value).expanduser() if value else None


def host_platform() -> str:
    """HOST_PLATFORM: the `--host-platform` a build without one uses (portable.choose)."""
    return HOST_PLATFORM.get().strip().lower()


def log_level() -> str:
    return (LOG.get() or "warning").lower()


def show_progress() -> bool:
    return (NO_PROGRESS.get() or "0") in ("0", "false", "no")


def describe() -> list[tuple[str, str | None, str]]:
    """(name, value set in the environment or None, help) for every knob."""
    return [(k.name, os.environ.get(k.name), k.help) for k in ALL]


def variable(name: str) -> str | None:
    """The environment variable `name` of another library or tool (CUTE_DSL_ARCH, PYTHONPATH,
    OUT), read here like aotpack's own; None when unset."""
    return os.environ.get(name)


def child_environment(**values: str) -> dict[str, str]:
    """The environment for a child process: this process's, with `values` set."""
    return {**os.environ, **values}


@contextmanager
def environment(values: dict[str, str]):
    """`values` set in the environment for the `with` body only, then the old values (or their
    absence) put back: for a library that reads a setting from the environment alone (CuTeDSL
    at import). The environment is the process's, shared by its threads: aotpack calls this
    on the thread that compiles, never from two threads at once."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, before in old.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


def decode_prefetch_bytes() -> int | None:
    """DECODE_PREFETCH in bytes; None for "off" (no programmatic dependent launch)."""
    value = DECODE_PREFETCH.get().strip().lower()
    if value == "off":
        return None
    try:
        mib = float(value)
    except ValueError:
        raise ValueError(f"{DECODE_PREFETCH.name}={value!r}: a number of MiB or off") from None
    if not 0 <= mib < 1 << 20:  # also nan and inf
        raise ValueError(f"{DECODE_PREFETCH.name}={value!r}: must be 0 .. 2^20 MiB (or off)")
    return int(mib * (1 << 20))
