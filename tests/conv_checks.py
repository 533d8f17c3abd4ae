"""Helpers of tests/test_conv.py (and of other kernels' tests): run a program op by op with the
torch references and check some of its kernels (convolution and pooling by default) in
Triton's interpreter against them."""
from __future__ import annotations

import torch

from aotpack.executor import _empty
from aotpack.kernels import run_reference
from aotpack.kernels.reference import view
from aotpack.kernels.spec import ConvOp, PoolOp


def reference_envs(program, inputs, kinds=(ConvOp, PoolOp)):
    """[(op, env before op)] for every op of `kinds`, and each one's output right after it
    (not at the end: a later op may write the same storage in place, as a scatter into the
    table of the scatter before it does)."""
    env = {}
    for name, t in zip(program.inputs, inputs):
        env[name] = t.contiguous().reshape(-1)
    for name, w in program.weights.items():
        env[name] = w.detach().contiguous().reshape(-1)
    for st in program.storages.values():
        if st.name not in env:
            env[st.name] = _empty(st, True)
    jobs, after = [], []
    for op in program.ops:
        if isinstance(op, kinds):
            before = {k: v.clone() for k, v in env.items()}
            jobs.append((op, before))
        run_reference(op, env)
        if isinstance(op, kinds):
            after.append(view(env, op.out).clone())
    return jobs, after


def check_kernels_interpreted(program, inputs, tol=2e-2, configs=None,
                              kinds=(ConvOp, PoolOp), poison=True):
    """Every op of `kinds` in `program` run by its Triton kernel in the interpreter (inputs as
    the references computed them, the output poisoned unless `poison` is False: an op that
    writes part of its output in place) matches its reference output.
    Returns the number of ops checked."""
    from support.interpret import run_interpreted_batch

    jobs, wants = reference_envs(program, inputs, kinds)
    batch = []
    for op, env in jobs:
        if poison:  # NaN, or for integers the most negative value (bools: not poisoned)
            out = view(env, op.out)
            if out.is_floating_point():
                out.fill_(float("nan"))
            elif out.dtype != torch.bool:
                out.fill_(torch.iinfo(out.dtype).min)
        batch.append((op, env, (configs or {}).get(type(op).__name__)))
    run_interpreted_batch(batch)
    for (op, env), want in zip(jobs, wants):
        got, want = view(env, op.out).double(), want.double()
        assert not got.isnan().any(), f"{type(op).__name__} left NaN in its output"
        diff = torch.where(got == want, 0.0, got - want)  # (equal infinities: no error)
        err = (diff.norm() / want[want.isfinite()].norm().clamp_min(1e-12)).item()
        assert err <= tol, (type(op).__name__, getattr(op, "kernel", ""), err)
    return len(jobs)
