"""Preloaded AOTInductor runs: the package load moves out of the quiet phase.

Each model's run process starts at the go (after the ceilings), while its package compiles:
it imports torch and does what aoti_load_package does before it opens a package, Inductor's
device-information check (cpu_vec_isa.pick_vec_isa: on torch 2.11 a child Python importing
torch per CPU ISA probe, 35-60 s per process on the H200; cached in the process), then waits
for its compile's result file, loads the package (seconds), writes its "parked" file and sleeps
until its go file appears (suite_aoti.task_aoti_run, suite_proc.park). A run whose compile
fails is stopped. The loads stand in for the foreground load check
(suite_aoti_plan.AotiRunner.check, which now runs only without preloading). The quiet phase
starts only once every preload is parked (Background.wait_all treats a parked process as
idle: it only sleeps). Each quiet-phase AOTI run is then: go file, wait for the process (with a
limit), the row. The row's cold start is process start → first output less the time it waited
for its package and the time parked (details: device_info_check_s, package_wait_s, load_s,
parked_s, cold_start_wall_s, what loaded alongside).

Ledger (suite_schedule.py): ("aoti-load",) is the quiet phase's wait for the last preload to
park; ("aoti-run", model) is the "aoti-timed" part after the go. A run that could not be
preloaded (no check passed, a fallback recipe, the extra models, --aoti-diagnose) loads in its
fresh process in the quiet phase, as before.
"""
from __future__ import annotations

import sys
import time

from suite_runner import WORKER, TaskResult, read_result, result_path, write_task
from suite_schedule import ESTIMATE


# past the compile: the device-information check (35-60 s on the H200, contended) and the load
LOAD_LIMIT_S = 120


class Preloads:
    def __init__(self, runner):
        self.r, self.s = runner, runner.s
        self.jobs: dict[str, dict] = {}  # model → {tid, go, alongside, started_at_s}
        self.seen: set[str] = set()  # models started, or not to be (failed compile, refused)

    def enabled(self) -> bool:
        return not self.s.args.aoti_diagnose

    def ready(self) -> bool:
        """Preloads of the current recipe (a package that cannot load crashes its preload, and
        its row says so)."""
        return self.enabled() and self.r.recipe is not None

    def start_ready(self) -> None:
        """A run process for every compile of the current recipe, from the go on: it imports
        torch and Inductor and does aoti_load_package's device-information check (35-60 s of
        child processes on the H200) while its package compiles, then loads it as soon as the
        compile's result appears. Kills the ones whose compile failed."""
        if not self.ready():
            return
        for model, (recipe, tid, _) in self.r.jobs.items():
            if recipe != self.r.recipe.name:
                continue
            finished = not self.s.bg.running(tid)
            if model not in self.seen:
                if not finished and self.s.args.aoti_runs_at == "compiled":
                    continue  # started once its package exists
                self.seen.add(model)
                if not finished or self.r.compiled(model).ok:  # not when it failed before
                    self.start(model)
            elif finished and model in self.jobs and self.jobs[model]["alongside"] is None:
                p = self.jobs[model]  # its compile just ended: it loads now, or never
                if self.r.compiled(model).ok:
                    p["alongside"] = self._loading_now(p["tid"])
                else:
                    self.jobs.pop(model)  # it would wait for a package that never comes
                    self.s.bg.wait(p["tid"], 0.0, "its compile failed")

    def start_rest(self, deadline: float) -> None:
        """The quiet phase's start: waits for each compile still running (quickest first), so
        that a failed one's run process is stopped."""
        for model in list(self.r.jobs):
            self.start_ready()
            if not self.ready():
                return
            self.r.compiled(model, deadline)
        self.start_ready()

    def start(self, model: str) -> None:
        recipe, compile_tid, _ = self.r.jobs[model]
        if not self.s.pending(model, "aoti"):
            return
        refused = self.s.ledger.refuse([("aoti-load",), ("aoti-run", model)])
        if refused:
            return self.r.skip(f"{recipe}: preload", model, refused)
        tid = f"{model}-aoti-{recipe}-run"
        go, parked = self.s.work / f"aoti-go-{tid}", self.s.work / f"aoti-parked-{tid}"
        go.unlink(missing_ok=True)
        task = dict(self.r._run_task(self.s.model(model)), id=tid, go_path=str(go),
                    parked_path=str(parked),
                    compiled_path=str(result_path(self.s.work, compile_tid)),
                    package_wait_limit_s=ESTIMATE["aoti-compile"] * 2.5)
        path, _ = write_task(task, self.s.work)
        # the GPU stays visible (it loads onto it), yet gpu=False: a load is no reason for the
        # window's GPU-bound timings to wait (see the module docstring)
        self.s.bg.start(tid, [sys.executable, "-X", "faulthandler", str(WORKER), str(path)],
                        dict(self.s.env, **self.r.run_env(self.r.recipe, model)),
                        ESTIMATE["aoti-compile"] * 2.5 + LOAD_LIMIT_S,
                        self.s.logs / f"{tid}.log", gpu=False, hide_gpu=False, parked=parked)
        # alongside: the jobs busy when its package appeared and it loaded (start_ready)
        self.jobs[model] = {"tid": tid, "go": go, "alongside": None,
                            "started_at_s": round(self.s.budget.elapsed(), 1)}
        self.s.log(f"{tid}: started; loads its package once compiled, then parks")

    def _loading_now(self, tid: str) -> set[str]:
        """The background jobs busy while `tid` starts loading, and `tid` added to those of the
        preloads still loading: what loads at the same time slows each other's load, which the
        cold start includes."""
        jobs = self.s.bg.jobs
        for p in self.jobs.values():
            if p["alongside"] is not None and jobs[p["tid"]].alive() \
                    and not jobs[p["tid"]].is_parked():
                p["alongside"].add(tid)
        return {n for n, j in jobs.items() if j.alive() and not j.is_parked() and n != tid}

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
        res.result.update(preloaded=True, load_alongside=sorted(p["alongside"] or ()),
                          preload_started_at_s=p["started_at_s"], after_go_s=after_go)
        why = f" ({res.error})" if res.error else ""
        self.s.log(f"{p['tid']}: {res.status} {after_go:.1f}s after its go{why}")
        return res

    def cold_start_note(self, r: TaskResult) -> str:
        res = r.result or {}
        if not res.get("preloaded"):
            return ("fresh process: python + import torch + aoti_load_package + first run + "
                    "outputs to host")
        return ("fresh process: python + import torch + aoti_load_package + first run + outputs "
                f"to host, less the {res.get('package_wait_s') or 0:.1f} s it waited for its "
                f"package to compile and the {res.get('parked_s') or 0:.1f} s it was parked "
                "between the load and the first run (started early, in the background: "
                "aoti_load_package's device-information check, "
                f"{res.get('device_info_check_s') or 0:.0f} s of it, ran while the package "
                "compiled; load_s, package_wait_s, parked_s, cold_start_wall_s and "
                "load_alongside in details)")
