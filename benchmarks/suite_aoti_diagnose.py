"""The long AOTInductor diagnosis, only with `suite.py --aoti-diagnose` (the established facts
are in suite_aoti_plan.KNOWN; a normal run does not re-derive them).

In the quiet phase, in the foreground (nothing else runs then), on the quickest core model:
the probes' results, then recipes in ORDER until one loads and runs (every one with
--aoti-all): each compiles (~70-90 s) and loads in a fresh process; the default package that
fails to load is also tried through torch._C._aoti.AOTIModelPackageLoader directly, and a
crashed default load once more under cuda-gdb for its native frames. Every step is an entry of
results["aoti"]["attempts"]. This mode spends most of a 450 s budget on one model.
"""
from __future__ import annotations

import shutil
import sys

from suite_runner import WORKER, run_command, write_task

ORDER = ("default", "exclude-libs", "system-gxx", "cpp-only")
DIAGNOSIS_MODELS = ("mlp-decode", "mlp-prefill")  # quickest to compile first


class Diagnosis:
    def __init__(self, aoti):
        self.a, self.s = aoti, aoti.s
        self.crashed = None  # (model, package) of a default load that crashed: for backtrace()

    def compile(self, m, recipe):
        """Foreground compile (the runner's background job, waited for at once)."""
        self.a.start_compile(m, recipe, threads=None)
        return self.a.compiled(m.name, self.s.budget.deadline(0))

    def load(self, m, recipe, package: str, method: str):
        task = {"task": "aoti-run", "spec": m.spec, "package": package, "method": method,
                "ref_path": self.s.ref_path(m.name), "inputs_path": self.s.inputs_path(m.name),
                "reps": self.s.args.reps, "device": self.s.device}
        cap = 300 if recipe.name == "cpp-only" else 150  # cpp-only compiles while loading
        return self.s.task(f"{m.name}-aoti-{recipe.name}-{method}", task, estimate="aoti-run",
                           cap_s=cap, env=dict(recipe.env))

    def run(self, core: list):
        """Recipes in ORDER on one model until one loads and runs (all with --aoti-all).
        Sets the runner's recipe (None when none worked)."""
        names = [m.name for m in core]
        pick = next((n for n in DIAGNOSIS_MODELS if n in names), names[0])
        m = core[names.index(pick)]
        self.a.record_probes()
        working = None
        for name in ORDER:
            if name not in self.a.recipes:
                self.a.skip(f"{name}: compile", m.name, "not applicable: no other g++ here")
            elif working and not self.s.args.aoti_all:
                self.a.skip(f"{name}: compile", m.name, f"not run: recipe {working} works")
            else:
                ok = self.try_recipe(m, self.a.recipes[name])
                working = working or (name if ok else None)
        self.a.recipe = self.a.recipes[working] if working else None
        self.backtrace()
        return working

    def try_recipe(self, m, recipe) -> bool:
        c = self.compile(m, recipe)
        if not c.ok:
            return False
        pkg = c.result["package"]
        r = self.load(m, recipe, pkg, "aoti_load_package")
        self.a.record(f"{recipe.name}: load", m.name, r)
        if recipe.name == "default" and not r.ok:
            self.crashed = (m, pkg) if r.status == "crash" else None
            r = self.load(m, recipe, pkg, "loader")
            self.a.record("loader: load", m.name, r, recipe="default package, "
                          "torch._C._aoti.AOTIModelPackageLoader directly")
        if r.ok:
            self.a.loaded.add(recipe.name)
            if self.s.pending(m.name, "aoti"):
                self.a.fill_row(m, recipe, c, r)
        return r.ok

    def backtrace(self) -> None:
        """The crashed default load once more under cuda-gdb: the native frames of the crash."""
        if not self.crashed:
            return
        m, pkg = self.crashed
        gdb = shutil.which("cuda-gdb")
        refused = self.s.budget.refuse(150)
        if not gdb or refused:
            return self.a.skip("backtrace", m.name, refused or "no cuda-gdb on PATH")
        task_path, _ = write_task({"task": "aoti-run", "id": "aoti-backtrace", "spec": m.spec,
                                   "package": pkg, "method": "aoti_load_package"}, self.s.work)
        cmd = [gdb, "-q", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 40",
               "--args", sys.executable, str(WORKER), str(task_path)]
        log = self.s.logs / "aoti-backtrace.log"
        res = run_command(cmd, env=self.s.env, limit_s=self.s.budget.limit(200), log_path=log)
        text = log.read_text(errors="replace")
        frames = [ln for ln in text.splitlines() if ln.startswith("#")][:40]
        signal_line = next((ln for ln in text.splitlines() if "received signal" in ln), None)
        self.a.record("backtrace", m.name, res, frames=frames, signal=signal_line)
