"""Side-by-side benchmark suite: aotpack against eager PyTorch, torch.compile (default and
max-autotune) and AOTInductor, in one GPU run of at most ~450 s.

    python benchmarks/suite.py [--models a,b] [--bundle-dirs '.gpu/*/'] [--budget-s 450]
    python benchmarks/suite.py --smoke          # CPU, tiny models, eager only: checks plumbing
    python benchmarks/suite.py --smoke --variants eager,compile,aoti   # more of it, on the CPU

Per model and variant: median latency, TFLOP/s or GB/s against ceilings measured in the same
run, build time, artifact size, GPU memory, kernel launches per forward, cold start (process
start → first output on the host, in a fresh process) and the error against eager. What fails
is a row with its error; what does not fit the budget is a row that says so. The JSON
(suite_results.py) is rewritten after every measurement; benchmarks/report.py turns it into
docs/performance.md's table and a chart.

The run's plan (phases, estimates, priorities) is in suite_schedule.py: AOTInductor compiles
and other CPU work start in the background at t = 0; GPU-bound timings (ceilings, aotpack's
CUDA-graph replays) run once no background job can use the GPU; the AOTI run processes start
early, load their packages in the background and park (suite_aoti_preload.py); everything
CPU-sensitive (one process per model for eager → torch.compile → max-autotune, cold starts,
the AOTI runs' go) once no background job runs but those parked. Rows: suite_torch.py,
suite_bundles.py, suite_aoti_plan.py (AOTI; --aoti-diagnose: suite_aoti_diagnose.py).
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import suite_aoti_plan as aoti_plan  # noqa: E402
import suite_models as sm  # noqa: E402
from suite_aoti_diagnose import Diagnosis  # noqa: E402
from suite_bundles import BundleSteps, parse_bench  # noqa: E402,F401 (suite.parse_bench)
from suite_results import ROW_FIELDS, Results  # noqa: E402
from suite_runner import (  # noqa: E402
    WORKER, Background, Budget, TaskResult, result_path, run_worker, write_task,
)
from suite_schedule import ESTIMATE, PRIORITY, Ledger  # noqa: E402,F401
from suite_torch import TorchSteps  # noqa: E402


class Stopped(Exception):
    """SIGTERM/SIGINT: stop measuring, keep what was measured."""


class Suite:
    def __init__(self, args):
        self.args, self.root = args, ROOT
        self.device = "cpu" if args.smoke else "cuda"
        self.work = Path(args.work).resolve()
        self.logs = self.work / "logs"
        self.gpu_go = self.work / "gpu-go"  # background GPU jobs wait for it (after ceilings)
        clean_work(self.work, keep_references=bool(args.resume))
        self.logs.mkdir(parents=True, exist_ok=True)
        self.budget = Budget(args.budget_s)
        self.ledger = Ledger(self.budget)
        self.bg = Background()
        tiers = ("core",) if args.no_extra else ("core", "extra")
        self.models = sm.select_models(args.models, tiers, args.smoke)
        default = ("eager",) if args.smoke else (*sm.TORCH_VARIANTS, *sm.AOTPACK_VARIANTS)
        self.variants = tuple(args.variants or default)
        self.bundles, warnings = self._bundles()
        self.models = sm.promote_bundled(self.models, self.bundles)
        self.results = Results(Path(args.out), self._meta())
        for w in warnings:
            self.results.warn(w)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE),
                                                    os.environ.get("PYTHONPATH", "")]))
        self.aotpack_run = os.environ.get("AOTPACK_RUN") or None
        self.compare: dict[str, dict] = {}  # model → outputs saved before eager ran
        self.why_not: dict[tuple, str] = {}  # row → why it was not run (refusals)
        if args.resume:
            self.results.resume(Path(args.resume), self._meta())
        self.torch, self.packs, self.aoti = TorchSteps(self), BundleSteps(self), None

    # ----------------------------------------------------------------------------- set-up
    def _bundles(self):
        if self.args.smoke:
            return [], []
        if self.args.bundles_json:
            return sm.bundles_from_manifest(Path(self.args.bundles_json), self.models)
        dirs = [Path(p) for pat in self.args.bundle_dirs for p in glob.glob(pat)]
        return sm.discover_bundles([d for d in dirs if d.is_dir()], self.models)

    def _meta(self) -> dict:
        return {"date": datetime.date.today().isoformat(), "commit": self.args.commit,
                "command": " ".join(sys.argv), "smoke": self.args.smoke,
                "host": {"python": platform.python_version(), "machine": platform.machine(),
                         "cpus": os.cpu_count()},
                "aotpack_run": os.environ.get("AOTPACK_RUN"),
                "aotpack_lib": os.environ.get("AOTPACK_LIB")}

    def log(self, msg: str) -> None:
        print(f"[suite {self.budget.elapsed():6.1f}s] {msg}", flush=True)

    def plan(self) -> None:
        """Every row exists from the start (pending), so nothing can go missing."""
        docs = self.results.doc["models"]
        for m in self.models:
            docs.setdefault(m.name, {}).update(spec=m.spec, bound=m.bound, tier=m.tier,
                                               note=m.note)
            for v in sm.TORCH_VARIANTS:
                self._plan_row(m.name, v, "")
            bundles = [b for b in self.bundles if b.model == m.name]
            for v in sm.AOTPACK_VARIANTS:
                for b in bundles:
                    self._plan_row(m.name, v, b.label)
                kept = [r for r in self.results.rows if (r["model"], r["variant"]) == (m.name, v)
                        and r["status"] not in ("pending", "skipped")]
                if not bundles and not kept:  # --resume keeps the rows it measured
                    self._no_bundle(m, v)
        if not self.args.smoke and not self.results.doc["ceilings"].get("gemm_tflops"):
            self.ledger.add(("ceilings",), ESTIMATE["ceilings"], PRIORITY["ceilings"])
        self.torch.plan(self.models)
        self.packs.plan()
        self.results.doc["schedule"] = {"estimates_s": ESTIMATE, "priorities": PRIORITY,
                                        "cpus": os.cpu_count()}
        self.results.write()

    def _plan_row(self, model: str, variant: str, label: str) -> None:
        self.results.row(model, variant, label)
        if variant in self.variants:
            return
        why = ("--smoke runs eager only (choose more with --variants)"
               if self.args.smoke and not self.args.variants else "not selected (--variants)")
        self.set_row(model, variant, label, status="skipped", error=why)

    def _no_bundle(self, m, variant: str) -> None:
        if self.args.smoke:
            self.set_row(m.name, variant, "", status="skipped", error="--smoke has no bundles")
        elif m.tier == "extra":  # the frontend probe fills in the reason
            self.set_row(m.name, variant, "", status="unsupported",
                         error="unsupported: aotpack cannot build this model yet")
        else:
            self.set_row(m.name, variant, "", status="missing",
                         error=f"no bundle with spec.txt = {m.spec} under the bundle folders")

    # ------------------------------------------------------------------------------ rows
    def set_row(self, model: str, variant: str, label: str, **fields) -> None:
        status = fields.get("status")
        row = self.results.row(model, variant, label)
        if status not in (None, "ok") and row["status"] not in ("pending", "unsupported"):
            return  # never overwrite a decided row with a later failure or skip
        self.results.update(model, variant, label, **fields)

    def pending(self, model: str, variant: str, label: str = "") -> bool:
        return self.results.row(model, variant, label)["status"] == "pending"

    def apply(self, model: str, variant: str, label: str, res: TaskResult, **extra) -> None:
        """A task's outcome into its row."""
        if not res.ok:
            self.set_row(model, variant, label, status=res.status, error=res.error,
                         wall_s=res.wall_s, log_tail=res.log_tail[-1500:] if res.rc else None,
                         **extra)
            return
        self.apply_fields(model, variant, label, dict(res.result, wall_s=res.wall_s), **extra)

    def apply_fields(self, model: str, variant: str, label: str, result: dict, **extra) -> None:
        """Measured fields on top, the rest under "details"; the caller's facts win."""
        fields = {k: v for k, v in result.items() if k in ROW_FIELDS or k == "notes"}
        details = {k: v for k, v in result.items() if k not in fields and k != "details"}
        row = self.results.row(model, variant, label)
        fields["details"] = {**(row.get("details") or {}), **details,
                             **(result.get("details") or {})}
        self.set_row(model, variant, label, status="ok", error=None, **{**fields, **extra})

    def model(self, name: str):
        return next(m for m in self.models if m.name == name)

    def ref_path(self, model: str) -> str:
        return str(self.work / f"ref-{model}.pt")

    def inputs_path(self, model: str) -> str:
        return str(self.work / f"inputs-{model}.pt")

    def cache_env(self, name: str) -> dict:
        d = self.work / "cache" / name  # per task: each compile starts from a cold cache
        return {"TORCHINDUCTOR_CACHE_DIR": str(d), "TRITON_CACHE_DIR": str(d / "triton")}

    # ------------------------------------------------------------------------- running
    def task(self, tid: str, task: dict, *, estimate, cap_s: float,
             env: dict | None = None, keep_s: float = 0.0) -> TaskResult:
        """One worker process, when its estimate (a name of ESTIMATE or seconds) still fits;
        killed when it would eat into keep_s, the time kept for more important work."""
        est = ESTIMATE[estimate] if isinstance(estimate, str) else estimate
        refused = self.budget.refuse(est)
        if refused:
            return TaskResult("skipped", None, 0.0, {}, refused)
        tid = re.sub(r"[^A-Za-z0-9_.+-]", "_", tid)
        self.log(f"{tid} ...")
        res = run_worker(dict(task, id=tid), work=self.work, env=dict(self.env, **(env or {})),
                         limit_s=max(1.0, self.budget.limit(cap_s) - keep_s),
                         log_path=self.logs / f"{tid}.log")
        why = f" ({res.error})" if res.error else ""
        self.log(f"{tid}: {res.status} in {res.wall_s:.1f}s{why}")
        return res

    def gate_gpu(self) -> None:
        """Before a GPU timing: no background job may still use the GPU."""
        keep = self.ledger.pending(1)
        waited = self.bg.wait_gpu_free(self.budget.deadline(keep),
                                       "its GPU phase outlasted what the budget could wait")
        if waited > 0.5:
            self.log(f"waited {waited:.1f}s for background GPU phases to end")
        self.results.doc.setdefault("schedule", {}).setdefault("gpu_waits_s", []).append(
            round(waited, 1))

    def poll_aoti(self) -> None:
        if self.aoti and not self.args.aoti_diagnose:
            self.aoti.poll()

    # -------------------------------------------------------------------------- phases
    def run(self) -> None:
        """Phases in order of importance (suite_schedule.py): what the budget cuts is the end."""
        self.plan()
        core = [m for m in self.models if m.tier == "core"]
        extra = [m for m in self.models if m.tier == "extra"]
        self.start_background(core, extra)
        self.window()
        self.quiet(core, extra)
        for m in extra:  # lowest priority: only with what is left
            self.torch.run(m)
            if self.aoti:
                self.aoti.run_extra(m)
        for m in core if self.args.warm_start else []:
            self.torch.warm_start(m)
        self.finish_rows()

    def start_background(self, core: list, extra: list) -> None:
        """t = 0: CPU-only jobs (reference inputs, weights, frontend probes) and the AOTI
        compiles + toolchain probes."""
        todo = [{"name": m.name, "spec": m.spec, "path": self.inputs_path(m.name)}
                for m in core if not Path(self.inputs_path(m.name)).is_file()]
        if todo:
            self._bg_worker("inputs", {"task": "inputs", "models": todo}, 180)
        self.packs.start_weights()
        aoti_models = core if "aoti" in self.variants else []
        if aoti_models:
            self.aoti = aoti_plan.AotiRunner(self)
            if not self.args.aoti_diagnose:
                self.aoti.start(aoti_models)
            self.aoti.start_probes()
        if extra and not self.args.smoke:
            self._bg_worker("frontend-probes", {"task": "frontend-probe", "models": [
                {"name": m.name, "spec": m.spec} for m in extra]}, 240)

    def _bg_worker(self, tid: str, task: dict, limit_s: float) -> None:
        path, _ = write_task(dict(task, id=tid), self.work)
        self.bg.start(tid, [sys.executable, str(WORKER), str(path)],
                      dict(self.env, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2"), limit_s,
                      self.logs / f"{tid}.log")

    def window(self) -> None:
        """GPU-bound timings while CPU-only background jobs may still run. The ceilings come
        first, while the background GPU jobs are still in their CPU-only start and wait for
        the go (suite_proc.wait_for_go): they need the GPU alone."""
        if ("ceilings",) in self.ledger.items:
            self.ceilings()
        self.gpu_go.write_text("go\n")
        self.poll_aoti()  # AOTI runs start while their packages compile
        self.packs.latency()
        if self.aoti and not self.args.aoti_diagnose:
            if self.aoti.preloads.enabled():
                self.aoti.preloads.start_ready()
            else:
                self.aoti.check(deadline=self.budget.deadline(self.ledger.pending(1)))

    def quiet(self, core: list, extra: list) -> None:
        """Everything CPU-sensitive, with no background job left but the parked AOTI runs
        (loaded, asleep until their go: suite_aoti_preload.py)."""
        t0 = self.budget.elapsed()
        if self.aoti:  # compiles that finish now are preloaded at once (room kept for a load)
            self.aoti.preloads.start_rest(self.budget.deadline(self.ledger.pending(1)))
        self.ledger.drop(("aoti-load",))  # what it reserved is the wait below
        self.bg.wait_all(self.budget.deadline(self.ledger.pending(1)),
                         "the core rows needed the time that was left")
        parked = self.bg.parked()
        self.log(f"quiet phase (waited {self.budget.elapsed() - t0:.1f}s for background jobs; "
                 f"{len(parked)} AOTI runs parked)")
        self.results.doc.setdefault("schedule", {}).update(
            quiet_from_s=round(self.budget.elapsed(), 1), parked_at_quiet=parked)
        if self.aoti:
            self.aoti.record_probes()
        self.extra_probes(extra)
        for m in core:
            self.torch.ensure_reference(m)
            self.torch.run(m)
        # priority 0 and a few seconds each: before the AOTI runs (which, when not preloaded,
        # import torch and load their package)
        self.packs.cold_starts()
        if self.aoti and self.args.aoti_diagnose:
            Diagnosis(self.aoti).run(core)
            for m in core:
                self.aoti.compile_and_run(m)
        elif self.aoti:
            for m in core:
                self.aoti.run_model(m)
        self.torch.retry_later()

    def ceilings(self) -> None:
        self.ledger.drop(("ceilings",))
        res = self.task("ceilings", {"task": "ceilings"}, estimate="ceilings", cap_s=90)
        ceil = dict(res.result) if res.ok else {"status": res.status, "error": res.error}
        self.results.doc["ceilings"] = ceil
        self.results.write()

    def extra_probes(self, extra: list) -> None:
        """The extra models' aotpack rows: why aotpack cannot build them (frontend probe)."""
        if "frontend-probes" not in self.bg.jobs:
            return
        res = self.bg.wait("frontend-probes")
        path = result_path(self.work, "frontend-probes")
        probes = (json.loads(path.read_text()) if path.is_file() else {}).get("models") or {}
        for m in extra:  # (a model with bundles is core: sm.promote_bundled)
            probe = probes.get(m.name)
            if probe is None or probe.get("error"):
                fields = {"status": "error", "error": "frontend probe: " + (
                    probe["error"] if probe else f"{res.status}: {res.error}")}
            elif probe.get("unsupported"):
                fields = {"status": "unsupported", "error": f"unsupported: {probe['unsupported']}"}
            else:
                fields = {"status": "missing", "error": "missing: aotpack's frontend and passes "
                                                        "accept it, but no bundle was given"}
            for v in sm.AOTPACK_VARIANTS:
                self.results.update(m.name, v, "", **fields)

    def finish_rows(self) -> None:
        for r in self.results.rows:
            why = self.why_not.get((r["model"], r["variant"], r["label"]))
            if r["status"] == "pending" and why:
                r["status"], r["error"] = "skipped", why
        self.results.finish_pending("skipped: the time budget ran out before this row")

    def finish(self) -> None:
        self.bg.kill_all()
        self.results.doc.setdefault("schedule", {})["background"] = {
            name: {"status": job.result.status, "wall_s": job.result.wall_s, "gpu": job.gpu}
            for name, job in self.bg.jobs.items() if job.result is not None}
        if self.aoti:
            self.aoti.finish()
        self.results.doc["budget"] = {"limit_s": self.args.budget_s,
                                      "used_s": round(self.budget.elapsed(), 1)}
        self.results.write()
        if self.args.logs_tar:
            with tarfile.open(self.args.logs_tar, "w:gz") as tar:
                tar.add(self.logs, arcname="suite-logs")


def clean_work(work: Path, keep_references: bool) -> None:
    """A machine kept warm between calls still has the last run's folder: its compile caches
    would make "cold" compiles warm, so they go; eager's references stay when resuming."""
    for sub in ("cache", "aoti", "logs", "cxx-probe", "cxx-exclude-libs"):
        shutil.rmtree(work / sub, ignore_errors=True)
    patterns = ["task-*.json", "result-*.json", "gpu-done-*", "gpu-go", "outs-*.pt",
                "aoti-go-*", "aoti-parked-*"]
    patterns += [] if keep_references else ["ref-*.pt", "inputs-*.pt"]
    for pattern in patterns:
        for f in work.glob(pattern):
            f.unlink()


def default_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=lambda s: s.split(","), default=None,
                    help=f"comma list (default: core models); known: {[m.name for m in sm.MODELS]}")
    ap.add_argument("--no-extra", action="store_true",
                    help="leave out the extra tier (GPT-2, BERT, ViT, ResNet-50: torch variants "
                         "last, when time is left; aotpack rows say why it cannot build them)")
    ap.add_argument("--variants", type=lambda s: s.split(","), default=None)
    ap.add_argument("--bundle-dirs", nargs="*", default=[".gpu/*/"])
    ap.add_argument("--bundles-json", default=None, help="JSON list of {model, label, dir}")
    ap.add_argument("--budget-s", type=float, default=450.0)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--work", default="/tmp/aotpack-suite")
    ap.add_argument("--out", default=None, help="results JSON (default: $OUT or "
                    "benchmarks/results, named <date>-<commit>.json)")
    ap.add_argument("--logs-tar", default=None, help="write every task's log into this .tar.gz")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--aoti-diagnose", action="store_true",
                    help="the long AOTI diagnosis (default load, C++ loader, recipes one by one, "
                         "cuda-gdb backtrace) in the foreground instead of the known recipe in "
                         "the background (suite_aoti_diagnose.py)")
    ap.add_argument("--aoti-runs-at", choices=("go", "compiled"), default="go",
                    help="when each AOTI run process starts: at the go after the ceilings "
                         "(aoti_load_package's device-information check then overlaps the "
                         "compile), or once its package has compiled (before 2026-11-30 "
                         "session 5)")
    ap.add_argument("--aoti-all", action="store_true",
                    help="with --aoti-diagnose: try every AOTI recipe")
    ap.add_argument("--resume", default=None, help="an earlier results JSON: keep its measured "
                    "rows, ceilings and AOTI findings; measure what it skipped (into --out)")
    ap.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                    help="leave out the max-autotune warm-cache starts (the last, optional "
                         "step of a run)")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, tiny models; eager only unless --variants says more")
    args = ap.parse_args(argv)
    if args.smoke:
        args.reps = min(args.reps, 20)
    args.commit = args.commit or os.environ.get("SUITE_COMMIT") or default_commit()
    if args.out is None:
        out = os.environ.get("OUT")
        folder = Path(out) if out else ROOT / "benchmarks" / "results"
        args.out = str(folder / f"{datetime.date.today().isoformat()}-{args.commit}.json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    suite = Suite(args)

    def stop(signum, _frame):
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        suite.run()
    except Stopped as e:
        suite.log(f"stopped by {e}")
        suite.results.finish_pending(f"not run: the suite was stopped ({e}) before this row")
    finally:
        suite.finish()
    suite.log(f"wrote {args.out}")
    counts = {}
    for r in suite.results.rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    suite.log(f"rows: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
