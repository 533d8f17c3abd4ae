"""Offline tuning on the host (docs/tuning.md): job folders, keys, the database, builds that
use it, reproducibility. Measuring needs a GPU (`aotpack-run --tune`, ctest covers the launcher
with a fake driver); results are written here the way the launcher writes them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("triton")

from aotpack.builder import build  # noqa: E402
from aotpack.shared_steps import BuildError  # noqa: E402
from aotpack.bundle import read_bundle  # noqa: E402
from aotpack.dtypes import DType  # noqa: E402
from aotpack.tuning import keys, space  # noqa: E402
from aotpack.tuning.db import TuningDB, TuningDBError  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tuning")
    (d / "small.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nimport mlp\n\n"
        "def make():\n    return mlp.make(d=64, f=256, batch=2, seq=64)\n")
    return d


@pytest.fixture(scope="module")
def job_run(workdir):
    """A `fast` Triton job of a small MLP (two GEMM problems), compiled once per module in this
    process; with the environment variables the call left changed."""
    import os

    from aotpack.tuning.job import make_job

    mp = pytest.MonkeyPatch()
    mp.setenv("AOTPACK_CACHE_DIR", str(workdir / "cache"))
    mp.delenv("TRITON_CACHE_DIR", raising=False)
    # torch sets TORCHINDUCTOR_CACHE_DIR when torch._dynamo is first imported (torch.export
    # imports it): imported first, so that what changes below is aotpack's doing
    import torch._dynamo  # noqa: F401

    try:
        before = dict(os.environ)
        summary = make_job(f"{workdir / 'small.py'}:make", workdir / "job.aotune", level="fast",
                           gemm_backend="triton", jobs=1, progress=False)
        changed = {k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k)}
    finally:
        mp.undo()
    return summary, json.loads((workdir / "job.aotune" / "job.json").read_text()), changed


@pytest.fixture(scope="module")
def job(job_run):
    return job_run[:2]


def test_tune_leaves_the_environment_alone(job_run):
    """Compiling the candidates in this process (jobs=1) changed no environment variable (it
    used to set TRITON_CACHE_DIR and CUTE_DSL_DUMP_DIR for the rest of the process)."""
    assert job_run[2] == set()


def fake_results(job_doc: dict, winner: dict[int, int], *, driver=13000, name="NVIDIA H200",
                 fail_all: int | None = None) -> dict:
    """What `aotpack-run --tune` writes: candidate `winner[p]` of problem p is the fastest."""
    problems = []
    for pi, p in enumerate(job_doc["problems"]):
        cands = []
        for ci, c in enumerate(p["candidates"]):
            ok = fail_all != pi
            cands.append({"name": c["name"], "config": c["config"],
                          "status": "ok" if ok else "wrong",
                          "median_us": 10.0 if ci == winner.get(pi) else 20.0 + ci,
                          "p10_us": 9.0, "p90_us": 30.0, "rel_err": 0.001, "message": ""})
        problems.append({"key": p["key"], "desc": p["desc"], "info": p["info"],
                         "candidates": cands})
    return {"format": "aotpack-tuning-results", "version": 1, "job_id": job_doc["job_id"],
            "device": {"name": name, "cc": [9, 0], "sm_count": 132, "driver": driver},
            "runtime": "0.1.0", "settings": job_doc["settings"], "problems": problems}


def test_job_folder_holds_one_op_bundles_heuristic_first(job, workdir):
    summary, doc = job
    assert doc["format"] == "aotpack-tuning-job" and doc["version"] == 1
    assert summary.problems == len(doc["problems"]) == 2  # fc1 (bias+gelu) and fc2 (bias)
    from aotpack.kernels.triton import gemm
    from aotpack.tuning.job import find_problems  # noqa: F401 — the module under test

    keys = [p["key"] for p in doc["problems"]]
    assert len(set(keys)) == len(keys)
    for p in doc["problems"]:
        assert p["reference"] == 0 and len(p["candidates"]) >= 2 and p["rtol"] == 0.02
        names = {c["name"] for c in p["candidates"]}
        assert len(names) == len(p["candidates"])
        sigs = set()
        for c in p["candidates"]:
            b = read_bundle(workdir / "job.aotune" / c["bundle"], checksums=True)
            m = b.manifest
            assert m["weights"] == [] and len(m["outputs"]) == 1
            sigs.add(json.dumps([m["inputs"], m["outputs"]], sort_keys=True))
            assert m["kernels"][0]["config"]["BM"] == c["config"]["BM"]
        assert len(sigs) == 1  # every candidate of a problem has the same signature
    # the reference is the config a build without tuning data compiles
    first = doc["problems"][0]["candidates"][0]["config"]
    assert first["template"] == "gemm.triton"
    M = int(doc["problems"][0]["desc"].split("M=")[1].split()[0])
    assert M == 128
    del gemm


def test_keys_ignore_storage_names_but_not_shapes():
    from aotpack.shared_steps import canonical
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import SM90, GemmOp, contiguous
    from aotpack.tuning import keys, space

    def op(m, names=("x", "w", "y")):
        return GemmOp(contiguous(names[0], DType.BF16, (m, 64)),
                      contiguous(names[1], DType.BF16, (128, 64)),
                      contiguous(names[2], DType.BF16, (m, 128)))

    fam = space.family(op(16))

    def key(o):
        return keys.problem_keys(canonical(o)[0], SM90, fam.template, fam.sources)

    assert key(op(16)) == key(op(16, ("a", "b", "c")))
    assert key(op(16))[0] != key(op(32))[0] and key(op(16))[1] != key(op(32))[1]
    other_sm = keys.problem_keys(canonical(op(16))[0], SM90.__class__(sm_count=114),
                                 fam.template, fam.sources)
    assert other_sm[0] != key(op(16))[0]


def _gemm_op(m=256):
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import GemmOp, contiguous

    return GemmOp(contiguous("x", DType.BF16, (m, 256)), contiguous("w", DType.BF16, (256, 256)),
                  contiguous("y", DType.BF16, (m, 256)))


def test_keys_do_not_depend_on_cutedsl(monkeypatch):
    """Triton kernels are keyed on the toolchain that compiles them: another CuTeDSL version
    (or none) keeps every key (on a plain install no record matched before session 8)."""
    from aotpack import shared_steps
    from aotpack.kernels.spec import SM90
    from aotpack.shared_steps import canonical

    fam = space.family(_gemm_op())

    def key():
        keys.toolchain.cache_clear()
        return keys.problem_keys(canonical(_gemm_op())[0], SM90, fam.template, fam.sources)

    before, real = key(), shared_steps.package_version
    monkeypatch.setattr(shared_steps, "package_version",
                        lambda d: "0.0-other" if d == "nvidia-cutlass-dsl" else real(d))
    try:
        assert key() == before
        assert keys.backend_toolchain("gemm.cutedsl") == {"cutedsl": "0.0-other"}
        assert keys.backend_toolchain("gemm.triton") == {}
    finally:
        keys.toolchain.cache_clear()


@pytest.mark.parametrize("compiled_by", ["here", "other"])
def test_a_cutedsl_winner_is_used_only_with_the_cutedsl_that_compiled_it(compiled_by):
    """The CuTeDSL version is recorded with a CuTeDSL winner (from the job's problem info,
    echoed by the launcher) and a build uses that winner only where the same version would
    compile it; otherwise the op is stale and gets the heuristic."""
    from aotpack.kernels.cutedsl import build as cute_build
    from aotpack.kernels.spec import SM90
    from aotpack.kernels.templates import template_for
    from aotpack.shared_steps import canonical
    from aotpack.tuning.apply import TunedChooser

    if not cute_build.available():
        pytest.skip("nvidia-cutlass-dsl (CuTeDSL) is not installed")
    op = canonical(_gemm_op())[0]
    template = template_for(op)
    key, shape_key = keys.problem_keys(op, SM90, template.name, template.sources)
    here = keys.backend_toolchain("gemm.cutedsl")
    version = here if compiled_by == "here" else {"cutedsl": "0.0-other"}
    cute = {"template": "gemm.cutedsl", "tile_m": 128, "tile_n": 128, "cluster_m": 1,
            "cluster_n": 1, "raster_along_m": True, "swizzle": 1}
    triton = template.default_config(op, SM90, "triton")
    results = {"format": "aotpack-tuning-results", "version": 1, "job_id": "j",
               "device": {"name": "NVIDIA H200", "driver": 13000}, "problems": [{
                   "key": key, "desc": "gemm", "info": {"shape_key": shape_key,
                                                       "toolchain": {"gemm.cutedsl": version}},
                   "candidates": [
                       {"name": "triton", "config": triton, "status": "ok", "median_us": 20.0},
                       {"name": "cute", "config": cute, "status": "ok", "median_us": 10.0}]}]}
    db = TuningDB()
    db.import_results(results)
    assert db.lookup(key)["winner"]["toolchain"] == version
    chooser = TunedChooser(db, SM90)
    got = chooser(op, template)
    if compiled_by == "here":
        assert got == cute and not chooser.stale
    else:
        assert got == template.default_config(op, SM90, "triton") and chooser.stale == {key}


def test_a_gemm_fused_with_its_norm_uses_the_gemms_record():
    """A GemmNormOp (a GEMM and the RMSNorm of its output) has a key of its own; without a
    record of its own it takes the plain GEMM's winner (records measured before the fusion)."""
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import SM90, GemmNormOp, RMSNormOp, contiguous
    from aotpack.kernels.templates import template_for
    from aotpack.shared_steps import canonical
    from aotpack.tuning.apply import TunedChooser

    gemm = canonical(_gemm_op())[0]
    norm = RMSNormOp(gemm.out, None, contiguous("y", DType.BF16, gemm.out.shape), 1e-5)
    fused = GemmNormOp(gemm, norm)
    g_t, f_t = template_for(gemm), template_for(fused)
    key = keys.problem_keys(gemm, SM90, g_t.name, g_t.sources)[0]
    assert keys.problem_keys(fused, SM90, f_t.name, f_t.sources)[0] != key
    winner = dict(g_t.default_config(gemm, SM90, "triton"), num_stages=2)
    results = {"format": "aotpack-tuning-results", "version": 1, "job_id": "j",
               "device": {"name": "NVIDIA H200", "driver": 13000}, "problems": [{
                   "key": key, "desc": "gemm", "info": {"shape_key": "s"},
                   "candidates": [{"name": "w", "config": winner, "status": "ok",
                                   "median_us": 10.0}]}]}
    db = TuningDB()
    db.import_results(results)
    assert TunedChooser(db, SM90)(fused, f_t) == winner


def test_job_records_the_compilers_of_the_backends_it_compiled(job):
    """Problem info (echoed by the launcher) names CuTeDSL's version where a CuTeDSL candidate
    is in the job, and nothing more for Triton's (in the key)."""
    from aotpack.tuning.job import Problem, _problem_info

    _, doc = job  # a Triton job
    assert all(set(p["info"]) == {"shape_key"} for p in doc["problems"])
    cands = [{"template": "gemm.triton", "BM": 128}, {"template": "gemm.cutedsl", "tile_m": 128}]
    p = Problem("k", "s", "gemm", "", None, {}, cands)
    assert _problem_info(p, [0]) == {"shape_key": "s"}
    assert _problem_info(p, [0, 1]) == {
        "shape_key": "s", "toolchain": {"gemm.cutedsl": keys.backend_toolchain("gemm.cutedsl")}}


def test_import_build_uses_the_winner_and_records_it(job, workdir):
    _, doc = job
    db_path = workdir / "db1.json"
    db = TuningDB()
    added, notes = db.import_results(fake_results(doc, {0: 2, 1: 1}))
    assert added == 2 and notes == []
    db.save(db_path)
    spec = f"{workdir / 'small.py'}:make"
    plain = build(spec, workdir / "plain", progress=False, command_line="t")
    tuned = build(spec, workdir / "tuned", progress=False, command_line="t", tuning_db=db_path)
    assert any("2 of 2 tunable kernel ops" in w for w in tuned.notes)
    kp = read_bundle(plain.bundle).manifest
    kt = read_bundle(tuned.bundle).manifest
    fields = ("BM", "BN", "BK", "num_warps", "num_stages", "EPI_SPLIT")

    def tile(cfg):
        return tuple(cfg.get(f) for f in fields)

    winners = [doc["problems"][0]["candidates"][2]["config"],
               doc["problems"][1]["candidates"][1]["config"]]
    heuristics = [p["candidates"][0]["config"] for p in doc["problems"]]
    assert [tile(c) for c in winners] != [tile(c) for c in heuristics]
    gemm_configs = [k["config"] for k in kt["kernels"] if "BM" in k["config"]]
    plain_configs = [k["config"] for k in kp["kernels"] if "BM" in k["config"]]
    assert sorted(map(tile, gemm_configs)) == sorted(map(tile, winners))
    assert sorted(map(tile, plain_configs)) == sorted(map(tile, heuristics))
    recs = kt["provenance"]["tuning"]["records"]
    assert [r["winner"] for r in recs] == [doc["problems"][0]["candidates"][2]["name"],
                                          doc["problems"][1]["candidates"][1]["name"]]
    assert recs[0]["median_us"] == 10.0 and recs[0]["device"] == "NVIDIA H200"
    assert "tuning" not in kp["provenance"]
    from aotpack.cli.main import app

    shown = CliRunner().invoke(app, ["inspect", str(tuned.bundle)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "tuned kernels (measured winners)" in shown.output
    assert "NVIDIA H200 (driver 13000)" in shown.output and "10.0" in shown.output


def test_tuned_build_is_byte_reproducible(job, workdir):
    _, doc = job
    db_path = workdir / "db2.json"
    db = TuningDB()
    db.import_results(fake_results(doc, {0: 1, 1: 2}))
    db.save(db_path)
    spec = f"{workdir / 'small.py'}:make"
    a = build(spec, workdir / "r1", progress=False, command_line="t", tuning_db=db_path)
    b = build(spec, workdir / "r2", progress=False, command_line="t", tuning_db=db_path)
    assert a.bundle.read_bytes() == b.bundle.read_bytes()
    db.save(workdir / "db2-again.json")
    assert (workdir / "db2-again.json").read_bytes() == db_path.read_bytes()


def test_stale_records_are_ignored_with_a_message(job, workdir):
    _, doc = job
    db = TuningDB()
    db.import_results(fake_results(doc, {0: 1, 1: 1}))
    for i, rec in enumerate(db.records.values()):  # as if measured with other kernel sources
        rec["key"] = f"{i:064x}"
    db_path = workdir / "stale.json"
    db.save(db_path)
    res = build(f"{workdir / 'small.py'}:make", workdir / "stale-out", progress=False,
                command_line="t", tuning_db=db_path)
    assert any("0 of 2 tunable" in w for w in res.notes)
    assert any("2 op(s) have only stale records" in w for w in res.notes)


def test_databases_merge_across_machines(job):
    _, doc = job
    a, b = TuningDB(), TuningDB()
    a.import_results(fake_results(doc, {0: 1, 1: 1}, driver=12080, name="NVIDIA H100"))
    b.import_results(fake_results(doc, {0: 2, 1: 2}, driver=13000))
    a.merge(b)
    assert len(a.records) == 4  # same keys, two machines: kept side by side
    key = doc["problems"][0]["key"]
    assert a.lookup(key)["device"]["driver"] == 13000  # newest driver first
    # re-measuring on the same machine replaces its record
    a.import_results(fake_results(doc, {0: 3, 1: 3}, driver=13000))
    assert len(a.records) == 4
    assert a.lookup(key)["winner"]["name"] == doc["problems"][0]["candidates"][3]["name"]


def test_problem_without_a_passing_candidate_gets_no_record(job):
    _, doc = job
    db = TuningDB()
    added, notes = db.import_results(fake_results(doc, {0: 1, 1: 1}, fail_all=1))
    assert added == 1 and len(notes) == 1 and "no candidate passed" in notes[0]


def test_bad_files_are_refused_clearly(tmp_path, job):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(TuningDBError, match="not an aotpack tuning database"):
        TuningDB.load(bad)
    with pytest.raises(TuningDBError, match="not an aotpack-run --tune results file"):
        TuningDB().import_results({"format": "x"})
    with pytest.raises(BuildError, match="no such file"):
        build("examples/mlp.py:make", tmp_path / "o", tuning_db=tmp_path / "missing.json",
              progress=False)


def test_cli_tune_import_and_usage_errors(job, workdir, tmp_path):
    from aotpack.cli.main import app

    _, doc = job
    res_path = tmp_path / "results.json"
    res_path.write_text(json.dumps(fake_results(doc, {0: 1, 1: 1})))
    runner = CliRunner()
    r = runner.invoke(app, ["tune", "--import", str(res_path), "--db", str(tmp_path / "db.json")])
    assert r.exit_code == 0, r.output
    assert "imported 2 winners" in r.output
    assert len(TuningDB.load(tmp_path / "db.json").records) == 2
    r = runner.invoke(app, ["tune", "--import", str(res_path)])
    assert r.exit_code == 2 and "--import needs --db" in r.output
    # a second file after the first is the positional MODEL: refused, not dropped
    r = runner.invoke(app, ["tune", "--import", str(res_path), str(res_path), "--db",
                            str(tmp_path / "db2.json")])
    assert r.exit_code == 2 and "repeat the option" in " ".join(r.output.split())
    assert not (tmp_path / "db2.json").exists()
    r = runner.invoke(app, ["tune", "examples/mlp.py:make"])
    assert r.exit_code == 2 and "-o JOB_FOLDER" in r.output


def test_build_tune_without_a_gpu_says_what_to_do(tmp_path, monkeypatch):
    from aotpack.tuning import measure

    monkeypatch.setattr(measure, "gpu_count", lambda: 0)
    with pytest.raises(BuildError, match="aotpack-run --tune` on the target"):
        build("examples/mlp.py:make", tmp_path / "o", tune="fast", progress=False)


def test_fast_level_keeps_the_heuristic_and_trims_the_rest():
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import SM90, GemmOp, contiguous
    from aotpack.tuning import space

    op = GemmOp(contiguous("a", DType.BF16, (2048, 4096)), contiguous("b", DType.BF16, (4096, 4096)),
                contiguous("c", DType.BF16, (2048, 4096)))
    full = space.candidates(op, SM90, level="full", gemm_backend="triton")
    fast = space.candidates(op, SM90, level="fast", gemm_backend="triton")
    assert fast[0] == full[0] and len(fast) < len(full) and set(map(str, fast)) <= set(map(str, full))
    with pytest.raises(ValueError, match="unknown tuning level"):
        space.candidates(op, SM90, level="medium")


def test_partial_rerun_adds_to_the_full_run(job):
    """A re-run of only the candidates that failed (same machine) combines with the full run:
    the re-measured candidate can win, and a `skipped` one never erases a measurement."""
    from aotpack.tuning.db import combine_results

    _, doc = job
    full = fake_results(doc, {0: 1, 1: 1})
    victim = full["problems"][0]["candidates"][3]
    victim.update(status="error", median_us=None, message="entry not in cubin")
    rerun = fake_results(doc, {0: 3, 1: 1})
    for p in rerun["problems"]:
        for i, c in enumerate(p["candidates"]):
            if i not in (0, 3):
                c.update(status="skipped", median_us=None)
    rerun["problems"][0]["candidates"][3]["median_us"] = 5.0
    merged = combine_results([full, rerun])
    assert len(merged) == 1
    db = TuningDB()
    db.import_results(merged[0])
    assert db.lookup(doc["problems"][0]["key"])["winner"]["median_us"] == 5.0
    assert db.lookup(doc["problems"][1]["key"])["winner"]["name"] == \
        doc["problems"][1]["candidates"][1]["name"]  # from the full run, not erased
    other = fake_results(doc, {0: 2, 1: 2}, name="NVIDIA H100")
    assert len(combine_results([full, other])) == 2


def test_build_tune_runs_job_measure_import_build(workdir, monkeypatch, tmp_path):
    """`build --tune fast` on a machine with a GPU: job → launcher → database → build. The
    launcher is replaced by a stand-in that answers like `aotpack-run --tune` (last candidate
    fastest); the build must compile those winners and keep the database beside the output."""
    from aotpack.tuning import measure

    calls = []

    def fake_run_job(job, results, *, budget_s=None, device=0, extra=None):
        calls.append(budget_s)
        doc = json.loads((Path(job) / "job.json").read_text())
        last = {i: len(p["candidates"]) - 1 for i, p in enumerate(doc["problems"])}
        Path(results).write_text(json.dumps(fake_results(doc, last)))
        return Path(results)

    monkeypatch.setattr(measure, "gpu_count", lambda: 1)
    monkeypatch.setattr(measure, "run_job", fake_run_job)
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(workdir / "cache"))
    out = tmp_path / "tuned"
    res = build(f"{workdir / 'small.py'}:make", out, tune="fast", tune_budget_s=60,
                progress=False, command_line="t", gemm_backend="triton")
    assert calls == [60]
    db_path = tmp_path / "tuned.tuning.json"
    assert db_path.is_file() and len(TuningDB.load(db_path).records) == 2
    assert any("tuned 2 kernel problems" in n for n in res.notes)
    recs = read_bundle(res.bundle).manifest["provenance"]["tuning"]["records"]
    assert len(recs) == 2 and all(r["median_us"] == 10.0 for r in recs)
    assert not any(p.name.startswith(".aotpack-tune.") for p in tmp_path.iterdir())


def test_cli_import_of_bad_files_is_a_one_line_error(tmp_path, job):
    """Unreadable, foreign or malformed results/databases and unusable --db paths: exit 1
    with `error: <file>: why`, never a traceback (TuningDBError was not a user error)."""
    from aotpack.cli.main import app

    _, doc = job
    good = tmp_path / "results.json"
    good.write_text(json.dumps(fake_results(doc, {0: 1, 1: 1})))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nokey.json").write_text(json.dumps(
        {"format": "aotpack-tuning-results", "version": 1, "problems": [{"desc": "x"}]}))
    (tmp_path / "baddb.json").write_text(json.dumps(
        {"format": "aotpack-tuning-db", "version": 1, "records": [{}]}))
    db = str(tmp_path / "db.json")
    cases = [([str(tmp_path / "missing.json"), db], "cannot read results"),
             ([str(tmp_path / "list.json"), db], "not an aotpack-run --tune results file"),
             ([str(tmp_path / "nokey.json"), db], "malformed results"),
             ([str(good), str(tmp_path / "baddb.json")], "records[0] lacks a key"),
             ([str(good), str(good / "db.json")], "File exists")]  # a file as --db's folder
    for (res, dbp), words in cases:
        r = CliRunner().invoke(app, ["tune", "--import", res, "--db", dbp])
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (res, r.exception)
        assert "error:" in r.output and words in " ".join(r.output.split()), r.output


def test_build_tune_refuses_a_bad_database_before_measuring(tmp_path, monkeypatch):
    """A --tuning-db that is not a database is refused before the GPU time is spent (it used
    to be read after measuring, the results lost with the temporary job, and a traceback)."""
    from aotpack.tuning import measure

    calls = []
    monkeypatch.setattr(measure, "gpu_count", lambda: 1)
    monkeypatch.setattr(measure, "run_job", lambda *a, **k: calls.append(a))
    bad = tmp_path / "results-not-db.json"
    bad.write_text('{"format": "aotpack-tuning-results", "version": 1}')
    with pytest.raises(BuildError, match="not an aotpack tuning database"):
        build("examples/mlp.py:make", tmp_path / "o", tune="fast", tuning_db=bad,
              progress=False)
    assert calls == []


def test_tune_refuses_an_unknown_gemm_backend(tmp_path):
    """An unknown --gemm-backend gave no GEMM any candidate: an empty job, 'written'."""
    from aotpack.tuning.job import make_job

    with pytest.raises(BuildError, match="--gemm-backend 'cublas'"):
        make_job("examples/mlp.py:make", tmp_path / "j.aotune", gemm_backend="cublas",
                 progress=False)
    assert not (tmp_path / "j.aotune").exists()


def test_cutedsl_is_imported_for_sm90a_with_the_environment_put_back(tmp_path):
    """import_cutlass gives CuTeDSL its settings while cutlass imports and puts the environment
    back; its dump folder is the process's own (not one inherited from a parent: processes
    sharing one read each other's cubins) and goes when the process ends (they piled up in
    /tmp, one per worker per `aotpack tune`)."""
    import os
    import subprocess
    import sys

    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        pytest.skip("nvidia-cutlass-dsl (CuTeDSL) is not installed")
    code = ("import os; before = dict(os.environ); "
            "from aotpack.kernels.cutedsl import build; d = build.import_cutlass(); "
            "from cutlass.cutlass_dsl import CuTeDSL; e = CuTeDSL._get_dsl().envar; "
            "assert dict(os.environ) == before, 'the environment changed'; "
            "assert (e.arch, e.dump_dir, e.keep_ptx, e.keep_cubin) == ('sm_90a', d, True, True); "
            "open(os.path.join(d, 'x.cubin'), 'w'); print(d)")
    inherited = tmp_path / "parent_dump"
    env = dict(os.environ, CUTE_DSL_DUMP_DIR=str(inherited))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr[-2000:]
    folder = Path(p.stdout.strip().splitlines()[-1])
    assert folder.name.startswith("aotpack_cute_") and not folder.exists()
    assert not inherited.exists()


def test_separate_import_of_a_partial_rerun_keeps_the_better_winner(job):
    """Imported on its own (not combined in one --import), a re-run that skipped the old
    winner keeps it when it is faster; a re-run that measured it again replaces it."""
    _, doc = job
    db = TuningDB()
    db.import_results(fake_results(doc, {0: 1, 1: 1}))  # candidate 1 wins at 10 us
    key = doc["problems"][0]["key"]
    old_winner = db.lookup(key)["winner"]["name"]
    rerun = fake_results(doc, {0: 3, 1: 3})
    for p in rerun["problems"]:
        for i, c in enumerate(p["candidates"]):
            if i not in (0, 3):
                c.update(status="skipped", median_us=None)
        p["candidates"][3]["median_us"] = 15.0  # slower than the old winner
    db.import_results(rerun)
    assert db.lookup(key)["winner"]["name"] == old_winner
    again = fake_results(doc, {0: 2, 1: 2})  # a full run: measured the old winner again
    db.import_results(again)
    assert db.lookup(key)["winner"]["name"] == doc["problems"][0]["candidates"][2]["name"]


def test_small_kernel_candidates_compute_the_same_as_the_reference():
    """Every tuning candidate of RMSNorm, RoPE, LayerNorm, softmax and a reduction (other rows
    per program, other warps) is a correct kernel: run in Triton's interpreter against the
    torch reference, ragged shapes, output poisoned first."""
    import torch

    from aotpack.kernels.spec import SM90
    from support.interpret import run_interpreted_batch
    from aotpack.tuning import space
    from test_kernels_misc import expected, make_env, rmsnorm_case, rope_case, run_reference_view
    from test_reductions import layernorm_case, reduce_case, softmax_case

    ops = [rmsnorm_case(37, 96), rmsnorm_case(5, 1000), rope_case(2, 3, 37, 64),
           layernorm_case(7, 300), softmax_case(9, 130), reduce_case("sum", 6, 200)]
    jobs, refs, names = [], [], []
    for i, op in enumerate(ops):
        cands = space.candidates(op, SM90)
        assert space.family(op) is not None and len(cands) >= 3
        for c in cands[1:]:
            env = make_env(op, seed=i)
            refs.append(expected(op, env))
            jobs.append((op, env, {k: v for k, v in c.items() if k != "template"}))
            names.append(space.candidate_name(c))
    run_interpreted_batch(jobs)
    for name, (op, env, _), ref in zip(names, jobs, refs):
        got = run_reference_view(op, env)
        assert not torch.isnan(got).any(), name
        assert ((got - ref).norm() / ref.norm()).item() <= 2e-2, name
    # the first candidate is the template's default: same cubin as a build without tuning
    op = ops[0]
    from aotpack.kernels import compile as default_compile

    first = space.compile_candidate(op, SM90, space.candidates(op, SM90)[0])
    assert first[0].kernel.cubin == default_compile(op, SM90)[0].kernel.cubin


def test_cutedsl_candidates_vary_tile_cluster_and_raster():
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        pytest.skip("nvidia-cutlass-dsl is not installed")
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import SM90, GemmOp, contiguous
    from aotpack.tuning import space

    op = GemmOp(contiguous("a", DType.BF16, (2048, 4096)), contiguous("b", DType.BF16, (4096, 4096)),
                contiguous("c", DType.BF16, (2048, 4096)))
    cands = space.candidates(op, SM90, gemm_backend="cutedsl")
    assert all(c["template"] == "gemm.cutedsl" for c in cands)
    seen = {(c["tile_m"], c["tile_n"], c["cluster_m"], c["cluster_n"], c["raster_along_m"])
            for c in cands}
    assert len(seen) == len(cands)
    assert (128, 256, 1, 1, False) in seen and (128, 128, 2, 1, True) in seen
    assert not any(c["tile_n"] == 64 for c in cands)  # narrow tiles are for decode-sized M


def test_cutedsl_candidates_add_narrow_tiles_for_decode_sized_m():
    """M <= 128: 64-wide tiles put twice the CTAs on the weight stream (on the H200 64x64 beat
    64x128 by 12-15 % at M=128, benchmarks/results/2026-11-30-h200-gemm-rotate.json); SwiGLU
    ops keep tiles that hold whole gate/up pairs."""
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        pytest.skip("nvidia-cutlass-dsl is not installed")
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import SM90, EpSwiGLU, GemmOp, contiguous
    from aotpack.tuning import space

    bf = DType.BF16
    op = GemmOp(contiguous("a", bf, (128, 4096)), contiguous("b", bf, (4096, 4096)),
                contiguous("c", bf, (128, 4096)))
    tiles = {(c["tile_m"], c["tile_n"]) for c in space.candidates(op, SM90, gemm_backend="cutedsl")}
    assert {(64, 64), (128, 64), (64, 128)} <= tiles
    glu = GemmOp(contiguous("a", bf, (16, 4096)), contiguous("b", bf, (1024, 4096)),
                 contiguous("c", bf, (16, 512)), (EpSwiGLU(64),))
    glu_tiles = {c["tile_n"] for c in space.candidates(glu, SM90, gemm_backend="cutedsl")}
    assert 64 not in glu_tiles and 128 in glu_tiles


def _gemm_hash_with_kernels(monkeypatch, kernels_dir) -> str:
    caches = (keys.template_sources_sha256, keys.spec_definitions, keys.spec_closure)
    monkeypatch.setattr(keys, "_KERNELS", kernels_dir)
    for cached in caches:
        cached.cache_clear()
    try:
        return keys.template_sources_sha256(space.family(_gemm_op()).sources)
    finally:
        for cached in caches:
            cached.cache_clear()


def _gemm_op():
    from aotpack.kernels.spec import GemmOp, contiguous

    return GemmOp(contiguous("a", DType.BF16, (16, 64)), contiguous("b", DType.BF16, (32, 64)),
                  contiguous("out", DType.BF16, (16, 32)))


def test_spec_py_counts_by_the_definitions_a_family_uses(tmp_path, monkeypatch):
    """A new op kind in kernels/spec.py (or an edit to another family's op) leaves the GEMM
    records valid; an edit to GemmOp, or to what it is built from, does not."""
    import shutil

    closure = keys.spec_closure(tuple(r for r in space.family(_gemm_op()).sources
                                      if r != keys.SPEC))
    assert {"GemmOp", "EpSwiGLU", "TensorArg", "CompiledKernel", "TensorMapSlot"} <= set(closure)
    assert not {"AttentionOp", "RopeOp", "op_inputs", "KernelOp"} & set(closure)
    real = keys._KERNELS
    base = _gemm_hash_with_kernels(monkeypatch, real)
    copy = tmp_path / "kernels"
    shutil.copytree(real, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _gemm_hash_with_kernels(monkeypatch, copy) == base
    spec = copy / "spec.py"
    original = spec.read_text()
    spec.write_text(original.replace("class RopeOp:", "class RopeOp:  # edited")
                    + "\n\n@dataclass(frozen=True)\nclass GatherOp:\n    out: TensorArg\n")
    assert _gemm_hash_with_kernels(monkeypatch, copy) == base
    spec.write_text(original.replace("class EpSwiGLU:", "class EpSwiGLU:  # edited"))
    assert _gemm_hash_with_kernels(monkeypatch, copy) != base
