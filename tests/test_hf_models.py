"""transformers' own models, small configs: they translate, fuse and lower to kernel ops whose
torch references match eager on fresh token ids (CPU). Skipped where transformers is not
installed."""

import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.passes import compile_graph
from program_checks import kinds, rel_err


def _hf_small(name):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100,
                                      n_positions=32, use_cache=False, attn_implementation="sdpa")
        model = transformers.GPT2Model(cfg)
    elif name == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                       num_key_value_heads=2, intermediate_size=256, vocab_size=100,
                                       max_position_embeddings=64, use_cache=False,
                                       attn_implementation="sdpa")
        model = transformers.LlamaModel(cfg)
    else:
        cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                      intermediate_size=128, vocab_size=100,
                                      max_position_embeddings=32, attn_implementation="sdpa")
        model = transformers.BertModel(cfg, add_pooling_layer=False)

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(ids)[0]

    return FirstOutput(model).to(torch.bfloat16).eval()


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_hf_models_compile_and_match_eager(name):
    """Small HF GPT-2, BERT and Llama (transformers' own modules): token and position
    embeddings become EmbeddingOps or fold, the causal masks transformers builds become causal
    attention (GQA for Llama, its RoPE and RMSNorm recognised, gate/up fused), and the program
    (kernel references) matches eager on fresh ids."""
    model = _hf_small(name)
    ids = torch.randint(0, 100, (2, 16))
    program = compile_graph(to_graph(model, (ids,)))
    ops = kinds(program)
    assert ops.count("EmbeddingOp") == 1 and ops.count("AttentionOp") == 2
    assert all(op.causal == (name != "bert") for op in program.ops
               if type(op).__name__ == "AttentionOp")
    if name == "llama":
        assert ops.count("RopeOp") == 4 and ops.count("RMSNormOp") == 5
        assert "PointwiseOp" not in ops and ops.count("GemmOp") == 8  # qkv, o, gate/up, down
    fresh = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(fresh)
    (got,) = run_reference(program, [fresh])
    assert rel_err(got, want) < 2e-2


def _hf_family(name):
    """Two-layer models of more transformers families (their own modules, bf16)."""
    t = pytest.importorskip("transformers")
    small = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                 intermediate_size=256, vocab_size=100, max_position_embeddings=64)
    dec = dict(small, use_cache=False, attn_implementation="sdpa")
    build = {
        "qwen2": lambda: t.Qwen2Model(t.Qwen2Config(**dec, num_key_value_heads=2)),
        "qwen3": lambda: t.Qwen3Model(t.Qwen3Config(**dec, num_key_value_heads=2, head_dim=32)),
        "mistral": lambda: t.MistralModel(t.MistralConfig(**dec, num_key_value_heads=2)),
        "gemma": lambda: t.GemmaModel(t.GemmaConfig(**dec, num_key_value_heads=2, head_dim=32)),
        "phi3": lambda: t.Phi3Model(t.Phi3Config(**dec, num_key_value_heads=2, pad_token_id=0)),
        "gpt_neox": lambda: t.GPTNeoXModel(t.GPTNeoXConfig(**dec)),
        "opt": lambda: t.OPTModel(t.OPTConfig(
            num_hidden_layers=2, hidden_size=128, num_attention_heads=4, ffn_dim=256,
            vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=128,
            use_cache=False, attn_implementation="sdpa", pad_token_id=1)),
        "distilbert": lambda: t.DistilBertModel(t.DistilBertConfig(
            n_layers=2, dim=128, n_heads=4, hidden_dim=256, vocab_size=100,
            max_position_embeddings=64, attn_implementation="sdpa")),
    }
    torch.manual_seed(0)
    inner = build[name]()

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(ids)[0]

    return FirstOutput().to(torch.bfloat16).eval()


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "mistral", "gemma", "phi3", "gpt_neox",
                                  "opt", "distilbert"])
def test_more_hf_families_compile_and_match_eager(name):
    """Decoder (causal, GQA, partial or full rotary, GELU/SiLU MLPs, q/k norms) and encoder
    families compile to kernel ops that match eager on fresh ids; nothing of zero size is
    launched."""
    model = _hf_family(name)
    program = compile_graph(to_graph(model, (torch.randint(2, 100, (2, 16)),)))
    pointwise = kinds(program).count("PointwiseOp")
    if name in ("phi3", "qwen2", "mistral"):  # Phi-3: no empty copies, its gate_up fuses
        assert pointwise == 0
    if name == "gemma":  # its f32 norms are single kernels; the embedding scale is left
        assert pointwise == 1 and kinds(program).count("RMSNormOp") == 5
    fresh = torch.randint(2, 100, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(fresh)
    (got,) = run_reference(program, [fresh])
    assert rel_err(got, want) < 2e-2


def _hf_any(name):
    return _hf_small(name) if name in ("gpt2", "bert", "llama") else _hf_family(name)


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "qwen2", "qwen3", "mistral", "gemma",
                                  "phi3", "gpt_neox", "opt", "distilbert"])
def test_hf_models_with_dynamic_batch_and_sequence(name):
    """Every family built with dynamic batch (1..4) and sequence (1..32): the same kernel ops
    as the static build (masks and position tables computed from the dims fold as before),
    and the one program matches eager at both ends of the ranges and at odd sizes."""
    model = _hf_any(name)
    ids = torch.randint(2, 100, (2, 16))
    dims = ({0: torch.export.Dim("B", min=1, max=4), 1: torch.export.Dim("S", min=1, max=32)},)
    program = compile_graph(to_graph(model, (ids,), dims))
    assert kinds(program) == kinds(compile_graph(to_graph(model, (ids,))))
    for b, s in [(1, 1), (4, 32), (3, 17), (1, 31)]:
        fresh = torch.randint(2, 100, (b, s), generator=torch.Generator().manual_seed(b + s))
        with torch.no_grad():
            want = model(fresh)
        (got,) = run_reference(program, [fresh])
        assert rel_err(got, want) < 2e-2, (b, s)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_hf_symbolic_kernels_match_references(name):
    """The embedding, LayerNorm, GELU GEMM epilogues and pointwise sums of GPT-2 and BERT as
    symbolic launches evaluated at a few shapes (Triton interpreter) match their references."""
    from test_dynamic import _run_cases, _symbolic_cases

    model = _hf_any(name)
    dims = ({0: torch.export.Dim("B", min=1, max=4), 1: torch.export.Dim("S", min=1, max=32)},)
    program = compile_graph(to_graph(model, (torch.randint(2, 100, (2, 16)),), dims))
    points = [{"B": 1, "S": 1}, {"B": 3, "S": 29}]
    for concrete, env, want, point in _run_cases(_symbolic_cases(program, points)):
        out = concrete.out
        got = torch.as_strided(env[out.storage], out.shape, out.strides, out.offset)
        ref = torch.as_strided(want[out.storage], out.shape, out.strides, out.offset)
        assert rel_err(got, ref) < 2e-2, (type(concrete).__name__, point)
