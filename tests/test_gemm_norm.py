"""GemmNormOp: a GEMM and the RMSNorm of its output as one op (passes/fuse_gemm_norm.py,
kernels/triton/gemm_norm.py), without a GPU:
- the pass: which (GemmOp, RMSNormOp) pairs it joins and which it must leave;
- numerics of the fused split-K reduce in Triton's interpreter against the torch reference
  (one and two column chunks, residual add and bias, no norm weight, M of 1 and 3);
- cross-compiled launches: a two-launch split-K config normalizes in its reduce, other
  configs append the RMSNorm kernel;
- a decoder model's generation step: the o_proj / down_proj + norm pairs fuse, and the fused
  plan's CPU reference gives the unfused plan's logits bit for bit.
"""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.reference import gemm_norm as reference
from aotpack.kernels.spec import (
    SM90, EpAdd, EpBias, GemmNormOp, GemmOp, PointwiseOp, RMSNormOp, contiguous,
)
from aotpack.passes.fuse_gemm_norm import fuse_gemm_norm

BF, F32 = DType.BF16, DType.F32


def _pair(M, n, k, epilogue=(), weight=True, eps=1e-5):
    g = GemmOp(contiguous("a", BF, (M, k)), contiguous("b", BF, (n, k)),
               contiguous("h", BF, (M, n)), tuple(epilogue))
    w = contiguous("w", BF, (n,)) if weight else None
    return g, RMSNormOp(g.out, w, contiguous("y", BF, (M, n)), eps)


def _pw(x, out):  # the pass looks at what an op reads and writes only
    return PointwiseOp((x,), None, out)


def _program(ops):
    return SimpleNamespace(ops=list(ops), summary={})


# ----------------------------------------------------------------------------- the pass
def test_pass_joins_a_gemm_and_the_norm_of_its_output():
    g, n = _pair(2, 64, 32)
    other = _pw(g.out, contiguous("z", BF, (2, 64)))
    p = fuse_gemm_norm(_program([g, other, n]))
    assert [type(op) for op in p.ops] == [GemmNormOp, PointwiseOp]
    assert p.ops[0] == GemmNormOp(g, n)
    assert p.summary["kernel_ops"] == {"GemmNormOp": 1, "PointwiseOp": 1}


@pytest.mark.parametrize("why", ["output rewritten", "norm output read", "fp8 norm",
                                 "part of the output"])
def test_pass_leaves_pairs_that_cannot_move_together(why):
    g, n = _pair(2, 64, 32)
    between = []
    if why == "output rewritten":  # the norm reads another value than the GEMM wrote
        between = [_pw(g.a, g.out)]
    elif why == "norm output read":  # an op before the norm reads its output storage
        between = [_pw(n.out, contiguous("z", BF, (2, 64)))]
    elif why == "fp8 norm":
        n = RMSNormOp(n.x, n.weight, contiguous("y", DType.F8E4M3, (2, 64)), n.eps,
                      out_scale=contiguous("ys", F32, (2,)))
    else:  # the norm reads the first 32 columns only
        n = RMSNormOp(contiguous("h", BF, (2, 32)), None, contiguous("y", BF, (2, 32)), 1e-5)
    ops = [g, *between, n]
    assert fuse_gemm_norm(_program(ops)).ops == ops


# ----------------------------------------------------------------------------- numerics
def _env(op: GemmNormOp, seed: int):
    gen = torch.Generator().manual_seed(seed)
    g = op.gemm
    (M, k), n = g.a.shape, g.b.shape[0]
    env = {"a": torch.randn(M * k, generator=gen).bfloat16(),
           "b": (torch.randn(n * k, generator=gen) / k ** 0.5).bfloat16(),
           "h": torch.full((M * n,), float("nan")).bfloat16(),
           "y": torch.full((M * n,), float("nan")).bfloat16(),
           "w": (1 + 0.5 * torch.randn(n, generator=gen)).bfloat16(),
           "res": torch.randn(M * n, generator=gen).bfloat16(),
           "bias": torch.randn(n, generator=gen).bfloat16()}
    return env


CASES = {  # name: (M, N, K, epilogue, norm weight, SPLIT_K); N 2100 walks two column chunks
    "plain": (1, 72, 88, "", True, 3),
    "residual": (3, 72, 88, "add", True, 2),
    "bias_residual_two_chunks_no_weight": (2, 2100, 32, "bias,add", False, 2),
}


def _epilogue(kinds: str, M: int, n: int):
    steps = {"bias": EpBias(contiguous("bias", BF, (n,))),
             "add": EpAdd(contiguous("res", BF, (M, n)))}
    return tuple(steps[k] for k in kinds.split(",") if k)


def test_fused_reduce_matches_the_reference_in_the_interpreter():
    from aotpack.kernels.triton.gemm_configs import SplitKConfig
    from support.interpret import run_op_runners_interpreted

    runs = []
    for i, (M, n, k, epi, weight, split) in enumerate(CASES.values()):
        op = GemmNormOp(*_pair(M, n, k, _epilogue(epi, M, n), weight))
        cfg = SplitKConfig(BN=64, BM=16, BK=16, SPLIT_K=split, num_warps=4, num_stages=2)
        runs.append((op, _env(op, seed=i), cfg))
    expected = []
    for op, env, _ in runs:
        ref = {name: t.clone() for name, t in env.items()}
        reference.reference(op, ref)
        expected.append(ref)
    run_op_runners_interpreted(runs)
    for name, (op, env, _), ref in zip(CASES, runs, expected):
        torch.testing.assert_close(env["h"].float(), ref["h"].float(), rtol=2e-2, atol=2e-2,
                                   msg=name)
        # the norm of what the kernel stored: h's last-bit rounding must not hide a norm error
        again = dict(env, y=torch.empty_like(env["y"]))
        from aotpack.kernels.reference import rmsnorm

        rmsnorm.reference(op.norm, again)
        torch.testing.assert_close(env["y"].float(), again["y"].float(), rtol=1e-2, atol=1e-2,
                                   msg=name)


# ----------------------------------------------------------------------------- compile
def test_split_k_normalizes_in_its_reduce_and_tiles_append_the_norm():
    pytest.importorskip("triton")
    from aotpack.kernels.templates import template_for

    op = GemmNormOp(*_pair(1, 2048, 2048, (EpAdd(contiguous("res", BF, (1, 2048))),)))
    t = template_for(op)
    split = {"template": "gemm.triton", "kind": "splitk", "BN": 64, "BM": 16, "BK": 128,
             "SPLIT_K": 4, "num_warps": 4, "num_stages": 4, "TMA": True, "FIXUP": False}
    launches = t.compile(op, split, SM90)
    names = [ln.kernel.entry for ln in launches]
    assert len(launches) == 2 and "splitk_reduce_norm_kernel" in names[1], names
    assert "rmsnorm" in launches[1].kernel.fused_ops and launches[1].grid[0] == 1
    direct = dict(split, SPLIT_K=1)  # one launch finishes the tiles: the norm is its own
    names = [ln.kernel.entry for ln in t.compile(op, direct, SM90)]
    assert len(names) == 2 and "rmsnorm_kernel" in names[1], names


# ----------------------------------------------------------------------------- a real model
def test_a_decoder_step_fuses_its_output_projections_with_the_next_norm(tmp_path):
    """Llama's o_proj (+ residual) feeds post_attention_layernorm and down_proj (+ residual)
    the next layer's input_layernorm (the last one: the final norm): two pairs per layer,
    only the first layer's input norm (after the embedding) stays alone. The fused plan's
    torch references give the unfused plan's logits exactly (same math, other grouping)."""
    pytest.importorskip("transformers")
    from aotpack.executor import new_state, run_reference
    from aotpack.generation.task import GenerationOptions
    from aotpack.passes.fuse_gemm_norm import fuse_gemm_norm
    from aotpack.shared_steps import _load_generation

    spec = tmp_path / "llama.py"
    spec.write_text(
        "import torch, transformers as T\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    cfg = T.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96,\n"
        "        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,\n"
        "        max_position_embeddings=128)\n"
        "    return T.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()\n")
    unfused, loaded = _load_generation(f"{spec}:make", (), (), None, GenerationOptions(64, 2))
    kinds = [type(op).__name__ for op in unfused.ops]
    assert kinds.count("RMSNormOp") == 7 and "GemmNormOp" not in kinds
    fused = copy.deepcopy(unfused)
    fuse_gemm_norm(fused)
    kinds = [type(op).__name__ for op in fused.ops]
    assert kinds.count("GemmNormOp") == 6 and kinds.count("RMSNormOp") == 1, kinds
    assert fused.summary["kernel_ops"]["GemmNormOp"] == 6
    logits = [run_reference(p, list(loaded.inputs), state=new_state(p))[-1]
              for p in (unfused, fused)]
    assert torch.equal(logits[0], logits[1])
