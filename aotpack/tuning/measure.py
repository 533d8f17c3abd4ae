"""Measuring a job on this machine's GPU for `aotpack build --tune`.

The measuring is done by the shipped launcher (`aotpack-run --tune`), the very code that
measures on a GPU-less build host's target: one implementation of warm-up, L2 flush, timing
and output checks, and a child process per problem, so a candidate that hangs or poisons the
CUDA context (which an in-process binding could not survive) is recorded and skipped.
"""
from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

from aotpack import knobs, runtime_files


class MeasureError(RuntimeError):
    """Measuring could not start or did not produce results (the message says why)."""


def launcher() -> Path:
    path = knobs.launcher_path() or runtime_files.launcher_path()  # AOTPACK_RUN, else installed
    if path is None or not path.is_file():
        raise MeasureError("the aotpack-run launcher is not installed (pip install . builds it; "
                           "or set AOTPACK_RUN to its path)")
    return path


def gpu_count() -> int:
    """CUDA devices visible through the driver (0 when there is no driver or GPU)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


def run_job(job: Path, results: Path, *, budget_s: float | None = None, device: int = 0,
            extra: list[str] | None = None) -> Path:
    """Measure `job` with `aotpack-run --tune`; the launcher's progress goes to stderr."""
    cmd = [str(launcher()), "--tune", str(job), "-o", str(results), "--device", str(device)]
    if budget_s is not None:
        cmd += ["--budget", str(int(budget_s))]
    cmd += extra or []
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0 or not Path(results).is_file():
        raise MeasureError(f"`{' '.join(cmd)}` failed with exit status {proc.returncode}")
    return Path(results)
