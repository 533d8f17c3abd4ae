"""One measurement of the benchmark suite, in a fresh process (run by benchmarks/suite.py).

    python benchmarks/suite_worker.py TASK.json

TASK.json names the task and its arguments; the result (a JSON object) is written to the file
TASK["result_path"]. A task that raises writes {"error": ..., "traceback": ...} and exits 1; a
crash (e.g. SIGSEGV) writes nothing, and the log's last "stage:" line says where it happened.

Tasks here: ceilings, torch (eager / compile / compile-max-autotune, or only their cold start),
aotpack-py (bundle through the Python binding), aotpack-cold (the binding without torch: cold
start and device memory), frontend-probe (can aotpack's frontend and passes take the model?).
AOTInductor tasks live in suite_aoti.py. torch is imported inside the tasks that need it, never
at module level: aotpack-cold measures a process that has no torch.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # aotpack (repo root) and the suite's modules

from suite_proc import since_process_start, stage  # noqa: E402


# --------------------------------------------------------------------------------- ceilings

def task_ceilings(t: dict) -> dict:
    """The two ceilings every row is held against, measured like the rows themselves: a bf16
    GEMM 8192³ on random data and a large device-to-device copy (bytes read + written)."""
    import torch

    n, nbytes = 8192, 2 << 30
    gemm, copy = _time_gemm(n), _time_copy(nbytes)  # each frees its buffers on return
    return {"gemm_tflops": round(2 * n**3 / (gemm["median_ms"] * 1e-3) / 1e12, 1),
            "gemm_ms": gemm["median_ms"], "gemm_shape": [n, n, n],
            "copy_gbps": round(2 * nbytes / (copy["median_ms"] * 1e-3) / 1e9, 1),
            "copy_ms": copy["median_ms"], "copy_bytes_moved": 2 * nbytes,
            "gpu": torch.cuda.get_device_name(),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "method": "median of back-to-back CUDA-event intervals (as every row)"}


def _time_gemm(n: int) -> dict:
    import torch

    import suite_measure as M

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    return M.time_forward(lambda: torch.mm(a, b, out=c), "cuda", warmup=5, reps=30)


def _time_copy(nbytes: int) -> dict:
    import torch

    import suite_measure as M

    src = torch.randint(0, 255, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    return M.time_forward(lambda: dst.copy_(src), "cuda", warmup=3, reps=20)


# ------------------------------------------------------------------------------------ torch

def task_torch(t: dict) -> dict:
    """eager / compile / compile-max-autotune of one model. The first forward (with outputs
    copied to the host) gives the cold start; for compile variants it also holds the compile
    (cold Inductor cache unless t["warm_start_only"])."""
    import torch

    import suite_measure as M

    variant, device = t["variant"], t["device"]
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    stage("build model")
    model, inputs = M.load_on(t["spec"], device)
    fn_model = model
    if variant != "eager":
        mode = "max-autotune" if variant == "compile-max-autotune" else None
        fn_model = torch.compile(model, mode=mode)
    res: dict = {}
    with torch.no_grad():
        stage("first forward")
        t0 = time.perf_counter()
        first = M.to_host(fn_model(*inputs))
        first_s = time.perf_counter() - t0
        res["cold_start_s"] = since_process_start()
        mem.sample()
        if t.get("warm_start_only"):
            return dict(res, first_forward_s=round(first_s, 3))
        if t.get("ref_only"):
            _save_reference(t["ref_path"], inputs, first)
            return res
        if variant != "eager":
            res["build_s"] = round(first_s, 2)
        res.update(_reference(t, model, inputs, first, variant))
        res.update(M.steady_state(lambda: fn_model(*inputs), device, t.get("reps", 100), stage))
        mem.sample()
    res.update(mem.fields())
    return res


def _reference(t: dict, model, inputs, first: list, variant: str) -> dict:
    """Eager saves its inputs and outputs (the reference every other row is compared with) and
    the model's FLOPs/bytes; other variants compare their first outputs with eager's."""
    import suite_measure as M

    if variant == "eager":
        out = {"costs": M.model_costs(model, inputs, first)}
        if t.get("ref_path"):
            _save_reference(t["ref_path"], inputs, first)
        return out
    ref = M.to_host(model(*inputs))
    return {"rel_err_vs_eager": M.max_rel_err(first, ref)}


def _save_reference(path: str, inputs: list, outputs: list) -> None:
    """Eager's inputs and host outputs, which _ref_inputs and suite_aoti._inputs read back."""
    import torch

    torch.save({"inputs": [x.cpu() for x in inputs], "outputs": outputs}, path)


# ---------------------------------------------------------------------------------- aotpack

def _ref_inputs(t: dict, model) -> tuple[list, list | None, str | None]:
    """Inputs for the bundle: eager's saved inputs when they match its signature (so the rows'
    outputs can be compared), else random ones (and no comparison)."""
    import torch

    from aotpack.dtypes import DType

    ref = torch.load(t["ref_path"]) if t.get("ref_path") and Path(t["ref_path"]).is_file() else None
    want = [(tuple(i.shape), DType(i.dtype).to_torch()) for i in model.inputs]
    if ref and [(tuple(x.shape), x.dtype) for x in ref["inputs"]] == want:
        return [x.cuda() for x in ref["inputs"]], ref["outputs"], None
    g = torch.Generator().manual_seed(1234)
    xs = [torch.randn(s, generator=g).to(d).cuda() for s, d in want]
    return xs, None, "no matching eager reference: random inputs, outputs not compared"


def task_aotpack_py(t: dict) -> dict:
    """The bundle through the Python binding on torch tensors (CUDA graph replays), plus the
    same inputs through `aotpack-run --inputs/--outputs` for the C++ launcher's error."""
    import torch

    import suite_measure as M
    from aotpack.runtime import Model, Session

    stage("load bundle")
    model = Model(t["bundle"])
    session = Session(model)
    inputs, ref, note = _ref_inputs(t, model)
    stage("first run")
    outs = session.run(inputs)
    torch.cuda.synchronize()
    host = M.to_host(outs)
    res = {"notes": [note] if note else [], "launches": model.num_steps, "graph_launches": 1,
           "launches_method": "bundle manifest: kernel steps per forward, replayed as one "
                              "CUDA graph"}
    if ref is not None:
        res["rel_err_vs_eager"] = M.max_rel_err(host, ref)
    stage("timing")
    res.update(M.time_forward(lambda: session.run(inputs, outs), "cuda", reps=t.get("reps", 100)))
    if t.get("aotpack_run"):
        stage("aotpack-run --inputs/--outputs")
        res["aotpack_run"] = _check_aotpack_run(t, model, inputs, host, ref)
    return res


def _check_aotpack_run(t: dict, model, inputs: list, host: list, ref: list | None) -> dict:
    import subprocess
    import tempfile

    from safetensors.torch import load_file, save_file

    import suite_measure as M

    with tempfile.TemporaryDirectory() as tmp:
        xin, yout = Path(tmp, "x.safetensors"), Path(tmp, "y.safetensors")
        save_file({i.name: x.cpu() for i, x in zip(model.inputs, inputs)}, str(xin))
        p = subprocess.run([t["aotpack_run"], t["bundle"], "--inputs", str(xin), "--outputs",
                            str(yout)], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            return {"error": f"aotpack-run rc {p.returncode}: {(p.stderr or p.stdout)[-300:]}"}
        got = load_file(str(yout))
    outs = [got[o.name] for o in model.outputs]
    res = {"max_abs_diff_vs_binding": max(float((a.float() - b.float()).abs().max())
                                          for a, b in zip(outs, host))}
    if ref is not None:
        res["rel_err_vs_eager"] = M.max_rel_err(outs, ref)
    return res


def task_aotpack_cold(t: dict) -> dict:
    """Process start → first output on the host through libaotpack with no torch in the
    process (ctypes driver calls for buffers), and the device memory the model takes:
    cuMemGetInfo before load vs after load + first run (weights, arena, io, CUDA graph)."""
    import cuda_lite
    from aotpack.runtime import Model, Session

    stage("driver")
    drv = cuda_lite.Driver()
    free0 = drv.mem_free()
    t_load = time.perf_counter()
    stage("load bundle")
    model = Model(t["bundle"])
    session = Session(model)
    load_s = time.perf_counter() - t_load
    ins = [drv.alloc(i.nbytes) for i in model.inputs]
    for p, i in zip(ins, model.inputs):
        drv.upload(p, cuda_lite.finite_random_bytes(i.dtype, i.nbytes))
    outs = [drv.alloc(o.nbytes) for o in model.outputs]
    stage("first run")
    session.run_pointers(ins, outs, 0)
    drv.synchronize()
    host = [drv.download(p, o.nbytes) for p, o in zip(outs, model.outputs)]
    cold = since_process_start()
    used = free0 - drv.mem_free()
    io = sum(i.nbytes for i in model.inputs) + sum(o.nbytes for o in model.outputs)
    return {"cold_start_s": cold, "load_s": round(load_s, 3), "output_bytes": sum(map(len, host)),
            "device_mem_bytes": used, "arena_bytes": model.arena_bytes, "io_bytes": io,
            "torch_imported": "torch" in sys.modules}


def task_frontend_probe(t: dict) -> dict:
    """Can aotpack take this model? Runs the frontend (torch.export → IR) and the passes on the
    CPU, as `aotpack build` would before compiling kernels. The first error is the reason."""
    from aotpack.frontend import load_model, to_graph
    from aotpack.passes import compile_graph

    model, example = load_model(t["spec"])
    try:
        stage("frontend")
        graph = to_graph(model, example)
        stage("passes")
        compile_graph(graph)
    except Exception as e:  # the reason is the result, not a failure of this task
        return {"unsupported": _one_line(e)[:400]}
    return {"unsupported": None}


def _one_line(e: Exception) -> str:
    """The exception as "Type: first line of its message"."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"


def main() -> int:
    task = json.loads(Path(sys.argv[1]).read_text())
    out = Path(task["result_path"])
    import suite_aoti

    tasks = {"ceilings": task_ceilings, "torch": task_torch, "aotpack-py": task_aotpack_py,
             "aotpack-cold": task_aotpack_cold, "frontend-probe": task_frontend_probe,
             **suite_aoti.TASKS}
    stage(f"task {task['task']} ({task.get('id')})")
    try:
        result = tasks[task["task"]](task)
    except Exception as e:
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        out.write_text(json.dumps({"error": _one_line(e)[:500],
                                   "traceback": tb[-3000:]}))
        return 1
    out.write_text(json.dumps(result, default=str))
    stage("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
