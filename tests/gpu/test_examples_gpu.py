"""Whole models end to end on the GPU (tests/gpu/model_cases.py): every example under
examples/ (its own factories at full size, and its make_dynamic at test sizes) and small
random-init transformers models (GPT-2, BERT, ViT, Llama, Qwen2, OPT) with dims that vary,
built with `aotpack.build`, run through the C runtime at the ranges' ends, inside every bucket
of every kernel's variant table and at ragged sizes, and compared with eager torch on CUDA.
examples/embed.c is compiled and run on a static bundle.

    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_examples_gpu.py
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import gpu_harness as h
from model_cases import MODELS

pytestmark = pytest.mark.gpu

# ragged sizes run on top of the bucket points, where a model's range allows them
SIZES = {"B": (1, 3, 7), "S": (1, 7, 77, 127, 129, 255)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return h.build_all({m.name: (str(h.REPO / m.spec), {}) for m in MODELS}, root)


@pytest.mark.parametrize("case", MODELS, ids=lambda m: m.name)
def test_model_matches_eager(built, case):
    import torch

    have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if case.min_torch and have < case.min_torch:
        pytest.skip(f"torch {torch.__version__} cannot export {case.name} with dynamic dims "
                    f"(needs {'.'.join(map(str, case.min_torch))}; build it on the build host)")
    bundle = built[case.name].check()
    manifest = h.manifest_of(bundle)
    assert bool(manifest.get("symbols")) == case.dynamic, manifest.get("symbols")
    points = h.size_points(manifest, SIZES)
    assert not h.uncovered_steps(manifest, points), h.uncovered_steps(manifest, points)
    with h.Runner(bundle, str(h.REPO / case.spec)) as runner:
        failures = [f for seed, p in enumerate(points) for f in runner.check(p, seed)]
    assert not failures, f"{case.name}: {len(failures)} failures:\n" + "\n".join(failures)


def test_embed_c_runs_a_bundle(built, tmp_path):
    """examples/embed.c, compiled against the runtime under test, runs the full-size MLP
    example's bundle: it exits 0 and reports finite outputs."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    from aotpack.runtime import library_path

    lib = library_path()
    exe = tmp_path / "embed"
    build = subprocess.run(  # the C API alone: no cuda.h, no -lcuda
        [cc, "-O2", str(h.REPO / "examples" / "embed.c"), "-I", str(h.REPO / "runtime_cpp" /
         "include"), "-L", str(lib.parent), "-laotpack", f"-Wl,-rpath,{lib.parent}", "-o",
         str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe), str(built["example_mlp"].check())], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "output " in run.stdout and "NaN = 0" in run.stdout, run.stdout[-2000:]
