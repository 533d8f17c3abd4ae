"""The benchmark suite end to end on the CPU (benchmarks/suite.py --smoke with more variants
than eager): one process measures eager → torch.compile → max-autotune; the AOTInductor
compile runs as a background job whose GPU phase ends at its marker, then the package is
load-checked, loaded and timed in fresh processes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402
import suite_results as sr  # noqa: E402


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


@pytest.mark.slow
def test_aoti_compiles_in_the_background_then_loads_and_runs(tmp_path):
    doc = run_smoke(tmp_path, "eager,aoti")
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
    assert list((tmp_path / "work").glob("gpu-done-*"))  # the marker was written
    assert attempts["exclude-libs: load check"]["status"] == "ok"
    assert attempts["exclude-libs: run"]["status"] == "ok"
    assert {"probe default+torch", "probe exclude-libs+torch"} <= set(attempts)
    assert doc["aoti"]["known"]["toolchain"].startswith("/opt/gcc/bin/g++")
    assert doc["aoti"]["recipe"] == ["exclude-libs", "aoti_load_package"]
    assert "exclude-libs" in doc["aoti"]["conclusion"]
    assert doc["schedule"]["quiet_from_s"] > 0
