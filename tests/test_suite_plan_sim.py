"""The whole suite run (benchmarks/suite.py Suite.run) on simulated workers: every worker
process, `aotpack-run` call and background job is replaced by a canned result that advances the
suite's clock by what the H200 took (benchmarks/results/2026-11-30-8c98e0a.json and
-18d5c7a.json, split as in suite_schedule.py: AOTI compiles done 79-91 s after the start, a
package load 50 s). Checks the order of the phases, that a 450 s budget holds every core row,
that the AOTI package loads happen before the quiet phase (preloaded runs, parked until their
go), and that a short budget cuts max-autotune first, with a reason, never leaving a gap.

Preloaded AOTI runs are real processes here (a few lines of Python that park, wait for their
go file and write a canned result), so the suite's Background handles them as on the GPU."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# the benchmarks' own code, not aotpack's: run on request (pytest -m bench; docs/testing.md)
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import suite  # noqa: E402
import suite_aoti_preload  # noqa: E402
import suite_bundles  # noqa: E402
from suite_runner import TaskResult  # noqa: E402

CORE = ("mlp-prefill", "mlp-decode", "llama-prefill", "llama-decode")
TORCH_S = {"start": 7, "eager": 4, "compile": 10, "compile-max-autotune": 25}
TIMED = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "reps": 100}
COMPILE_END_S = {"mlp-decode": 79, "mlp-prefill": 79, "llama-decode": 87, "llama-prefill": 91}
LOAD_S, AFTER_GO_S, CHECK_S = 50, 3, 55  # AOTI: import torch + load; first run + timing; check
DEVINFO_S, PKG_LOAD_S = 40, 2  # a run started early: import + device-info check; the load itself

PRELOAD = """
import json, os, sys, time
task = json.load(open(sys.argv[1]))
while not os.path.exists(task["compiled_path"]):  # started at the go: waits for its package
    time.sleep(0.01)
if "error" in json.load(open(task["compiled_path"])):
    sys.exit("its compile failed")
if task["spec"] in {crash}:
    os.kill(os.getpid(), 11)  # dies while loading, as a SIGSEGV in _load_aoti would
open(task["parked_path"], "w").write("{{}}")
while not os.path.exists(task["go_path"]):
    time.sleep(0.01)
json.dump({result}, open(task["result_path"], "w"))
"""


class Sim:
    """Canned workers; `log` is the order in which the suite ran things."""

    def __init__(self, s, gpu_phase_s=28.0, crash_models=(), failed_compiles=()):
        self.s, self.log = s, []
        self.gpu_phase_s = gpu_phase_s
        self.crash_specs = [s.model(m).spec for m in crash_models]
        self.failed_compiles = failed_compiles
        self.go_at_first_bench = None
        self.compile_end: dict[str, float] = {}  # background job → when it finishes (clock)
        self.loads: list[tuple[float, float]] = []  # preloads: (start, parked) on the clock
        self.goes: list[float] = []  # when each preloaded run got its go
        self.ledger_at_quiet: dict = {}
        self.envs: dict[str, tuple[float, dict]] = {}  # background job → (start, env)
        self.keeps: dict[str, float] = {}  # task → seconds its limit kept for later work

    def now(self) -> float:
        return self.s.budget.elapsed()

    def advance(self, seconds: float) -> None:
        self.s.budget.t0 -= seconds  # the suite's clock moves on

    def task(self, tid, task, *, estimate, cap_s, env=None, keep_s=0.0):
        kind = task["task"]
        self.keeps[tid] = keep_s
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

    def aoti_run(self, task):  # in the foreground: the load check, or a run not preloaded
        if task["check_only"]:
            return CHECK_S, {"cold_start_s": CHECK_S - 1.0}
        return LOAD_S + AFTER_GO_S, dict(TIMED, cold_start_s=LOAD_S + 1.0)

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
        """Background jobs finish at once (an AOTI compile, for the suite, at its time in
        COMPILE_END_S); their result files say what the real ones would. A preloaded AOTI run
        is a real process that parks until its go."""
        def start(name, cmd, env, limit_s, log_path, **kw):
            task = json.loads(Path(cmd[-1]).read_text()) if cmd[-1].endswith(".json") else {}
            self.envs[name] = (self.now(), env)
            if task.get("go_path"):
                self.log.append("preload")
                compiled = next(end for n, end in self.compile_end.items()
                                if task["compiled_path"].endswith(f"result-{n}.json"))
                self.loads.append((self.now(), max(self.now() + DEVINFO_S, compiled) + PKG_LOAD_S))
                result = dict(TIMED, cold_start_s=LOAD_S + 1.0, load_s=LOAD_S - 4.0,
                              parked_s=10.0, cold_start_wall_s=LOAD_S + 11.0)
                code = PRELOAD.format(crash=self.crash_specs, result=result)
                return real_start(name, [sys.executable, "-c", code, cmd[-1]], env, limit_s,
                                  log_path, **kw)
            if task.get("task") == "aoti-compile":
                model = next(m for m in CORE if task["id"].startswith(f"{m}-aoti-"))
                self.compile_end[name] = COMPILE_END_S[model]
                Path(task["result_path"]).write_text(json.dumps({
                    "build_s": 80.0, "package": task["package"], "artifact_bytes": 9,
                    "configs_applied": task["configs"],
                    "package_facts": {"weights_outside_so": True}} if model not in
                    self.failed_compiles else {"error": "CalledProcessError: g++ died"}))
            if task.get("task") == "frontend-probe":
                Path(task["result_path"]).write_text(json.dumps({"models": {
                    m["name"]: {"unsupported": "UnsupportedOpError: aten.embedding"}
                    for m in task["models"]}}))
            real_start(name, [sys.executable, "-c", "pass"], env, limit_s, log_path, **kw)
        return start

    def waits(self):
        bg = self.s.bg
        real_gpu, real_all, real_wait, real_running, real_resume = (
            bg.wait_gpu_free, bg.wait_all, bg.wait, bg.running, bg.resume)
        first = [True]

        def wait_gpu_free(deadline=None, why=""):
            if first[0]:  # the AOTI compiles' GPU phase after the go
                first[0] = False
                self.advance(self.gpu_phase_s)
            return real_gpu(None, why)

        def running(name):  # a compile runs until its time
            return real_running(name) or self.now() < self.compile_end.get(name, 0.0)

        def wait(name, deadline=None, why=""):
            if name in self.compile_end:
                self.advance(max(0.0, self.compile_end[name] - self.now()))
                deadline = None
            return real_wait(name, deadline, why)

        def wait_all(deadline=None, why=""):  # the preloads park LOAD_S after their start
            self.advance(max([0.0] + [end - self.now() for _, end in self.loads]))
            self.ledger_at_quiet = dict(self.s.ledger.items)
            return real_all(None, why)

        def resume(name, go, limit_s):
            self.log.append("aoti-go")
            self.goes.append(self.now())
            self.advance(AFTER_GO_S)
            return real_resume(name, go, limit_s)

        bg.wait_gpu_free, bg.wait_all, bg.wait, bg.running, bg.resume = (
            wait_gpu_free, wait_all, wait, running, resume)


def simulate(tmp_path, monkeypatch, budget: float, **sim_args) -> tuple[suite.Suite, Sim]:
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
    sim = Sim(s, **sim_args)
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
    """With the AOTI loads measured on the H200 (39-53 s each, 2026-11-30-18d5c7a.json) 450 s
    holds every core row of priority 0-1; max-autotune rows that do not fit say why."""
    s, sim = simulate(tmp_path, monkeypatch, 450)
    got = rows(s)
    for m in CORE:
        for v in ("eager", "compile", "aoti"):
            assert got[(m, v, "")]["status"] == "ok", (m, v, got[(m, v, "")]["error"])
        mat = got[(m, "compile-max-autotune", "")]
        assert mat["status"] == "ok" or (mat["status"] == "skipped" and "budget" in mat["error"])
        cold = s.packs.cold_start_bundle(m).label  # one cold start per model
        for v in ("aotpack-run", "aotpack-py"):
            for label in ("heuristic", "tuned"):
                row = got[(m, v, label)]
                assert row["status"] == "ok", (m, v, label)
                if label == cold:
                    assert row["cold_start_s"], (m, v, label)
                else:
                    assert row["cold_start_s"] is None and repr(cold) in row["cold_start_note"]
    assert got[("gpt2", "aotpack-run", "")]["error"].startswith("unsupported: Unsupported")
    assert all(r["status"] != "pending" for r in s.results.rows)
    assert s.budget.elapsed() <= 450 - s.budget.reserve_s
    # phases: ceilings alone first, the go after them, GPU-bound window, then the quiet part
    assert sim.log[0] == "ceilings" and sim.go_at_first_bench is True
    window_end = sim.log.index("aotpack-py")
    # the four runs start at the go, while their packages compile (each then loads its own as
    # soon as it exists: the loads are the load check); then the GPU-bound window
    assert sim.log[1:5] == ["preload"] * 4
    assert sim.log[5:window_end] == ["bench"] * 8
    quiet = sim.log[window_end + 1:]
    assert all(q.startswith("torch eager+compile") for q in quiet[:4])
    assert quiet[4:8] == ["aotpack-cold"] * 4 and quiet[8:12] == ["aoti-go"] * 4
    assert s.results.doc["aoti"]["recipe"] == ["exclude-libs", "aoti_load_package"]


def quiet_aoti_s(s, sim) -> float:
    """Seconds of the quiet phase the AOTI rows took (runs in the foreground, or goes)."""
    quiet_from = s.results.doc["schedule"]["quiet_from_s"]
    fresh = sum(1 for e in sim.log[sim.log.index("aotpack-cold"):] if e == "aoti-run")
    return fresh * (LOAD_S + AFTER_GO_S) + sum(AFTER_GO_S for t in sim.goes if t >= quiet_from)


def test_the_aoti_loads_are_off_the_quiet_phase(tmp_path, monkeypatch):
    """The four AOTI runs load their packages in the background once the load check passed;
    the quiet phase starts when all four are parked and then pays only for their timing. The
    same run without preloading (each run loading in the quiet phase, as before) loses AOTI
    rows to the budget, as the 2026-11-30-18d5c7a run on the H200 did."""
    (tmp_path / "preloaded").mkdir()
    s, sim = simulate(tmp_path / "preloaded", monkeypatch, 450)
    quiet_from = s.results.doc["schedule"]["quiet_from_s"]
    assert len(sim.loads) == 4 and all(end <= quiet_from for _, end in sim.loads)
    assert len(s.results.doc["schedule"]["parked_at_quiet"]) == 4
    assert sim.ledger_at_quiet.get(("aoti-load",)) is None  # its wait is behind us
    assert {sim.ledger_at_quiet[("aoti-run", m)] for m in CORE} == {(suite.ESTIMATE["aoti-timed"],
                                                                     1)}
    assert len(sim.goes) == 4 and quiet_aoti_s(s, sim) == 4 * AFTER_GO_S
    for m in CORE:
        row = rows(s)[(m, "aoti", "")]
        assert row["status"] == "ok" and row["details"]["preloaded"] is True
        assert row["details"]["parked_s"] > 0 and "parked" in row["cold_start_note"]
    (tmp_path / "fresh").mkdir()
    monkeypatch.setattr(suite_aoti_preload.Preloads, "enabled", lambda self: False)
    s2, sim2 = simulate(tmp_path / "fresh", monkeypatch, 450)
    assert not sim2.loads and quiet_aoti_s(s2, sim2) >= 2 * (LOAD_S + AFTER_GO_S)
    ok = [m for m in CORE if rows(s2)[(m, "aoti", "")]["status"] == "ok"]
    assert len(ok) < 4 and all("budget" in rows(s2)[(m, "aoti", "")]["error"]
                               for m in CORE if m not in ok)


def test_a_preloaded_run_that_dies_while_loading_says_so_in_its_row(tmp_path, monkeypatch):
    s, sim = simulate(tmp_path, monkeypatch, 450, crash_models=("llama-prefill",))
    row = rows(s)[("llama-prefill", "aoti", "")]
    assert row["status"] == "crash" and "SIGSEGV" in row["error"], row
    # the recipe had passed its load check: one run dying does not fail the others
    assert all(rows(s)[(m, "aoti", "")]["status"] == "ok" for m in CORE if m != "llama-prefill")


def test_a_short_budget_cuts_max_autotune_first_and_says_why(tmp_path, monkeypatch):
    s, sim = simulate(tmp_path, monkeypatch, 300)
    got = rows(s)
    for m in CORE:
        assert got[(m, "eager", "")]["status"] == "ok"
        cold = s.packs.cold_start_bundle(m).label
        assert got[(m, "aotpack-py", cold)]["cold_start_s"]  # cold starts kept too
        for v in ("compile", "aoti"):  # priority 1: done, or cut for the budget with a reason
            row = got[(m, v, "")]
            assert row["status"] == "ok" or (row["status"] == "skipped"
                                             and "budget" in row["error"]), (m, v, row["error"])
    cut = [m for m in CORE if got[(m, "compile-max-autotune", "")]["status"] != "ok"]
    assert cut, "300 s cannot hold every max-autotune row"
    for m in cut:
        row = got[(m, "compile-max-autotune", "")]
        assert row["status"] == "skipped" and "budget" in row["error"]
    assert all(r["status"] != "pending" for r in s.results.rows)
    assert s.budget.elapsed() <= 300 - s.budget.reserve_s + 1


def test_the_runs_start_at_the_go_and_the_quiet_phase_waits_only_for_the_last_load(
        tmp_path, monkeypatch):
    """aoti_load_package spent 59 of its 63 s in Inductor's device-information check (H200,
    benchmarks/aoti_load_probe.py), which needs no package: the run processes start at the go,
    do it while their packages compile (an Inductor cache each) and wait for their compile's
    result; the quiet phase then starts one package load after the last compile."""
    s, sim = simulate(tmp_path, monkeypatch, 450)
    runs = {n: e for n, (_, e) in sim.envs.items() if n.endswith("-run")}
    # each its own Inductor cache: shared, they queue on Inductor's per-probe file locks
    assert len(runs) == 4 and len({e["TORCHINDUCTOR_CACHE_DIR"] for e in runs.values()}) == 4
    assert all(start < 20 for start, _ in sim.loads)  # at the go, after the ceilings
    quiet_from = s.results.doc["schedule"]["quiet_from_s"]
    assert quiet_from <= max(COMPILE_END_S.values()) + PKG_LOAD_S + 1
    row = rows(s)[("llama-prefill", "aoti", "")]
    assert "waited for its package" in row["cold_start_note"]


def test_a_torch_process_cannot_eat_the_time_kept_for_cold_starts_and_aoti_runs(tmp_path,
                                                                                monkeypatch):
    """Max-autotune overran its estimate by 2x on the H200 (llama-prefill 23-29 s): the
    processes that run it are limited to what the cold starts and AOTI runs after them do not
    need; the last model's process keeps at least their estimates."""
    s, sim = simulate(tmp_path, monkeypatch, 450)
    last = [t for t in sim.keeps if t.startswith("llama-decode-torch-")][0]
    assert "compile-max-autotune" in last
    need = 4 * (suite.ESTIMATE["aotpack-cold"] + suite.ESTIMATE["aoti-timed"])
    assert sim.keeps[last] >= need


def test_a_failed_compile_stops_its_run_process_and_its_row_says_why(tmp_path, monkeypatch):
    s, sim = simulate(tmp_path, monkeypatch, 450, failed_compiles=("mlp-decode",))
    row = rows(s)[("mlp-decode", "aoti", "")]
    assert row["status"] == "error" and "g++ died" in row["error"], row
    job = s.bg.jobs["mlp-decode-aoti-exclude-libs-run"]
    assert job.result is not None and job.result.status != "ok"  # ended, not left waiting
    assert all(rows(s)[(m, "aoti", "")]["status"] == "ok" for m in CORE if m != "mlp-decode")


def test_runs_can_start_once_their_package_exists_instead(tmp_path, monkeypatch):
    """--aoti-runs-at compiled: the schedule before the early start, kept to compare."""
    monkeypatch.setattr(suite, "parse_args", _with_flag(suite.parse_args,
                                                        ["--aoti-runs-at", "compiled"]))
    s, sim = simulate(tmp_path, monkeypatch, 450)
    starts = sorted(start for start, _ in sim.loads)
    assert len(starts) == 4 and starts[0] >= min(COMPILE_END_S.values())
    assert all(rows(s)[(m, "aoti", "")]["status"] == "ok" for m in CORE)


def _with_flag(parse, flags):
    return lambda argv: parse(list(argv) + flags)
