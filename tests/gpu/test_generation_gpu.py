"""Generation bundles on the GPU (docs/generation.md): small transformers causal LMs built
here with --task text-generation in bf16, run by the C token loop (aotpack.runtime.Generator),
against the same model's eager step on the GPU:

- teacher forced: the bundle's logits at every step (prefill, then decode over the cache)
  within bf16 tolerance of eager's, for a batch of prompts of different lengths;
- greedy ids equal to eager's greedy ids until the first step where eager's top two logits
  are closer than the bundle's error (a bf16 tie): reported, not failed, past that point.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

T = transformers
COMMON = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)
FAMILIES = {
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, {}),
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {"head_dim": 32}),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, {"head_dim": 32, "sliding_window": 24}),
    # rotary forms the KV-write kernel takes (passes/fuse_rope.py): interleaved and partial
    # (GLM), float32 tables (OLMo-2), partial with a pass-through (StableLM), layers without
    # rope (SmolLM3: every second layer only writes the caches)
    # (pad_token_id: these configs' defaults lie past the test vocabulary)
    "glm": (T.GlmConfig, T.GlmForCausalLM, {"head_dim": 32, "pad_token_id": 0}),
    "olmo2": (T.Olmo2Config, T.Olmo2ForCausalLM, {}),
    "stablelm": (T.StableLmConfig, T.StableLmForCausalLM, {}),
    "smollm3": (T.SmolLM3Config, T.SmolLM3ForCausalLM,
                {"no_rope_layer_interval": 2, "pad_token_id": 0}),
}
# llama_long: a 1,024-token cache, so decode attention splits the key range over programs
# (the last program of each block merges the parts: counters that must be zero again at
# every graph replay)
FAMILIES["llama_long"] = (T.LlamaConfig, T.LlamaForCausalLM, {"max_position_embeddings": 1024})
MAX_SEQ = {"llama_long": 1024}
PROMPTS = [[1, 5, 9, 3, 7, 2, 8], [4, 2], [8, 8, 8, 1, 2, 3, 4, 11, 12, 40, 41, 42, 43]]
NEW = 32


def _build(family, tmp_path):
    import aotpack
    from aotpack.generation.task import GenerationOptions

    config_cls, model_cls, extra = FAMILIES[family]
    src = tmp_path / f"{family}.py"
    src.write_text(
        "import torch, transformers as T\n"
        f"def make():\n    torch.manual_seed(0)\n"
        f"    return T.{model_cls.__name__}(T.{config_cls.__name__}(**{dict(COMMON, **extra)!r}))"
        f".eval()\n")
    result = aotpack.build(f"{src}:make", tmp_path / family, dtype="bf16", force=True,
                           progress=False,
                           generation=GenerationOptions(MAX_SEQ.get(family, 64), 3))
    torch.manual_seed(0)
    model = model_cls(config_cls(**dict(COMMON, **extra))).eval().to(torch.bfloat16).cuda()
    return result.out_dir, model


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generation_bundle_matches_eager(family, tmp_path):
    from aotpack.generation.loop import generate
    from aotpack.generation.step import GenerationStep
    from aotpack.runtime import Generator

    out, model = _build(family, tmp_path)
    if family in MAX_SEQ:  # the case is about split-KV attention: it must be there
        from aotpack.bundle import read_bundle

        kernels = read_bundle(out / "model.aotpack").manifest["kernels"]
        assert any("split_kv" in k["fused_ops"] and "fixup" in k["fused_ops"] for k in kernels)
    step = GenerationStep(model, 3, MAX_SEQ.get(family, 64)).cuda().eval()
    eager_logits = []
    with torch.no_grad():
        eager = generate(lambda *a: step(*(t.cuda() for t in a)), PROMPTS, NEW,
                         on_step=lambda k, lg: eager_logits.append(lg.float().cpu()))
    _teacher_forced(out / "model.aotpack", step, eager)
    with Generator(out / "model.aotpack") as g:
        got = g.generate(PROMPTS, NEW, ignore_eos=True)
        assert got.tokens == g.generate(PROMPTS, NEW, ignore_eos=True).tokens
        alone = [g.generate([p], NEW, ignore_eos=True).tokens[0] for p in PROMPTS]
    assert alone == got.tokens, "a sequence's tokens depend on the others in its batch"
    for b, (mine, ref) in enumerate(zip(got.tokens, eager)):
        for k, (x, y) in enumerate(zip(mine, ref)):
            if x != y:
                top2 = eager_logits[k][b].topk(2).values
                gap = float(top2[0] - top2[1])
                assert gap < 0.25, (f"{family} seq {b}: step {k} picks {x}, eager {y} "
                                    f"(eager's top-2 gap {gap:.3f})")
                break  # a bf16 tie: the rest follows another path


def _teacher_forced(bundle, step, eager_tokens) -> None:
    """The bundle's step (a session: its KV cache persists between runs) fed eager's tokens:
    logits within bf16 tolerance of eager's at every step."""
    import aotpack
    from aotpack.generation.loop import prefill_inputs

    lengths = [len(p) for p in PROMPTS]
    with aotpack.load(bundle) as m, m.session() as s, torch.no_grad():
        inputs = [t.cuda() for t in prefill_inputs(PROMPTS)]
        for k in range(8):
            _, logits = s.run(inputs)
            _, ref = step(*inputs)
            torch.testing.assert_close(logits.float(), ref.float(), rtol=0.05, atol=0.05,
                                       msg=lambda m: f"step {k}: {m}")
            ids = torch.tensor([[seq[k]] for seq in eager_tokens], device="cuda")
            positions = torch.tensor([[n + k] for n in lengths], device="cuda")
            inputs = [ids, positions, torch.arange(len(PROMPTS), device="cuda")]
