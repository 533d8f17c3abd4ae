"""--precision fp8-weights (aotpack/passes/quantize.py, aotpack/precision.py), without a GPU:
the quantization pass on real programs (what it rewrites, what it keeps and why), the numbers
it stores, the build's error measurement and its bound, the bundle both readers accept, inspect
and verify. The kernels' FP8 paths are in test_gemm.py / test_gemm_splitk.py (interpreter)
and tests/gpu/template_cases.py (fp8_* cases, on the GPU)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from aotpack.dtypes import DType
from aotpack.kernels.spec import GemmOp
from aotpack.passes.quantize import FP8_MAX, quantize_weights

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))


def _program(model, inputs):
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    return compile_graph(to_graph(model.eval(), inputs, None))


class TiedLM(nn.Module):
    """An embedding table read again as the LM head (tied), a projection in between, and a
    product of two run-time tensors (no weight to quantize)."""

    def __init__(self, vocab=96, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d, bias=True)

    def forward(self, ids):
        h = self.proj(self.emb(ids))
        attn = h @ h.transpose(-1, -2)  # run-time x run-time
        return nn.functional.linear(attn @ h, self.emb.weight)


def _tied():
    torch.manual_seed(0)
    return TiedLM().to(torch.bfloat16), (torch.randint(0, 96, (16,)),)


def test_quantize_rewrites_gemm_weights_and_keeps_what_else_reads():
    model, inputs = _tied()
    program = _program(model, inputs)
    before = dict(program.weights)
    report = quantize_weights(program)
    gemms = [op for op in program.ops if isinstance(op, GemmOp)]
    quantized = [op for op in gemms if op.b_scale is not None]
    assert report.quantized == len(quantized) == 2  # proj and the tied head
    assert report.skipped == {"the second operand is computed at run time, not a weight":
                              len(gemms) - 2} and len(gemms) > 2
    for op in quantized:
        assert op.b.dtype is DType.F8E4M3 and program.weights[op.b.storage].dtype == \
            torch.float8_e4m3fn
        assert op.b_scale.dtype is DType.F32 and op.b_scale.shape == (op.b.shape[0],)
    # the embedding table is still read by the embedding: kept in bf16 beside its FP8 copy;
    # the projection's weight is read by nothing else: gone
    head = next(op for op in quantized if op.b.shape[0] == 96)
    table = head.b.storage.removesuffix(".fp8")
    assert table in program.weights and program.weights[table].dtype == torch.bfloat16
    proj = next(op for op in quantized if op.b.shape[0] == 64)
    assert proj.b.storage.removesuffix(".fp8") not in program.weights
    # bytes: the table (bf16) stays, the projection's bf16 weight goes, FP8 copies + scales come
    assert report.weight_bytes_after == report.weight_bytes_before - 64 * 64 * 2 + \
        (96 + 64) * 64 + (96 + 64) * 4
    # the stored numbers: scale = row amax / 448, the largest magnitude lands on 448 exactly,
    # dequantized rows within e4m3's rounding of the originals
    for op in quantized:
        w = before[op.b.storage.removesuffix(".fp8")].float()
        q = program.weights[op.b.storage].float()
        s = program.weights[op.b_scale.storage]
        assert torch.allclose(s, w.abs().amax(1) / FP8_MAX)
        assert torch.equal(q.abs().amax(1), torch.full((w.shape[0],), FP8_MAX))
        rel = float(((q * s[:, None]) - w).norm() / w.norm())
        assert 1e-3 < rel < 0.04, rel


def test_quantized_program_matches_its_dequantized_model():
    """The CPU reference of the quantized plan computes the model with dequantized weights."""
    from aotpack.executor import run_reference

    model, inputs = _tied()
    program = _program(model, inputs)
    quantize_weights(program)
    fp8 = {k: v for k, v in program.weights.items() if k.endswith(".fp8")}

    def dequantized(rows: int):
        k = next(k for k, v in fp8.items() if v.shape[0] == rows)
        scale = program.weights[k.removesuffix(".fp8") + ".fp8_scale"]
        return fp8[k].float() * scale[:, None]

    got = run_reference(program, list(inputs))[0].float()
    with torch.no_grad():
        x = model.emb(inputs[0]).float()
        h = (x @ dequantized(64).t() + model.proj.bias.float()).bfloat16().float()
        want = ((h @ h.transpose(-1, -2)) @ h) @ dequantized(96).t()
    rel = float((got - want).norm() / want.norm())
    assert rel < 2e-2, rel  # bf16 intermediates only: FP8 rounding would be ~3e-2 more


def test_f32_models_are_left_alone_and_the_precision_says_so():
    from aotpack.precision import PrecisionError, apply

    model = nn.Linear(32, 16).eval()
    program = _program(model, (torch.randn(4, 32),))
    report = quantize_weights(program)  # the f32 linear is a 1x1 conv on tf32: no GEMM
    assert report.quantized == 0 and report.skipped == {}
    assert all(w.dtype != torch.float8_e4m3fn for w in program.weights.values())
    with pytest.raises(PrecisionError, match=r"no GEMM of this model can take FP8 weights "
                                             r"\(its linears are f32, run as tf32 "
                                             r"convolutions\); an f32 model needs --dtype bf16"):
        apply(_program(model, (torch.randn(4, 32),)), "fp8")


class TwoLinears(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.a = nn.Linear(k, 32, bias=False)
        self.b = nn.Linear(32, 32, bias=False)

    def forward(self, x):
        return self.b(self.a(x))


def test_weights_the_kernels_cannot_take_keep_their_dtype():
    """K = 24: 48-byte bf16 rows are TMA-aligned, 24-byte FP8 rows are not (the tile kernel
    has no other load); a weight with inf: its scale would be inf."""
    model = TwoLinears(24).to(torch.bfloat16).eval()
    with torch.no_grad():
        model.b.weight[3, 5] = float("inf")
    program = _program(model, (torch.randn(4, 24).bfloat16(),))
    report = quantize_weights(program)
    assert report.quantized == 0
    assert report.skipped == {"its rows are not a multiple of 16 bytes in FP8 (K % 16 != 0)": 1,
                              "the weight holds inf or NaN": 1}


def test_fp8_quantizes_the_activations_too():
    from aotpack.executor import run_reference
    from aotpack.precision import apply

    torch.manual_seed(0)
    model = TwoLinears(64).to(torch.bfloat16).eval()
    x = torch.randn(8, 64).bfloat16()
    weights_only, both = _program(model, (x,)), _program(model, (x,))
    assert apply(weights_only, "fp8-weights").mode == "fp8-weights"
    assert apply(both, "fp8").mode == "fp8"
    assert all(op.quantize_a for op in both.ops if isinstance(op, GemmOp))
    assert not any(op.quantize_a for op in weights_only.ops if isinstance(op, GemmOp))
    with torch.no_grad():
        want = model.float()(x.float())
    errs = [float((run_reference(p, [x])[0].float() - want).norm() / want.norm())
            for p in (weights_only, both)]
    assert errs[0] < errs[1] < 0.1, errs  # e4m3 activations cost a little more


# ----------------------------------------------------------------------------- the build
def _small_mlp(folder: Path) -> str:
    (folder / "small.py").write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n"
                                     "import mlp\n\ndef make():\n"
                                     "    return mlp.make(d=64, f=256, batch=2, seq=8)\n")
    return f"{folder / 'small.py'}:make"


@pytest.fixture(scope="module")
def fp8_bundle(tmp_path_factory):
    import aotpack

    root = tmp_path_factory.mktemp("fp8")
    spec = _small_mlp(root)
    out = root / "m"
    result = aotpack.build(spec, out, precision="fp8-weights", progress=False)
    return spec, out, result


def test_build_records_the_error_and_both_readers_accept_the_bundle(fp8_bundle):
    from aotpack.bundle import read_bundle

    spec, out, result = fp8_bundle
    b = read_bundle(out / "model.aotpack", checksums=True)
    prec = b.manifest["provenance"]["precision"]
    assert prec["mode"] == "fp8-weights" and prec["quantized_gemms"] >= 2
    assert prec["max_error"] is None
    (name, err), = prec["rel_error"].items()
    assert 1e-3 < err < 0.1, err  # FP8 rounding shows, and stays modest
    dtypes = {w["dtype"] for w in b.manifest["weights"]}
    assert "f8e4m3" in dtypes and "f32" in dtypes
    assert any("fp8-weights:" in n for n in result.notes)
    fused = {f for k in b.manifest["kernels"] for f in k.get("fused_ops", ())}
    assert "fp8_weight" in fused
    from aotpack.runtime import AotpackError, Model

    try:
        Model.check_file(str(out / "model.aotpack"))  # the C runtime's parse and validation
    except AotpackError as e:
        pytest.fail(f"the C runtime refuses the FP8 bundle: {e.message}")
    except OSError as e:  # no libaotpack built here
        pytest.skip(f"runtime library not available: {e}")


def test_inspect_and_verify_know_the_precision(fp8_bundle):
    from aotpack.cli.main import app
    from typer.testing import CliRunner

    spec, out, _ = fp8_bundle
    r = CliRunner().invoke(app, ["inspect", str(out / "model.aotpack")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "precision: fp8-weights" in r.output and "error vs float32 model" in r.output
    from aotpack.precision import verify_tolerance
    from aotpack.verify import verify

    report = verify(out / "model.aotpack", spec, reference="cpu")
    assert report.passed, [(c.name, c.rel_error) for c in report.outputs]
    from aotpack.bundle import read_bundle

    manifest = read_bundle(out / "model.aotpack").manifest
    assert report.tolerance == verify_tolerance(manifest) > 1e-2
    # held to the build's own measurement: a tolerance below it fails
    strict = verify(out / "model.aotpack", spec, reference="cpu", tolerance=1e-4)
    assert not strict.passed


def test_max_error_refuses_and_writes_nothing(tmp_path):
    import aotpack
    from aotpack.precision import PrecisionError

    out = tmp_path / "m"
    with pytest.raises(PrecisionError, match=r"--max-error 0.0001 allows \(relative L2 per "
                                             r"output: out0 "):
        aotpack.build(_small_mlp(tmp_path), out, precision="fp8-weights", max_error=1e-4,
                      progress=False)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["small.py"]


def test_fp8_build_records_the_activations(tmp_path):
    import aotpack
    from aotpack.bundle import read_bundle

    out = tmp_path / "m"
    aotpack.build(_small_mlp(tmp_path), out, precision="fp8", progress=False)
    prec = read_bundle(out / "model.aotpack").manifest["provenance"]["precision"]
    assert prec["mode"] == "fp8" and "per row" in prec["activations"]
    assert 1e-3 < prec["rel_error"]["out0"] < 0.15


def test_option_errors(tmp_path):
    import aotpack
    from aotpack.shared_steps import BuildError

    with pytest.raises(BuildError, match="--max-error bounds the error of a quantized build"):
        aotpack.build(_small_mlp(tmp_path), tmp_path / "m", max_error=0.1, progress=False)
    with pytest.raises(BuildError, match="FP8 GEMMs run on the Triton backend only"):
        aotpack.build(_small_mlp(tmp_path), tmp_path / "m", precision="fp8",
                      gemm_backend="cutedsl", progress=False)
    from aotpack.precision import PrecisionError, apply

    with pytest.raises(PrecisionError, match="choose one of model, fp8-weights, fp8"):
        apply(None, "int4")


def test_row_ranges_of_one_weight_share_its_copy_with_their_own_scales():
    """Two GEMMs reading rows 0..N and N..2N of one [2N, K] weight: one FP8 copy, each op's
    scale view starting at its own first row (hand-built: the frontend copies such slices)."""
    from aotpack.executor import run_reference
    from aotpack.kernels.spec import TensorArg, contiguous
    from aotpack.program import Program, Storage

    M, N, K = 4, 8, 32
    torch.manual_seed(0)
    w = torch.randn(2 * N, K).bfloat16()
    w[N:] *= 100  # the second half's scales differ
    bf = DType.BF16
    storages = {"x": Storage("x", "input", bf, (M, K)),
                "w": Storage("w", "weight", bf, (2 * N, K)),
                "y0": Storage("y0", "output", bf, (M, N)),
                "y1": Storage("y1", "output", bf, (M, N))}
    ops = [GemmOp(contiguous("x", bf, (M, K)), TensorArg("w", bf, (N, K), (K, 1), half * N * K),
                  contiguous(f"y{half}", bf, (M, N))) for half in (0, 1)]
    program = Program(["x"], ["y0", "y1"], storages, ops, {"w": w})
    report = quantize_weights(program)
    assert report.quantized == 2 and set(program.weights) == {"w.fp8", "w.fp8_scale"}
    assert [op.b_scale.offset for op in program.ops] == [0, N]
    x = torch.randn(M, K).bfloat16()
    got = run_reference(program, [x])
    q, s = program.weights["w.fp8"].float(), program.weights["w.fp8_scale"]
    for half, y in enumerate(got):
        rows = slice(half * N, (half + 1) * N)
        want = x.float() @ (q[rows] * s[rows, None]).t()
        assert float((y.float() - want).norm() / want.norm()) < 1e-2


def test_fp8_norms_write_the_gemms_fp8_input():
    """A Llama block in --precision fp8: both RMSNorms write e4m3 with a scale per row, their
    GEMMs (QKV, gate/up) take it as it is; o_proj and down (fed by attention and SwiGLU)
    quantize their input themselves; the plan stays within FP8's error of float32."""
    import llama_block

    from aotpack.executor import run_reference
    from aotpack.kernels.spec import RMSNormOp
    from aotpack.precision import apply, measure

    model, inputs = llama_block.make(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, seq=32)
    program = _program(model, inputs)
    report = apply(program, "fp8")
    assert report.norms_fused == 2
    norms = [op for op in program.ops if isinstance(op, RMSNormOp)]
    assert all(op.out.dtype is DType.F8E4M3 and op.out_scale is not None for op in norms)
    gemms = [op for op in program.ops if isinstance(op, GemmOp)]
    fed = {op.a.storage for op in gemms if op.a_scale is not None}
    assert fed == {op.out.storage for op in norms}
    assert sum(op.quantize_a for op in gemms) == 2 and all(op.b_scale is not None for op in gemms)
    from types import SimpleNamespace

    errors = measure(program, SimpleNamespace(model=model, inputs=inputs))
    assert 1e-3 < errors["out0"] < 0.1, errors
    assert run_reference(program, list(inputs))[0].isfinite().all()


def test_rmsnorm_writes_e4m3_and_its_row_scales():
    """The rmsnorm kernel's FP8 output (Triton's interpreter, storages in their own dtypes):
    its scales are the reference's, its e4m3 values too (rows packed per program, a tail)."""
    from aotpack.kernels.reference.rmsnorm import reference
    from aotpack.kernels.spec import RMSNormOp, contiguous
    from support.interpret import run_interpreted_batch

    R, C = 37, 96
    op = RMSNormOp(contiguous("x", DType.BF16, (R, C)), contiguous("w", DType.BF16, (C,)),
                   contiguous("y", DType.F8E4M3, (R, C)), 1e-5,
                   contiguous("ys", DType.F32, (R,)))
    g = torch.Generator().manual_seed(0)
    env = {"x": (torch.randn(R * C, generator=g) * 3).bfloat16(),
           "w": (1 + torch.randn(C, generator=g) * 0.1).bfloat16(),
           "y": torch.zeros(R * C, dtype=torch.float8_e4m3fn),
           "ys": torch.full((R,), float("nan"))}
    want = {k: v.clone() for k, v in env.items()}
    reference(op, want)
    run_interpreted_batch([(op, env, None)])
    assert torch.allclose(env["ys"], want["ys"], rtol=1e-6)
    same = env["y"].float() == want["y"].float()
    assert same.float().mean() > 0.99, float(same.float().mean())  # f32 sum order: rare ties


def test_tuning_an_fp8_norm_compares_its_scales():
    """aotpack tune's one-op bundle of an RMSNorm writing FP8: its scales are an output (the
    candidates' results are compared on them too), not an input it would write into."""
    import llama_block

    from aotpack.kernels.spec import SM90, RMSNormOp
    from aotpack.precision import apply
    from aotpack.tuning.job import find_problems

    model, inputs = llama_block.make(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, seq=32)
    program = _program(model, inputs)
    apply(program, "fp8")
    norm = next(p for p in find_problems(program, SM90, level="fast", gemm_backend="triton")
                if isinstance(p.op, RMSNormOp))
    kinds = {name: (st.kind, st.dtype) for name, st in norm.storages.items()}
    assert sorted(kinds.values(), key=str) == sorted(
        [("input", DType.BF16), ("input", DType.BF16), ("output", DType.F8E4M3),
         ("output", DType.F32)], key=str), kinds


def test_a_model_too_large_to_measure_builds_unmeasured(tmp_path, monkeypatch):
    """The float32 copy the measurement needs would not fit: the build says so and records no
    error (verify then holds the bundle to 0.1); with --max-error it refuses instead."""
    import aotpack
    from aotpack import precision
    from aotpack.shared_steps import BuildError
    from aotpack.bundle import read_bundle

    monkeypatch.setattr(precision, "available_bytes", lambda: 1000)
    spec = _small_mlp(tmp_path)
    result = aotpack.build(spec, tmp_path / "m", precision="fp8-weights", progress=False)
    assert any("was not measured: measuring needs a float32 copy of the model" in n
               for n in result.notes)
    manifest = read_bundle(tmp_path / "m" / "model.aotpack").manifest
    assert manifest["provenance"]["precision"]["rel_error"] == {}
    assert precision.verify_tolerance(manifest) == precision.WARN_ERROR
    with pytest.raises(BuildError, match="--max-error cannot be checked: measuring needs"):
        aotpack.build(spec, tmp_path / "m2", precision="fp8-weights", max_error=0.1,
                      progress=False)
