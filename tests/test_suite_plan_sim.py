"""The whole suite run (benchmarks/suite.py Suite.run) on simulated workers: every worker
process, `aotpack-run` call and background job is replaced by a canned result that advances the
suite's clock by what the H200 took (benchmarks/results/2026-11-30-8c98e0a.json, split as in
suite_schedule.py). Checks the order of the phases, that a 450 s budget holds every core row,
and that a short budget cuts max-autotune first, with a reason, never leaving a gap."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import suite  # noqa: E402
import suite_bundles  # noqa: E402
from suite_runner import TaskResult  # noqa: E402

CORE = ("mlp-prefill", "mlp-decode", "llama-prefill", "llama-decode")
TORCH_S = {"start": 7, "eager": 4, "compile": 10, "compile-max-autotune": 25}
TIMED = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "reps": 100}


class Sim:
    """Canned workers; `log` is the order in which the suite ran things."""

    def __init__(self, s, gpu_phase_s=28.0, compiles_end_s=105.0):
        self.s, self.log = s, []
        self.gpu_phase_s, self.compiles_end_s = gpu_phase_s, compiles_end_s
        self.go_at_first_bench = None

    def advance(self, seconds: float) -> None:
        self.s.budget.t0 -= seconds  # the suite's clock moves on

    def task(self, tid, task, *, estimate, cap_s, env=None):
        kind = task["task"]
        self.log.append(kind if kind != "torch" else f"torch {'+'.join(task['variants'])}")
        est = suite.ESTIMATE[estimate] if isinstance(estimate, str) else estimate
        refused = self.s.budget.refuse(est)
        if refused:
            return TaskResult("skipped", None, 0.0, {}, refused)
        seconds, result = getattr(self, kind.replace("-", "_"))(task)
        self.advance(seconds)
        return TaskResult("ok", 0, seconds, result, None, "")

    def ceilings(self, task):
        return 10, {"gemm_tflops": 777.0, "copy_gbps": 4260.0, "gpu": "sim"}

    def aotpack_py(self, task):
        done = {i["key"]: dict(TIMED, gpu_bound=True) for i in task["bundles"]}
        return 5 + 3 * len(done), {"bundles": done, "running": None}

    def aoti_run(self, task):
        return (10, {"cold_start_s": 9.0}) if task["check_only"] else (11, dict(TIMED))

    def torch(self, task):
        vs = task["variants"]
        done = {v: dict(TIMED, build_s=1.0, variant_s=TORCH_S[v]) for v in vs}
        return TORCH_S["start"] + sum(TORCH_S[v] for v in vs), {"variants": done,
                                                                 "running": None}

    def torch_warm(self, task):
        return 28, {"cold_start_s": 27.0}

    def aotpack_cold(self, task):
        return 2.5, {"cold_start_s": 1.5, "device_mem_bytes": 1}

    def run_command(self, cmd, *, env, limit_s, log_path, result_path=None):
        if "--bench" in cmd:
            self.log.append("bench")
            if self.go_at_first_bench is None:
                self.go_at_first_bench = self.s.gpu_go.exists()
            self.advance(3)
            return TaskResult("ok", 0, 3.0, {}, None, "median_ms=1.0 p10_ms=0.9 p90_ms=1.1 "
                                                      "min_ms=0.8 runs=200")
        self.advance(1.5)  # a cold start of the launcher
        return TaskResult("ok", 0, 1.5, {}, None, "")

    def bg_start(self, real_start):
        """Background jobs finish at once; their result files say what the real ones would."""
        def start(name, cmd, env, limit_s, log_path, **kw):
            task = json.loads(Path(cmd[-1]).read_text()) if cmd[-1].endswith(".json") else {}
            if task.get("task") == "aoti-compile":
                Path(task["result_path"]).write_text(json.dumps({
                    "build_s": 80.0, "package": task["package"], "artifact_bytes": 9,
                    "configs_applied": task["configs"],
                    "package_facts": {"weights_outside_so": True}}))
            if task.get("task") == "frontend-probe":
                Path(task["result_path"]).write_text(json.dumps({"models": {
                    m["name"]: {"unsupported": "UnsupportedOpError: aten.embedding"}
                    for m in task["models"]}}))
            real_start(name, [sys.executable, "-c", "pass"], env, limit_s, log_path, **kw)
        return start

    def waits(self):
        real_gpu, real_all = self.s.bg.wait_gpu_free, self.s.bg.wait_all
        first = [True]

        def wait_gpu_free(deadline=None, why=""):
            if first[0]:  # the AOTI compiles' GPU phase after the go
                first[0] = False
                self.advance(self.gpu_phase_s)
            return real_gpu(None, why)

        def wait_all(deadline=None, why=""):
            self.advance(max(0.0, self.compiles_end_s - self.s.budget.elapsed()))
            return real_all(None, why)

        self.s.bg.wait_gpu_free, self.s.bg.wait_all = wait_gpu_free, wait_all


def simulate(tmp_path, monkeypatch, budget: float) -> tuple[suite.Suite, Sim]:
    from handmade_bundle import write_handmade

    items = []
    for model in CORE:
        for label in ("heuristic", "tuned"):
            d = tmp_path / f"{model}-{label}"
            d.mkdir()
            write_handmade(d / "model.aotpack")
            items.append({"model": model, "label": label, "dir": d.name})
    (tmp_path / "bundles.json").write_text(json.dumps(items))
    monkeypatch.setenv("AOTPACK_RUN", sys.executable)  # a file that exists
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--bundles-json", str(tmp_path / "bundles.json"), "--commit", "sim",
                             "--budget-s", str(budget)])
    s = suite.Suite(args)
    sim = Sim(s)
    s.task = sim.task
    monkeypatch.setattr(suite_bundles, "run_command", sim.run_command)
    s.bg.start = sim.bg_start(s.bg.start)
    sim.waits()
    s.run()
    s.finish()
    return s, sim


def rows(s) -> dict:
    return {(r["model"], r["variant"], r["label"]): r for r in s.results.rows}


def test_a_450_s_run_keeps_every_core_row_but_max_autotune(tmp_path, monkeypatch):
    """With the AOTI loads measured on the H200 (39-51 s each, 2026-11-30-18d5c7a.json) 450 s
    holds every core row of priority 0-1; max-autotune rows that do not fit say why."""
    s, sim = simulate(tmp_path, monkeypatch, 450)
    got = rows(s)
    for m in CORE:
        for v in ("eager", "compile", "aoti"):
            assert got[(m, v, "")]["status"] == "ok", (m, v, got[(m, v, "")]["error"])
        mat = got[(m, "compile-max-autotune", "")]
        assert mat["status"] == "ok" or (mat["status"] == "skipped" and "budget" in mat["error"])
        for v in ("aotpack-run", "aotpack-py"):
            for label in ("heuristic", "tuned"):
                row = got[(m, v, label)]
                assert row["status"] == "ok" and row["cold_start_s"], (m, v, label)
    assert got[("gpt2", "aotpack-run", "")]["error"].startswith("unsupported: Unsupported")
    assert all(r["status"] != "pending" for r in s.results.rows)
    assert s.budget.elapsed() <= 450 - s.budget.reserve_s
    # phases: ceilings alone first, the go after them, GPU-bound window, then the quiet part
    assert sim.log[0] == "ceilings" and sim.go_at_first_bench is True
    window_end = sim.log.index("aotpack-py")
    assert set(sim.log[1:window_end]) == {"bench", "aoti-run"}  # the check: once compiled
    assert sim.log.count("bench") == 8 and sim.log.count("aoti-run") == 1 + 4
    quiet = sim.log[window_end + 1:]
    assert all(q.startswith("torch eager+compile") for q in quiet[:4])
    assert quiet[4:12] == ["aotpack-cold"] * 8 and quiet[12:16] == ["aoti-run"] * 4
    assert s.results.doc["aoti"]["recipe"] == ["exclude-libs", "aoti_load_package"]


def test_a_short_budget_cuts_max_autotune_first_and_says_why(tmp_path, monkeypatch):
    s, sim = simulate(tmp_path, monkeypatch, 330)
    got = rows(s)
    for m in CORE:
        assert got[(m, "eager", "")]["status"] == "ok"
        assert got[(m, "aotpack-py", "tuned")]["cold_start_s"]  # cold starts kept too
        for v in ("compile", "aoti"):  # priority 1: done, or cut for the budget with a reason
            row = got[(m, v, "")]
            assert row["status"] == "ok" or (row["status"] == "skipped"
                                             and "budget" in row["error"]), (m, v, row["error"])
    cut = [m for m in CORE if got[(m, "compile-max-autotune", "")]["status"] != "ok"]
    assert cut, "330 s cannot hold every max-autotune row"
    for m in cut:
        row = got[(m, "compile-max-autotune", "")]
        assert row["status"] == "skipped" and "budget" in row["error"]
    assert all(r["status"] != "pending" for r in s.results.rows)
    assert s.budget.elapsed() <= 330 - s.budget.reserve_s + 1
