"""Find `cuobjdump`, which disassembles cubins to SASS with no GPU (`aotpack doctor` reports
it; the tests read what a kernel really became with it: tests/support/sass.py).

cuobjdump is looked up in the triton wheel first (`triton/backends/nvidia/bin/cuobjdump`, which
matches the ptxas that built the cubin), then on PATH, then in /usr/local/cuda/bin.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_cuobjdump() -> str | None:
    """Path of a cuobjdump executable, or None."""
    candidates = []
    try:
        import triton

        wheel_bin = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        candidates.append(wheel_bin / "cuobjdump")
    except ImportError:
        pass
    on_path = shutil.which("cuobjdump")
    if on_path:
        candidates.append(Path(on_path))
    candidates.append(Path("/usr/local/cuda/bin/cuobjdump"))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None
