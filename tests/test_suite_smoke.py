"""The benchmark suite end to end on the CPU (benchmarks/suite.py --smoke with more variants
than eager): one process measures eager → torch.compile → max-autotune; the AOTInductor
compile runs as a background job whose GPU phase ends at its marker, then the package is
load-checked in a fresh process, and its run process loads it in the background, parks, and
is timed after its go in the quiet phase."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# the benchmarks' own code, not aotpack's: run on request (pytest -m bench; docs/testing.md)
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402
import suite_results as sr  # noqa: E402
import suite_runner as runner  # noqa: E402


def run_smoke(tmp_path, variants: str, *extra) -> dict:
    out = tmp_path / "smoke.json"
    p = subprocess.run([sys.executable, "benchmarks/suite.py", "--smoke", "--models",
                        "mlp-decode", "--variants", variants, "--work", str(tmp_path / "work"),
                        "--out", str(out), "--reps", "5", *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return sr.load(out)


def test_eager_compile_and_max_autotune_share_one_process(tmp_path):
    doc = run_smoke(tmp_path, "eager,compile,compile-max-autotune", "--no-warm-start")
    rows = {r["variant"]: r for r in doc["rows"] if r["model"] == "mlp-decode"}
    torch_rows = [rows[v] for v in ("eager", "compile", "compile-max-autotune")]
    assert all(r["status"] == "ok" and r["median_ms"] > 0 for r in torch_rows)
    assert len({r["details"]["process_wall_s"] for r in torch_rows}) == 1  # one process
    logs = sorted(p.name for p in (tmp_path / "work" / "logs").glob("mlp-decode-torch*.log"))
    assert logs == ["mlp-decode-torch-eager+compile+compile-max-autotune.log"]
    eager, compiled, autotuned = torch_rows
    assert eager["cold_start_s"] > 0 and compiled["cold_start_s"] is None
    assert compiled["build_s"] > 0 and autotuned["build_s"] > 0
    assert compiled["details"]["compiler_warmup_s"] > 0  # paid once, before the first compile
    assert autotuned["details"]["compiler_warmup_s"] is None
    caches = {compiled["details"]["cache_dir"], autotuned["details"]["cache_dir"]}
    assert len(caches) == 2 and all(Path(c).is_dir() for c in caches)  # each compile: its own
    assert compiled["rel_err_vs_eager"] < 1e-3 and autotuned["rel_err_vs_eager"] < 1e-3
    assert rows["aoti"]["status"] == "skipped" and "--variants" in rows["aoti"]["error"]
    assert "mlp-decode" in report.render_markdown(doc)


@pytest.fixture(scope="module")
def aoti_smoke(tmp_path_factory):
    """One --smoke run with eager and AOTI (its compile is most of the ~60 s): the document
    and the work folder, which keeps the package."""
    tmp = tmp_path_factory.mktemp("aoti-smoke")
    return run_smoke(tmp, "eager,aoti"), tmp / "work"


@pytest.mark.slow
def test_aoti_compiles_in_the_background_then_loads_and_runs(aoti_smoke):
    doc, work = aoti_smoke
    rows = {r["variant"]: r for r in doc["rows"] if r["model"] == "mlp-decode"}
    aoti = rows["aoti"]
    assert aoti["status"] == "ok", aoti
    assert aoti["build_s"] > 0 and aoti["cold_start_s"] > 0 and aoti["median_ms"] > 0
    assert aoti["rel_err_vs_eager"] < 1e-3  # compared with eager's reference
    assert "weights in a blob" in aoti["artifact_note"]
    attempts = {a["name"]: a for a in doc["aoti"]["attempts"]}
    compiled = attempts["exclude-libs: compile"]
    assert compiled["status"] == "ok"
    assert compiled["details"]["gpu_done_marker"].startswith("armed")
    assert compiled["details"]["package_facts"]["weights_outside_so"] is True
    assert list(work.glob("gpu-done-*"))  # the marker was written
    # preloading: the background load is the load check (no foreground check first)
    assert "exclude-libs: load check" not in attempts
    assert attempts["exclude-libs: run"]["status"] == "ok"
    assert {"probe default+torch", "probe exclude-libs+torch"} <= set(attempts)
    assert doc["aoti"]["known"]["toolchain"].startswith("/opt/gcc/bin/g++")
    assert doc["aoti"]["recipe"] == ["exclude-libs", "aoti_load_package"]
    assert "exclude-libs" in doc["aoti"]["conclusion"]
    assert doc["schedule"]["quiet_from_s"] > 0
    # preloaded: loaded before the quiet phase, parked, timed after its go
    assert doc["schedule"]["parked_at_quiet"] == ["mlp-decode-aoti-exclude-libs-run"]
    d = aoti["details"]
    assert d["preloaded"] is True and d["load_s"] > 0 and d["parked_s"] > 0
    assert d["package_wait_s"] > 0 and d["device_info_check_s"] > 0  # started while it compiled
    assert aoti["cold_start_s"] == pytest.approx(
        d["cold_start_wall_s"] - d["parked_s"] - d["package_wait_s"], abs=0.01)
    assert "parked" in aoti["cold_start_note"]


@pytest.mark.slow
def test_a_parked_aoti_run_waits_for_its_go_and_its_cold_start_leaves_the_park_out(
        aoti_smoke, tmp_path):
    """The smoke run's package, run as the suite runs a preloaded one (suite_aoti_preload.py):
    it loads, parks, does nothing until its go file appears, then reports a cold start that
    leaves out the time parked."""
    doc, work = aoti_smoke
    package = next((work / "aoti").glob("mlp-decode-*.pt2"))
    go, parked = tmp_path / "go", tmp_path / "parked"
    task = {"task": "aoti-run", "id": "parked-run", "spec": doc["models"]["mlp-decode"]["spec"],
            "package": str(package), "method": "aoti_load_package", "device": "cpu",
            "reps": 5, "go_path": str(go), "parked_path": str(parked)}
    path, result = runner.write_task(task, tmp_path)
    bg = runner.Background()
    bg.start("run", [sys.executable, str(runner.WORKER), str(path)], dict(os.environ), 120,
             tmp_path / "run.log", parked=parked, hide_gpu=False)
    try:
        bg.wait_all(time.monotonic() + 120)
        assert bg.parked() == ["run"], (tmp_path / "run.log").read_text()[-2000:]
        time.sleep(3.0)  # parked: no first run, no result, until the go
        assert not result.exists() and bg.running("run")
        res = bg.resume("run", go, 60)
    finally:
        bg.kill_all()
    out = json.loads(result.read_text())
    assert res.ok, out
    assert out["parked_s"] >= 3.0 and out["load_s"] > 0 and out["median_ms"] > 0
    assert out["cold_start_s"] == pytest.approx(out["cold_start_wall_s"] - out["parked_s"],
                                                abs=0.01)
    assert out["cold_start_s"] <= out["cold_start_wall_s"] - 3.0
