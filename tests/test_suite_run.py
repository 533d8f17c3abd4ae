"""The benchmark suite's run on the CPU (benchmarks/suite.py): the order of its children and
how their results become rows, with fake children; the launcher's child against a fake
aotpack-run and a hand-made bundle; and --smoke end to end with real children."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# the benchmarks' own code, not aotpack's: run on request (pytest -m bench; docs/testing.md)
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

import report  # noqa: E402
import suite  # noqa: E402
import suite_results as sr  # noqa: E402
from suite_proc import Child  # noqa: E402

CEILINGS = {"gemm_tflops": 780.0, "copy_gbps": 4200.0, "gpu": "fake GPU"}


class FakeChildren:
    """suite.run_command replaced: records each child (its id, task and env) and answers with
    replies[id] (default: ok, a 1 ms median)."""

    def __init__(self, replies: dict | None = None):
        self.replies = dict(replies or {})
        self.calls: list[tuple[str, dict, dict]] = []

    def __call__(self, cmd, *, env, timeout_s, log_path, result_path=None) -> Child:
        tid = Path(log_path).stem
        task = json.loads(Path(cmd[-1]).read_text()) if cmd[-1].endswith(".json") else {}
        self.calls.append((tid, task, env))
        default = CEILINGS if tid == "ceilings" else {"median_ms": 1.0, "p10_ms": 0.9,
                                                      "p90_ms": 1.1, "reps": 100}
        return self.replies.get(tid) or Child("ok", dict(default), wall_s=0.5)

    def ids(self) -> list[str]:
        return [c[0] for c in self.calls]


def make_suite(tmp_path, monkeypatch, *argv, replies=None):
    fake = FakeChildren(replies)
    monkeypatch.setattr(suite, "run_command", fake)
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--bundle-dirs", str(tmp_path / "bundles" / "*"), *argv])
    return suite.Suite(args), fake


def rows(doc: dict, model: str) -> dict:
    return {(r["variant"], r["label"]): r for r in doc["rows"] if r["model"] == model}


def test_one_child_per_step_in_order_and_their_results_become_rows(tmp_path, monkeypatch):
    costs = {"flops": 2e9, "bytes": 4e8}
    s, fake = make_suite(tmp_path, monkeypatch, "--only", "mlp-decode", "--variants",
                         "eager,compile-max-autotune,aoti", replies={
                             "mlp-decode-eager": Child("ok", {"median_ms": 0.2, "costs": costs,
                                                              "cold_start_s": 6.0}),
                             "mlp-decode-compile-max-autotune": Child("ok", {
                                 "median_ms": 0.1, "build_s": 30.0, "cache_dir": "/c/mx"}),
                             "mlp-decode-aoti-compile": Child("ok", {
                                 "build_s": 90.0, "artifact_bytes": 123,
                                 "weights_outside_so": True, "export_s": 3.0}),
                             "mlp-decode-compile-max-autotune-warm": Child("ok", {
                                 "cold_start_s": 12.5})})
    s.run()
    assert fake.ids() == ["ceilings", "mlp-decode-eager", "mlp-decode-compile-max-autotune",
                          "mlp-decode-compile-max-autotune-warm", "mlp-decode-aoti-compile",
                          "mlp-decode-aoti-run"]
    doc = sr.load(tmp_path / "r.json")
    got = rows(doc, "mlp-decode")
    assert doc["ceilings"]["gemm_tflops"] == 780.0 and doc["models"]["mlp-decode"]["flops"] == 2e9
    assert got[("eager", "")]["gbps"] == 2000.0  # bytes over the median, against the ceiling
    assert got[("eager", "")]["cold_start_note"].startswith("cold start: python")
    autotuned = got[("compile-max-autotune", "")]
    assert autotuned["build_s"] == 30.0 and autotuned["cold_start_s"] == 12.5
    assert autotuned["details"]["cache_dir"] == "/c/mx"
    aoti = got[("aoti", "")]
    assert aoti["status"] == "ok" and aoti["build_s"] == 90.0 and aoti["artifact_bytes"] == 123
    assert "blob" in aoti["artifact_note"] and aoti["details"]["compile"]["export_s"] == 3.0
    assert got[("compile", "")]["status"] == "skipped"  # not chosen: a row that says so
    assert got[("aotpack-run", "")]["error"] == "not selected (--variants)"
    tasks = {tid: (task, env) for tid, task, env in fake.calls}
    warm_env = tasks["mlp-decode-compile-max-autotune-warm"][1]
    assert warm_env["TORCHINDUCTOR_CACHE_DIR"] == "/c/mx"  # the compile's cache, warm
    assert tasks["mlp-decode-eager"][1]["TORCHINDUCTOR_CACHE_DIR"].endswith("mlp-decode-eager")
    compile_task, compile_env = tasks["mlp-decode-aoti-compile"]
    assert compile_env["TMPDIR"].endswith("mlp-decode-aoti-tmp")
    if shutil.which("g++"):
        assert compile_env["CXX"].endswith("cxx-exclude-libs/g++")
    run_task = tasks["mlp-decode-aoti-run"][0]
    assert run_task["package"] == compile_task["package"] and run_task["ref_path"].endswith(
        "ref-mlp-decode.pt")


def test_a_failed_step_is_its_rows_error_and_what_needs_it_is_not_run(tmp_path, monkeypatch):
    s, fake = make_suite(tmp_path, monkeypatch, "--only", "mlp-decode", "--variants",
                         "eager,compile-max-autotune,aoti", replies={
                             "mlp-decode-eager": Child("timeout",
                                                       error="timeout: killed after 120 s",
                                                       log_tail="stage: timing"),
                             "mlp-decode-compile-max-autotune": Child(
                                 "error", error="RuntimeError: no Triton"),
                             "mlp-decode-aoti-compile": Child(
                                 "crash", error="crash: SIGSEGV (rc -11)")})
    s.run()
    assert "mlp-decode-compile-max-autotune-warm" not in fake.ids()
    assert "mlp-decode-aoti-run" not in fake.ids()
    got = rows(sr.load(tmp_path / "r.json"), "mlp-decode")
    assert got[("eager", "")]["status"] == "timeout"
    assert got[("eager", "")]["log_tail"] == "stage: timing"
    assert got[("compile-max-autotune", "")]["error"] == "RuntimeError: no Triton"
    assert got[("aoti", "")]["status"] == "crash" and "compile" in got[("aoti", "")]["notes"][0]


def test_past_the_budget_no_child_starts_and_the_rows_say_why(tmp_path, monkeypatch):
    s, fake = make_suite(tmp_path, monkeypatch, "--only", "mlp-decode", "--variants", "eager",
                         "--budget-s", "12")
    s.run()
    s.finish()
    assert fake.ids() == []
    doc = sr.load(tmp_path / "r.json")
    assert doc["ceilings"]["status"] == "skipped"
    assert "--budget-s 12" in rows(doc, "mlp-decode")[("eager", "")]["error"]


def test_merge_adds_this_runs_rows_to_an_earlier_document(tmp_path, monkeypatch):
    s, _ = make_suite(tmp_path, monkeypatch, "--only", "mlp-decode", "--variants", "eager")
    s.run()
    first = tmp_path / "first.json"
    shutil.copy(tmp_path / "r.json", first)
    s, fake = make_suite(tmp_path, monkeypatch, "--only", "llama-decode", "--variants", "eager",
                         "--merge", str(first))
    s.run()
    assert fake.ids() == ["llama-decode-eager"]  # the ceilings came with the document
    doc = sr.load(tmp_path / "r.json")
    assert [(r["model"], r["variant"]) for r in doc["rows"] if r["status"] == "ok"] == [
        ("mlp-decode", "eager"), ("llama-decode", "eager")]
    assert len(doc["runs"]) == 2


def _bundle(tmp_path, name: str, spec: str) -> Path:
    from handmade_bundle import write_handmade

    d = tmp_path / "bundles" / name
    d.mkdir(parents=True)
    write_handmade(d / "model.aotpack")
    (d / "spec.txt").write_text(spec)
    (d / "build.json").write_text(json.dumps({"build_s": 9.5}))
    return d


def test_bundle_rows_without_a_launcher_and_models_without_a_bundle(tmp_path, monkeypatch):
    _bundle(tmp_path, "mlp-dec", "examples/mlp.py:make_decode")
    monkeypatch.delenv("AOTPACK_RUN", raising=False)
    s, fake = make_suite(tmp_path, monkeypatch, "--only", "mlp-decode,mlp-prefill,gpt2",
                         "--variants", "aotpack-run,aotpack-py", replies={
                             "mlp-decode-mlp-dec-aotpack-cold": Child("ok", {
                                 "cold_start_s": 0.8, "device_mem_bytes": 4096}),
                             "gpt2-frontend-probe": Child("ok", {
                                 "unsupported": "TranslateError: no IR op for aten.x"})})
    s.run()
    assert fake.ids() == ["ceilings", "mlp-decode-mlp-dec-aotpack-py",
                          "mlp-decode-mlp-dec-aotpack-cold", "gpt2-frontend-probe"]
    doc = sr.load(tmp_path / "r.json")
    dec = rows(doc, "mlp-decode")
    assert "AOTPACK_RUN" in dec[("aotpack-run", "mlp-dec")]["error"]
    py = dec[("aotpack-py", "mlp-dec")]
    assert (py["median_ms"], py["cold_start_s"], py["device_mem_bytes"]) == (1.0, 0.8, 4096)
    assert py["launches"] == 3 and py["build_s"] == 9.5  # from the manifest and build.json
    assert rows(doc, "mlp-prefill")[("aotpack-run", "")]["status"] == "missing"
    gpt2 = rows(doc, "gpt2")[("aotpack-py", "")]
    assert gpt2["status"] == "unsupported" and "aten.x" in gpt2["error"]


FAKE_LAUNCHER = """#!{python}
import sys
args = sys.argv[1:]
if "--bench" in args:
    n = args[args.index("--bench") + 1]
    print(f"aotpack-run: median_ms=0.5000 p10_ms=0.4000 p90_ms=0.6000 min_ms=0.3000 runs={{n}} "
          "warmup=20 graph=1")
elif "--inputs" in args:
    from safetensors.torch import load_file, save_file
    x = load_file(args[args.index("--inputs") + 1])["x"]
    save_file({{"y": x.float() * 2}}, args[args.index("--outputs") + 1])
else:
    print("output y f32 [64, 64]")
"""


def test_the_launcher_child_times_compares_and_cold_starts(tmp_path, monkeypatch):
    """The aotpack-run child for real, against a fake launcher: its --bench line, its outputs
    on eager's inputs (y = 2x here) and the wall time of a plain run."""
    import torch

    _bundle(tmp_path, "mlp-dec", "examples/mlp.py:make_decode")
    launcher = tmp_path / "aotpack-run"
    launcher.write_text(FAKE_LAUNCHER.format(python=sys.executable))
    launcher.chmod(0o755)
    monkeypatch.setenv("AOTPACK_RUN", str(launcher))
    args = suite.parse_args(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json"),
                             "--bundle-dirs", str(tmp_path / "bundles" / "*"), "--only",
                             "mlp-decode", "--variants", "aotpack-run", "--reps", "7"])
    s = suite.Suite(args)
    s.results.doc["ceilings"] = dict(CEILINGS)  # no ceilings child: this machine has no GPU
    x = torch.randn(64, 64).to(torch.bfloat16)
    torch.save({"inputs": [x], "outputs": [x.float() * 2]}, s.ref_path("mlp-decode"))
    s.run()
    row = rows(sr.load(tmp_path / "r.json"), "mlp-decode")[("aotpack-run", "mlp-dec")]
    assert row["status"] == "ok", row
    assert (row["median_ms"], row["p10_ms"], row["reps"]) == (0.5, 0.4, 14)
    assert row["rel_err_vs_eager"] == 0.0 and row["cold_start_s"] > 0
    assert row["launches"] == 3 and "wall time" in row["cold_start_note"]
    assert row["notes"] == ["latency: aotpack-run --bench (C++ launcher, CUDA graph)"]
    (s.work / "ref-mlp-decode.pt").unlink()  # without eager's reference: said, not compared
    s.run()
    row = rows(sr.load(tmp_path / "r.json"), "mlp-decode")[("aotpack-run", "mlp-dec")]
    assert row["status"] == "ok" and row["rel_err_vs_eager"] is None
    assert row["notes"][0].startswith("outputs not compared") and len(row["notes"]) == 2


def test_smoke_run_end_to_end(tmp_path):
    """--smoke: a real eager child on the CPU, the JSON, the report."""
    out = tmp_path / "smoke.json"
    p = subprocess.run([sys.executable, "benchmarks/suite.py", "--smoke", "--only", "mlp-decode",
                        "--work", str(tmp_path / "work"), "--out", str(out), "--reps", "5"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = sr.load(out)
    got = rows(doc, "mlp-decode")
    eager = got[("eager", "")]
    assert eager["status"] == "ok" and eager["median_ms"] > 0 and eager["cold_start_s"] > 0
    assert eager["reps"] == 5 and eager["p10_ms"] <= eager["median_ms"] <= eager["p90_ms"]
    assert doc["models"]["mlp-decode"]["flops"] == 2 * 4 * (64 * 256 + 256 * 64)
    assert all(r["status"] == "skipped" and r["error"] for k, r in got.items() if k[0] != "eager")
    assert (tmp_path / "work" / "ref-mlp-decode.pt").is_file()
    assert "mlp-decode" in report.render_markdown(doc)


@pytest.mark.slow
def test_smoke_compile_and_aoti_rows_on_the_cpu(tmp_path):
    """torch.compile and AOTInductor children for real (~2.5 min on 2 cores)."""
    out = tmp_path / "smoke.json"
    p = subprocess.run([sys.executable, "benchmarks/suite.py", "--smoke", "--only", "mlp-decode",
                        "--variants", "eager,compile,aoti", "--work", str(tmp_path / "work"),
                        "--out", str(out), "--reps", "5"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    got = rows(sr.load(out), "mlp-decode")
    compiled, aoti = got[("compile", "")], got[("aoti", "")]
    assert compiled["status"] == "ok" and compiled["build_s"] > 0, compiled
    assert compiled["details"]["compiler_warmup_s"] > 0
    assert compiled["rel_err_vs_eager"] < 1e-3
    assert aoti["status"] == "ok" and aoti["build_s"] > 0 and aoti["cold_start_s"] > 0, aoti
    assert aoti["rel_err_vs_eager"] < 1e-3 and "blob" in aoti["artifact_note"]


def test_the_binding_cold_start_child_imports_no_torch():
    """aotpack-cold measures a process without torch: its imports must not pull it in."""
    code = ("import sys; sys.path[:0] = ['benchmarks', '.']; import suite_worker, suite_aotpack, "
            "suite_measure, aotpack.runtime; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
