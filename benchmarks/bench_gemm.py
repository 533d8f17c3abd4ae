"""Benchmark the Triton Hopper GEMM template on a GPU (the H200), next to cuBLAS.

    python benchmarks/bench_gemm.py            # from the repo root; no aotpack install needed
    OUT=/some/dir python benchmarks/bench_gemm.py   # also writes $OUT/gemm_bench.json
    TRITON_INTERPRET=1 python benchmarks/bench_gemm.py --smoke   # CPU check of this script

Runs the same @triton.jit kernel that aotpack cross-compiles, through Triton's normal JIT
launcher with host TensorDescriptors, for the config `choose_config` picks and a few
alternatives, on the MLP-sized shapes; checks each result against torch (relative error) and
times it with triton.testing.do_bench (median, L2 flushed between runs). Every config is guarded:
a failing one is reported and the run goes on. Stays under ~4 minutes (alternatives are skipped
once the time budget is spent).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import Act, EpAct, EpBias, GemmOp, contiguous  # noqa: E402
from aotpack.kernels.triton import gemm  # noqa: E402
from aotpack.kernels.triton.gemm_configs import (  # noqa: E402
    GemmConfig, SplitKConfig, splitk_label,
)
from aotpack.kernels.triton.gemm_heuristic import CONFIG_SPACE, choose_config  # noqa: E402

FLOOR_TFLOPS = 790.0  # cuBLAS-class throughput on the H200 for these shapes
MAX_REL_ERR = 1e-2
BUDGET_S = 190.0  # alternatives stop after this; chosen configs always run
BIG_SHAPES = [(4096, 4096, 4096), (4096, 16384, 4096), (4096, 4096, 16384)] + [
    (2048, n, k) for n in (4096, 6144, 14336) for k in (4096, 14336)]
DECODE_SHAPES = [(16, 4096, 4096), (64, 14336, 4096)]
FUSED_SHAPES = [(4096, 4096, 4096), (2048, 14336, 4096)]  # also run with bias + SiLU fused
SMOKE = "--smoke" in sys.argv  # tiny shapes on the CPU under Triton's interpreter
DEVICE = "cpu" if SMOKE else "cuda"
if SMOKE:
    BIG_SHAPES, DECODE_SHAPES, FUSED_SHAPES = [(200, 264, 128)], [(16, 96, 64)], [(200, 264, 128)]


def label(cfg: GemmConfig | SplitKConfig) -> str:
    if isinstance(cfg, SplitKConfig):  # choose_config's pick for decode-sized M
        return splitk_label(cfg)
    flags = [f"split{cfg.EPI_SPLIT}", "tma_st" if cfg.TMA_STORE else "ptr_st"]
    if not cfg.FLATTEN:
        flags.append("noflat")
    return (f"{cfg.BM}x{cfg.BN}x{cfg.BK} w{cfg.num_warps} s{cfg.num_stages} "
            f"g{cfg.GROUP_M} {' '.join(flags)}")


def alternatives(M: int, chosen: GemmConfig) -> list[GemmConfig]:
    small = [c for c in CONFIG_SPACE if c.BM == 64]
    pool = small if M <= 64 else [c for c in CONFIG_SPACE if c.BM >= 128]
    return [c for c in pool if c != chosen]


class Problem:
    """Flat CUDA storages + a GemmOp over them, and the torch result to compare with."""

    def __init__(self, M: int, N: int, K: int, fused: bool):
        bf = DType.BF16
        g = torch.Generator(device=DEVICE).manual_seed(M * 7 + N * 3 + K)
        self.env = {
            "a": torch.randn(M * K, device=DEVICE, dtype=torch.bfloat16, generator=g),
            "b": torch.randn(N * K, device=DEVICE, dtype=torch.bfloat16, generator=g) * 0.05,
            "out": torch.empty(M * N, device=DEVICE, dtype=torch.bfloat16),
            "bias": torch.randn(N, device=DEVICE, dtype=torch.bfloat16, generator=g),
        }
        epilogue = (EpBias(contiguous("bias", bf, (N,))), EpAct(Act.SILU)) if fused else ()
        self.op = GemmOp(contiguous("a", bf, (M, K)), contiguous("b", bf, (N, K)),
                         contiguous("out", bf, (M, N)), epilogue)
        self.shape, self.fused = (M, N, K), fused
        a, b = self.env["a"].view(M, K), self.env["b"].view(N, K)
        self.torch_fn = (lambda: torch.nn.functional.silu(torch.addmm(self.env["bias"], a, b.T))) \
            if fused else (lambda: torch.matmul(a, b.T))
        self.expected = self.torch_fn().float()

    def rel_err(self) -> float:
        got = self.env["out"].view(self.shape[0], self.shape[1]).float()
        return ((got - self.expected).norm() / self.expected.norm()).item()

    def tflops(self, ms: float) -> float:
        M, N, K = self.shape
        return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def bench_ms(fn) -> float:
    if SMOKE:  # no CUDA events on the CPU: one timed call
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def run_config(p: Problem, cfg: GemmConfig, sm_count: int, chosen: bool, cublas: float) -> dict:
    row = {"shape": list(p.shape), "fused": p.fused, "config": cfg.as_dict(), "label": label(cfg),
           "chosen": chosen, "cublas_tflops": cublas}
    try:
        p.env["out"].zero_()
        t0 = time.time()
        runner = gemm.jit_runner(p.op, p.env, cfg, sm_count)
        runner()  # first call compiles
        if not SMOKE:
            torch.cuda.synchronize()
        row["compile_s"] = round(time.time() - t0, 2)
        row["rel_err"] = p.rel_err()
        row["ok"] = row["rel_err"] <= MAX_REL_ERR
        row["tflops"] = p.tflops(bench_ms(runner))
    except Exception as e:  # one failing config must not end the run
        row["ok"], row["error"] = False, f"{type(e).__name__}: {e}"[:500]
        traceback.print_exc(limit=3)
    return row


def print_row(r: dict) -> None:
    M, N, K = r["shape"]
    name = f"{M}x{N}x{K}{' +bias+silu' if r['fused'] else ''}"
    mark = "*" if r["chosen"] else " "
    if "tflops" not in r:
        print(f"{name:28s} {mark}{r['label']:44s} FAILED {r.get('error', '')[:120]}")
        return
    status = "ok " if r["ok"] else "BAD"
    vs_cublas, vs_floor = r["tflops"] / r["cublas_tflops"], r["tflops"] / FLOOR_TFLOPS
    print(f"{name:28s} {mark}{r['label']:44s} {r['tflops']:7.1f} {r['cublas_tflops']:7.1f} "
          f"{100 * vs_cublas:6.1f}% {100 * vs_floor:6.1f}% {status} {r['rel_err']:.1e}")


def main() -> None:
    start = time.time()
    device, sm_count = ("cpu (interpreter)", 4) if SMOKE else \
        (torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count)
    print(f"{device}: {sm_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    cases = [(s, False) for s in BIG_SHAPES] + [(s, True) for s in FUSED_SHAPES] + \
        [(s, False) for s in DECODE_SHAPES]
    rows = []
    for (M, N, K), fused in cases:
        p = Problem(M, N, K, fused)
        cublas = p.tflops(bench_ms(p.torch_fn))
        chosen = choose_config(M, N, K, DType.BF16)
        configs = [chosen] + ([] if fused else alternatives(M, chosen))
        for cfg in configs:
            if cfg is not chosen and time.time() - start > BUDGET_S:
                break
            rows.append(run_config(p, cfg, sm_count, cfg is chosen, cublas))
            print_row(rows[-1])
        del p
        if not SMOKE:
            torch.cuda.empty_cache()
    summarize(rows, device, sm_count, time.time() - start)


def summarize(rows: list[dict], device: str, sm_count: int, elapsed: float) -> None:
    print(f"\n== summary ({elapsed:.0f} s; * = choose_config's pick; TFLOP/s, % of cuBLAS, "
          f"% of {FLOOR_TFLOPS:.0f}) ==")
    print(f"{'problem':28s} {'config':45s} {'TFLOP/s':>7s} {'cuBLAS':>7s} {'vs cuB':>7s} "
          f"{'vs 790':>7s} rel.err")
    for r in rows:
        print_row(r)
    print("\nbest per problem:")
    seen = {}
    for r in rows:
        key = (tuple(r["shape"]), r["fused"])
        if r.get("ok") and r["tflops"] > seen.get(key, {}).get("tflops", -1):
            seen[key] = r
    for (shape, fused), r in seen.items():
        pick = next((x for x in rows if (tuple(x["shape"]), x["fused"]) == (shape, fused)
                     and x["chosen"]), None)
        pick_tf = pick.get("tflops", float("nan")) if pick else float("nan")
        print(f"  {'x'.join(map(str, shape))}{' fused' if fused else ''}: best {r['label']} "
              f"{r['tflops']:.1f} (chosen {pick_tf:.1f}, cuBLAS {r['cublas_tflops']:.1f})")
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "gemm_bench.json"
        path.write_text(json.dumps({"device": device, "sm_count": sm_count,
                                    "torch": torch.__version__, "triton": triton.__version__,
                                    "floor_tflops": FLOOR_TFLOPS, "elapsed_s": elapsed,
                                    "results": rows}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    if SMOKE and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("--smoke needs TRITON_INTERPRET=1 in the environment")
    if not SMOKE and not torch.cuda.is_available():
        sys.exit("bench_gemm.py needs a CUDA GPU")
    main()
