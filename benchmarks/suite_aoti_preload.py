"""Preloaded AOTInductor runs: the package load (import torch + aoti_load_package; 50-64 s per
package on the H200 until the ISA job took its once-per-machine part, see
suite_aoti.task_aoti_isa) moves out of the quiet phase.

As soon as a model's compile has finished (the window polls between its tasks), its run
process is started in the background; the loads stand in for the foreground load check
(suite_aoti_plan.AotiRunner.check, which now runs only without preloading): it imports
torch, loads the package, writes its "parked" file and sleeps until its go file appears
(suite_aoti.task_aoti_run, suite_proc.park). Loading is CPU and disk work plus one weights
upload, so it may overlap the GPU window's GPU-bound timings as the other CPU-only background
jobs do; the quiet phase starts only once every preload is parked (Background.wait_all treats a
parked process as idle: it only sleeps). Each quiet-phase AOTI run is then: go file, wait for
the process (with a limit), the row. The row's cold start is process start → first output less
the time parked (details: load_s, parked_s, cold_start_wall_s, what loaded alongside).

Ledger (suite_schedule.py): ("aoti-load",) is one load's estimate, the quiet phase's wait for
the last preload to park (they load in parallel); ("aoti-run", model) is the "aoti-timed" part
after the go. A run that could not be preloaded (no check passed, a fallback recipe, the extra
models, --aoti-diagnose) loads in its fresh process in the quiet phase, as before.
"""
from __future__ import annotations

import sys
import time

from suite_runner import WORKER, TaskResult, read_result, result_path, write_task
from suite_schedule import ESTIMATE


# a load is seconds with the ISA check skipped; the limit still fits the 50-64 s loads with it
LOAD_LIMIT_S = 120


class Preloads:
    def __init__(self, runner):
        self.r, self.s = runner, runner.s
        self.jobs: dict[str, dict] = {}  # model → {tid, go, alongside, started_at_s}
        self.seen: set[str] = set()  # models started, or not to be (failed compile, refused)

    def enabled(self) -> bool:
        return not self.s.args.aoti_diagnose

    def ready(self) -> bool:
        """Preloads of the current recipe as soon as its compiles finish: the loads are the
        load check (a package that cannot load crashes its preload, and its row says so)."""
        r = self.r
        return self.enabled() and r.recipe is not None

    def start_ready(self) -> None:
        """A preload for every model whose compile of the checked recipe has finished."""
        if not self.ready():
            return
        for model, (recipe, tid, _) in self.r.jobs.items():
            if model not in self.seen and recipe == self.r.recipe.name \
                    and not self.s.bg.running(tid):
                self.seen.add(model)
                self.start(model)

    def start_rest(self, deadline: float) -> None:
        """The quiet phase's start: waits for each compile still running (quickest first) and
        preloads it as soon as it is done, so that the loads overlap the remaining compiles."""
        for model in list(self.r.jobs):
            self.start_ready()
            if not self.ready():
                return
            self.r.compiled(model, deadline)
        self.start_ready()

    def start(self, model: str) -> None:
        recipe = self.r.recipe
        c = self.r.compiled(model)  # finished: records the compile's attempt
        if not c.ok or not self.s.pending(model, "aoti"):
            return  # run_model fills the row from the compile's failure
        refused = self.s.ledger.refuse([("aoti-load",), ("aoti-run", model)])
        if refused:
            return self.r.skip(f"{recipe.name}: preload", model, refused)
        tid = f"{model}-aoti-{recipe.name}-run"
        go, parked = self.s.work / f"aoti-go-{tid}", self.s.work / f"aoti-parked-{tid}"
        go.unlink(missing_ok=True)
        task = dict(self.r._run_task(self.s.model(model)), id=tid, go_path=str(go),
                    parked_path=str(parked), weights_bytes=c.result.get("weights_bytes"))
        path, _ = write_task(task, self.s.work)
        alongside = self._loading_now(tid)
        # the GPU stays visible (it loads onto it), yet gpu=False: a load is no reason for the
        # window's GPU-bound timings to wait (see the module docstring)
        self.s.bg.start(tid, [sys.executable, "-X", "faulthandler", str(WORKER), str(path)],
                        dict(self.s.env, **self.r.run_env(recipe)), LOAD_LIMIT_S,
                        self.s.logs / f"{tid}.log", gpu=False, hide_gpu=False, parked=parked)
        self.jobs[model] = {"tid": tid, "go": go, "alongside": alongside,
                            "started_at_s": round(self.s.budget.elapsed(), 1)}
        self.s.log(f"{tid}: preloading in the background")

    def _loading_now(self, tid: str) -> set[str]:
        """The background jobs busy while `tid` starts loading, and `tid` added to those of the
        preloads still loading: what loads at the same time slows each other's load, which the
        cold start includes."""
        jobs = self.s.bg.jobs
        for p in self.jobs.values():
            if jobs[p["tid"]].alive() and not jobs[p["tid"]].is_parked():
                p["alongside"].add(tid)
        return {n for n, j in jobs.items() if j.alive() and not j.is_parked()}

    def run(self, model: str) -> TaskResult | None:
        """The go to a preloaded run and its result; None when `model` has none."""
        p = self.jobs.pop(model, None)
        if p is None:
            return None
        refused = self.s.budget.refuse(ESTIMATE["aoti-timed"])
        if refused:
            self.s.bg.wait(p["tid"], 0.0, refused)  # killed: it must not outlive the run
            return TaskResult("skipped", None, 0.0, {}, refused)
        self.s.log(f"{p['tid']}: go")
        t0 = time.monotonic()
        res = self.s.bg.resume(p["tid"], p["go"], self.s.budget.limit(90))
        after_go = round(time.monotonic() - t0, 2)
        res.result = read_result(result_path(self.s.work, p["tid"]))
        if res.result.get("error") and res.status in ("ok", "error"):  # the worker's message
            res.status, res.error = "error", res.result["error"]
        res.result.pop("traceback", None)
        res.result.update(preloaded=True, load_alongside=sorted(p["alongside"]),
                          preload_started_at_s=p["started_at_s"], after_go_s=after_go)
        why = f" ({res.error})" if res.error else ""
        self.s.log(f"{p['tid']}: {res.status} {after_go:.1f}s after its go{why}")
        return res

    def cold_start_note(self, r: TaskResult) -> str:
        res = r.result or {}
        isa = self.r.doc.get("isa_probe") or {}
        once = ("; loaded with TORCHINDUCTOR_VEC_ISA_OK=1: without it aoti_load_package first "
                "runs Inductor's CPU ISA check" + (
                    f", {isa['isa_check_s']:.0f} s per process here (aoti.isa_probe)"
                    if isa.get("isa_check_s") is not None else " (aoti.isa_probe)"))
        if not res.get("preloaded"):
            return ("fresh process: python + import torch + aoti_load_package + first run + "
                    "outputs to host" + once)
        return ("fresh process: python + import torch + aoti_load_package + first run + outputs "
                f"to host, less the {res.get('parked_s') or 0:.1f} s it was parked between the "
                "load and the first run (the process was started early and loaded its package "
                "in the background; load_s, parked_s, cold_start_wall_s and load_alongside in "
                "details)" + once)
