"""Every environment variable aotpack reads, in one place.

Read the value through these functions (never `os.environ` elsewhere) so that `aotpack doctor`
can list them and so that a test can change one with `monkeypatch.setenv`: each function reads
the environment when called, nothing is cached at import time. No torch import here.
"""
from __future__ import annotations

import os
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

ALL: tuple[Knob, ...] = (CACHE_DIR, LIB, RUNTIME_DIR, RUN, LOG, NO_PROGRESS)


def cache_dir() -> Path:
    return Path(CACHE_DIR.get()).expanduser()


def lib_path() -> Path | None:
    value = LIB.get()
    return Path(value).expanduser() if value else None


def runtime_dir() -> Path | None:
    value = RUNTIME_DIR.get()
    return Path(value).expanduser() if value else None


def launcher_path() -> Path | None:
    value = RUN.get()
    return Path(value).expanduser() if value else None


def log_level() -> str:
    return (LOG.get() or "warning").lower()


def show_progress() -> bool:
    return (NO_PROGRESS.get() or "0") in ("0", "false", "no")


def describe() -> list[tuple[str, str | None, str]]:
    """(name, value set in the environment or None, help) for every knob."""
    return [(k.name, os.environ.get(k.name), k.help) for k in ALL]
