"""The ONNX front door: hand-made graphs per op family (static and dynamic dims), models
exported with torch.onnx.export (legacy exporter), the attention fusion on ONNX and on eager
torch attention, errors, and a bundle built, verified and (on a GPU) run."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import ModelLoadError, UnsupportedOpError, load_spec, to_graph  # noqa: E402
from aotpack.frontend.prepare import prepare  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from onnx_models import GPT, Bert, Block  # noqa: E402

F = TensorProto.FLOAT
OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compile(proto, tmp_path, inputs=(), dynamic=()):
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    loaded = prepare(load_spec(str(path)), inputs=inputs, dynamic=dynamic)
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    return loaded, program


def _check(proto, tmp_path, inputs=(), dynamic=(), shapes=None, tol=1e-5):
    """Built and run through the CPU reference, against the ONNX model's own eager run
    (onnxruntime or onnx.reference), at the example and at `shapes`."""
    loaded, program = _compile(proto, tmp_path, inputs, dynamic)
    cases = [list(loaded.inputs)]
    for shape_set in shapes or []:
        cases.append([torch.randn(s) if t.is_floating_point() else
                      torch.randint(0, 2, s, dtype=t.dtype) for s, t in zip(shape_set,
                                                                                  loaded.inputs)])
    for xs in cases:
        outs, refs = run_reference(program, xs), loaded.model(*xs)
        for o, r in zip(outs, refs):
            assert o.shape == r.shape
            err = float((o.double() - r.double()).norm() / max(r.double().norm(), 1e-12))
            assert err < tol, err
    return program


def _v(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


# ----------------------------------------------------------------------------- op families
def test_elementwise_and_erf_gelu(tmp_path):
    w = np.random.RandomState(0).rand(8).astype(np.float32) + 0.5
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Mul", ["a", "two"], ["b"]),
        helper.make_node("Sub", ["b", "x"], ["c"]), helper.make_node("Div", ["c", "w"], ["d"]),
        helper.make_node("Abs", ["d"], ["e"]), helper.make_node("Sqrt", ["e"], ["f"]),
        helper.make_node("Pow", ["f", "two"], ["g"]), helper.make_node("Reciprocal", ["w"], ["rw"]),
        helper.make_node("Mul", ["g", "rw"], ["h"]), helper.make_node("Tanh", ["h"], ["i"]),
        helper.make_node("Sigmoid", ["i"], ["j"]), helper.make_node("Exp", ["j"], ["k"]),
        helper.make_node("Log", ["k"], ["l"]), helper.make_node("Neg", ["l"], ["m"]),
        helper.make_node("Sin", ["m"], ["n"]), helper.make_node("Cos", ["n"], ["o"]),
        helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["o", "r"], ["s"]),
        # GELU written with Erf, as torch exports F.gelu below opset 20
        helper.make_node("Div", ["s", "sqrt2"], ["t0"]), helper.make_node("Erf", ["t0"], ["t1"]),
        helper.make_node("Add", ["t1", "one"], ["t2"]), helper.make_node("Mul", ["s", "t2"], ["t3"]),
        helper.make_node("Mul", ["t3", "half"], ["y"]),
    ]
    inits = [("w", w), ("two", np.float32(2)), ("sqrt2", np.float32(math.sqrt(2))),
             ("one", np.float32(1)), ("half", np.float32(0.5))]
    m = _model(nodes, [_v("x", ["batch", 8])], [_v("y", ["batch", 8])], inits)
    program = _check(m, tmp_path, dynamic=["batch=1..32"], shapes=[[(31, 8)], [(1, 8)]])
    assert program.summary["fused_ops"].get("gelu") == 1  # the Erf form became one GELU
    assert "erf" not in str(program.summary["fused_ops"])


def test_matmul_gemm_softmax_norm_reductions(tmp_path):
    r = np.random.RandomState(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Reshape", ["a", "flat"], ["a2"]),
        helper.make_node("Gemm", ["a2", "w2", "b2"], ["g"], transB=1),
        helper.make_node("Gemm", ["g", "w3", "b3"], ["g3"], alpha=0.5, beta=2.0),
        helper.make_node("LayerNormalization", ["g3", "ln_w", "ln_b"], ["n"], epsilon=1e-5),
        helper.make_node("Softmax", ["n"], ["s"], axis=-1),
        helper.make_node("LogSoftmax", ["n"], ["ls"], axis=1),
        helper.make_node("ReduceMean", ["s"], ["rm"], axes=[1], keepdims=1),
        helper.make_node("ReduceSum", ["ls", "ax"], ["rs"], keepdims=0),
        helper.make_node("Add", ["s", "rm"], ["y"]),
    ]
    inits = [("w1", r.randn(16, 32).astype(np.float32)), ("w2", r.randn(24, 32).astype(np.float32)),
             ("b2", r.randn(24).astype(np.float32)), ("w3", r.randn(24, 24).astype(np.float32)),
             ("b3", r.randn(24).astype(np.float32)), ("flat", np.array([-1, 32])),
             ("ln_w", r.rand(24).astype(np.float32)), ("ln_b", r.randn(24).astype(np.float32)),
             ("ax", np.array([1]))]
    m = _model(nodes, [_v("x", [6, 16])], [_v("y", [6, 24]), _v("rs", [6])], inits)
    _check(m, tmp_path)


def test_reduce_max_axes_as_input_opset18(tmp_path):
    nodes = [helper.make_node("ReduceMax", ["x", "ax"], ["y"], keepdims=1)]
    m = _model(nodes, [_v("x", ["b", 5, 8])], [_v("y", ["b", 5, 1])], [("ax", np.array([-1]))],
               opset=18)
    _check(m, tmp_path, inputs=["x=b:1..9x5x8"], shapes=[[(9, 5, 8)]])


def test_shape_subgraph_gives_symbolic_reshape(tmp_path):
    """Shape → Gather → Unsqueeze → Concat → Reshape on dynamic dims: a symbolic view."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["sh", "i1"], ["s"], axis=0),
        helper.make_node("Mul", ["b", "s"], ["bs"]),
        helper.make_node("Unsqueeze", ["bs", "ax0"], ["bs1"]),
        helper.make_node("Concat", ["bs1", "c4", "c4"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["t", "ax0"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax0"], ["q"]),
        helper.make_node("Slice", ["q", "st", "en", "ax2"], ["sl"]),
        helper.make_node("Split", ["sl", "sp"], ["p1", "p2"], axis=1),
        helper.make_node("Concat", ["p2", "p1"], ["y"], axis=1),
        helper.make_node("Gather", ["y", "i1"], ["yy"], axis=2),
        helper.make_node("Cast", ["yy"], ["z"], to=TensorProto.FLOAT16),
        helper.make_node("Identity", ["z"], ["out"]),
    ]
    inits = [("i0", np.array(0)), ("i1", np.array(1)), ("ax0", np.array([0])),
             ("c4", np.array([4])), ("st", np.array([1])), ("en", np.array([1 << 62])),
             ("ax2", np.array([2])), ("sp", np.array([1, 3]))]
    m = _model(nodes, [_v("x", ["batch", "seq", 16])], [_v("out", ["n", 4], TensorProto.FLOAT16)],
               inits)
    loaded, program = _compile(m, tmp_path, dynamic=["batch=1..4", "seq=1..16"])
    graph = to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    view = next(n for n in graph.nodes if n.op.value == "view")
    assert [str(d) for d in view.attrs.shape] == ["batch*seq", "4", "4"]
    _check(m, tmp_path, dynamic=["batch=1..4", "seq=1..16"], shapes=[[(3, 13, 16)]], tol=2e-3)


def test_embedding_gather_expand_and_folded_masks(tmp_path):
    """Gather of a weight table by ids → EMBEDDING; ConstantOfShape/Equal/Where fold."""
    r = np.random.RandomState(2)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("ConstantOfShape", ["four"], ["c"],
                         value=helper.make_tensor("v", TensorProto.INT64, [1], [1])),
        helper.make_node("Equal", ["c", "m1"], ["eq"]),
        helper.make_node("Where", ["eq", "c", "four"], ["shape"]),  # [1, 1, 1, 1]... folded
        helper.make_node("Shape", ["e"], ["es"]),
        helper.make_node("Expand", ["bias", "es"], ["be"]),
        helper.make_node("Add", ["e", "be"], ["y0"]),
        helper.make_node("Dropout", ["y0"], ["y"]),
    ]
    inits = [("table", r.randn(30, 8).astype(np.float32)), ("four", np.array([4])),
             ("m1", np.array([-1])), ("bias", r.randn(1, 8).astype(np.float32))]
    m = _model(nodes, [_v("ids", ["b", "s"], TensorProto.INT64)], [_v("y", ["b", "s", 8])],
               inits)
    loaded, program = _compile(m, tmp_path, dynamic=["b=1..4", "s=1..64"])
    assert int(loaded.inputs[0].max()) < 30  # ids drawn inside the table
    assert program.summary["kernel_ops"].get("EmbeddingOp") == 1
    _check(m, tmp_path, dynamic=["b=1..4", "s=1..64"])


# ----------------------------------------------------------------------------- errors
def test_unsupported_op_is_named(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Elu", ["a"], ["y"], name="act_7")]
    m = _model(nodes, [_v("x", [2, 4])], [_v("y", [2, 4])])
    with pytest.raises(UnsupportedOpError) as e:
        _compile(m, tmp_path)
    msg = str(e.value)
    assert "Elu" in msg and "act_7" in msg and "ai.onnx" in msg and "opset 17" in msg
    assert "Supported ONNX operators" in msg


def test_a_recurrent_op_is_refused_with_the_pytorch_route(tmp_path):
    """ONNX's GRU/LSTM/RNN are not read: the refusal says where the same model does build."""
    w = helper.make_tensor("W", onnx.TensorProto.FLOAT, [1, 12, 4], [0.1] * 48)
    r = helper.make_tensor("R", onnx.TensorProto.FLOAT, [1, 12, 4], [0.1] * 48)
    nodes = [helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=4, name="gru_0")]
    graph = helper.make_graph(nodes, "g", [_v("x", [5, 2, 4])], [_v("y", [5, 1, 2, 4])],
                              initializer=[w, r])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(UnsupportedOpError, match=r"GRU is not supported \(recurrent layers.*"
                                                 r"torch.export .pt2 or a module saved"):
        _compile(m, tmp_path)


def test_contrib_op_is_refused_with_a_hint(tmp_path):
    nodes = [helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft", name="fg")]
    graph = helper.make_graph(nodes, "g", [_v("x", [2, 4])], [_v("y", [2, 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    from aotpack.frontend.onnx.model import OnnxModel
    from aotpack.frontend.onnx.translate import onnx_to_graph
    from aotpack.frontend.onnx.dims import resolve

    model = OnnxModel(path, m)  # the checker knows no contrib schemas: translate directly
    with pytest.raises(UnsupportedOpError, match="FastGelu.*onnxruntime contrib"):
        onnx_to_graph(model, resolve(model))


def test_named_dims_need_ranges(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_v("x", ["batch", "seq", 8])],
               [_v("y", ["batch", "seq", 8])])
    with pytest.raises(ModelLoadError) as e:
        _compile(m, tmp_path)
    assert "'batch'" in str(e.value) and "--dynamic batch=1..N" in str(e.value)
    # a pin, or a range per name, or NAME.DIM forms are all accepted
    _compile(m, tmp_path, inputs=["x=2x5x8"])
    _, p = _compile(m, tmp_path, dynamic=["batch=1..4", "x.1=S:1..32"])
    assert set(p.summary["dims"]) == {"batch", "S"}
    with pytest.raises(ModelLoadError, match="declared 8"):
        _compile(m, tmp_path, inputs=["x=2x5x9"])


def test_opset_out_of_range_and_not_onnx(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_v("x", [2])], [_v("y", [2])],
               opset=11)
    with pytest.raises(ModelLoadError, match="opset 11.*13"):
        _compile(m, tmp_path)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    with pytest.raises(ModelLoadError):
        load_spec(str(bad))


def test_external_data_is_read_beside_the_model(tmp_path):
    w = np.random.RandomState(3).randn(64, 64).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_v("x", [4, 64])],
               [_v("y", [4, 64])], [("w", w)])
    folder = tmp_path / "ext"
    folder.mkdir()
    onnx.save(m, str(folder / "m.onnx"), save_as_external_data=True, location="m.data",
              size_threshold=0)
    assert (folder / "m.data").is_file()
    loaded = prepare(load_spec(str(folder / "m.onnx")))
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    out = run_reference(program, list(loaded.inputs))[0]
    torch.testing.assert_close(out, loaded.inputs[0] @ torch.from_numpy(w), rtol=1e-4,
                               atol=1e-4)


# ----------------------------------------------------------------------------- exported models
def _export(model, args, path, names, dynamic=None, opset=OPSET, outputs=None):
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset,
                      input_names=names, output_names=outputs, dynamic_axes=dynamic)
    return str(path)


def _against_torch(spec, model, dynamic=(), points=((2, 16),), n_vocab=100):
    loaded = prepare(load_spec(spec), dynamic=dynamic)
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    for b, s in points:
        xs = [torch.randint(0, n_vocab, (b, s))] + [torch.zeros(b, s, dtype=torch.long)
                                                   for _ in loaded.inputs[1:]]
        out = run_reference(program, xs)[0]
        with torch.no_grad():
            ref = model(*xs)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out, loaded.model(*xs)[0], rtol=1e-4, atol=1e-4)
    return program


@pytest.mark.parametrize("fill", [False, True])
def test_gpt_like_static_fuses_attention(tmp_path, fill):
    torch.manual_seed(0)
    m = GPT(fill=fill).eval()
    spec = _export(m, (torch.randint(0, 100, (2, 16)),), tmp_path / "g.onnx", ["input_ids"])
    p = _against_torch(spec, m)
    assert p.summary["kernel_ops"]["AttentionOp"] == 2
    assert p.summary["fused_ops"]["sdpa"] == 2 and "softmax" not in p.summary["fused_ops"]


@pytest.mark.parametrize("opset", [14, 17, 20])
def test_gpt_and_bert_like_dynamic(tmp_path, opset):
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    axes = {0: "batch", 1: "sequence"}
    g = GPT().eval()
    spec = _export(g, (ids,), tmp_path / "g.onnx", ["input_ids"], {"input_ids": axes},
                   opset=opset)
    p = _against_torch(spec, g, ["batch=1..4", "sequence=1..64"], [(1, 1), (3, 37), (4, 64)])
    assert p.summary["kernel_ops"]["AttentionOp"] == 2 and set(p.summary["dims"]) == \
        {"batch", "sequence"}
    b = Bert().eval()
    spec = _export(b, (ids, torch.zeros_like(ids)), tmp_path / "b.onnx",
                   ["input_ids", "token_type_ids"], {"input_ids": axes, "token_type_ids": axes},
                   opset=opset)
    p = _against_torch(spec, b, ["batch=1..4", "sequence=1..64"], [(2, 5), (4, 64)])
    assert p.summary["kernel_ops"]["AttentionOp"] == 2


def test_vit_like_patch_embedding(tmp_path):
    class ViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = torch.nn.Conv2d(3, 64, 8, 8)
            self.block = Block(64, 4, causal=False, gelu="none")

        def forward(self, x):
            return self.block(self.patch(x).flatten(2).transpose(1, 2))

    torch.manual_seed(0)
    m = ViT().eval()
    spec = _export(m, (torch.randn(2, 3, 32, 32),), tmp_path / "v.onnx", ["pixel_values"])
    loaded = prepare(load_spec(spec))
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    out = run_reference(program, list(loaded.inputs))[0]
    torch.testing.assert_close(out, m(*loaded.inputs), rtol=1e-4, atol=1e-4)
    assert program.summary["kernel_ops"]["AttentionOp"] == 1


def test_fuse_attention_on_eager_torch_attention():
    """The pass helps torch models too: attention written as matmul/softmax/matmul."""
    torch.manual_seed(0)
    m = GPT().eval()
    ids = torch.randint(0, 100, (2, 16))
    program = compile_graph(to_graph(m, (ids,)))
    assert program.summary["kernel_ops"]["AttentionOp"] == 2
    torch.testing.assert_close(run_reference(program, [ids])[0], m(ids), rtol=1e-4, atol=1e-4)


def test_constant_band_mask_becomes_the_attention_mask():
    """A constant mask that is neither nothing nor causal (a band) is the attention kernel's
    mask operand."""
    class Banded(torch.nn.Module):
        def forward(self, q, k, v):
            band = torch.full((8, 8), float("-inf")).triu(3) + torch.full((8, 8), float(
                "-inf")).tril(-3)
            w = torch.softmax(q @ k.transpose(-1, -2) * 0.25 + band, dim=-1)
            return w @ v

    xs = tuple(torch.randn(1, 2, 8, 16) for _ in range(3))
    program = compile_graph(to_graph(Banded(), xs))
    assert program.summary["kernel_ops"]["AttentionOp"] == 1
    assert "GemmOp" not in program.summary["kernel_ops"]
    torch.testing.assert_close(run_reference(program, list(xs))[0], Banded()(*xs), rtol=1e-4,
                               atol=1e-4)


def test_run_time_mask_becomes_the_attention_mask_unexpanded():
    """Eager attention adding a run-time [B, 1, 1, T] mask: SDPA's fourth operand, read
    through stride-0 dims (never expanded); a mask the scale multiplies too is left alone
    (the kernel adds its mask to the scaled scores)."""
    from aotpack.ir.ops import Op
    from aotpack.passes.pipeline import optimize

    class Eager(torch.nn.Module):
        def __init__(self, mask_first=False):
            super().__init__()
            self.mask_first = mask_first

        def forward(self, q, k, v, mask):
            s = q @ k.transpose(-1, -2)
            s = (s + mask) * 0.25 if self.mask_first else s * 0.25 + mask
            return torch.softmax(s, dim=-1) @ v

    xs = [torch.randn(2, 3, 8, 16) for _ in range(3)]
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, ..., 5:] = torch.finfo(torch.float32).min
    program = compile_graph(to_graph(Eager(), (*xs, mask)))
    (op,) = [o for o in program.ops if type(o).__name__ == "AttentionOp"]
    assert op.mask.strides[1:3] == (0, 0)
    torch.testing.assert_close(run_reference(program, xs + [mask])[0], Eager()(*xs, mask),
                               rtol=1e-4, atol=1e-4)
    scaled_mask = optimize(to_graph(Eager(mask_first=True), (*xs, mask)))
    assert not any(n.op == Op.SDPA for n in scaled_mask.nodes)


def test_causal_constant_plus_run_time_mask_is_split():
    """Eager attention adding a causal -inf constant and a run-time padding mask: the
    kernel's causal flag and the [B, 1, 1, T] padding operand (nothing [B, 1, S, T] is
    computed)."""
    class Eager(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("causal", torch.full((8, 8), float("-inf")).triu(1))

        def forward(self, q, k, v, pad):
            s = q @ k.transpose(-1, -2) * 0.25 + (self.causal + pad)
            return torch.softmax(s, dim=-1) @ v

    xs = [torch.randn(2, 3, 8, 16) for _ in range(3)]
    pad = torch.zeros(2, 1, 1, 8)
    pad[1, ..., 6:] = float("-inf")
    program = compile_graph(to_graph(Eager(), (*xs, pad)))
    (op,) = [o for o in program.ops if type(o).__name__ == "AttentionOp"]
    assert op.causal and op.mask.strides[1:3] == (0, 0)
    torch.testing.assert_close(run_reference(program, xs + [pad])[0], Eager()(*xs, pad),
                               rtol=1e-4, atol=1e-4)


transformers = None
try:
    import transformers
except ImportError:
    pass


@pytest.mark.skipif(transformers is None, reason="transformers is not installed")
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_tiny_transformers_models(tmp_path, family):
    torch.manual_seed(0)
    if family == "bert":
        cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64,  # dim 16
                                      attn_implementation="eager")
        m = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    else:
        cfg = transformers.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=2,
                                      n_positions=64, attn_implementation="eager")
        m = transformers.GPT2Model(cfg).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids):  # the all-ones mask a tokenizer gives: without one,
            # transformers' mask code calls torch.diff, which the legacy exporter lacks
            return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                          use_cache=False).last_hidden_state

    w = Wrapped().eval()
    ids = torch.randint(0, 99, (2, 16))
    spec = _export(w, (ids,), tmp_path / "t.onnx", ["input_ids"])
    p = _against_torch(spec, w, n_vocab=99)
    assert p.summary["kernel_ops"]["AttentionOp"] == 2


# ----------------------------------------------------------------------------- bundles
@pytest.fixture
def no_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))


def _gpt_onnx(tmp_path) -> str:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    return _export(GPT().eval(), (ids,), tmp_path / "gpt.onnx", ["input_ids"],
                   {"input_ids": {0: "batch", 1: "sequence"}}, outputs=["logits"])


def test_bundle_builds_verifies_and_inspects(tmp_path, no_runtime):
    import aotpack
    from aotpack.bundle import read_bundle
    from aotpack.cli.report import inspect_document
    from aotpack.verify import verify

    spec = _gpt_onnx(tmp_path)
    result = aotpack.build(spec, tmp_path / "out", dynamic=["batch=1..4", "sequence=1..64"],
                           dtype="bf16")
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed and len(report.outputs) >= 3, report.outputs
    d = inspect_document(read_bundle(result.bundle))
    assert d["provenance"]["model_kind"] == "onnx"
    from io import StringIO

    from rich.console import Console

    from aotpack.cli.report import print_inspect

    text = StringIO()
    print_inspect(Console(file=text, width=200), d)
    assert " ONNX nodes → " in text.getvalue() and "aten calls" not in text.getvalue()


def test_default_onnx_input_names_build_and_verify(tmp_path, no_runtime):
    """torch.onnx.export without input_names names the input `input.1`: verify gives it back
    to the build as --input input.1=... (refused as not a NAME before)."""
    import aotpack
    from aotpack.verify import verify

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    spec = _export(model, (torch.randn(2, 3, 16, 16),), tmp_path / "cnn.onnx", None)
    result = aotpack.build(spec, tmp_path / "out")
    assert [i["name"] for i in verify_inputs(result.bundle)] == ["input.1"]
    report = verify(result.bundle, spec, reference="cpu")
    assert report.passed and report.against == "onnxruntime" and report.float32


def verify_inputs(bundle):
    from aotpack.bundle import read_bundle

    return read_bundle(bundle, require_weights=False).manifest["inputs"]


@pytest.mark.gpu
def test_onnx_bundle_runs_on_the_gpu(tmp_path):
    import aotpack

    spec = _gpt_onnx(tmp_path)
    result = aotpack.build(spec, tmp_path / "out", dynamic=["batch=1..4", "sequence=1..64"],
                           dtype="bf16")
    loaded = prepare(load_spec(spec), dynamic=["batch=1..4", "sequence=1..64"])
    with aotpack.load(result.out_dir) as model, model.session() as s:
        for b, t in ((1, 1), (3, 37), (4, 64)):
            ids = torch.randint(0, 100, (b, t))
            out = s.run([ids.cuda()])[0]
            ref = loaded.model(ids)[0]
            torch.testing.assert_close(out.float().cpu(), ref, rtol=2e-2, atol=2e-2)
