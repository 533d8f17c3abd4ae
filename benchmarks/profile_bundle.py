"""Where a bundle's time goes in steady state: per-kernel GPU time (torch.profiler / CUPTI on the
binding's CUDA-graph replays) next to the whole forward, in windows after a long warm-up, so that
clock drift under sustained load shows up as drift between windows. The 8192³ GEMM ceiling is
timed the same way in the same process.

    python benchmarks/profile_bundle.py .gpu/llama-prefill-tuned [--warmup-s 3] [--windows 8]

Prints a table per bundle; --json writes the numbers. Needs a GPU, torch and libaotpack
(AOTPACK_LIB).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def windows(fn, warmup_s: float, n_windows: int, reps: int) -> list[float]:
    """Median ms of `reps` back-to-back runs, per window, after `warmup_s` seconds of runs."""
    import torch

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    from timing import bench  # forwards back to back, as the suite times them

    return [bench(fn, reps=reps, warmup=0)["median_ms"] for _ in range(n_windows)]


def kernel_times(fn, iters: int) -> dict[str, float]:
    """Mean µs per forward of each kernel (and memset) name, from CUPTI activity."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.name and "memcpy" not in e.name.lower():
            per[e.name] = per.get(e.name, 0.0) + e.device_time / iters
    return per


def kernel_sequence(fn) -> list[list]:
    """[name, µs] of each kernel one forward launches, in launch order (which kernel of a
    family is slow: a bundle's GEMMs share one kernel name)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    seq = sorted((e.time_range.start, e.name, e.device_time) for e in prof.events()
                 if e.device_type.name == "CUDA" and e.name and "memcpy" not in e.name.lower())
    return [[name[:60], round(us, 2)] for _, name, us in seq]


def bundle_fn(folder: Path):
    import torch

    from aotpack.runtime import Model, Session

    model = Model(str(folder / "model.aotpack"))
    session = Session(model)
    from aotpack.dtypes import DType

    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = []
    for i in model.inputs:
        dt = DType(i.dtype).to_torch()
        inputs.append(torch.randn(i.shape, generator=g, device="cuda").to(dt)
                      if dt.is_floating_point else
                      torch.randint(0, 2, i.shape, generator=g, device="cuda").to(dt))
    outs = session.run(inputs)
    return lambda: session.run(inputs, outs), model


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", type=Path)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--eager", action="append", default=[],
                    help="also profile this model spec in eager torch (e.g. examples/x.py:make)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    report = {}
    n = 8192
    x, y = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    gemm = windows(lambda: x @ y, a.warmup_s, a.windows, 20)
    report["gemm8192"] = {"window_ms": gemm,
                          "tflops": [round(2 * n**3 / (m * 1e-3) / 1e12, 1) for m in gemm]}
    del x, y
    print(f"gemm 8192^3 TFLOP/s per window: {report['gemm8192']['tflops']}")
    for folder in a.bundles:
        fn, model = bundle_fn(folder)
        w = windows(fn, a.warmup_s, a.windows, a.reps)
        per = kernel_times(fn, 20)
        w2 = windows(fn, 0.0, 2, a.reps)
        total = sum(per.values())
        report[folder.name] = {"window_ms": w, "after_profile_ms": w2, "kernels_us": per,
                               "kernel_sum_us": total, "sequence_us": kernel_sequence(fn)}
        print(f"\n{folder.name}: window medians ms {[round(v, 4) for v in w]}"
              f" then {[round(v, 4) for v in w2]}")
        for name, us in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"  {us:9.1f} us  {name[:90]}")
        print(f"  {total:9.1f} us  sum of kernels (profiled, per forward)")
        model.close()
    for spec in a.eager:
        from aotpack.frontend import load_model

        model, inputs = load_model(spec)[:2]
        model = model.cuda()
        inputs = [i.cuda() for i in inputs]
        with torch.no_grad():
            fn = lambda: model(*inputs)  # noqa: E731
            w = windows(fn, a.warmup_s, a.windows, a.reps)
            per = kernel_times(fn, 20)
            seq = kernel_sequence(fn)
        report["eager:" + spec] = {"window_ms": w, "kernels_us": per,
                                   "kernel_sum_us": sum(per.values()), "sequence_us": seq}
        print(f"\neager {spec}: window medians ms {[round(v, 4) for v in w]}")
        for name, us in sorted(per.items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {us:9.1f} us  {name[:90]}")
        print(f"  {sum(per.values()):9.1f} us  sum of kernels")
        del model, inputs
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
