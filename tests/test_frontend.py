"""Frontend: model loading, torch.export → IR, verify, error messages (CPU, small sizes)."""
from pathlib import Path

import pytest
import torch

from aotpack.frontend import ModelLoadError, UnsupportedOpError, load_model, to_graph
from aotpack.ir import Graph, Op, VerifyError
from aotpack.ir.interpret import run_graph
from aotpack.executor import run_reference
from aotpack.passes import compile_graph
from aotpack.passes.canonicalize import dead_code
from program_checks import rel_err

ROOT = Path(__file__).resolve().parents[1]
SMALL_MLP = dict(d=64, f=256, batch=2, seq=8)
SMALL_LLAMA = dict(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, seq=16)



def small(example: str, dtype=torch.bfloat16):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ex_{example}", ROOT / "examples" /
                                                  f"{example}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kw = SMALL_MLP if example == "mlp" else SMALL_LLAMA
    return module.make(dtype=dtype, **kw)


@pytest.mark.parametrize("example", ["mlp", "llama_block"])
def test_examples_translate_and_verify(example):
    model, inputs = small(example)
    g = to_graph(model, inputs)
    assert isinstance(g, Graph)
    g.verify()
    assert [v.name for v in g.inputs] == ["x"]
    assert [o.name for o in g.outputs] == ["out0"]
    assert all(c.tensor.is_contiguous() for c in g.constants.values())
    text = str(g)
    assert "linear" in text and "%x: bf16" in text


class _Outputs(torch.nn.Module):
    """A tuple holding a dict: keyed leaves are named by their path."""

    def forward(self, x):
        return x + 1, {"scores": x * 2, "pair": [x, x - 1], "bad key": x * 4}


class _Named(torch.nn.Module):
    """A dict output whose key is also the input's name: that one stays outN."""

    def forward(self, x):
        return {"logits": x * 2, "x": x + 1}


def test_outputs_are_named_by_their_keys():
    assert [o.name for o in to_graph(_Outputs(), [torch.ones(2)]).outputs] == \
        ["out0", "out1.scores", "out1.pair.0", "out1.pair.1", "out4"]
    assert [o.name for o in to_graph(_Named(), [torch.ones(2)]).outputs] == ["logits", "out1"]


def test_transformers_outputs_keep_their_names():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100)
    model = transformers.BertForSequenceClassification(cfg).eval()
    g = to_graph(model, [torch.randint(0, 100, (1, 8))])
    assert [o.name for o in g.outputs] == ["logits"]


def test_mlp_graph_shape():
    model, inputs = small("mlp")
    g = to_graph(model, inputs)
    assert [n.op for n in g.nodes] == [Op.LINEAR, Op.GELU, Op.LINEAR]
    assert g.nodes[1].attrs.approximate == "tanh"
    assert set(g.constants) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}


def test_llama_keeps_high_level_ops():
    model, inputs = small("llama_block")
    g = to_graph(model, inputs)
    ops = g.count_ops()
    assert ops["rms_norm"] == 2 and ops["sdpa"] == 1 and ops["linear"] == 7
    sdpa = next(n for n in g.nodes if n.op == Op.SDPA)
    assert sdpa.attrs.causal and sdpa.attrs.gqa
    assert {"cos", "sin", "q_proj.weight"} <= set(g.constants)


@pytest.mark.parametrize("example", ["mlp", "llama_block"])
def test_graph_interpreter_matches_eager(example):
    model, inputs = small(example, torch.float32)
    g = to_graph(model, inputs)
    x = torch.randn_like(inputs[0])
    assert rel_err(run_graph(g, [x])[0], model(x)) < 1e-5


def test_pt2_round_trip(tmp_path):
    model, inputs = small("mlp")
    ep = torch.export.export(model, inputs, strict=False)
    path = tmp_path / "mlp.pt2"
    torch.export.save(ep, str(path))
    loaded, loaded_inputs = load_model(str(path))
    assert torch.equal(loaded_inputs[0], inputs[0])
    assert str(to_graph(loaded, loaded_inputs)) == str(to_graph(model, inputs))


class Medians(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.median(y, dim=-1).values  # the unsupported line


def test_unsupported_op_names_op_and_source_line():
    with pytest.raises(UnsupportedOpError) as e:
        to_graph(Medians(), (torch.randn(4, 8),))
    msg = str(e.value)
    assert "aten.median" in msg
    assert "test_frontend.py" in msg and "torch.median(y, dim=-1)" in msg
    # close supported names (not all ~150 of them), and where the whole list is
    assert "Rewrite" in msg and "similar names: mean" in msg and "linear" not in msg
    assert "python -m aotpack.frontend.ops" in msg


def test_fft_is_unsupported():
    class F(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    with pytest.raises(UnsupportedOpError, match="fft"):
        to_graph(F(), (torch.randn(4, 8),))


def test_bad_specs(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nope.py:make"))
    with pytest.raises(ModelLoadError, match="model file .model.onnx. does not exist"):
        load_model("model.onnx")
    with pytest.raises(ModelLoadError, match="none of `file.py:function`"):
        load_model(str(tmp_path / "weights.bin"))
    f = tmp_path / "m.py"
    f.write_text("import torch\ndef make():\n    return torch.nn.Linear(2, 2)\n"
                 "def pair():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n"
                 "def bad_inputs():\n    return torch.nn.Linear(2, 2), ('x',)\n"
                 "def text():\n    return 'a model'\n")
    with pytest.raises(ModelLoadError, match="no function 'missing'"):
        load_model(f"{f}:missing")
    with pytest.raises(ModelLoadError, match=r"must return \(model, example_inputs\)"):
        load_model(f"{f}:text")
    # the model alone is a model whose inputs come from --input (or --task)
    with pytest.raises(ModelLoadError, match=r"carries no example inputs \(give them with"):
        load_model(f"{f}:make")
    with pytest.raises(ModelLoadError, match="tuple of tensors"):
        load_model(f"{f}:bad_inputs")
    model, inputs = load_model(f"{f}:pair")
    assert isinstance(model, torch.nn.Linear) and inputs[0].shape == (1, 2)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "missing.pt2"))


def test_factory_spec_loads_examples_with_defaults_lazily(monkeypatch):
    # load_model calls make() with no arguments; check on the MLP with a patched default size
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlp_ex", ROOT / "examples" / "mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.make(**SMALL_MLP)
    assert inputs[0].shape == (2, 8, 64) and inputs[0].dtype == torch.bfloat16


def test_verify_catches_bad_graphs():
    model, inputs = small("mlp")
    g = to_graph(model, inputs)
    broken = Graph(g.inputs, g.constants, list(reversed(g.nodes)), g.outputs)
    with pytest.raises(VerifyError, match="before it is defined"):
        broken.verify()
    dup = Graph(g.inputs, g.constants, g.nodes + g.nodes[:1], g.outputs)
    with pytest.raises(VerifyError, match="defined twice"):
        dup.verify()


def test_layout_and_misc_ops_translate():
    class M(torch.nn.Module):
        def forward(self, x):
            a, b = x.split(4, dim=-1)
            y = torch.cat([b, a], -1).unsqueeze(0).expand(2, 3, 8).contiguous()
            z = y.float().pow(2).mean(-1, keepdim=True).rsqrt()
            return (y.to(torch.float32) * z).squeeze(0)[..., 1:].sigmoid() - 1.0

    x = torch.randn(3, 8)
    g = to_graph(M(), (x,))
    assert rel_err(run_graph(g, [x])[0], M()(x)) < 1e-6


class ComputedTables(torch.nn.Module):
    """Constant-only computations with no IR rule (arange, outer) are evaluated at build time;
    a 0-d tensor constant does not promote a bf16 operand."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2.0) / 8))

    def forward(self, x):
        pos = torch.arange(x.shape[-2], dtype=torch.float32)
        table = torch.outer(pos, self.inv_freq).cos().to(x.dtype)
        return x * table + x * torch.tensor(0.5, dtype=torch.bfloat16)


def test_constant_only_ops_are_folded():
    x = torch.randn(2, 6, 4, dtype=torch.bfloat16)
    g = to_graph(ComputedTables(), (x,))
    assert "arange" in g.constants and all(n.op != Op.CAST or n.inputs[0].name != "x"
                                           for n in g.nodes)
    assert rel_err(run_graph(g, [x])[0], ComputedTables()(x)) < 1e-2


class PatchEmbed(torch.nn.Module):
    """ViT's patch embedding and an HF-style attention mask that masks nothing (built from
    arange, as transformers' create_bidirectional_mask does)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 32, kernel_size=4, stride=4)

    def forward(self, x):
        t = self.proj(x).flatten(2).transpose(1, 2)  # [B, 16, 32]
        q = t.view(t.shape[0], t.shape[1], 2, 16).transpose(1, 2)
        idx = torch.arange(t.shape[1], device=x.device)
        mask = (idx[None, None, :, None] >= 0).expand(t.shape[0], -1, t.shape[1], t.shape[1])
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_patch_embedding_conv_and_all_true_mask_translate():
    """conv2d with kernel == stride becomes view/permute/copy + linear; the constant mask that
    masks nothing folds away (ViT-B/16 builds with both)."""
    model, x = PatchEmbed().eval(), torch.randn(2, 3, 16, 16)
    g = to_graph(model, (x,))
    ops = [n.op for n in g.nodes]
    assert Op.LINEAR in ops and Op.SDPA in ops
    sdpa = next(n for n in g.nodes if n.op == Op.SDPA)
    assert len(sdpa.inputs) == 3  # no mask operand
    y = torch.randn_like(x)
    assert rel_err(run_graph(g, [y])[0], model(y)) < 1e-5


def test_3d_transposed_convolutions_are_refused_clearly():
    """(1-D and 2-D ones compile: tests/test_conv_transpose.py.)"""
    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.ConvTranspose3d(3, 8, kernel_size=2, stride=2)

        def forward(self, x):
            return self.c(x)

    with pytest.raises(UnsupportedOpError, match="3-D transposed convolution"):
        to_graph(Conv(), (torch.randn(1, 3, 4, 8, 8),))


class BufferMask(torch.nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=self.mask)


@pytest.mark.parametrize("mask", ["input", "triu", "causal_but_one", "one_minus_inf", "bias",
                                  "transposed_causal", "unsqueezed_causal"])
def test_masks_that_mask_something_reach_the_kernel(mask):
    """A run-time mask, and constant masks that are neither empty nor causal (a bool triu, a
    causal mask with one more entry masked, an additive mask with one -inf, an additive bias
    of small values), must not be dropped: they are the attention kernel's mask operand, and
    the compiled program (kernel references) computes what the model does."""
    q = torch.randn(1, 2, 8, 16)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    if mask == "input":
        class Masked(torch.nn.Module):
            def forward(self, q, m):
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m)

        model, inputs = Masked(), (q, torch.rand(8, 8) > 0.5)
    elif mask == "triu":
        model, inputs = BufferMask(causal.T.clone()), (q,)
    elif mask == "causal_but_one":
        m = causal.clone()
        m[5, 2] = False
        model, inputs = BufferMask(m), (q,)
    elif mask == "one_minus_inf":
        m = torch.zeros(8, 8)
        m[3, 5] = float("-inf")
        model, inputs = BufferMask(m), (q,)
    elif mask in ("transposed_causal", "unsqueezed_causal"):
        # a causal buffer seen through a layout op: what sdpa gets is not causal (a view of
        # a float buffer stays a view: the check must replay it)
        class ViewedMask(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("m", torch.zeros(8, 8).masked_fill(~causal, float("-inf")))

            def forward(self, q):
                m = self.m.t() if mask == "transposed_causal" else self.m.unsqueeze(-1)
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m)

        model, inputs = ViewedMask(), (torch.randn(1, 8, 8, 16),)
    else:
        model, inputs = BufferMask(torch.full((8, 8), 0.5)), (q,)
    g = to_graph(model, inputs)
    (sdpa,) = [n for n in g.nodes if n.op == Op.SDPA]
    assert len(sdpa.inputs) == 4 and not sdpa.attrs.causal
    assert rel_err(run_graph(g, list(inputs))[0], model(*inputs)) < 1e-5
    program = compile_graph(g)
    (attention,) = [op for op in program.ops if type(op).__name__ == "AttentionOp"]
    b, h, sq = inputs[0].shape[:3]
    assert attention.mask is not None and tuple(attention.mask.shape) == (b, h, sq, sq)
    assert rel_err(run_reference(program, list(inputs))[0], model(*inputs)) < 1e-5


class ArangeCausalMask(torch.nn.Module):
    """GPT-2's mask code on transformers 5.x, in small: integer arithmetic on expanded aranges,
    compared into a [B, 1, S, S] bool mask (nothing of it depends on the input's values)."""

    def forward(self, q):
        b, s = q.shape[0], q.shape[2]
        pos = torch.arange(s, device=q.device).unsqueeze(0).expand(b, -1)
        first = pos[:, :1] - 1  # i64 arithmetic of an expanded constant
        kv = (pos - first - 1)[:, None, None, :]
        qi = (pos - first - 1)[:, None, :, None]
        mask = (kv <= qi).expand(b, 1, s, s)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)


class CrossMask(torch.nn.Module):
    """Queries and keys of different lengths under a constant bool mask."""

    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q, k):
        return torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=self.mask)


@pytest.mark.parametrize("mask", ["bool_tril", "additive_inf", "additive_min", "arange_code",
                                  "transposed_anticausal", "sq4_sk8", "sq8_sk4"])
def test_causal_masks_become_is_causal(mask):
    """A constant mask that is the causal pattern (bool, or additive with -inf / the dtype's
    minimum above the diagonal; broadcast over batch and heads; through a layout op; top-left
    aligned when query and key lengths differ, as sdpa's is_causal) becomes is_causal: no mask
    operand is left, and the graph computes what the model does."""
    q = torch.randn(2, 2, 8, 16)
    inputs = (q,)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    if mask == "bool_tril":
        model = BufferMask(causal[None, None])
    elif mask == "additive_inf":
        model = BufferMask(torch.zeros(8, 8).masked_fill(~causal, float("-inf")))
    elif mask == "additive_min":
        model = BufferMask(torch.zeros(1, 8, 8).masked_fill(~causal, torch.finfo(torch.float32).min))
    elif mask == "transposed_anticausal":
        class Transposed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("m", torch.zeros(8, 8).masked_fill(~causal.T, float("-inf")))

            def forward(self, q):
                return torch.nn.functional.scaled_dot_product_attention(q, q, q,
                                                                        attn_mask=self.m.t())

        model = Transposed()
    elif mask in ("sq4_sk8", "sq8_sk4"):
        sq, sk = (4, 8) if mask == "sq4_sk8" else (8, 4)
        model = CrossMask(torch.ones(sq, sk, dtype=torch.bool).tril())
        inputs = (torch.randn(2, 2, sq, 16), torch.randn(2, 2, sk, 16))
    else:
        model = ArangeCausalMask()
    g = to_graph(model, inputs)
    (sdpa,) = [n for n in g.nodes if n.op == Op.SDPA]
    assert sdpa.attrs.causal and len(sdpa.inputs) == 3
    assert not dead_code(g).constants  # the mask is unused: nothing of it is stored
    assert rel_err(run_graph(g, list(inputs))[0], model(*inputs)) < 1e-5


def test_long_causal_mask_code_folds():
    """transformers' causal-mask code at a long sequence: the [B, 1, S, S] bool mask (72 MB
    here, over the 64 MiB float fold limit) still folds and becomes is_causal."""
    q = torch.randn(2, 1, 6000, 8, dtype=torch.bfloat16)
    g = to_graph(ArangeCausalMask(), (q,))
    (sdpa,) = [n for n in g.nodes if n.op == Op.SDPA]
    assert sdpa.attrs.causal and len(sdpa.inputs) == 3 and not dead_code(g).constants


def test_large_computed_integer_constant_that_stays_is_refused():
    """A folded bool constant over the 64 MiB limit that the graph still reads (a mask used as
    a multiplier, not by attention) would be stored in the bundle: refused, with its size."""
    class MaskMultiply(torch.nn.Module):
        def forward(self, x):
            i = torch.arange(x.shape[-1], device=x.device)
            return x * (i[None, :] <= i[:, None]).to(x.dtype)

    with pytest.raises(UnsupportedOpError, match="would be stored in the bundle"):
        to_graph(MaskMultiply(), (torch.randn(1, 8200, 8200, dtype=torch.bfloat16),))


def test_bottom_right_causal_mask_stays_a_mask():
    """sdpa's is_causal is top-left aligned; a bottom-right one (queries are the last keys,
    what a KV cache gives) must not become it: it stays the kernel's mask operand."""
    bottom_right = torch.ones(4, 8, dtype=torch.bool).tril(diagonal=4)
    model, inputs = CrossMask(bottom_right), (torch.randn(1, 2, 4, 16), torch.randn(1, 2, 8, 16))
    g = to_graph(model, inputs)
    (sdpa,) = [n for n in g.nodes if n.op == Op.SDPA]
    assert len(sdpa.inputs) == 4 and not sdpa.attrs.causal
    assert rel_err(run_graph(g, list(inputs))[0], model(*inputs)) < 1e-5


class Embeddings(torch.nn.Module):
    """BERT's embedding block in small: word embedding of the ids, token types gathered from a
    slice of a buffer (index arithmetic through views of buffers), positions from a buffer
    slice, summed and normalized."""

    def __init__(self, vocab=50, d=32, max_pos=16):
        super().__init__()
        self.word = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(max_pos, d)
        self.types = torch.nn.Embedding(2, d)
        self.norm = torch.nn.LayerNorm(d)
        self.register_buffer("position_ids", torch.arange(max_pos).expand(1, -1))
        self.register_buffer("token_type_ids", torch.zeros(1, max_pos, dtype=torch.long))

    def forward(self, ids):
        b, s = ids.shape
        position_ids = self.position_ids[:, :s]
        types = torch.gather(self.token_type_ids.expand(1, -1), 1, position_ids).expand(b, s)
        return self.norm(self.word(ids) + self.types(types) + self.pos(position_ids))


def test_embeddings_translate_and_index_arithmetic_folds():
    """aten.embedding becomes EMBEDDING; the integer gather of token types from views of
    buffers folds to a constant (the kernels never see integer arithmetic)."""
    model, ids = Embeddings().eval(), torch.randint(0, 50, (3, 12))
    g = to_graph(model, (ids,))
    emb = [n for n in g.nodes if n.op == Op.EMBEDDING]
    assert len(emb) == 3 and emb[0].inputs[1].name == "ids"
    integer_nodes = [n for n in g.nodes if not n.output.dtype.is_float]
    assert integer_nodes == []
    other = torch.randint(0, 50, (3, 12))
    assert rel_err(run_graph(g, [other])[0], model(other)) < 1e-5


def test_folding_keeps_broadcasts_as_views_and_skips_export_checks():
    """Computed constants fold only when no larger than their inputs: an expanded table stays
    an expand of a small constant (folded, it would be stored dense); the metadata assert an
    export records (with the export's device, maybe one the build host lacks) is not run."""
    class Biased(torch.nn.Module):
        def forward(self, scores):
            s = scores.shape[-1]
            pos = torch.arange(s, device=scores.device).to(torch.float32)
            bias = (pos[:, None] - pos[None, :]).abs()
            return scores + bias.expand(1, 4, s, s)

    from aotpack.frontend.translate import _Translator, export

    scores = torch.randn(1, 4, 64, 64)
    ep = export(Biased(), (scores,))
    asserts = [n for n in ep.graph.nodes if "assert_tensor_metadata" in str(n.target)]
    assert asserts  # what this test is about
    for n in asserts:  # the device a CUDA export records
        n.kwargs = {**n.kwargs, "device": torch.device("cuda", 0)}
    g = _Translator(ep).run()
    assert max(c.tensor.numel() for c in g.constants.values()) <= 64 * 64
    assert rel_err(run_graph(g, [scores])[0], Biased()(scores)) < 1e-5


def test_causal_lm_with_use_cache_builds_without_its_cache():
    """transformers causal LMs return their KV cache by default (config.use_cache), which
    torch.export cannot return: the static build leaves it out, says so, and keeps the logits."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from aotpack.frontend import to_graph
    from aotpack.frontend.load import LoadedModel
    from aotpack.frontend.prepare import prepare

    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    assert model.config.use_cache
    loaded = prepare(LoadedModel(model, (torch.randint(0, 128, (2, 8)),)))
    assert model.config.use_cache is False
    assert any("KV cache output is left out" in n for n in loaded.notes)
    graph = to_graph(loaded.model, loaded.inputs)
    assert [tuple(o.value.shape) for o in graph.outputs] == [(2, 8, 128)]
    from transformers import LlamaModel  # a headless decoder (embeddings) too

    base = LlamaModel(cfg).eval()
    base.config.use_cache = True
    loaded = prepare(LoadedModel(base, (torch.randint(0, 128, (2, 8)),)))
    assert base.config.use_cache is False
    assert [tuple(o.value.shape) for o in to_graph(loaded.model, loaded.inputs).outputs] == \
        [(2, 8, 32)]
    from transformers import BertConfig, BertModel  # an encoder: no cache, so no note

    bert = BertModel(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=64)).eval()
    assert bert.config.use_cache
    loaded = prepare(LoadedModel(bert, (torch.randint(0, 64, (2, 8)),)))
    assert not any("KV cache" in n for n in loaded.notes)


def test_a_refusal_without_a_user_frame_names_no_torch_line():
    """A node whose stack trace has torch's frames only (a TorchScript model's conversion)
    gets no `source:` pointing into torch, but says that none was recorded."""
    from types import SimpleNamespace

    from aotpack.frontend.translate import source_loc

    trace = ('File "/x/site-packages/torch/fx/proxy.py", line 287, in create_proxy\n'
             '    user_stack_summary = CapturedTraceback.extract().summary()\n')
    node = SimpleNamespace(name="pad_1", meta={"stack_trace": trace})
    loc = source_loc(node)
    assert loc.file is None and loc.node == "pad_1"
    user = 'File "/home/me/model.py", line 9, in forward\n    return F.pad(x, p)\n' + trace
    assert source_loc(SimpleNamespace(name="pad_1", meta={"stack_trace": user})).line == 9
