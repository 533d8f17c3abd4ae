"""Written-out attention with several terms between its products (passes/attention_terms.py,
issue 15): a bias plus a padding mask (MPNet), a bias plus a masked_fill (MPT), BLOOM's 3-D
baddbmm over [B*H, S, T] scores with ALiBi and a 4-D mask. Each becomes one AttentionOp: the
terms the heads share are its mask, those that vary by head its bias (never a [B, H, S, T]
sum), one per model, shared by the layers; it matches eager, and the masked kernel adds the
bias (Triton's interpreter against the reference). What does not broadcast to the scores
stays batched matmuls."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from aotpack.frontend import to_graph  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from program_checks import kinds, rel_err, run_reference  # noqa: E402

MIN = torch.finfo(torch.float32).min


def _qkv(b=2, h=3, s=10, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g) for _ in range(3)]


class BiasAndMask(torch.nn.Module):
    """MPNet: scores / sqrt(d) + position bias [1, H, S, T] + padding mask [B, 1, 1, T]."""

    def forward(self, q, k, v, bias, pad):
        scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        scores = scores + bias
        scores = scores + (1.0 - pad[:, None, None, :]) * MIN
        return torch.matmul(scores.softmax(-1), v)


class BiasThenFill(torch.nn.Module):
    """MPT: scores * scale + ALiBi [H, 1, T], masked_fill(bool [B, 1, S, T], min), a scale
    after the bias (it multiplies the bias too)."""

    def forward(self, q, k, v, slopes, masked):
        alibi = slopes[:, None, None] * torch.arange(k.shape[2], dtype=q.dtype)
        scores = (torch.matmul(q, k.transpose(-1, -2)) + alibi) * 0.3
        scores = scores.masked_fill(masked, MIN)
        return torch.matmul(torch.softmax(scores, -1), v)


def bloom_mask(pad, s):
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    keep = causal[None, None] & pad.bool()[:, None, None, :]
    return torch.where(keep, 0.0, MIN)


def bloom_attention(q, k, v, alibi, mask):
    b, h, s, d = q.shape
    q3, k3, v3 = (x.reshape(b * h, s, d) for x in (q, k, v))
    scores = alibi.reshape(b * h, 1, s).baddbmm(q3, k3.transpose(1, 2), alpha=d ** -0.5)
    p = (scores.view(b, h, s, s) + mask).softmax(-1)
    return torch.bmm(p.view(b * h, s, s), v3).view(b, h, s, d)


class Bloom3d(torch.nn.Module):
    """BLOOM: baddbmm(alibi [B*H, 1, T], q, k^T) over [B*H, S, T], viewed [B, H, S, T] for
    the causal + padding mask, softmax, back to 3-D for the bmm with v."""

    def forward(self, q, k, v, alibi, pad):
        return bloom_attention(q, k, v, alibi, bloom_mask(pad, q.shape[2]))


def _pad(b=2, t=10):
    pad = torch.ones(b, t)
    pad[1, 7:] = 0
    return pad


CASES = {
    "bias_and_mask": (BiasAndMask, lambda q: (torch.randn(1, 3, 10, 10), _pad())),
    "bias_then_fill": (BiasThenFill, lambda q: (
        torch.tensor([0.5, 0.25, 0.125]),
        torch.ones(10, 10, dtype=torch.bool).triu(1)[None, None].expand(2, 1, 10, 10)
        | (_pad() == 0)[:, None, None, :])),
    "bloom_3d": (Bloom3d, lambda q: (torch.randn(2, 3, 1, 10), _pad())),
}


@pytest.mark.parametrize("case", list(CASES))
def test_several_terms_become_one_attention(case):
    cls, extra = CASES[case]
    q, k, v = _qkv()
    inputs = (q, k, v, *extra(q))
    program = compile_graph(to_graph(cls(), inputs))
    ops = kinds(program)
    assert "AttentionOp" in ops and "BmmOp" not in ops and "SoftmaxOp" not in ops
    attention = next(op for op in program.ops if type(op).__name__ == "AttentionOp")
    # the shared terms repeat over the heads, the per-head ones over batch or query rows
    assert attention.mask.strides[1] == 0 and attention.bias.dtype.is_float
    assert 0 in attention.bias.strides[:3]
    q2, k2, v2 = _qkv(seed=1)
    fresh = (q2, k2, v2, *extra(q2))
    with torch.no_grad():
        want = cls()(*fresh)
    got = run_reference(program, list(fresh))[0]
    # rows whose keys are all masked are zeros in both (softmax of all-MIN rows averages,
    # but every case here keeps key 0 for every row)
    assert rel_err(got, want) < 1e-4


def test_layers_share_one_sum():
    """Two layers of BLOOM's form over the same ALiBi and mask (each layer casts and adds
    them again): one sum, read by both."""

    class TwoLayers(torch.nn.Module):
        def forward(self, q, k, v, alibi, pad):
            mask = bloom_mask(pad, q.shape[2])
            first = bloom_attention(q, k, v, alibi, mask)
            return bloom_attention(first, k, v, alibi, mask)

    q, k, v = _qkv()
    program = compile_graph(to_graph(TwoLayers(), (q, k, v, torch.randn(2, 3, 1, 10), _pad())))
    operands = {(op.mask.storage, op.bias.storage) for op in program.ops
                if type(op).__name__ == "AttentionOp"}
    assert kinds(program).count("AttentionOp") == 2 and len(operands) == 1


class FiniteCausalAndPadding(torch.nn.Module):
    """GPT-J's form: where(causal, s, min), scaled, plus a padding mask. With left padding a
    query row sees no unpadded key: torch averages it over every key (all at about min), so
    the causal part must stay a term (the kernel's flag would average the past keys only)."""

    def __init__(self, s):
        super().__init__()
        self.register_buffer("causal", torch.ones(s, s, dtype=torch.bool).tril()[None, None])

    def forward(self, q, k, v, pad):
        w = torch.where(self.causal, torch.matmul(q, k.transpose(-1, -2)), torch.tensor(MIN))
        w = w / q.shape[-1] ** 0.5 + (1.0 - pad[:, None, None, :]) * MIN
        return torch.matmul(w.softmax(-1), v)


def test_rows_the_terms_hide_everywhere_match_torch():
    q, k, v = _qkv(s=8)
    pad = torch.ones(2, 8)
    pad[1, :3] = 0  # left padding: rows 0..2 of batch 1 see no key
    model = FiniteCausalAndPadding(8)
    program = compile_graph(to_graph(model, (q, k, v, pad)))
    assert "AttentionOp" in kinds(program)
    with torch.no_grad():
        want = model(q, k, v, pad)
    assert rel_err(run_reference(program, [q, k, v, pad])[0], want) < 1e-5


class NotBroadcast(torch.nn.Module):
    """A term over the query rows only ([S, 1] per batch and head, added twice): still a
    valid broadcast; a term of another batch size is not, and is left as it is."""

    def forward(self, q, k, v, bias, other):
        scores = torch.matmul(q, k.transpose(-1, -2)) + bias
        scores = scores + other
        return torch.matmul(scores.softmax(-1), v)


def test_a_term_wider_than_the_scores_leaves_batched_matmuls():
    q, k, v = _qkv(b=1)
    inputs = (q, k, v, torch.randn(1, 3, 10, 10), torch.randn(2, 1, 10, 10))
    program = compile_graph(to_graph(NotBroadcast(), inputs))
    assert "AttentionOp" not in kinds(program)
    with torch.no_grad():
        want = NotBroadcast()(*inputs)
    assert rel_err(run_reference(program, list(inputs))[0], want) < 1e-4


def test_the_masked_kernel_adds_the_bias():
    """A padding mask shared by the heads [B, 1, 1, T] and an ALiBi-like per-head bias
    [1, H, 1, T] (stride-0 views), with and without the causal flag and a soft cap: the
    masked kernel in Triton's interpreter against the reference."""
    import math

    pytest.importorskip("triton")
    from aotpack.dtypes import DType
    from aotpack.kernels import run_reference as run_op_reference
    from aotpack.kernels.spec import AttentionOp, TensorArg, contiguous
    from aotpack.kernels.triton import attention
    from support.interpret import run_interpreted_batch

    b, h, s, t, d = 2, 3, 20, 20, 32
    bf16 = DType.BF16
    jobs, refs = [], []
    for causal, softcap in ((False, 0.0), (True, 0.0), (True, 5.0)):
        op = AttentionOp(*(contiguous(n, bf16, (b, h, s, d)) for n in "qkv"),
                         contiguous("o", bf16, (b, h, s, d)), causal, d ** -0.5,
                         TensorArg("pad", DType.F32, (b, h, s, t), (t, 0, 0, 1)),
                         softcap=softcap,
                         bias=TensorArg("alibi", DType.F32, (b, h, s, t), (0, t, 0, 1)))
        assert attention.plan(op).fn.__name__ == "attention_fwd_masked_kernel"
        g = torch.Generator().manual_seed(len(jobs))
        env = {n: torch.randn(b * h * s * d, generator=g).to(torch.bfloat16) for n in "qkv"}
        pad = torch.zeros(b, t)
        pad[1, 13:] = float("-inf")
        env.update(o=torch.zeros(b * h * s * d, dtype=torch.bfloat16), pad=pad.reshape(-1),
                   alibi=(-torch.tensor([0.5, 0.25, 0.125])[:, None]
                          * torch.arange(t)).reshape(-1))
        ref = {k: x.clone() for k, x in env.items()}
        run_op_reference(op, ref)
        without = {k: x.clone() for k, x in env.items()}
        import dataclasses
        run_op_reference(dataclasses.replace(op, bias=None), without)
        assert (without["o"].float() - ref["o"].float()).abs().max() > 0.1  # the bias shows
        jobs.append((op, env, None))
        refs.append(ref)
    run_interpreted_batch(jobs)
    for (_, env, _), ref in zip(jobs, refs):
        torch.testing.assert_close(env["o"].float(), ref["o"].float(), rtol=2e-2, atol=2e-2)
    assert math.isfinite(float(jobs[0][1]["o"].float().abs().max()))
    (launch,) = attention.compile(jobs[-1][0])  # cross-compiled for sm_90a
    assert launch.kernel.cubin[:4] == b"\x7fELF"


class BoolAdded(torch.nn.Module):
    """A bool tensor added to the scores is 1.0 where True (not a keep mask)."""

    def forward(self, q, k, v, bias):
        causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        scores = torch.matmul(q, k.transpose(-1, -2)) + causal + bias
        return torch.matmul(scores.softmax(-1), v)


def test_a_bool_added_to_the_scores_is_a_number():
    q, k, v = _qkv()
    inputs = (q, k, v, torch.randn(1, 3, 10, 10))
    program = compile_graph(to_graph(BoolAdded(), inputs))
    with torch.no_grad():
        want = BoolAdded()(*inputs)
    assert rel_err(run_reference(program, list(inputs))[0], want) < 1e-5
