"""Programmatic dependent launch in the decode path (kernels/triton/pdl.py), without a GPU:
the split-K GEMM the heuristic picks for decode-sized M is marked `pdl` and, in its SASS,
waits (ACQBULK = griddepcontrol.wait) before its first load of a run-time tensor or any store,
requesting its first weight lines into L2 (CCTL.E.PF2) before that where the knob asks; the small
kernels before decode GEMMs release their dependents first (PREEXIT); the knob sizes the
prefetch or turns it all off; the manifest carries the mark. The runtime side (the launch
attribute) is covered by the fake-driver tests in test_runtime_binding.py; on the GPU the
generation tests run whole bundles with it (tests/gpu/test_generation_gpu.py)."""
from __future__ import annotations

import re

import pytest

from aotpack.bundle.manifest import kernel_json
from aotpack.dtypes import DType
from aotpack.kernels.spec import SM90, GemmNormOp, GemmOp, PtrSlot, RMSNormOp, contiguous
from program_checks import sass_or_skip
from support.sass import count_instructions

pytest.importorskip("aotpack.kernels.triton.gemm")
from aotpack.kernels.triton import gemm_norm, gemm_splitk, rmsnorm  # noqa: E402
from aotpack.kernels.triton._common import compile_plan  # noqa: E402
from aotpack.kernels.triton.gemm_configs import cdiv  # noqa: E402
from aotpack.kernels.triton.gemm_heuristic import config_for  # noqa: E402

BF = DType.BF16
KNOB = "AOTPACK_DECODE_PREFETCH_MIB"


def _op(M, n, k, dtype=BF):
    return GemmOp(contiguous("a", BF, (M, k)), contiguous("b", dtype, (n, k)),
                  contiguous("out", BF, (M, n)))


def _first(listing: str, opcode: str) -> int:
    """Address of the first `opcode` instruction in a SASS listing (a large number if none)."""
    m = re.search(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?" + re.escape(opcode) + r"\b",
                  listing, re.MULTILINE)
    return int(m.group(1), 16) if m else 1 << 40


@pytest.mark.parametrize("m,n,k", [(1, 2048, 2048), (8, 3072, 2048), (1, 2048, 8192),
                                   (1, 128256, 2048)])
def test_decode_gemm_prefetches_then_waits(m, n, k, monkeypatch):
    monkeypatch.setenv(KNOB, "8")
    op = _op(m, n, k)
    cfg = config_for(op)
    assert cfg.PDL and cfg.PREFETCH >= 1
    first = gemm_splitk.compile_config(op, cfg)[0]
    assert first.kernel.pdl and kernel_json("k", first.kernel, 0, "")["pdl"] is True
    assert "b" in [s.storage for s in first.args if isinstance(s, PtrSlot)]  # the prefetch's
    listing = sass_or_skip(first.kernel.cubin)
    assert count_instructions(listing, "ACQBULK") == 1
    assert count_instructions(listing, "UTMALDG") > 0
    wait = _first(listing, "ACQBULK")
    assert _first(listing, "CCTL.E.PF2") < wait  # the prefetch runs before the wait...
    for reads_or_writes in ("UTMALDG", "LDG", "STG", "RED", "ATOM"):  # ...everything else after
        assert _first(listing, reads_or_writes) > wait, reads_or_writes


def test_default_is_pdl_without_prefetch(monkeypatch):
    monkeypatch.delenv(KNOB, raising=False)
    cfg = config_for(_op(1, 2048, 2048))
    assert cfg.PDL and cfg.PREFETCH == 0


def test_prefetch_budget_and_knob(monkeypatch):
    op = _op(1, 2048, 8192)  # 256 CTAs x 16 K tiles of 64 x 64 bf16 (8 KiB)
    monkeypatch.setenv(KNOB, "8")
    cfg = config_for(op)
    ctas = cdiv(2048, cfg.BN) * cfg.SPLIT_K  # one row block's (the others read the same)
    run = cdiv(cdiv(8192, cfg.BK), cfg.SPLIT_K)
    assert cfg.PREFETCH == min(run, (8 << 20) // (ctas * cfg.BN * cfg.BK * 2))
    monkeypatch.setenv(KNOB, "100000")
    assert config_for(op).PREFETCH == run  # never past a CTA's own run of K
    monkeypatch.setenv(KNOB, "0.001")
    assert config_for(op).PREFETCH == 1  # a budget asks for at least a tile per CTA
    monkeypatch.setenv(KNOB, "0")
    cfg = config_for(op)
    assert cfg.PDL and cfg.PREFETCH == 0
    first = gemm_splitk.compile_config(op, cfg)[0]
    assert "b" not in [s.storage for s in first.args if isinstance(s, PtrSlot)]  # TMA only
    listing = sass_or_skip(first.kernel.cubin)
    assert count_instructions(listing, "ACQBULK") == 1
    assert count_instructions(listing, "CCTL.E.PF2") == 0


def test_knob_off_is_the_kernel_without_pdl(monkeypatch):
    monkeypatch.setenv(KNOB, "off")
    op = _op(1, 2048, 2048)
    cfg = config_for(op)
    assert not cfg.PDL and cfg.PREFETCH == 0
    first = gemm_splitk.compile_config(op, cfg)[0]
    assert not first.kernel.pdl and "pdl" not in kernel_json("k", first.kernel, 0, "")
    listing = sass_or_skip(first.kernel.cubin)
    assert count_instructions(listing, "ACQBULK") == 0
    assert count_instructions(listing, "CCTL.E.PF2") == 0


@pytest.mark.parametrize("value", ["-1", "lots", "inf", "nan"])
def test_bad_knob_values_are_refused(value, monkeypatch):
    monkeypatch.setenv(KNOB, value)
    with pytest.raises(ValueError, match=KNOB):
        config_for(_op(1, 2048, 2048))


def test_prefetch_needs_pdl():
    op = _op(1, 2048, 2048)
    cfg = config_for(op).with_(PDL=False, PREFETCH=2)
    assert "PREFETCH" in gemm_splitk.supports_config(op, cfg)


def test_kernels_before_decode_gemms_release_their_dependents(monkeypatch):
    """The split-K reduce, the normalizing reduce and the RMSNorm let the next GEMM start its
    prefetch at their first instruction (the attention does too: same helper)."""
    monkeypatch.delenv(KNOB, raising=False)
    op = _op(1, 2048, 2048)
    cfg = config_for(op)
    reduce = gemm_splitk.compile_config(op, cfg)[1]
    x = contiguous("out", BF, (1, 2048))
    norm = RMSNormOp(x, contiguous("w", BF, (2048,)), contiguous("y", BF, (1, 2048)), 1e-5)
    fused = GemmNormOp(op, norm)
    reduce_norm = compile_plan(gemm_norm.reduce_norm_plan(fused, cfg), SM90)
    alone = compile_plan(rmsnorm.plan(norm), SM90)
    for launch in (reduce, reduce_norm, alone):
        assert not launch.kernel.pdl  # they release; they are not dependents themselves
        listing = sass_or_skip(launch.kernel.cubin)
        assert count_instructions(listing, "PREEXIT") == 1, launch.kernel.entry
