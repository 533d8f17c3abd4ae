"""The routing sort (kernels/triton/routing.py sort_kernel) on the GPU: a MoE prefill's expert
ids (one row of T*k int64 in 0..E-1, many ties) and a few other rows, per config against
torch.sort(stable=True).

    python benchmarks/bench_sort.py

Prints one line per (shape, config): us per sort, from a CUDA graph of 20 launches (Triton's
JIT launcher, run_jit, costs more than these kernels on the host), median of 20 replays."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import torch  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import SortOp, contiguous  # noqa: E402
from aotpack.kernels.triton import routing  # noqa: E402
from compare import graph_us  # noqa: E402

CONFIGS = [{}] + [{"BLOCK_I": i, "BLOCK_J": j, "num_warps": w}
                  for i in (16, 32, 64) for j in (128, 256) for w in (2, 4)]


def main() -> None:
    for rows, n, hi in ((1, 4096, 8), (1, 2048, 8), (1, 16384, 64), (4, 1000, 1000)):
        x = torch.randint(0, hi, (rows, n), device="cuda", dtype=torch.int64)
        want = torch.sort(x, dim=-1, stable=True).indices
        us = graph_us(lambda: torch.sort(x, dim=-1, stable=True))
        print(f"rows={rows} n={n} torch.sort {us:7.1f} us", flush=True)
        op = SortOp(contiguous("x", DType.I64, (rows, n)), contiguous("o", DType.I64, (rows, n)),
                    True)
        env = {"x": x.view(-1), "o": torch.empty(rows * n, device="cuda", dtype=torch.int64)}
        for cfg in CONFIGS:
            routing.run_jit(op, env, cfg)
            ok = torch.equal(env["o"].view(rows, n), want)
            us = graph_us(lambda: routing.run_jit(op, env, cfg))
            print(f"rows={rows} n={n} {cfg or 'default'} {us:7.1f} us "
                  f"{'ok' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
