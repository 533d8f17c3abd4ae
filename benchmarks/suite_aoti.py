"""The suite's AOTInductor children: compile a package (torch.export +
aoti_compile_and_package), then load and run it in a fresh process.

The recipe is fixed (why: benchmarks/SUITE.md, "AOTInductor's crash at load"): the H200 image's
g++ links libstdc++ statically into shared objects, and AOTInductor's default .so crashed or
hung at load once torch was in the process. CXX is a g++ wrapper that links shared objects with
-Wl,--exclude-libs,ALL (the static copy stays private to the .so), and the weights are kept out
of the .so (a blob file in the package: writing and linking a 270 MB .so took most of a 72 s
compile). bench_conv.py uses the same recipe.

The run's cold start is process start → first output: it includes aoti_load_package's CPU ISA
check (59 s of a 63 s load on torch 2.11, every process; the C++ loader takes 0.33 s), which is
what a Python user of a package pays.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

from suite_measure import since_process_start, stage

# Keeps the weights out of the .so (checked against torch 2.13; applied only where this torch
# knows the name, known_configs).
WEIGHTS_OUTSIDE_SO = {"aot_inductor.package_constants_on_disk_format": "binary_blob"}
RECIPE = ("exclude-libs: CXX = g++ wrapper adding -Wl,--exclude-libs,ALL; weights in a blob "
          "next to the .so")

WRAPPER = """#!/bin/sh
# g++ that links shared objects with -Wl,--exclude-libs,ALL: the static libstdc++ this
# toolchain puts into every .so stays private to it instead of interposing with the process's
# libstdc++.so.6 (written by benchmarks/suite_aoti.py).
for a in "$@"; do
  if [ "$a" = "-shared" ]; then exec {real} "$@" -Wl,--exclude-libs,ALL; fi
done
exec {real} "$@"
"""


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return ((out.stdout or out.stderr).strip().splitlines() or [""])[0]
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"


def toolchain_facts() -> dict:
    """The C++ compiler Inductor would find (CXX, else g++ on PATH) and its version."""
    gxx = os.environ.get("CXX") or shutil.which("g++")
    facts = {"default_gxx": gxx, "cxx_env": os.environ.get("CXX")}
    if gxx:
        facts.update(realpath=os.path.realpath(shutil.which(gxx) or gxx),
                     version=_first_line([gxx, "--version"]))
    return facts


def make_wrapper(work: Path, real: str) -> Path:
    d = Path(work) / "cxx-exclude-libs"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "g++"  # Inductor recognizes gcc by the name
    path.write_text(WRAPPER.format(real=real))
    path.chmod(0o755)
    return path


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


def task_aoti_compile(t: dict) -> dict:
    """torch.export + aoti_compile_and_package into t["package"] (CXX, cache dirs and TMPDIR
    set by the suite: Inductor keeps its precompiled header under TMPDIR)."""
    import torch

    import suite_measure as M

    stage("build model")
    model, inputs = M.load_on(t["spec"], t["device"])
    configs, unknown = known_configs(WEIGHTS_OUTSIDE_SO)
    stage("export")
    t0 = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(model, tuple(inputs))
        export_s = time.perf_counter() - t0
        stage("aoti_compile_and_package")
        t1 = time.perf_counter()
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=t["package"], inductor_configs=dict(configs))  # it adds keys
    return {"export_s": round(export_s, 2), "compile_s": round(time.perf_counter() - t1, 2),
            "build_s": round(time.perf_counter() - t0, 2), "package": str(path),
            "artifact_bytes": Path(path).stat().st_size, "cxx": os.environ.get("CXX"),
            "configs_applied": configs, "configs_unknown_to_this_torch": unknown,
            "weights_outside_so": weights_outside_so(Path(path))}


def weights_outside_so(pkg: Path) -> bool:
    with zipfile.ZipFile(pkg) as z:
        return any(n.endswith("_weights.blob") or "/weights/" in n for n in z.namelist())


def task_aoti_run(t: dict) -> dict:
    """Fresh process: aoti_load_package + first run (cold start), the error against eager,
    the steady state."""
    import torch

    import suite_measure as M

    device = t["device"]
    if device == "cuda":
        torch.cuda.init()
    mem = M.DeviceMemory(device)
    ref = M.load_reference(t.get("ref_path"))
    if ref is not None:
        inputs = [x.to(device) for x in ref["inputs"]]
    else:
        inputs = M.load_on(t["spec"], "cpu")[1]
        inputs = [x.to(device) for x in inputs]
    stage("aoti_load_package")
    t0 = time.perf_counter()
    runner = torch._inductor.aoti_load_package(t["package"])
    load_s = round(time.perf_counter() - t0, 3)
    with torch.no_grad():
        stage("first run")
        first = M.to_host(runner(*inputs))
        res = {"cold_start_s": since_process_start(), "load_s": load_s,
               **M.vs_reference(first, ref)}
        mem.sample()
        res.update(M.steady_state(lambda: runner(*inputs), device, t["reps"], t["flush_l2"]))
    mem.sample()
    return {**res, **mem.fields()}


TASKS = {"aoti-compile": task_aoti_compile, "aoti-run": task_aoti_run}
