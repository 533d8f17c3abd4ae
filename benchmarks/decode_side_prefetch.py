"""Does an L2 prefetch of the next GEMM's weights, on a side stream of the same CUDA graph,
shorten a decode step? (Measured 2026-12-04 on the H200: no, it is slower; see
benchmarks/results/2026-12-04-h200-decode-side-prefetch.json.)

    PYTHONPATH=. OUT=/tmp python3 benchmarks/decode_side_prefetch.py   # on the GPU machine
    M=8 VARIANTS=0:0,2:8 ...     # batch rows; LEAD:CAP_MIB pairs (0:0 = no prefetch, CAP -1 =
                                 # a side kernel that prefetches nothing: the fork's own cost)

The chain: LAYERS (16) x Llama-3.2-1B's decode GEMMs through aotpack's split-K kernels (qkv
3072x2048 + reduce, an idle gap of GAP_NS like kv_write + attention, o 2048x2048 + reduce,
gate/up 16384x2048 with SwiGLU, down 2048x8192 + reduce), each layer with its own weights
(1.94 GB, so every GEMM finds L2 cold, as in a real step). A variant LEAD:CAP prefetches the
first CAP MiB of GEMM j's weight (cp.async.bulk.prefetch.L2, 4 KiB per thread) on a side
stream once GEMM j-LEAD has ended: into the idle gaps the DRAM otherwise has.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels.spec import EpSwiGLU, GemmOp, contiguous  # noqa: E402
from aotpack.kernels.triton import gemm  # noqa: E402
from aotpack.passes.fuse_swiglu import GROUP  # noqa: E402


@triton.jit
def now_ns():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def spin_kernel(x_ptr, NS: tl.constexpr):
    """Busy for NS nanoseconds without touching DRAM: the gap a cache write and an attention
    leave between two GEMMs."""
    t0 = now_ns()
    t = t0
    while t - t0 < NS:
        t = now_ns()
    if tl.program_id(0) == 0:
        tl.store(x_ptr, t.to(tl.float32))


@triton.jit
def prefetch_kernel(base, nbytes, CHUNK: tl.constexpr, PER_PROG: tl.constexpr):
    """Bytes [0, nbytes) of `base` asked into L2, CHUNK bytes per thread (one bulk prefetch
    each; threads past the end ask for nothing)."""
    lane = tl.arange(0, PER_PROG).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * (PER_PROG * CHUNK) + lane * CHUNK
    size = tl.minimum(nbytes - offs, CHUNK).to(tl.int32)
    ptrs = base + tl.minimum(offs, nbytes - 16)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, size], dtype=tl.int32, is_pure=False, pack=1)


def gemm_runner(M, N_acc, K, swiglu, g):
    bf = DType.BF16
    N = N_acc // 2 if swiglu else N_acc
    env = {"a": torch.randn(M * K, device="cuda", dtype=torch.bfloat16, generator=g),
           "b": torch.randn(N_acc * K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02,
           "out": torch.empty(M * N, device="cuda", dtype=torch.bfloat16)}
    op = GemmOp(contiguous("a", bf, (M, K)), contiguous("b", bf, (N_acc, K)),
                contiguous("out", bf, (M, N)), (EpSwiGLU(GROUP),) if swiglu else ())
    cfg = gemm.config_for(op)
    return gemm.jit_runner(op, env, cfg, 132), env["b"], str(cfg)


def main():
    M = int(os.environ.get("M", "1"))
    layers = int(os.environ.get("LAYERS", "16"))
    gap_ns = int(os.environ.get("GAP_NS", "6500"))
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = [("qkv", 3072, 2048, False), ("o", 2048, 2048, False),
              ("gate_up", 16384, 2048, True), ("down", 2048, 8192, False)]
    chain = []  # (name, runner, weight, gap after it in ns, config)
    for _ in range(layers):
        for name, n, k, sw in shapes:
            run, w, cfg = gemm_runner(M, n, k, sw, g)
            chain.append((name, run, w, gap_ns if name == "qkv" else 0, cfg))
    sink = torch.zeros(1, device="cuda")
    total_bytes = sum(w.numel() * 2 for _, _, w, _, _ in chain)
    for _, run, *_ in chain:  # compile every specialisation before capture
        run()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()

    def record(lead, cap_mib, chunk, per_prog):
        main_s = torch.cuda.current_stream()
        ends = []
        for j, (name, run, w, gap, _) in enumerate(chain):
            if lead and j >= lead and cap_mib != 0:
                side.wait_event(ends[j - lead])
                with torch.cuda.stream(side):
                    nb = min(w.numel() * 2, cap_mib << 20) if cap_mib > 0 else 16
                    grid = (triton.cdiv(nb, chunk * per_prog),)
                    prefetch_kernel[grid](w.view(torch.uint8), nb, CHUNK=chunk, PER_PROG=per_prog,
                                          num_warps=max(1, per_prog // 32))
            run()
            if gap:
                spin_kernel[(32,)](sink, NS=gap, num_warps=4)
            ev = torch.cuda.Event()
            ev.record(main_s)
            ends.append(ev)
        if lead and cap_mib != 0:
            main_s.wait_stream(side)

    def graph_time(lead, cap, chunk=4096, per_prog=32):
        gr = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            record(lead, cap, chunk, per_prog)  # warm-up (compiles the prefetch kernel)
        torch.cuda.synchronize()
        with torch.cuda.graph(gr):
            record(lead, cap, chunk, per_prog)
        for _ in range(5):
            gr.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(30):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            gr.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times.sort()
        return times[len(times) // 2]

    variants = [(0, 0)] + [(lead, cap) for lead in (1, 2) for cap in (8, 16, 32)] + [(0, 0)]
    extra = os.environ.get("VARIANTS")
    if extra:
        variants = [tuple(int(x) for x in v.split(":")) for v in extra.split(",")]
    rows = []
    for rnd in range(2):
        for lead, cap in variants:
            ms = graph_time(lead, cap)
            rows.append({"round": rnd, "lead": lead, "cap_mib": cap, "ms": round(ms, 4),
                         "pct_floor": round(100 * total_bytes / 4.10e12 / (ms * 1e-3), 1)})
            print(json.dumps(rows[-1]), flush=True)
    out = os.environ.get("OUT", "/tmp")
    json.dump({"M": M, "layers": layers, "gap_ns": gap_ns, "bytes": total_bytes,
               "configs": {c[0]: c[4] for c in chain[:4]}, "rows": rows},
              open(os.path.join(out, f"prefetch_M{M}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
