"""Depthwise convolutions on the GPU (issue 17): every depthwise ConvOp of the vision nets, the
kernel the bundle ships (compiled as the bundle compiles it: _common.aot_launcher) under each
candidate config, beside cuDNN (F.conv2d, channels_last, the conv alone) and the floor (a
device copy of the same bytes: x read once, out written once).

    python benchmarks/bench_depthwise.py --models mobilenet_v3_large,efficientnet_b0 --batches 1,32
    OUT=/dir ...   # rows also go to $OUT/depthwise_bench.json (rewritten after every shape)

Checks each config's output against the torch reference of the op (rel. error) before timing.
Times: medians of back-to-back calls (benchmarks/timing.py), L2 not flushed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from timing import bench  # noqa: E402


def depthwise_ops(name: str, batch: int) -> list:
    """The distinct depthwise ConvOps of a vision net at `batch` (bf16, 224x224)."""
    import conv_nets
    from aotpack.frontend import to_graph
    from aotpack.kernels.spec import ConvOp
    from aotpack.passes import compile_graph

    model, x = conv_nets.make_vision(name, batch=batch)
    program = compile_graph(to_graph(model, list(x)))
    seen, out = set(), []
    for op in program.ops:
        if isinstance(op, ConvOp) and op.depthwise:
            key = (op.x.shape, op.kernel, op.stride, op.padding, op.dilation,
                   tuple(type(s).__name__ for s in op.epilogue))
            if key not in seen:
                seen.add(key)
                out.append(op)
    return out


def environment(op, device: str = "cuda") -> dict:
    """storage name -> a random flat tensor on the GPU covering every view the op reads."""
    from aotpack.kernels.triton import conv

    extents: dict = {}
    for v in conv.plan(op).args.values():
        arg = getattr(v, "arg", None)
        if arg is None:
            continue
        end = arg.offset + sum((d - 1) * abs(s) for d, s in zip(arg.shape, arg.strides)) + 1
        extents[arg.storage] = (max(end, extents.get(arg.storage, (0, None))[0]), arg.dtype)
    return {k: (torch.randn(n, device=device) * 0.5).to(dt.to_torch())
            for k, (n, dt) in extents.items()}


EXTRA: list[dict] = []  # --extra: experimental configs over the default, timed after the candidates


def variants(op) -> list[dict]:
    """The tuning candidates (`aotpack tune` measures the same ones), then --extra's."""
    from aotpack.kernels.spec import SM90
    from aotpack.kernels.triton import conv_configs

    out = conv_configs.candidate_configs(op, SM90)
    base = conv_configs.default_config(op, SM90)
    return out + [c for c in ({**base, **e} for e in EXTRA) if c not in out]


def time_configs(op, reps: int) -> list[dict]:
    """Every candidate config of `op` (variants): its output checked against the torch
    reference (rel_err), then timed (ms), or the error that stopped it."""
    from aotpack.kernels import run_reference
    from aotpack.kernels.reference import view
    from aotpack.kernels.triton import conv
    from aotpack.kernels.triton._common import aot_launcher

    env = environment(op)
    ref_env = {k: v.clone() for k, v in env.items()}
    run_reference(op, ref_env)
    want = view(ref_env, op.out).float()
    rows = []
    for cfg in variants(op):
        entry = {"config": cfg}
        try:
            fn = aot_launcher(conv.plan(op, cfg), env)
            fn()
            torch.cuda.synchronize()
            got = view(env, op.out).float()
            entry["rel_err"] = round(float((got - want).norm() / want.norm().clamp_min(1e-9)), 5)
            entry["ms"] = bench(fn, reps=reps)["median_ms"]
        except Exception as e:  # report and go on
            entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(entry)
    return rows


def measure(op, args) -> dict:
    from aotpack.kernels.reference import view
    from aotpack.kernels.spec import SM90
    from aotpack.kernels.triton import conv_configs

    env = environment(op)
    n, h, w, c = op.x.shape
    oh, ow = op.out_hw
    nbytes = (n * h * w * c + n * oh * ow * c) * op.x.dtype.nbytes
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    row = {"x": [n, h, w, c], "kernel": list(op.kernel), "stride": list(op.stride),
           "mib": round(nbytes / 2**20, 2),
           "copy_ms": bench(lambda: dst.copy_(src), reps=args.reps)["median_ms"],
           "default": conv_configs.default_config(op, SM90), "configs": []}
    xc = view(env, op.x).permute(0, 3, 1, 2)  # NCHW view of channels-last memory
    wt = torch.randn(c, 1, *op.kernel, device="cuda", dtype=xc.dtype)
    (pt, pb), (pl, pr) = op.padding
    if (pt, pl) != (pb, pr):  # cuDNN pads both sides alike: pad the input first
        xc = F.pad(xc, (pl, pr, pt, pb)).contiguous(memory_format=torch.channels_last)
        pt = pl = 0
    row["cudnn_ms"] = bench(lambda: F.conv2d(xc, wt, None, op.stride, (pt, pl), op.dilation, c),
                            reps=args.reps)["median_ms"]
    row["configs"] = time_configs(op, args.reps)
    timed = [e for e in row["configs"] if "ms" in e]
    if timed:
        best = min(timed, key=lambda e: e["ms"])
        row["best"] = best
        row["default_ms"] = next((e["ms"] for e in timed if e["config"] ==
                                  row["default"]), None)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mobilenet_v3_large,efficientnet_b0")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--budget-s", type=float, default=400.0)
    p.add_argument("--extra", default="[]",
                   help='JSON list of config overrides also timed, e.g. \'[{"BP": 32, "BC": 64}]\'')
    args = p.parse_args()
    EXTRA.extend(json.loads(args.extra))
    start = time.time()
    out_dir = Path(os.environ.get("OUT", "."))
    rows = []
    jobs = ((name, batch) for name in args.models.split(",")
            for batch in (int(b) for b in args.batches.split(",")))
    for name, batch in jobs:
        for op in depthwise_ops(name, batch):
            if time.time() - start > args.budget_s:
                print("budget spent", flush=True)
                return 0
            row = {"model": name, "batch": batch, **measure(op, args)}
            rows.append(row)
            (out_dir / "depthwise_bench.json").write_text(json.dumps(rows, indent=1))
            best = row.get("best", {})
            print(f"{name} b{batch} x{row['x']} k{row['kernel']} s{row['stride']}: copy "
                  f"{row['copy_ms']:.4f} cudnn {row['cudnn_ms']:.4f} default "
                  f"{row.get('default_ms')} best {best.get('ms')} {best.get('config')}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
