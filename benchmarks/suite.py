"""Side-by-side benchmark suite: aotpack against eager PyTorch, torch.compile (default and
max-autotune) and AOTInductor, in one GPU run of at most ~8 minutes.

    python benchmarks/suite.py [--models a,b] [--bundle-dirs '.gpu/*/'] [--budget-s 450]
    python benchmarks/suite.py --smoke          # CPU, tiny models, eager only: checks plumbing

Per model and variant: median latency, TFLOP/s or GB/s against ceilings measured in the same
run, build time, artifact size, GPU memory, kernel launches per forward, cold start (process
start → first output on the host, each in a fresh process) and the error against eager. Every
variant runs in its own process with a time limit; what fails is a row with its error. The JSON
(suite_results.py) is rewritten after every measurement; benchmarks/report.py turns it into the
README table and a chart. Work happens in order of importance, and what no longer fits the
budget is skipped with the reason. AOTInductor's load crash is investigated by
suite_aoti_plan.py.
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
from suite_results import ROW_FIELDS, Results  # noqa: E402
from suite_runner import (  # noqa: E402
    WORKER, Background, Budget, TaskResult, result_path, run_command, run_worker, write_task,
)

# Seconds per task on the H200 (for admission; limits are generous multiples), from the
# 2026-11-30 run (benchmarks/results/2026-11-30-8c98e0a.json) plus ~25 %: eager 10-14 s,
# compile 22-24 s, max-autotune 34-45 s, its warm start 25-30 s, AOTI compile 87 s, aotpack-run
# 5-9 s, aotpack-py 6-8 s, aotpack cold 1-2.5 s. The first guesses (compile 60, max-autotune 90)
# refused max-autotune for the MLPs with time left that would have covered it.
ESTIMATE = {"ceilings": 10, "eager": 16, "compile": 30, "compile-max-autotune": 55,
            "warm": 38, "aoti-compile": 100, "aoti-run": 30, "aotpack-run": 11,
            "aotpack-py": 10, "aotpack-cold": 4, "probe": 8}


class Stopped(Exception):
    """SIGTERM/SIGINT: stop measuring, keep what was measured."""


class Suite:
    def __init__(self, args):
        self.args = args
        self.device = "cpu" if args.smoke else "cuda"
        self.work = Path(args.work).resolve()
        self.logs = self.work / "logs"
        clean_work(self.work, keep_references=bool(args.resume))
        self.logs.mkdir(parents=True, exist_ok=True)
        self.budget = Budget(args.budget_s)
        self.bg = Background()
        tiers = ("core",) if args.no_extra else ("core", "extra")
        self.models = sm.select_models(args.models, tiers, args.smoke)
        self.variants = tuple(args.variants or (*sm.TORCH_VARIANTS, *sm.AOTPACK_VARIANTS))
        self.bundles, warnings = self._bundles()
        self.results = Results(Path(args.out), self._meta())
        for w in warnings:
            self.results.warn(w)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE),
                                                    os.environ.get("PYTHONPATH", "")]))
        self.aotpack_run = os.environ.get("AOTPACK_RUN") or None
        self.compiled_here: set[tuple[str, str]] = set()
        if args.resume:
            self.results.resume(Path(args.resume), self._meta())

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
                "host": {"python": platform.python_version(), "machine": platform.machine()},
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
                if not bundles:
                    self._no_bundle(m, v)
        self.results.write()

    def _plan_row(self, model: str, variant: str, label: str) -> None:
        self.results.row(model, variant, label)
        if variant not in self.variants:
            self._set(model, variant, label, status="skipped", error="not selected (--variants)")
        elif self.args.smoke and variant != "eager":
            self._set(model, variant, label, status="skipped", error="--smoke runs eager only")

    def _no_bundle(self, m, variant: str) -> None:
        if self.args.smoke:
            self._set(m.name, variant, "", status="skipped", error="--smoke runs eager only")
        elif m.tier == "extra":  # the frontend probe fills in the reason
            self._set(m.name, variant, "", status="unsupported",
                      error="unsupported: aotpack cannot build this model yet")
        else:
            self._set(m.name, variant, "", status="missing",
                      error=f"no bundle with spec.txt = {m.spec} under the bundle folders")

    def _set(self, model: str, variant: str, label: str, **fields) -> None:
        if fields.get("status") != "ok" and self.results.row(model, variant, label)["status"] \
                not in ("pending", "unsupported"):
            return  # never overwrite a decided row with a later skip
        self.results.update(model, variant, label, **fields)

    def pending(self, model: str, variant: str, label: str = "") -> bool:
        return self.results.row(model, variant, label)["status"] == "pending"

    # ------------------------------------------------------------------------- running
    def task(self, tid: str, task: dict, *, estimate: str, cap_s: float,
             env: dict | None = None) -> TaskResult:
        refused = self.budget.refuse(ESTIMATE[estimate])
        if refused:
            return TaskResult("skipped", None, 0.0, {}, refused)
        tid = re.sub(r"[^A-Za-z0-9_.-]", "_", tid)
        self.log(f"{tid} ...")
        res = run_worker(dict(task, id=tid), work=self.work, env=dict(self.env, **(env or {})),
                         limit_s=self.budget.limit(cap_s), log_path=self.logs / f"{tid}.log")
        why = f" ({res.error})" if res.error else ""
        self.log(f"{tid}: {res.status} in {res.wall_s:.1f}s{why}")
        return res

    def apply(self, model: str, variant: str, label: str, res: TaskResult, **extra) -> None:
        """A task's outcome into its row: measured fields on top, the rest under "details"."""
        if not res.ok:
            self._set(model, variant, label, status=res.status, error=res.error,
                      wall_s=res.wall_s, log_tail=res.log_tail[-1500:] if res.rc else None, **extra)
            return
        fields = {k: v for k, v in res.result.items() if k in ROW_FIELDS or k == "notes"}
        details = {k: v for k, v in res.result.items() if k not in fields}
        row = self.results.row(model, variant, label)
        fields["details"] = {**(row.get("details") or {}), **details}
        self._set(model, variant, label, status="ok", error=None, wall_s=res.wall_s,
                  **{**fields, **extra})  # the caller's facts win over the worker's

    def cache_env(self, name: str) -> dict:
        d = self.work / "cache" / name  # per variant: each compile starts from a cold cache
        return {"TORCHINDUCTOR_CACHE_DIR": str(d), "TRITON_CACHE_DIR": str(d / "triton")}

    def ref_path(self, model: str) -> str:
        return str(self.work / f"ref-{model}.pt")

    # -------------------------------------------------------------------------- phases
    def run(self) -> None:
        """Phases in order of importance: what the budget cuts is the end of this list."""
        self.plan()
        self.start_background()
        core = [m for m in self.models if m.tier == "core"]
        extra = [m for m in self.models if m.tier == "extra"]
        if not self.args.smoke and not self.results.doc["ceilings"].get("gemm_tflops"):
            self.ceilings()  # GPU-bound: unaffected by the CPU-only jobs still running
        self.bg.wait_all()  # nothing is timed while they compete for the CPU
        for m in core:
            self.torch_variant(m, "eager")
        for b in self.bundles:
            self.aotpack(b)
        for m in core:
            self.torch_variant(m, "compile")
        aoti, recipe = self.aoti_diagnosis(core or extra)
        for m in core:
            self.torch_variant(m, "compile-max-autotune")
        for m in core:
            if aoti:
                aoti.run_model(m, recipe)
        for v in ("compile", "compile-max-autotune"):
            for m in core:
                self.warm_start(m, v)
        if aoti:
            aoti.backtrace()
        for m in extra:
            self.extra_model(m, aoti, recipe)
        self.results.finish_pending("skipped: the time budget ran out before this row")

    def aoti_diagnosis(self, models: list):
        """AOTInductor: the recipe that loads here (from an earlier run when resuming)."""
        if self.args.smoke or "aoti" not in self.variants or not models:
            return None, None
        aoti = aoti_plan.AotiRunner(self)
        done = self.results.doc["aoti"]
        if done.get("attempts"):
            return aoti, tuple(done["recipe"]) if done.get("recipe") else None
        return aoti, aoti.diagnose(models)

    def ceilings(self) -> None:
        res = self.task("ceilings", {"task": "ceilings"}, estimate="ceilings", cap_s=90)
        ceil = dict(res.result) if res.ok else {"status": res.status, "error": res.error}
        self.results.doc["ceilings"] = ceil
        self.results.write()

    def torch_variant(self, m, variant: str) -> None:
        if variant == "eager" and not self.pending(m.name, variant):
            return self.ensure_reference(m)
        if not self.pending(m.name, variant):
            return
        task = {"task": "torch", "variant": variant, "spec": m.spec, "device": self.device,
                "ref_path": self.ref_path(m.name), "reps": self.args.reps}
        cap = {"eager": 120, "compile": 240, "compile-max-autotune": 360}[variant]
        res = self.task(f"{m.name}-{variant}", task, estimate=variant, cap_s=cap,
                        env=self.cache_env(f"{m.name}-{variant}"))
        costs = res.result.pop("costs", None) if res.ok else None
        if costs:
            self.results.doc["models"][m.name].update(costs)
        extra = ({"cold_start_note": "cold start: python + import torch + model built from its "
                                     "seed + first forward + outputs to host"}
                 if variant == "eager" else
                 {"build_note": "build_s: compile + first forward, cold Inductor cache"})
        if variant != "eager" and res.ok:
            res.result["cold_start_cold_cache_s"] = res.result.pop("cold_start_s", None)
            self.compiled_here.add((m.name, variant))
        self.apply(m.name, variant, "", res, **extra)

    def ensure_reference(self, m) -> None:
        """When resuming on a fresh machine: eager's inputs/outputs for the rows still to
        measure, without re-measuring eager."""
        todo = any(r["status"] == "pending" for r in self.results.rows if r["model"] == m.name)
        if todo and not Path(self.ref_path(m.name)).is_file():
            self.task(f"{m.name}-reference", {"task": "torch", "variant": "eager", "spec": m.spec,
                                               "device": self.device, "ref_only": True,
                                               "ref_path": self.ref_path(m.name)},
                      estimate="eager", cap_s=120)

    def warm_start(self, m, variant: str) -> None:
        row = self.results.row(m.name, variant)
        if (m.name, variant) not in self.compiled_here or row["status"] != "ok":
            return  # needs the Inductor cache of a compile done by this run
        task = {"task": "torch", "variant": variant, "spec": m.spec, "device": self.device,
                "warm_start_only": True}
        res = self.task(f"{m.name}-{variant}-warm", task, estimate="warm", cap_s=180,
                        env=self.cache_env(f"{m.name}-{variant}"))
        fields = ({"cold_start_s": res.result.get("cold_start_s"),
                   "cold_start_note": "fresh process, warm Inductor cache: python + import "
                                      "torch + model build + torch.compile + first forward"}
                  if res.ok else {"cold_start_note": f"warm-cache start not measured: {res.error}"})
        self.results.update(m.name, variant, "", **fields)

    # -------------------------------------------------------------------------- aotpack
    def aotpack(self, b) -> None:
        weights = self._weights_ready(b)
        if weights is not None:
            for v in sm.AOTPACK_VARIANTS:
                self._set(b.model, v, b.label, status="error", error=weights)
            return
        facts = sm.bundle_facts(b.bundle)
        build = {"build_s": b.build.get("build_s"),
                 "build_note": "aotpack build on the build host (build.json)" if b.build
                 else "not recorded (put build.json with build_s next to the bundle)",
                 "artifact_bytes": facts["artifact_bytes"],
                 "artifact_note": "model.aotpack + external weights file",
                 "launches": facts["steps"], "graph_launches": 1,
                 "launches_method": "bundle manifest: kernel steps per forward, one CUDA graph"}
        if "aotpack-run" in self.variants:
            self.aotpack_run_row(b, build)
        if "aotpack-py" in self.variants:
            self.aotpack_py_row(b, build)

    def _weights_ready(self, b) -> str | None:
        name = f"weights-{b.model}-{b.label}"
        if name not in self.bg.jobs:
            return None
        res = self.bg.wait(name)
        if res.ok:
            return None
        return f"scripts/make-weights failed: {res.error}: {res.log_tail[-300:]}"

    def aotpack_run_row(self, b, build: dict) -> None:
        if not self.aotpack_run or not Path(self.aotpack_run).is_file():
            self._set(b.model, "aotpack-run", b.label, status="error",
                      error="AOTPACK_RUN is not set to a built aotpack-run "
                            "(scripts/gpu-check build)")
            return
        refused = self.budget.refuse(ESTIMATE["aotpack-run"])
        if refused:
            return self._set(b.model, "aotpack-run", b.label, status="skipped", error=refused)
        log = self.logs / f"{b.model}-{b.label}-aotpack-run.log"
        bench = run_command([self.aotpack_run, str(b.bundle), "--bench", str(2 * self.args.reps),
                             "--warmup", "20"], env=self.env, limit_s=self.budget.limit(120),
                            log_path=log)
        if not bench.ok:
            return self.apply(b.model, "aotpack-run", b.label, bench)
        times = parse_bench(bench.log_tail)
        if not times:
            return self._set(b.model, "aotpack-run", b.label, status="error",
                             error=f"no median in aotpack-run --bench output: "
                                   f"{bench.log_tail[-300:]}")
        colds = [run_command([self.aotpack_run, str(b.bundle)], env=self.env, limit_s=60,
                             log_path=log) for _ in range(3)]
        cold = sorted(c.wall_s for c in colds if c.ok)
        self.log(f"{b.model} aotpack-run [{b.label}]: {times.get('median_ms')} ms, cold {cold}")
        self._set(b.model, "aotpack-run", b.label, status="ok", **times, **build,
                  cold_start_s=cold[len(cold) // 2] if cold else None, cold_start_runs=cold,
                  cold_start_note="wall time of `aotpack-run BUNDLE` (load + weights check + "
                                  "first run + output summary + exit), median of 3 processes",
                  notes=["latency: aotpack-run --bench (C++ launcher, CUDA graph)"])

    def aotpack_py_row(self, b, build: dict) -> None:
        task = {"task": "aotpack-py", "bundle": str(b.bundle), "ref_path": self.ref_path(b.model),
                "aotpack_run": self.aotpack_run, "reps": self.args.reps}
        res = self.task(f"{b.model}-{b.label}-aotpack-py", task, estimate="aotpack-py", cap_s=150)
        cold = self.task(f"{b.model}-{b.label}-aotpack-cold",
                         {"task": "aotpack-cold", "bundle": str(b.bundle)},
                         estimate="aotpack-cold", cap_s=90)
        mem = {}
        if cold.ok:
            mem = {"cold_start_s": cold.result["cold_start_s"],
                   "cold_start_note": "python + import aotpack.runtime (ctypes, no torch) + "
                                      "load + first run + outputs to host",
                   "device_mem_bytes": cold.result["device_mem_bytes"],
                   "peak_mem_bytes": cold.result["device_mem_bytes"],
                   "peak_mem_method": "cuMemGetInfo delta around load + first run in a fresh "
                                      "process without torch (weights, arena, io, CUDA graph)"}
        self.apply(b.model, "aotpack-py", b.label, res, **build, **mem)
        run_check = res.result.get("aotpack_run") or {} if res.ok else {}
        if "rel_err_vs_eager" in run_check and self.results.row(
                b.model, "aotpack-run", b.label)["status"] == "ok":
            self.results.update(b.model, "aotpack-run", b.label,
                                rel_err_vs_eager=run_check["rel_err_vs_eager"],
                                **{k: v for k, v in mem.items() if "mem" in k})

    def start_background(self) -> None:
        """CPU-only jobs first, in parallel: weights of bundles built with external weights
        (scripts/make-weights, sha256-checked by the runtime) and aotpack frontend probes of
        the models aotpack cannot build yet."""
        for b in self.bundles:
            wfile = (sm.bundle_manifest(b.bundle).get("external_weights") or {}).get("file")
            if wfile and not (b.dir / wfile).is_file():
                self.bg.start(f"weights-{b.model}-{b.label}",
                              [sys.executable, str(ROOT / "scripts" / "make-weights"), b.spec,
                               str(b.dir)], self.env, 240, self.logs / f"weights-{b.label}.log")
        for m in self.models:
            if m.tier == "extra" and not self.args.smoke:
                path, _ = write_task({"task": "frontend-probe", "spec": m.spec,
                                      "id": f"{m.name}-probe"}, self.work)
                self.bg.start(f"probe-{m.name}", [sys.executable, str(WORKER), str(path)],
                              self.env, 240,
                              self.logs / f"{m.name}-probe.log")

    def extra_model(self, m, aoti, recipe) -> None:
        """Models aotpack cannot build yet: the reason from the frontend probe, then the torch
        variants while time is left."""
        if f"probe-{m.name}" in self.bg.jobs:
            res = self.bg.wait(f"probe-{m.name}")
            path = result_path(self.work, f"{m.name}-probe")
            probe = json.loads(path.read_text()) if path.is_file() else {}
            reason = probe.get("unsupported") or probe.get("error") or res.error
            text = (f"unsupported: {reason}" if reason else
                    "missing: aotpack's frontend and passes accept it, but no bundle was given")
            for v in sm.AOTPACK_VARIANTS:
                self.results.update(m.name, v, "", error=text,
                                    status="unsupported" if reason else "missing")
        for v in ("eager", "compile"):
            self.torch_variant(m, v)
        if aoti:
            aoti.run_model(m, recipe)
        self.torch_variant(m, "compile-max-autotune")

    def finish(self) -> None:
        self.bg.kill_all()
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
    patterns = ["task-*.json", "result-*.json"] + ([] if keep_references else ["ref-*.pt"])
    for pattern in patterns:
        for f in work.glob(pattern):
            f.unlink()


def parse_bench(text: str) -> dict:
    """median/p10/p90 of `aotpack-run --bench` output."""
    m = re.search(r"median_ms=([\d.]+) p10_ms=([\d.]+) p90_ms=([\d.]+).*runs=(\d+)", text)
    if not m:
        return {}
    return {"median_ms": float(m[1]), "p10_ms": float(m[2]), "p90_ms": float(m[3]),
            "reps": int(m[4])}


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
    ap.add_argument("--aoti-all", action="store_true", help="try every AOTI recipe")
    ap.add_argument("--resume", default=None, help="an earlier results JSON: keep its measured "
                    "rows, ceilings and AOTI findings; measure what it skipped (into --out)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models, eager only")
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
