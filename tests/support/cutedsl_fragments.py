"""Host-side evaluation of the GEMM kernel's register coordinates, for tests: CuTe layouts fold
statically at trace time, so with static thread indices the kernel's own `acc_coords` (and
the SwiGLU register pairing) give plain integers on a machine with no GPU (~0.1 s per thread).
The tests compare them with the PTX ISA's wgmma accumulator fragment layout."""
import cutlass
import cutlass.cute as cute

from aotpack.kernels.cutedsl import epilogue as epi
from aotpack.kernels.cutedsl.gemm import GemmConfig, Sm90Gemm, acc_coords


def _gemm(cfg: GemmConfig) -> Sm90Gemm:
    gemm = Sm90Gemm(cfg)
    gemm.a_dtype = gemm.c_dtype = cutlass.BFloat16
    return gemm


def _coords(mma, thread, tile_m, tile_n):
    ident = cute.make_identity_tensor((tile_m, tile_n, 1))
    cC = cute.local_tile(ident, (tile_m, tile_n), (None, None, None))
    return acc_coords(mma, thread, cC)[(None, None, None, 0, 0, 0)]


def _mn(crd) -> tuple[int, int]:
    return int(crd[0]), int(crd[1])


def fragment_coords(cfg: GemmConfig, threads, output: bool = False) -> dict[int, list]:
    """For consumer threads `threads` (0 = first thread of the first consumer warp group), the
    (m, n) of each accumulator register inside the first tile, in register order; with
    `output`, of each register of the output fragment (SwiGLU: half as wide)."""
    gemm = _gemm(cfg)
    threads = tuple(threads)
    out = {}

    @cute.jit
    def trace():
        mma = gemm._make_tiled_mma(cfg.out_tile_n if output else cfg.tile_n)
        # range_constexpr: unrolled in Python, so every index stays static.
        for t in threads:
            part = _coords(mma, t, cfg.tile_m, cfg.out_tile_n if output else cfg.tile_n)
            regs = []
            for i in cutlass.range_constexpr(cute.size(part)):
                regs.append(_mn(part[i]))
            out[t] = regs

    trace()
    return out


def swiglu_pair_coords(cfg: GemmConfig, threads) -> dict[int, list]:
    """Per thread, (output (m, n), gate (m, n), up (m, n)) of every register pair the kernel's
    SwiGLU step combines (epilogue.swiglu_pairs applied to the kernel's fragments)."""
    gemm = _gemm(cfg)
    threads = tuple(threads)
    out = {}

    @cute.jit
    def trace():
        mma, out_mma = gemm._make_tiled_mma(), gemm._make_tiled_mma(cfg.out_tile_n)
        shape = mma.partition_shape_C((cfg.tile_m, cfg.tile_n))
        pairs = epi.swiglu_pairs(cfg.tile_n, shape[1], cfg.swiglu_group)
        for t in threads:
            full = _coords(mma, t, cfg.tile_m, cfg.tile_n)
            half = _coords(out_mma, t, cfg.tile_m, cfg.out_tile_n)
            regs = []
            for o, g, u in pairs:
                regs.append((_mn(half[o]), _mn(full[g]), _mn(full[u])))
            out[t] = regs

    trace()
    return out
