"""KvWriteOp: a decoder layer's query rope + key/value cache write in one kernel.

- the pass (passes/fuse_kv_write.py) forms one per layer of a generation step, and leaves the
  four ops alone when the rotated keys are read elsewhere;
- the kernel, in Triton's interpreter, matches the reference, and the reference matches the
  four ops it replaces (RopeOp x2, ScatterRowsOp x2), at decode and prefill shapes, with
  per-sequence and shared cos/sin tables and cache rows outside the table (skipped).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.reference import view
from aotpack.kernels.spec import (
    AttentionOp, KvWriteOp, RopeOp, ScatterRowsOp, TensorArg, contiguous,
)
from aotpack.kernels.templates import template_for
from aotpack.passes.fuse_kv_write import fuse_kv_write
from aotpack.program import Storage

BF16 = DType.BF16


def _layer(b, s, hq, hkv, d, n, per_seq=True):
    """The four ops of one layer as lowering writes them, over a fused qkv [B*S, (Hq+2Hkv)*D]
    output, plus the attention reading them; and the storages."""
    width = (hq + 2 * hkv) * d
    qkv = "qkv"

    def heads(h, offset):  # [B, H, S, D] view of the qkv rows
        return TensorArg(qkv, BF16, (b, h, s, d), (s * width, d, width, 1), offset)

    table = (b, s, d) if per_seq else (s, d)
    cos, sin = contiguous("cos", BF16, table), contiguous("sin", BF16, table)
    q_rot = contiguous("q_rot", BF16, (b, hq, s, d))
    k_rot = TensorArg("k_rot", BF16, (b, hkv, s, d), (s * hkv * d, d, hkv * d, 1))
    rows = contiguous("rows", DType.I64, (b * s,))
    k_cache = contiguous("cache.k", BF16, (n, hkv * d))
    v_cache = contiguous("cache.v", BF16, (n, hkv * d))
    ops = [RopeOp(heads(hq, 0), cos, sin, q_rot),
           RopeOp(heads(hkv, hq * d), cos, sin, k_rot),
           ScatterRowsOp(rows, contiguous("k_rot", BF16, (b * s, hkv * d)), k_cache),
           ScatterRowsOp(rows, TensorArg(qkv, BF16, (b * s, hkv * d), (width, 1),
                                         (hq + hkv) * d), v_cache)]
    t = n // b
    cache_view = TensorArg("cache.k", BF16, (b, hkv, t, d), (t * hkv * d, d, hkv * d, 1))
    att = AttentionOp(q_rot, cache_view, dataclasses.replace(cache_view, storage="cache.v"),
                      contiguous("att", BF16, (b, hq, s, d)), False, d ** -0.5)
    storages = {name: Storage(name, kind, dt, shape) for name, kind, dt, shape in (
        ("qkv", "intermediate", BF16, (b * s * width,)), ("cos", "intermediate", BF16, table),
        ("sin", "intermediate", BF16, table), ("q_rot", "intermediate", BF16, (b, hq, s, d)),
        ("k_rot", "intermediate", BF16, (b, s, hkv, d)), ("rows", "input", DType.I64, (b * s,)),
        ("cache.k", "state", BF16, (n, hkv * d)), ("cache.v", "state", BF16, (n, hkv * d)),
        ("att", "intermediate", BF16, (b, hq, s, d)))}
    return ops + [att], storages


def _env(storages, b, s, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    env = {}
    for name, st in storages.items():
        numel = 1
        for x in st.shape:
            numel *= x
        if st.dtype == DType.I64:
            continue
        env[name] = torch.randn(numel, generator=g).to(st.dtype.to_torch())
    rows = torch.randperm(n, generator=g)[:b * s]
    rows[0] = -1  # outside the table: skipped
    if b * s > 2:
        rows[-1] = n
    env["rows"] = rows.clone()
    return env


def test_pass_fuses_a_layer_and_the_reference_matches_the_four_ops():
    ops, storages = _layer(2, 3, 4, 2, 16, 12)
    fused = fuse_kv_write(list(ops), dict(storages))
    assert [type(o) for o in fused] == [KvWriteOp, AttentionOp]
    env = _env(storages, 2, 3, 12)
    want = {k: v.clone() for k, v in env.items()}
    for op in ops[:4]:
        template_for(op).reference(op, want)
    template_for(fused[0]).reference(fused[0], env)
    for name in ("q_rot", "cache.k", "cache.v"):
        assert torch.equal(env[name], want[name]), name


def test_pass_keeps_the_ops_when_rotated_keys_are_read_elsewhere():
    ops, storages = _layer(1, 1, 4, 2, 16, 8)
    reader = RopeOp(ops[1].out, ops[1].cos, ops[1].sin, contiguous("other", BF16, (1, 2, 1, 16)))
    storages["other"] = Storage("other", "intermediate", BF16, (1, 2, 1, 16))
    kept = fuse_kv_write(ops[:4] + [reader] + ops[4:], dict(storages))
    assert not any(isinstance(o, KvWriteOp) for o in kept)


def test_pass_keeps_accumulating_scatters():
    ops, storages = _layer(1, 1, 4, 2, 16, 8)
    ops[3] = dataclasses.replace(ops[3], reduce="sum")
    kept = fuse_kv_write(list(ops), dict(storages))
    assert not any(isinstance(o, KvWriteOp) for o in kept)


def test_pass_keeps_the_ops_when_something_between_writes_their_input():
    ops, storages = _layer(1, 1, 4, 2, 16, 8)
    overwrite = ScatterRowsOp(ops[2].rows, TensorArg("qkv", BF16, (1, 16), (16, 1)),
                              contiguous("qkv", BF16, (1, 16)))
    kept = fuse_kv_write([ops[0], ops[1], overwrite] + ops[2:], dict(storages))
    assert not any(isinstance(o, KvWriteOp) for o in kept)


@pytest.mark.parametrize("b,s,hq,hkv,d,per_seq", [
    (1, 1, 8, 2, 64, True),     # decode, one sequence
    (3, 1, 4, 4, 32, True),     # decode, a batch, no GQA
    (2, 5, 6, 2, 16, False),    # a prefill, one cos/sin table for every sequence
    (1, 40, 4, 2, 128, True),   # a longer prefill: several row blocks
])
def test_kernel_matches_reference_interpreted(b, s, hq, hkv, d, per_seq):
    from support.interpret import run_interpreted_batch

    n = b * s + 7
    ops, storages = _layer(b, s, hq, hkv, d, n, per_seq)
    op = fuse_kv_write(list(ops), dict(storages))[0]
    assert isinstance(op, KvWriteOp)
    env = _env(storages, b, s, n, seed=b * 100 + s)
    want = {k: v.clone() for k, v in env.items()}
    template_for(op).reference(op, want)
    env["q_rot"].fill_(float("nan"))  # every query element must be written
    config = template_for(op).default_config(op, None)
    run_interpreted_batch([(op, env, {k: v for k, v in config.items() if k != "template"})])
    assert torch.equal(view(env, op.out), view(want, op.out))
    # cache rows named by `rows` hold the new keys/values; rows outside, and rows not named,
    # keep what they held (want started from the same values)
    assert torch.equal(env["cache.k"], want["cache.k"])
    assert torch.equal(env["cache.v"], want["cache.v"])


def test_kernel_compiles_for_sm90_at_decode_and_prefill_shapes():
    """The interpreter accepts code the compiler refuses (an if whose branches give one name
    two types): cross-compile the cubin too."""
    from aotpack.kernels.spec import SM90

    for b, s, per_seq in ((1, 1, True), (2, 5, False)):
        ops, storages = _layer(b, s, 8, 2, 64, b * s + 7, per_seq)
        op = fuse_kv_write(list(ops), dict(storages))[0]
        template = template_for(op)
        launches = template.compile(op, template.default_config(op, SM90), SM90)
        assert len(launches) == 1 and launches[0].kernel.cubin


def test_every_layer_of_a_generation_step_writes_its_cache_in_one_op():
    """The tiny Llama's step (benchmarks/generate_models.py): one KvWriteOp per layer, all
    reading one computation of the cache rows (the frontend emits it per index_put; CSE
    merges them, equal helper constants included)."""
    import sys
    from pathlib import Path

    from aotpack.builder import load_program
    from aotpack.generation.task import GenerationOptions

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    program = load_program("benchmarks/generate_models.py:tiny", dtype="bf16",
                           generation=GenerationOptions(max_seq_len=64, max_batch=2),
                           measure_error=False)
    kinds = [type(op).__name__ for op in program.ops]
    assert kinds.count("KvWriteOp") == 2, kinds
    assert "RopeOp" not in kinds and "ScatterRowsOp" not in kinds, kinds
    writes = [op for op in program.ops if isinstance(op, KvWriteOp)]
    assert len({op.rows.storage for op in writes}) == 1


def test_pass_keeps_the_ops_when_one_storage_is_both_read_and_written():
    """One kernel reads and writes at once: the values read from the key cache's storage, or
    both caches in one storage, keep the four ops (in order, each sees the other's writes)."""
    ops, storages = _layer(1, 1, 4, 2, 16, 8)
    reads_cache = dataclasses.replace(ops[3], values=TensorArg("cache.k", BF16, (1, 32), (32, 1)))
    kept = fuse_kv_write(ops[:3] + [reads_cache] + ops[4:], dict(storages))
    assert not any(isinstance(o, KvWriteOp) for o in kept)
