"""What the GPU tests share: building model specs in parallel (child processes), the size
points a dynamic bundle must run at (a size inside every bucket of its variant table, the
ranges' ends, sizes a test names), and running a bundle against eager torch on CUDA.

Builds go through the Python API (`aotpack.build`), several specs per child process, at most
AOTPACK_TEST_BUILD_WORKERS children at once (default: the CPU count, at most 16). Imports
torch lazily where it can: tests/test_gpu_suite_builds.py uses the build side on the CPU.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GPU_TESTS = Path(__file__).resolve().parent
TOLERANCE = 1e-2  # ‖out − eager‖ / ‖eager‖, as `aotpack verify` (or within 1.5x of eager
# against the float32 upcast)
ROW_TOLERANCE = 5e-2  # the same per row of the last dim: a wrong or missing tile shows here
DEVICE = "cuda"  # where eager runs and inputs live (a CPU dry run of the harness sets "cpu")


# ----------------------------------------------------------------------------------- builds
@dataclass
class Built:
    name: str
    spec: str
    bundle: Path
    error: str | None = None

    def check(self):
        """The bundle path; fails the test with the build's error when it did not build."""
        if self.error is not None:
            import pytest

            pytest.fail(f"building {self.spec} failed:\n{self.error}", pytrace=False)
        return self.bundle


_WORKER = r"""
import json, sys, traceback
import aotpack
results = {}
for name, spec, out, options in json.loads(sys.argv[1]):
    try:
        aotpack.build(spec, out, force=True, **options)
        results[name] = None
    except BaseException as e:  # reported per spec; the other specs still build
        results[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-4000:]}"
print("\n@@RESULTS@@" + json.dumps(results))
"""


def build_workers() -> int:
    return int(os.environ.get("AOTPACK_TEST_BUILD_WORKERS", min(16, os.cpu_count() or 1)))


def build_all(specs: dict[str, tuple[str, dict]], root: Path, workers: int | None = None,
              timeout_s: float = 1200) -> dict[str, Built]:
    """name -> Built for every (model spec, build options) of `specs`, built under `root`."""
    root = Path(root)
    jobs = [(name, spec, str(root / name), options) for name, (spec, options) in specs.items()]
    workers = max(1, min(workers or build_workers(), len(jobs)))
    chunks = [jobs[i::workers] for i in range(workers)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def run(chunk):
        try:
            proc = subprocess.run([sys.executable, "-c", _WORKER, json.dumps(chunk)], cwd=REPO,
                                  env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {name: f"the build did not finish in {timeout_s} s" for name, *_ in chunk}
        _, sep, tail = proc.stdout.rpartition("@@RESULTS@@")
        if proc.returncode != 0 or not sep:
            why = f"build process exited {proc.returncode}:\n{proc.stderr[-4000:]}"
            return {name: why for name, *_ in chunk}
        return json.loads(tail)

    with ThreadPoolExecutor(workers) as pool:
        errors = {k: v for result in pool.map(run, chunks) for k, v in result.items()}
    return {name: Built(name, spec, Path(out) / "model.aotpack", errors.get(name))
            for name, spec, out, _ in jobs}


def manifest_of(bundle) -> dict:
    from aotpack.bundle import read_bundle

    return read_bundle(bundle).manifest


def kernel_tokens(manifest: dict) -> set[str]:
    """Every fused-op tag and entry name of the bundle's kernels ("gemm", "bias", ...)."""
    out = set()
    for k in manifest["kernels"]:
        out.update(k.get("fused_ops") or ())
        out.add(k["entry"])
        out.update(k["entry"].split("_"))
    return out


def missing_kernels(manifest: dict, expect) -> list[str]:
    """Tokens of `expect` that no kernel of the bundle carries."""
    have = kernel_tokens(manifest)
    return [t for t in expect if t not in have]


# ------------------------------------------------------------------------------- shapes
def _symbols(manifest: dict):
    from aotpack.bundle.manifest import parse_symbols

    return parse_symbols(manifest) if manifest.get("symbols") else {}


def example_point(manifest: dict) -> dict[str, int]:
    return {s["name"]: s.get("example", s["min"]) for s in manifest.get("symbols") or []}


def bucket_conditions(manifest: dict) -> list[tuple[str, int, int]]:
    """Distinct `when` conditions (expression, min, max) of the variant table, in step order."""
    out = []
    for step in manifest["steps"]:
        for c in step.get("when") or []:
            key = (c["expr"], int(c["min"]), int(c["max"]))
            if key not in out:
                out.append(key)
    return out


def _point_for(manifest: dict, expr: str, target: int, lo: int, hi: int) -> dict | None:
    """Symbol values where `expr` lies in [lo, hi], as close to `target` as found: one symbol
    moved from the example (every value), or all of them on a grid; None if none lands."""
    import itertools

    from aotpack.ir.sym import subs
    from aotpack.ir.sym_parse import parse

    symbols = _symbols(manifest)
    example = example_point(manifest)
    if expr in symbols:
        return {**example, expr: target}
    parsed = parse(expr, symbols)
    tries = []
    for s in manifest["symbols"]:
        step = max(1, (s["max"] - s["min"]) // 4096)
        tries += [{**example, s["name"]: v}
                  for v in list(range(s["min"], s["max"] + 1, step)) + [s["max"]]]
    if len(manifest["symbols"]) <= 3:
        grids = [sorted({s["min"], s["max"], example[s["name"]]} |
                        {s["min"] + (s["max"] - s["min"]) * k // 15 for k in range(16)})
                 for s in manifest["symbols"]]
        names = [s["name"] for s in manifest["symbols"]]
        tries += [dict(zip(names, values)) for values in itertools.product(*grids)]
    best = None
    for point in tries:
        value = subs(parsed, point)
        if lo <= value <= hi and (best is None or abs(value - target) < best[0]):
            best = (abs(value - target), point)
    return best[1] if best else None


def size_points(manifest: dict, sizes: dict | None = None) -> list[dict[str, int]]:
    """Where a dynamic bundle runs in a test: the example; every symbol at its minimum, at its
    maximum, each alone at its maximum; `sizes` ({symbol: values}, those in range); and for
    every bucket of the variant table its lower end, an interior size and its upper end."""
    symbols = manifest.get("symbols") or []
    if not symbols:
        return [{}]
    example = example_point(manifest)
    lo = {s["name"]: s["min"] for s in symbols}
    hi = {s["name"]: s["max"] for s in symbols}
    points = [example, lo, hi] + [{**example, n: hi[n]} for n in hi]
    for name, values in (sizes or {}).items():
        if name in lo:
            points += [{**example, name: v} for v in values if lo[name] <= v <= hi[name]]
    for expr, a, b in bucket_conditions(manifest):
        inner = a + int((b - a) * 0.61) | 1  # odd, off the powers of two
        for target in (a, min(inner, b), b):
            p = _point_for(manifest, expr, target, a, b)
            if p is not None:
                points.append(p)
    unique = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


def uncovered_steps(manifest: dict, points: list[dict]) -> list[str]:
    """Steps (kernel launches) that none of `points` runs: a bucket the test would miss."""
    from aotpack.bundle.manifest import step_runs

    symbols = _symbols(manifest)
    out = []
    for i, step in enumerate(manifest["steps"]):
        if not any(step_runs(step, symbols, p, f"steps[{i}]") for p in points):
            out.append(f"steps[{i}] {manifest['kernels'][step['kernel']]['name']} "
                       f"when {step.get('when')}")
    return out


def shapes_at(manifest: dict, side: str, point: dict) -> list[tuple[int, ...]]:
    from aotpack.bundle.manifest import evaluate

    symbols = _symbols(manifest)
    return [tuple(int(evaluate(d, symbols, point, f"{side} {s['name']}")) for d in s["shape"])
            for s in manifest[side]]


# ------------------------------------------------------------------------- eager factories
def load_factory(spec: str):
    """(eager module on CUDA in eval mode, example inputs) of a `file.py:function` spec, loaded
    as aotpack loads it (the same seeded weights the build stored)."""
    from aotpack.frontend import load_spec

    loaded = load_spec(spec)
    model = loaded.model.module() if hasattr(loaded.model, "graph_signature") else loaded.model
    model = model.to(DEVICE)
    try:
        model.eval()
    except NotImplementedError:
        pass
    return model, list(loaded.inputs or [])


def random_inputs(manifest: dict, point: dict, examples: list, seed: int) -> list:
    """CUDA inputs at `point`: floats ~ N(0, 1); integers uniform in the example's range."""
    import torch

    from aotpack.dtypes import DType

    g = torch.Generator(device=DEVICE).manual_seed(seed)
    out = []
    for i, (spec, shape) in enumerate(zip(manifest["inputs"], shapes_at(manifest, "inputs",
                                                                          point))):
        dtype = DType(spec["dtype"])
        if dtype.is_float:
            out.append(torch.randn(shape, generator=g, device=DEVICE).to(dtype.to_torch()))
        else:
            ex = examples[i] if i < len(examples) else None
            lo, hi = (int(ex.min()), int(ex.max())) if ex is not None and ex.numel() else (0, 1)
            out.append(torch.randint(lo, hi + 1, shape, generator=g, device=DEVICE,
                                     dtype=dtype.to_torch()))
    return out


# ----------------------------------------------------------------------------- comparing
def _eager(module, inputs) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    with torch.no_grad():
        result = module(*inputs)
    return [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


def _upcast(module, inputs) -> list:
    """The module and its floating inputs in float32 (a copy), TF32 off."""
    import copy

    import torch

    m32 = copy.deepcopy(module).float()
    args = [t.float() if t.is_floating_point() else t for t in inputs]
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return _eager(m32, args)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    den = float(b.norm())
    rel = float((a - b).norm()) / den if den > 0 else float((a - b).norm())
    return rel if math.isfinite(rel) else math.inf


def _worst_row(out, ref) -> float:
    """The largest relative error of one row (last dim) among rows not ~0 in `ref`."""
    if out.dim() < 2 or out.numel() == 0:
        return _rel(out, ref) if out.numel() else 0.0
    o = out.double().reshape(-1, out.shape[-1])
    r = ref.double().reshape(-1, ref.shape[-1])
    norms = r.norm(dim=1)
    floor = 1e-3 * float(norms.mean()) + 1e-30
    err = (o - r).norm(dim=1) / norms.clamp_min(floor)
    worst = float(err.max())
    return worst if math.isfinite(worst) else math.inf


def compare_outputs(names, outs, refs, module, inputs, label: str) -> list[str]:
    """Failures (one line each) of `outs` against eager `refs`: dtype, shape, values that are
    not finite where eager's are (outputs are poisoned with NaN before a run, so a tile never
    written shows), integers exactly, floats within TOLERANCE overall and ROW_TOLERANCE per
    row, or, for 16-bit outputs, as close to the float32 model as 1.5x eager is."""
    import torch

    from aotpack.verify import compare

    failures, precise = [], None
    for i, (name, out, ref) in enumerate(zip(names, outs, refs)):
        where = f"{name} @ {label}"
        if out.dtype != ref.dtype or tuple(out.shape) != tuple(ref.shape):
            failures.append(f"{where}: {out.dtype}{tuple(out.shape)} but eager gives "
                            f"{ref.dtype}{tuple(ref.shape)}")
            continue
        if not ref.is_floating_point():
            if not torch.equal(out, ref):
                failures.append(f"{where}: {int((out != ref).sum())} elements differ")
            continue
        bad = ~torch.isfinite(out) & torch.isfinite(ref)
        if bool(bad.any()):
            failures.append(f"{where}: {int(bad.sum())} of {out.numel()} values not finite "
                            f"(first at {tuple(int(x) for x in bad.nonzero()[0])})")
            continue
        check = compare(name, out.float(), ref.float(), TOLERANCE)
        row, row_eager = _worst_row(out, ref), None
        if (not check.ok or row > ROW_TOLERANCE) and ref.dtype in (torch.bfloat16,
                                                                   torch.float16):
            precise = precise or _upcast(module, inputs)
            p = precise[i].to(out.device)
            check = compare(name, out.float(), ref.float(), TOLERANCE, p.float())
            row, row_eager = _worst_row(out, p), _worst_row(ref, p)
        row_ok = row <= ROW_TOLERANCE or (row_eager is not None and row <= 1.5 * row_eager)
        if not check.ok or not row_ok:
            failures.append(f"{where}: rel error {check.rel_error:.3g} (max abs "
                            f"{check.max_abs_error:.3g}), worst row {row:.3g}"
                            + (f" (eager's {row_eager:.3g})" if row_eager is not None else "")
                            + (f"; vs float32: ours {check.rel_error_f32:.3g}, eager "
                               f"{check.eager_rel_error_f32:.3g}"
                               if check.rel_error_f32 is not None else ""))
    return failures


class Runner:
    """One bundle loaded through the C runtime (aotpack.load) and its eager module on CUDA."""

    def __init__(self, bundle, spec: str):
        import aotpack

        self.manifest = manifest_of(bundle)
        self.module, self.examples = load_factory(spec)
        self.model = aotpack.load(bundle)
        self.session = self.model.session()

    def check(self, point: dict, seed: int = 0) -> list[str]:
        """Runs the bundle at `point` twice (the second run replays the CUDA graph of the
        same pointers) and compares with eager; failures as compare_outputs gives them."""
        import torch

        label = " ".join(f"{k}={v}" for k, v in point.items()) or "static"
        inputs = random_inputs(self.manifest, point, self.examples, seed)
        want = [tuple(s) for s in shapes_at(self.manifest, "outputs", point)]
        shapes = [tuple(s) for s in self.model.output_shapes([tuple(t.shape) for t in inputs])]
        if shapes != want:
            return [f"@ {label}: the runtime gives output shapes {shapes}, the manifest {want}"]
        outs = [_poisoned(shape, spec["dtype"])
                for shape, spec in zip(shapes, self.manifest["outputs"])]
        self.session.run(inputs, outs)
        first = [o.clone() for o in outs]
        for o in outs:
            o.copy_(_poisoned(o.shape, None, o.dtype))
        self.session.run(inputs, outs)  # same pointers: the cached plan and its graph
        refs = _eager(self.module, inputs)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        names = [s["name"] for s in self.manifest["outputs"]]
        failures = compare_outputs(names, first, refs, self.module, inputs, label)
        for name, a, b in zip(names, first, outs):
            if not torch.equal(a, b) and not (a.is_floating_point() and
                                              torch.equal(a.isnan(), b.isnan()) and
                                              torch.equal(a.nan_to_num(), b.nan_to_num())):
                failures.append(f"{name} @ {label}: the replayed run differs from the first")
        return failures

    def close(self):
        self.session.close()
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _poisoned(shape, dtype_name, torch_dtype=None):
    """An output buffer full of NaN (integers: a sentinel), so unwritten elements show."""
    import torch

    from aotpack.dtypes import DType

    dt = torch_dtype or DType(dtype_name).to_torch()
    fill = math.nan if dt.is_floating_point else -7
    if dt == torch.bool:
        fill = True
    return torch.full(tuple(shape), fill, dtype=dt, device=DEVICE)
