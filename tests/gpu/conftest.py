"""tests/gpu/: the GPU suite (docs/testing.md). Every test here is marked `gpu` (the top-level
tests/conftest.py skips those without CUDA) and scripts/gpu-check runs each file under its own
`timeout`: a bad tensor map hangs the GPU instead of failing."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def aotpack_run() -> Path:
    """The launcher: $AOTPACK_RUN (scripts/gpu-check sets it), else one a CMake build left in
    build-gpu/ or build/."""
    given = os.environ.get("AOTPACK_RUN")
    if given:
        return Path(given)
    found = sorted(p for d in ("build-gpu", "build") for p in (REPO / d).rglob("aotpack-run")
                   if p.is_file() and os.access(p, os.X_OK))
    if not found:
        pytest.fail("no aotpack-run: build the runtime (cmake -S . -B build-gpu && cmake "
                    "--build build-gpu) or set AOTPACK_RUN", pytrace=False)
    return found[0]
