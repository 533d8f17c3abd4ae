"""Disassemble cubins to SASS with `cuobjdump` (no GPU needed), to check what a kernel really
became (e.g. that a Hopper GEMM issues HGMMA, i.e. wgmma, and not HMMA).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from aotpack.kernels.sass import find_cuobjdump


class CuobjdumpNotFound(RuntimeError):
    pass


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


def resource_usage(cubin: bytes) -> dict[str, int]:
    """{"REG": registers per thread, "STACK": bytes, "SHARED": ..., "LOCAL": ...} of the (first)
    function in `cubin` (cuobjdump --dump-resource-usage)."""
    tool = find_cuobjdump()
    if tool is None:
        raise CuobjdumpNotFound("cuobjdump not found")
    with tempfile.TemporaryDirectory(prefix="aotpack-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True,
                             text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if "REG:" in ln)
    return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", line.split("Resource usage:")[-1])}


def count_instructions(listing: str, opcode: str) -> int:
    """How many instructions in a SASS listing have `opcode` (e.g. "HGMMA" counts HGMMA.64x256x16
    and every other variant; predicated `@P0 HGMMA` too)."""
    pattern = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?" + re.escape(opcode) + r"\b",
                         re.IGNORECASE | re.MULTILINE)
    return len(pattern.findall(listing))
