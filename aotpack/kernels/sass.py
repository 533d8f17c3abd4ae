"""Disassemble cubins to SASS with `cuobjdump` (no GPU needed), to check what a kernel really
became (e.g. that a Hopper GEMM issues HGMMA, i.e. wgmma, and not HMMA).

cuobjdump is looked up in the triton wheel first (`triton/backends/nvidia/bin/cuobjdump`, which
matches the ptxas that built the cubin), then on PATH, then in /usr/local/cuda/bin.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


class CuobjdumpNotFound(RuntimeError):
    pass


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


def sass(cubin: bytes) -> str:
    """The SASS listing of every function in `cubin` (cuobjdump -sass)."""
    tool = find_cuobjdump()
    if tool is None:
        raise CuobjdumpNotFound("cuobjdump not found (looked in the triton wheel, on PATH and in "
                                "/usr/local/cuda/bin); install the CUDA toolkit or triton")
    with tempfile.TemporaryDirectory(prefix="aotpack-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def count_instructions(listing: str, opcode: str) -> int:
    """How many instructions in a SASS listing have `opcode` (e.g. "HGMMA" counts HGMMA.64x256x16
    and every other variant; predicated `@P0 HGMMA` too)."""
    pattern = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?" + re.escape(opcode) + r"\b",
                         re.IGNORECASE | re.MULTILINE)
    return len(pattern.findall(listing))
