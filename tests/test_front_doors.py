"""Front doors: `model.pt` (TorchScript, scripted or traced, and a module saved whole with
torch.save), `--input NAME=SHAPE[:DTYPE]` example inputs (ranges make dims dynamic), and
`--dtype` for models saved in f32. Each built for real (Triton cross-compile, no GPU) and
verified against eager on the CPU at several shapes."""
import sys

import pytest
import torch

from aotpack.builder import build
from aotpack.shared_steps import BuildError, load_program
from aotpack.frontend import ModelLoadError, load_spec
from aotpack.frontend.inputs import Dim, parse_input
from aotpack.frontend.prepare import prepare
from aotpack.verify import verify


class Net(torch.nn.Module):
    """Token ids and a float input: an embedding, a GEMM with GELU, a softmax."""

    def __init__(self, vocab=50, d=16, f=32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.fc = torch.nn.Linear(d, f)

    def forward(self, ids, x):
        return torch.nn.functional.gelu(self.fc(self.emb(ids) + x)).softmax(-1)


NETDEF = '''import torch
class Saved(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 64)
        self.fc2 = torch.nn.Linear(64, 16)
    def forward(self, x, scale: float = 1.0):
        return self.fc2(torch.relu(self.fc1(x))) * scale
'''


@pytest.fixture
def no_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))


def _script(tmp_path, kind: str) -> str:
    torch.manual_seed(0)
    net = Net().eval()
    ex = (torch.randint(0, 50, (2, 8)), torch.randn(2, 8, 16))
    ts = torch.jit.script(net) if kind == "script" else torch.jit.trace(net, ex)
    path = tmp_path / f"{kind}.pt"
    ts.save(str(path))
    return str(path)


def _build_and_verify(spec, out, **kw):
    result = build(spec, out, progress=False, command_line="t", **kw)
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed, [(c.name, c.rel_error) for c in report.outputs]
    return result, report


# ---------------------------------------------------------------------------- --input syntax
def test_parse_input_forms():
    assert parse_input("x=1x3x224x224:bf16").dims == tuple(Dim(size=s) for s in (1, 3, 224, 224))
    assert parse_input("x=1x3x224x224:bf16").dtype == "bfloat16"
    opt = parse_input("input_ids=batch:1..64xS:1..512:int64")
    assert opt.dims == (Dim(label="batch", lo=1, hi=64), Dim(label="S", lo=1, hi=512))
    assert opt.dtype == "int64"
    assert parse_input("m=batch,seq_max").dims == (Dim(label="batch"), Dim(label="seq_max"))
    assert parse_input("x=2..64x8").dims == (Dim(lo=2, hi=64), Dim(size=8))
    assert parse_input("x=4..4x8").dims == (Dim(size=4), Dim(size=8))  # a range of one: static
    assert parse_input("x=3").dtype is None
    assert parse_input("ids=max_len:1..64,").dims == (Dim(label="max_len", lo=1, hi=64),)
    assert parse_input("x=B:4..4x8").dims == (Dim(size=4, label="B"), Dim(size=8))
    # ONNX's default input names (torch.onnx.export: input.1; TF exports: x:0)
    assert parse_input("input.1=2x3x32x32:f32").name == "input.1"
    assert parse_input("x:0=1x3").name == "x:0" and parse_input("x:0=1x3").dtype is None
    for bad, needle in [("x", "NAME=SHAPE"), ("x=", "NAME=SHAPE"), ("=3", "NAME=SHAPE"),
                        ("x=3:complex", "unknown dtype"), ("x=3x?", "dim '?'"),
                        ("x=5..2", "1 <= LO <= HI"), ("x=0..2", "1 <= LO <= HI")]:
        with pytest.raises(ModelLoadError, match=needle.replace("?", r"\?")):
            parse_input(bad)


# ------------------------------------------------------------------------------- TorchScript
@pytest.mark.parametrize("kind", ["script", "trace"])
def test_torchscript_builds_and_verifies_dynamic(tmp_path, no_runtime, kind):
    """A scripted and a traced archive: names from forward's schema, ids in the embedding's
    range, dims from --input ranges, f32 weights cast by --dtype; verify re-creates the
    inputs from the bundle and casts the model from its provenance."""
    spec = _script(tmp_path, kind)
    loaded = load_spec(spec)
    assert loaded.inputs is None and loaded.input_names == ["ids", "x"]
    result, report = _build_and_verify(spec, tmp_path / "out", dtype="bf16",
                                       inputs=["ids=B:1..16xS:1..64", "x=BxSx16"])
    from aotpack.bundle import read_bundle

    m = read_bundle(result.bundle).manifest
    assert [(i["name"], i["dtype"], i["shape"]) for i in m["inputs"]] == [
        ("ids", "i64", ["B", "S"]), ("x", "bf16", ["B", "S", 16])]
    assert m["provenance"]["dtype"] == "bf16"
    assert len(report.outputs) >= 5  # example, both ends, random interior shapes


def test_f32_model_builds_on_tf32_convs(tmp_path, no_runtime):
    """An f32 model.pt builds as it is: its linears are 1x1 convs on tf32 (they were refused
    with "build with --dtype bf16")."""
    from aotpack.shared_steps import load_program

    spec = _script(tmp_path, "script")
    program = load_program(spec, inputs=["ids=2x8", "x=2x8x16"])
    kinds = [type(op).__name__ for op in program.ops]
    assert "ConvOp" in kinds and "GemmOp" not in kinds


def test_model_pt_needs_its_inputs(tmp_path):
    spec = _script(tmp_path, "script")
    for inputs, needle in [((), r"no example inputs: give each it needs with --input .*forward takes ids, x"),
                           (["ids=2x8"], "add --input for x"),
                           (["x=2x8x16"], "add --input for ids"),
                           (["ids=2x8", "x=2x8x16", "y=3"], "has no input 'y'"),
                           (["ids=2x8", "ids=2x8"], "given twice"),
                           (["ids=Bx8", "x=2x8x16"], "dim B has no range")]:
        with pytest.raises(ModelLoadError, match=needle):
            prepare(load_spec(spec), inputs=inputs, dtype="bf16")


def test_example_values_follow_the_input_kind(tmp_path):
    """Token ids stay inside the smallest embedding, masks are ones, floats take the model's
    dtype; dims written as ranges get example sizes no other dim has."""
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Embedding(7, 4)
            self.b = torch.nn.Embedding(1000, 4)

        def forward(self, input_ids, attention_mask, h):
            return (self.a(input_ids) + self.b(input_ids)) * attention_mask[..., None] + h

    path = tmp_path / "two.pt"
    torch.jit.script(Two().to(torch.bfloat16)).save(str(path))
    loaded = prepare(load_spec(str(path)), inputs=["input_ids=B:1..32x8", "attention_mask=Bx8",
                                                   "h=Bx8x4"])
    ids, mask, h = loaded.inputs
    assert ids.dtype == torch.int64 and 0 <= int(ids.min()) and int(ids.max()) < 7
    assert mask.dtype == torch.int64 and bool((mask == 1).all())
    assert h.dtype == torch.bfloat16
    assert ids.shape[0] not in (8, 4) and ids.shape == mask.shape  # B's example: its own size


# ------------------------------------------------------------------------- torch.save(model)
def test_saved_module_builds_and_verifies(tmp_path, no_runtime, monkeypatch):
    (tmp_path / "netdef.py").write_text(NETDEF)
    monkeypatch.syspath_prepend(str(tmp_path))
    import netdef

    monkeypatch.setitem(sys.modules, "netdef", netdef)  # gone again after the test

    torch.manual_seed(0)
    path = tmp_path / "saved.pt"
    torch.save(netdef.Saved().eval(), str(path))
    # `scale` has a default: only x is needed
    _, report = _build_and_verify(str(path), tmp_path / "out", dtype="bf16",
                                  inputs=["x=rows:1..300x16"])
    assert any(c.name.endswith(" @ x=300x16") for c in report.outputs)
    monkeypatch.delitem(sys.modules, "netdef")


def test_saved_files_that_are_not_models(tmp_path):
    sd = tmp_path / "sd.pt"
    torch.save(Net().state_dict(), str(sd))
    with pytest.raises(ModelLoadError, match="holds a state_dict .* aotpack needs the model"):
        load_spec(str(sd))
    other = tmp_path / "list.pt"
    torch.save([1, 2], str(other))
    with pytest.raises(ModelLoadError, match="holds a list, not a model"):
        load_spec(str(other))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ModelLoadError, match="is not a file torch.save or torch.jit.save wrote"):
        load_spec(str(junk))
    with pytest.raises(ModelLoadError, match="name the factory function too"):
        load_spec(str(tmp_path / "model.py"))


def test_saved_module_whose_class_is_gone(tmp_path, monkeypatch):
    (tmp_path / "gone.py").write_text(NETDEF)
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone

    path = tmp_path / "m.pt"
    torch.save(gone.Saved(), str(path))
    sys.modules.pop("gone")
    (tmp_path / "gone.py").unlink()
    with pytest.raises(ModelLoadError, match="class must be importable here"):
        load_spec(str(path))


# ------------------------------------------------------------- --input and --dtype elsewhere
def test_input_overrides_a_factory_example_and_makes_ranges(tmp_path):
    spec = tmp_path / "f.py"
    spec.write_text("import torch\n"
                    "def make():\n"
                    "    torch.manual_seed(0)\n"
                    "    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU())\n"
                    "    return m.to(torch.bfloat16), (torch.randn(4, 16, dtype=torch.bfloat16),)\n")
    static = load_program(f"{spec}:make", inputs=["input=12x16"])
    assert static.storages["input"].shape == (12, 16) and not static.dynamic
    dynamic = load_program(f"{spec}:make", inputs=["input=rows:1..512x16"])
    assert [(s.name, s.lo, s.hi) for s in dynamic.symbols] == [("rows", 1, 512)]
    with pytest.raises(ModelLoadError, match="3 dims, but the example input has 2"):
        load_program(f"{spec}:make", inputs=["input=1x12x16"])


def test_pt2_keeps_its_dims_when_cast(tmp_path):
    """--dtype on a .pt2 exports its module again, with the program's own dynamic dims."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
    rows = torch.export.Dim("rows", min=1, max=256)
    ep = torch.export.export(m, (torch.randn(8, 16),), dynamic_shapes=({0: rows},))
    path = tmp_path / "m.pt2"
    torch.export.save(ep, str(path))
    f32 = load_program(str(path))  # as it is: the linear a tf32 1x1 conv
    assert [(s.lo, s.hi) for s in f32.symbols] == [(1, 256)]
    program = load_program(str(path), dtype="bf16")
    assert [(s.lo, s.hi) for s in program.symbols] == [(1, 256)]
    assert program.storages["input"].dtype.value == "bf16"
    pinned = load_program(str(path), dtype="bf16", inputs=["input=24x16"])
    assert not pinned.dynamic and pinned.storages["input"].shape == (24, 16)


def test_build_refuses_a_missing_model_pt(tmp_path):
    with pytest.raises(BuildError, match="a .pt2 file, a model.pt or a model.onnx"):
        build(str(tmp_path / "gone.pt"), tmp_path / "out", progress=False)


def test_cli_builds_a_model_pt(tmp_path, no_runtime):
    """`aotpack build model.pt --input ... --dtype bf16` as a user types it; --help says that
    a torch.save file runs code, and a --dtype outside bf16/f16/f32 is a usage error."""
    from typer.testing import CliRunner

    from aotpack.cli.main import app

    spec = _script(tmp_path, "trace")
    runner = CliRunner()
    r = runner.invoke(app, ["build", spec, "-o", str(tmp_path / "out"), "--no-progress",
                            "--input", "ids=B:1..8x8", "--input", "x=Bx8x16", "--dtype", "bf16"])
    assert r.exit_code == 0 and "built" in r.output, r.output
    r = runner.invoke(app, ["build", spec, "-o", str(tmp_path / "o2"), "--dtype", "f64"])
    assert r.exit_code == 2, r.output
    r = runner.invoke(app, ["build", spec, "-o", str(tmp_path / "o3"), "--no-progress"])
    assert r.exit_code == 1 and "no example inputs" in r.output and "Traceback" not in r.output
    help_text = " ".join(runner.invoke(app, ["build", "--help"]).output.split())
    assert "model.pt" in help_text and "only files you trust" in help_text.replace("│ ", "")


def test_transformers_model_saved_whole(tmp_path, no_runtime):
    """A GPT-2 saved with torch.save(model), as a user would: f32 weights cast by --dtype,
    batch and sequence from --input ranges; checked against eager at every verify shape."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300,
                                  n_positions=128, use_cache=False)
    path = tmp_path / "gpt2.pt"
    torch.save(transformers.GPT2LMHeadModel(cfg).eval(), str(path))
    _, report = _build_and_verify(str(path), tmp_path / "out", dtype="bf16",
                                  inputs=["input_ids=batch:1..4xseq:1..128"])
    assert any(c.name.endswith(" @ input_ids=4x128") for c in report.outputs)



def _factory(tmp_path) -> str:
    spec = tmp_path / "g.py"
    spec.write_text("import torch\n"
                    "class G(torch.nn.Module):\n"
                    "    def __init__(self):\n"
                    "        super().__init__()\n"
                    "        self.emb = torch.nn.Embedding(40, 16)\n"
                    "        self.fc = torch.nn.Linear(16, 16)\n"
                    "    def forward(self, ids, mask):\n"
                    "        return self.fc(self.emb(ids)) * mask[..., None]\n"
                    "def make():\n"
                    "    torch.manual_seed(0)\n"
                    "    ids = torch.randint(0, 40, (2, 8))\n"
                    "    return G().to(torch.bfloat16), (ids, torch.ones(2, 8, dtype=torch.bfloat16))\n")
    return f"{spec}:make"


@pytest.mark.parametrize("inputs", [["ids=12x8"], ["ids=B:3..16x8"], ["ids=B:1..16xS:1..24"]])
def test_factory_given_inputs_builds_and_verifies(tmp_path, no_runtime, inputs):
    """--input on a factory's ids alone: the mask's dims of the same example size follow (a
    note says so); verify loads the factory with the bundle's example inputs again."""
    import aotpack

    spec = _factory(tmp_path)
    result = aotpack.build(spec, tmp_path / "out", inputs=inputs)  # the Python API
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed, [(c.name, c.rel_error) for c in report.outputs]
    from aotpack.bundle import read_bundle

    m = read_bundle(result.bundle).manifest
    assert m["inputs"][0]["shape"] == m["inputs"][1]["shape"]
    assert m["provenance"]["inputs"] == inputs
    assert any("mask.0" in n and "follows" in n for n in result.notes), result.notes


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x, y):
        return self.fc(x) + y


class _TwoDerived(_Two):
    def forward(self, x, y):  # y has twice x's rows
        return self.fc(torch.cat([x, x])) + y


def _shared_pt2(tmp_path, dims: str):
    """A .pt2 whose inputs x and y share one dim ("shared", or "unbounded": no maximum), or
    whose y's rows are derived from x's ("derived")."""
    torch.manual_seed(0)
    model, ex = _Two(), (torch.randn(8, 16), torch.randn(8, 16))
    if dims == "derived":
        b = torch.export.Dim("b", min=1, max=32)
        model, ex, spec = _TwoDerived(), (ex[0], torch.randn(16, 16)), ({0: b}, {0: 2 * b})
    else:
        b = torch.export.Dim("b", min=1, max=64) if dims == "shared" else torch.export.Dim("b")
        spec = ({0: b}, {0: b})
    ep = torch.export.export(model, ex, dynamic_shapes=spec)
    path = tmp_path / f"{dims}.pt2"
    torch.export.save(ep, str(path))
    return str(path)


def test_pt2_dims_shared_unbounded_and_derived(tmp_path):
    shared = _shared_pt2(tmp_path, "shared")
    p = load_program(shared, dtype="bf16")
    assert [(s.name, s.lo, s.hi) for s in p.symbols] == [("x_0", 1, 64)]
    p = load_program(shared, dtype="bf16", dynamic=["y.0=B:1..32"])  # the group changes hands
    assert [(s.name, s.hi) for s in p.symbols] == [("B", 32)]
    p = load_program(shared, dtype="bf16", inputs=["x=24x16"])  # y follows x's new size
    assert not p.dynamic and p.storages["y"].shape == (24, 16)
    p = load_program(shared, dtype="bf16", inputs=["x=rows:2..40x16"])
    assert [(s.name, s.hi) for s in p.symbols] == [("rows", 40)]
    unbounded = _shared_pt2(tmp_path, "unbounded")
    with pytest.raises(ModelLoadError, match="no upper bound"):
        load_program(unbounded, dtype="bf16")
    p = load_program(unbounded, dtype="bf16", dynamic=["x.0=b:1..64"])
    assert [(s.name, s.hi) for s in p.symbols] == [("b", 64)]
    derived = _shared_pt2(tmp_path, "derived")
    with pytest.raises(ModelLoadError, match=r"dim 0 of input 'y' is 2\*\w+ in the .pt2, "
                                             r"derived from another dim"):
        load_program(derived, dtype="bf16")


def test_input_labels_and_signatures(tmp_path, monkeypatch):
    spec = _script(tmp_path, "script")
    loaded = prepare(load_spec(spec), dtype="bf16", inputs=["ids=B:4..4x8", "x=Bx8x16"])
    assert loaded.inputs[1].shape == (4, 8, 16) and loaded.dynamic_shapes is None
    with pytest.raises(ModelLoadError, match="separate the dims with commas"):
        prepare(load_spec(spec), dtype="bf16", inputs=["ids=max_len:1..64", "x=2x8x16"])
    (tmp_path / "sigs.py").write_text(
        "import torch\n"
        "class Star(torch.nn.Module):\n"
        "    def forward(self, *args):\n"
        "        return args[0] + 1\n"
        "class Kw(torch.nn.Module):\n"
        "    def forward(self, x, *, y):\n"
        "        return x + y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import sigs

    monkeypatch.setitem(sys.modules, "sigs", sigs)
    for cls, needle in [(sigs.Star, r"takes \*args"), (sigs.Kw, "takes keyword-only y")]:
        path = tmp_path / f"{cls.__name__}.pt"
        torch.save(cls(), str(path))
        with pytest.raises(ModelLoadError, match=needle):
            prepare(load_spec(str(path)), inputs=["x=4x16"])


def test_traced_integer_input_keeps_its_dtype(tmp_path):
    """A traced archive records its inputs' dtypes: an int input with no telling name is not
    made a float."""
    emb = torch.nn.Embedding(10, 4)
    path = tmp_path / "t.pt"
    torch.jit.trace(emb, (torch.zeros(2, 3, dtype=torch.long),)).save(str(path))
    loaded = prepare(load_spec(str(path)), inputs=["input=2x3"])
    assert loaded.inputs[0].dtype == torch.int64


def test_user_trial_messages(tmp_path):
    """Mistakes a new user made, each a one-line error saying what to do: a static .pt2 given
    another shape, a shape the model cannot take, an f32 trace cast to bf16."""
    from aotpack.passes.canonicalize import FoldError

    torch.manual_seed(0)
    ep = torch.export.export(torch.nn.Linear(16, 16), (torch.randn(4, 16),))
    static = tmp_path / "static.pt2"
    torch.export.save(ep, str(static))
    with pytest.raises(ModelLoadError, match="dim 0 is 4 in the .pt2, exported static"):
        load_program(str(static), dtype="bf16", inputs=["input=8x16"])
    shared = _shared_pt2(tmp_path, "shared")
    with pytest.raises(ModelLoadError, match=r"outside the range 1..64 the .pt2 was exported"):
        load_program(shared, dtype="bf16", inputs=["x=B:1..128x16"])
    spec = _factory(tmp_path)
    with pytest.raises(ModelLoadError, match=r"could not run the model on its example inputs "
                                             r"\(forward\(ids=\(2, 9\) int64, "
                                             r"mask=\(2, 8\) bfloat16\)\)"):
        load_program(spec, inputs=["ids=2x9", "mask=2x8"])
    lstm = tmp_path / "lstm.pt"
    torch.jit.trace(torch.nn.LSTM(8, 8, batch_first=True), (torch.randn(2, 5, 8),),
                    check_trace=False).save(str(lstm))
    with pytest.raises(FoldError, match="mixes bf16 and f32 .*trace it in the dtype you build"):
        load_program(str(lstm), inputs=["input=2x5x8"], dtype="bf16")


def test_saved_class_found_beside_the_file_or_named_as_main(tmp_path):
    """torch.save's class is found in the file's folder from any working folder (a console
    script's sys.path has neither); a class saved from a script's __main__ says so."""
    import subprocess

    (tmp_path / "beside.py").write_text(NETDEF)
    save = ("import sys, torch; sys.path.insert(0, {d!r}); import beside; "
            "torch.save(beside.Saved(), {p!r})")
    subprocess.run([sys.executable, "-c", save.format(d=str(tmp_path), p=str(tmp_path / "b.pt"))],
                   check=True, cwd=tmp_path)
    probe = ("from aotpack.frontend import load_spec; "
             "print(type(load_spec({p!r}).model).__name__)")
    r = subprocess.run([sys.executable, "-c", probe.format(p=str(tmp_path / "b.pt"))],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "Saved", r.stderr[-600:]
    script = tmp_path / "save_main.py"
    script.write_text(NETDEF + "\ntorch.save(Saved(), 'main.pt')\n")
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path)
    with pytest.raises(ModelLoadError, match=r"defined in the script that saved it \(__main__\)"):
        load_spec(str(tmp_path / "main.pt"))


def test_factory_imports_a_module_beside_it_from_any_working_folder(tmp_path):
    """A factory's folder is on the import path while it loads (issue 15): its own helper
    module imports when aotpack runs from another folder (here /, a fresh process)."""
    import subprocess

    (tmp_path / "zz_sibling_layers.py").write_text(
        "import torch\n\nclass Twice(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x * 2\n")
    (tmp_path / "factory.py").write_text(
        "import torch\nfrom zz_sibling_layers import Twice\n\n"
        "def make():\n    return Twice(), (torch.randn(2, 3),)\n")
    probe = ("from aotpack.frontend import load_spec; "
             "print(type(load_spec({p!r}).model).__name__)")
    r = subprocess.run([sys.executable, "-c", probe.format(p=f"{tmp_path / 'factory.py'}:make")],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "Twice", r.stderr[-600:]


def test_a_tuple_of_example_inputs_nested_once_too_often_is_named_not_a_crash():
    """[(x,)] where (x,) was meant: the refusal names the nesting instead of failing on
    tuple.shape while it formats the message."""
    from aotpack.frontend import to_graph

    with pytest.raises(ModelLoadError, match=r"example inputs \(forward\(input=\(\(2, 4\) "
                                             r"float32\)\)\): TypeError"):
        to_graph(torch.nn.Linear(4, 4), [(torch.randn(2, 4),)])
