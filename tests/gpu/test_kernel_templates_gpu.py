"""Every kernel template (aotpack/kernels/templates.py) against torch on CUDA, end to end: a
small plain-torch module per template and epilogue (tests/gpu/template_cases.py) built with
`aotpack.build` (Triton backend), loaded with `aotpack.load` and run through the C runtime at a
size inside every bucket of the bundle's variant table, at both ends of every range, and at
tiny, ragged and large sizes; a few cases also built static at one size. Outputs start as NaN
(a tile never written shows) and are compared with eager torch on CUDA (bf16 tolerances,
overall and per row); each run is repeated on the same pointers (CUDA graph replay).

    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_kernel_templates_gpu.py
"""
from __future__ import annotations

import pytest

import gpu_harness as h
from template_cases import CASES, STATIC_CASES

pytestmark = pytest.mark.gpu

SPEC_FILE = h.GPU_TESTS / "template_cases.py"


def _spec(case) -> str:
    return f"{SPEC_FILE}:{case.spec_function}"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every case's bundle, built once for this file, in parallel child processes."""
    root = tmp_path_factory.mktemp("templates")
    return h.build_all({c.name: (_spec(c), c.options) for c in CASES + STATIC_CASES}, root)


def _check_case(built, case):
    import torch

    have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if case.min_torch and have < case.min_torch:
        pytest.skip(f"torch {torch.__version__} cannot export {case.name} with dynamic dims "
                    f"(needs {'.'.join(map(str, case.min_torch))}; build it on the build host)")
    bundle = built[case.name].check()
    manifest = h.manifest_of(bundle)
    missing = h.missing_kernels(manifest, case.expect)
    assert not missing, (f"{case.name}: no kernel carries {missing}; kernels: "
                         f"{[(k['name'], k.get('fused_ops')) for k in manifest['kernels']]}")
    points = h.size_points(manifest, case.sizes)
    assert not h.uncovered_steps(manifest, points), h.uncovered_steps(manifest, points)
    with h.Runner(bundle, _spec(case)) as runner:
        failures = [f for seed, p in enumerate(points) for f in runner.check(p, seed)]
    assert not failures, f"{case.name}: {len(failures)} failures:\n" + "\n".join(failures)
    return manifest, points


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dynamic_template_matches_torch(built, case):
    manifest, points = _check_case(built, case)
    assert manifest.get("symbols"), f"{case.name} was meant to vary at run time"
    for expr, lo, hi in h.bucket_conditions(manifest):  # both ends of every bucket ran
        ran = {p[expr] for p in points if expr in p}
        assert {lo, hi} <= ran, f"bucket {expr} in {lo}..{hi}: ran {sorted(ran)}"


@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda c: c.name)
def test_static_template_matches_torch(built, case):
    manifest, _ = _check_case(built, case)
    assert not manifest.get("symbols")
