"""The grouped GEMM of MoE layers (kernels/triton/grouped_mm.py) on the GPU: each config of a
list against torch._grouped_mm, at Mixtral-8x7B's expert shapes (tokens spread evenly over
the experts, as a balanced router does).

    python benchmarks/bench_grouped_mm.py [--tokens 2048] [--top-k 2]

Prints one line per (shape, config): median us and TFLOP/s. Uses Triton's JIT launcher
(run_jit): integer arguments carry only Triton's own divisibility facts, so absolute times
may differ a little from the bundle's; the configs are compared with each other.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import torch  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import GroupedMmOp, TensorArg, contiguous  # noqa: E402
from aotpack.kernels.triton import grouped_mm  # noqa: E402
from compare import median_ms  # noqa: E402

CONFIGS = [
    {},  # the default (TMA at these shapes)
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4},
] + [{"TMA": True, "BLOCK_K": 64, "GROUP_M": 8, "PROGRAMS": 0, **c} for c in (
    {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3, "PROGRAMS": 132},
    {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 4, "PROGRAMS": 132},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4, "PROGRAMS": 132},
    {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3, "GROUP_M": 16},
    {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3, "GROUP_M": 4},
)]


def op_for(rows: int, experts: int, n: int, k: int) -> GroupedMmOp:
    bf16 = DType.BF16
    b = TensorArg("b", bf16, (experts, k, n), (n * k, 1, k))  # nn.Linear's [out, in] weights
    return GroupedMmOp(contiguous("a", bf16, (rows, k)), b,
                       contiguous("offs", DType.I32, (experts,)),
                       contiguous("out", bf16, (rows, n)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--top-k", type=int, default=2)
    args = p.parse_args()
    experts, hidden, inter = 8, 4096, 14336
    rows = args.tokens * args.top_k
    offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * (rows // experts)
    for n, k in ((2 * inter, hidden), (hidden, inter)):
        op = op_for(rows, experts, n, k)
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
        env = {"a": a, "b": w, "offs": offs, "out": out}
        flops = 2.0 * rows * n * k
        want = torch._grouped_mm(a, w.transpose(1, 2), offs=offs)
        ms = median_ms(lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=offs), 5, 20)
        print(f"rows={rows} N={n} K={k} torch._grouped_mm {ms * 1e3:8.1f} us "
              f"{flops / ms / 1e9:6.0f} TFLOP/s", flush=True)
        for cfg in CONFIGS:
            try:
                grouped_mm.run_jit(op, env, cfg)
                err = float((out.float() - want.float()).norm() / want.float().norm())
                ms = median_ms(lambda: grouped_mm.run_jit(op, env, cfg), 5, 20)
                print(f"rows={rows} N={n} K={k} {cfg or 'default'} {ms * 1e3:8.1f} us "
                      f"{flops / ms / 1e9:6.0f} TFLOP/s err {err:.1e}", flush=True)
            except Exception as e:  # a config that does not fit: report and go on
                print(f"rows={rows} N={n} K={k} {cfg} failed: {type(e).__name__}: {e}"[:300])


if __name__ == "__main__":
    main()
