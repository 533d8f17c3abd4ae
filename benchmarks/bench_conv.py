"""Convolutional networks on the GPU (issue 17): the aotpack bundle vs eager torch
(channels_last, cuDNN) vs torch.compile(mode="max-autotune") vs AOTInductor, 224x224 bf16.

    python benchmarks/bench_conv.py --models resnet50 --batches 1,32    # one slice
    python benchmarks/bench_conv.py --models all --batches 1,32,128     # everything (long)
    OUT=/dir python benchmarks/bench_conv.py ...   # rows also go to $OUT/conv_bench_*.json,
                                                   # rewritten after every row
    --contenders eager,aotpack,compile,aoti   (default: all four, run in that order)
    --kernels   aotpack rows also get GPU ms per kernel name and a device copy of the
                depthwise convs' bytes (their bandwidth floor)

Models: torchvision's own (random weights) where torchvision imports, else
examples/vision_nets.py's definitions of the same layers; batch norms and layer scales
randomized (examples/conv_nets.make_vision), so every contender runs the same weights.
Per row: median latency (CUDA events after warm-up; the bundle replays its CUDA graph),
images/s, kernel launches per forward (torch.profiler's kernel events for the torch
contenders, the bundle's steps for aotpack), peak GPU memory (torch's allocator peak around
the contender's first forwards, weights included; for aotpack and AOTInductor, which allocate
outside torch's allocator, `device_mib`: the device memory their load and first run took, and
aotpack's arena), build time (aotpack build, max-autotune's
first call, AOTI export + compile + load), the relative error against eager, and achieved
TFLOP/s over the conv + linear FLOPs (with the % of the H200's 790 TFLOP/s bf16 dense ceiling).

AOTInductor runs in a child process (a crash or a hang there costs its row only): it links
its .so with -Wl,--exclude-libs,ALL and keeps weights out of the .so, the recipe that worked
on the H200 image (benchmarks/SUITE.md). The slow parts are max-autotune's compile (~1-4
min per model and batch) and AOTI's compile and load (~1-2 min): split long runs over calls,
or run one process per contender at once with BENCH_GPU_LOCK=FILE (their compiles overlap, and
only one times on the GPU at a time; build_s then includes the others' CPU load).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]

import torch  # noqa: E402

import conv_nets  # noqa: E402
from compare import median_ms, rel_err  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny",
          "regnet_y_400mf")
CONTENDERS = ("eager", "aotpack", "compile", "aoti")
BF16_DENSE_TFLOPS = 790.0  # H200 bf16 dense tensor-core ceiling (cuBLAS reaches 788)
SIZE = 224


def time_ms(fn, warmup=10, reps=50) -> float:
    return median_ms(fn, warmup=warmup, reps=reps)


def count_flops(model, x) -> int:
    """2 x MACs of every Conv1d/2d and Linear of one forward (what the tensor cores do)."""
    total = [0]

    def conv_hook(m, inp, out):
        k = m.weight[0].numel()  # C/groups * KH * KW
        total[0] += 2 * out.numel() * k

    def linear_hook(m, inp, out):
        total[0] += 2 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv_hook if isinstance(m, (torch.nn.Conv1d,
                                                                  torch.nn.Conv2d))
                                     else linear_hook)
             for m in model.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d,
                                                        torch.nn.Linear))]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total[0]


def depthwise_bytes(model, x) -> int:
    """Bytes the depthwise convs must move at least (input read once, output written)."""
    total = [0]

    def hook(m, inp, out):
        total[0] += (inp[0].numel() + out.numel()) * out.element_size()

    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if isinstance(m, torch.nn.Conv2d) and m.groups > 1
             and m.groups == m.in_channels == m.out_channels]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total[0]


def kernel_times(fn, reps: int = 5) -> dict:
    """GPU ms per forward by kernel name (CUPTI sees the kernels of graph replays too)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.key] = round(e.device_time_total / 1e3 / reps, 4)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def kernel_trace(fn) -> list:
    """[kernel name, GPU µs] of each launch of one forward, in launch order: the bundle's steps
    share kernel names (depthwise_kernel, gemm_kernel), so per-step times need the order."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return [[e.name, round(e.device_time_total, 1)] for e in events]


def copy_ms(nbytes: int) -> float:
    """A device copy reading and writing `nbytes` in all: the depthwise convs' floor."""
    src = torch.empty(max(1, nbytes // 4), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return time_ms(lambda: dst.copy_(src), warmup=5, reps=20)


def count_launches(fn) -> int | None:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len([n for n in names if not n.startswith(("Memcpy", "Memset"))])


def peak_mib(fn) -> float:
    """torch's allocator peak over a few forwards (weights and inputs included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def used_mib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


# ----------------------------------------------------------------------------- contenders
def make(name: str, batch: int):
    model, (x,) = conv_nets.make_vision(name, batch, SIZE, torch.bfloat16)
    model = model.cuda().to(memory_format=torch.channels_last)
    return model, x.cuda().contiguous(memory_format=torch.channels_last)


def run_eager(model, x, row):
    torch.backends.cudnn.benchmark = True
    return lambda: model(x)


def run_compile(model, x, row):
    # a fresh compile per row: after another batch's row, dynamo would otherwise recompile this
    # model with a dynamic batch (or reuse that graph) instead of tuning for this shape
    torch._dynamo.reset()
    compiled = torch.compile(model, mode="max-autotune")
    start = time.perf_counter()
    compiled(x)  # compiles (and autotunes) outside the timing
    torch.cuda.synchronize()
    row["build_s"] = round(time.perf_counter() - start, 1)
    return lambda: compiled(x)


def run_aotpack(model, x, row, name, batch, tmp: Path, tune: str, kernel_report: bool):
    import aotpack

    factory = tmp / f"{name}_b{batch}.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\n"
                       f"import torch, conv_nets\n\ndef make():\n"
                       f"    return conv_nets.make_vision({name!r}, {batch}, {SIZE}, "
                       f"torch.bfloat16)\n")
    folder = tmp / f"{name}_b{batch}"
    start = time.perf_counter()
    aotpack.build(f"{factory}:make", folder, progress=False, command_line="bench_conv",
                  tune=tune)
    row["build_s"] = round(time.perf_counter() - start, 1)
    before = used_mib()
    bundle = aotpack.load(folder)
    session = bundle.session()
    xn = x.contiguous()  # the bundle's signature is the model's NCHW input
    out = [torch.empty(batch, 1000, dtype=torch.bfloat16, device="cuda")]
    session.run([xn], out)
    torch.cuda.synchronize()
    row["device_mib"] = round(used_mib() - before, 1)
    row["arena_mib"] = round(bundle.arena_bytes / 2**20, 1)
    row.update(_manifest_facts(folder))
    row["_keep"] = (bundle, session)  # alive while timed
    fn = lambda: session.run([xn], out)[0]  # noqa: E731
    if kernel_report:
        row["kernel_ms"] = kernel_times(fn)
        row["kernel_trace_us"] = kernel_trace(fn)
        dw = depthwise_bytes(model, x)
        if dw:
            row["depthwise_mib"] = round(dw / 2**20, 1)
            row["copy_same_bytes_ms"] = round(copy_ms(dw), 4)
    return fn


def _manifest_facts(folder: Path) -> dict:
    try:
        from aotpack.bundle.reader import bundle_file, read_bundle

        manifest = read_bundle(bundle_file(folder)).manifest
        steps = manifest.get("steps")
        return {"launches": len(steps) if steps is not None else None,
                "bundle_mib": round(bundle_file(folder).stat().st_size / 2**20, 1)}
    except Exception as e:
        return {"manifest_error": f"{type(e).__name__}: {e}"}


# ----------------------------------------------------------------------------- AOTInductor
def aoti_child(name: str, batch: int, out_json: str, tmp: str) -> None:
    """In a child process: export, aoti_compile_and_package, aoti_load_package, time."""
    row = {}
    try:  # the suite's recipe: link with -Wl,--exclude-libs,ALL, weights out of the .so
        from suite_aoti import WEIGHTS_OUTSIDE_SO, make_wrapper, toolchain_facts

        facts = toolchain_facts()
        if facts.get("default_gxx"):  # before Inductor reads CXX
            os.environ["CXX"] = str(make_wrapper(Path(tmp), facts.get("realpath")
                                                 or facts["default_gxx"]))
            row["cxx"] = os.environ["CXX"]
    except Exception as e:  # the plain recipe then
        WEIGHTS_OUTSIDE_SO = {}
        row["recipe_error"] = f"{type(e).__name__}: {e}"
    model, x = make(name, batch)
    with torch.no_grad():
        want = model(x).float()
        start = time.perf_counter()
        ep = torch.export.export(model, (x,))
        configs = dict(WEIGHTS_OUTSIDE_SO)
        try:
            path = torch._inductor.aoti_compile_and_package(
                ep, package_path=str(Path(tmp) / f"{name}_b{batch}.pt2"),
                inductor_configs=configs)
        except Exception:  # a torch that does not know the config name
            path = torch._inductor.aoti_compile_and_package(
                ep, package_path=str(Path(tmp) / f"{name}_b{batch}_d.pt2"))
        torch.cuda.synchronize()
        before = used_mib()
        runner = torch._inductor.aoti_load_package(path)
        runner(x)
        torch.cuda.synchronize()
        row["device_mib"] = round(used_mib() - before, 1)  # the package's weights + workspace
        row["build_s"] = round(time.perf_counter() - start, 1)
        measure(row, lambda: runner(x), want, batch)
    Path(out_json).write_text(json.dumps(row))


def run_aoti_in_child(name, batch, tmp: Path, timeout_s: int) -> dict:
    out = tmp / f"aoti_{name}_b{batch}.json"
    cmd = [sys.executable, __file__, "--aoti-child", name, str(batch), str(out), str(tmp)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"AOTInductor child timed out after {timeout_s} s"}
    if p.returncode != 0 or not out.exists():
        return {"error": f"AOTInductor child exited {p.returncode}: {p.stderr[-600:]}"}
    return json.loads(out.read_text())


# ----------------------------------------------------------------------------- driver
@contextlib.contextmanager
def gpu_turn():
    """With $BENCH_GPU_LOCK set, the timing of a row holds an exclusive lock on that file, so
    several bench_conv processes can compile at once (max-autotune in one, AOTInductor in
    another) while only one times on the GPU at a time."""
    path = os.environ.get("BENCH_GPU_LOCK")
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def measure(row: dict, fn, want, batch: int) -> None:
    with gpu_turn():
        _measure(row, fn, want, batch)


def _measure(row: dict, fn, want, batch: int) -> None:
    got = fn()
    row["rel_err"] = rel_err(got.float(), want)
    row["peak_mib"] = peak_mib(fn)  # torch's allocator (aotpack and AOTI: device_mib too)
    if row.get("launches") is None:
        row["launches"] = count_launches(fn)
    ms = time_ms(fn)
    row.update(ms=round(ms, 4), images_per_s=round(batch / ms * 1e3, 1))


def bench(name: str, batch: int, args, tmp: Path, sink) -> None:
    model, x = make(name, batch)
    with torch.no_grad():
        want = model(x).float()
    flops = count_flops(model, x)
    for contender in args.contenders:
        row = {"model": name, "batch": batch, "contender": contender, "gflops": flops / 1e9}
        try:
            if contender == "aoti":
                row.update(run_aoti_in_child(name, batch, tmp, args.aoti_timeout))
            else:
                with torch.no_grad():
                    fn = {"eager": run_eager, "compile": run_compile}[contender](model, x, row) \
                        if contender != "aotpack" else \
                        run_aotpack(model, x, row, name, batch, tmp, args.tune,
                                    args.kernels)
                    measure(row, fn, want, batch)
        except Exception as e:  # report and go on
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {e}"
        row.pop("_keep", None)
        if "ms" in row:
            tflops = flops / (row["ms"] * 1e-3) / 1e12
            row.update(tflops=round(tflops, 1),
                       pct_of_bf16_ceiling=round(100 * tflops / BF16_DENSE_TFLOPS, 1))
        sink(row)
        torch.cuda.empty_cache()


def print_table(rows) -> None:
    print(f"\n{'model':<19}{'batch':>5}  {'contender':<9}{'ms':>9}{'img/s':>10}{'launch':>7}"
          f"{'peakMiB':>9}{'build_s':>8}{'rel_err':>9}")
    for r in rows:
        head = f"{r['model']:<19}{r['batch']:>5}  {r['contender']:<9}"
        if "error" in r:
            print(head + f" ERROR {r['error'][:90]}")
            continue
        print(head + f"{r['ms']:>9.3f}{r['images_per_s']:>10.1f}{str(r.get('launches')):>7}"
              f"{str(r.get('device_mib', r.get('peak_mib'))):>9}{str(r.get('build_s')):>8}"
              f"{r['rel_err']:>9.1e}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--aoti-child":
        return aoti_child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="resnet18,resnet50",
                   help=f"comma-separated, or 'all': {', '.join(MODELS)}")
    p.add_argument("--batches", default="1,32", help="comma-separated, e.g. 1,32,128")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--tune", default="none", choices=["none", "fast", "full"])
    p.add_argument("--aoti-timeout", type=int, default=420)
    p.add_argument("--kernels", action="store_true",
                   help="aotpack rows: GPU ms per kernel name, and the depthwise convs' bytes "
                        "timed as one device copy (their floor)")
    p.add_argument("--keep", default=None,
                   help="build the bundles here and keep them (benchmarks/profile_bundle.py)")
    args = p.parse_args()
    args.models = list(MODELS) if args.models == "all" else args.models.split(",")
    args.contenders = args.contenders.split(",")
    bad = [m for m in args.models if m not in MODELS] + \
        [c for c in args.contenders if c not in CONTENDERS]
    if bad:
        sys.exit(f"unknown model/contender {bad}: models {MODELS}, contenders {CONTENDERS}")
    if not torch.cuda.is_available():
        sys.exit("bench_conv needs a CUDA GPU")
    rows = []
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    tag = f"{'-'.join(args.models)}_b{args.batches.replace(',', '-')}_{'-'.join(args.contenders)}"

    def sink(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            (out / f"conv_bench_{tag}.json").write_text(json.dumps(
                {"size": SIZE, "dtype": "bf16", "gpu": torch.cuda.get_device_name(),
                 "torch": torch.__version__, "results": rows}, indent=1))

    with tempfile.TemporaryDirectory(prefix="aotpack-bench-conv-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models:
            for batch in (int(b) for b in args.batches.split(",")):
                bench(name, batch, args, work, sink)
    print_table(rows)


if __name__ == "__main__":
    main()
