"""The generation benchmark's CPU side (benchmarks/bench_generate.py and its modules): the seeded
Llama factories, the arithmetic (floor, rates, divergence report, budget, aotpack-run's line),
argument parsing, the static-cache loop and the correctness check on the tiny model, and a smoke
run of the harness on the CPU. The GPU numbers come from `scripts/gpu-check gen`."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
import types
from pathlib import Path

import pytest

# the benchmarks' own code, not aotpack's: run on request (pytest -m bench; docs/testing.md)
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bench_generate as bg  # noqa: E402
import gen_contenders as gc  # noqa: E402
import gen_math as gm  # noqa: E402
import gen_run  # noqa: E402
import generate_models as models  # noqa: E402

# the tiny model's weights at seed 0, made on the build host: another machine (the GPU one)
# or another torch that makes different weights fails here, not at bundle load
TINY_FINGERPRINT = "c9a77d51674fc708517d479ed5725c17383b7e1b881a31a6357e5eb7cd900b96"


# ------------------------------------------------------------------------------ factories
def test_tiny_factory_is_deterministic_and_seeded():
    model, (ids,) = models.tiny()
    assert models.fingerprint(model) == TINY_FINGERPRINT
    assert models.fingerprint(models.build("tiny", 0, torch.float32, threads=1)) == \
        TINY_FINGERPRINT  # the thread count does not change the weights
    assert models.fingerprint(models.tiny(seed=1)[0]) != TINY_FINGERPRINT
    assert ids.shape == (1, models.EXAMPLE_PROMPT_LEN) and int(ids.max()) < 512
    weights = dict(model.named_parameters())
    assert torch.all(weights["model.norm.weight"] > 0.9)  # norm scales near 1
    w = weights["model.layers.0.mlp.down_proj.weight"]
    assert float(w.abs().max()) <= 2 ** -5 and 0.015 < float(w.std()) < 0.021


def test_tied_build_shares_the_head_and_makes_real_rotary_frequencies(monkeypatch):
    monkeypatch.setitem(models.SHAPES, "tiny_tied",
                        dataclasses.replace(models.SHAPES["tiny"], tied=True))
    model = models.build("tiny_tied", 0, torch.bfloat16)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    from transformers import LlamaForCausalLM

    fresh = LlamaForCausalLM(models.config("tiny_tied"))  # constructed the ordinary way
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(model.model.rotary_emb.inv_freq, fresh.model.rotary_emb.inv_freq)
    assert models.param_count(model) == models.param_count(fresh)


@pytest.mark.parametrize("name", ["llama32_1b", "llama3_8b"])
def test_real_shapes_on_meta_match_the_checkpoints(name):
    t0 = time.perf_counter()
    model = models.meta_model(name)
    assert time.perf_counter() - t0 < 60  # no storage: seconds, even for 8B on 2 cores
    assert next(model.parameters()).device.type == "meta"
    assert models.param_count(model) == models.REAL_PARAMS[name]
    shape = models.SHAPES[name]
    read = sum(p.numel() for n, p in model.named_parameters()
               if shape.tied or n != "model.embed_tokens.weight")
    assert gm.weight_bytes_per_step(shape) == 2 * read
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == shape.tied


@pytest.mark.slow
def test_llama32_1b_weights_are_the_build_hosts():
    """Run on the GPU machine too (`pytest -m bench -k llama32_1b`): the same fingerprint there
    means make-weights will pass the bundle's sha256 checks."""
    model = models.llama32_1b()[0]
    assert next(model.parameters()).dtype == torch.bfloat16
    assert models.fingerprint(model) == \
        "56a066d20696ebfe9e133843c16eafcf5fdde228e4f0d5d813bea605ca1a6751"


# ------------------------------------------------------------------------------ arithmetic
def test_decode_floor_counts_weights_and_the_kv_read():
    shape = models.SHAPES["llama32_1b"]
    floor = gm.decode_floor(shape, batch=8, prompt=128, new=256, copy_gbps=4000.0)
    kv_per_position = 2 * 16 * 8 * 64 * 2  # K and V, layers, kv heads, head dim, bf16
    kv = 8 * (128 + 128) * kv_per_position  # mean context over the 255 decode steps
    assert floor["weight_bytes"] == 2 * 1_235_814_400 and floor["kv_bytes"] == kv
    assert floor["floor_step_ms"] == pytest.approx((2 * 1_235_814_400 + kv) / 4e9)
    assert gm.pct_of_floor(0.5, 1.0) == 50.0 and gm.pct_of_floor(0.5, None) is None
    assert gm.copy_gbps(2 ** 30, 0.5) == pytest.approx(2 * 2 ** 30 / 0.5e6)


def test_rates_from_timings():
    r = gm.rates_from_generate(t1_ms=20.0, tn_ms=20.0 + 255 * 5.0, new=256, batch=8)
    assert r == {"ttft_ms": 20.0, "decode_step_ms": 5.0, "decode_tok_s": 1600.0}
    r = gm.rates_from_phases(ttft_ms=30.0, decode_ms=510.0, new=256, batch=1)
    assert r["decode_step_ms"] == 2.0 and r["decode_tok_s"] == 500.0
    with pytest.raises(ValueError):
        gm.rates_from_generate(1.0, 2.0, new=1, batch=1)
    assert gm.median_of([{"a": 1.0, "b": 5}, {"a": 3.0, "b": 1}, {"a": 2.0, "b": 2}]) == \
        {"runs": 3, "a": 2.0, "b": 2}


def _view(logits: dict):
    top = sorted(logits.items(), key=lambda kv: -kv[1])[:2]
    return lambda i: {"top2": top, "logit": logits}


def test_divergence_report():
    assert gm.divergence_report([1, 2, 3], [1, 2, 3])["verdict"] == "match"
    tie = gm.divergence_report([1, 2, 3], [1, 2, 4], _view({3: 3.36, 4: 3.35, 9: 0.0}))
    assert (tie["first_divergence"], tie["verdict"], tie["ref_id"], tie["got_id"]) == \
        (2, "near-tie", 3, 4)
    assert tie["gap"] == pytest.approx(0.01) and tie["top2"][0] == (3, 3.36)
    bad = gm.divergence_report([5, 2], [7, 2], _view({5: 3.0, 7: 1.0}))
    assert (bad["first_divergence"], bad["verdict"]) == (0, "mismatch")
    short = gm.divergence_report([1, 2, 3], [1, 2])  # stopped early: diverges where it ends
    assert short["first_divergence"] == 2 and short["verdict"] == "diverged"
    assert gm.bf16_ulp(3.36) == 2 ** -6 and gm.bf16_ulp(-40.0) == 2 ** -2


def test_parse_generate_line():
    out = "loading...\ngenerate: batch=8 prompt=128 new=256 ttft_ms=12.5 decode_tok_s=3.1e3\n"
    assert gm.parse_generate_line(out) == {"batch": 8, "prompt": 128, "new": 256,
                                           "ttft_ms": 12.5, "decode_tok_s": 3100.0}
    assert gm.parse_generate_line("error: no generation section") == {}


def test_budget_and_repeats():
    now = [100.0]
    budget = gm.Budget(60.0, clock=lambda: now[0])
    now[0] = 130.0
    assert budget.left() == 30.0 and budget.fits(30.0) and not budget.fits(31.0)
    assert budget.share(1, 3) == 10.0 and budget.share(3, 4) == 22.5
    now[0] = 200.0
    assert budget.share(1, 1) == 0.0
    assert gm.repeats_that_fit(10.0, 25.0, wanted=5) == 2
    assert gm.repeats_that_fit(100.0, 25.0, wanted=5) == 1  # at least one
    assert gm.repeats_that_fit(1.0, 25.0, wanted=5) == 5


def test_table_prints_every_row():
    text = gm.table([{"model": "llama32_1b", "B": 8, "prompt": 2048, "contender": "aotpack",
                      "ttft_ms": 41.25, "step_ms": 1.234, "tok_s": 6482.0, "floor%": 81.0},
                     {"model": "llama32_1b", "B": 1, "prompt": 128, "contender": "eager"}])
    lines = text.splitlines()
    assert lines[0].split() == ["model", "B", "prompt", "contender", "ttft_ms", "step_ms",
                                "tok_s", "floor%", "note"]
    assert lines[1].split() == ["llama32_1b", "8", "2048", "aotpack", "41.2", "1.234",
                                "6482.0", "81.0"]
    assert lines[2].split()[4:] == ["-", "-", "-", "-"]  # not measured: "-", no note


# ------------------------------------------------------------------------------ arguments
def test_parse_args_defaults_and_lists(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    args = bg.parse_args([])
    assert args.models == ["llama32_1b", "llama3_8b"] and args.batches == [1, 8]
    assert args.prompts == [128, 2048] and args.new == 256 and args.budget_s == 540.0
    assert args.contenders == ["aotpack", "aotpack-run", "eager", "gptfast"]
    assert args.out == tmp_path and args.compile_estimate_s == 150
    args = bg.parse_args(["--models", "tiny", "--batches", "2,4", "--prompts", "16",
                          "--contenders", "eager", "--compile-mode", "default", "--out", "x"])
    assert (args.models, args.batches, args.prompts, args.contenders, args.out) == \
        (["tiny"], [2, 4], [16], ["eager"], Path("x"))
    assert args.compile_estimate_s == bg.ESTIMATE["compile"]["default"]


@pytest.mark.parametrize("argv", [["--models", "gpt5"], ["--contenders", "vllm"], ["--new", "1"],
                                  ["--batches", "0"], ["--compile-mode", "fast"]])
def test_parse_args_refuses(argv):
    with pytest.raises(SystemExit):
        bg.parse_args(argv)


def test_cells_and_bundle_limits():
    args = bg.parse_args(["--batches", "8,1", "--prompts", "2048,128"])
    assert gen_run._cells(args) == [(1, 128), (8, 128), (1, 2048), (8, 2048)]
    gen_run._fits_bundle({"max_batch": 8, "max_seq_len": 2304}, 8, 2048, 256)
    with pytest.raises(gen_run.Skip, match="max_seq_len 2303"):
        gen_run._fits_bundle({"max_batch": 8, "max_seq_len": 2303}, 8, 2048, 257)
    with pytest.raises(gen_run.Skip, match="max_batch 4"):
        gen_run._fits_bundle({"max_batch": 4, "max_seq_len": 4096}, 8, 128, 256)
    assert [len(p) for p in gen_run.check_prompts(3, 512, 0)] == [16, 77, 138]
    assert gc.prompts(2, 5, 512, 0) == gc.prompts(2, 5, 512, 0) != gc.prompts(2, 5, 512, 1)


def test_compile_reserve_counts_batch_sizes_still_to_compile():
    args = bg.parse_args(["--compile-mode", "max-autotune"])
    units = [("eager", (1, 128)), ("gptfast", (1, 128)), ("gptfast", (8, 128)),
             ("gptfast", (1, 2048))]
    assert gen_run._compile_reserve(units, args, {}) == 2 * 150
    assert gen_run._compile_reserve(units, args, {"compile": {"1": {}}}) == 150
    assert gen_run._compile_reserve(units[:1], args, {}) == 0
    assert gen_run._compile_reserve(units, bg.parse_args(["--compile-mode", "none"]), {}) == 0


def test_aotpack_run_command():
    cmd = gc.aotpack_run_command("/b/aotpack-run", Path("g/model.aotpack"), 256, 8, [1, 2, 3])
    assert cmd == ["/b/aotpack-run", "g/model.aotpack", "--generate", "256", "--prompt-ids",
                   "1,2,3", "--batch", "8", "--ignore-eos"]


# ----------------------------------------------------------------------- torch paths (CPU)
@pytest.fixture(scope="module")
def tiny():
    return models.tiny()[0]


def test_static_cache_loop_matches_generate(tiny):
    loop = gc.StaticLoop(tiny, max_cache_len=64, mode="none")
    for length in (9, 20):  # the cache is reused (reset) by the second prompt length
        ids = gc.as_tensor(gc.prompts(2, length, 512, 3), torch.device("cpu"))
        timings, got = loop.run(ids, 12)
        assert torch.equal(got, gc.hf_generate(tiny, ids, 12, **gc.EAGER))
        assert timings["ttft_ms"] > 0 and timings["decode_ms"] > 0
    with pytest.raises(ValueError):
        loop.run(ids, 64)


def test_decode_step_traces_as_one_graph(tiny):
    """What gptfast compiles: transformers' decode step with a StaticCache must trace with
    fullgraph=True, once for every prompt length (the position is a stepped tensor)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    loop = gc.StaticLoop(tiny, max_cache_len=64, mode="none")
    loop.step = torch.compile(gc._decode_one, backend="eager", fullgraph=True)
    for length in (9, 20):
        ids = gc.as_tensor(gc.prompts(2, length, 512, 3), torch.device("cpu"))
        assert torch.equal(loop.run(ids, 6)[1], gc.hf_generate(tiny, ids, 6, **gc.EAGER))
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


class _StepGenerator:
    """aotpack's Generator interface over the step module and the Python loop, with one
    token replaced at (prompt length, index) to fake a divergence."""

    def __init__(self, model, flip=None):
        from aotpack.generation.step import GenerationStep

        self.step, self.flip = GenerationStep(model, 4, 256), flip

    def generate(self, prompts, max_new_tokens, **kwargs):
        from aotpack.generation.loop import generate

        assert kwargs["ignore_eos"] and kwargs["temperature"] == 0.0
        with torch.no_grad():
            tokens = generate(self.step, prompts, max_new_tokens)
        for prompt, ids in zip(prompts, tokens):
            if self.flip and len(prompt) == self.flip[0]:
                ids[self.flip[1]] = (ids[self.flip[1]] + 1) % 512
        return types.SimpleNamespace(tokens=tokens, ttft_ms=1.0, decode_ms=2.0,
                                     decode_tokens_per_s=3.0)


def _args(**kw):
    return types.SimpleNamespace(**{"check_tokens": 16, "check_prompts": 2, "seed": 0, **kw})


def test_check_reports_match_and_divergence(tiny):
    facts = {"generation": {"max_batch": 4}, "checks": []}
    gen_run.check("tiny", tiny, _StepGenerator(tiny), None, _args(), facts)
    assert [(c["prompt_len"], c["verdict"]) for c in facts["checks"]] == \
        [(16, "match"), (77, "match")]
    facts = {"generation": {"max_batch": 1}, "checks": []}  # one by one
    gen_run.check("tiny", tiny, _StepGenerator(tiny, flip=(77, 5)), None, _args(), facts)
    first, second = facts["checks"]
    assert first["verdict"] == "match" and second["first_divergence"] == 5
    assert second["verdict"] in ("mismatch", "near-tie")
    assert second["top2"][0][0] == second["ref_id"] and second["gap"] > 0


def test_aotpack_adapter_reads_the_generate_result(tiny):
    result = gc.aotpack_generate(_StepGenerator(tiny), [[1, 2, 3]], 4)
    assert len(result["tokens"][0]) == 4
    assert (result["ttft_ms"], result["decode_ms"], result["runtime_decode_tok_s"]) == \
        (1.0, 2.0, 3.0)


def test_smoke_run_on_the_cpu(tmp_path, capsys):
    import signal

    before = signal.getsignal(signal.SIGTERM)
    rc = bg.main(["bench_generate.py", "--models", "tiny", "--device", "cpu", "--contenders",
                  "eager,gptfast,aotpack", "--compile-mode", "none", "--batches", "1,2",
                  "--prompts", "8", "--new", "6", "--reps", "2", "--budget-s", "120",
                  "--bundles", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert rc == 0
    assert signal.getsignal(signal.SIGTERM) is before  # its handler does not outlive main()
    [path] = tmp_path.glob("generate-*.json")
    doc = json.loads(path.read_text())
    assert doc["gpu"] == "cpu" and doc["torch"] == torch.__version__
    rows = {(r["contender"], r["B"]) for r in doc["rows"]}
    assert rows == {("eager", 1), ("eager", 2), ("gptfast", 1), ("gptfast", 2)}
    assert all(r["tok_s"] > 0 and r["ttft_ms"] > 0 for r in doc["rows"])
    assert any("no bundle" in s for s in doc["skipped"])
    cell = doc["models"]["tiny"]["cells"]["B2_P8"]["eager"]
    assert cell["runs"] == 2 and len(cell["tn_ms"]) == 2
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-5].split()[:4] == ["model", "B", "prompt", "contender"]  # the table, last
    assert [line.split()[3] for line in lines[-4:]] == ["eager"] * 2 + ["gptfast"] * 2


def _fake_bundle(folder: Path, generation: dict) -> None:
    """A model.aotpack holding only a manifest (what the harness reads before running it)."""
    folder.mkdir(parents=True)
    manifest = {"generation": generation, "external_weights": None}
    header = json.dumps({"__metadata__": {"aotpack.manifest": json.dumps(manifest)}}).encode()
    (folder / "model.aotpack").write_bytes(len(header).to_bytes(8, "little") + header)


def test_aotpack_run_rows_from_a_launcher(tmp_path):
    """aotpack-run's two processes per cell (cold --generate 1, then --generate N) and its
    last line, through a stand-in launcher; a cell past the bundle's max_batch is skipped."""
    _fake_bundle(tmp_path / "gen" / "tiny", {"max_batch": 1, "max_seq_len": 64})
    run = tmp_path / "aotpack-run"
    run.write_text("#!/bin/sh\necho loading\n"
                   "echo \"generate: batch=1 prompt=8 new=$3 ttft_ms=1.5 decode_tok_s=400\"\n")
    run.chmod(0o755)
    bg.main(["bench_generate.py", "--models", "tiny", "--device", "cpu", "--contenders",
             "aotpack-run", "--batches", "1,2", "--prompts", "8", "--new", "6",
             "--bundles", str(tmp_path / "gen"), "--aotpack-run", str(run),
             "--out", str(tmp_path)])
    doc = json.loads(next(tmp_path.glob("generate-*.json")).read_text())
    [row] = doc["rows"]
    assert (row["contender"], row["B"], row["ttft_ms"], row["tok_s"]) == \
        ("aotpack-run", 1, 1.5, 400.0)
    assert row["step_ms"] == pytest.approx(2.5)
    cell = doc["models"]["tiny"]["cells"]["B1_P8"]["aotpack-run"]
    assert cell["line"]["new"] == 6 and cell["cold_first_token_ms"] > 0
    assert any("max_batch 1" in s for s in doc["skipped"])


def test_budget_too_small_skips_and_says_so(tmp_path):
    bg.main(["bench_generate.py", "--models", "tiny", "--device", "cpu", "--contenders",
             "eager", "--prompts", "8", "--new", "4", "--budget-s", "0", "--out", str(tmp_path)])
    doc = json.loads(next(tmp_path.glob("generate-*.json")).read_text())
    assert doc["rows"] == [] and doc["skipped"]


@pytest.mark.gpu
def test_gpu_run_of_the_torch_contenders(tmp_path):
    bg.main(["bench_generate.py", "--models", "tiny", "--contenders", "eager,gptfast",
             "--compile-mode", "default", "--prompts", "16", "--new", "8", "--budget-s", "200",
             "--out", str(tmp_path)])
    doc = json.loads(next(tmp_path.glob("generate-*.json")).read_text())
    assert doc["copy"]["gbps"] > 500
    assert {r["contender"] for r in doc["rows"]} == {"floor", "eager", "gptfast"}
