"""Side-by-side on a GPU: a built bundle (through the C runtime's Python binding) against eager
PyTorch and torch.compile(mode="max-autotune"), on the same fresh random inputs, in one process.

    python benchmarks/compare.py examples/mlp.py:make out/mlp/model.aotpack [--no-compile]

Prints one JSON line (and writes it to $OUT/compare-<name>.json when OUT is set): relative error
of the bundle's outputs against eager bf16 and against an f32 eager reference, and the median
latency (CUDA events, warm-up, many repeats) of each. Latency floors come from the caller.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aotpack.dtypes import DType  # noqa: E402


def median_ms(fn, warmup: int = 10, reps: int = 50) -> float:
    """Median ms of `fn`, each call waited for (timing.bench with sync_each)."""
    from timing import bench

    return bench(fn, reps=reps, warmup=warmup, sync_each=True)["median_ms"]


def graph_us(fn, repeat: int = 20, timer=None) -> float:
    """us per call of `fn`, its launches captured `repeat` times in one CUDA graph and
    replayed (`timer(replay)` ms per replay; median_ms by default): kernels shorter than the
    launcher's host time per call (Triton's JIT: 20-40 us) are timed as a bundle runs them."""
    import torch

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            fn()
    ms = (timer or (lambda f: median_ms(f, 3, 20)))(graph.replay)
    return ms * 1e3 / repeat


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    if not bool(out.isfinite().all()):
        return float("inf")
    return float((out - ref).norm() / ref.norm())


def random_like_inputs(example_inputs, seed: int):
    """aotpack verify's inputs (floats ~ N(0, 1), integers in the example's [min, max]: token
    ids stay valid, eager's embedding asserts on one out of range), on the GPU."""
    from aotpack.verify import random_inputs

    signature = [{"dtype": DType.from_torch(t.dtype).value, "shape": list(t.shape)}
                 for t in example_inputs]
    return [t.cuda() for t in random_inputs(signature, example_inputs, seed)]


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def check_aotpack_run(bundle_path: str, bundle, inputs, outs) -> list[float]:
    """The same inputs through `aotpack-run --inputs/--outputs` (files, the C++ launcher alone):
    its outputs must equal the binding's (same kernels, same plan)."""
    import subprocess
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file

    run = os.environ.get("AOTPACK_RUN", "aotpack-run")
    with tempfile.TemporaryDirectory() as tmp:
        xin, yout = os.path.join(tmp, "x.safetensors"), os.path.join(tmp, "y.safetensors")
        save_file({t.name: x.cpu() for t, x in zip(bundle.inputs, inputs)}, xin)
        subprocess.run([run, bundle_path, "--inputs", xin, "--outputs", yout], check=True,
                       capture_output=True, timeout=120)
        got = load_file(yout)
    return [rel_err(got[t.name].to(o.device), o) if torch.any(o != 0) else float("nan")
            for t, o in zip(bundle.outputs, outs)]


def main() -> int:
    import faulthandler

    import torch

    faulthandler.enable()

    from aotpack.frontend import load_model
    from aotpack.runtime import Model, Session

    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("bundle")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()

    log(f"loading {args.spec}")
    model, example = load_model(args.spec)
    model = model.cuda().eval() if isinstance(model, torch.nn.Module) else model.module().cuda()
    inputs = random_like_inputs(example, seed=1234)
    res = {"spec": args.spec, "bundle": args.bundle, "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__}

    log(f"loading bundle {args.bundle}")
    t0 = time.perf_counter()
    bundle = Model(args.bundle, weights_path=args.weights)
    session = Session(bundle)
    res["load_s"] = round(time.perf_counter() - t0, 3)
    with torch.no_grad():
        ref = model(*inputs)
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        ref32 = model.float()(*[t.float() if t.is_floating_point() else t for t in inputs])
        ref32 = ref32 if isinstance(ref32, (tuple, list)) else (ref32,)
        model.to(torch.bfloat16)
        log("running the bundle")
        outs = session.run(inputs)
        torch.cuda.synchronize()
        res["rel_err_vs_eager_bf16"] = [rel_err(o, r) for o, r in zip(outs, ref)]
        res["rel_err_vs_f32"] = [rel_err(o, r) for o, r in zip(outs, ref32)]
        res["eager_bf16_vs_f32"] = [rel_err(r, r32) for r, r32 in zip(ref, ref32)]
        res["aotpack_run_vs_binding"] = check_aotpack_run(args.bundle, bundle, inputs, outs)
        log("timing")
        res["bundle_ms"] = median_ms(lambda: session.run(inputs, outs), reps=args.reps)
        res["eager_ms"] = median_ms(lambda: model(*inputs), reps=args.reps)
        if not args.no_compile:
            t0 = time.perf_counter()
            compiled = torch.compile(model, mode="max-autotune")
            compiled(*inputs)
            res["compile_s"] = round(time.perf_counter() - t0, 1)
            res["max_autotune_ms"] = median_ms(lambda: compiled(*inputs), reps=args.reps)
    line = json.dumps(res)
    print(line)
    if os.environ.get("OUT"):
        name = Path(args.bundle).parent.name or "bundle"
        Path(os.environ["OUT"], f"compare-{name}.json").write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
