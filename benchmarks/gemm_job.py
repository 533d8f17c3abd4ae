"""The GEMM shape sweep of issue 3 as a tuning job, and its comparison with cuBLAS.

    # build host (no GPU): every Triton and CuTeDSL candidate of every shape → one job folder
    python benchmarks/gemm_job.py write .gpu/jobs/gemm-shapes [--level full]
    # GPU machine: the launcher measures the candidates; torch.matmul (cuBLAS) is timed the same
    # way (L2 flushed by a 256 MiB memset before every timed run, CUDA events, median)
    aotpack-run --tune gemm-shapes -o tune-gemm-shapes.json
    python benchmarks/gemm_job.py cublas -o cublas.json
    # anywhere: the table (best Triton / best CuTeDSL / cuBLAS per shape; TFLOP/s for M >= 2048,
    # GB/s of weight traffic against the 4.26 TB/s copy ceiling for M <= 128)
    python benchmarks/gemm_job.py report tune-gemm-shapes.json cublas.json

Shapes: M in {16, 128, 2048, 8192} x (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336),
(1024, 4096)}, bf16 in and out, no epilogue; plus GEMM+bias+GELU and the fused SwiGLU GEMM
(gate/up interleaved) at M=2048, compared with cuBLAS followed by the epilogue in torch.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MS = (16, 128, 2048, 8192)
NKS = ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096))
COPY_TBS = 4.26  # measured H200 device-copy ceiling (METHOD.md)
L2_FLUSH = 256 << 20


def gemm_ops():
    """(label, GemmOp, extra torch work of the unfused baseline) for every benchmarked shape."""
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import Act, EpAct, EpBias, EpSwiGLU, GemmOp, contiguous
    from aotpack.passes.fuse_swiglu import GROUP

    bf = DType.BF16
    ops = []
    for m in MS:
        for n, k in NKS:
            ops.append((f"plain {m}x{n}x{k}", GemmOp(contiguous("a", bf, (m, k)),
                                                     contiguous("b", bf, (n, k)),
                                                     contiguous("c", bf, (m, n))), "none"))
    m, n, k = 2048, 14336, 4096
    ops.append((f"bias+gelu {m}x{n}x{k}", GemmOp(
        contiguous("a", bf, (m, k)), contiguous("b", bf, (n, k)), contiguous("c", bf, (m, n)),
        (EpBias(contiguous("bias", bf, (n,))), EpAct(Act.GELU_TANH))), "bias_gelu"))
    ops.append((f"swiglu {m}x{n}x{k}", GemmOp(
        contiguous("a", bf, (m, k)), contiguous("b", bf, (2 * n, k)), contiguous("c", bf, (m, n)),
        (EpSwiGLU(GROUP),)), "swiglu"))
    return ops


def write(folder: Path, level: str, max_m: int | None = None) -> None:
    from aotpack.shared_steps import provenance, rename_storages
    from aotpack.kernels.spec import SM90, op_inputs
    from aotpack.program import Program, Storage
    from aotpack.tuning.job import compile_all, find_problems, write_job

    ops, storages = [], {}
    for i, (_, op, _) in enumerate(gemm_ops()):
        if max_m is not None and op.out.shape[0] > max_m:
            continue
        op = rename_storages(op, lambda s, i=i: f"{s}{i}")
        for t in [*op_inputs(op), op.out]:
            storages[t.storage] = Storage(t.storage, "input", t.dtype, t.shape)
        ops.append(op)
    program = Program(inputs=[], outputs=[], storages=storages, ops=ops)
    problems = find_problems(program, SM90, level=level, gemm_backend="auto")
    compile_all(problems, SM90, jobs=2, progress=True)
    job = write_job(folder, problems, SM90, provenance(__file__, "benchmarks/gemm_job.py write"))
    print(f"wrote {folder}: {len(job['problems'])} problems, "
          f"{sum(len(p['candidates']) for p in job['problems'])} candidates")


def _median_us(torch, fn, reps=30, warmup=5) -> float:
    """Median µs of `fn`, L2 flushed before and each call waited for (timing.bench)."""
    from timing import bench

    return bench(fn, reps=reps, warmup=warmup, flush_l2=True, sync_each=True)["median_ms"] * 1e3


def cublas(out: Path) -> None:
    import torch
    import torch.nn.functional as F

    rows = {}
    for label, op, extra in gemm_ops():
        (m, k), n = op.a.shape, op.out.shape[1]
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        n_b = op.b.shape[0]
        w = torch.randn(n_b, k, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        if extra == "none":
            fn = lambda: a @ w.t()  # noqa: E731
        elif extra == "bias_gelu":
            fn = lambda: F.gelu(F.linear(a, w, bias), approximate="tanh")  # noqa: E731
        else:  # two GEMMs (gate, up) and the epilogue in torch, as an unfused model runs it
            wg, wu = w[:n].contiguous(), w[n:].contiguous()
            fn = lambda: F.silu(a @ wg.t()) * (a @ wu.t())  # noqa: E731
        rows[label] = _median_us(torch, fn)
        print(f"cublas {label}: {rows[label]:.1f} us", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "median_us": rows},
                              indent=1))


def mnk(desc: str) -> tuple[int, int, int]:
    """M, N, K of a GEMM problem's description ("gemm M=16 N=4096 K=4096 ...")."""
    f = dict(re.findall(r"\b([MNK])=(\d+)", desc))
    return int(f["M"]), int(f["N"]), int(f["K"])


def _flops_bytes(desc: str) -> tuple[float, float, int]:
    m, n, k = mnk(desc)
    return 2.0 * m * n * k, 2.0 * n * k, m


def report(tune_json: Path, cublas_json: Path) -> dict:
    res = json.loads(tune_json.read_text())
    ref = json.loads(cublas_json.read_text())["median_us"]
    from aotpack.shared_steps import canonical
    from aotpack.kernels.templates import template_for

    label_of = {template_for(op).describe(canonical(op)[0]): label
                for label, op, _ in gemm_ops()}
    rows = []
    for prob in res["problems"]:
        label = label_of.get(prob["desc"].split(" (x")[0], prob["desc"])
        best = {}
        for c in prob["candidates"]:
            if c["status"] != "ok":
                continue
            be = c["config"]["template"].split(".")[1]
            if be not in best or c["median_us"] < best[be]["median_us"]:
                best[be] = c
        flops, wbytes, m = _flops_bytes(prob["desc"])
        row = {"shape": label, "cublas_us": ref.get(label)}
        for be in ("triton", "cutedsl"):
            if be in best:
                us = best[be]["median_us"]
                row[be] = {"us": us, "tflops": flops / us / 1e6, "gbs": wbytes / us / 1e3,
                           "vs_cublas": ref[label] / us if ref.get(label) else None,
                           "config": best[be]["name"]}
        rows.append(row)
    for r in rows:
        print(r["shape"], {k: (round(v["us"], 1), round(v["vs_cublas"] or 0, 3))
                           for k, v in r.items() if isinstance(v, dict)}, "cublas", r["cublas_us"])
    big = [r for r in rows if r["shape"].startswith("plain") and int(r["shape"].split()[1]
                                                                      .split("x")[0]) >= 2048]
    for be in ("triton", "cutedsl"):
        vs = [r[be]["vs_cublas"] for r in big if be in r and r[be]["vs_cublas"]]
        if vs:
            print(f"{be}: geomean vs cuBLAS (M >= 2048): "
                  f"{math.exp(sum(map(math.log, vs)) / len(vs)):.3f} over {len(vs)} shapes")
    return {"rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("folder", type=Path)
    w.add_argument("--level", default="full")
    w.add_argument("--max-m", type=int, help="only the shapes with M <= this (decode sweep)")
    c = sub.add_parser("cublas")
    c.add_argument("-o", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("tune_json", type=Path)
    r.add_argument("cublas_json", type=Path)
    r.add_argument("-o", type=Path)
    a = ap.parse_args()
    if a.cmd == "write":
        write(a.folder, a.level, a.max_m)
    elif a.cmd == "cublas":
        cublas(a.o)
    else:
        doc = report(a.tune_json, a.cublas_json)
        if a.o:
            a.o.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
