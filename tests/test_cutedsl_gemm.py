"""aotpack's CuTeDSL Hopper GEMM: compiles for sm_90a with no GPU, is a wgmma kernel, and the
manifest slots aotpack derives for it are exactly what CuTeDSL's own host function would pass.

The reference is CuTeDSL's host launch function itself, exported as an object file and run on
the CPU against stub CUDA-runtime entry points (tests/support/cutedsl_hostcapture.py): for
each config and problem shape, every integer / struct / fastdivmod parameter must be byte-equal,
every pointer must be the address we gave, and every TMA descriptor CuTe packed must have our
slot's address, dims, row stride, box and swizzle. Grid, block, cluster, dynamic smem too.
"""
from __future__ import annotations

import struct

import pytest

from aotpack.kernels.cutedsl import build  # noqa: E402  (imports cutlass set up for sm_90a)

if not build.available():
    pytest.skip("nvidia-cutlass-dsl (CuTeDSL) is not installed: "
                "pip install nvidia-cutlass-dsl==4.8.1", allow_module_level=True)

build.import_cutlass()

from aotpack.dtypes import DType  # noqa: E402
from aotpack.passes.fuse_swiglu import GROUP  # noqa: E402
from aotpack.kernels.cutedsl import compile as cc  # noqa: E402
from aotpack.kernels.sass import find_cuobjdump  # noqa: E402
from aotpack.kernels.cutedsl.slots import fastdivmod, pack  # noqa: E402
from aotpack.kernels.spec import (  # noqa: E402
    SM90, FastDivmodSlot, IntSlot, NullSlot, PtrSlot, TensorMapSlot, epilogue_operands,
)
from support import cutedsl_hostcapture as hc  # noqa: E402
from support.cutedsl_gpucheck import make_op as _op  # noqa: E402
from support.sass import count_instructions, sass  # noqa: E402

BASE = {"x": 0x7F0000000000, "w": 0x7F1000000000, "y": 0x7F2000000000,
        "bias": 0x7F3000000000, "res": 0x7F4000000000, "up": 0x7F5000000000,
        "scale": 0x7F6000000000, "scale_n": 0x7F7000000000}


_EPIS = [("bias", "gelu_tanh", "add"), ("silu", "mul"), ("relu",), ("bias", "gelu_erf"), ()]
# (tile_m, tile_n, cluster_m, cluster_n, raster_along_m, epilogue, out dtype): every tile and
# cluster of the candidate space, both rasterisations, three output types.
CONFIGS = [(tm, tn, cm, cn, (i % 3) != 2, _EPIS[i % len(_EPIS)], DType.BF16)
           for i, ((tm, tn), (cm, cn)) in enumerate(
               ((t, c) for t in ((128, 256), (128, 128), (64, 128), (64, 256))
                for c in ((1, 1), (2, 1), (1, 2))))]
CONFIGS += [(128, 128, 1, 1, True, ("bias", "add"), DType.F32),
            (128, 256, 2, 1, True, ("mul",), DType.F16),
            (128, 256, 1, 1, True, ("bias", "scale"), DType.BF16),
            (64, 128, 1, 2, True, ("scale_n", "silu", "add"), DType.BF16),
            # narrow tiles of decode-sized M (tuning/space.py)
            (64, 64, 1, 1, True, ("bias",), DType.BF16),
            (128, 64, 2, 1, True, ("add",), DType.BF16),
            (64, 224, 1, 1, True, ("gelu_tanh",), DType.BF16),
            (128, 224, 1, 2, True, ("scale_n",), DType.BF16),
            (64, 192, 2, 1, False, ("mul",), DType.F16)]
# SwiGLU (w has 2n interleaved rows): every tile that holds whole pairs of 64
SWIGLU_CONFIGS = [(128, 256, 1, 1, True, ("swiglu",), DType.BF16),
                  (128, 128, 2, 1, True, ("swiglu", "scale_n", "add"), DType.BF16),
                  (64, 128, 1, 1, False, ("swiglu", "scale"), DType.F32),
                  (64, 256, 1, 2, True, ("swiglu", "mul"), DType.BF16)]
SHAPES = [(1000, 3000, 520), (100, 64, 64), (4096, 4096, 4096), (8, 1032, 72)]
SWIGLU_SHAPES = [(1000, 3008, 520), (100, 64, 64), (4096, 4096, 4096), (8, 1088, 72)]


@pytest.fixture(scope="module")
def host_libs(tmp_path_factory):
    return {}


def _cfg(op, tm, tn, cm, cn, ram):
    return cc.default_config(op, tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn,
                             raster_along_m=ram)


def test_compiles_sm90a_with_wgmma():
    op = _op(1000, 3000, 520, ("bias", "gelu_tanh"))
    (launch,) = cc.compile(op, SM90)
    k = launch.kernel
    assert k.cubin[:4] == b"\x7fELF" and k.backend == "cutedsl"
    built = cc._built(_cfg(op, 128, 256, 1, 1, True), "bf16", SM90.sm_count)
    assert ".target sm_90a" in built.ptx and "wgmma.mma_async" in built.ptx
    assert k.block == (384, 1, 1) and 0 < k.smem <= SM90.smem_limit
    if find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (it ships in the triton wheel)")
    listing = sass(k.cubin)
    assert count_instructions(listing, "HGMMA") > 0
    assert count_instructions(listing, "STL") == 0  # no register spills


def test_cubin_does_not_depend_on_sm_count():
    """The persistent grid comes from gridDim at run time: a 114-SM part gets the same cubin."""
    op = _op(1000, 3000, 520)
    cfg = _cfg(op, 128, 128, 1, 1, True)
    assert cc._built(cfg, "bf16", 132).cubin == cc._built(cfg, "bf16", 114).cubin


def test_pipeline_state_is_carried_across_tiles():
    """The H200 hang (2026-11-30): the consumer's PipelineState was advanced inside a @cute.jit
    helper and not reassigned, so CuTeDSL did not carry it through the persistent tile loop; each
    tile restarted at (stage 0, phase 0). Source check with CuTeDSL's own loop analysis."""
    from support.cutedsl_checks import uncarried_state
    from aotpack.kernels.cutedsl.gemm import Sm90Gemm

    assert uncarried_state(Sm90Gemm) == []


@pytest.mark.parametrize("tm,tn,cm,cn,ram,steps,out", CONFIGS + SWIGLU_CONFIGS)
def test_no_constant_barrier_phase_in_tile_loop(tm, tn, cm, cn, ram, steps, out):
    """The same bug as the PTX shows it: an mbarrier wait in the tile loop whose phase register
    is reset to a constant after the loop head. Every config of the candidate space."""
    from support.cutedsl_checks import constant_wait_parity

    op = _op(1000, 3000, 520, steps, out)
    built = cc._built(_cfg(op, tm, tn, cm, cn, ram), "bf16", SM90.sm_count)
    assert "mbarrier.try_wait" in built.ptx
    assert constant_wait_parity(built.ptx) == []


def test_constant_phase_check_catches_the_hang():
    """constant_wait_parity flags the pattern the hanging cubins had (abridged from their PTX)."""
    from support.cutedsl_checks import constant_wait_parity

    bad = """\tsetmaxnreg.inc.sync.aligned.u32 \t232;
$L__BB0_66:
\tmov.b32 \t%r745, 0;
\t@%p15 bra \t$L__BB0_73;
\tmov.b32 \t%r678, %r745;
$L__BB0_68:
\tmbarrier.try_wait.parity.shared.b64 P1, [%r212], %r678, 10000000;
\txor.b32 \t%r678, %r678, %r229;
\t@%p20 bra \t$L__BB0_68;
$L__BB0_73:
\t@%p25 bra \t$L__BB0_66;
\tret;
"""
    assert len(constant_wait_parity(bad)) == 1
    good = bad.replace("$L__BB0_66:\n\tmov.b32 \t%r745, 0;\n",
                       "\tmov.b32 \t%r745, 0;\n$L__BB0_66:\n")
    assert constant_wait_parity(good) == []


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn,cm,cn,ram,steps,out", CONFIGS + SWIGLU_CONFIGS)
def test_slots_match_cutedsl_host_function(tm, tn, cm, cn, ram, steps, out, host_libs, tmp_path):
    if not hc.available():
        pytest.skip("no C compiler (cc) to link CuTeDSL's exported host function")
    for m, n, k in SWIGLU_SHAPES if "swiglu" in steps else SHAPES:
        op = _op(m, n, k, steps, out)
        cfg = _cfg(op, tm, tn, cm, cn, ram)
        (launch,) = cc.compile(op, SM90, cfg)
        built = cc._built(cfg, "bf16", cc.max_clusters(cfg, SM90))
        if cfg not in host_libs:
            host_libs[cfg] = hc.build_host_library(built.compiled, str(tmp_path / "host"))
        lib, entry = host_libs[cfg]
        cap = _run_reference(lib, entry, built, op)
        _check_launch(launch, built, cap, cfg)


def _run_reference(lib, entry, built, op):
    m, n = op.out.shape
    k = op.a.shape[1]
    tensors = [hc.HostTensor(BASE["x"], m, k, op.a.strides[0]),
               hc.HostTensor(BASE["w"], op.b.shape[0], k, op.b.strides[0]),
               hc.HostTensor(BASE["y"], m, n, op.out.strides[0])]
    operands = epilogue_operands(op.epilogue)
    ptrs = [BASE[t.storage] for t in operands] + [0] * (3 - len(operands))
    lds = [t.strides[0] if len(t.shape) == 2 else 0 for t in operands] + [0] * (3 - len(operands))
    return hc.run_host(lib, entry, [p.size for p in built.params], tensors, ptrs, lds)


def _check_launch(launch, built, cap, cfg):
    k = launch.kernel
    assert tuple(cap.grid) == launch.grid
    assert tuple(cap.block) == k.block
    assert cap.smem == k.smem
    assert cap.attrs[4][:3] == k.cluster  # cudaLaunchAttributeClusterDimension
    assert len(launch.args) == len(cap.params)
    for i, (slot, got) in enumerate(zip(launch.args, cap.params)):
        where = f"{cfg} param {i} ({slot})"
        if isinstance(slot, IntSlot):  # incl. the u64-lowered {i32, i32} structs
            assert pack(slot) == got, where
        elif isinstance(slot, FastDivmodSlot):
            assert pack(slot)[:10] == got[:10], where  # CuTe leaves the 2 padding bytes unset
        elif isinstance(slot, PtrSlot):
            assert struct.unpack("<Q", got)[0] == BASE[slot.storage] + slot.offset, where
        elif isinstance(slot, NullSlot):
            assert got == bytes(8), where
        elif isinstance(slot, TensorMapSlot):
            assert _decode_cute_tmap(got) == _expect_tmap(slot), where
        else:
            raise AssertionError(f"unexpected slot {slot!r}")


def _decode_cute_tmap(desc: bytes) -> dict:
    """Fields of a rank-2 CUtensorMap as CuTe packs it (offsets measured on CuTeDSL 4.8.1:
    address @0, swizzle in bits 13-14 of the u32 @8, row stride / 16 @12, dims - 1 as u32 @32,
    box - 1 as u8 @55, innermost first)."""
    addr, word, stride16 = struct.unpack_from("<QII", desc, 0)
    d0, d1 = struct.unpack_from("<II", desc, 32)
    return {"address": addr, "swizzle": (word >> 13) & 3, "row_stride_bytes": stride16 * 16,
            "dims": (d1 + 1, d0 + 1), "box": (desc[56] + 1, desc[55] + 1)}


def _expect_tmap(s: TensorMapSlot) -> dict:
    return {"address": BASE[s.storage] + s.offset,
            "swizzle": {"none": 0, "32B": 1, "64B": 2, "128B": 3}[s.swizzle],
            "row_stride_bytes": s.strides[0] * s.dtype.nbytes, "dims": s.dims, "box": s.box}


@pytest.mark.parametrize("tm,tn", [(128, 256), (128, 128), (64, 128), (64, 256), (64, 64),
                                   (64, 224), (128, 224)])
def test_epilogue_coordinates_follow_wgmma_accumulator_layout(tm, tn):
    """The (m, n) the epilogue uses for each accumulator register (the kernel's own acc_coords,
    evaluated on the host) must be where wgmma put that value. Reference: the PTX ISA's
    m64nNk16 f32 accumulator fragment -- in warp w of a warp group, lane l's register pair v
    holds row 16w + l/4 + 8*((v/2)%2), column 8*(v/4) + 2*(l%4) + v%2; warp group g and
    repetition r along M add 64*(g + r) rows. (Slicing partition_C per warp group instead of
    per thread gave every thread the coordinates of thread 0: wrong bias/add/mul operands.)"""
    from support.cutedsl_fragments import fragment_coords
    from aotpack.kernels.cutedsl.gemm import GemmConfig

    cfg = GemmConfig(tile_m=tm, tile_n=tn)
    n_threads = 256 if tm == 128 and tn > 128 else 128  # two consumer warp groups
    threads = sorted(set(range(32)) | {32 * w + 13 for w in range(n_threads // 32)})
    coords = fragment_coords(cfg, threads)
    per_rep = tn // 2  # registers per 64-row repetition
    for t in threads:
        g, w, lane = t // 128, (t % 128) // 32, t % 32
        want = []
        for i in range(len(coords[t])):
            v, r = i % per_rep, i // per_rep
            want.append((64 * (g + r) + 16 * w + lane // 4 + 8 * ((v // 2) % 2),
                         8 * (v // 4) + 2 * (lane % 4) + v % 2))
        assert len(coords[t]) == tm * tn // n_threads
        assert coords[t] == want, f"thread {t}"


@pytest.mark.parametrize("tm,tn", [(128, 256), (128, 128), (64, 128), (64, 256)])
def test_swiglu_pairs_registers_of_one_thread(tm, tn):
    """The kernel's SwiGLU step combines, for each output register at (m, j), the accumulator
    registers at (m, 2G*(j//G) + j%G) (gate) and at that column + G (up), all of the same
    thread (epilogue.swiglu_pairs on the kernel's own fragments, evaluated on the host); and it
    writes every register of the output fragment (whose coordinates the epilogue operands and
    the store use) exactly once."""
    from support.cutedsl_fragments import fragment_coords, swiglu_pair_coords
    from aotpack.kernels.cutedsl.gemm import GemmConfig

    g = 64
    cfg = GemmConfig(tile_m=tm, tile_n=tn, swiglu_group=g)
    threads = (0, 1, 6, 37, 127) + ((130, 255) if (tm, tn) == (128, 256) else ())
    pairs = swiglu_pair_coords(cfg, threads)
    outs = fragment_coords(cfg, threads, output=True)
    for t in threads:
        assert sorted(o for o, _, _ in pairs[t]) == sorted(outs[t])
        assert len(set(outs[t])) == len(outs[t]) == tm * tn // 2 // (256 if tn == 256 and
                                                                      tm == 128 else 128)
        for (m, j), gate, up in pairs[t]:
            assert gate == (m, 2 * g * (j // g) + j % g) and up == (m, gate[1] + g), t
            assert 0 <= j < tn // 2


def test_fastdivmod_reference_values():
    # Bytes measured from CuTeDSL's host code (divisor, multiplier, shift1, shift2).
    assert fastdivmod(1) == (1, 1, 0, 0)
    assert fastdivmod(2) == (2, 1, 1, 0)
    assert fastdivmod(8) == (8, 1, 1, 2)
    assert fastdivmod(12) == (12, 0x55555556, 1, 3)
    for d in (1, 2, 3, 7, 12, 33, 132, 1000, 65537):
        _, mul, s1, s2 = fastdivmod(d)
        for n in (0, 1, d - 1, d, d + 1, 5 * d + 3, 2**20 + 7):
            hi = (n * mul) >> 32
            assert ((hi + ((n - hi) >> s1)) >> s2) == n // d



def test_supports_and_epilogue_mapping():
    op = _op(1000, 3000, 520, ("bias", "gelu_erf", "mul", "add"))
    assert cc.supports(op) is None
    assert cc.epilogue_kinds(op) == ("bias", "gelu_erf", "mul", "add")
    assert cc.supports(_op(1000, 3001, 520)) is not None  # N rows not 16-byte aligned for TMA
    assert cc.supports(_op(1000, 3000, 522)) is not None  # K rows not 16-byte aligned
    assert len(cc.candidates(op)) == 12


def test_supports_scale_and_swiglu():
    op = _op(1000, 3008, 520, ("swiglu", "scale_n", "add"))
    assert cc.supports(op) is None
    assert cc.epilogue_kinds(op) == ("scale_n", "add")
    cfg = cc.default_config(op)
    assert cfg.swiglu_group == GROUP and cfg.out_tile_n == cfg.tile_n // 2  # as fused
    assert len(cc.candidates(op)) == 12  # 128 and 256 tiles both hold whole pairs
    assert cc.epilogue_kinds(_op(8, 64, 64, ("scale", "bias"))) == ("scale", "bias")
    assert "SwiGLU" in cc.supports(_op(1000, 3000, 520, ("swiglu",)))  # 3000 % (2 G) != 0
    from aotpack.kernels.spec import EpScale, EpSwiGLU, GemmOp, contiguous

    bad = _op(8, 128, 64, ("bias",))
    first = GemmOp(bad.a, bad.b, bad.out, (*bad.epilogue, EpSwiGLU(64)))
    assert "first" in cc.supports(first)
    bf16_scale = GemmOp(bad.a, bad.b, bad.out, (EpScale(contiguous("s", DType.BF16, (128,))),))
    assert "f32" in cc.supports(bf16_scale)


def test_swiglu_compiles_without_spills():
    op = _op(4096, 14336, 4096, ("swiglu", "scale_n", "add"))
    (launch,) = cc.compile(op, SM90)
    k = launch.kernel
    assert k.fused_ops == ("linear", "swiglu", "scale_n", "add")
    maps = [s for s in launch.args if isinstance(s, TensorMapSlot)]
    assert maps[1].dims == (28672, 4096) and maps[2].dims == (4096, 14336)
    assert launch.args[3] == IntSlot("u64", 28672 | 4096 << 32)  # B's {N, K}: 2N rows
    if find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (it ships in the triton wheel)")
    listing = sass(k.cubin)
    assert count_instructions(listing, "HGMMA") > 0
    assert count_instructions(listing, "STL") == 0


def test_manifest_kernel_name_is_short():
    """CuTeDSL entry symbols are ~300 characters; the manifest `name` is `cutedsl_gemm_<i>` and
    `entry` stays the real symbol."""
    from aotpack.bundle.writer import _kernel_name

    (launch,) = cc.compile(_op(1000, 3000, 520, ("bias", "gelu_tanh")), SM90)
    k = launch.kernel
    assert len(k.entry) > 100
    assert _kernel_name(k, 3) == "cutedsl_gemm_3"
