"""Generation steps of causal-LM families with their own attention code (no sdpa dispatch:
GPT-J, CodeGen, MPT, BLOOM's ALiBi) and of GPT-NeoX: greedy ids identical to transformers' generate in
float32 (CPU reference). Such models add the mask to their scores (or fill where it is
nonzero), so the step hands them transformers' additive eager mask; the compiler reads that
form back as the positions (attention_positions._additive_of). A family whose forward fails
under the step is refused with one line, not a traceback."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from aotpack.frontend.load import LoadedModel  # noqa: E402
from aotpack.generation.task import (  # noqa: E402
    GenerationOptions, GenerationTaskError, prepare_generation,
)
from test_generation import PROMPTS, _hf_greedy, _program, _stepper  # noqa: E402
from aotpack.generation.loop import generate  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402

T = transformers
SMALL = dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_positions=128)
FAMILIES = {
    "gptj": lambda: T.GPTJForCausalLM(T.GPTJConfig(**SMALL, rotary_dim=8)),
    "codegen": lambda: T.CodeGenForCausalLM(T.CodeGenConfig(**SMALL, rotary_dim=8)),
    "mpt": lambda: T.MptForCausalLM(T.MptConfig(d_model=64, n_layers=2, n_heads=4,
                                                vocab_size=96, max_seq_len=128)),
    "gpt_neox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=128)),
    # ALiBi built from a 2-D padding mask (the step gives it the cache slots' positions)
    "bloom": lambda: T.BloomForCausalLM(T.BloomConfig(hidden_size=64, n_layer=2, n_head=4,
                                                      vocab_size=96)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_ids_match_transformers(family):
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    got = generate(_stepper(_program(model)), PROMPTS, 8)
    for prompt, ids in zip(PROMPTS, got):
        assert ids == _hf_greedy(model, prompt, 8), (family, prompt)


@pytest.mark.parametrize("family", ["gptj", "codegen"])
def test_eager_attention_in_bf16_is_the_positional_kernel(family):
    """Their f32 scores of upcast bf16 q and k, with the additive mask (added before the
    scale in CodeGen), fuse into the attention kernel reading the positions."""
    torch.manual_seed(0)
    loaded = prepare_generation(LoadedModel(FAMILIES[family]().eval(), None),
                                GenerationOptions(32, 2), "bf16")
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    attention = [op for op in program.ops if type(op).__name__ == "AttentionOp"]
    assert len(attention) == 2 and all(op.kv_limit is not None and op.mask is None
                                       for op in attention)
    assert attention[0].q.dtype.value == "bf16"


class _TwoDMaskOnly(T.LlamaModel):
    """A decoder that, like BLOOM before the step built its ALiBi, unpacks a 2-D mask."""

    def forward(self, *args, attention_mask=None, **kwargs):
        batch, keys = attention_mask.shape
        return super().forward(*args, **kwargs)


def test_family_failing_under_the_step_is_refused_in_one_line():
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=96, hidden_size=64,
                                             intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4)).eval()
    model.model = _TwoDMaskOnly(model.config).eval()
    with pytest.raises(GenerationTaskError, match="LlamaForCausalLM: the model's forward "
                                                  "failed inside the generation step"):
        prepare_generation(LoadedModel(model, None), GenerationOptions(32, 2), None)


def test_latent_attention_caches_what_the_layers_hand_it():
    """DeepSeek-V3 caches its compressed latent (one head of kv_lora_rank) and its rotary key
    (one head of qk_rope_head_dim), not per-head keys and values of the config's head_dim:
    the step probes what each layer hands the cache (was a shape-mismatch traceback)."""
    torch.manual_seed(0)
    model = T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
        vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
        first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=24, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=128)).eval()
    loaded = prepare_generation(LoadedModel(model, None), GenerationOptions(32, 2), None)
    cache = loaded.model.cache
    assert cache.k0.shape == (2, 32, 1, 24) and cache.v0.shape == (2, 32, 1, 8)
    got = generate(_stepper(_program(model)), PROMPTS, 6)
    for prompt, ids in zip(PROMPTS, got):
        assert ids == _hf_greedy(model, prompt, 6), prompt


def test_attention_soft_capping_is_kept():
    """Gemma-2's attn_logit_softcapping (tanh of the scores) exists only in its eager
    attention (sdpa has no cap): the step keeps that attention, and the ids are those of the
    eager model (they differ from the uncapped model's on this draw: scaled projections)."""
    torch.manual_seed(0)
    model = T.Gemma2ForCausalLM(T.Gemma2Config(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=128, attn_logit_softcapping=1.0)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.mul_(10)  # scores far past the cap
    model.set_attn_implementation("eager")
    want = [_hf_greedy(model, prompt, 8) for prompt in PROMPTS]
    got = generate(_stepper(_program(model)), PROMPTS, 8)
    assert got == want
    assert model.config._attn_implementation == "eager"
