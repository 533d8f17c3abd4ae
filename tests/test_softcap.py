"""Soft-capped attention (Gemma-2's attn_logit_softcapping: scores = cap * tanh(scores / cap)
before the mask), issue 15: the written-out chain becomes one AttentionOp with `softcap`, the
masked and positional kernels apply the cap (Triton's interpreter against the reference, and
cross-compiled for sm_90a), and attention the kernel does not take is written out with it."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from aotpack.dtypes import DType  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.kernels import run_reference  # noqa: E402
from aotpack.kernels.spec import SM90, AttentionOp, contiguous  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from program_checks import kinds, rel_err, run_reference as run_program  # noqa: E402

BF16 = DType.BF16


class CappedAttention(torch.nn.Module):
    """Gemma-2's eager attention: (q k^T * scale / cap).tanh() * cap + mask, f32 softmax."""

    def __init__(self, cap: float, heads: int = 4, kv_heads: int = 2):
        super().__init__()
        self.cap, self.heads, self.kv_heads = cap, heads, kv_heads

    def forward(self, q, k, v, mask):
        group = self.heads // self.kv_heads
        k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5
        scores = torch.tanh(scores / self.cap) * self.cap + mask
        p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(p, v)


def _inputs(d, dtype, s=12, t=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, s, d, generator=g) * 3  # scores of tens: the cap bends them
    k, v = (torch.randn(2, 2, t, d, generator=g) for _ in range(2))
    window = torch.ones(s, t, dtype=torch.bool).tril() & ~torch.ones(s, t, dtype=torch.bool)\
        .tril(-4)
    mask = torch.zeros(1, 1, s, t).masked_fill(~window, torch.finfo(torch.float32).min)
    return [x.to(dtype) for x in (q, k, v)] + [mask.to(dtype)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_capped_chain_is_one_attention_op_with_the_cap(dtype):
    model = CappedAttention(cap=2.0)
    ins = _inputs(16, dtype)
    program = compile_graph(to_graph(model, ins))
    (op,) = [o for o in program.ops if isinstance(o, AttentionOp)]
    assert op.softcap == 2.0 and math.isclose(op.scale, 0.25) and op.mask is not None
    assert "BmmOp" not in kinds(program)
    fresh = _inputs(16, dtype, seed=1)
    with torch.no_grad():
        want = model(*fresh)
    got = run_program(program, fresh)[0]
    assert rel_err(got, want) <= (1e-5 if dtype == torch.float32 else 2e-2)
    # the cap matters at these scores: the same program without it is far off
    uncapped = run_program(_without_cap(program), fresh)[0]
    assert rel_err(uncapped, want) > 0.1


def _without_cap(program):
    import dataclasses

    ops = [dataclasses.replace(o, softcap=0.0) if isinstance(o, AttentionOp) else o
           for o in program.ops]
    return dataclasses.replace(program, ops=ops)


def test_head_dim_8_is_written_out_with_the_cap():
    """A head dim the kernel does not take (8) is decomposed into batched matmuls: with the
    cap (decompose_attention), not without."""
    model = CappedAttention(cap=2.0)
    ins = _inputs(8, torch.float32)
    program = compile_graph(to_graph(model, ins))
    assert not any(isinstance(o, AttentionOp) for o in program.ops)
    fresh = _inputs(8, torch.float32, seed=2)
    with torch.no_grad():
        want = model(*fresh)
    assert rel_err(run_program(program, fresh)[0], want) <= 1e-5


def _op(causal, mask_dtype=None, t=40, s=24, cap=2.0):
    from aotpack.passes.lower import broadcast_to

    b, hq, hkv, d = 2, 4, 2, 16
    q = contiguous("q", BF16, (b, hq, s, d))
    k, v = contiguous("k", BF16, (b, hkv, t, d)), contiguous("v", BF16, (b, hkv, t, d))
    mask = None if mask_dtype is None else broadcast_to(
        contiguous("mask", mask_dtype, (b, 1, 1, t)), (b, hq, s, t))
    return AttentionOp(q, k, v, contiguous("o", BF16, (b, hq, s, d)), causal, 0.5, mask,
                       softcap=cap)


def _env(op, seed=0):
    g = torch.Generator().manual_seed(seed)
    env = {}
    for arg in (op.q, op.k, op.v):
        env[arg.storage] = (torch.randn(math.prod(arg.shape), generator=g) * 3).to(torch.bfloat16)
    if op.mask is not None:
        b, t = op.mask.shape[0], op.mask.shape[3]
        keep = torch.rand(b * t, generator=g) > 0.3
        keep[0] = keep[t] = True  # every row sees a key
        env["mask"] = keep if op.mask.dtype == DType.BOOL else \
            torch.zeros(b * t).masked_fill(~keep, -1e9).to(op.mask.dtype.to_torch())
    env["o"] = torch.zeros(math.prod(op.out.shape), dtype=torch.bfloat16)
    if op.kv_limit is not None:
        env["pos"] = torch.stack([torch.arange(op.q.shape[2]) + 3,
                                  torch.arange(op.q.shape[2]) + op.k.shape[2] - op.q.shape[2]])\
            .reshape(-1)
    return env


def _check_interpreted(op, config=None):
    import dataclasses

    from support.interpret import run_interpreted_batch

    env = _env(op)
    ref, uncapped = ({k: x.clone() for k, x in env.items()} for _ in range(2))
    run_reference(op, ref)
    run_reference(dataclasses.replace(op, softcap=0.0), uncapped)
    run_interpreted_batch([(op, env, config)])
    torch.testing.assert_close(env["o"].float(), ref["o"].float(), rtol=2e-2, atol=2e-2)
    assert (uncapped["o"].float() - ref["o"].float()).abs().max() > 0.2  # the cap shows


@pytest.mark.parametrize("causal,mask_dtype", [(True, None), (False, None),
                                               (False, DType.BOOL), (True, DType.BF16)])
def test_masked_kernel_caps_the_scores(causal, mask_dtype):
    """Without a mask a capped op runs the masked kernel's MASK_KIND 0 (no mask loads)."""
    from aotpack.kernels.triton import attention

    op = _op(causal, mask_dtype)
    assert attention.plan(op).fn.__name__ == "attention_fwd_masked_kernel"
    assert not attention.tma_possible(op)
    _check_interpreted(op)


@pytest.mark.parametrize("splits,window,seq", [(1, 0, 1), (4, 0, 1), (1, 5, 3), (3, 0, 20)])
def test_positional_kernel_caps_the_scores(splits, window, seq):
    """Gemma-2 generation: a KV cache read up to each query's position, sliding window on
    alternate layers, split key ranges merged."""
    import dataclasses

    from aotpack.kernels.triton import attention

    op = dataclasses.replace(_op(False, None, t=80, s=seq), kv_limit=contiguous(
        "pos", DType.I64, (2, seq)), window=window)
    config = dict(attention.default_config(op), SPLITS=splits)
    _check_interpreted(op, config)


def test_capped_kernels_cross_compile():
    import dataclasses

    from aotpack.kernels.triton import attention

    for op in (_op(True), _op(False, DType.BF16),
               dataclasses.replace(_op(False, t=80, s=1), kv_limit=contiguous(
                   "pos", DType.I64, (2, 1)))):
        launches = attention.compile(op, SM90)
        assert launches and all(launch.kernel.cubin for launch in launches)
        assert "softcap" in launches[0].kernel.fused_ops


def test_a_negative_cap_is_refused():
    from aotpack.kernels.triton import attention

    with pytest.raises(ValueError, match="soft cap must be positive"):
        attention.plan(_op(True, cap=-1.0))


def test_templates_describe_the_cap():
    from aotpack.kernels import template_for

    op = _op(True)
    assert "softcap=2" in template_for(op).describe(op)



class ScaledCap(torch.nn.Module):
    """Factors on both sides of the tanh and a softmax scale: softmax(2 * cap * tanh(s * c /
    cap) [+ mask]) with the mask added before (inside) or after the outer factor."""

    def __init__(self, mask_inside: bool | None):
        super().__init__()
        self.mask_inside = mask_inside

    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(2, 3)) * 0.3
        capped = torch.tanh(s / 1.5) * 1.5
        if self.mask_inside:
            capped = (capped + mask) * 2.0  # the mask scaled with the scores: not the kernel's
        else:
            capped = capped * 2.0 + (mask if self.mask_inside is False else 0.0)
        return torch.matmul(torch.softmax(capped, -1), v)


@pytest.mark.parametrize("mask_inside", [None, False, True])
def test_factors_around_the_tanh(mask_inside):
    """Outside the tanh: 2 * 1.5 = 3 is the cap; inside: 0.3 / 1.5 times the cap is the scale.
    A float mask the outer factor also multiplies is not what the kernel adds: that chain
    stays batched matmuls (and still matches eager)."""
    g = torch.Generator().manual_seed(3)
    ins = [torch.randn(2, 2, 10, 16, generator=g) * 2, torch.randn(2, 2, 10, 16, generator=g),
           torch.randn(2, 2, 10, 16, generator=g), torch.randn(1, 1, 10, 10, generator=g)]
    model = ScaledCap(mask_inside)
    program = compile_graph(to_graph(model, ins))
    ops = [o for o in program.ops if isinstance(o, AttentionOp)]
    if mask_inside:
        assert not ops and "BmmOp" in kinds(program)
    else:
        (op,) = ops
        assert math.isclose(op.softcap, 3.0) and math.isclose(op.scale, 0.3 / 1.5 * 3.0)
    fresh = [torch.randn(x.shape, generator=g) for x in ins]
    with torch.no_grad():
        want = model(*fresh)
    assert rel_err(run_program(program, fresh)[0], want) <= 1e-5
