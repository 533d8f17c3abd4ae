"""Shared pytest set-up. GPU tests are marked `gpu` and skipped (never faked) without a CUDA
device; CI has none. Tests of the benchmarks suite (benchmarks/*.py, not aotpack) are marked
`bench` and skipped unless the -m expression names them (`pytest -m bench`).

Output folders built by tests get the installed runtime (AOTPACK_HOST_PLATFORM=native, unless
the environment says otherwise): the default, `auto`, would build the portable one with zig
(~90 s) into every temporary AOTPACK_CACHE_DIR a test sets, and make results depend on whether
zig is installed. tests/test_runtime_choice.py tests `auto` itself, test_portable_runtime.py
and test_old_userland.py the portable runtime."""
import os

import pytest


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_configure(config):
    os.environ.setdefault("AOTPACK_HOST_PLATFORM", "native")  # inherited by child processes
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: compiles many kernels (minutes on 2 cores)")
    config.addinivalue_line("markers", "bench: tests the benchmarks suite (run on request: "
                            "-m bench)")


def pytest_collection_modifyitems(config, items):
    if "bench" not in (config.option.markexpr or ""):
        skip_bench = pytest.mark.skip(reason="tests the benchmarks suite: run with -m bench")
        for item in items:
            if "bench" in item.keywords:
                item.add_marker(skip_bench)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
