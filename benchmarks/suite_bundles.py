"""The aotpack rows of the suite: each carried bundle through the C++ launcher (`aotpack-run`)
and through the Python binding.

Latency runs in the GPU window (suite_schedule.py), while CPU-only background jobs may still
run: a bundle forward is one CUDA-graph launch, so the host enqueues far ahead of the GPU. The
binding's rows prove it per bundle (host_enqueue_ms well under median_ms, suite_measure.
gpu_bound); a row that fails the check is measured again in the quiet phase. The launcher does
less host work per forward than the binding, so the binding's check covers it too. Cold starts
(fresh processes: the launcher COLD_RUNS times, the binding without torch once) run in the
quiet phase, for one bundle per model: the bundles of a model share the launcher and the
weights file, so a second one would spend budget to measure the same thing again. Weights of
bundles built with --external-weights are made at the start by scripts/make-weights, once per
distinct weights file (a heuristic and a tuned bundle of a model share theirs: same names and
sha256 in both manifests) and hard-linked to the other bundles.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import suite_models as sm
from suite_runner import run_command
from suite_schedule import ESTIMATE, PRIORITY

# one process per cold start, as for the peers (eager, AOTI): three cost ~3 s per model of the
# quiet phase; single runs were within 0.45 s of the median of three (2026-11-30 runs)
COLD_RUNS = 1


def parse_bench(text: str) -> dict:
    """median/p10/p90 of `aotpack-run --bench` output."""
    m = re.search(r"median_ms=([\d.]+) p10_ms=([\d.]+) p90_ms=([\d.]+).*runs=(\d+)", text)
    if not m:
        return {}
    return {"median_ms": float(m[1]), "p10_ms": float(m[2]), "p90_ms": float(m[3]),
            "reps": int(m[4])}


def _safe(name: str) -> str:
    """A file name from a bundle label (labels may hold spaces: "aotpack tuned")."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def weights_key(b) -> tuple[str, str] | None:
    """(spec, names + sha256 of every weight) of a bundle with external weights; None when its
    weights are embedded."""
    manifest = sm.bundle_manifest(b.bundle)
    if not (manifest.get("external_weights") or {}).get("file"):
        return None
    sums = sorted((w["name"], w["sha256"]) for w in manifest.get("weights", []))
    return b.spec, json.dumps(sums)


def weights_file(b) -> Path:
    return b.dir / sm.bundle_manifest(b.bundle)["external_weights"]["file"]


class BundleSteps:
    def __init__(self, suite):
        self.s = suite
        self.maker: dict[tuple, object] = {}  # (model, label) → bundle whose job makes its file
        self.recheck: list = []  # bundles whose binding latency was host-bound in the window
        self.cold_chosen: dict[str, object] = {}  # model → bundle whose cold start was measured

    def plan(self) -> None:
        for b in self.s.bundles:
            for key, est in ((("bench", b.model, b.label), "aotpack-bench"),
                             (("py", b.model, b.label), "aotpack-py")):
                self.s.ledger.add(key, ESTIMATE[est], PRIORITY[est])
        for model in dict.fromkeys(b.model for b in self.s.bundles):  # one cold start each
            self.s.ledger.add(("cold", model), ESTIMATE["aotpack-cold"], PRIORITY["aotpack-cold"])
        if self.s.bundles:
            self.s.ledger.add(("py-start",), ESTIMATE["aotpack-py-start"], 0)

    # ---------------------------------------------------------------------------- weights
    def start_weights(self) -> None:
        """One scripts/make-weights per distinct weights file (CPU only, 2 threads)."""
        first: dict[tuple, object] = {}
        for b in self.s.bundles:
            key = weights_key(b)
            if key is None or weights_file(b).is_file() or self.done(b):
                continue
            if key in first:
                self.maker[(b.model, b.label)] = first[key]
                continue
            first[key] = self.maker[(b.model, b.label)] = b
            self.s.bg.start(self._job(b), [sys.executable, str(self.s.root / "scripts" /
                                                               "make-weights"), b.spec, str(b.dir)],
                            dict(self.s.env, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2"), 240,
                            self.s.logs / _safe(f"weights-{b.model}-{b.label}.log"))

    def done(self, b) -> bool:
        """Nothing left to measure of `b` (a --resume of a run that measured it all)."""
        status = {v: self.s.results.row(b.model, v, b.label)["status"]
                  for v in sm.AOTPACK_VARIANTS}
        return all(st != "pending" and (st != "ok" or self._cold_measured(b.model, v))
                   for v, st in status.items())

    def _cold_measured(self, model: str, variant: str) -> bool:
        return any(self.s.results.row(model, variant, x.label).get("cold_start_s")
                   for x in self.s.bundles if x.model == model)

    def cold_start_bundle(self, model: str):
        """The bundle of `model` whose cold start is measured: the first one found whose rows
        were measured (a bundle that failed cannot start), once chosen the same one."""
        if model in self.cold_chosen:
            return self.cold_chosen[model]
        mine = [b for b in self.s.bundles if b.model == model]
        ok = [b for b in mine if any(self.s.results.row(model, v, b.label)["status"] == "ok"
                                     for v in sm.AOTPACK_VARIANTS)]
        return (ok or mine)[0]

    @staticmethod
    def _job(b) -> str:
        return f"weights-{b.model}-{b.label}"

    def weights_ready(self, b) -> str | None:
        """None when the bundle's weights file is there (made, or linked from the bundle that
        shares it), else why not."""
        src = self.maker.get((b.model, b.label))
        if src is None:
            return None
        res = self.s.bg.wait(self._job(src), self.s.budget.deadline(self.s.ledger.pending(1)),
                             "the budget could not wait longer for these weights")
        if not res.ok:
            return f"scripts/make-weights failed: {res.error}: {res.log_tail[-300:]}"
        if src is not b and not weights_file(b).is_file():
            try:
                os.link(weights_file(src), weights_file(b))
            except OSError:
                shutil.copyfile(weights_file(src), weights_file(b))
        return None

    # ---------------------------------------------------------------------------- window
    def build_facts(self, b) -> dict:
        facts = sm.bundle_facts(b.bundle)
        return {"build_s": b.build.get("build_s"),
                "build_note": "aotpack build on the build host (build.json)" if b.build
                else "not recorded (put build.json with build_s next to the bundle)",
                "artifact_bytes": facts["artifact_bytes"],
                "artifact_note": "model.aotpack + external weights file",
                "launches": facts["steps"], "graph_launches": 1,
                "launches_method": "bundle manifest: kernel steps per forward, one CUDA graph"}

    def latency(self) -> None:
        """aotpack-run --bench per bundle, then every bundle through the binding in one
        process; the AOTI load check as soon as its package is there."""
        for b in self.s.bundles:
            self.s.ledger.drop(("bench", b.model, b.label))
            why = self.weights_ready(b)
            if why:
                for v in sm.AOTPACK_VARIANTS:
                    self.s.set_row(b.model, v, b.label, status="error", error=why)
                continue
            if "aotpack-run" in self.s.variants and self.s.pending(b.model, "aotpack-run",
                                                                   b.label):
                self.s.gate_gpu()
                self.bench(b)
            self.s.poll_aoti()
        todo = [b for b in self.s.bundles if self.s.pending(b.model, "aotpack-py", b.label)]
        if todo and "inputs" in self.s.bg.jobs:
            self.s.bg.wait("inputs")  # CPU only, short: the inputs eager will compare on
        self.s.gate_gpu()
        self.binding(todo, window=True)

    def bench(self, b, note: str = "in the GPU window") -> None:
        run = self.s.aotpack_run
        if not run or not Path(run).is_file():
            return self.s.set_row(b.model, "aotpack-run", b.label, status="error",
                                  error="AOTPACK_RUN is not set to a built aotpack-run "
                                        "(scripts/gpu-check build)")
        refused = self.s.budget.refuse(ESTIMATE["aotpack-bench"])
        if refused:
            return self.s.set_row(b.model, "aotpack-run", b.label, status="skipped", error=refused)
        log = self.s.logs / _safe(f"{b.model}-{b.label}-aotpack-run.log")
        res = run_command([run, str(b.bundle), "--bench", str(2 * self.s.args.reps), "--warmup",
                           "20"], env=self.s.env, limit_s=self.s.budget.limit(120), log_path=log)
        if not res.ok:
            return self.s.apply(b.model, "aotpack-run", b.label, res)
        times = parse_bench(res.log_tail)
        if not times:
            return self.s.set_row(b.model, "aotpack-run", b.label, status="error",
                                  error=f"no median in aotpack-run --bench output: "
                                        f"{res.log_tail[-300:]}")
        self.s.log(f"{b.model} aotpack-run [{b.label}]: {times['median_ms']} ms")
        self.s.set_row(b.model, "aotpack-run", b.label, status="ok", wall_s=res.wall_s, **times,
                       **self.build_facts(b),
                       notes=[f"latency: aotpack-run --bench (C++ launcher, CUDA graph), "
                              f"{note}"])

    def binding(self, bundles: list, window: bool) -> None:
        """One process for `bundles` (a crash or timeout fails the bundle it was on; the rest
        go on in a fresh process)."""
        while bundles:
            keys = [("py-start",)] + [("py", b.model, b.label) for b in bundles]
            for k in keys:  # again after a crash: the retry costs its own start
                self.s.ledger.add(k, ESTIMATE["aotpack-py-start" if len(k) == 1 else
                                              "aotpack-py"], 0)
            refused = self.s.ledger.refuse(keys)
            if refused:
                for b in bundles:
                    self.s.set_row(b.model, "aotpack-py", b.label, status="skipped", error=refused)
                return
            for k in keys:
                self.s.ledger.drop(k)
            bundles = self._binding_process(bundles, window)

    def _binding_process(self, bundles: list, window: bool) -> list:
        items = [{"key": f"{b.model}|{b.label}", "bundle": str(b.bundle),
                  "ref_path": self.s.ref_path(b.model), "inputs_path": self.s.inputs_path(b.model),
                  "outputs_path": str(self.s.work / _safe(f"outs-{b.model}-{b.label}.pt"))}
                 for b in bundles]
        task = {"task": "aotpack-py", "bundles": items, "aotpack_run": self.s.aotpack_run,
                "reps": self.s.args.reps}
        est = ESTIMATE["aotpack-py-start"] + ESTIMATE["aotpack-py"] * len(items)
        res = self.s.task("aotpack-py" + ("" if window else "-quiet"), task, estimate=est,
                          cap_s=60 + 30 * len(items))
        done = (res.result or {}).get("bundles") or {}
        running = (res.result or {}).get("running")
        rest = []
        for b, item in zip(bundles, items):
            one = done.get(item["key"])
            if one is not None:
                self._binding_row(b, item, one, window)
            elif running == item["key"] or (not done and not running):
                self.s.apply(b.model, "aotpack-py", b.label, res)  # it died on this one
            else:
                rest.append(b)
        return rest

    def _binding_row(self, b, item: dict, one: dict, window: bool) -> None:
        if one.get("error"):
            return self.s.set_row(b.model, "aotpack-py", b.label, status="error",
                                  error=one["error"])
        launcher = one.pop("aotpack_run", None) or {}
        for variant, path in (("aotpack-py", one.get("outputs_saved")),
                              ("aotpack-run", launcher.get("outputs_saved"))):
            if path:
                self.s.compare.setdefault(b.model, {})[f"{variant}|{b.label}"] = path
        if window and one.get("gpu_bound") is False:
            self.recheck.append(b)
            # the quiet phase's binding process and launcher run again: kept from now on
            self.s.ledger.add(("recheck-start",), ESTIMATE["aotpack-py-start"], 0)
            self.s.ledger.add(("recheck", b.model, b.label), ESTIMATE["aotpack-recheck"], 0)
            one.setdefault("notes", []).append(
                f"host-bound in the GPU window (enqueue {one.get('host_enqueue_ms')} ms per "
                f"forward vs {one.get('median_ms')} ms): measured again in the quiet phase")
        one["details"] = {"aotpack_run": launcher, "window": window}
        self.s.apply_fields(b.model, "aotpack-py", b.label, one, **self.build_facts(b))
        if "rel_err_vs_eager" in launcher:
            self.s.set_row(b.model, "aotpack-run", b.label,
                           rel_err_vs_eager=launcher["rel_err_vs_eager"])

    # ------------------------------------------------------------------------ quiet phase
    def cold_starts(self) -> None:
        if self.recheck:
            todo, self.recheck = self.recheck, []
            for key in [("recheck-start",)] + [("recheck", b.model, b.label) for b in todo]:
                self.s.ledger.drop(key)
            self.binding(todo, window=False)
            for b in todo:  # the launcher too: the window did not prove it GPU-bound then
                if self.s.results.row(b.model, "aotpack-run", b.label)["status"] == "ok":
                    self.bench(b, note="measured again in the quiet phase (the binding was "
                                       "host-bound in the window)")
        for model in dict.fromkeys(b.model for b in self.s.bundles):
            chosen = self.cold_chosen[model] = self.cold_start_bundle(model)
            self.cold(chosen)
            for b in self.s.bundles:
                if b.model == model and b is not chosen:
                    self._cold_measured_on(b, chosen)

    def _cold_measured_on(self, b, chosen) -> None:
        """`b`'s measured rows say which bundle of their model has the cold start."""
        for v in sm.AOTPACK_VARIANTS:
            row = self.s.results.row(b.model, v, b.label)
            if (row["status"] == "ok" and not row.get("cold_start_s")
                    and self.s.results.row(b.model, v, chosen.label).get("cold_start_s")):
                self.s.set_row(b.model, v, b.label, cold_start_note=(
                    f"measured on the {chosen.label!r} bundle of this model (same launcher, "
                    "same weights file); its device memory too"))

    def cold(self, b) -> None:
        key = ("cold", b.model)
        refused = self.s.ledger.refuse([key])
        self.s.ledger.drop(key)
        if refused:
            for v in sm.AOTPACK_VARIANTS:
                self.s.set_row(b.model, v, b.label, cold_start_note=f"not measured: {refused}")
            return
        for variant, measure in (("aotpack-run", self._launcher_cold),
                                 ("aotpack-py", self._binding_cold)):
            row = self.s.results.row(b.model, variant, b.label)
            if row["status"] == "ok" and not row.get("cold_start_s"):  # --resume: kept
                measure(b)

    def _launcher_cold(self, b) -> None:
        log = self.s.logs / _safe(f"{b.model}-{b.label}-aotpack-run-cold.log")
        runs = [run_command([self.s.aotpack_run, str(b.bundle)], env=self.s.env,
                            limit_s=self.s.budget.limit(60), log_path=log)
                for _ in range(COLD_RUNS)]
        cold = sorted(r.wall_s for r in runs if r.ok)
        self.s.set_row(b.model, "aotpack-run", b.label,
                       cold_start_s=cold[len(cold) // 2] if cold else None, cold_start_runs=cold,
                       cold_start_note="wall time of `aotpack-run BUNDLE` (load + weights check "
                                       f"+ first run + output summary + exit), median of "
                                       f"{len(cold)} process(es)" if cold else
                       f"not measured: {runs[-1].error}")

    def _binding_cold(self, b) -> None:
        cold = self.s.task(f"{b.model}-{b.label}-aotpack-cold",
                           {"task": "aotpack-cold", "bundle": str(b.bundle)},
                           estimate="aotpack-cold", cap_s=90)
        if not cold.ok:
            return self.s.set_row(b.model, "aotpack-py", b.label,
                                  cold_start_note=f"not measured: {cold.error}")
        mem = {"device_mem_bytes": cold.result["device_mem_bytes"],
               "peak_mem_bytes": cold.result["device_mem_bytes"],
               "peak_mem_method": "cuMemGetInfo delta around load + first run in a fresh "
                                  "process without torch (weights, arena, io, CUDA graph)"}
        self.s.set_row(b.model, "aotpack-py", b.label, cold_start_s=cold.result["cold_start_s"],
                       cold_start_note="python + import aotpack.runtime (ctypes, no torch) + "
                                       "load + first run + outputs to host", **mem)
        if self.s.results.row(b.model, "aotpack-run", b.label)["status"] == "ok":
            self.s.set_row(b.model, "aotpack-run", b.label, **mem)
