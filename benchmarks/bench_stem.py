"""Network stems on the GPU (issue 17): the first convolution of each vision net — a stride-2
conv over the RGB image — as the bundle runs it, folded 2x2 into 4C channels
(frontend/aten_conv_stem.py) and as it ran before (the 3-channel image gathered one tap at a
time, FLAT_K), under every candidate config, beside cuDNN (F.conv2d on the channels_last
image, the conv alone) and the fold's own copy (a torch permute copy of the same bytes).

    python benchmarks/bench_stem.py --models resnet50,efficientnet_b0 --batches 32,128
    OUT=/dir ...   # rows also go to $OUT/stem_bench.json (rewritten after every shape)

Checks each config's output against the torch reference of the op before timing; medians of
back-to-back calls (benchmarks/timing.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench_depthwise import time_configs  # noqa: E402
from timing import bench  # noqa: E402


def stem_op(name: str, batch: int, folded: bool):
    """The first ConvOp of the net at `batch` (bf16, 224x224), folded or not."""
    import conv_nets
    from aotpack.frontend import aten_conv_stem, to_graph
    from aotpack.kernels.spec import ConvOp
    from aotpack.passes import compile_graph

    model, x = conv_nets.make_vision(name, batch=batch)
    applies = aten_conv_stem.applies
    if not folded:
        aten_conv_stem.applies = lambda *a, **k: False
    try:
        program = compile_graph(to_graph(model, list(x)))
    finally:
        aten_conv_stem.applies = applies
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    return next(op for op in program.ops if isinstance(op, ConvOp)), first, x[0]


def measure(name: str, batch: int, reps: int) -> dict:
    row = {"model": name, "batch": batch}
    for folded in (True, False):
        op, conv_module, x = stem_op(name, batch, folded)
        configs = time_configs(op, reps)
        timed = [e for e in configs if "ms" in e]
        row["folded" if folded else "gathered"] = {
            "x": list(op.x.shape), "kernel": list(op.kernel), "stride": list(op.stride),
            "default_ms": timed[0]["ms"] if timed and configs[0] is timed[0] else None,
            "best": min(timed, key=lambda e: e["ms"]) if timed else None, "configs": configs}
    xc = x.cuda().contiguous(memory_format=torch.channels_last)
    w = conv_module.weight.detach().cuda().to(xc.dtype).contiguous(
        memory_format=torch.channels_last)
    row["cudnn_ms"] = bench(lambda: F.conv2d(xc, w, None, conv_module.stride,
                                             conv_module.padding), reps=reps)["median_ms"]
    n, c, h, wd = x.shape
    xn = x.cuda()
    row["fold_copy_ms"] = bench(lambda: xn.view(n, c, h // 2, 2, wd // 2, 2).permute(
        0, 2, 4, 3, 5, 1).contiguous(), reps=reps)["median_ms"]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,efficientnet_b0,mobilenet_v3_large")
    p.add_argument("--batches", default="32,128")
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    rows = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            row = measure(name, batch, args.reps)
            rows.append(row)
            (out_dir / "stem_bench.json").write_text(json.dumps(rows, indent=1))
            f, g = row["folded"], row["gathered"]
            print(f"{name} b{batch}: cudnn {row['cudnn_ms']:.4f} fold copy "
                  f"{row['fold_copy_ms']:.4f} | folded default {f['default_ms']} best "
                  f"{(f['best'] or {}).get('ms')} {(f['best'] or {}).get('config')} | "
                  f"gathered default {g['default_ms']} best {(g['best'] or {}).get('ms')}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
