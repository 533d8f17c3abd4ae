"""Decode-sized GEMMs (M <= 128) timed the way a model runs them: back to back, each run reading a
different copy of the weights, so no run finds its weights in L2 — and no L2-flush memset
before each run either (the tuner's method), whose dirty lines are written back during the
timed kernel and whose idle gap lets clocks recover. cuBLAS (F.linear) is timed the same way in
the same process, next to the device-copy ceiling and a read-only kernel of the weight's size
(the rate any kernel that reads the weight once can reach there).

    python benchmarks/gemm_rotate.py JOB_FOLDER [--max-m 128] [-o rotate.json]

JOB_FOLDER is the GEMM sweep's tuning job (benchmarks/gemm_job.py write): every candidate of
every problem with M <= --max-m is checked against F.linear (fresh random data) and timed.
Method: R weight copies (R x weight bytes >= 256 MiB, R >= 4); one CUDA graph holds R runs,
run r reading copy r; the graph is replayed `reps` times, each replay between two events; the
figure is the median replay time / R. Needs a GPU, torch and libaotpack (AOTPACK_LIB).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemm_job import mnk  # noqa: E402  (benchmarks/ is the script's folder)

ROTATE_BYTES = 256 << 20


def graph_us(torch, runs, reps: int = 20) -> float:
    """Median µs per run of `runs` (callables, one per weight copy) captured in one graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture: plans, tensor maps, cuBLAS handles
        for fn in runs:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in runs:
            fn()
    from timing import bench

    return bench(g.replay, reps=reps, warmup=3, sync_each=True)["median_ms"] * 1e3 / len(runs)


def copy_tbs(torch, moved: int = 2 << 30) -> float:
    """Device-to-device copy rate (bytes read + written) of a copy moving `moved` bytes, timed
    like the GEMMs: a graph of copies over rotating sources and destinations (together well
    past L2). The copy is a kernel (torch.add(src, 0, out=dst)): a captured dst.copy_ becomes a
    copy-engine memcpy node, which ran at 2.7 TB/s, and eager copies of a few MB are timed by
    their launch cost."""
    n = moved // 2
    copies = max(4, -(-(ROTATE_BYTES) // n))
    srcs = [torch.empty(n, dtype=torch.uint8, device="cuda").random_() for _ in range(copies)]
    dsts = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    us = graph_us(torch, [lambda s=s, d=d: torch.add(s, 0, out=d) for s, d in zip(srcs, dsts)])
    return moved / us / 1e6


_READ_KERNEL = None


def _read_kernel():
    """A Triton kernel that only reads: each program sums BLOCK int64 words into one word
    (the store is 1/BLOCK of the bytes read)."""
    global _READ_KERNEL
    if _READ_KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def read_sum(src, dst, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            x = tl.load(src + pid * BLOCK + tl.arange(0, BLOCK))
            tl.store(dst + pid, tl.sum(x, axis=0))

        _READ_KERNEL = read_sum
    return _READ_KERNEL


def read_tbs(torch, nbytes: int) -> float | None:
    """Read-only rate at `nbytes` (a weight's size), timed like the GEMMs over rotating
    buffers: what any kernel that must read the weight once can reach at this size, launch
    and ramp included. None when Triton cannot run here."""
    try:
        kernel = _read_kernel()
    except ImportError:
        return None
    copies = max(4, -(-ROTATE_BYTES // nbytes))
    srcs = [torch.empty(nbytes // 8, dtype=torch.int64, device="cuda").random_(0, 1 << 20)
            for _ in range(copies)]
    best = 0.0
    for block, warps in ((4096, 8), (1024, 4)):  # int64 words per program: 32 or 8 KiB
        words = nbytes // 8 // block * block
        dst = torch.empty(words // block, dtype=torch.int64, device="cuda")
        grid = (words // block,)
        us = graph_us(torch, [lambda s=s: kernel[grid](s, dst, BLOCK=block, num_warps=warps)
                              for s in srcs])
        best = max(best, words * 8 / us / 1e6)
    return best


def problem_rows(torch, F, job: Path, prob: dict) -> dict:
    from aotpack.runtime import Model, Session

    m, n, k = mnk(prob["desc"])
    wbytes = n * k * 2
    copies = max(4, math.ceil(ROTATE_BYTES / wbytes))
    g = torch.Generator(device="cuda").manual_seed(prob.get("seed", 0))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.05
          for _ in range(copies)]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = F.linear(a.float(), ws[0].float())
    row = {"desc": prob["desc"], "m": m, "n": n, "k": k, "weight_bytes": wbytes,
           "copies": copies, "candidates": []}
    # a @ w.t() into a fixed output: the cuBLAS call nn.Linear makes, without an allocation
    # what a copy moving the weight's bytes (half read, half written) reaches: the ceiling at
    # this size, where launch and ramp-up are not amortized
    row["copy_same_bytes_tbs"] = copy_tbs(torch, wbytes)
    row["read_same_bytes_tbs"] = read_tbs(torch, wbytes)
    row["cublas_us"] = graph_us(torch, [lambda w=w: torch.matmul(a, w.t(), out=out) for w in ws])
    for c in prob["candidates"]:
        rec = {"name": c["name"]}
        model = sess = None
        try:
            model = Model(str(job / c["bundle"]))
            sess = Session(model, use_cuda_graph=False)
            shapes = [tuple(i.shape) for i in model.inputs]
            if len(shapes) != 2 or (m, k) not in shapes or (n, k) not in shapes or m == n:
                raise RuntimeError(f"expected inputs a{(m, k)} and b{(n, k)}, got {shapes}")
            ia, ib = shapes.index((m, k)), shapes.index((n, k))

            def args(w):
                x = [None, None]
                x[ia], x[ib] = a, w
                return x

            out.fill_(float("nan"))
            sess.run(args(ws[0]), [out])
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            rec["rel_err"] = err
            if not err < 2e-2:
                rec["status"] = "wrong"
            else:
                rec["us"] = graph_us(torch, [lambda w=w: sess.run(args(w), [out]) for w in ws])
                rec["status"] = "ok"
        except Exception as e:  # a candidate that fails is a row, never the end of the run
            rec.update(status="error", error=f"{type(e).__name__}: {e}"[:300])
        finally:
            for h in (sess, model):
                if h is not None:
                    h.close()
        row["candidates"].append(rec)
    return row


def main() -> int:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", type=Path)
    ap.add_argument("--max-m", type=int, default=128)
    ap.add_argument("-o", type=Path)
    a = ap.parse_args()
    job = json.loads((a.job / "job.json").read_text())
    ceiling = copy_tbs(torch)
    doc = {"device": torch.cuda.get_device_name(), "copy_tbs": ceiling,
           "method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": []}
    print(f"copy ceiling {ceiling:.2f} TB/s", flush=True)
    for prob in job["problems"]:
        if prob["kind"] != "gemm" or mnk(prob["desc"])[0] > a.max_m:
            continue
        row = problem_rows(torch, F, a.job, prob)
        ok = [c for c in row["candidates"] if c.get("status") == "ok"]
        best = min(ok, key=lambda c: c["us"]) if ok else None
        row["best"] = best
        doc["rows"].append(row)
        if a.o:
            a.o.write_text(json.dumps(doc, indent=1))
        tbs = lambda us: row["weight_bytes"] / us / 1e6  # noqa: E731
        bad = [c["name"] + ":" + c["status"] for c in row["candidates"] if c["status"] != "ok"]
        if best:
            print(f"{row['desc'][:40]:40s} best {best['us']:7.2f} us {tbs(best['us']):5.2f} TB/s "
                  f"({tbs(best['us']) / ceiling:4.0%} of copy, "
                  f"{tbs(best['us']) / row['copy_same_bytes_tbs']:4.0%} of same-size copy; read-only "
                  f"{row['read_same_bytes_tbs'] or 0:.2f} TB/s) cuBLAS {row['cublas_us']:7.2f} us "
                  f"{tbs(row['cublas_us']):5.2f} TB/s  x{row['cublas_us'] / best['us']:.2f}  "
                  f"[{best['name']}] not ok: {bad}", flush=True)
        else:
            print(f"{row['desc']}: no candidate ok: {bad}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
