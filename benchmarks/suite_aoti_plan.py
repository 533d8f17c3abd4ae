"""The suite's AOTInductor plan: compile every core model's package in the background from the
run's first second, with the recipe already known to work around this machine's toolchain, and
run each one in a fresh process, started early so that its package load happens in the
background and only its first run and timing in the quiet phase
(suite_aoti_preload.py).

Established on the H200 image (2026-11-30, torch 2.11.0+cu130; KNOWN below, copied into
results["aoti"]["known"] every run instead of being re-derived): /opt/gcc/bin/g++ 13.3 links
libstdc++ statically into shared objects; a probe .so calling std::ostringstream segfaults once
torch is loaded and works when linked with -Wl,--exclude-libs,ALL; the default AOTI package
(3396 exported std:: symbols) crashed or hung at load. So a run goes straight to:

  probe-*       the 20-line ostream probe .so, built with the default g++ and with
                --exclude-libs, loaded after torch (and once without): ~10 s of evidence that
                the cause is still there, run in the background
  exclude-libs  CXX = a g++ wrapper adding -Wl,--exclude-libs,ALL to links, weights kept out of
                the .so (aot_inductor.package_constants_on_disk_format = "binary_blob": a
                *_weights.blob in the package, mmapped at load; the last run's 270 MB .so took
                most of the 72 s compile to write and link) — every core model, in parallel
                background jobs with capped threads
  load check    the first package to finish: load + first run in the GPU window, so that a
                fallback can still compile in the background if it fails:
  system-gxx    CXX = another g++ on the machine (/usr/bin/g++), when the check crashed or hung
                (the toolchain again), or
  exclude-libs-in-so  the same wrapper with the weights inside the .so, when the check's error
                names the weights/constants (the blob path, new in torch 2.10)
The first recipe that passes is used for every model; what none could run is recorded
honestly. The long diagnosis of the default recipe (default load, the C++ loader, cpp-only,
a cuda-gdb backtrace) runs only with --aoti-diagnose (suite_aoti_diagnose.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import suite_aoti
from suite_aoti_preload import Preloads
from suite_runner import WORKER, read_result, result_path, write_task
from suite_schedule import ESTIMATE, background_threads, thread_env

KNOWN = {
    "measured": "2026-11-30 on the H200 image, torch 2.11.0+cu130 "
                "(benchmarks/results/2026-11-30-8c98e0a.json, aoti.attempts)",
    "toolchain": "/opt/gcc/bin/g++ 13.3.0 (also $CXX) links libstdc++ statically into shared "
                 "objects: the probe .so NEEDs no libstdc++.so.6 and exports 2870 std:: symbols",
    "probe": "the probe .so (std::ostringstream) crashes with SIGSEGV once torch is loaded, "
             "works without torch, and works after torch when linked with "
             "-Wl,--exclude-libs,ALL (0 std:: symbols exported)",
    "default_package": "mlp-decode's default package (compile 72 s, a 270 MB .so holding the "
                       "weights) exports 3396 std:: symbols; aoti_load_package hung (killed "
                       "after 37 s); earlier runs: SIGSEGV in _load_aoti, 4 tries of 4",
    "load": "aoti_load_package of mlp-decode's exclude-libs package took 59 s, nearly all in "
            "load_pt2 → codecache.get_device_information → cpu_vec_isa.pick_vec_isa, which "
            "builds a probe .so per CPU ISA and dlopens each in a child Python importing torch "
            "(every process: only the builds are cached; TORCHINDUCTOR_VEC_ISA_OK=1 skips only "
            "the base check, not the bf16/VNNI/AMX ones: loads still took 35-43 s); the "
            "C++ AOTIModelPackageLoader loaded the same package in 0.33 s "
            "(benchmarks/aoti_load_probe.py, 2026-11-30). The 37 s 'hang' above may have been "
            "the same check",
    "other_gxx": ["/usr/bin/g++", "/usr/bin/g++-12"],
    "same_as": "libaotpack.so's crash and fix (benchmarks/NOTES.md, runtime pitfall)",
}

# Keeps the weights out of the .so (checked against torch 2.13; applied only where this torch
# knows the name, see suite_aoti.known_configs, and recorded per compile).
WEIGHTS_OUTSIDE_SO = {"aot_inductor.package_constants_on_disk_format": "binary_blob"}


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


def recipes(work: Path, facts: dict) -> dict[str, Recipe]:
    out = [Recipe("default", "aoti_compile_and_package with default settings"),
           Recipe("cpp-only", "aot_inductor.package_cpp_only=True (compiled at load)",
                  configs={"aot_inductor.package_cpp_only": True})]
    if facts.get("default_gxx"):
        wrapper = {"CXX": str(make_wrapper(work, facts.get("realpath") or facts["default_gxx"]))}
        out += [Recipe("exclude-libs", "CXX = g++ wrapper adding -Wl,--exclude-libs,ALL; "
                       "weights in a blob next to the .so", env=wrapper,
                       configs=dict(WEIGHTS_OUTSIDE_SO)),
                Recipe("exclude-libs-in-so", "CXX = g++ wrapper adding -Wl,--exclude-libs,ALL; "
                       "weights inside the .so", env=wrapper)]
    for other in facts.get("other_gxx", [])[:1]:
        out.append(Recipe("system-gxx", f"CXX = {other}; weights in a blob next to the .so",
                          env={"CXX": other}, configs=dict(WEIGHTS_OUTSIDE_SO)))
    return {r.name: r for r in out}


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


def fallback_for(failed: Recipe, error: str, tried: set, available: dict) -> str | None:
    """The recipe to try after `failed` did not load: the weights path when the error names
    weights/constants, else another compiler (a crash or a hang: the toolchain again)."""
    order = ["system-gxx", "exclude-libs-in-so"]
    if re.search(r"constant|weight|blob", error or "", re.I):
        order.reverse()
    return next((n for n in order if n in available and n not in tried | {failed.name}), None)


# ------------------------------------------------------------------------------ the runner

COMPILE_ORDER = ("mlp-decode", "mlp-prefill", "llama-decode", "llama-prefill")  # quickest first


class AotiRunner:
    """The plan above, through the suite (its tasks, background jobs, ledger and results)."""

    def __init__(self, suite):
        self.s = suite
        self.doc = suite.results.doc["aoti"]
        self.facts = toolchain_facts()
        self.doc["toolchain"] = self.facts
        self.doc["known"] = KNOWN
        self.recipes = recipes(suite.work, self.facts)
        self.recipe: Recipe | None = self.recipes.get("exclude-libs") or self.recipes["default"]
        self.tried = {self.recipe.name}
        self.jobs: dict[str, tuple[str, str, Path]] = {}  # model → (recipe, job, package)
        self.threads: dict[str, int | None] = {}  # model → compile threads (None: uncapped)
        self.probe_jobs: list[tuple[str, str, dict]] = []
        self.recorded: set[str] = set()  # compile jobs whose attempt is recorded
        self.loaded: set[str] = set()  # recipes that loaded and ran at least once
        self.checked = False
        self.preloads = Preloads(self)

    def record(self, name: str, model: str, res, **details) -> None:
        keep = {k: v for k, v in (res.result or {}).items() if k != "traceback"}
        self.doc["attempts"].append({
            "name": name, "model": model, "status": res.status, "error": res.error,
            "wall_s": res.wall_s, "details": {**details, **keep},
            "log_tail": None if res.ok else res.log_tail[-2000:]})
        self.s.results.write()

    def skip(self, name: str, model: str, why: str) -> None:
        self.doc["attempts"].append({"name": name, "model": model, "status": "skipped",
                                     "error": why, "details": {}})
        self.s.results.write()

    # ------------------------------------------------------------------ background
    def start(self, models: list) -> None:
        """t = 0: a compile per model whose AOTI row is pending, in parallel."""
        todo = [m for m in models if self.s.pending(m.name, "aoti")]
        todo.sort(key=lambda m: COMPILE_ORDER.index(m.name) if m.name in COMPILE_ORDER else 9)
        threads = background_threads(len(todo))
        self.doc["background"] = {"compiles": len(todo), "threads_each": threads,
                                  "cpus": os.cpu_count()}
        for m in todo:
            self.start_compile(m, self.recipe, threads)

    def run_env(self, recipe: Recipe, model: str) -> dict:
        """A run's environment: the recipe's, and an Inductor cache of its own. Shared, the
        runs queued for each other: Inductor holds a file lock per CPU ISA probe while it
        builds and checks it (a child Python importing torch on torch 2.11), and that wait
        would count in their cold starts. Each run pays what a first start on a machine
        pays."""
        return dict(recipe.env,
                    TORCHINDUCTOR_CACHE_DIR=str(self.s.work / "cache" / f"aoti-run-{model}"))

    def start_compile(self, m, recipe: Recipe, threads: int | None) -> None:
        """A background compile job (threads=None: uncapped, for a compile nothing runs
        alongside)."""
        tid = f"{m.name}-aoti-{recipe.name}-compile"
        pkg = self.s.work / "aoti" / f"{m.name}-{recipe.name}.pt2"
        cache = self.s.work / "cache" / f"{m.name}-aoti-{recipe.name}"
        for d in (pkg.parent, cache / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        # TMPDIR: Inductor keeps its precompiled header under tempfile.gettempdir(), outside
        # the cache dir; a private one makes every compile as cold as build_s says
        env = dict(self.s.env, **recipe.env, **(thread_env(threads, True) if threads else {}),
                   TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
                   TMPDIR=str(cache / "tmp"))
        marker = self.s.work / f"gpu-done-{tid}"
        task = {"task": "aoti-compile", "id": tid, "spec": m.spec, "package": str(pkg),
                "configs": recipe.configs, "device": self.s.device,
                "gpu_go_path": str(self.s.gpu_go), "gpu_done_path": str(marker)}
        path, _ = write_task(task, self.s.work)
        self.s.bg.start(tid, [sys.executable, "-X", "faulthandler", str(WORKER), str(path)],
                        env, ESTIMATE["aoti-compile"] * 2.5, self.s.logs / f"{tid}.log",
                        gpu=True, marker=marker)
        self.jobs[m.name] = (recipe.name, tid, pkg)
        self.threads[m.name] = threads
        self.plan_run(m.name, preload=threads is not None)

    def plan_run(self, model: str, preload: bool = True) -> None:
        """The ledger's share of the run: a compile started before the load check can be
        preloaded (its load then overlaps the window; the quiet phase waits for one load,
        ("aoti-load",), as they run in parallel, and times the rest, "aoti-timed"); a later
        one (fallback, extra, --aoti-diagnose) loads in the quiet phase ("aoti-run")."""
        if self.checked or not self.preloads.enabled() or not preload:
            return self.s.ledger.add(("aoti-run", model), ESTIMATE["aoti-run"], 1)
        self.s.ledger.add(("aoti-run", model), ESTIMATE["aoti-timed"], 1)
        self.s.ledger.add(("aoti-load",), ESTIMATE["aoti-load"], 1)

    def start_probes(self) -> None:
        gxx = self.facts.get("default_gxx")
        if not gxx:
            return self.skip("probes", "-", "no g++ on PATH")
        built = {}
        for name, flags, with_torch in PROBES:
            tag = "exclude-libs" if flags else "default"
            if tag not in built:
                built[tag] = build_probe(self.s.work, tag, gxx, flags)
            so, facts = built[tag]
            if so is None:
                self.skip(f"probe {name}", "-", f"probe build failed: {facts.get('build_error')}")
                continue
            tid = re.sub(r"[^A-Za-z0-9_.-]", "_", f"probe-{name}")
            path, _ = write_task({"task": "cxx-probe", "id": tid, "so": str(so),
                                  "import_torch": with_torch,
                                  "gpu_go_path": str(self.s.gpu_go)}, self.s.work)
            self.s.bg.start(tid, [sys.executable, "-X", "faulthandler", str(WORKER), str(path)],
                            self.s.env, 60, self.s.logs / f"{tid}.log", gpu=with_torch)
            self.probe_jobs.append((name, tid, facts))

    def record_probes(self) -> None:
        for name, tid, facts in self.probe_jobs:
            res = self.s.bg.wait(tid)
            res.result = read_result(result_path(self.s.work, tid))
            if res.result.get("error") and res.ok:
                res.status, res.error = "error", res.result["error"]
            self.record(f"probe {name}", "-", res, **facts)
        self.probe_jobs = []

    def compiled(self, model: str, deadline: float | None = None,
                 why: str = "the budget left no more time for this compile"):
        """The compile job's result (waiting for it, at most until `deadline`), with the
        worker's result attached."""
        recipe, tid, _ = self.jobs[model]
        res = self.s.bg.wait(tid, deadline, why)
        if tid not in self.recorded:
            self.recorded.add(tid)
            res.result = read_result(result_path(self.s.work, tid))
            if res.ok and res.result.get("error"):
                res.status, res.error = "error", res.result["error"]
            self.record(f"{recipe}: compile", model, res,
                        recipe=self.recipes[recipe].description)
        return res

    # ---------------------------------------------------------------- GPU window
    def poll(self) -> None:
        """Between window tasks: the preloads of the compiles that have finished (their loads
        are the load check: a recipe that cannot load shows in the first of them), or, without
        preloading, the foreground load check once the first compile has finished. A
        foreground check first cost 55-58 s on the H200 and delayed every preload by as much,
        which the quiet phase then lacked."""
        if self.preloads.enabled():
            return self.preloads.start_ready()
        first = next(iter(self.jobs), None)
        if first and not self.checked and not self.s.bg.running(self.jobs[first][1]):
            self.check(first)

    def check(self, model: str | None = None, deadline: float | None = None) -> None:
        model = model or next(iter(self.jobs), None)
        if self.checked or model is None:
            return
        self.checked = True
        m = self.s.model(model)
        c = self.compiled(model, deadline)
        if not c.ok:
            return self._failed(m, c, "compile")
        r = self.s.task(f"{model}-aoti-{self.recipe.name}-check", self._run_task(m, check=True),
                        estimate="aoti-check", cap_s=120, env=self.run_env(self.recipe, m.name))
        self.record(f"{self.recipe.name}: load check", model, r)
        if r.ok:
            self.loaded.add(self.recipe.name)
            self.preloads.start_ready()
        else:
            self._failed(m, r, "load check")

    def _failed(self, m, res, what: str) -> None:
        """The recipe failed on its first model: start the fallback's compiles in the
        background when the budget has room for them, else no recipe."""
        failed = self.recipe
        name = fallback_for(failed, f"{res.error} {res.log_tail}", self.tried, self.recipes)
        self.recipe = None
        self.s.ledger.drop(("aoti-load",))  # nothing is preloaded: runs load in the quiet phase
        for model in self.jobs:
            self.plan_run(model)
        if name is None:
            return self.skip("fallback", m.name, f"{failed.name} {what} failed; no other recipe")
        self.s.ledger.add(("aoti-fallback",), ESTIMATE["aoti-compile"], 1)
        refused = self.s.ledger.refuse([("aoti-fallback",)])
        self.s.ledger.drop(("aoti-fallback",))
        if refused:
            return self.skip(f"{name}: compile", "-", refused)
        self.recipe, self.tried = self.recipes[name], self.tried | {name}
        self.s.log(f"AOTI: {failed.name} {what} failed ({res.error}); compiling with {name}")
        now = time.monotonic()
        for model in self.jobs:  # the failed recipe's other compiles would only take CPU
            self.compiled(model, now, f"replaced by recipe {name}")
        models = [self.s.model(n) for n in self.jobs]
        threads = background_threads(len(models))
        for mm in models:
            self.start_compile(mm, self.recipe, threads)

    # ----------------------------------------------------------------- quiet phase
    def _run_task(self, m, check: bool = False) -> dict:
        return {"task": "aoti-run", "spec": m.spec, "package": str(self.jobs[m.name][2]),
                "method": "aoti_load_package", "ref_path": self.s.ref_path(m.name),
                "inputs_path": self.s.inputs_path(m.name), "reps": self.s.args.reps,
                "device": self.s.device, "check_only": check}

    def run_model(self, m) -> None:
        """Fresh process: load + first run (cold start) + timing, with the working recipe."""
        self.s.ledger.drop(("aoti-run", m.name))
        if not self.s.pending(m.name, "aoti"):
            return
        if m.name not in self.jobs or self.recipe is None:
            return self.s.results.update(m.name, "aoti", "", status="skipped", error=(
                "not run: no AOTI recipe loaded here (see aoti.conclusion)"
                if self.recipe is None else "not run: no AOTI compile was started for it"))
        recipe = self.recipe
        if self.jobs[m.name][0] != recipe.name:
            return self.s.results.update(m.name, "aoti", "", status="skipped",
                                         error=f"not run: no {recipe.name} package of it")
        c = self.compiled(m.name, self.s.budget.deadline(ESTIMATE["aoti-run"]))
        if not c.ok:
            return self.s.apply(m.name, "aoti", "", c, notes=[f"recipe {recipe.name}"])
        r = self.preloads.run(m.name) or self.s.task(
            f"{m.name}-aoti-{recipe.name}-run", self._run_task(m), estimate="aoti-run",
            cap_s=150, env=self.run_env(recipe, m.name))
        if r.ok:
            self.loaded.add(recipe.name)
        elif r.status in ("crash", "timeout") and recipe.name not in self.loaded:
            self.recipe = None  # it died on its first load: the other models say so
        self.fill_row(m, recipe, c, r)

    def fill_row(self, m, recipe: Recipe, c, r) -> None:
        self.record(f"{recipe.name}: run", m.name, r)
        threads = self.threads.get(m.name)
        where = (f"in the background alongside the other models' compiles ({threads} compile "
                 f"threads each) and the AOTI run processes' device-information checks"
                 if threads else "alone (all cores)")
        facts = c.result.get("package_facts") or {}
        self.s.apply(m.name, "aoti", "", r, build_s=c.result.get("build_s"),
                     build_note="torch.export + aoti_compile_and_package, cold Inductor cache "
                                f"and precompiled header, compiled {where}",
                     artifact_bytes=c.result.get("artifact_bytes"),
                     artifact_note=".pt2 package (weights " + (
                         "in a blob file inside it)" if facts.get("weights_outside_so")
                         else "inside the .so)"),
                     cold_start_note=self.preloads.cold_start_note(r),
                     notes=[f"recipe {recipe.name}: {recipe.description}; configs applied "
                            f"{c.result.get('configs_applied')}"])

    def run_extra(self, m) -> None:
        """An extra model, last: its compile in the foreground (nothing else runs then) and its
        run, when both still fit."""
        key = ("aoti-extra", m.name)
        self.s.ledger.add(key, ESTIMATE["aoti-compile"] + ESTIMATE["aoti-run"], 3)
        refused = self.s.ledger.refuse([key])
        self.s.ledger.drop(key)
        if not self.s.pending(m.name, "aoti"):
            return
        if refused or self.recipe is None:
            return self.s.results.update(m.name, "aoti", "", status="skipped", error=(
                refused or "not run: no AOTI recipe loaded here (see aoti.conclusion)"))
        self.compile_and_run(m)

    def compile_and_run(self, m) -> None:
        """A model without a package of the working recipe yet: compile in the foreground
        (nothing else runs), then run."""
        if not self.s.pending(m.name, "aoti"):
            return
        if self.recipe and self.jobs.get(m.name, ("",))[0] != self.recipe.name:
            self.start_compile(m, self.recipe, None)
        self.run_model(m)

    def finish(self) -> None:
        working = (self.recipe.name if self.recipe and self.recipe.name in self.loaded
                   else next(iter(sorted(self.loaded)), None))
        self.doc["recipe"] = [working, "aoti_load_package"] if working else None
        self.doc["conclusion"] = conclusion(self.doc["attempts"], working)
        self.s.results.write()
