"""GEMMs whose output has few tiles for the SMs (gemm_heuristic.tile_starved) on the GPU: the
tile kernel's heuristic config against the split-K kernel's, next to cuBLAS.

    python benchmarks/bench_starved_gemm.py [--shapes 2048x8x4096,256x256x8192]

Shapes (M x N x K): an MoE router (N = 8 experts), small prefills of big projections, a
classifier head over a long K, and a tile-rich control shape. Per shape and kernel: median us
(see below), TFLOP/s, relative error against torch; `*` marks what
choose_config picks now. Triton's JIT launcher (gemm.jit_runner), the bundle's kernels, timed
as the bundle runs them: 20 launches captured in one CUDA graph (the JIT launcher's host
time per launch, about 20-40 us, is longer than these kernels), median of the replays.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import compare  # noqa: E402
from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import SM90, GemmOp, contiguous  # noqa: E402
from aotpack.kernels.triton import gemm  # noqa: E402
from aotpack.kernels.triton.gemm_heuristic import (  # noqa: E402
    choose_config, choose_tile_config, splitk_config,
)


def graph_us(fn) -> float:
    """us per call: 20 calls in one CUDA graph, do_bench's median of its replays."""
    return compare.graph_us(fn, 20, lambda replay: do_bench(replay, warmup=5, rep=50,
                                                            return_mode="median"))


SHAPES = ((2048, 8, 4096), (65, 4096, 4096), (128, 4096, 4096), (128, 14336, 4096),
          (256, 256, 8192), (384, 1000, 2048), (512, 1024, 4096), (2048, 4096, 4096))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=None, help="MxNxK,... (default: the list above)")
    args = p.parse_args()
    shapes = SHAPES if not args.shapes else \
        [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k in shapes:
        bf = DType.BF16
        op = GemmOp(contiguous("a", bf, (m, k)), contiguous("b", bf, (n, k)),
                    contiguous("out", bf, (m, n)))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        env = {"a": a.view(-1), "b": b.view(-1),
               "out": torch.empty(m * n, device="cuda", dtype=torch.bfloat16)}
        want = (a.float() @ b.float().T)
        flops = 2.0 * m * n * k
        us = graph_us(lambda: a @ b.T)
        print(f"{m}x{n}x{k} cuBLAS {us:8.1f} us {flops / us / 1e6:6.0f} TFLOP/s", flush=True)
        chosen = choose_config(m, n, k, bf, SM90)
        for name, cfg in (("tile", choose_tile_config(m, n, k, bf, SM90)),
                          ("splitk", splitk_config(m, n, k, bf, SM90))):
            try:
                run = gemm.jit_runner(op, env, _adapted(op, cfg), sms)
                run()
                out = env["out"].view(m, n).float()
                err = float((out - want).norm() / want.norm())
                us = graph_us(run)
                mark = "*" if cfg == chosen else " "
                print(f"{m}x{n}x{k} {mark}{name:6s} {us:8.1f} us {flops / us / 1e6:6.0f} TFLOP/s "
                      f"err {err:.1e} {cfg}", flush=True)
            except Exception as e:  # report and go on
                print(f"{m}x{n}x{k} {name} failed: {type(e).__name__}: {e}"[:300], flush=True)


def _adapted(op, cfg):
    """A config as config_for would finish it (split-K adapted to the op's operands)."""
    from aotpack.kernels.triton import gemm_splitk
    from aotpack.kernels.triton.gemm_configs import SplitKConfig

    return gemm_splitk.adapt_config(op, cfg) if isinstance(cfg, SplitKConfig) else cfg


if __name__ == "__main__":
    main()
