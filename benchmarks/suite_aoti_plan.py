"""The suite's AOTInductor plan: find out whether (and how) an AOTInductor package loads on this
machine, on the first model, then run every other model with the recipe that worked.

Known before this plan was written: on the H200 image (torch 2.11.0+cu130), packages compiled
but `aoti_load_package` died with SIGSEGV in `_load_aoti`, 4 tries of 4. The image's g++ links
libstdc++ statically into shared objects (our libaotpack.so had to be linked with
-Wl,--exclude-libs,ALL after the same kind of crash: two libstdc++ copies in one process).

Steps, each recorded in results["aoti"]["attempts"] with its status, error and log tail:
  probe-*       a 20-line .so using std::ostringstream, built with the default g++, loaded with
                ctypes after torch (and, as a control, without torch; and built with
                --exclude-libs): does the toolchain alone reproduce the crash?
  default       aoti_compile_and_package, then aoti_load_package in a fresh process
  loader        the same package through torch._C._aoti.AOTIModelPackageLoader directly
  exclude-libs  compiled with CXX = a g++ wrapper adding -Wl,--exclude-libs,ALL to links
  system-gxx    compiled with another g++ on the machine (e.g. /usr/bin/g++), if there is one
  cpp-only      aot_inductor.package_cpp_only: the loader compiles the sources at load time
  backtrace     the default load under cuda-gdb (the only gdb there), last: for the record
The first recipe that loads and runs is used for the other models. With --aoti-all every
recipe is tried even after one worked.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import suite_aoti
from suite_runner import WORKER, run_command, write_task


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    env: dict = field(default_factory=dict)
    configs: dict = field(default_factory=dict)


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return ((out.stdout or out.stderr).strip().splitlines() or [""])[0]
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"


def toolchain_facts() -> dict:
    """The C++ compiler Inductor will find (CXX, else g++ on PATH) and where its libstdc++
    comes from."""
    gxx = os.environ.get("CXX") or shutil.which("g++")
    facts = {"default_gxx": gxx, "cxx_env": os.environ.get("CXX")}
    if gxx:
        facts.update(realpath=os.path.realpath(shutil.which(gxx) or gxx),
                     version=_first_line([gxx, "--version"]),
                     libstdcxx_so=_first_line([gxx, "-print-file-name=libstdc++.so"]),
                     libstdcxx_a=_first_line([gxx, "-print-file-name=libstdc++.a"]))
    facts["other_gxx"] = other_gxx(gxx)
    return facts


def other_gxx(default: str | None) -> list[str]:
    """g++ binaries on the machine other than the default one (by real path)."""
    seen = {os.path.realpath(default)} if default else set()
    names = [f"/usr/bin/g++{s}" for s in ("", "-12", "-13", "-14")] + ["/usr/bin/clang++"]
    out = []
    for n in names:
        if os.path.isfile(n) and os.path.realpath(n) not in seen:
            seen.add(os.path.realpath(n))
            out.append(n)
    return out


WRAPPER = """#!/bin/sh
# g++ that links shared objects with -Wl,--exclude-libs,ALL: the static libstdc++ this
# toolchain puts into every .so stays private to it instead of interposing with the process's
# libstdc++.so.6 (written by benchmarks/suite_aoti_plan.py).
for a in "$@"; do
  if [ "$a" = "-shared" ]; then exec {real} "$@" -Wl,--exclude-libs,ALL; fi
done
exec {real} "$@"
"""


def make_wrapper(work: Path, real: str) -> Path:
    d = work / "cxx-exclude-libs"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "g++"  # Inductor recognizes gcc by the name
    path.write_text(WRAPPER.format(real=real))
    path.chmod(0o755)
    return path


def recipes(work: Path, facts: dict) -> list[Recipe]:
    out = [Recipe("default", "aoti_compile_and_package with default settings")]
    if facts.get("default_gxx"):
        wrapper = make_wrapper(work, facts.get("realpath") or facts["default_gxx"])
        out.append(Recipe("exclude-libs", "CXX = g++ wrapper adding -Wl,--exclude-libs,ALL",
                          env={"CXX": str(wrapper)}))
    for other in facts.get("other_gxx", [])[:1]:
        out.append(Recipe("system-gxx", f"CXX = {other}", env={"CXX": other}))
    out.append(Recipe("cpp-only", "aot_inductor.package_cpp_only=True (compiled at load)",
                      configs={"aot_inductor.package_cpp_only": True}))
    return out


def build_probe(work: Path, name: str, compiler: str, extra: list[str]) -> tuple[Path | None, dict]:
    """Builds the ostream probe .so; returns its path (None when the build failed) and facts."""
    d = work / "cxx-probe"
    d.mkdir(parents=True, exist_ok=True)
    src, so = d / "probe.cpp", d / f"probe-{name}.so"
    src.write_text(suite_aoti.PROBE_SOURCE)
    cmd = [compiler, "-O2", "-shared", "-fPIC", str(src), "-o", str(so), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    facts = {"build": " ".join(cmd), "build_rc": p.returncode}
    if p.returncode != 0:
        facts["build_error"] = (p.stderr or p.stdout)[-500:]
        return None, facts
    facts.update(suite_aoti.so_facts(so))
    return so, facts


PROBES = (  # name, linker flags, import torch first
    ("default+torch", [], True),
    ("default-no-torch", [], False),
    ("exclude-libs+torch", ["-Wl,--exclude-libs,ALL"], True),
)


def conclusion(attempts: list[dict], recipe: str | None) -> str:
    """One paragraph that answers "why does AOTI crash here, and what makes it run"."""
    by = {a["name"]: a for a in attempts}

    def st(name: str) -> str:
        a = by.get(name)
        return "not run" if a is None else a["status"]

    parts = []
    p_torch, p_bare, p_ex = st("probe default+torch"), st("probe default-no-torch"), \
        st("probe exclude-libs+torch")
    if p_torch in ("crash", "error") and p_bare == "ok":
        parts.append(f"A .so built by the default g++ fails in std::ostream ({p_torch}) once "
                     "torch (and its libstdc++.so.6) is in the process, and works without "
                     "torch: the toolchain's static libstdc++ interposes with the shared one.")
        if p_ex == "ok":
            parts.append("Linking it with -Wl,--exclude-libs,ALL fixes the probe.")
    elif p_torch == "ok":
        parts.append("The toolchain probe runs after torch (no libstdc++ clash in a small .so).")
    compiled = (by.get("default: compile") or {}).get("details", {})
    so = (compiled.get("package_facts") or {}).get("so")
    if so:
        needs = "needs" if so["needs_libstdcxx_so"] else "does not need"
        parts.append(f"The default package's .so {needs} libstdc++.so.6 and exports "
                     f"{so['exported_std_symbols']} std:: symbols.")
    load = by.get("default: load")
    if load:
        parts.append(f"AOTI default package: load {load['status']}"
                     + (f" ({load['error']})" if load.get("error") else "") + ".")
    if recipe == "default":
        parts.append("AOTInductor loads and runs with its default settings on this machine.")
    elif recipe:
        parts.append(f"Working recipe: {recipe} (used for every model).")
    else:
        parts.append("No recipe produced a package that loads and runs; AOTI rows say so.")
    return " ".join(parts)


# ------------------------------------------------------------------------------ the runner

DIAGNOSIS_MODELS = ("mlp-decode", "mlp-prefill")  # quickest to compile first
ORDER = ("default", "exclude-libs", "system-gxx", "cpp-only")


class AotiRunner:
    """Runs the plan above through the suite (its task runner, budget and results)."""

    def __init__(self, suite):
        self.s = suite
        self.doc = suite.results.doc["aoti"]
        self.facts = toolchain_facts()
        self.doc["toolchain"] = self.facts
        self.recipes = {r.name: r for r in recipes(suite.work, self.facts)}
        self.crashed = None  # (model, package) of a default load that crashed: for backtrace()

    def record(self, name: str, model: str, res, **details) -> None:
        keep = {k: v for k, v in res.result.items() if k not in ("traceback",)}
        self.doc["attempts"].append({
            "name": name, "model": model, "status": res.status, "error": res.error,
            "wall_s": res.wall_s, "details": {**details, **keep},
            "log_tail": None if res.ok else res.log_tail[-2000:]})
        self.s.results.write()

    def skip(self, name: str, model: str, why: str) -> None:
        self.doc["attempts"].append({"name": name, "model": model, "status": "skipped",
                                     "error": why, "details": {}})
        self.s.results.write()

    # ------------------------------------------------------------------------ steps
    def compile(self, m, recipe: Recipe, triton_cache: str | None = None):
        pkg = self.s.work / "aoti" / f"{m.name}-{recipe.name}.pt2"
        pkg.parent.mkdir(parents=True, exist_ok=True)
        env = dict(recipe.env, **self.s.cache_env(f"{m.name}-aoti-{recipe.name}"))
        if triton_cache:
            env["TRITON_CACHE_DIR"] = triton_cache
        task = {"task": "aoti-compile", "spec": m.spec, "package": str(pkg),
                "configs": recipe.configs}
        return self.s.task(f"{m.name}-aoti-{recipe.name}-compile", task,
                           estimate="aoti-compile", cap_s=300, env=env)

    def load(self, m, recipe: Recipe, package: str, method: str):
        task = {"task": "aoti-run", "spec": m.spec, "package": package, "method": method,
                "ref_path": self.s.ref_path(m.name), "reps": self.s.args.reps}
        cap = 300 if recipe.name == "cpp-only" else 150  # cpp-only compiles while loading
        return self.s.task(f"{m.name}-aoti-{recipe.name}-{method}", task, estimate="aoti-run",
                           cap_s=cap, env=dict(recipe.env))

    def probes(self) -> None:
        gxx = self.facts.get("default_gxx")
        built: dict = {}
        for name, flags, with_torch in PROBES:
            if not gxx:
                self.skip(f"probe {name}", "-", "no g++ on PATH")
                continue
            tag = "exclude-libs" if flags else "default"
            if tag not in built:
                built[tag] = build_probe(self.s.work, tag, gxx, flags)
            so, facts = built[tag]
            if so is None:
                self.skip(f"probe {name}", "-", f"probe build failed: {facts.get('build_error')}")
                continue
            res = self.s.task(f"probe-{name}", {"task": "cxx-probe", "so": str(so),
                                                 "import_torch": with_torch},
                              estimate="probe", cap_s=60)
            self.record(f"probe {name}", "-", res, **facts)

    # ----------------------------------------------------------------------- phases
    def diagnose(self, core: list):
        """Probes, then recipes in ORDER on one model until one loads and runs (all of them
        with --aoti-all). Returns (recipe name, load method) or None."""
        names = [m.name for m in core]
        pick = next((n for n in DIAGNOSIS_MODELS if n in names), names[0])
        m = core[names.index(pick)]
        self.probes()
        working = None
        triton = str(self.s.work / "cache" / f"{m.name}-aoti-triton")
        for name in ORDER:
            if name not in self.recipes:
                self.skip(f"{name}: compile", m.name, "not applicable: no other g++ here")
            elif working and not self.s.args.aoti_all:
                self.skip(f"{name}: compile", m.name, f"not run: recipe {working[0]} works")
            else:
                got = self.try_recipe(m, self.recipes[name], triton)
                working = working or got
        self.doc["recipe"] = list(working) if working else None
        self.doc["conclusion"] = conclusion(self.doc["attempts"], working and working[0])
        if self.s.pending(m.name, "aoti"):
            first = next((a for a in self.doc["attempts"] if a["name"] == "default: load"), None)
            self.s.results.update(m.name, "aoti", "", status=(first or {}).get("status", "error"),
                                  error=f"every AOTI recipe failed here; see aoti.conclusion: "
                                        f"{self.doc['conclusion']}"[:600])
        self.s.results.write()
        return working

    def try_recipe(self, m, recipe: Recipe, triton_cache: str | None):
        c = self.compile(m, recipe, triton_cache)
        self.record(f"{recipe.name}: compile", m.name, c, recipe=recipe.description)
        if not c.ok:
            return None
        pkg = c.result["package"]
        r = self.load(m, recipe, pkg, "aoti_load_package")
        self.record(f"{recipe.name}: load", m.name, r)
        method = "aoti_load_package"
        if recipe.name == "default" and not r.ok:
            self.crashed = (m, recipe, pkg) if r.status == "crash" else None
            r = self.load(m, recipe, pkg, "loader")
            self.record("loader: load", m.name, r, recipe="default package, "
                        "torch._C._aoti.AOTIModelPackageLoader directly")
            method = "loader"
        if not r.ok:
            return None
        if self.s.pending(m.name, "aoti"):
            cached = recipe.name != "default"
            self.fill_row(m, recipe, method, c, r, triton_cached=cached)
        return recipe.name, method

    def run_model(self, m, working) -> None:
        if not self.s.pending(m.name, "aoti"):
            return
        if working is None:
            self.s.results.update(m.name, "aoti", "", status="skipped",
                                  error="not run: no AOTI recipe loaded on the diagnosis model "
                                        "(see aoti.conclusion)")
            return
        recipe = self.recipes[working[0]]
        c = self.compile(m, recipe)
        if not c.ok:
            return self.s.apply(m.name, "aoti", "", c, notes=[f"recipe {recipe.name}"])
        self.fill_row(m, recipe, working[1], c, self.load(m, recipe, c.result["package"],
                                                          working[1]))

    def fill_row(self, m, recipe: Recipe, method: str, c, r, triton_cached: bool = False):
        note = " (Triton kernels cached by an earlier attempt)" if triton_cached else ""
        self.s.apply(m.name, "aoti", "", r, build_s=c.result.get("build_s"),
                     build_note=f"torch.export + aoti_compile_and_package, cold Inductor "
                                f"cache{note}",
                     artifact_bytes=c.result.get("artifact_bytes"),
                     artifact_note=".pt2 package (weights inside)",
                     cold_start_note=f"fresh process: python + import torch + {method} + "
                                     f"first run + outputs to host",
                     notes=[f"recipe {recipe.name}: {recipe.description}; load via {method}"])

    def backtrace(self) -> None:
        """The crashed default load once more under cuda-gdb: the native frames of the crash."""
        if not self.crashed:
            return
        m, recipe, pkg = self.crashed
        gdb = shutil.which("cuda-gdb")
        refused = self.s.budget.refuse(150)
        if not gdb or refused:
            return self.skip("backtrace", m.name, refused or "no cuda-gdb on PATH")
        task_path, _ = write_task({"task": "aoti-run", "id": "aoti-backtrace", "spec": m.spec,
                                   "package": pkg, "method": "aoti_load_package"}, self.s.work)
        cmd = [gdb, "-q", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 40",
               "--args", sys.executable, str(WORKER), str(task_path)]
        log = self.s.logs / "aoti-backtrace.log"
        res = run_command(cmd, env=self.s.env, limit_s=self.s.budget.limit(200), log_path=log)
        text = log.read_text(errors="replace")
        frames = [ln for ln in text.splitlines() if ln.startswith("#")][:40]
        signal_line = next((ln for ln in text.splitlines() if "received signal" in ln), None)
        self.record("backtrace", m.name, res, frames=frames, signal=signal_line)
