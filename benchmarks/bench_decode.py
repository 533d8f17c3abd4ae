"""Decode-sized GEMMs (M <= 128) on the H200: aotpack's split-K kernels next to cuBLAS.

    python benchmarks/bench_decode.py                # from the repo root, on the GPU machine
    OUT=/some/dir python benchmarks/bench_decode.py  # also writes $OUT/bench_decode.json
    TRITON_INTERPRET=1 python benchmarks/bench_decode.py --smoke   # CPU check of this script
    python benchmarks/bench_decode.py --fp8 [--w8a8] [--llama1b] [--graph]  # FP8, graphs
    python benchmarks/bench_decode.py --graph --shapes 1,1000,512/32,1000,512  # these shapes
    python benchmarks/bench_decode.py --rotate --llama8b [--m 8]  # as a model streams weights

--fp8: every problem twice, the bf16 weight and its FP8 copy (a scale per row), so the two
kernels are side by side (--w8a8: a third time, the activations in e4m3 too); GB/s counts the bytes each reads. --llama1b: Llama-3.2-1B's decode
GEMMs (M = 1) instead of the default shapes, --llama8b Llama-3-8B's (M = --m, default 1).
--graph: CUDA-graph replays are timed (what a bundle does; at a few microseconds a GEMM is
otherwise mostly Triton's Python launcher). --rotate (implies --graph): one graph runs the GEMM
over R copies of its weight (R x its bytes >= 256 MiB), so no run finds its weight in L2, as in
a model's step, and each problem also gets the rate of a kernel that only reads its weight's
bytes, timed the same way (gemm_rotate.read_tbs: the floor any kernel of that size can reach).

A decode GEMM reads its weight once: the floor is N_acc * K * 2 bytes over the copy ceiling
(4.26 TB/s measured on this H200), so the table reports GB/s of weight bytes and their share of
that ceiling. For each shape: torch.matmul (cuBLAS), then the config choose_config picks, then a
few other candidates of candidate_configs while the time budget lasts. Every run goes through
Triton's JIT with the same kernels and arguments aotpack cross-compiles (gemm.jit_runner), is
checked against an f32 product (output poisoned with NaN first: every element must be
written), and timed with triton.testing.do_bench: CUDA events, warm-up, L2 flushed before every
rep, median. A failing config is reported and the run goes on.
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

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import EpSwiGLU, GemmOp, contiguous  # noqa: E402
from aotpack.kernels.triton import gemm  # noqa: E402
from aotpack.kernels.triton.gemm_configs import SplitKConfig, splitk_label  # noqa: E402
from aotpack.kernels.triton.gemm_heuristic import candidate_configs  # noqa: E402
from aotpack.passes.fuse_swiglu import GROUP  # noqa: E402

COPY_CEILING = 4.26e12  # bytes/s, device-to-device copy measured on the H200
MAX_REL_ERR = 1e-2
# then alternatives stop (the chosen configs all run); BENCH_BUDGET_S overrides
BUDGET_S = float(os.environ.get("BENCH_BUDGET_S", 45.0 if "--fp8" not in sys.argv else 150.0))
ALTERNATIVES = 3  # per shape, after the chosen config
SHAPES = [(M, N, K) for M in (16, 128)
          for N, K in ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096))]
SHAPES += [(16, 6144, 4096), (16, 28672, 4096)]  # Llama-3-8B decode: QKV, gate+up
SWIGLU_SHAPES = [(16, 28672, 4096)]  # gate+up with the SwiGLU fused (output N = 14336)
FP8 = "--fp8" in sys.argv
W8A8 = "--w8a8" in sys.argv  # also FP8 activations (--precision fp8)
# --graph: time CUDA-graph replays (small GEMMs take a few microseconds: Triton's Python
# launcher alone would otherwise be most of what is measured)
ROTATE = "--rotate" in sys.argv
GRAPH = "--graph" in sys.argv or ROTATE
ROTATE_BYTES = 256 << 20
if "--llama1b" in sys.argv:  # qkv, o, down, the LM head; gate+up with its SwiGLU
    SHAPES = [(1, 3072, 2048), (1, 2048, 2048), (1, 2048, 8192), (1, 128256, 2048)]
    SWIGLU_SHAPES = [(1, 16384, 2048)]
if "--llama8b" in sys.argv:  # the same five at Llama-3-8B's dims
    _M = int(sys.argv[sys.argv.index("--m") + 1]) if "--m" in sys.argv else 1
    SHAPES = [(_M, 6144, 4096), (_M, 4096, 4096), (_M, 4096, 14336), (_M, 128256, 4096)]
    SWIGLU_SHAPES = [(_M, 28672, 4096)]
if "--shapes" in sys.argv:  # --shapes M,N,K/M,N,K...: these problems instead (no SwiGLU)
    SHAPES = [tuple(int(v) for v in s.split(",")) for s in
              sys.argv[sys.argv.index("--shapes") + 1].split("/")]
    SWIGLU_SHAPES = []
SMOKE = "--smoke" in sys.argv  # tiny shapes on the CPU under Triton's interpreter
DEVICE = "cpu" if SMOKE else "cuda"
if SMOKE:
    SHAPES, SWIGLU_SHAPES, ALTERNATIVES = [(5, 96, 256)], [(5, 256, 256)], 2


def label(cfg) -> str:
    if isinstance(cfg, SplitKConfig):
        return splitk_label(cfg)
    return (f"tile {cfg.BM}x{cfg.BN}x{cfg.BK} w{cfg.num_warps} s{cfg.num_stages} "
            f"split{cfg.EPI_SPLIT}")


class Problem:
    """Flat storages + a GemmOp over them, the f32 expected output and the cuBLAS call."""

    def __init__(self, M: int, N_acc: int, K: int, swiglu: bool, fp8: bool = False,
                 w8a8: bool = False):
        bf = DType.BF16
        N = N_acc // 2 if swiglu else N_acc
        g = torch.Generator(device=DEVICE).manual_seed(M * 7 + N_acc * 3 + K)
        # weights of a real model are O(0.02); activations O(1)
        self.env = {"a": torch.randn(M * K, device=DEVICE, dtype=torch.bfloat16, generator=g),
                    "b": torch.randn(N_acc * K, device=DEVICE, dtype=torch.bfloat16,
                                     generator=g) * 0.02,
                    "out": torch.empty(M * N, device=DEVICE, dtype=torch.bfloat16)}
        epilogue = (EpSwiGLU(GROUP),) if swiglu else ()
        self.op = GemmOp(contiguous("a", bf, (M, K)), contiguous("b", bf, (N_acc, K)),
                         contiguous("out", bf, (M, N)), epilogue)
        self.shape, self.swiglu, self.N, self.fp8 = (M, N_acc, K), swiglu, N, fp8
        a, w = self.env["a"].view(M, K), self.env["b"].view(N_acc, K)
        if fp8:  # the weight as --precision fp8-weights stores it; the product of its dequant
            scale = w.float().abs().amax(1) / 448.0
            q = (w.float() / scale[:, None]).to(torch.float8_e4m3fn)
            self.env.update(b=q.reshape(-1), bs=scale)
            self.op = GemmOp(self.op.a, contiguous("b", DType.F8E4M3, (N_acc, K)), self.op.out,
                             epilogue, contiguous("bs", DType.F32, (N_acc,)), quantize_a=w8a8)
            w = (q.float() * scale[:, None]).to(torch.bfloat16)
        self.w8a8 = w8a8
        self.torch_fn = (lambda: _torch_swiglu(a, w)) if swiglu else (lambda: torch.matmul(a, w.T))
        if ROTATE:  # cuBLAS over as many bf16 copies as the kernels get (each L2-cold too)
            count = max(4, -(-ROTATE_BYTES // (N_acc * K * 2)))
            ws = [w] + [w.clone() for _ in range(count - 1)]
            one = (lambda x: _torch_swiglu(a, x)) if swiglu else (lambda x: torch.matmul(a, x.T))
            self.torch_fn = lambda: [one(x) for x in ws]
            self.torch_runs = count
        acc = a.float() @ w.float().T
        self.expected = _swiglu_f32(acc) if swiglu else acc

    def weight_copies(self) -> list:
        """Copies of the weight (made once) so that all of them hold >= ROTATE_BYTES."""
        if not hasattr(self, "_copies"):
            count = max(4, -(-ROTATE_BYTES // self.weight_bytes()))
            self._copies = [self.env["b"].clone() for _ in range(count - 1)]
        return self._copies

    def weight_bytes(self) -> int:
        M, N_acc, K = self.shape
        return N_acc * K * (1 if self.fp8 else 2)

    def check(self) -> tuple[float, int]:
        """(relative error, number of output elements left unwritten/NaN)."""
        got = self.env["out"].view(self.shape[0], self.N).float()
        unwritten = int(torch.isnan(got).sum())
        rel = ((got - self.expected).norm() / self.expected.norm()).item()
        return rel, unwritten


def _swiglu_f32(acc, group: int = GROUP):
    m, n_acc = acc.shape
    pairs = acc.reshape(m, n_acc // (2 * group), 2, group)
    return (torch.nn.functional.silu(pairs[:, :, 0]) * pairs[:, :, 1]).reshape(m, n_acc // 2)


def _torch_swiglu(a, w, group: int = GROUP):
    # what eager PyTorch would run: one matmul, then silu(gate) * up on the bf16 result
    return _swiglu_f32(torch.matmul(a, w.T), group)


def bench_us(fn) -> float:
    if SMOKE:  # no CUDA events on the CPU: one timed call
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    from triton.testing import do_bench, do_bench_cudagraph

    if GRAPH:  # replayed from a CUDA graph, as a bundle runs: no Python launch cost in it
        return do_bench_cudagraph(fn, rep=40, return_mode="median") * 1e3
    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3


def run_config(p: Problem, cfg, sm_count: int, chosen: bool, cublas_us: float) -> dict:
    row = {"shape": list(p.shape), "swiglu": p.swiglu, "fp8": p.fp8, "w8a8": p.w8a8,
           "config": cfg.as_dict(), "read_only_tbs": getattr(p, "read_tbs", None),
           "label": label(cfg), "chosen": chosen, "cublas_us": cublas_us}
    try:
        t0 = time.time()
        runner = gemm.jit_runner(p.op, p.env, cfg, sm_count)
        p.env["out"].fill_(float("nan"))
        runner()  # the first call compiles
        if not SMOKE:
            torch.cuda.synchronize()
        row["compile_s"] = round(time.time() - t0, 2)
        row["rel_err"], row["unwritten"] = p.check()
        # e4m3 activations round by ~2.6 %: checked against the unquantized product loosely
        limit = 6e-2 if p.w8a8 else MAX_REL_ERR
        row["ok"] = row["rel_err"] <= limit and row["unwritten"] == 0
        if ROTATE:  # the same launches over other copies of the weight: L2 cold for each run
            runners = [runner] + [gemm.jit_runner(p.op, dict(p.env, b=w), cfg, sm_count)
                                  for w in p.weight_copies()]
            us = bench_us(lambda: [run() for run in runners]) / len(runners)
        else:
            us = bench_us(runner)
        row.update(us=us, gbps=p.weight_bytes() / us / 1e3,
                   pct_ceiling=100 * p.weight_bytes() / (us * 1e-6) / COPY_CEILING,
                   speedup_vs_cublas=cublas_us / us)
    except Exception as e:  # one failing config must not end the run
        row["ok"], row["error"] = False, f"{type(e).__name__}: {e}"[:500]
        traceback.print_exc(limit=3)
    return row


def configs_for(p: Problem) -> list:
    """choose_config's pick (as gemm.config_for adapts it), then the next candidates."""
    M, N_acc, K = p.shape
    chosen = gemm.config_for(p.op)
    pool = candidate_configs(M, N_acc, K, DType.BF16)
    others = [c for c in pool if c != chosen and gemm.supports_config(p.op, c) is None]
    others.sort(key=lambda c: not isinstance(c, SplitKConfig))  # stable: split-K ones first
    if p.fp8 and isinstance(chosen, SplitKConfig):  # half the bytes per tile: deeper tiles
        half = max(1, chosen.SPLIT_K // 2)
        deeper = [chosen.with_(BK=64, num_stages=6), chosen.with_(SPLIT_K=half),
                  chosen.with_(SPLIT_K=2 * chosen.SPLIT_K), chosen.with_(BN=128),
                  chosen.with_(num_stages=6), chosen.with_(BK=64, SPLIT_K=2 * chosen.SPLIT_K)]
        others = [c for c in deeper if c != chosen and gemm.supports_config(p.op, c) is None] \
            + others
    if isinstance(chosen, SplitKConfig) and chosen.SPLIT_K > 1:  # one launch: direct, fix-up
        one = [chosen.with_(SPLIT_K=1), chosen.with_(FIXUP=True)]
        others = one + [c for c in others if c not in one]
    return [chosen] + others[:ALTERNATIVES + (3 if p.fp8 else 0)]


def print_row(r: dict) -> None:
    M, N, K = r["shape"]
    kind = " w8a8" if r.get("w8a8") else " fp8" if r.get("fp8") else ""
    name = f"{M}x{N}x{K}{' swiglu' if r['swiglu'] else ''}{kind}"
    mark = "*" if r["chosen"] else " "
    if "us" not in r:
        print(f"{name:22s} {mark}{r['label']:34s} FAILED {r.get('error', '')[:100]}")
        return
    status = "ok " if r["ok"] else "BAD"
    print(f"{name:22s} {mark}{r['label']:34s} {r['us']:8.1f} {r['cublas_us']:8.1f} "
          f"{r['speedup_vs_cublas']:5.2f}x {r['gbps']:7.0f} {r['pct_ceiling']:5.1f}% {status} "
          f"{r['rel_err']:.1e}")


HEADER = (f"{'problem':22s} {'config':35s} {'us':>8s} {'cuBLAS':>8s} {'speed':>6s} "
          f"{'GB/s':>7s} {'%4.26':>6s} check")


def main() -> None:
    start = time.time()
    device, sm_count = ("cpu (interpreter)", 4) if SMOKE else \
        (torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count)
    print(f"{device}: {sm_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    kinds = [(False, False)] + [(True, False)] * FP8 + [(True, True)] * W8A8
    problems = [Problem(*s, swiglu=False, fp8=f, w8a8=q) for s in SHAPES for f, q in kinds] + \
        [Problem(*s, swiglu=True, fp8=f, w8a8=q) for s in SWIGLU_SHAPES for f, q in kinds]
    plans = [(p, configs_for(p), bench_us(p.torch_fn) / getattr(p, "torch_runs", 1))
             for p in problems]
    if ROTATE:  # what a kernel that only reads each weight's bytes reaches, timed the same way
        from gemm_rotate import read_tbs

        for p in problems:
            p.read_tbs = read_tbs(torch, p.weight_bytes())
            print(f"read-only rate at {p.weight_bytes() / 2**20:.0f} MiB: "
                  f"{p.read_tbs:.2f} TB/s")
    rows = []
    print(HEADER)
    for p, configs, cublas in plans:  # first pass: every chosen config
        rows.append(run_config(p, configs[0], sm_count, True, cublas))
        print_row(rows[-1])
    for p, configs, cublas in plans:  # second pass: alternatives while the budget lasts
        for cfg in configs[1:]:
            if time.time() - start > BUDGET_S:
                break
            rows.append(run_config(p, cfg, sm_count, False, cublas))
            print_row(rows[-1])
    summarize(rows, device, sm_count, time.time() - start)


def summarize(rows: list[dict], device: str, sm_count: int, elapsed: float) -> None:
    print(f"\n== summary ({elapsed:.0f} s; * = choose_config's pick; GB/s of weight bytes; "
          f"% of the {COPY_CEILING / 1e12:.2f} TB/s copy ceiling) ==")
    print(HEADER)
    for r in sorted(rows, key=lambda r: (r["shape"], r["swiglu"], r.get("fp8", False),
                                         r.get("w8a8", False), not r["chosen"])):
        print_row(r)
    print("\nbest per problem:")
    best: dict = {}
    for r in rows:
        key = (tuple(r["shape"]), r["swiglu"], r.get("fp8", False), r.get("w8a8", False))
        if r.get("ok") and r["us"] < best.get(key, {}).get("us", float("inf")):
            best[key] = r
    for (shape, swiglu, fp8, w8a8), r in best.items():
        kind = " w8a8" if w8a8 else " fp8" if fp8 else ""
        print(f"  {'x'.join(map(str, shape))}{' swiglu' if swiglu else ''}{kind}"
              f": {r['label']} "
              f"{r['us']:.1f} us ({r['pct_ceiling']:.0f}% of ceiling, cuBLAS {r['cublas_us']:.1f} "
              f"us, {r['speedup_vs_cublas']:.2f}x)")
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "bench_decode.json"
        path.write_text(json.dumps({"device": device, "sm_count": sm_count,
                                    "torch": torch.__version__, "triton": triton.__version__,
                                    "copy_ceiling_bytes_per_s": COPY_CEILING,
                                    "elapsed_s": elapsed, "results": rows}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    if SMOKE and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("--smoke needs TRITON_INTERPRET=1 in the environment")
    if not SMOKE and not torch.cuda.is_available():
        sys.exit("bench_decode.py needs a CUDA GPU")
    main()
