"""Front doors, the shapes of example inputs: a factory's inputs as a dict by name, an input
bound to the wrong forward parameter, a model given none, and a traced model whose size
arithmetic comes back as .item()s of 0-d tensors."""
import pytest
import torch

from aotpack.builder import build
from aotpack.frontend import ModelLoadError
from aotpack.shared_steps import load_program
from aotpack.verify import verify


@pytest.fixture
def no_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))


def _build_and_verify(spec, out, **kw):
    result = build(spec, out, progress=False, command_line="t", **kw)
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed, [(c.name, c.rel_error) for c in report.outputs]
    return result, report


class _SizesAsTensors(torch.nn.Module):
    """What BERT's embeddings do with the sequence length: a trace keeps `n` as a 0-d tensor
    (prim::NumToTensor), so the slices' ends are .item()s of size arithmetic once exported."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.register_buffer("pos", torch.randn(1, 64, 16))
        self.past = 1

    def forward(self, x):
        n = x.shape[1]
        first = self.pos[:, self.past:n + self.past]
        return self.fc(x) + first + self.pos[:, :n // 2].mean(1, keepdim=True)


def test_traced_sizes_held_in_tensors_stay_dynamic(tmp_path, no_runtime):
    """A traced model's size arithmetic comes back as .item() of 0-d tensors: each is read
    as the size it holds (S + 1, S // 2), the slices made from them keep the symbolic
    length, and the bundle verifies at odd and even S."""
    torch.manual_seed(0)
    path = tmp_path / "sizes.pt"
    torch.jit.trace(_SizesAsTensors().eval(), (torch.randn(2, 8, 16),)).save(str(path))
    result, report = _build_and_verify(str(path), tmp_path / "out",
                                       inputs=["x=2xS:2..63x16"])
    from aotpack.bundle import read_bundle

    m = read_bundle(result.bundle).manifest
    assert m["inputs"][0]["shape"] == [2, "S", 16]
    shapes = {c.name.partition(" @ ")[2] for c in report.outputs}
    assert {"x=2x2x16", "x=2x63x16"} <= shapes and len(shapes) >= 3


def test_a_direct_aten_call_is_not_named_by_its_overload():
    """torch.export's record of an aten op called directly (a TorchScript conversion's
    .item()) is "OpOverload.<op>.<overload>": the refusal names the op, never "default"."""
    from types import SimpleNamespace

    from aotpack.frontend.origin import torch_call

    node = SimpleNamespace(meta={"torch_fn": ("_local_scalar_dense.default_1",
                                              "OpOverload._local_scalar_dense.default")})
    assert torch_call(node) is None


KEYWORD_SRC = """import torch
class Masked(torch.nn.Module):  # the mask is forward's third parameter, as in GPTBigCode
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.fc = torch.nn.Linear(16, 16)
    def forward(self, input_ids, past=None, attention_mask=None):
        if past is not None:
            past.get_seq_length()  # what a cache is asked first
        h = self.fc(self.emb(input_ids))
        return {"scores": h * attention_mask[..., None].to(h.dtype)}
def _inputs():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    return ids, mask
def by_name():
    ids, mask = _inputs()
    return Masked().eval(), {"attention_mask": mask, "input_ids": ids}
def by_position():
    ids, mask = _inputs()
    return Masked().eval(), (ids, mask)
"""


def test_keyword_example_inputs_build_by_name(tmp_path, no_runtime):
    """A factory's inputs as a dict (a tokenizer's output): each goes to the parameter of its
    name, in the dict's order, whatever forward's order; --dynamic names them; verify passes."""
    import aotpack
    from aotpack.bundle import read_bundle

    (tmp_path / "kw.py").write_text(KEYWORD_SRC)
    spec = f"{tmp_path / 'kw.py'}:by_name"
    result = aotpack.build(spec, tmp_path / "out", dynamic=["input_ids.1=S:1..32"])
    m = read_bundle(result.bundle).manifest
    assert [(i["name"], i["shape"]) for i in m["inputs"]] == [
        ("attention_mask", [2, "S"]), ("input_ids", [2, "S"])]
    assert [o["name"] for o in m["outputs"]] == ["scores"]
    assert sorted(w["name"] for w in m["weights"]) == ["emb.weight", "fc.bias", "fc.weight"]
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed and len(report.outputs) >= 3, report.outputs
    from aotpack.frontend.keyword_inputs import wrap_keyword_inputs

    model = torch.nn.Linear(4, 4)
    with pytest.raises(ModelLoadError, match="forward takes no parameter 'x'"):
        wrap_keyword_inputs(model, {"x": torch.ones(4)}, "f.py:make")
    with pytest.raises(ModelLoadError, match="cannot be forward's parameter names"):
        wrap_keyword_inputs(model, {"input ids": torch.ones(4)}, "f.py:make")
    with pytest.raises(ModelLoadError, match="an empty dict"):
        wrap_keyword_inputs(model, {}, "f.py:make")


def test_an_input_on_the_wrong_parameter_is_named(tmp_path):
    """Positional inputs whose second lands on forward's `past`: the model's own code fails
    (AttributeError), and the message shows each input with its parameter, plus the remedy,
    static or dynamic alike; never a traceback."""
    (tmp_path / "kw.py").write_text(KEYWORD_SRC)
    spec = f"{tmp_path / 'kw.py'}:by_position"
    for dynamic in ([], ["input_ids.1=S:1..32"]):
        with pytest.raises(ModelLoadError) as e:
            load_program(spec, dynamic=dynamic)
        text = str(e.value)
        assert "forward(input_ids=(2, 8) int64, past=(2, 8) int64)" in text, text
        assert "AttributeError" in text and "passed to forward by position" in text
        assert "--dynamic dims" not in text


def test_a_language_model_without_inputs_is_pointed_at_the_task(tmp_path):
    """A factory returning a transformers LM alone, built with no --input: the message names
    forward's first parameters (not all eleven) and the task that makes its own inputs."""
    (tmp_path / "lm.py").write_text(
        "import torch, transformers as T\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return T.GPT2LMHeadModel(T.GPT2Config(vocab_size=96, n_embd=32, n_layer=1,\n"
        "                                          n_head=2, n_positions=32)).eval()\n")
    with pytest.raises(ModelLoadError) as e:
        load_program(f"{tmp_path / 'lm.py'}:make")
    text = str(e.value)
    assert "the model carries no example inputs" in text, text
    assert "forward takes input_ids, past_key_values, attention_mask, token_type_ids, ..." \
        in text and "logits_to_keep" not in text
    assert "--task text-generation" in text


SIZE_SRC = """import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.randn(1, 200, 16))
    def forward(self, x):
        t = torch.scalar_tensor(x.shape[1], dtype=torch.int64)
        k = {expr}.item()
        return self.pos[:, :k].sum(1, keepdim=True) + x
def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(2, 8, 16),)
"""


@pytest.mark.parametrize("expr,refusal", [
    ("torch.floor_divide(t + 5, 3)", None),
    ("(t * 40).to(torch.uint8)", "depends on the input data"),  # would wrap around
    ("torch.floor_divide(t * -4, -2)", "depends on the input data"),  # a negative divisor
    ("(40 - t)", r"reads the size 40 - S, which is -23 at the smallest dims"),
])
def test_sizes_read_back_are_followed_only_where_exact(tmp_path, no_runtime, expr, refusal):
    """A size held in a tensor is followed through int32/int64 arithmetic with a positive
    divisor; one that could wrap around in a narrow dtype, or go below 0, is refused at its
    .item() with the source line, never built wrong."""
    (tmp_path / "m.py").write_text(SIZE_SRC.replace("{expr}", expr))
    spec = f"{tmp_path / 'm.py'}:make"
    if refusal is None:
        _build_and_verify(spec, tmp_path / "out", inputs=["x=2xS:1..63x16"])
        return
    with pytest.raises(Exception, match=refusal) as e:
        load_program(spec, inputs=["x=2xS:1..63x16"])
    assert "m.py:8" in str(e.value)


def test_a_torchscript_module_takes_no_dict_of_inputs(tmp_path):
    """TorchScript's converter binds inputs by position: a dict is refused, saying so."""
    from aotpack.frontend.keyword_inputs import wrap_keyword_inputs

    scripted = torch.jit.script(torch.nn.Linear(4, 4))
    with pytest.raises(ModelLoadError, match="TorchScript module's example inputs must be a "
                                             "tuple"):
        wrap_keyword_inputs(scripted, {"input": torch.ones(2, 4)}, "f.py:make")


def test_a_size_that_reaches_zero_names_its_line(tmp_path):
    """pos[:, :S - 2] with S from 2: a size of 0 at the range's bottom, which the IR's type
    rule cannot decide: the refusal names the op, the model's line and the remedy."""
    from aotpack.ir.sym import SymbolicError

    (tmp_path / "m.py").write_text(SIZE_SRC.replace("{expr}", "(t - 2)"))
    with pytest.raises(SymbolicError, match=r"from .*m.py:9: .*narrow the dims' ranges"):
        load_program(f"{tmp_path / 'm.py'}:make", inputs=["x=2xS:2..63x16"])


def test_dtype_f32_builds_a_half_precision_model_in_float32():
    """`--dtype f32` (a new-user trial asked for it): a bf16 model's weights and inputs in
    float32; other dtypes are refused with the three choices."""
    import torch

    from aotpack.frontend.load import LoadedModel, ModelLoadError
    from aotpack.frontend.prepare import apply_dtype

    model = torch.nn.Linear(4, 3).to(torch.bfloat16)
    loaded = apply_dtype(LoadedModel(model, (torch.randn(2, 4).to(torch.bfloat16),)), "f32")
    assert loaded.model.weight.dtype == torch.float32
    assert loaded.inputs[0].dtype == torch.float32
    with pytest.raises(ModelLoadError, match="bf16, f16 or f32"):
        apply_dtype(LoadedModel(model, None), "f64")


@pytest.mark.parametrize("form", ["buffer", "computed"])
def test_a_complex_rotary_is_refused_with_the_real_form_as_remedy(form):
    """freqs_cis as a complex buffer, or torch.polar over real constants (Llama-4's style):
    complex numbers have no aotpack dtype; the refusal says how to write the rotation."""
    import torch

    from aotpack.frontend import to_graph
    from aotpack.frontend.translate import UnsupportedOpError

    class Rotary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            angles = torch.outer(torch.arange(16).float(), 1e-2 * torch.arange(4).float())
            if form == "buffer":
                self.register_buffer("freqs_cis", torch.polar(torch.ones(16, 4), angles))
            else:
                self.register_buffer("angles", angles)

        def forward(self, x):
            fc = self.freqs_cis if form == "buffer" else \
                torch.polar(torch.ones_like(self.angles), self.angles)
            xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            return torch.view_as_real(xc * fc).flatten(-2)

    with pytest.raises(UnsupportedOpError, match="(?s)complex64.*real cos/sin tables"):
        to_graph(Rotary(), (torch.randn(16, 8),))
