"""The build side of the GPU suite (tests/gpu/), proven on the CPU before a GPU run: every
module the suite builds is built here the way it will be there (aotpack.build, Triton
cross-compile, child processes), carries the kernels its test expects, its size points cover
every launch of its variant table, and `aotpack verify --reference cpu` at those points (the
plan with the kernels' torch references against eager) passes. Slow: ~60 bundles."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

import gpu_harness as h  # noqa: E402
from model_cases import MODELS  # noqa: E402
from template_cases import CASES, STATIC_CASES  # noqa: E402

pytestmark = pytest.mark.slow

TEMPLATE_SPECS = {c.name: (f"{h.GPU_TESTS / 'template_cases.py'}:{c.spec_function}", c)
                  for c in CASES + STATIC_CASES}
MODEL_SPECS = {m.name: (str(h.REPO / m.spec), m) for m in MODELS if m.cpu_verify}
# sizes verified per dim on the CPU: a subset of what the GPU runs (the references are slow)
CPU_SIZES = {"R": (1, 77), "S": (1, 77), "T": (7,), "B": (3,)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    specs = {n: (spec, getattr(case, "options", {}))
             for n, (spec, case) in {**TEMPLATE_SPECS, **MODEL_SPECS}.items()}
    return h.build_all(specs, tmp_path_factory.mktemp("suite"), workers=2)


def _verify(bundle, spec, sizes, expect=()):
    from aotpack.verify import verify

    manifest = h.manifest_of(bundle)
    assert not h.missing_kernels(manifest, expect), h.missing_kernels(manifest, expect)
    points = h.size_points(manifest, sizes)
    assert not h.uncovered_steps(manifest, points), h.uncovered_steps(manifest, points)
    report = verify(bundle, spec, reference="cpu", points=points if manifest.get("symbols")
                    else None)
    bad = [(c.name, c.rel_error) for c in report.outputs if not c.ok]
    assert report.passed and not bad, bad


@pytest.mark.parametrize("name", list(TEMPLATE_SPECS))
def test_template_case_builds_and_verifies(built, name):
    spec, case = TEMPLATE_SPECS[name]
    _verify(built[name].check(), spec, CPU_SIZES, case.expect)


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_model_case_builds_and_verifies(built, name):
    spec, case = MODEL_SPECS[name]
    bundle = built[name].check()
    assert bool(h.manifest_of(bundle).get("symbols")) == case.dynamic
    _verify(bundle, spec, CPU_SIZES)
