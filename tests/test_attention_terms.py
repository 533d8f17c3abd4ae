"""Written-out attention with several terms between its products (passes/attention_terms.py,
issue 15): a bias plus a padding mask (MPNet), a bias plus a masked_fill (MPT), BLOOM's 3-D
baddbmm over [B*H, S, T] scores with ALiBi and a 4-D mask. Each becomes one AttentionOp whose
mask is the terms' f32 sum (one per model, shared by the layers), and matches eager; what
does not broadcast to the scores stays batched matmuls."""
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
    assert attention.mask is not None and attention.mask.dtype.value == "f32"
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
    masks = {op.mask.storage for op in program.ops if type(op).__name__ == "AttentionOp"}
    assert kinds(program).count("AttentionOp") == 2 and len(masks) == 1


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
