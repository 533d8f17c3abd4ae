"""The benchmark suite's time plan (benchmarks/suite_schedule.py, suite_runner.py) and how the
suite turns one process's partial results into rows (suite_torch.py, suite_bundles.py), and
the AOTI plan's decisions (suite_aoti_plan.py, suite_aoti.py). No GPU: worker processes are
replaced by canned results, background jobs by short Python one-liners."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

# the benchmarks' own code, not aotpack's: run on request (pytest -m bench; docs/testing.md)
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import suite  # noqa: E402
import suite_aoti  # noqa: E402
import suite_aoti_plan as plan  # noqa: E402
import suite_bundles  # noqa: E402
import suite_runner as runner  # noqa: E402
import suite_schedule as sched  # noqa: E402
from suite_runner import TaskResult  # noqa: E402


# ------------------------------------------------------------------------- budget, ledger

def test_refusal_says_when_time_is_kept_for_more_important_work():
    b = runner.Budget(100, reserve_s=10)  # 90 s usable
    assert b.refuse(60) is None
    kept = b.refuse(60, reserve=40)
    assert "kept for more important work" in kept and "40 s" in kept
    assert "kept" not in b.refuse(95, reserve=40)  # would not fit at all
    assert b.deadline(30) == pytest.approx(b.t0 + 60)


def test_ledger_reserves_only_more_important_pending_work():
    led = sched.Ledger(runner.Budget(100, reserve_s=10))
    led.add(("torch", "a", "eager"), 20, 0)
    led.add(("torch", "b", "eager"), 20, 0)
    led.add(("torch", "a", "max"), 60, 2)
    assert led.reserve(2) == 40 and led.reserve(0) == 0
    assert led.refuse([("torch", "a", "eager")]) is None
    assert "kept" in led.refuse([("torch", "a", "max")])  # 60 + 40 reserved > 90 usable
    led.drop(("torch", "b", "eager"))
    assert led.refuse([("torch", "a", "max")]) is None
    assert led.pending(0) == 20 and led.pending(2) == 80


def test_background_threads_leave_cores_for_the_timed_process():
    assert sched.background_threads(4, cpus=16) == 3
    assert sched.background_threads(4, cpus=2) == 1
    env = sched.thread_env(3, compile_threads=True)
    assert env["OMP_NUM_THREADS"] == "3" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "3"
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in sched.thread_env(2)


# ------------------------------------------------------------------------ background jobs

def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_gpu_phase_ends_at_the_marker_and_cpu_jobs_never_see_the_gpu(tmp_path):
    bg = runner.Background()
    marker, env_file = tmp_path / "done", tmp_path / "env.txt"
    bg.start("compile", _py(f"import time; time.sleep(0.3); open({str(marker)!r}, 'w'); "
                            "time.sleep(20)"), dict(os.environ), 60, tmp_path / "a.log",
             gpu=True, marker=marker)
    bg.start("cpu", _py(f"import os; open({str(env_file)!r}, 'w').write("
                        "repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"),
             dict(os.environ, CUDA_VISIBLE_DEVICES="0"), 60, tmp_path / "b.log")
    assert bg.gpu_busy() == ["compile"]
    t0 = time.monotonic()
    bg.wait_gpu_free()
    assert time.monotonic() - t0 < 10 and bg.running("compile")  # the CPU part goes on
    assert bg.wait("cpu").ok and env_file.read_text() == "''"
    bg.kill_all()


def test_a_job_past_the_suites_deadline_is_killed_with_the_reason(tmp_path):
    bg = runner.Background()
    bg.start("slow", _py("import time; time.sleep(30)"), dict(os.environ), 60,
             tmp_path / "a.log", gpu=True)
    t0 = time.monotonic()
    res = bg.wait_gpu_free(deadline=time.monotonic() + 0.5, why="the core rows need the time")
    assert time.monotonic() - t0 < 10 and res >= 0.5
    got = bg.wait("slow")
    assert got.status == "timeout" and "the core rows need the time" in got.error
    bg.start("quick", _py("pass"), dict(os.environ), 60, tmp_path / "b.log")
    time.sleep(1.0)
    assert bg.wait("quick").ok and bg.wait("quick").wall_s < 0.9  # its end, not the wait's


PARKING = """
import json, os, subprocess, sys, time
time.sleep(0.3)  # "loading"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)  # a stray that left the job's session
open({pids!r}, "w").write(json.dumps([os.getpid(), child.pid]))
open({parked!r}, "w").write("{{}}")
while not os.path.exists({go!r}):
    time.sleep(0.02)
open({out!r}, "w").write(os.environ.get("SUITE_T0", ""))
"""


def _parking_job(bg, tmp_path, limit_s: float = 60):
    paths = {k: str(tmp_path / k) for k in ("pids", "parked", "go", "out")}
    bg.start("run", _py(PARKING.format(**paths)), dict(os.environ, CUDA_VISIBLE_DEVICES="0"),
             limit_s, tmp_path / "run.log", parked=tmp_path / "parked", hide_gpu=False)
    return {k: Path(v) for k, v in paths.items()}


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """No such process, or a zombie (killed, not yet reaped by its parent)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def test_a_parked_job_is_idle_for_wait_all_and_runs_on_its_go(tmp_path):
    bg = runner.Background()
    p = _parking_job(bg, tmp_path)
    assert bg.gpu_busy() == []  # loading is no reason for GPU timings to wait
    t0 = time.monotonic()
    bg.wait_all(time.monotonic() + 30)
    assert time.monotonic() - t0 < 10 and bg.parked() == ["run"] and bg.running("run")
    time.sleep(0.5)
    assert not p["out"].exists()  # parked: nothing runs before the go
    res = bg.resume("run", p["go"], 10)
    assert res.ok and float(p["out"].read_text()) > 0  # SUITE_T0: its cold start's origin
    bg.kill_all()


def test_a_run_still_loading_past_its_limit_is_killed_and_says_so(tmp_path):
    bg = runner.Background()
    bg.start("run", _py("import time; time.sleep(30)"), dict(os.environ), 0.5,
             tmp_path / "a.log", parked=tmp_path / "parked", hide_gpu=False)
    bg.wait_all(time.monotonic() + 30)
    got = bg.wait("run")
    assert got.status == "timeout" and "before it was parked" in got.error


def test_a_resumed_run_has_its_own_limit_from_the_go(tmp_path):
    bg = runner.Background()
    code = (f"import os, time; open({str(tmp_path / 'parked')!r}, 'w')\n"
            f"while not os.path.exists({str(tmp_path / 'go')!r}): time.sleep(0.02)\n"
            "time.sleep(30)")
    bg.start("run", _py(code), dict(os.environ), 60, tmp_path / "a.log",
             parked=tmp_path / "parked", hide_gpu=False)
    bg.wait_all(time.monotonic() + 30)
    t0 = time.monotonic()
    got = bg.resume("run", tmp_path / "go", 0.5)
    assert time.monotonic() - t0 < 10
    assert got.status == "timeout" and "after its go" in got.error


def test_kill_all_takes_parked_jobs_and_their_strays(tmp_path):
    """The end of a run, or SIGTERM (suite.main's handler → Suite.finish → kill_all)."""
    bg = runner.Background()
    p = _parking_job(bg, tmp_path)
    bg.wait_all(time.monotonic() + 30)
    assert bg.parked() == ["run"]
    pids = json.loads(p["pids"].read_text())
    bg.kill_all()
    assert all(_gone(pid) for pid in pids)


def test_park_waits_for_the_go_and_gives_up_without_one(tmp_path):
    import threading

    from suite_proc import park

    go = tmp_path / "go"
    threading.Timer(0.3, go.write_text, args=("go",)).start()
    waited = park(str(tmp_path / "parked"), str(go), {"load_s": 1.0})
    assert 0.25 <= waited < 5 and json.loads((tmp_path / "parked").read_text())["load_s"] == 1.0
    with pytest.raises(RuntimeError, match="no go came"):
        park(str(tmp_path / "parked2"), str(tmp_path / "never"), {}, limit_s=0.2)


# -------------------------------------------------------------- rows from partial results

def make_suite(tmp_path, *extra) -> suite.Suite:
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out",
                             str(tmp_path / "out.json"), "--no-extra", "--commit", "test",
                             *extra])
    s = suite.Suite(args)
    s.plan()
    return s


def fake_tasks(s, replies: list) -> list:
    """suite.task replaced: each call takes the next canned (status, result) reply."""
    calls = []

    def task(tid, task, *, estimate, cap_s, env=None, keep_s=0.0):
        calls.append(task)
        status, result = replies.pop(0)
        error = None if status == "ok" else f"{status}: canned"
        return TaskResult(status, -11 if status == "crash" else 0, 1.0, result, error, "log")

    s.task = task
    return calls


OK = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "reps": 5, "variant_s": 2.0}


def test_a_crash_fails_its_own_variant_and_the_rest_go_on_in_a_fresh_process(tmp_path):
    s = make_suite(tmp_path, "--smoke", "--models", "mlp-decode", "--variants",
                   "eager,compile,compile-max-autotune")
    calls = fake_tasks(s, [
        ("crash", {"variants": {"eager": dict(OK, cold_start_s=3.0)}, "running": "compile"}),
        ("ok", {"variants": {"compile-max-autotune": dict(OK, build_s=20.0)}, "running": None}),
    ])
    s.torch.run(s.model("mlp-decode"))
    assert [c["variants"] for c in calls] == [
        ["eager", "compile", "compile-max-autotune"], ["compile-max-autotune"]]
    rows = {r["variant"]: r for r in s.results.rows}
    assert rows["eager"]["status"] == "ok" and rows["eager"]["cold_start_s"] == 3.0
    assert rows["compile"]["status"] == "crash" and "crash" in rows["compile"]["error"]
    assert rows["compile-max-autotune"]["status"] == "ok"
    assert rows["compile-max-autotune"]["build_s"] == 20.0


def test_a_process_that_dies_before_any_variant_fails_them_all(tmp_path):
    s = make_suite(tmp_path, "--smoke", "--models", "mlp-decode", "--variants", "eager,compile")
    fake_tasks(s, [("error", {"error": "ImportError: no transformers"})])
    s.torch.run(s.model("mlp-decode"))
    rows = {r["variant"]: r for r in s.results.rows}
    assert rows["eager"]["status"] == rows["compile"]["status"] == "error"


def test_max_autotune_waits_for_the_next_models_eager_rows_then_runs_at_the_end(tmp_path):
    s = make_suite(tmp_path, "--smoke", "--models", "mlp-decode,mlp-prefill", "--variants",
                   "eager,compile,compile-max-autotune", "--budget-s", "70")
    reply = {"variants": {v: dict(OK) for v in suite_worker_variants()}, "running": None}
    calls = fake_tasks(s, [("ok", reply)] * 3)
    for m in s.models:
        s.torch.run(m)
    assert s.pending("mlp-decode", "compile-max-autotune")  # deferred, not skipped
    s.torch.retry_later()
    got = [(c["spec"].split(":")[-1], c["variants"]) for c in calls]
    assert got == [("smoke_mlp_decode", ["eager", "compile"]),
                   ("smoke_mlp", ["eager", "compile", "compile-max-autotune"]),
                   ("smoke_mlp_decode", ["compile-max-autotune"])]
    assert not s.pending("mlp-decode", "compile-max-autotune")


def suite_worker_variants():
    from suite_worker_torch import ORDER

    return ORDER


def test_eager_compares_outputs_saved_by_rows_measured_before_it(tmp_path):
    s = make_suite(tmp_path, "--smoke", "--models", "mlp-decode", "--variants", "eager")
    s.compare["mlp-decode"] = {"aotpack-py|tuned": "/x.pt"}
    s.results.row("mlp-decode", "aotpack-py", "tuned")
    calls = fake_tasks(s, [("ok", {"variants": {"eager": dict(
        OK, compared={"aotpack-py|tuned": 0.004})}, "running": None})])
    s.torch.run(s.model("mlp-decode"))
    assert calls[0]["compare"] == {"aotpack-py|tuned": "/x.pt"}
    assert s.results.row("mlp-decode", "aotpack-py", "tuned")["rel_err_vs_eager"] == 0.004


def bundle_suite(tmp_path, labels: list[str]) -> suite.Suite:
    from handmade_bundle import write_handmade

    items = []
    for label in labels:
        d = tmp_path / label
        d.mkdir()
        write_handmade(d / "model.aotpack")
        items.append({"model": "mlp-decode", "label": label, "dir": label})
    (tmp_path / "bundles.json").write_text(json.dumps(items))
    return make_suite(tmp_path, "--models", "mlp-decode", "--bundles-json",
                      str(tmp_path / "bundles.json"), "--variants", "aotpack-run,aotpack-py")


def test_binding_process_crash_fails_one_bundle_and_retries_the_rest(tmp_path):
    s = bundle_suite(tmp_path, ["a", "b", "c"])
    one = dict(OK, gpu_bound=True, host_enqueue_ms=0.1,
               aotpack_run={"max_abs_diff_vs_binding": 0.0, "outputs_saved": "/l.pt"},
               outputs_saved="/o.pt")
    calls = fake_tasks(s, [("crash", {"bundles": {"mlp-decode|a": one},
                                      "running": "mlp-decode|b"}),
                           ("ok", {"bundles": {"mlp-decode|c": dict(one)}, "running": None})])
    s.packs.binding(list(s.bundles), window=True)
    assert [[i["key"] for i in c["bundles"]] for c in calls] == [
        ["mlp-decode|a", "mlp-decode|b", "mlp-decode|c"], ["mlp-decode|c"]]
    status = {r["label"]: r["status"] for r in s.results.rows if r["variant"] == "aotpack-py"}
    assert status == {"a": "ok", "b": "crash", "c": "ok"}
    assert s.compare["mlp-decode"] == {"aotpack-py|a": "/o.pt", "aotpack-run|a": "/l.pt",
                                       "aotpack-py|c": "/o.pt", "aotpack-run|c": "/l.pt"}
    assert s.results.row("mlp-decode", "aotpack-py", "a")["launches"] == 3  # bundle facts


def test_a_host_bound_window_row_is_measured_again_in_the_quiet_phase(tmp_path):
    s = bundle_suite(tmp_path, ["a"])
    slow = dict(OK, gpu_bound=False, host_enqueue_ms=0.9)
    fake_tasks(s, [("ok", {"bundles": {"mlp-decode|a": slow}, "running": None}),
                   ("ok", {"bundles": {"mlp-decode|a": dict(OK, gpu_bound=False)},
                           "running": None})])
    s.packs.binding(list(s.bundles), window=True)
    row = s.results.row("mlp-decode", "aotpack-py", "a")
    assert s.packs.recheck == s.bundles and any("host-bound" in n for n in row["notes"])
    # the time it takes again is kept from now on (a torch process is stopped before it)
    assert {("recheck-start",), ("recheck", "mlp-decode", "a")} <= set(s.ledger.items)
    s.packs.binding(s.packs.recheck, window=False)
    assert s.results.row("mlp-decode", "aotpack-py", "a")["details"]["window"] is False


def test_bundles_sharing_a_weights_file_make_it_once(tmp_path, monkeypatch):
    s = bundle_suite(tmp_path, ["heur", "tuned"])
    monkeypatch.setattr(suite_bundles, "weights_key", lambda b: ("spec", "same sums"))
    monkeypatch.setattr(suite_bundles, "weights_file", lambda b: b.dir / "weights.safetensors")
    started = []
    real_start = s.bg.start

    def start(name, cmd, env, limit_s, log_path, **kw):  # make-weights → write the file
        started.append(name)
        out = Path(cmd[-1]) / "weights.safetensors"
        real_start(name, [sys.executable, "-c", f"open({str(out)!r}, 'w').write('w')"], env,
                   limit_s, log_path, **kw)

    monkeypatch.setattr(s.bg, "start", start)
    s.packs.start_weights()
    assert started == ["weights-mlp-decode-heur"]
    assert [s.packs.weights_ready(b) for b in s.bundles] == [None, None]
    assert (tmp_path / "tuned" / "weights.safetensors").read_text() == "w"


# ---------------------------------------------------------------------------- AOTI plan

def test_fallback_follows_what_the_failed_load_says():
    recipes = {n: plan.Recipe(n, n) for n in ("exclude-libs", "system-gxx",
                                               "exclude-libs-in-so")}
    failed = recipes["exclude-libs"]
    assert plan.fallback_for(failed, "crash: SIGSEGV (rc -11)", set(), recipes) == "system-gxx"
    assert plan.fallback_for(failed, "RuntimeError: constants not loaded from blob", set(),
                             recipes) == "exclude-libs-in-so"
    assert plan.fallback_for(failed, "timeout", {"system-gxx"}, recipes) == "exclude-libs-in-so"
    assert plan.fallback_for(failed, "timeout", {"system-gxx", "exclude-libs-in-so"},
                             recipes) is None


def test_the_default_recipe_keeps_weights_out_of_the_so_and_links_privately(tmp_path):
    got = plan.recipes(tmp_path, {"default_gxx": "/usr/bin/g++", "realpath": "/usr/bin/g++",
                                  "other_gxx": ["/usr/bin/g++-12"]})
    ex = got["exclude-libs"]
    assert ex.configs == plan.WEIGHTS_OUTSIDE_SO and ex.env["CXX"].endswith("g++")
    assert "--exclude-libs,ALL" in Path(ex.env["CXX"]).read_text()
    assert got["system-gxx"].env == {"CXX": "/usr/bin/g++-12"}
    assert got["exclude-libs-in-so"].configs == {}
    assert set(plan.KNOWN) >= {"toolchain", "probe", "default_package"}


def test_only_config_names_this_torch_knows_are_applied():
    known, unknown = suite_aoti.known_configs({
        **plan.WEIGHTS_OUTSIDE_SO, "aot_inductor.no_such_option": 1, "max_autotune": False})
    assert known == {**plan.WEIGHTS_OUTSIDE_SO, "max_autotune": False}  # None default: known
    assert unknown == ["aot_inductor.no_such_option"]


def test_gpu_done_marker_is_written_at_the_first_cxx_build_inside_the_aot_compile(tmp_path,
                                                                                  monkeypatch):
    from torch._inductor import codecache, cpp_builder

    built = []
    monkeypatch.setattr(cpp_builder.CppBuilder, "build", lambda self: built.append(self))
    monkeypatch.setattr(codecache.AotCodeCompiler, "compile", classmethod(
        lambda cls, name: cpp_builder.CppBuilder.build(name)))
    marker = tmp_path / "gpu-done"
    assert suite_aoti.mark_gpu_done_at_cxx_build(str(marker)).startswith("armed")
    cpp_builder.CppBuilder.build("a JIT build before the AOT compile")
    assert not marker.exists()
    codecache.AotCodeCompiler.compile("wrapper")
    assert marker.exists() and built == ["a JIT build before the AOT compile", "wrapper"]


def test_extra_models_say_which_op_aotpack_lacks_and_a_build_failure_is_not_that(tmp_path):
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "o.json"),
                             "--models", "gpt2,bert-base,vit-b16", "--commit", "test",
                             "--bundle-dirs", str(tmp_path / "none")])  # not the checkout's .gpu
    s = suite.Suite(args)
    s.plan()
    extra = s.models
    runner.write_task({"task": "frontend-probe", "id": "frontend-probes"}, s.work)
    (s.work / "result-frontend-probes.json").write_text(json.dumps({"models": {
        "gpt2": {"unsupported": "UnsupportedOpError: aten.embedding.default"},
        "bert-base": {"error": "the model could not be built: ModuleNotFoundError: transformers"},
    }}))
    s.bg.start("frontend-probes", _py("pass"), dict(os.environ), 60, tmp_path / "p.log")
    s.extra_probes(extra)
    got = {r["model"]: r for r in s.results.rows if r["variant"] == "aotpack-run"}
    assert got["gpt2"]["status"] == "unsupported"
    assert got["gpt2"]["error"] == "unsupported: UnsupportedOpError: aten.embedding.default"
    assert got["bert-base"]["status"] == "error" and "transformers" in got["bert-base"]["error"]
    assert got["vit-b16"]["status"] == "error"  # the probe said nothing about it


def test_resume_without_bundle_folders_keeps_the_measured_aotpack_rows(tmp_path):
    """A resumed run that measures only AOTI (no bundle folders this time) must not add
    'missing' aotpack rows next to the ones the first run measured (it did on 2026-11-30)."""
    import json

    import suite

    first = ROOT / "benchmarks" / "results" / "2026-11-30-18d5c7a.json"
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--resume", str(first), "--models", "llama-decode", "--variants",
                             "aoti", "--no-extra", "--bundle-dirs", str(tmp_path / "none"),
                             "--commit", "test"])
    s = suite.Suite(args)
    s.plan()
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    mine = [r for r in rows if r["model"] == "llama-decode" and r["variant"].startswith("aotpack")]
    assert mine and all(r["status"] == "ok" and r["label"] for r in mine)


def test_resume_does_not_measure_again_what_it_kept(tmp_path, monkeypatch):
    """--resume of a run whose aotpack rows are all measured (latency and cold starts): no
    bench, no binding, no cold start, no weights generation again (a review of 2026-11-30 saw
    a resume spend ~100 s re-measuring and mix two runs' figures in one row)."""
    import suite
    import suite_bundles
    from handmade_bundle import write_handmade

    d = tmp_path / "b"
    d.mkdir()
    write_handmade(d / "model.aotpack")
    (tmp_path / "bundles.json").write_text(json.dumps(
        [{"model": "mlp-decode", "label": "x", "dir": "b"}]))
    from suite_results import Results

    first = Results(tmp_path / "first.json", {"date": "2026-11-30", "commit": "a",
                                              "command": "suite.py"})
    for v in ("aotpack-run", "aotpack-py"):
        first.update("mlp-decode", v, "x", status="ok", median_ms=0.07, cold_start_s=1.2)
    first.write()
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--resume", str(tmp_path / "first.json"), "--models", "mlp-decode",
                             "--no-extra", "--bundles-json", str(tmp_path / "bundles.json"),
                             "--commit", "test"])
    s = suite.Suite(args)
    s.plan()
    calls = []
    monkeypatch.setattr(s.packs, "bench", lambda b, **kw: calls.append(("bench", b.label)))
    monkeypatch.setattr(suite_bundles, "run_command", lambda *a, **kw: calls.append("process"))
    monkeypatch.setattr(s, "gate_gpu", lambda: None)
    s.packs.start_weights()
    s.packs.latency()
    s.packs.cold_starts()
    assert calls == [] and not [j for j in s.bg.jobs if j.startswith("weights-")]
    kept = {r["variant"]: r for r in s.results.rows if r["label"] == "x"}
    assert kept["aotpack-run"]["median_ms"] == 0.07 and kept["aotpack-py"]["cold_start_s"] == 1.2


def test_an_extra_model_with_a_bundle_is_planned_like_a_core_one(tmp_path, monkeypatch):
    """ViT-B/16 has a bundle: its torch rows get core priorities and its AOTI package is among
    the background compiles (as an extra it got leftover time and lost its compiled rows)."""
    import suite
    from handmade_bundle import write_handmade

    d = tmp_path / "b"
    d.mkdir()
    write_handmade(d / "model.aotpack")
    (tmp_path / "bundles.json").write_text(json.dumps(
        [{"model": "vit-b16", "label": "x", "dir": "b"}]))
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--models", "gpt2,vit-b16", "--bundles-json",
                             str(tmp_path / "bundles.json"), "--commit", "test"])
    s = suite.Suite(args)
    tiers = {m.name: m.tier for m in s.models}
    assert tiers == {"gpt2": "extra", "vit-b16": "core"}
    s.plan()
    prio = {k[1:]: p for k, (_, p) in s.ledger.items.items() if k[0] == "torch"}
    assert prio[("vit-b16", "compile")] == suite.PRIORITY["compile"]
    est = {k[1:]: e for k, (e, _) in s.ledger.items.items() if k[0] == "torch"}
    assert est[("vit-b16", "compile")] == 22  # its own measured figure, not the generic 12
    assert est[("vit-b16", "eager")] == 25 + suite.ESTIMATE["eager"]  # HF start included
    assert prio[("gpt2", "compile")] == suite.PRIORITY["extra"]
    started = []
    fake = type("A", (), {"start": lambda self, ms: started.extend(m.name for m in ms),
                          "start_probes": lambda self: None})()
    monkeypatch.setattr(plan, "AotiRunner", lambda suite_: fake)
    monkeypatch.setattr(s.packs, "start_weights", lambda: None)
    monkeypatch.setattr(s.bg, "start", lambda *a, **kw: None)
    s.start_background([m for m in s.models if m.tier == "core"],
                       [m for m in s.models if m.tier == "extra"])
    assert started == ["vit-b16"]


def test_a_run_started_early_waits_for_its_compile_and_its_cold_start_leaves_the_wait_out(
        tmp_path, monkeypatch):
    import threading

    from torch._inductor import codecache

    checked = []
    monkeypatch.setattr(codecache, "get_device_information", lambda d: checked.append(d),
                        raising=False)
    done = tmp_path / "result-compile.json"
    from suite_proc import write_json

    threading.Timer(0.3, lambda: write_json(done, {"weights_bytes": 7})).start()
    t = {"compiled_path": str(done)}
    res = suite_aoti._before_package(t, "cuda")
    assert checked == ["cuda"] and res["package_wait_s"] >= 0.25 and t["weights_bytes"] == 7
    monkeypatch.setenv("SUITE_T0", str(time.time() - 10.0))
    cold = suite_aoti._cold_start(dict(res, parked_s=2.0))
    assert 10.0 - res["package_wait_s"] - 2.0 - 0.5 < cold < 10.0 - res["package_wait_s"] - 2.0 + 0.5
    done.write_text(json.dumps({"error": "g++ died"}))
    with pytest.raises(RuntimeError, match="its compile failed: g\\+\\+ died"):
        suite_aoti._before_package({"compiled_path": str(done)}, "cuda")


def test_a_foreground_compile_keeps_no_time_for_a_preload(tmp_path, monkeypatch):
    """An extra model's AOTI compile runs in the foreground, then loads in its own run: it
    must not leave the preloads' ("aoti-load",) reservation behind (it held 20 s for all later
    work, and shortened every torch process's limit)."""
    s = make_suite(tmp_path)
    r = plan.AotiRunner(s)
    monkeypatch.setattr(s.bg, "start", lambda *a, **kw: None)
    r.start_compile(s.model("mlp-decode"), r.recipe, None)
    assert ("aoti-load",) not in s.ledger.items
    assert s.ledger.items[("aoti-run", "mlp-decode")][0] == suite.ESTIMATE["aoti-run"]
    r.start_compile(s.model("mlp-prefill"), r.recipe, 3)  # background: preloaded
    assert s.ledger.items[("aoti-load",)][0] == suite.ESTIMATE["aoti-load"]
