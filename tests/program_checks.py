"""Helpers shared by the compiler tests: relative error, "the compiled program run with the
kernel references equals eager PyTorch", the kernel-op kinds of a program, SASS listings, and
the kernel benchmark scripts' --smoke runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.passes import compile_graph


class Fn(torch.nn.Module):
    """A function as a module (forward(*xs) = fn(*xs)): one-line models of the op tests. A
    refusal's source line is the function's own (the innermost user frame), in the test."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def rel_err(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def check_matches_eager(model, example_inputs, tol):
    """Compile `model`, run the program on fresh random inputs with the kernel references, and
    assert every output matches eager PyTorch within `tol`. Returns the program."""
    program = compile_graph(to_graph(model, example_inputs))
    gen = torch.Generator().manual_seed(0)
    fresh = [torch.randn(t.shape, generator=gen).to(t.dtype) for t in example_inputs]
    with torch.no_grad():
        want = model(*fresh)
    want = want if isinstance(want, (tuple, list)) else [want]
    got = run_reference(program, fresh)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert rel_err(g, w) <= tol, rel_err(g, w)
    return program


def kinds(program) -> list[str]:
    return [type(op).__name__ for op in program.ops]


def sass_or_skip(cubin: bytes) -> str:
    """The cubin's SASS listing; skips the test where no cuobjdump exists."""
    from aotpack.kernels.sass import find_cuobjdump
    from support.sass import sass

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (it ships in the triton wheel)")
    return sass(cubin)


def bench_smoke_rows(script: str, json_name: str, out_dir: Path) -> list[dict]:
    """Runs benchmarks/<script> --smoke under Triton's interpreter (tiny shapes, CPU) with
    OUT=out_dir; asserts it exits 0 and returns the "results" rows of its $OUT/<json_name>."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TRITON_INTERPRET="1", OUT=str(out_dir))
    proc = subprocess.run([sys.executable, f"benchmarks/{script}", "--smoke"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out_dir / json_name).read_text())["results"]


def gemm_storage_sizes(op) -> dict:
    """storage → (elements, dtype) that every view of a GemmOp (operands, output, epilogue
    operands) needs."""
    from aotpack.kernels.spec import epilogue_operands

    sizes: dict = {}
    scale = [t for t in (getattr(op, "b_scale", None), getattr(op, "a_scale", None))
             if t is not None]
    for t in [op.a, op.b, op.out] + list(epilogue_operands(op.epilogue)) + scale:
        end = t.offset + sum((d - 1) * s for d, s in zip(t.shape, t.strides)) + 1
        n, _ = sizes.get(t.storage, (0, t.dtype))
        sizes[t.storage] = (max(n, end), t.dtype)
    return sizes


def interpret_gemm_cases(cases: dict, make_env, seed0: int) -> dict:
    """Every (op, config) case run once by the Triton interpreter (one child process):
    name → (op, env), env holding the kernel's output plus ref_out / orig_out copies of the
    poisoned output for the reference run."""
    from support.interpret import run_gemms_interpreted

    runs, results = [], {}
    for i, (name, (op, cfg)) in enumerate(cases.items()):
        env = make_env(op, seed=seed0 + i)
        env["ref_out"] = env[op.out.storage].clone()
        env["orig_out"] = env[op.out.storage].clone()
        runs.append((op, env, cfg, 3))
        results[name] = (op, env)
    run_gemms_interpreted(runs)
    return results
