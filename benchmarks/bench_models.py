"""Issue 15's proof on the GPU: real model families at real sizes (benchmarks/coverage_models.py)
as aotpack bundles vs eager torch vs torch.compile(mode="max-autotune"), in one process.

    python benchmarks/bench_models.py --models bert_base_padded,t5_base_encoder
    python benchmarks/bench_models.py --models all --contenders eager,aotpack   # no compile
    OUT=/dir python benchmarks/bench_models.py ...   # rows also go to $OUT/models_bench_*.json,
                                                     # rewritten after every row

The bundle is built here (`aotpack.build`, heuristic configs, timed) from the same factory
the torch contenders run, and run through the Python binding over the C runtime (CUDA-graph
replays). Per row: median latency (CUDA events, each call waited for, the method of
bench_conv.py), the relative error against eager, kernel launches per forward (the bundle's
steps; torch.profiler's kernel events for torch), build time (aotpack's build, max-autotune's
first call at that shape). The MoE layer is one dynamic bundle measured at 1 and 2,048 tokens.
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
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "gpu")]

import torch  # noqa: E402

import coverage_models  # noqa: E402
from bench_conv import _manifest_facts, count_launches, kernel_times, time_ms  # noqa: E402
from compare import rel_err  # noqa: E402

CONTENDERS = ("eager", "aotpack", "compile")


def points_of(name: str, inputs) -> dict:
    if name == "mixtral_moe":
        return coverage_models.mixtral_points()
    return {"": inputs}


def on_gpu(inputs):
    return tuple(t.cuda() for t in inputs)


def first_tensor(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def bench_torch(model, points, contender, sink, base) -> None:
    for label, inputs in points.items():
        row = dict(base, point=label, contender=contender)
        try:
            xs = on_gpu(inputs)
            fn = (lambda: model(*xs)) if contender == "eager" else None
            if contender == "compile":
                torch._dynamo.reset()
                compiled = torch.compile(model, mode="max-autotune", dynamic=False)
                start = time.perf_counter()
                compiled(*xs)
                torch.cuda.synchronize()
                row["build_s"] = round(time.perf_counter() - start, 1)
                fn = lambda: compiled(*xs)  # noqa: E731
            measure(row, fn, base["_want"][label])
        except Exception as e:
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {e}"
        sink(row)


def bench_aotpack(name, points, tmp: Path, sink, base, kernels: bool = False) -> None:
    import aotpack

    row0 = dict(base, contender="aotpack")
    try:
        folder = tmp / name
        start = time.perf_counter()
        aotpack.build(f"{ROOT / 'benchmarks' / 'coverage_models.py'}:{name}", folder,
                      progress=False, command_line="bench_models")
        row0["build_s"] = round(time.perf_counter() - start, 1)
        row0.update(_manifest_facts(folder))
        bundle = aotpack.load(folder)
        session = bundle.session()
    except Exception as e:
        traceback.print_exc()
        sink(dict(row0, point="", error=f"{type(e).__name__}: {e}"))
        return
    for label, inputs in points.items():
        row = dict(row0, point=label)
        try:
            xs = on_gpu(inputs)
            outs = session.run(xs)
            fn = lambda: session.run(xs, outs)[0]  # noqa: E731
            measure(row, fn, base["_want"][label])
            if kernels:
                row["kernel_ms"] = kernel_times(fn)
        except Exception as e:
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {e}"
        sink(row)
    session.close()
    bundle.close()


def measure(row: dict, fn, want) -> None:
    with torch.no_grad():
        got = first_tensor(fn())
        row["rel_err"] = rel_err(got.float(), want)
        if row.get("launches") is None:
            row["launches"] = count_launches(fn)
        row["ms"] = round(time_ms(fn, warmup=10, reps=50), 4)


def bench(name: str, args, tmp: Path, sink) -> None:
    made = getattr(coverage_models, name)()
    model, inputs = made[0].cuda(), made[1]
    points = points_of(name, inputs)
    with torch.no_grad():
        want = {label: first_tensor(model(*on_gpu(xs))).float() for label, xs in points.items()}
    base = {"model": name, "_want": want}
    for contender in args.contenders:
        if contender == "aotpack":
            bench_aotpack(name, points, tmp, sink, base, args.kernels)
        else:
            with torch.no_grad():
                bench_torch(model, points, contender, sink, base)
        torch.cuda.empty_cache()


def print_table(rows) -> None:
    print(f"\n{'model':<18}{'point':<8}{'contender':<9}{'ms':>9}{'launch':>7}{'build_s':>8}"
          f"{'rel_err':>9}")
    for r in rows:
        head = f"{r['model']:<18}{r['point']:<8}{r['contender']:<9}"
        if "error" in r:
            print(head + f" ERROR {r['error'][:90]}")
            continue
        print(head + f"{r['ms']:>9.3f}{str(r.get('launches')):>7}{str(r.get('build_s')):>8}"
              f"{r['rel_err']:>9.1e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="all",
                   help=f"comma-separated, or 'all': {', '.join(coverage_models.MODELS)}")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--kernels", action="store_true",
                   help="aotpack rows: GPU ms per forward by kernel name")
    args = p.parse_args()
    args.models = list(coverage_models.MODELS) if args.models == "all" else args.models.split(",")
    args.contenders = args.contenders.split(",")
    bad = [m for m in args.models if m not in coverage_models.MODELS] + \
        [c for c in args.contenders if c not in CONTENDERS]
    if bad:
        sys.exit(f"unknown model/contender {bad}: models {coverage_models.MODELS}, "
                 f"contenders {CONTENDERS}")
    if not torch.cuda.is_available():
        sys.exit("bench_models needs a CUDA GPU")
    rows = []
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    tag = f"{'-'.join(args.models)}_{'-'.join(args.contenders)}"

    def sink(row):
        row = {k: v for k, v in row.items() if not k.startswith("_")}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            (out / f"models_bench_{tag}.json").write_text(json.dumps(
                {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "results": rows}, indent=1))

    with tempfile.TemporaryDirectory(prefix="aotpack-bench-models-") as tmp:
        for name in args.models:
            bench(name, args, Path(tmp), sink)
    print_table(rows)


if __name__ == "__main__":
    main()
