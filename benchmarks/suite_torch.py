"""The suite's torch children, each in a fresh process (suite_worker.py runs them): the
ceilings, eager, torch.compile (default or max-autotune), max-autotune's warm-cache start, and
the frontend probe of a model without a bundle.

Eager runs first for a model: its first forward is the model's cold start, and it saves the
reference (inputs + outputs) that every later row of the model is compared with. A compile
row's child gets an empty Inductor/Triton cache (the suite sets the cache dirs); its build_s is
the first call's time after a one-line warm-up compile, which pays what only a process's first
compile pays (imports of Dynamo/Inductor/Triton, Triton's driver helpers) and is reported apart
(compiler_warmup_s): build_s measures compiling the model.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import tempfile
import time

from suite_measure import one_line, since_process_start, stage

MODES = {"compile": None, "compile-max-autotune": "max-autotune"}


def task_ceilings(t: dict) -> dict:
    """The two ceilings every row is held against, timed like the rows: a bf16 GEMM 8192³ on
    random data and a large device-to-device copy (bytes read + written)."""
    import torch

    from timing import bench

    n, nbytes = 8192, 2 << 30
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    gemm = bench(lambda: torch.mm(a, b, out=c), reps=30, warmup=5)
    del a, b, c
    src = torch.randint(0, 255, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy = bench(lambda: dst.copy_(src), reps=20, warmup=3)
    return {"gemm_tflops": round(2 * n**3 / (gemm["median_ms"] * 1e-3) / 1e12, 1),
            "gemm_ms": gemm["median_ms"], "gemm_shape": [n, n, n],
            "copy_gbps": round(2 * nbytes / (copy["median_ms"] * 1e-3) / 1e9, 1),
            "copy_ms": copy["median_ms"], "copy_bytes_moved": 2 * nbytes,
            "gpu": torch.cuda.get_device_name(),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "method": "median of CUDA-event intervals of back-to-back calls (timing.bench, as "
                      "every row), alone on the GPU"}


def task_eager(t: dict) -> dict:
    """First forward (cold start: the first thing this process computes), the reference for
    the model's other rows, FLOPs/bytes, then the steady state."""
    import torch

    import suite_measure as M

    device = t["device"]
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    stage("build model")
    model, inputs = M.load_on(t["spec"], device)
    with torch.no_grad():
        stage("first forward")
        first = M.to_host(model(*inputs))
        res = {"cold_start_s": since_process_start()}
        mem.sample()
        M.save_reference(t["ref_path"], inputs, first)
        stage("FLOP count")
        res["costs"] = M.model_costs(model, inputs, first)
        res.update(M.steady_state(lambda: model(*inputs), device, t["reps"], t["flush_l2"]))
    mem.sample()
    return {**res, **mem.fields()}


def task_compile(t: dict) -> dict:
    """torch.compile of the model (t["variant"]: compile or compile-max-autotune) on an empty
    cache: build_s is its first call; then the error against eager and the steady state."""
    import torch

    import suite_measure as M

    device = t["device"]
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    stage("build model")
    model, inputs = M.load_on(t["spec"], device)
    ref = M.load_reference(t.get("ref_path"))
    with torch.no_grad():
        warm_s = warm_compiler(torch, device, t["cache_root"])
        with fresh_inductor_cache(t["cache_root"]) as cache_dir:
            fn = torch.compile(model, mode=MODES[t["variant"]])
            stage("first call (compile)")
            t0 = time.perf_counter()
            first = M.to_host(fn(*inputs))
            res = {"build_s": round(time.perf_counter() - t0, 2), "cache_dir": cache_dir,
                   "compiler_warmup_s": warm_s, **M.vs_reference(first, ref)}
            mem.sample()
            res.update(M.steady_state(lambda: fn(*inputs), device, t["reps"], t["flush_l2"]))
    mem.sample()
    return {**res, **mem.fields()}


def warm_compiler(torch, device: str, root: str) -> float:
    """Compiles a one-line function in a throw-away cache, so that what only a process's first
    compile pays is paid here, not in build_s. One compile thread: a pool of compile workers
    started here would be wasted (the timed compile starts its own, inside build_s)."""
    import torch._inductor.config as inductor_config

    stage("compiler warm-up")
    t0 = time.perf_counter()
    with fresh_inductor_cache(os.path.join(root, "warmup")), \
            inductor_config.patch(compile_threads=1):
        torch.compile(lambda a: a * 2 + 1)(torch.ones(8, device=device))
    torch._dynamo.reset()
    return round(time.perf_counter() - t0, 2)


@contextlib.contextmanager
def fresh_inductor_cache(root: str):
    """An empty Inductor + Triton cache dir under root, kept afterwards (the warm-cache start
    reuses it); yields its path. torch's own fresh_cache also clears Inductor's in-memory
    caches; an older torch gets the environment set by hand."""
    import torch._inductor.utils as iu

    os.makedirs(root, exist_ok=True)
    fresh = getattr(iu, "fresh_cache", None) or getattr(iu, "fresh_inductor_cache", None)
    params = inspect.signature(fresh).parameters if fresh else {}
    if "dir" in params and "delete" in params:
        with fresh(dir=root, delete=False):
            yield os.environ["TORCHINDUCTOR_CACHE_DIR"]
        return
    d = tempfile.mkdtemp(dir=root)
    old = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=d, TRITON_CACHE_DIR=os.path.join(d, "triton"))
    try:
        yield d
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def task_warm_start(t: dict) -> dict:
    """Fresh process on the Inductor cache a compile row left (the suite sets the env):
    python + import torch + model build + torch.compile + first output."""
    import torch

    import suite_measure as M

    if t["device"] == "cuda":
        torch.cuda.init()
    model, inputs = M.load_on(t["spec"], t["device"])
    fn = torch.compile(model, mode=MODES[t["variant"]])
    with torch.no_grad():
        M.to_host(fn(*inputs))
    return {"cold_start_s": since_process_start()}


def task_frontend_probe(t: dict) -> dict:
    """Can aotpack take this model? Its frontend (torch.export → IR) and passes on the CPU, as
    `aotpack build` runs them before compiling kernels; the first error is the reason."""
    from aotpack.frontend import load_model, to_graph
    from aotpack.passes import compile_graph

    try:  # a model that cannot be built here says nothing about aotpack
        stage("model")
        model, example = load_model(t["spec"])
    except Exception as e:
        return {"probe_error": f"the model could not be built: {one_line(e)}"[:400]}
    try:
        stage("frontend and passes")
        compile_graph(to_graph(model, example))
    except Exception as e:  # the reason is the result, not a failure of this child
        return {"unsupported": one_line(e)[:400]}
    return {"unsupported": None}


TASKS = {"ceilings": task_ceilings, "eager": task_eager, "compile": task_compile,
         "compile-max-autotune": task_compile, "warm-start": task_warm_start,
         "frontend-probe": task_frontend_probe}
