"""The suite's torch tasks (run by suite_worker.py in a fresh process): eager, torch.compile
default and max-autotune of one model in ONE process, the max-autotune warm-cache start, and
the reference inputs.

Why one process for three variants: each of them used to pay python + import torch + model
build (5-9 s) and the process teardown; the compile variants now start from the process eager
left, with what makes a compile cold restored by hand before each: torch._dynamo.reset(), the
Inductor compile workers shut down (they restart with the new cache dirs in their
environment), and a fresh, empty Inductor/Triton cache dir (torch._inductor.utils.fresh_cache,
which also clears Inductor's in-memory caches). build_s is the first call's time. What only a
process's first compile would pay (imports of Dynamo/Inductor/Triton, Triton's driver helpers)
is paid by a one-line warm-up compile before it and reported apart (compiler_warmup_s), so
default and max-autotune measure the same thing: compiling the model. What stays warm is the
Python/torch import state and the CUDA context — not part of build_s — and library workspaces
(cuBLAS) that eager created. Cold start (process start → first output) is eager's, measured
first.
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import os
import sys
import tempfile
import time
import traceback

from suite_proc import Partial, since_process_start, stage

ORDER = ("eager", "compile", "compile-max-autotune")


def task_torch(t: dict) -> dict:
    """t["variants"] (a sub-sequence of ORDER) of t["spec"] on t["device"]; the result has one
    entry per variant under "variants" (a variant that raises gets {"error", "traceback"} and
    the next one still runs)."""
    import torch

    import suite_measure as M

    device = t["device"]
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    stage("build model")
    model, inputs = M.load_on(t["spec"], device, t.get("inputs_path"))
    part = Partial(t.get("result_path"), "variants")
    state: dict = {}
    with torch.no_grad():
        for variant in t["variants"]:
            part.start(variant)
            t0 = time.perf_counter()
            try:
                res = _variant(t, variant, model, inputs, mem, state)
            except Exception as e:
                stage(f"{variant} failed: {type(e).__name__}")
                res = {"error": f"{type(e).__name__}: {str(e).strip()[:400]}",
                       "traceback": traceback.format_exc()[-2000:]}
            res["variant_s"] = round(time.perf_counter() - t0, 2)
            part.done(variant, res)
            if variant != t["variants"][-1]:
                _between_variants(torch, device, mem)
    return part.doc


def _variant(t: dict, variant: str, model, inputs, mem, state: dict) -> dict:
    stage(variant)
    if variant == "eager":
        return _eager(t, model, inputs, mem, state)
    return _compiled(t, variant, model, inputs, mem, state)


def _eager(t: dict, model, inputs, mem, state: dict) -> dict:
    """First forward (cold start: the first thing this process computes), FLOPs/bytes, the
    reference (inputs + outputs) every other row is compared with, the comparison of outputs
    saved by rows measured earlier (t["compare"]), then the steady state."""
    import suite_measure as M

    stage("first forward")
    first = M.to_host(model(*inputs))
    res = {"cold_start_s": since_process_start()}
    stage("reference, comparisons, FLOP count")
    mem.sample()
    state["ref"] = first
    if t.get("ref_path"):
        _save_reference(t["ref_path"], inputs, first)
    if t.get("compare"):
        res["compared"] = M.compare_saved(t["compare"], first)
    if t.get("ref_only"):
        return res
    res["costs"] = M.model_costs(model, inputs, first)
    res.update(M.steady_state(lambda: model(*inputs), t["device"], t.get("reps", 100), stage))
    mem.sample()
    return {**res, **mem.fields()}


def _compiled(t: dict, variant: str, model, inputs, mem, state: dict) -> dict:
    import torch

    import suite_measure as M

    mode = "max-autotune" if variant == "compile-max-autotune" else None
    root = os.path.join(t["cache_root"], variant)
    warm_s = _warm_compiler(torch, t["device"], root)
    with fresh_inductor_cache(root) as cache_dir:
        fn = torch.compile(model, mode=mode)
        stage(f"{variant}: first call (compile)")
        t0 = time.perf_counter()
        first = M.to_host(fn(*inputs))
        res = {"build_s": round(time.perf_counter() - t0, 2), "cache_dir": cache_dir,
               "compiler_warmup_s": warm_s}
        mem.sample()
        ref = state.get("ref") or M.to_host(model(*inputs))
        res["rel_err_vs_eager"] = M.max_rel_err(first, ref)
        res.update(M.steady_state(lambda: fn(*inputs), t["device"], t.get("reps", 100), stage))
        mem.sample()
    return {**res, **mem.fields()}


def _warm_compiler(torch, device: str, root: str) -> float | None:
    """Once per process, before the first timed compile: compiles a one-line function in a
    throw-away cache, so that what only a process's first compile pays (imports of Dynamo,
    Inductor and Triton, Triton's driver helpers, ISA checks) is paid here and reported apart
    (compiler_warmup_s), and default and max-autotune both measure compiling the model.
    Returns its time (None when already done)."""
    if getattr(_warm_compiler, "done", False):
        return None
    _warm_compiler.done = True
    t0 = time.perf_counter()
    import torch._inductor.config as inductor_config

    # compiled in this process: starting the pool of compile workers here would be wasted, as
    # _between_variants shuts it down and the timed compile starts its own (inside build_s)
    with fresh_inductor_cache(os.path.join(root, "warmup")), \
            inductor_config.patch(compile_threads=1):
        x = torch.ones(8, device=device)
        torch.compile(lambda a: a * 2 + 1)(x)
    _between_variants(torch, device, None)
    return round(time.perf_counter() - t0, 2)


def _between_variants(torch, device: str, mem) -> None:
    """What a fresh process would not have: compiled graphs, compile workers (they keep the
    previous cache dirs in their environment), cached device blocks. Only what was imported:
    after eager alone there is nothing compiled."""
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()
    workers = sys.modules.get("torch._inductor.async_compile")
    if workers is not None and hasattr(workers, "shutdown_compile_workers"):
        stage("stopping the compile workers")
        stop_compile_workers(workers)
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    if mem is not None:
        mem.reset()


def stop_compile_workers(async_compile) -> None:
    """Inductor's compile-worker pools gone at once. Its shutdown_compile_workers alone waits
    until the pool's workers have started (each imports torch) and exit: the 7-13 s between
    torch.compile's launches and max-autotune in the 2026-11-30-5c063bb run, against 3-5 s
    between eager and torch.compile (no pool then). The pool's sidecar process and its workers
    are killed first; the shutdown then only clears torch's bookkeeping, so the next compile
    starts a pool of its own, as in a fresh process."""
    import logging

    from suite_runner import kill_tree

    for pool in list(getattr(async_compile, "_pool_set", ())):
        proc = getattr(pool, "process", None)
        if proc is not None and proc.poll() is None:
            kill_tree(proc.pid)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
    # its write to the dead sidecar fails; that OSError is caught and logged with a traceback
    quiet = logging.getLogger("torch._inductor.compile_worker.subproc_pool")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        async_compile.shutdown_compile_workers()
    finally:
        quiet.setLevel(level)


@contextlib.contextmanager
def fresh_inductor_cache(root: str):
    """An empty Inductor + Triton cache dir under root, kept afterwards (the warm-cache start
    reuses it); yields its path. Uses torch's own fresh_cache (which also clears Inductor's
    in-memory caches) when this torch has one that takes dir/delete."""
    import torch._inductor.utils as iu

    os.makedirs(root, exist_ok=True)
    fresh = getattr(iu, "fresh_cache", None) or getattr(iu, "fresh_inductor_cache", None)
    params = inspect.signature(fresh).parameters if fresh else {}
    if "dir" in params and "delete" in params:
        with fresh(dir=root, delete=False):
            yield os.environ["TORCHINDUCTOR_CACHE_DIR"]
        return
    d = tempfile.mkdtemp(dir=root)  # older torch: the env by hand
    old = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=d, TRITON_CACHE_DIR=os.path.join(d, "triton"))
    try:
        yield d
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _save_reference(path: str, inputs: list, outputs: list) -> None:
    """Eager's inputs and host outputs: aotpack-py and aoti-run read them back."""
    import suite_measure as M

    M.save({"inputs": [x.cpu() for x in inputs], "outputs": outputs}, path)


def task_torch_warm(t: dict) -> dict:
    """Fresh process, the Inductor cache a compile of this run left (env set by the suite):
    python + import torch + model build + torch.compile + first output."""
    import torch

    import suite_measure as M

    if t["device"] == "cuda":
        torch.cuda.init()
    model, inputs = M.load_on(t["spec"], t["device"], t.get("inputs_path"))
    mode = "max-autotune" if t["variant"] == "compile-max-autotune" else None
    fn = torch.compile(model, mode=mode)
    with torch.no_grad():
        t0 = time.perf_counter()
        M.to_host(fn(*inputs))
    return {"cold_start_s": since_process_start(),
            "first_forward_s": round(time.perf_counter() - t0, 3)}


def task_inputs(t: dict) -> dict:
    """The fresh random inputs of each model (seeded, as load_on makes them), saved before any
    row runs: rows measured before eager (aotpack in the GPU window) use the same inputs, so
    eager can compare their saved outputs later. CPU only."""
    import suite_measure as M
    from aotpack.frontend import load_model

    done = {}
    for item in t["models"]:
        stage(f"inputs {item['name']}")
        try:
            _, example = load_model(item["spec"])
            M.save({"inputs": M.random_inputs(example, "cpu")}, item["path"])
            done[item["name"]] = item["path"]
        except Exception as e:  # eager makes the same inputs itself; only the comparison waits
            done[item["name"]] = f"error: {type(e).__name__}: {e}"[:300]
    return {"inputs": done}


TASKS = {"torch": task_torch, "torch-warm": task_torch_warm, "inputs": task_inputs}
