"""Attention whose values have another head dim than the keys (DeepSeek-V3's MLA: 128 against
192; issue 15): one AttentionOp, run by the masked kernel (without a mask: no mask loads) or
the positional one, in Triton's interpreter against the reference; cross-compiled for sm_90a;
a value dim the kernel does not take (8) is still written out."""
from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
import torch.nn.functional as F  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.kernels import run_reference  # noqa: E402
from aotpack.kernels.spec import SM90, AttentionOp, contiguous  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from program_checks import rel_err, run_reference as run_program  # noqa: E402

BF16 = DType.BF16


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=q.shape[1] != k.shape[1])


@pytest.mark.parametrize("dv,fused", [(16, True), (48, True), (8, False)])
def test_value_dim_other_than_the_keys(dv, fused):
    g = torch.Generator().manual_seed(dv)
    ins = [torch.randn(2, 4, 9, 32, generator=g), torch.randn(2, 2, 9, 32, generator=g),
           torch.randn(2, 2, 9, dv, generator=g)]
    program = compile_graph(to_graph(Sdpa(), ins))
    ops = [o for o in program.ops if isinstance(o, AttentionOp)]
    assert len(ops) == int(fused)
    if fused:
        assert ops[0].v.shape[3] == ops[0].out.shape[3] == dv and ops[0].q.shape[3] == 32
    fresh = [torch.randn(x.shape, generator=g) for x in ins]
    assert rel_err(run_program(program, fresh)[0], Sdpa()(*fresh)) <= 1e-5


def _op(dv, causal=True, mask=False, s=24, t=40):
    from aotpack.passes.lower import broadcast_to

    b, hq, hkv, d = 2, 4, 2, 32
    m = None if not mask else broadcast_to(contiguous("mask", DType.BOOL, (b, 1, 1, t)),
                                           (b, hq, s, t))
    return AttentionOp(contiguous("q", BF16, (b, hq, s, d)), contiguous("k", BF16, (b, hkv, t, d)),
                       contiguous("v", BF16, (b, hkv, t, dv)),
                       contiguous("o", BF16, (b, hq, s, dv)), causal, d ** -0.5, m)


def _env(op):
    g = torch.Generator().manual_seed(0)
    env = {a.storage: torch.randn(math.prod(a.shape), generator=g).to(torch.bfloat16)
           for a in (op.q, op.k, op.v)}
    env["o"] = torch.full((math.prod(op.out.shape),), float("nan"), dtype=torch.bfloat16)
    if op.mask is not None:
        keep = torch.rand(op.mask.shape[0] * op.mask.shape[3], generator=g) > 0.3
        keep[0] = keep[op.mask.shape[3]] = True
        env["mask"] = keep
    if op.kv_limit is not None:
        s, t = op.q.shape[2], op.k.shape[2]
        env["pos"] = torch.stack([torch.arange(s) + 3, torch.arange(s) + t - s]).reshape(-1)
    return env


def _check(op, config=None):
    from support.interpret import run_interpreted_batch

    env = _env(op)
    ref = {k: x.clone() for k, x in env.items()}
    run_reference(op, ref)
    run_interpreted_batch([(op, env, config)])
    torch.testing.assert_close(env["o"].float(), ref["o"].float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dv,causal,mask", [(16, True, False), (48, False, True),
                                            (24, False, False)])
def test_masked_kernel_with_narrower_or_wider_values(dv, causal, mask):
    from aotpack.kernels.triton import attention

    op = _op(dv, causal, mask)
    assert attention.plan(op).fn.__name__ == "attention_fwd_masked_kernel"
    _check(op)


@pytest.mark.parametrize("dv,splits,fixup,seq", [(16, 1, True, 1), (48, 4, True, 1),
                                                 (16, 3, False, 1), (24, 1, True, 20)])
def test_positional_kernel_with_another_value_dim(dv, splits, fixup, seq):
    from aotpack.kernels.triton import attention

    op = dataclasses.replace(_op(dv, False, s=seq, t=80),
                             kv_limit=contiguous("pos", DType.I64, (2, seq)))
    config = dict(attention.default_config(op), SPLITS=splits, FIXUP=fixup)
    _check(op, config)
    assert all(launch.kernel.cubin for launch in attention.compile(op, SM90, config))


def test_value_dim_kernels_cross_compile_and_refuse_what_they_cannot():
    from aotpack.kernels.triton import attention

    for op in (_op(16), _op(48, False, True)):
        assert all(launch.kernel.cubin for launch in attention.compile(op, SM90))
        assert not attention.tma_possible(op)
    with pytest.raises(ValueError, match="value head dim 8 not supported"):
        attention.plan(_op(8))
