"""Run aotpack's Triton kernels through Triton's CPU interpreter (numerics checks without a GPU).

Interpretation is only reliable in a process that had TRITON_INTERPRET=1 before triton was
imported (aotpack/kernels/triton/_interpret.py says why). So each function here runs its jobs
in this process when that is already so, and otherwise in one child Python started with
TRITON_INTERPRET=1: the op dataclasses and the CPU tensors travel through a temporary
torch.save file and the results are copied back into the caller's tensors. One child for many
jobs: its start-up is ~2 s. Triton 3.6's interpreter is patched first (`patch_interpreter`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]


def run_interpreted_batch(jobs, timeout: float = 1800) -> None:
    """jobs: [(op, env, config or None[, point])]; every env (storage -> flat CPU tensor) is
    updated in place with what the kernel wrote. A symbolic op needs its `point` (the dims'
    values) and a complete config."""
    _run([("plan", job) for job in jobs], timeout)


def run_gemms_interpreted(cases, timeout: float = 1800) -> None:
    """cases: [(GemmOp, env, GemmConfig or None, num_programs[, point])], run by the GEMM's
    own launcher (gemm.jit_runner; None: the heuristic's config). A small `num_programs` makes
    every program walk several tiles, as on the GPU."""
    _run([("gemm", case) for case in cases], timeout)


def run_op_runners_interpreted(cases, timeout: float = 1800) -> None:
    """cases: [(op, env, config[, point])], run by the op's kernel module's own
    `jit_runner(op, env, config[, point])` (the ops whose launches share a workspace, e.g.
    GemmNormOp's split-K partials and their reduce)."""
    _run([("runner", case) for case in cases], timeout)


def _run(jobs, timeout: float) -> None:
    if not jobs:
        return
    from aotpack.kernels.triton._interpret import in_interpreter_process

    if in_interpreter_process():
        _run_here(jobs)
        return
    import torch

    with tempfile.TemporaryDirectory(prefix="aotpack-interp-") as tmp:
        job_file, result_file = os.path.join(tmp, "jobs.pt"), os.path.join(tmp, "envs.pt")
        torch.save(jobs, job_file)
        # importable in the child as here: aotpack from the checkout, this module from tests/
        path = [str(_TESTS.parent), str(_TESTS), os.environ.get("PYTHONPATH")]
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(filter(None, path)))
        proc = subprocess.run([sys.executable, "-m", __spec__.name, job_file, result_file],
                              env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError("interpreter child failed:\n" + proc.stderr[-6000:])
        envs = torch.load(result_file, weights_only=False)
    for (_, (_, env, *_)), result in zip(jobs, envs):
        for name, tensor in env.items():
            tensor.copy_(result[name])


def _run_here(jobs) -> None:
    from aotpack.kernels.templates import template_for
    from aotpack.kernels.triton import gemm
    from aotpack.kernels.triton._interpret import patch_interpreter

    patch_interpreter()
    for kind, (op, env, config, *rest) in jobs:
        if kind == "gemm":
            num_programs, *point = rest
            gemm.jit_runner(op, env, config or gemm.config_for(op), num_programs, *point)()
        elif kind == "runner":
            template_for(op).triton().jit_runner(op, env, config, *rest)()
        else:  # the registry names each op's kernel module; rest: the point of a symbolic op
            template_for(op).triton().run_plan_interpreted_here(op, env, config, *rest)


def _child_main(job_file: str, result_file: str) -> None:
    import torch

    from aotpack.kernels.triton._interpret import in_interpreter_process

    if not in_interpreter_process():
        raise SystemExit("aotpack interpreter child: TRITON_INTERPRET=1 was not in effect")
    jobs = torch.load(job_file, weights_only=False)
    _run_here(jobs)
    torch.save([env for _, (_, env, *_) in jobs], result_file)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
