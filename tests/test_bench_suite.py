"""The benchmark suite's pure-Python parts (benchmarks/suite*.py, timing.py, report.py): model
and bundle discovery, the results document, child processes, the timing helper's statistics,
report and README generation. The GPU measurements themselves run on the H200
(scripts/gpu-check suite); tests/test_suite_run.py runs the suite on the CPU."""
from __future__ import annotations

import json
import struct
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
import suite_aoti  # noqa: E402
import suite_models as sm  # noqa: E402
import suite_results as sr  # noqa: E402
import timing  # noqa: E402
from suite_aotpack import finite_random_bytes, parse_bench  # noqa: E402
from suite_proc import run_command  # noqa: E402


# ------------------------------------------------------------------------------- models

def test_default_models_are_the_core_ones_plus_those_with_a_bundle():
    core = sm.select_models(None, smoke=False)
    assert [m.name for m in core] == ["mlp-prefill", "mlp-decode", "llama-prefill", "llama-decode"]
    assert {m.bound for m in core if m.name.endswith("decode")} == {"memory"}
    bundled = sm.select_models(None, smoke=False, bundled={"vit-b16"})
    assert [m.name for m in bundled][-1] == "vit-b16" and len(bundled) == 5
    assert [m.name for m in sm.select_models(["gpt2"], smoke=False)] == ["gpt2"]
    smoke = sm.select_models(["mlp-decode", "gpt2"], smoke=True)
    assert [m.name for m in smoke] == ["mlp-decode"]  # extras have no CPU stand-in
    assert smoke[0].spec == "benchmarks/suite_models.py:smoke_mlp_decode"
    with pytest.raises(KeyError, match="unknown model"):
        sm.select_models(["nope"], smoke=False)


def _bundle_dir(root: Path, name: str, spec: str | None, label: str | None = None,
                build: dict | None = None) -> Path:
    d = root / name
    d.mkdir()
    (d / "model.aotpack").write_bytes(b"x")
    if spec is not None:
        (d / "spec.txt").write_text(spec + "\n")
    if label:
        (d / "label.txt").write_text(label)
    if build:
        (d / "build.json").write_text(json.dumps(build))
    return d


def test_discover_bundles_maps_spec_to_model_label_and_warns_about_the_rest(tmp_path):
    dirs = [_bundle_dir(tmp_path, "llama-prefill", "examples/llama_block.py:make"),
            _bundle_dir(tmp_path, "llama-prefill-tuned", "examples/llama_block.py:make",
                        label="tuned", build={"build_s": 41.5}),
            _bundle_dir(tmp_path, "mlp-dec", "examples/mlp.py:make_decode"),
            _bundle_dir(tmp_path, "odd", "examples/other.py:make"),
            _bundle_dir(tmp_path, "nospec", None)]
    found, warnings = sm.discover_bundles(dirs, list(sm.MODELS))
    got = {(b.model, b.label) for b in found}
    assert got == {("llama-prefill", "llama-prefill"), ("llama-prefill", "tuned"),
                   ("mlp-decode", "mlp-dec")}
    tuned = next(b for b in found if b.label == "tuned")
    assert tuned.build == {"build_s": 41.5} and tuned.bundle == dirs[1] / "model.aotpack"
    assert len(warnings) == 2
    assert any("examples/other.py:make" in w for w in warnings)
    assert any("nospec" in w for w in warnings)


def test_two_bundles_with_one_label_stay_two_rows(tmp_path):
    dirs = [_bundle_dir(tmp_path, "a", "examples/mlp.py:make", label="tuned"),
            _bundle_dir(tmp_path, "b", "examples/mlp.py:make", label="tuned")]
    found, warnings = sm.discover_bundles(dirs, list(sm.MODELS))
    assert [b.label for b in found] == ["tuned", "b"] and "taken" in warnings[0]


def test_bundles_from_manifest(tmp_path):
    _bundle_dir(tmp_path, "a", None)
    manifest = tmp_path / "bundles.json"
    manifest.write_text(json.dumps([{"model": "mlp-prefill", "label": "heur", "dir": "a"},
                                    {"model": "mlp-prefill", "dir": "missing"},
                                    {"model": "nope", "dir": "a"}]))
    found, warnings = sm.bundles_from_manifest(manifest, list(sm.MODELS))
    assert [(b.model, b.label, b.spec) for b in found] == [("mlp-prefill", "heur",
                                                             "examples/mlp.py:make")]
    assert len(warnings) == 2


def test_bundle_facts_read_the_manifest_without_torch_or_aotpack(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from handmade_bundle import write_handmade

    path = Path(write_handmade(tmp_path / "model.aotpack"))
    facts = sm.bundle_facts(path)
    assert facts["steps"] == 3 and facts["kernels"] == 2
    assert facts["artifact_bytes"] == path.stat().st_size
    assert sm.bundle_manifest(path)["arena_bytes"] == facts["arena_bytes"]


# ------------------------------------------------------------------------ results document

def test_new_row_has_every_field_and_failure_fields_validate():
    row = sr.new_row("m", "aoti")
    assert row["status"] == "pending" and row["notes"] == []
    assert all(k in row and row[k] is None for k in sr.ROW_FIELDS)
    assert sr.failure_fields("crash", "crash: SIGSEGV") == {"status": "crash",
                                                            "error": "crash: SIGSEGV"}
    with pytest.raises(AssertionError):
        sr.failure_fields("ok", "")


def test_results_file_keeps_failed_rows_and_skips_what_was_not_run(tmp_path):
    out = tmp_path / "r.json"
    res = sr.Results(out, {"date": "2026-12-01", "commit": "abc"})
    res.update("mlp-decode", "eager", status="ok", median_ms=0.1)
    res.update("mlp-decode", "aoti", status="crash", error="crash: SIGSEGV (rc -11)")
    res.row("mlp-decode", "compile")  # planned, never run
    res.finish_pending("skipped: not run")
    doc = sr.load(out)
    rows = {r["variant"]: r for r in doc["rows"]}
    assert rows["aoti"]["status"] == "crash" and "SIGSEGV" in rows["aoti"]["error"]
    assert rows["compile"]["status"] == "skipped" and rows["compile"]["error"]
    assert rows["eager"]["status"] == "ok"
    assert set(sr.ROW_FIELDS) <= set(rows["aoti"])
    assert not list(tmp_path.glob("*.tmp"))  # written atomically


def test_merge_keeps_the_earlier_rows_and_a_reset_row_starts_empty(tmp_path):
    first = tmp_path / "a.json"
    res = sr.Results(first, {"date": "d1", "commit": "c1", "command": "run 1"})
    res.doc["ceilings"] = {"gemm_tflops": 780.0}
    res.update("m", "eager", status="ok", median_ms=1.0, cold_start_s=5.0)
    res.update("m", "compile", status="timeout", error="timeout: killed after 240 s")
    again = sr.Results(tmp_path / "b.json", {"date": "d2", "commit": "c2", "command": "run 2"})
    again.merge(first, {"date": "d2", "commit": "c2", "command": "run 2"})
    again.reset("m", "compile")
    again.update("m", "compile", status="ok", median_ms=0.9)
    doc = sr.load(tmp_path / "b.json")
    rows = {r["variant"]: r for r in doc["rows"]}
    assert [r["variant"] for r in doc["rows"]] == ["eager", "compile"]  # in place
    assert rows["eager"]["cold_start_s"] == 5.0 and rows["compile"]["error"] is None
    assert doc["ceilings"]["gemm_tflops"] == 780.0 and doc["commit"] == "c2"
    assert [r["commit"] for r in doc["runs"]] == ["c1", "c2"]


def test_throughput_against_the_ceiling_of_the_models_bound():
    doc = {"ceilings": {"gemm_tflops": 800.0, "copy_gbps": 4000.0},
           "models": {"p": {"bound": "compute", "flops": 1.6e12, "bytes": 4e8},
                      "d": {"bound": "memory", "flops": 2e9, "bytes": 4e8}},
           "rows": [dict(sr.new_row("p", "eager"), median_ms=4.0),
                    dict(sr.new_row("d", "eager"), median_ms=0.2)]}
    sr.derive_throughput(doc)
    p, d = doc["rows"]
    assert p["tflops"] == 400.0 and p["ceiling_frac"] == 0.5
    assert d["gbps"] == 2000.0 and d["ceiling_frac"] == 0.5


# --------------------------------------------------------------------- child processes

def _run_py(tmp_path, code: str, timeout_s: float = 30, result: dict | None = None):
    rp = tmp_path / "result.json"
    if result is not None:
        rp.write_text(json.dumps(result))
    return run_command([sys.executable, "-c", code], env={}, timeout_s=timeout_s,
                       log_path=tmp_path / "log.txt", result_path=rp)


def test_a_segfault_is_a_crash_with_its_signal(tmp_path):
    res = _run_py(tmp_path, "import ctypes; print('stage: poking'); ctypes.string_at(0)")
    assert res.status == "crash" and "SIGSEGV" in res.error
    assert "stage: poking" in res.log_tail


def test_a_hang_is_a_timeout_and_its_whole_tree_is_killed(tmp_path):
    """A child that started a process of its own session (as a g++ may) leaves nothing."""
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, time; p = subprocess.Popen(['sleep', '60'], "
            f"start_new_session=True); open({str(pidfile)!r}, 'w').write(str(p.pid)); "
            "time.sleep(60)")
    t0 = time.monotonic()
    res = _run_py(tmp_path, code, timeout_s=2)
    assert res.status == "timeout" and "killed after 2 s" in res.error
    assert time.monotonic() - t0 < 20
    time.sleep(0.2)
    stat = Path(f"/proc/{pidfile.read_text()}/stat")
    assert not stat.exists() or stat.read_text().split()[2] == "Z"


def test_an_exception_is_an_error_with_its_message(tmp_path):
    res = _run_py(tmp_path, "raise SystemExit('no bundle here')")
    assert res.status == "error" and "no bundle here" in res.error
    res = _run_py(tmp_path, "pass", result={"error": "ValueError: bad shape"})
    assert res.status == "error" and res.error == "ValueError: bad shape"
    res = _run_py(tmp_path, "pass", result={"median_ms": 1.5})
    assert res.ok and res.result == {"median_ms": 1.5}


def test_a_child_learns_when_it_was_spawned(tmp_path):
    """SUITE_T0: a cold start counts the interpreter's start-up too."""
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            "from suite_measure import since_process_start as t; "
            f"json.dump({{'t': t()}}, open({str(tmp_path / 'result.json')!r}, 'w'))")
    res = _run_py(tmp_path, code)
    assert res.ok and 0 < res.result["t"] < 30


def test_parse_aotpack_run_bench_line():
    text = ("output out0 bf16 [8, 512, 4096] mean_abs=0.5 nonfinite=0\n"
            "aotpack-run: median_ms=1.5700 p10_ms=1.5600 p90_ms=1.6000 min_ms=1.5500 runs=200 "
            "warmup=20 graph=1\n")
    assert parse_bench(text) == {"median_ms": 1.57, "p10_ms": 1.56, "p90_ms": 1.6, "reps": 200}
    assert parse_bench("aotpack-run: error: no GPU") == {}


def test_random_input_bytes_are_finite_and_not_zero():
    data = finite_random_bytes("bf16", 2 * 4096)
    values = [struct.unpack("<f", b"\0\0" + data[i:i + 2])[0] for i in range(0, len(data), 2)]
    assert all(abs(v) < 2 for v in values) and any(v != 0 for v in values)
    assert finite_random_bytes("i64", 16) == bytes(16)


# ------------------------------------------------------------------------------- timing

def test_timing_summary_is_the_median_and_the_10th_and_90th_percentiles():
    s = timing.summary([float(x) for x in range(1, 12)], reps=11)
    assert (s["median_ms"], s["p10_ms"], s["p90_ms"], s["min_ms"]) == (6.0, 2.0, 10.0, 1.0)
    assert s["reps"] == 11
    assert timing.summary([1.0, 2.0, 3.0, 4.0])["median_ms"] == 2.5


def test_timing_bench_on_the_cpu_calls_warmup_plus_reps_times():
    calls = []
    res = timing.bench(lambda: calls.append(time.sleep(0.001)), reps=7, warmup=3, device="cpu")
    assert len(calls) == 10 and res["reps"] == 7 and res["flush_l2"] is False
    assert 1.0 <= res["p10_ms"] <= res["median_ms"] <= res["p90_ms"] < 100


# -------------------------------------------------------------------------------- AOTI

def test_exclude_libs_wrapper_adds_the_flag_to_links_only(tmp_path):
    wrapper = suite_aoti.make_wrapper(tmp_path, "echo")
    link = subprocess.run([str(wrapper), "-shared", "a.o", "-o", "a.so"], capture_output=True,
                          text=True).stdout
    compile_ = subprocess.run([str(wrapper), "-c", "a.cpp"], capture_output=True, text=True).stdout
    assert link.split() == ["-shared", "a.o", "-o", "a.so", "-Wl,--exclude-libs,ALL"]
    assert compile_.split() == ["-c", "a.cpp"]
    assert wrapper.name == "g++"  # Inductor recognizes gcc by its name


# ------------------------------------------------------------------------------ report

def sample_doc() -> dict:
    res = sr.Results(None, {"date": "2026-12-01", "commit": "abc1234"})
    res.doc["ceilings"] = {"gpu": "NVIDIA H200", "sm_count": 132, "torch": "2.11.0",
                           "gemm_tflops": 790.0, "copy_gbps": 4300.0}
    res.doc["models"] = {"mlp-prefill": {"bound": "compute", "flops": 1.1e12, "bytes": 4e8,
                                         "note": "8x512"},
                         "gpt2": {"bound": "compute", "flops": 1e11, "bytes": 3e8}}
    up = res.update
    up("mlp-prefill", "eager", status="ok", median_ms=1.69, cold_start_s=6.1)
    up("mlp-prefill", "compile", status="ok", median_ms=1.60, build_s=14.6)
    up("mlp-prefill", "compile-max-autotune", status="timeout", error="timeout: killed after 300 s")
    up("mlp-prefill", "aoti", status="crash", error="crash: SIGSEGV (rc -11)")
    up("mlp-prefill", "aotpack-run", "heuristic", status="ok", median_ms=1.57, cold_start_s=0.9)
    up("mlp-prefill", "aotpack-run", "tuned", status="ok", median_ms=1.44, cold_start_s=0.9)
    up("mlp-prefill", "aotpack-py", "tuned", status="ok", median_ms=1.46)
    up("gpt2", "eager", status="ok", median_ms=2.0)
    up("gpt2", "aotpack-run", status="unsupported",
       error="unsupported: TranslateError: no IR op for aten.embedding")
    res.doc["aoti"]["conclusion"] = "Working recipe: exclude-libs."
    return res.doc


def test_latency_table_bolds_the_best_and_compares_with_the_best_peer():
    doc = sample_doc()
    table = report.latency_table(doc)
    line = next(ln for ln in table.splitlines() if ln.startswith("| mlp-prefill"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:5] == ["1.69", "1.60", "timeout", "crash"]
    assert cells[5] == "**1.44 (tuned)**"  # best of the two aotpack-run bundles
    assert cells[7] == f"{1.44 / 1.60:.2f}× (torch.compile)"
    assert cells[8] == f"{100 * 1.1e12 / 1.44e-3 / 1e12 / 790:.0f}%"
    gpt2 = next(ln for ln in table.splitlines() if ln.startswith("| gpt2"))
    assert "unsupported" in gpt2


def test_cold_start_table_takes_the_bundle_whose_cold_start_was_measured():
    """The scheduled suite measured one cold start per model: when the fastest bundle is
    another one, its model's cell shows the measured one, not a dash."""
    doc = sample_doc()
    for r in doc["rows"]:
        if (r["model"], r["variant"], r["label"]) == ("mlp-prefill", "aotpack-run", "tuned"):
            r["cold_start_s"] = None
    line = next(ln for ln in report.cold_table(doc).splitlines() if ln.startswith("| mlp-prefill"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "6.1 s" and cells[5] == "0.9 s" and cells[6] == "—"


def test_every_failure_is_listed_with_its_error():
    text = report.failures(sample_doc())
    assert "mlp-prefill / aoti: crash: SIGSEGV" in text
    assert "mlp-prefill / compile-max-autotune: timeout" in text
    assert "gpt2 / aotpack-run: unsupported: TranslateError" in text
    assert "mlp-prefill / eager" not in text


def test_doc_section_is_replaced_between_the_markers_only(tmp_path):
    import doc_tables

    results = tmp_path / "x.json"
    results.write_text(json.dumps(sample_doc()))
    doc = tmp_path / "perf.md"
    doc.write_text("# title\nbefore\n<!-- bench:begin -->\nold table\n<!-- bench:end -->\nafter\n")
    doc_tables.update(doc, "bench", [results])
    text = doc.read_text()
    assert text.startswith(f"# title\nbefore\n<!-- bench:begin {results} -->\n")
    assert text.endswith("<!-- bench:end -->\nafter\n")
    assert "old table" not in text and "NVIDIA H200" in text and "790.0 TFLOP/s" in text
    assert "Working recipe: exclude-libs." in text and "](x.json)" in text
    assert "![latency" not in text  # no chart beside the JSON
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    with pytest.raises(SystemExit, match="bench:begin"):
        doc_tables.update(plain, "bench", [results])


def test_chart_data_is_relative_to_the_best_peer_and_marks_missing_numbers():
    names, series = report.chart_data(sample_doc())
    assert names == ["mlp-prefill", "gpt2"]
    assert series["compile"][0] == 1.0
    assert series["aotpack-run"][0] == pytest.approx(1.44 / 1.60)
    assert series["aoti"][0] is None and series["aotpack-run"][1] is None


def test_report_cli_writes_png_and_doc(tmp_path):
    pytest.importorskip("matplotlib")
    results = tmp_path / "r.json"
    results.write_text(json.dumps(sample_doc()))
    doc = tmp_path / "performance.md"
    doc.write_text("x\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    png = tmp_path / "r.png"
    assert report.main([str(results), "--doc", str(doc), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](r.json)" in doc.read_text() and "](r.png)" in doc.read_text()


def test_a_document_says_how_it_was_measured_and_old_ones_keep_their_text():
    doc = sample_doc()
    old = report.render_markdown(doc)
    assert report.OLD_TIMING in old and report.OLD_AOTI_COLD in old
    doc["method"] = {"timing": "Timed somehow.", "cold_start": "a loader"}
    new = report.render_markdown(doc)
    assert "Timed somehow." in new and "AOTInductor: Python's a loader):" in new
    assert report.OLD_TIMING not in new
