"""One measurement of the benchmark suite, in a fresh process (run by benchmarks/suite.py).

    python benchmarks/suite_worker.py TASK.json

TASK.json names the task and its arguments; the result (a JSON object) is written to the file
TASK["result_path"]. A task that raises writes {"error": ..., "traceback": ...} and exits 1; a
crash (e.g. SIGSEGV) leaves what the task wrote so far (tasks over several items write after
each, suite_proc.Partial), and the log's last "stage:" line says where it happened.

Tasks here: ceilings, aotpack-py (every bundle through the Python binding, one process),
aotpack-cold (the binding without torch: cold start and device memory), frontend-probe (can
aotpack's frontend and passes take these models?). The torch tasks (eager → compile →
max-autotune in one process, warm-cache start, reference inputs) live in suite_worker_torch.py,
the AOTInductor ones in suite_aoti.py. torch is imported inside the tasks that need it, never
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

from suite_proc import since_process_start, stage, write_json  # noqa: E402


# --------------------------------------------------------------------------------- ceilings

def task_ceilings(t: dict) -> dict:
    """The two ceilings every row is held against, measured like the rows themselves: a bf16
    GEMM 8192³ on random data and a large device-to-device copy (bytes read + written)."""
    import torch

    import suite_measure as M

    n, nbytes = 8192, 2 << 30
    gemm, copy = _time_gemm(n), _time_copy(nbytes)  # each frees its buffers on return
    return {"gemm_tflops": round(2 * n**3 / (gemm["median_ms"] * 1e-3) / 1e12, 1),
            "gemm_ms": gemm["median_ms"], "gemm_shape": [n, n, n],
            "copy_gbps": round(2 * nbytes / (copy["median_ms"] * 1e-3) / 1e9, 1),
            "copy_ms": copy["median_ms"], "copy_bytes_moved": 2 * nbytes,
            "gpu": torch.cuda.get_device_name(),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu_bound": bool(M.gpu_bound(gemm) and M.gpu_bound(copy)),
            "method": "median of back-to-back CUDA-event intervals (as every row); measured "
                      "while CPU-only background jobs start (gpu_bound: the host enqueued "
                      "well ahead of the GPU)"}


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


# ---------------------------------------------------------------------------------- aotpack

def _bundle_inputs(item: dict, model) -> tuple[list, list | None, str | None]:
    """Inputs for a bundle: eager's reference when it exists (then its outputs are the
    comparison), else the suite's saved inputs (eager compares the saved outputs later), else
    random ones (no comparison). Used only when they match the bundle's signature."""
    import torch

    from aotpack.dtypes import DType

    want = [(tuple(i.shape), DType(i.dtype).to_torch()) for i in model.inputs]
    for key in ("ref_path", "inputs_path"):
        path = item.get(key)
        if path and Path(path).is_file():
            saved = torch.load(path)
            xs = saved["inputs"]
            if [(tuple(x.shape), x.dtype) for x in xs] == want:
                return [x.cuda() for x in xs], saved.get("outputs"), None
    g = torch.Generator().manual_seed(1234)
    xs = [torch.randn(s, generator=g).to(d).cuda() for s, d in want]
    return xs, None, "no matching eager inputs: random inputs, outputs not compared"


def task_aotpack_py(t: dict) -> dict:
    """Each bundle of t["bundles"] in turn through the Python binding on torch tensors (CUDA
    graph replays), in one process (import torch once); per bundle also the same inputs
    through `aotpack-run --inputs/--outputs` for the C++ launcher's outputs. Outputs are
    compared with eager's when its reference exists, else saved for eager to compare."""
    from suite_proc import Partial

    part = Partial(t.get("result_path"), "bundles")
    for item in t["bundles"]:
        part.start(item["key"])
        try:
            res = _one_bundle(t, item)
        except Exception as e:
            res = {"error": _one_line(e)[:500], "traceback": traceback.format_exc()[-2000:]}
        part.done(item["key"], res)
    return part.doc


def _one_bundle(t: dict, item: dict) -> dict:
    import torch

    import suite_measure as M
    from aotpack.runtime import Model, Session

    stage(f"load bundle {item['key']}")
    model = Model(item["bundle"])
    session = Session(model)
    try:
        inputs, ref, note = _bundle_inputs(item, model)
        stage("first run")
        outs = session.run(inputs)
        torch.cuda.synchronize()
        host = M.to_host(outs)
        res = {"notes": [note] if note else [], "launches": model.num_steps, "graph_launches": 1,
               "launches_method": "bundle manifest: kernel steps per forward, replayed as one "
                                  "CUDA graph"}
        res.update(_compare_or_save(host, ref, item.get("outputs_path")))
        stage("timing")
        res.update(M.time_forward(lambda: session.run(inputs, outs), "cuda",
                                  reps=t.get("reps", 100)))
        res["gpu_bound"] = M.gpu_bound(res)
        if t.get("aotpack_run"):
            stage("aotpack-run --inputs/--outputs")
            res["aotpack_run"] = _check_aotpack_run(t, item, model, inputs, host, ref)
        return res
    finally:
        session.close()
        model.close()


def _compare_or_save(outs: list, ref: list | None, save_path: str | None) -> dict:
    import suite_measure as M

    if ref is not None:
        return {"rel_err_vs_eager": M.max_rel_err(outs, ref)}
    if save_path:
        M.save_outputs(save_path, outs)
        return {"outputs_saved": save_path}
    return {}


def _check_aotpack_run(t: dict, item: dict, model, inputs: list, host: list,
                       ref: list | None) -> dict:
    import subprocess
    import tempfile

    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory() as tmp:
        xin, yout = Path(tmp, "x.safetensors"), Path(tmp, "y.safetensors")
        save_file({i.name: x.cpu() for i, x in zip(model.inputs, inputs)}, str(xin))
        p = subprocess.run([t["aotpack_run"], item["bundle"], "--inputs", str(xin),
                            "--outputs", str(yout)], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            return {"error": f"aotpack-run rc {p.returncode}: {(p.stderr or p.stdout)[-300:]}"}
        got = load_file(str(yout))
    outs = [got[o.name] for o in model.outputs]
    res = {"max_abs_diff_vs_binding": max(float((a.float() - b.float()).abs().max())
                                          for a, b in zip(outs, host))}
    save = item.get("outputs_path")
    return {**res, **_compare_or_save(outs, ref, save and save.replace(".pt", "-launcher.pt"))}


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
    """Can aotpack take these models (t["models"]: [{name, spec}])? Runs the frontend
    (torch.export → IR) and the passes on the CPU, as `aotpack build` would before compiling
    kernels; the first error is the reason. One process for all of them (imports once)."""
    from aotpack.frontend import load_model, to_graph
    from aotpack.passes import compile_graph

    out = {}
    for item in t["models"]:
        try:  # a model that cannot be built here says nothing about aotpack
            stage(f"{item['name']}: model")
            model, example = load_model(item["spec"])
        except Exception as e:
            out[item["name"]] = {"error": f"the model could not be built: {_one_line(e)}"[:400]}
            continue
        try:
            stage(f"{item['name']}: frontend")
            graph = to_graph(model, example)
            stage(f"{item['name']}: passes")
            compile_graph(graph)
        except Exception as e:  # the reason is the result, not a failure of this task
            out[item["name"]] = {"unsupported": _one_line(e)[:400]}
        else:
            out[item["name"]] = {"unsupported": None}
    return {"models": out}


def _one_line(e: Exception) -> str:
    """The exception as "Type: first line of its message"."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"


def main() -> int:
    task = json.loads(Path(sys.argv[1]).read_text())
    out = Path(task["result_path"])
    import suite_aoti
    import suite_worker_torch

    tasks = {"ceilings": task_ceilings, "aotpack-py": task_aotpack_py,
             "aotpack-cold": task_aotpack_cold, "frontend-probe": task_frontend_probe,
             **suite_worker_torch.TASKS, **suite_aoti.TASKS}
    stage(f"task {task['task']} ({task.get('id')})")
    try:
        result = tasks[task["task"]](task)
    except Exception as e:
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        write_json(out, {"error": _one_line(e)[:500], "traceback": tb[-3000:]})
        return 1
    write_json(out, result)
    stage("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
