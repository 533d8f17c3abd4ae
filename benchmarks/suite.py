"""Side-by-side benchmark suite: aotpack bundles against eager PyTorch, torch.compile (default
and max-autotune) and AOTInductor. Every measurement runs in a fresh child process under its
own timeout, one after the other; nothing runs beside it.

    python benchmarks/suite.py [--only mlp-decode,llama-decode] [--variants eager,aotpack-run]
    python benchmarks/suite.py --merge benchmarks/results/X.json --only vit-b16   # one document
    python benchmarks/suite.py --dry-run      # the rows and each child's timeout, nothing run
    python benchmarks/suite.py --smoke        # CPU, tiny models, eager only: checks plumbing

Per model, in this order: eager (cold start, FLOPs, the reference every other row is compared
with), torch.compile, max-autotune (+ its warm-cache start), AOTInductor (compile, then a run
process), and per carried bundle aotpack-run (the C++ launcher) and aotpack-py (the binding,
plus a cold start without torch). The ceilings (bf16 GEMM, device copy) come first. Each row:
median/p10/p90 latency (timing.py), TFLOP/s or GB/s against the ceilings, build time, artifact
size, GPU memory, kernel launches, cold start and the error against eager; a variant that fails
is a row with its error (suite_results.py). The JSON is rewritten after every row;
benchmarks/report.py turns it into docs/performance.md's table and a chart (SUITE.md).
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import suite_aoti  # noqa: E402
import suite_models as sm  # noqa: E402
from suite_aotpack import parse_bench, weights_file, weights_key  # noqa: E402,F401
from suite_proc import Child, run_command  # noqa: E402
from suite_results import ROW_FIELDS, Results  # noqa: E402

VARIANTS = (*sm.TORCH_VARIANTS, *sm.AOTPACK_VARIANTS)
WORKER = HERE / "suite_worker.py"
# Seconds each child may run (--timeout-s caps them all): generous multiples of the H200 runs.
TIMEOUT_S = {"ceilings": 90, "eager": 120, "compile": 240, "compile-max-autotune": 360,
             "warm-start": 180, "aoti-compile": 300, "aoti-run": 180, "aotpack-run": 120,
             "aotpack-py": 120, "aotpack-cold": 90, "weights": 300, "frontend-probe": 240}
NOTES = {
    "eager": {"cold_start_note": "cold start: python + import torch + model built from its seed "
                                 "+ first forward + outputs to host (first thing its process "
                                 "computes)"},
    "compile": {"build_note": "build_s: first call on an empty Inductor/Triton cache, in a "
                              "fresh process, after a warm-up compile that pays the one-time "
                              "imports (compiler_warmup_s in details)"},
}
NOTES["compile-max-autotune"] = NOTES["compile"]
METHOD = {
    "timing": "Median of CUDA-event intervals of forwards issued back to back after warm-up "
              "(benchmarks/timing.py; `aotpack-run --bench` for the launcher); fresh random "
              "inputs; every variant in a fresh process of its own, one after the other, cold "
              "Inductor caches before each compile.",
    "cold_start": "aoti_load_package, whose CPU ISA check takes most of it on torch 2.11 (59 s "
                  "of a 63 s load on the H200; its C++ loader loads a package in 0.33 s, "
                  "benchmarks/results/2026-11-30-h200-aoti-load-probe.json)",
}


class Stopped(Exception):
    """SIGTERM/SIGINT: stop measuring, keep what was measured."""


# ---------------------------------------------------------------------------------- suite

class Suite:
    def __init__(self, args):
        self.args = args
        self.device = "cpu" if args.smoke else "cuda"
        self.work = Path(args.work).resolve()
        self.logs = self.work / "logs"
        if not args.dry_run:
            clean_work(self.work, keep_references=bool(args.merge))
            self.logs.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.budget_s if args.budget_s else None
        self.bundles, warnings = self._bundles()
        self.models = sm.select_models(args.only, args.smoke, {b.model for b in self.bundles})
        self.variants = tuple(args.variants or (("eager",) if args.smoke else VARIANTS))
        self.results = Results(None if args.dry_run else Path(args.out), self._meta())
        if args.merge:
            self.results.merge(Path(args.merge), self._meta())
        for w in warnings:
            self.results.warn(w)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE),
                                                    os.environ.get("PYTHONPATH", "")]))
        self.aotpack_run = os.environ.get("AOTPACK_RUN") or None

    def _bundles(self):
        if self.args.smoke:
            return [], []
        if self.args.bundles_json:
            return sm.bundles_from_manifest(Path(self.args.bundles_json), list(sm.MODELS))
        dirs = [Path(p) for pat in self.args.bundle_dirs for p in glob.glob(pat)]
        return sm.discover_bundles([d for d in dirs if d.is_dir()], list(sm.MODELS))

    def _meta(self) -> dict:
        return {"date": datetime.date.today().isoformat(), "commit": self.args.commit,
                "command": " ".join(sys.argv), "smoke": self.args.smoke, "method": METHOD,
                "host": {"python": platform.python_version(), "machine": platform.machine(),
                         "cpus": os.cpu_count()},
                "aotpack_run": os.environ.get("AOTPACK_RUN"),
                "aotpack_lib": os.environ.get("AOTPACK_LIB")}

    def log(self, msg: str) -> None:
        print(f"[suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def ref_path(self, model: str) -> str:
        return str(self.work / f"ref-{model}.pt")

    # ------------------------------------------------------------------------ rows
    def plan(self) -> list[tuple[str, str, str]]:
        """Every row of this run exists from the start (pending), so a killed run still says
        what it did not reach. Without --merge, the variants not chosen are rows that say so."""
        planned = []
        for m in self.models:
            self.results.doc["models"].setdefault(m.name, {}).update(
                spec=m.spec, bound=m.bound, tier=m.tier, note=m.note)
            labels = [b.label for b in self.bundles if b.model == m.name] or [""]
            for v in VARIANTS:
                for label in labels if v in sm.AOTPACK_VARIANTS else [""]:
                    if v in self.variants:
                        self.results.reset(m.name, v, label)
                        planned.append((m.name, v, label))
                    elif not self.args.merge:
                        self.results.reset(m.name, v, label)
                        self.set_row(m.name, v, label, status="skipped", error=(
                            "--smoke runs eager only (choose more with --variants)"
                            if self.args.smoke and not self.args.variants
                            else "not selected (--variants)"))
        self.results.write()
        return planned

    def set_row(self, model: str, variant: str, label: str, **fields) -> None:
        self.results.update(model, variant, label, **fields)

    def apply(self, model: str, variant: str, label: str, res: Child, *,
              details: dict | None = None, **facts) -> None:
        """A child's outcome into its row: measured fields on top, the rest under "details";
        `facts` (what the suite knows about the row) win over the child's."""
        if not res.ok:  # of the facts, only the notes say something about a failure
            more = {"details": details} if details else {}
            more.update({"notes": facts["notes"]} if "notes" in facts else {})
            return self.set_row(model, variant, label, status=res.status, error=res.error,
                                wall_s=res.wall_s, **more,
                                log_tail=res.log_tail[-1500:] if res.status != "skipped" else None)
        fields = {k: v for k, v in res.result.items() if k in ROW_FIELDS}
        extra = {k: v for k, v in res.result.items() if k not in fields and k != "notes"}
        notes = [*res.result.get("notes", []), *facts.pop("notes", [])]
        self.set_row(model, variant, label, status="ok", error=None, wall_s=res.wall_s,
                     **{**fields, **facts}, notes=notes, details={**extra, **(details or {})})

    def child(self, tid: str, task: dict, kind: str, env: dict | None = None,
              cmd: list[str] | None = None) -> Child:
        """One child process (a suite_worker task, or `cmd`) under the timeout of `kind`,
        cut to what --budget-s has left."""
        timeout = min(TIMEOUT_S[kind], self.args.timeout_s or float("inf"))
        if self.deadline is not None:
            left = self.deadline - time.monotonic() - 5  # kept for writing the results
            if left < 10:
                return Child("skipped", error=f"skipped: --budget-s {self.args.budget_s:.0f} "
                                              "ran out before this row")
            timeout = min(timeout, left)
        tid = re.sub(r"[^A-Za-z0-9_.+-]", "_", tid)
        result = self.work / f"result-{tid}.json"
        result.unlink(missing_ok=True)
        if cmd is None:
            path = self.work / f"task-{tid}.json"
            path.write_text(json.dumps(dict(task, id=tid, result_path=str(result))))
            cmd = [sys.executable, "-X", "faulthandler", str(WORKER), str(path)]
        self.log(f"{tid} ...")
        res = run_command(cmd, env={**self.env, **self.cache_env(tid), **(env or {})},
                          timeout_s=timeout, log_path=self.logs / f"{tid}.log",
                          result_path=result)
        self.log(f"{tid}: {res.status} in {res.wall_s:.1f}s" + (f" ({res.error})" if res.error
                                                                else ""))
        return res

    def cache_env(self, tid: str) -> dict:
        """A private, empty Inductor/Triton cache for every child: no child warms another's."""
        d = self.work / "cache" / tid
        return {"TORCHINDUCTOR_CACHE_DIR": str(d), "TRITON_CACHE_DIR": str(d / "triton")}

    def task(self, m, kind: str, **more) -> dict:
        return {"task": kind, "spec": m.spec, "device": self.device,
                "ref_path": self.ref_path(m.name), "reps": self.args.reps,
                "flush_l2": self.args.flush_l2, **more}

    # ----------------------------------------------------------------------- the run
    def run(self) -> None:
        self.plan()
        if not self.args.smoke and not self.results.doc["ceilings"].get("gemm_tflops"):
            res = self.child("ceilings", {"task": "ceilings"}, "ceilings")
            self.results.doc["ceilings"] = res.result if res.ok else {"status": res.status,
                                                                      "error": res.error}
            self.results.write()
        for m in self.models:
            for v in sm.TORCH_VARIANTS[:3]:
                if v in self.variants:
                    self.torch_row(m, v)
            if "aoti" in self.variants:
                self.aoti_row(m)
            bundles = [b for b in self.bundles if b.model == m.name]
            for b in bundles:
                self.bundle_rows(b)
            if not bundles:
                self.no_bundle(m)

    def torch_row(self, m, v: str) -> None:
        more = {"cache_root": str(self.work / "cache" / f"{m.name}-{v}-timed")} \
            if v != "eager" else {}
        res = self.child(f"{m.name}-{v}", self.task(m, v, variant=v, **more), v)
        costs = res.result.pop("costs", None) if res.ok else None
        if costs:
            self.results.doc["models"][m.name].update(costs)
        self.apply(m.name, v, "", res, **NOTES[v])
        if v == "compile-max-autotune" and res.ok and self.args.warm_start:
            self.warm_start(m, v, res.result["cache_dir"])

    def warm_start(self, m, v: str, cache: str) -> None:
        """Fresh process on the cache the compile left: python + import torch + model build +
        torch.compile (cache hits) + first output."""
        env = {"TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": str(Path(cache, "triton"))}
        res = self.child(f"{m.name}-{v}-warm", self.task(m, "warm-start", variant=v),
                         "warm-start", env=env)
        self.set_row(m.name, v, "", **(
            {"cold_start_s": res.result.get("cold_start_s"),
             "cold_start_note": "fresh process, warm Inductor cache: python + import torch + "
                                "model build + torch.compile + first forward"}
            if res.ok else {"cold_start_note": f"warm-cache start not measured: {res.error}"}))

    def aoti_row(self, m) -> None:
        """The package compiled in one child (the exclude-libs recipe: suite_aoti.py), loaded
        and run in another."""
        pkg = self.work / "aoti" / f"{m.name}.pt2"
        tmp = self.work / "cache" / f"{m.name}-aoti-tmp"
        for d in (pkg.parent, tmp):
            d.mkdir(parents=True, exist_ok=True)
        env = dict(self.aoti_env(), TMPDIR=str(tmp))  # Inductor's precompiled header: cold too
        c = self.child(f"{m.name}-aoti-compile", self.task(m, "aoti-compile", package=str(pkg)),
                       "aoti-compile", env=env)
        if not c.ok:
            return self.apply(m.name, "aoti", "", c, notes=["failed in its compile (torch.export "
                                                            "+ aoti_compile_and_package)"])
        r = self.child(f"{m.name}-aoti-run", self.task(m, "aoti-run", package=str(pkg)),
                       "aoti-run")
        facts = c.result
        self.apply(m.name, "aoti", "", r, details={"compile": facts},
                   build_s=facts["build_s"],
                   build_note="torch.export + aoti_compile_and_package, cold Inductor cache and "
                              "precompiled header, alone (all cores)",
                   artifact_bytes=facts["artifact_bytes"],
                   artifact_note=".pt2 package (weights " + (
                       "in a blob file inside it)" if facts["weights_outside_so"]
                       else "inside the .so)"),
                   cold_start_note="fresh process: python + import torch + aoti_load_package + "
                                   "first run + outputs to host",
                   notes=[f"recipe {self.results.doc['aoti']['recipe']}"])

    def aoti_env(self) -> dict:
        """CXX = the exclude-libs g++ wrapper (made once; without a g++ the default recipe)."""
        aoti = self.results.doc["aoti"]
        if not aoti.get("toolchain"):
            facts = aoti["toolchain"] = suite_aoti.toolchain_facts()
            aoti["recipe"] = suite_aoti.RECIPE if facts.get("default_gxx") else \
                "default (no g++ on PATH for the exclude-libs wrapper)"
            if facts.get("default_gxx"):
                facts["wrapper"] = str(suite_aoti.make_wrapper(
                    self.work, facts.get("realpath") or facts["default_gxx"]))
        wrapper = aoti["toolchain"].get("wrapper")
        return {"CXX": wrapper} if wrapper else {}

    # ---------------------------------------------------------------------- bundles
    def bundle_rows(self, b) -> None:
        chosen = [v for v in sm.AOTPACK_VARIANTS if v in self.variants]
        why = self.weights_ready(b) if chosen else None
        if why:
            for v in chosen:
                self.set_row(b.model, v, b.label, status="error", error=why)
            return
        if "aotpack-run" in chosen:
            self.launcher_row(b)
        if "aotpack-py" in chosen:
            self.binding_row(b)

    def build_facts(self, b) -> dict:
        facts = sm.bundle_facts(b.bundle)
        return {"build_s": b.build.get("build_s"),
                "build_note": "aotpack build on the build host (build.json)" if b.build
                else "not recorded (put build.json with build_s next to the bundle)",
                "artifact_bytes": facts["artifact_bytes"],
                "artifact_note": "model.aotpack + external weights file",
                "launches": facts["steps"], "graph_launches": 1,
                "launches_method": "bundle manifest: kernel steps per forward, one CUDA graph"}

    def launcher_row(self, b) -> None:
        if not self.aotpack_run or not Path(self.aotpack_run).is_file():
            return self.set_row(b.model, "aotpack-run", b.label, status="error",
                                error="AOTPACK_RUN is not set to a built aotpack-run "
                                      "(scripts/gpu-check build)")
        res = self.child(f"{b.model}-{b.label}-aotpack-run", {
            "task": "aotpack-run", "bundle": str(b.bundle), "aotpack_run": self.aotpack_run,
            "ref_path": self.ref_path(b.model), "reps": self.args.reps}, "aotpack-run")
        cold = res.result.get("cold_start_note") or (
            "wall time of `aotpack-run BUNDLE` (load + weights check + first run + output "
            "summary + exit), one process")
        self.apply(b.model, "aotpack-run", b.label, res, **self.build_facts(b),
                   cold_start_note=cold,
                   notes=["latency: aotpack-run --bench (C++ launcher, CUDA graph)"])

    def binding_row(self, b) -> None:
        task = {"task": "aotpack-py", "bundle": str(b.bundle), "ref_path": self.ref_path(b.model),
                "reps": self.args.reps, "flush_l2": self.args.flush_l2}
        res = self.child(f"{b.model}-{b.label}-aotpack-py", task, "aotpack-py")
        self.apply(b.model, "aotpack-py", b.label, res, **self.build_facts(b))
        if not res.ok:
            return
        cold = self.child(f"{b.model}-{b.label}-aotpack-cold",
                          {"task": "aotpack-cold", "bundle": str(b.bundle)}, "aotpack-cold")
        if not cold.ok:
            return self.set_row(b.model, "aotpack-py", b.label,
                                cold_start_note=f"not measured: {cold.error}")
        mem = {"device_mem_bytes": cold.result["device_mem_bytes"],
               "peak_mem_bytes": cold.result["device_mem_bytes"],
               "peak_mem_method": "cuMemGetInfo delta around load + first run in a fresh "
                                  "process without torch (weights, arena, io, CUDA graph)"}
        self.set_row(b.model, "aotpack-py", b.label, cold_start_s=cold.result["cold_start_s"],
                     cold_start_note="python + import aotpack.runtime (ctypes, no torch) + "
                                     "load + first run + outputs to host", **mem)
        if self.results.row(b.model, "aotpack-run", b.label)["status"] == "ok":
            self.set_row(b.model, "aotpack-run", b.label, **mem)  # same launcher library

    def weights_ready(self, b) -> str | None:
        """None when the bundle's external weights file is there: made here from the seeded
        factory (scripts/make-weights), or linked from a bundle with the same weights."""
        key = weights_key(b)
        if key is None or weights_file(b).is_file():
            return None
        donor = next((x for x in self.bundles if x is not b and weights_key(x) == key
                      and weights_file(x).is_file()), None)
        if donor is not None:
            try:
                os.link(weights_file(donor), weights_file(b))
            except OSError:
                shutil.copyfile(weights_file(donor), weights_file(b))
            return None
        res = self.child(f"weights-{b.model}-{b.label}", {}, "weights", cmd=[
            sys.executable, str(ROOT / "scripts" / "make-weights"), b.spec, str(b.dir)])
        return None if res.ok else f"scripts/make-weights failed: {res.error}"

    def no_bundle(self, m) -> None:
        """The aotpack rows of a model without a bundle: why (for an extra model, whether
        aotpack's frontend and passes take it at all)."""
        chosen = [v for v in sm.AOTPACK_VARIANTS if v in self.variants]
        if not chosen:
            return
        if self.args.smoke:
            fields = {"status": "skipped", "error": "--smoke has no bundles"}
        elif m.tier == "core":
            fields = {"status": "missing",
                      "error": f"no bundle with spec.txt = {m.spec} under the bundle folders"}
        else:
            fields = self.frontend_probe(m)
        for v in chosen:
            self.set_row(m.name, v, "", **fields)

    def frontend_probe(self, m) -> dict:
        res = self.child(f"{m.name}-frontend-probe",
                         {"task": "frontend-probe", "spec": m.spec}, "frontend-probe",
                         env={"CUDA_VISIBLE_DEVICES": ""})
        if not res.ok or res.result.get("probe_error"):
            return {"status": "error", "error": "frontend probe: " + (
                res.result.get("probe_error") or f"{res.status}: {res.error}")}
        if res.result.get("unsupported"):
            return {"status": "unsupported", "error": f"unsupported: {res.result['unsupported']}"}
        return {"status": "missing",
                "error": "missing: aotpack's frontend and passes accept it, but no bundle was given"}

    def finish(self) -> None:
        self.results.finish_pending("skipped: not run")
        if self.args.logs_tar:
            with tarfile.open(self.args.logs_tar, "w:gz") as tar:
                tar.add(self.logs, arcname="suite-logs")


def clean_work(work: Path, keep_references: bool) -> None:
    """A machine kept warm between calls still has the last run's folder: its caches would make
    "cold" compiles warm, so they go; eager's references stay for --merge."""
    for sub in ("cache", "aoti", "logs", "cxx-exclude-libs"):
        shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    for pattern in ["task-*.json", "result-*.json"] + ([] if keep_references else ["ref-*.pt"]):
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
    names = lambda s: s.split(",")  # noqa: E731
    ap.add_argument("--only", "--models", type=names, default=None, metavar="MODEL,...",
                    help="these models (default: the core ones and every model a bundle was "
                         f"given for); known: {','.join(m.name for m in sm.MODELS)}")
    ap.add_argument("--variants", type=names, default=None, metavar="VARIANT,...",
                    help=f"default: all of {','.join(VARIANTS)} (--smoke: eager)")
    ap.add_argument("--bundle-dirs", nargs="*", default=[".gpu/*/"])
    ap.add_argument("--bundles-json", default=None, help="JSON list of {model, label, dir}")
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="cap on every child's timeout (defaults per kind: suite.TIMEOUT_S)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting children after this many seconds (rows left: skipped)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--flush-l2", action="store_true",
                    help="flush the L2 before every timed forward (timing.bench; the launcher "
                         "does not)")
    ap.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                    help="leave out max-autotune's warm-cache start")
    ap.add_argument("--work", default="/tmp/aotpack-suite")
    ap.add_argument("--out", default=None, help="results JSON (default: $OUT or "
                    "benchmarks/results, named <date>-<commit>.json)")
    ap.add_argument("--merge", default=None, metavar="JSON",
                    help="start from this earlier results document; this run's rows replace "
                         "its rows (one document over several GPU calls)")
    ap.add_argument("--logs-tar", default=None, help="write every child's log into this .tar.gz")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the rows and timeouts only")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, tiny models; eager only unless --variants says more")
    args = ap.parse_args(argv)
    unknown = set(args.variants or ()) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {','.join(VARIANTS)}")
    if args.smoke:
        args.reps = min(args.reps, 20)
    args.commit = args.commit or os.environ.get("SUITE_COMMIT") or default_commit()
    if args.out is None:
        out = os.environ.get("OUT")
        folder = Path(out) if out else ROOT / "benchmarks" / "results"
        args.out = str(folder / f"{datetime.date.today().isoformat()}-{args.commit}.json")
    return args


def dry_run(suite: Suite) -> int:
    for model, variant, label in suite.plan():
        kinds = {"aoti": "aoti-compile + aoti-run", "aotpack-py": "aotpack-py + aotpack-cold",
                 "compile-max-autotune": "compile-max-autotune + warm-start"}
        print(f"{model:14} {variant:22} {label:20} {kinds.get(variant, variant)}")
    print(f"timeouts (s): {TIMEOUT_S}; results would go to {suite.args.out}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    suite = Suite(args)
    if args.dry_run:
        return dry_run(suite)

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
    counts: dict[str, int] = {}
    for r in suite.results.rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    suite.log(f"rows: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
