"""Generation bundles beyond the step's numerics: a family without rotary embedding built
whole (cross-compiled kernels) and verified, an eos id the vocabulary cannot hold, and
verify's prompts crossing a sliding window."""
import transformers as T


GPT2_SRC = """import torch, transformers as T
def make():
    torch.manual_seed(0)
    return T.GPT2LMHeadModel(T.GPT2Config(vocab_size=96, n_embd=64, n_layer=2, n_head=4,
                                          n_positions=64)).eval()
"""


def test_a_family_without_rotary_builds_and_verifies(tmp_path):
    """Learned positions (GPT-2; BioGPT, Cohere2's and SmolLM3's NoPE layers alike): each
    layer's cache write stores keys it does not rotate, an op with no output of its own. The
    whole build (cross-compiled kernels) and verify go through."""
    import aotpack
    from aotpack.bundle import read_bundle
    from aotpack.verify import verify

    (tmp_path / "lm.py").write_text(GPT2_SRC)
    spec, out = f"{tmp_path / 'lm.py'}:make", tmp_path / "out"
    aotpack.build(spec, out, task="text-generation", max_seq_len=32, max_batch=2, dtype="bf16")
    kernels = [k["name"] for k in read_bundle(out / "model.aotpack").manifest["kernels"]]
    assert any("kv_write" in k for k in kernels), kernels
    report = verify(out / "model.aotpack", spec, reference="cpu")
    assert report.passed, [(c.name, c.rel_error) for c in report.outputs]


def test_an_eos_id_outside_the_vocabulary_is_said(tmp_path):
    """A config whose eos_token_id lies past the vocabulary (Starcoder2's, OLMo's defaults on a
    shrunk vocab) can never stop a sequence: the build says so and how to give a stop id."""
    from aotpack.generation.task import GenerationOptions
    from aotpack.shared_steps import load_program

    (tmp_path / "lm.py").write_text(GPT2_SRC.replace("n_positions=64)", "n_positions=64, "
                                                     "eos_token_id=5000, bos_token_id=5000)"))
    program = load_program(f"{tmp_path / 'lm.py'}:make", generation=GenerationOptions(16, 1))
    assert program.generation["eos_ids"] == []
    assert any("end-of-sequence id 5000 is outside the vocabulary (96 ids)" in n
               and "--stop-id" in n for n in program.notes), program.notes


def test_verify_reaches_past_a_sliding_window():
    """verify's prompts (13 tokens, 6 steps) never cross a window of 24: a model with one gets
    a prompt past the window's edge, then decode steps beyond it; without one, no extra run."""
    from aotpack.generation.verify import _sliding_window, cases

    plain = cases(2, 64, 0)
    windowed = cases(2, 64, 0, window=24)
    assert windowed[:2] == plain and [len(p) for p in windowed[2][0]] == [25]
    assert windowed[2][1] == 3 and cases(2, 64, 0, window=8) == plain  # crossed already
    assert cases(2, 26, 0, window=24) == cases(2, 26, 0)  # the cache holds no more than it
    mistral = T.MistralForCausalLM(T.MistralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, sliding_window=24))
    assert _sliding_window(mistral) == 24
    llama = T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1))
    assert _sliding_window(llama) is None


def test_a_dict_of_inputs_still_builds_the_generation_task(tmp_path):
    """A factory returning (model, {"input_ids": ...}) built with --task text-generation: the
    task makes its own inputs and steps the model itself, not the keyword wrapper."""
    from aotpack.generation.task import GenerationOptions
    from aotpack.shared_steps import load_program

    (tmp_path / "lm.py").write_text(GPT2_SRC.replace(
        "n_positions=64)).eval()", "n_positions=64)).eval(), "
        "{'input_ids': torch.zeros(1, 4, dtype=torch.long)}"))
    program = load_program(f"{tmp_path / 'lm.py'}:make", generation=GenerationOptions(16, 1))
    assert program.generation["vocab_size"] == 96


def test_verify_checks_next_ids_against_the_step_logits():
    """next_ids must be the argmax of the same step's logits, on rows whose top two differ; a
    tie may go either way, a wrong id on a decided row fails."""
    import torch

    from aotpack.generation.verify import ids_check

    logits = torch.tensor([[0.1, 0.9, 0.3], [0.5, 0.5, 0.1]])
    assert ids_check("ids", [(torch.tensor([1, 1]), logits)]).ok  # row 1 is a tie
    bad = ids_check("ids", [(torch.tensor([1, 0]), logits), (torch.tensor([2, 0]), logits)])
    assert not bad.ok and bad.max_abs_error == 1 and bad.rel_error == 0.5


def _generation_program(model):
    from aotpack.generation.task import GenerationOptions
    from aotpack.shared_steps import _load_generation
    from aotpack.frontend.load import LoadedModel
    import aotpack.generation.task as task

    loaded = LoadedModel(model, None)
    orig = task.load_for_generation
    task.load_for_generation = lambda spec: loaded
    try:
        return _load_generation("unused", (), (), None, GenerationOptions(32, 2))
    finally:
        task.load_for_generation = orig


def test_a_hybrid_recurrent_model_is_refused_with_the_reason():
    """LFM2's short-convolution layers (Jamba, Falcon-H1, Qwen3-Next alike) keep a recurrent
    state the generation task does not build: said so, with the forward as remedy."""
    import pytest

    from aotpack.generation.task import GenerationTaskError

    cfg = T.Lfm2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       layer_types=["conv", "full_attention"])
    with pytest.raises(GenerationTaskError, match="recurrent state.*without --task"):
        _generation_program(T.Lfm2ForCausalLM(cfg).eval())


def test_llama4s_decoder_is_found_and_its_complex_rotary_named():
    """transformers 5.x's Llama4ForCausalLM.get_decoder() is the causal LM itself: the step
    takes its .model; the build then stops at the complex-number rotary (torch.polar) with
    the real-valued form as the remedy, not at 'no attribute last_hidden_state'."""
    import pytest

    from aotpack.errors import UserError

    cfg = T.Llama4TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                             intermediate_size_mlp=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                             num_local_experts=2, num_experts_per_tok=1,
                             max_position_embeddings=64)
    with pytest.raises(UserError, match="(?s)complex numbers.*real cos/sin"):
        _generation_program(T.Llama4ForCausalLM(cfg).eval())
