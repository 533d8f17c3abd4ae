"""ResNet-18 (224x224, bf16) on the GPU: the aotpack bundle vs eager torch (channels_last,
cuDNN) vs torch.compile(mode="max-autotune"), at batch 1 and 32 (issue 17).

    python benchmarks/bench_conv.py                 # from the repo root, on the H200
    OUT=/some/dir python benchmarks/bench_conv.py   # also writes $OUT/conv_bench.json
    python benchmarks/bench_conv.py --batches 1 --no-compile   # quicker

Each contender runs the same random-weight model (examples/conv_nets.py, batch norms
randomized); outputs are checked against eager (relative error) and timed with CUDA events
(median of repeated runs after warm-up; the bundle replays its CUDA graph, eager and compiled
torch run as they are). The bundle is built with the heuristic configs (no tuning) unless
--tune fast|full. Every contender is guarded: a failure is reported and the run goes on.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import conv_nets  # noqa: E402
sys.path.insert(0, str(ROOT / "benchmarks"))
from compare import median_ms  # noqa: E402


def time_ms(fn, warmup=10, reps=50) -> float:
    return median_ms(fn, warmup=warmup, reps=reps)


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def build_bundle(batch: int, out_dir: Path, tune: str):
    import aotpack

    factory = out_dir / f"r18_b{batch}.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\n"
                       f"import conv_nets\n\ndef make():\n"
                       f"    return conv_nets.make_resnet18(batch={batch})\n")
    start = time.perf_counter()
    aotpack.build(f"{factory}:make", out_dir / f"b{batch}", progress=False,
                  command_line="bench_conv", tune=tune)
    return out_dir / f"b{batch}", time.perf_counter() - start


def bench_batch(batch: int, args, tmp: Path) -> list[dict]:
    import aotpack

    model, (x,) = conv_nets.make_resnet18(batch=batch)
    model, x = model.cuda(), x.cuda()
    rows = []
    with torch.no_grad():
        want = model(x).float()
    eager = model.to(memory_format=torch.channels_last)
    xc = x.contiguous(memory_format=torch.channels_last)

    def record(name, fn, extra=None):
        try:
            with torch.no_grad():
                got = fn()
                err = rel_err(got.float(), want)
                ms = time_ms(fn)
            row = {"batch": batch, "contender": name, "ms": round(ms, 4),
                   "images_per_s": round(batch / ms * 1e3, 1), "rel_err": err, **(extra or {})}
        except Exception as e:  # report and go on
            traceback.print_exc()
            row = {"batch": batch, "contender": name, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps(row), flush=True)

    torch.backends.cudnn.benchmark = True
    record("eager_cudnn_channels_last", lambda: eager(xc))
    if not args.no_compile:
        try:
            compiled = torch.compile(eager, mode="max-autotune")
            with torch.no_grad():
                compiled(xc)  # compile outside the timing
            record("torch_compile_max_autotune", lambda: compiled(xc))
        except Exception as e:
            rows.append({"batch": batch, "contender": "torch_compile_max_autotune",
                         "error": f"{type(e).__name__}: {e}"})
    try:
        folder, build_s = build_bundle(batch, tmp, args.tune)
        bundle = aotpack.load(folder)
        session = bundle.session()
        out = [torch.empty_like(want, dtype=torch.bfloat16)]
        record("aotpack", lambda: session.run([x], out)[0],
               {"build_s": round(build_s, 1), "launches": _launches(folder)})
    except Exception as e:
        traceback.print_exc()
        rows.append({"batch": batch, "contender": "aotpack", "error": f"{type(e).__name__}: {e}"})
    return rows


def _launches(folder: Path):
    try:
        from aotpack.bundle.reader import bundle_file, read_bundle

        manifest = read_bundle(bundle_file(folder)).manifest
        steps = manifest.get("steps")
        if steps is None:  # a dynamic bundle: steps per plan / variant
            return None
        return len(steps)
    except Exception:
        return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile max-autotune")
    p.add_argument("--tune", default="none", choices=["none", "fast", "full"])
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_conv needs a CUDA GPU")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aotpack-bench-conv-") as tmp:
        for batch in args.batches:
            rows += bench_batch(batch, args, Path(tmp))
    print("\nbatch  contender                        ms      img/s   rel_err")
    for r in rows:
        if "error" in r:
            print(f"{r['batch']:>5}  {r['contender']:<30} ERROR {r['error'][:80]}")
        else:
            print(f"{r['batch']:>5}  {r['contender']:<30} {r['ms']:>7.3f} {r['images_per_s']:>9.1f}"
                  f"   {r['rel_err']:.2e}")
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "conv_bench.json"
        path.write_text(json.dumps({"model": "resnet18 224x224 bf16", "results": rows}, indent=1))


if __name__ == "__main__":
    main()
