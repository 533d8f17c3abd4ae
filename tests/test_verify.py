"""aotpack.verify with reference="cpu": a stand-in frontend/fusion pass hands over a Program for a
small torch model; the real executor runs it with the real kernel references and the result is
compared with eager PyTorch. A wrong program must fail; a changed model file must warn."""
import os
import sys
import types

import pytest
import torch
from typer.testing import CliRunner

from aotpack.bundle import write_bundle
from aotpack.dtypes import DType
from aotpack.kernels.spec import SM90, Act, EpAct, EpBias, GemmOp, contiguous
from aotpack.program import MemoryPlan, Program, Storage
from aotpack.verify import VerifyError, compare, random_inputs, verify

F32 = DType.F32


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()


def _program(model, corrupt: bool = False, other_weights: bool = False) -> Program:
    st = {s.name: s for s in [Storage("x", "input", F32, (8, 32)),
                              Storage("w", "weight", F32, (16, 32)),
                              Storage("b", "weight", F32, (16,)),
                              Storage("y", "output", F32, (8, 16))]}
    w = model[0].weight.detach().clone()
    if other_weights:
        w[0, 0] += 5.0
    op = GemmOp(contiguous("x", F32, (8, 32)), contiguous("w", F32, (16, 32)),
                contiguous("y", F32, (8, 16)),
                (EpBias(contiguous("b", F32, (16,))), EpAct(Act.SILU if corrupt else Act.RELU)))
    return Program(["x"], ["y"], st, [op], {"w": w, "b": model[0].bias.detach().clone()})


@pytest.fixture
def setup(monkeypatch, tmp_path):
    """A model file, its bundle (no kernels: verify --reference cpu never reads them), and the
    stand-in frontend/passes; returns (bundle path, spec, state) — set state['corrupt']."""
    state = {"corrupt": False, "other": False}
    model = _model()
    from aotpack.frontend.load import LoadedModel

    frontend = types.ModuleType("aotpack.frontend")
    frontend.load_spec = lambda spec: LoadedModel(model, (torch.randn(8, 32),))
    frontend.to_graph = lambda m, inputs, dynamic=None: "graph"
    passes = types.ModuleType("aotpack.passes")
    passes.compile_graph = lambda graph: _program(model, state["corrupt"], state["other"])
    import aotpack.frontend.prepare  # noqa: F401 — the real one: with no options, a no-op
    # (precision.py imports it from the real passes package, which the stand-in replaces:
    # imported first, it is found in sys.modules also when this file runs alone)
    import aotpack.passes.fuse_gemm_norm  # noqa: F401
    monkeypatch.setitem(sys.modules, "aotpack.frontend", frontend)
    monkeypatch.setitem(sys.modules, "aotpack.passes", passes)
    import aotpack  # `from aotpack import passes` reads the package attribute, not sys.modules

    monkeypatch.setattr(aotpack, "frontend", frontend, raising=False)
    monkeypatch.setattr(aotpack, "passes", passes, raising=False)
    src = tmp_path / "model.py"
    src.write_text("def make(): ...\n")
    from aotpack.shared_steps import file_sha256

    bundle = write_bundle(tmp_path / "model.aotpack", _program(model), MemoryPlan(0, {}, {}, []),
                          target=SM90, provenance={"source_sha256": file_sha256(src)})
    return bundle, f"{src}:make", state


def test_cpu_reference_matches_eager(setup):
    bundle, spec, _ = setup
    report = verify(bundle, spec, reference="cpu", seed=3)
    assert report.passed and report.reference == "cpu" and not report.warnings
    (check,) = report.outputs
    assert check.name == "y" and check.rel_error < 1e-5


def test_a_wrong_program_fails(setup):
    bundle, spec, state = setup
    state["corrupt"] = True
    report = verify(bundle, spec, reference="cpu")
    assert not report.passed and report.outputs[0].rel_error > 1e-2


def test_a_model_with_other_weights_is_refused(setup):
    """The CPU reference runs the spec's weights: they must be the bundle's, or a bundle of
    another model (or of an unseeded factory) would pass against itself."""
    bundle, spec, state = setup
    state["other"] = True
    with pytest.raises(VerifyError, match="weights are not the bundle's"):
        verify(bundle, spec, reference="cpu")


def test_changed_model_file_warns(setup):
    bundle, spec, _ = setup
    (bundle.parent / "model.py").write_text("def make(): return 1\n")
    with pytest.warns(UserWarning, match="changed since the bundle was built"):
        report = verify(bundle, spec, reference="cpu")
    assert report.passed and report.warnings


def test_an_all_zero_reference_warns(setup):
    """A ReLU that clips every output of the (randomly initialised) model to 0: any bundle
    writing zeros would pass, so verify says the comparison is vacuous (it still passes)."""
    from aotpack.cli.main import app
    from aotpack.shared_steps import file_sha256

    bundle, spec, _ = setup
    model = sys.modules["aotpack.frontend"].load_spec(spec).model
    with torch.no_grad():
        model[0].bias.fill_(-1e3)
    write_bundle(bundle, _program(model), MemoryPlan(0, {}, {}, []), target=SM90,
                 provenance={"source_sha256": file_sha256(bundle.parent / "model.py")})
    with pytest.warns(UserWarning, match="all zeros"):
        report = verify(bundle, spec, reference="cpu")
    assert report.passed and len(report.warnings) == 1 and "vacuous" in report.warnings[0]
    result = CliRunner().invoke(app, ["verify", str(bundle), "--model", spec,
                                      "--reference", "cpu"])
    assert result.exit_code == 0 and "vacuous" in result.output, result.output


def test_constant_references_are_named_once():
    from aotpack.verify import _vacuous

    outputs = [{"name": n} for n in ("a", "b", "c", "d")]
    refs = [torch.full((2, 3), 0.5), torch.randn(2, 3), torch.zeros(4, dtype=torch.int64),
            torch.zeros(1)]  # varying, integer, or a single element: nothing to say
    with pytest.warns(UserWarning):
        (msg,) = _vacuous(outputs, refs, " @ B=2", [], 1e-2)
    assert "output a " in msg and "every element 0.5" in msg and "@ B=2" in msg
    assert _vacuous(outputs, refs, " @ B=3", [msg], 1e-2) == []  # said once per output


def test_a_nearly_constant_reference_warns():
    """YOLOS's boxes at random init: 0.5 +- 3e-4. A bundle writing 0.5 everywhere would be
    within the tolerance, so the comparison is vacuous; at a tighter tolerance it is not."""
    from aotpack.verify import _vacuous

    torch.manual_seed(0)
    ref = 0.5 + 3e-4 * torch.randn(2, 100, 4)
    with pytest.warns(UserWarning):
        (msg,) = _vacuous([{"name": "pred_boxes"}], [ref], "", [], 1e-2)
    assert "nearly constant (0.5" in msg and "its mean" in msg
    assert _vacuous([{"name": "pred_boxes"}], [ref], "", [], 1e-4) == []


def test_cli_verify_exit_codes(setup):
    from aotpack.cli.main import app

    bundle, spec, state = setup
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(bundle), "--model", spec, "--reference", "cpu"])
    assert ok.exit_code == 0 and "passed" in ok.output, ok.output
    assert "max |ref|" in ok.output and "against eager PyTorch" in " ".join(ok.output.split())
    state["corrupt"] = True
    bad = runner.invoke(app, ["verify", str(bundle), "--model", spec, "--reference", "cpu"])
    assert bad.exit_code == 1 and "FAIL" in bad.output


def test_gpu_reference_needs_a_gpu(setup):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    bundle, spec, _ = setup
    with pytest.raises(VerifyError, match="--reference cpu"):
        verify(bundle, spec, reference="gpu")


def test_random_inputs_follow_the_signature():
    sig = [{"name": "x", "dtype": "bf16", "shape": [2, 3]},
           {"name": "ids", "dtype": "i64", "shape": [5]}]
    examples = (torch.zeros(2, 3), torch.tensor([3, 9, 4]))
    a = random_inputs(sig, examples, seed=1)
    assert a[0].dtype == torch.bfloat16 and a[0].shape == (2, 3)
    assert a[1].dtype == torch.int64 and int(a[1].min()) >= 3 and int(a[1].max()) <= 9
    assert all(torch.equal(x, y) for x, y in zip(a, random_inputs(sig, examples, seed=1)))


def test_an_all_ones_mask_is_verified_padded():
    """A tokenizer's mask for unpadded text is all 1s: verify's inputs pad the rows (1s then
    0s, at random lengths, the first row whole) so the masking is checked; ids stay ids."""
    sig = [{"name": "input_ids", "dtype": "i64", "shape": [8, 16]},
           {"name": "attention_mask", "dtype": "i64", "shape": [8, 16]}]
    examples = (torch.randint(0, 50, (8, 16)), torch.ones(8, 16, dtype=torch.long))
    ids, mask = random_inputs(sig, examples, seed=3)
    assert int(ids.max()) > 1 and mask.dtype == torch.int64
    lengths = mask.sum(1)
    assert int(lengths[0]) == 16 and int(lengths.min()) < 16 and int(lengths.min()) >= 1
    assert torch.equal(mask, (torch.arange(16)[None] < lengths[:, None]).long())  # 1s, then 0s
    padding_marks = torch.zeros(8, 16, dtype=torch.long)  # 1 marks a pad: not a tokenizer's
    padding_marks[1, 12:] = 1
    _, drawn = random_inputs(sig, (examples[0], padding_marks), seed=3)
    assert set(drawn.unique().tolist()) == {0, 1} and not torch.equal(drawn[0], mask[0])


def test_compare():
    ref = torch.ones(4)
    assert compare("y", ref * 1.001, ref, 1e-2).ok
    assert not compare("y", ref * 1.1, ref, 1e-2).ok
    assert not compare("y", torch.full((4,), float("nan")), ref, 1e-2).ok
    assert not compare("y", torch.ones(5), ref, 1e-2).ok


def test_compare_reports_the_reference_magnitude():
    """The verify table shows what the error is relative to: max |ref| over finite values."""
    ref = torch.tensor([3e-8, -5e-8, float("inf"), 1e-9])
    assert compare("y", ref, ref, 1e-2).ref_max_abs == pytest.approx(5e-8)
    assert compare("ids", torch.arange(3), torch.arange(3), 1e-2).ref_max_abs is None


def test_compare_against_float32_when_eager_itself_is_off():
    """Two correct bf16 implementations of a deep model can differ by more than the tolerance
    (ViT-B/16: 1.06e-2 between our plan and eager, each ~0.9-1.0e-2 from float32): the output
    then passes if it is no further from the float32 upcast than HP_MARGIN times eager is."""
    g = torch.Generator().manual_seed(0)
    truth = torch.randn(4096, generator=g)
    eager = truth + 0.01 * truth.norm() / 64 * torch.randn(4096, generator=g)
    ours = truth + 0.009 * truth.norm() / 64 * torch.randn(4096, generator=g)
    plain = compare("y", ours, eager, 1e-2)
    assert not plain.ok and plain.rel_error_f32 is None  # 1.35e-2 apart
    both = compare("y", ours, eager, 1e-2, precise=truth)
    assert both.ok and both.rel_error_f32 < both.eager_rel_error_f32
    worse = truth + 0.03 * truth.norm() / 64 * torch.randn(4096, generator=g)
    bad = compare("y", worse, eager, 1e-2, precise=truth)
    assert not bad.ok and bad.rel_error_f32 > 1.5 * bad.eager_rel_error_f32


def test_upcast_reference_runs_in_float32():
    from aotpack.verify import _upcast_eager

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256)).to(torch.bfloat16)
    x = torch.randn(8, 256).to(torch.bfloat16)
    (ref32,) = _upcast_eager(model, [x], torch.device("cpu"))
    assert next(model.parameters()).dtype == torch.bfloat16  # a copy was upcast, not the model
    exact = model.double()(x.double())
    assert ref32.dtype == torch.float32
    assert ((ref32.double() - exact).norm() / exact.norm()).item() < 1e-5


def test_weights_match_by_content_when_names_swap():
    """A re-run of the frontend may name two folded tables the other way round (a model that
    iterates a Python set: string hashes are salted per process); equal contents (sha256,
    dtype, shape) still match, each manifest name to the record holding its bytes. The
    model's own parameters match by name only: swapped between layers, another model."""
    from types import SimpleNamespace as R

    from aotpack.bundle.writer import match_weights

    def w(name, sha, shape=(4,)):
        return {"name": name, "sha256": sha, "dtype": "bf16", "shape": list(shape)}

    def r(name, sha, shape=(4,)):
        return R(name=name, sha256=sha, dtype=DType.BF16, shape=shape)

    manifest = [w("lin.weight", "s0"), w("cos_1", "s1"), w("cos_2", "s2"), w("twin_a", "s3"),
                w("twin_b", "s3")]
    same = [r(x["name"], x["sha256"]) for x in manifest]
    assert {n: m.name for n, m in match_weights(manifest, same).items()} == \
        {x["name"]: x["name"] for x in manifest}
    swapped = [r("lin.weight", "s0"), r("cos_1", "s2"), r("cos_2", "s1"), r("twin_a", "s3"),
               r("twin_b", "s3")]
    got = match_weights(manifest, swapped, fixed={"lin.weight"})
    assert {n: m.sha256 for n, m in got.items()} == {x["name"]: x["sha256"] for x in manifest}
    assert got["cos_1"].name == "cos_2"
    assert match_weights(manifest, swapped[:-1]) is None
    assert match_weights(manifest, swapped[:-1] + [r("twin_b", "s9")]) is None
    assert match_weights(manifest, swapped[:-1] + [r("twin_b", "s3", (2, 2))]) is None  # shape
    params = [w("a.weight", "p0"), w("b.weight", "p1")]
    exchanged = [r("a.weight", "p1"), r("b.weight", "p0")]
    assert match_weights(params, exchanged, fixed={"a.weight", "b.weight"}) is None


def test_a_failure_of_the_plan_is_not_taken_for_the_models(setup, monkeypatch):
    """Only the eager model's own failure on random inputs sends verify to the example
    inputs; the compiled plan failing is an error (a review found it hidden as a pass)."""
    import aotpack.executor as executor

    bundle, spec, _ = setup
    real, calls = executor.run_reference, []

    def fails_once(*a, **k):  # on the random inputs only: the example inputs would pass
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the plan failed")
        return real(*a, **k)

    monkeypatch.setattr(executor, "run_reference", fails_once)
    with pytest.raises(RuntimeError, match="the plan failed"):
        verify(bundle, spec, reference="cpu")


_SET_ORDER_MODEL = '''import torch

class M(torch.nn.Module):
    """Computes a table per kind while iterating a set of strings, as transformers' models
    with several layer types do (`for t in set(config.layer_types)`): the tables fold into
    constants named in the order they were traced."""
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.freq = {"local": 1.0, "global": 0.25, "chunked": 0.5}

    def forward(self, x):
        pos = torch.arange(x.shape[-1], dtype=torch.float32)
        tables = {k: torch.cos(pos * self.freq[k]) for k in set(self.freq)}
        return self.lin(x) * tables["local"] + tables["global"] - tables["chunked"]

def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(4, 6),)
'''


def _set_orders(seeds):
    import subprocess
    import sys

    code = "print(list({'local', 'global', 'chunked'}))"
    return {s: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": str(s)}).stdout
            for s in seeds}


def test_a_model_iterating_a_set_verifies_in_another_process(tmp_path):
    """Built in a process whose string hashes order the set one way, verified in one that
    orders it another: the folded tables carry other names there, the weights still match."""
    import subprocess
    import sys

    orders = _set_orders(range(1, 9))
    a = 1
    b = next(s for s, o in orders.items() if o != orders[a])
    (tmp_path / "m.py").write_text(_SET_ORDER_MODEL)
    env = {**os.environ, "AOTPACK_NO_PROGRESS": "1"}
    build = subprocess.run([sys.executable, "-m", "aotpack", "build", "m.py:make", "-o", "out",
                            "--force"], cwd=tmp_path, capture_output=True, text=True,
                           env={**env, "PYTHONHASHSEED": str(a)})
    assert build.returncode == 0, build.stderr[-2000:]
    check = subprocess.run([sys.executable, "-m", "aotpack", "verify", "out"], cwd=tmp_path,
                           capture_output=True, text=True, env={**env, "PYTHONHASHSEED": str(b)})
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "passed" in check.stdout


_RELATED_INTS_MODEL = '''import torch

class Boxes(torch.nn.Module):
    """Embeds each box's height (y1 - y0, as LayoutLM does): an index only for y1 >= y0."""
    def __init__(self):
        super().__init__()
        self.height = torch.nn.Embedding(16, 8)

    def forward(self, boxes):
        return self.height(boxes[..., 1] - boxes[..., 0])

def make():
    torch.manual_seed(0)
    y0 = torch.randint(0, 8, (2, 5))
    return Boxes().eval(), (torch.stack([y0, y0 + torch.randint(0, 8, (2, 5))], -1),)
'''


def test_a_model_refusing_random_inputs_is_compared_on_its_examples(tmp_path):
    """Integers drawn uniformly in the example's range break relations the model relies on
    (a box's y1 >= y0): the model raises; verify says so and compares on the example
    inputs instead of ending in the model's traceback."""
    import aotpack

    (tmp_path / "m.py").write_text(_RELATED_INTS_MODEL)
    aotpack.build(f"{tmp_path / 'm.py'}:make", tmp_path / "out", force=True, progress=False)
    report = verify(tmp_path / "out" / "model.aotpack", f"{tmp_path / 'm.py'}:make",
                    reference="cpu")
    assert report.passed
    assert any("failed on the random inputs" in n and "IndexError" in n and
               "example inputs instead" in n for n in report.warnings)


def test_builds_of_a_model_iterating_a_set_are_byte_identical(tmp_path):
    """`aotpack build` fixes PYTHONHASHSEED (cli/entry.py) unless the caller set it, so two
    builds of a model whose trace order depends on string hashes give the same bytes."""
    import hashlib
    import subprocess
    import sys

    (tmp_path / "m.py").write_text(_SET_ORDER_MODEL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    digests = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "aotpack", "build", "m.py:make", "-o",
                              "out", "--force", "--no-progress"], cwd=tmp_path,
                             capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        digests.append(hashlib.sha256((tmp_path / "out" / "model.aotpack").read_bytes())
                       .hexdigest())
    assert digests[0] == digests[1]
