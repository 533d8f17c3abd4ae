"""AOTInductor tasks of the suite's worker: compile a package (a background job), load and run
it in a fresh process (or only check that it loads), and a C++ toolchain probe. The plan (which
recipe, when, what a failure leads to) is suite_aoti_plan.py, on the suite's side.

Why these tasks look as they do: on the H200 image the default AOTI package crashed or hung at
load. The image's g++ links libstdc++ statically into shared objects; a probe .so formatting
with std::ostringstream crashes once torch is in the process and works when linked with
-Wl,--exclude-libs,ALL (suite_aoti_plan.KNOWN). So the compile records which compiler Inductor
used, whether the .so needs libstdc++.so.6 or exports its own std:: symbols, and the run says,
stage by stage, where a load dies.

The compile runs while the suite times other things, so it tells the suite about its GPU use:
it builds the model on the CPU and waits for the suite's go (suite_proc.wait_for_go) before
touching the GPU, and writes a marker once Inductor starts its first C++ build (from then on it
is g++ and file I/O: mark_gpu_done_at_cxx_build).

A run can be preloaded (suite_aoti_preload.py): it loads its package, parks until its go file
(suite_proc.park), and only then reads its inputs and does the first run and the timing; its
cold start leaves out the time parked, and its device memory counts the package's weights
plus what the run takes after the go (other packages load at the same time: _device_mem).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from suite_proc import since_process_start, stage, wait_for_go


# ------------------------------------------------------------------------------ diagnostics

def _run(cmd: list[str], timeout: float = 30) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"


STD_SYMBOL = re.compile(r"\s(_ZNSt|_ZNKSt|_ZSt)\S*$")


def so_facts(so: Path) -> dict:
    """NEEDED libraries of a shared object and how many std:: symbols it defines and exports
    (thousands: a static libstdc++ whose symbols interpose with the process's copy)."""
    dyn = _run(["readelf", "-d", str(so)])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    syms = _run(["nm", "-D", "--defined-only", str(so)]).splitlines()
    return {"needed": needed, "needs_libstdcxx_so": any("libstdc++" in n for n in needed),
            "exported_std_symbols": sum(1 for s in syms if STD_SYMBOL.search(s)),
            "bytes": so.stat().st_size}


def package_facts(pkg: Path) -> dict:
    """Files of a .pt2 package (sizes) and, for its .so, so_facts."""
    with zipfile.ZipFile(pkg) as z:
        infos = z.infolist()
        files = {i.filename: i.file_size for i in infos}
        largest = sorted(files.items(), key=lambda kv: -kv[1])[:6]
        facts: dict = {"files": len(files), "largest": largest,
                       "has_so": any(n.endswith(".so") for n in files),
                       "has_cpp": any(n.endswith(".cpp") for n in files),
                       "has_cmake": any(n.endswith("CMakeLists.txt") for n in files),
                       "weights_outside_so": any(n.endswith("_weights.blob") or "/weights/" in n
                                                 for n in files)}
        sos = [i for i in infos if i.filename.endswith(".so")]
        if sos:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(z.extract(sos[0], tmp))
                facts["so"] = so_facts(path)
        flags = [n for n in files if n.endswith("_compile_flags.json")]
        if flags:
            facts["compile_flags_compiler"] = json.loads(z.read(flags[0])).get("compiler")
    return facts


# ---------------------------------------------------------------------------------- compile

def task_aoti_compile(t: dict) -> dict:
    """torch.export + aoti_compile_and_package with the recipe's Inductor configs (those this
    torch knows; the recipe's environment, e.g. CXX, was set by the suite). Runs in the
    background: t["gpu_done_path"] is written once the compile no longer uses the GPU."""
    import torch

    import suite_measure as M

    stage("build model")
    model, inputs = M.load_on(t["spec"], "cpu")
    go_wait_s = wait_for_go(t.get("gpu_go_path"))
    device = t.get("device", "cuda")  # cpu: the plumbing's tests
    model, inputs = model.to(device), [x.to(device) for x in inputs]
    from torch._inductor import cpp_builder

    compiler = cpp_builder.get_cpp_compiler()
    configs, unknown = known_configs(t.get("configs") or {})
    res = {"compiler": compiler, "compiler_version": _run([compiler, "--version"]).splitlines()[0],
           "cxx_env": os.environ.get("CXX"), "configs_applied": configs,
           "configs_unknown_to_this_torch": unknown,
           "gpu_done_marker": mark_gpu_done_at_cxx_build(t.get("gpu_done_path")),
           "waited_for_gpu_go_s": go_wait_s}
    stage("export")
    t0 = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(model, tuple(inputs))
        export_s = time.perf_counter() - t0
        stage("aoti_compile_and_package")
        t1 = time.perf_counter()
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=t["package"], inductor_configs=dict(configs))  # it adds keys
    res.update(export_s=round(export_s, 2), compile_s=round(time.perf_counter() - t1, 2),
               package=str(path), artifact_bytes=Path(path).stat().st_size,
               weights_bytes=weights_bytes(ep))
    res["build_s"] = round(res["export_s"] + res["compile_s"], 2)
    stage("package facts")
    res["package_facts"] = package_facts(Path(path))
    return res


def weights_bytes(ep) -> int | None:
    """Bytes of the exported program's parameters, buffers and constants: what AOTInductor
    copies to the device at load (a preloaded run's device memory, _device_mem). None when
    this torch's ExportedProgram says otherwise: a fact must not fail the compile."""
    try:
        tensors = [*ep.state_dict.values(), *ep.constants.values()]
        return sum(x.numel() * x.element_size() for x in tensors if hasattr(x, "element_size"))
    except Exception:  # noqa: BLE001
        return None


def known_configs(configs: dict) -> tuple[dict, list[str]]:
    """The configs whose dotted name exists in this torch's Inductor config (the GPU machine's
    torch may be older than the one these names were checked against), and the others."""
    from torch._inductor import config

    missing = object()
    known, unknown = {}, []
    for name, value in configs.items():
        node = config
        for part in name.split("."):  # a default of None is a known name: hence the sentinel
            node = getattr(node, part, missing) if node is not missing else missing
        (unknown.append(name) if node is missing else known.__setitem__(name, value))
    return known, unknown


def mark_gpu_done_at_cxx_build(path: str | None) -> str:
    """Writes `path` when AOTInductor starts its first C++ build inside AotCodeCompiler.compile.
    By then codegen has run every compile-time autotuning on the GPU and the weights have been
    copied to the host; what follows (precompiled header, wrapper and kernel .o, link, package)
    is g++ and file I/O only, so the suite may time GPU-bound work alongside. Returns how the
    marker is armed, or why not (then the suite waits for the whole job)."""
    if not path:
        return "not requested"
    try:
        from torch._inductor import codecache, cpp_builder

        aot, builder = codecache.AotCodeCompiler, cpp_builder.CppBuilder
        compile_, build = aot.compile, builder.build
    except (ImportError, AttributeError) as e:
        return f"not armed ({type(e).__name__}: {e}): the suite waits for the job's end"
    inside = []

    def aot_compile(*args, **kwargs):
        inside.append(True)
        return compile_(*args, **kwargs)

    def cxx_build(self, *args, **kwargs):
        if inside and not os.path.exists(path):
            stage("first C++ build: the GPU is no longer used by this compile")
            Path(path).write_text(f"{time.time()}\n")
        return build(self, *args, **kwargs)

    aot.compile = staticmethod(aot_compile)  # compile_ is already bound to the class
    builder.build = cxx_build
    return "armed: AotCodeCompiler.compile → first CppBuilder.build"


# -------------------------------------------------------------------------------------- run

def _inputs(t: dict, device: str):
    """Eager's reference (inputs + outputs), else the suite's saved inputs, else the model's
    example inputs made afresh (same seed)."""
    import torch

    import suite_measure as M

    ref_path = t.get("ref_path")
    if ref_path and Path(ref_path).is_file():
        ref = torch.load(ref_path)
        return [x.to(device) for x in ref["inputs"]], ref["outputs"]
    saved = M.load_inputs(t.get("inputs_path"), device)
    if saved is not None:
        return saved, None
    _, inputs = M.load_on(t["spec"], "cpu")
    return [x.to(device) for x in inputs], None


def _load_package(t: dict):
    """A callable over a list of tensors, through the path the attempt names."""
    import torch

    pkg = t["package"]
    if t["method"] == "loader":  # the C++ loader's binding directly, no Python wrapper
        stage("AOTIModelPackageLoader.load_metadata_from_package")
        torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(pkg, "model")
        stage("AOTIModelPackageLoader(...)")
        device_index = 0 if t.get("device", "cuda") == "cuda" else -1
        loader = torch._C._aoti.AOTIModelPackageLoader(pkg, "model", False, 1, device_index)
        return lambda xs: loader.run(list(xs))
    stage("torch._inductor.aoti_load_package")
    runner = torch._inductor.aoti_load_package(pkg)
    return lambda xs: runner(*xs)


def task_aoti_run(t: dict) -> dict:
    """Fresh process: load the package, first run (cold start), then the row's measurements;
    with t["check_only"], only load + first run + finite outputs (the GPU window's check).
    With t["go_path"] (a preloaded run), it parks between the load and the first run until the
    suite's go (suite_proc.park); with t["compiled_path"] it was started while its package
    compiled and waits for it (_before_package). The cold start excludes both waits."""
    import torch

    import suite_measure as M

    device = t.get("device", "cuda")
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    parked = bool(t.get("go_path"))
    if not parked:  # a preloaded run reads them after its go: eager's reference exists by then
        inputs, ref = _inputs(t, device)
    res = _before_package(t, device) if t.get("compiled_path") else {}
    t0 = time.perf_counter()
    call = _load_package(t)
    res["load_s"] = round(time.perf_counter() - t0, 3)
    if parked:
        mem, res = _park(t, mem, res)
        inputs, ref = _inputs(t, device)
    stage("first run")
    with torch.no_grad():
        first = M.to_host(call(inputs))
        res["cold_start_s"] = _cold_start(res)
        if t.get("check_only"):
            return dict(res, outputs=_finite(first))
        mem.sample()
        if ref is not None:
            res["rel_err_vs_eager"] = M.max_rel_err(first, ref)
        res.update(M.steady_state(lambda: call(inputs), device, t.get("reps", 100), stage))
        mem.sample()
    res.update(_device_mem(t, mem, parked))
    return res


def _before_package(t: dict, device: str) -> dict:
    """A run started while its package compiles (suite_aoti_preload): first what
    aoti_load_package does before it opens the package — import Inductor, and its device
    information check (codecache.get_device_information → cpu_vec_isa.pick_vec_isa: on torch
    2.11 a child Python that imports torch per CPU ISA probe, every process; 59 of a 63 s load
    on the H200, benchmarks/aoti_load_probe.py; cached in-process, so the load's own call is
    then instant) — then wait for the compile's result. That wait is no part of a cold start."""
    from suite_proc import wait_for_result

    stage("aoti_load_package's device-information check, before the package exists")
    t0 = time.perf_counter()
    from torch._inductor import codecache

    if hasattr(codecache, "get_device_information"):
        codecache.get_device_information(device)
    res = {"device_info_check_s": round(time.perf_counter() - t0, 3)}
    stage("waiting for the package")
    t1 = time.perf_counter()
    compiled = wait_for_result(t["compiled_path"], t.get("package_wait_limit_s", 600))
    if compiled.get("error"):
        raise RuntimeError(f"its compile failed: {compiled['error']}")
    t.setdefault("weights_bytes", compiled.get("weights_bytes"))  # for _device_mem
    res["package_wait_s"] = round(time.perf_counter() - t1, 3)
    return res


def _park(t: dict, mem, res: dict):
    """Parks until the go. Device memory is device-wide (cuMemGetInfo) and other packages load
    while this one does, so the load's own share cannot be told apart: after the go (nothing
    else changes memory then) a fresh baseline measures the run, and the load counts as the
    package's weights (_device_mem). Returns the new baseline and the result so far."""
    import suite_measure as M
    from suite_proc import park

    mem.sample()
    res["load_device_delta_bytes"] = mem.fields()["device_mem_bytes"]  # others' loads included
    res["parked_s"] = park(t["parked_path"], t["go_path"], {"load_s": res["load_s"]},
                           t.get("park_limit_s", 900))
    return M.DeviceMemory(t.get("device", "cuda")), res


def _cold_start(res: dict) -> float | None:
    """Process start → first output on the host, less the time parked and the time spent
    waiting for the package (a preloaded run)."""
    wall = since_process_start()
    waited = (res.get("parked_s") or 0) + (res.get("package_wait_s") or 0)
    if wall is None or not waited:
        return wall
    res["cold_start_wall_s"] = wall
    return round(wall - waited, 3)


def _finite(outputs: list) -> int:
    bad = [i for i, x in enumerate(outputs) if not bool(x.float().isfinite().all())]
    if bad:
        raise RuntimeError(f"outputs {bad} have non-finite values")
    return len(outputs)


def _device_mem(t: dict, mem, parked: bool) -> dict:
    """device_mem_bytes: above the CUDA context, as every row; for a preloaded run the
    package's weights (one cudaMalloc'd blob at load, outside torch's allocator) + what the run
    took after the go."""
    fields = mem.fields()
    if not parked or fields["device_mem_bytes"] is None:
        return fields
    weights = t.get("weights_bytes")
    return {"device_mem_bytes": None if weights is None else fields["device_mem_bytes"] + weights,
            "device_mem_method": "weights (constants) of the package + device memory taken "
                                 "after the go (cuMemGetInfo): other packages loaded at the same "
                                 "time as this one"}


# ---------------------------------------------------------------------------- toolchain probe

PROBE_EXPECTED = "n=123456789 x=2.5"
PROBE_SOURCE = r"""
#include <cstring>
#include <sstream>
#include <string>
// Formats numbers through std::ostream: the path that crashed in libaotpack when two
// libstdc++ copies were mixed in one process.
extern "C" int probe(char* buf, int n) {
  std::ostringstream s;
  s << "n=" << 123456789ul << " x=" << 2.5;
  std::string r = s.str();
  std::strncpy(buf, r.c_str(), n - 1);
  buf[n - 1] = 0;
  return int(r.size());
}
"""


def task_cxx_probe(t: dict) -> dict:
    """Loads a probe .so (built by the suite with the image's g++) with ctypes, after torch and
    a CUDA context exist (as AOTInductor's .so is) or in a bare Python, and calls it."""
    import ctypes

    if t.get("import_torch"):
        wait_for_go(t.get("gpu_go_path"))
        stage("import torch + CUDA context")
        import torch

        torch.zeros(1, device="cuda" if torch.cuda.is_available() else "cpu")
    stage("dlopen probe")
    lib = ctypes.CDLL(t["so"])
    stage("call probe (std::ostringstream)")
    buf = ctypes.create_string_buffer(64)
    n = lib.probe(buf, 64)
    text = buf.value.decode()
    if text != PROBE_EXPECTED:  # seen on a CPU host with -static-libstdc++: "n=", no crash
        raise RuntimeError(f"probe printed {text!r}, expected {PROBE_EXPECTED!r}: std::ostream "
                           f"number formatting is broken in this process")
    return {"text": text, "n": n, "torch_loaded": "torch" in sys.modules}


TASKS = {"aoti-compile": task_aoti_compile, "aoti-run": task_aoti_run,
         "cxx-probe": task_cxx_probe}
