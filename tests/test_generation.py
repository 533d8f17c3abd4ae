"""Text generation (docs/generation.md): the step a generation bundle compiles, run by the
CPU reference with its KV cache kept as session state, against transformers' own generate.

Each family is built as `aotpack build --task text-generation` builds it (the step around the
model, B and S dynamic), in float32, and generates greedily for a batch of prompts of
different lengths: the ids must be transformers' `generate(do_sample=False)` ids.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from aotpack.executor import new_state, run_reference  # noqa: E402
from aotpack.frontend.load import LoadedModel  # noqa: E402
from aotpack.frontend.translate import to_graph  # noqa: E402
from aotpack.generation.loop import (  # noqa: E402
    GenerateArgumentError, check_request, generate, prefill_inputs,
)
from aotpack.generation.task import (  # noqa: E402
    GenerationOptions, GenerationTaskError, parse_task, prepare_generation,
)
from aotpack.generation.step import GenerationModelError, example_inputs  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402

T = transformers
COMMON = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
FAMILIES = {
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, {}),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}),
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {"head_dim": 16}),
    # a window shorter than the prompts + new tokens: the windowed mask is used
    "mistral": (T.MistralConfig, T.MistralForCausalLM, {"sliding_window": 6}),
    "gemma": (T.GemmaConfig, T.GemmaForCausalLM, {"head_dim": 16}),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, {"head_dim": 16, "sliding_window": 6}),
    "phi3": (T.Phi3Config, T.Phi3ForCausalLM, {"pad_token_id": 0}),
}
MORE_FAMILIES = {  # other position schemes, cache layouts and blocks
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=96, n_embd=64, n_layer=2,
                                                   n_head=4, n_positions=128)),  # learned
    "opt": lambda: T.OPTForCausalLM(T.OPTConfig(  # learned positions with an offset
        vocab_size=96, hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, word_embed_proj_dim=64)),
    "falcon": lambda: T.FalconForCausalLM(T.FalconConfig(  # parallel attention + MLP
        vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        new_decoder_architecture=True, num_kv_heads=2)),
    "phi": lambda: T.PhiForCausalLM(T.PhiConfig(  # partial rotary
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=128)),
    "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**COMMON, head_dim=16,
                                                            sliding_window=6)),
    "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(  # mixture of experts
        **COMMON, num_local_experts=4, num_experts_per_tok=2,
        experts_implementation="grouped_mm")),
}
PROMPTS = [[1, 5, 9, 3, 7], [4, 2], [8, 8, 8, 1, 2, 3, 4, 11, 12]]
MAX_SEQ, MAX_BATCH = 48, 3


def _model(family: str):
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    return model_cls(config_cls(**COMMON, **extra)).eval()


def _program(model, max_seq=MAX_SEQ, max_batch=MAX_BATCH):
    loaded = prepare_generation(LoadedModel(model, None), GenerationOptions(max_seq, max_batch),
                                None)
    return compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))


def _stepper(program):
    state = new_state(program)
    return lambda *inputs: run_reference(program, list(inputs), state=state)


def _hf_greedy(model, prompt, new):
    ids = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return ids[0, len(prompt):].tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_ids_match_transformers(family):
    model = _model(family)
    program = _program(model)
    assert program.states and len(program.states) == 2 * COMMON["num_hidden_layers"]
    assert program.inputs == ["input_ids", "positions", "last_index"]
    got = generate(_stepper(program), PROMPTS, 32)
    for prompt, ids in zip(PROMPTS, got):
        assert ids == _hf_greedy(model, prompt, 32), (family, prompt)


@pytest.mark.parametrize("family", list(MORE_FAMILIES))
def test_more_families_greedy_ids_match_transformers(family):
    torch.manual_seed(0)
    model = MORE_FAMILIES[family]().eval()
    got = generate(_stepper(_program(model)), PROMPTS, 12)
    for prompt, ids in zip(PROMPTS, got):
        assert ids == _hf_greedy(model, prompt, 12), (family, prompt)


def test_step_logits_match_a_full_forward_at_every_step():
    """Teacher forced: prefill then 20 decode steps, each step's logits those of a forward
    over the whole sequence so far (no cache)."""
    model = _model("llama")
    step = _stepper(_program(model))
    seq = [3, 1, 4, 1, 5, 9, 2, 6]
    steps = []
    generate(step, [seq], 20, on_step=lambda k, logits: steps.append(logits[0].clone()))
    tokens = seq + generate(_stepper(_program(model)), [seq], 20)[0]
    with torch.no_grad():
        for k, logits in enumerate(steps):
            full = model(torch.tensor([tokens[:len(seq) + k]])).logits[0, -1]
            torch.testing.assert_close(logits, full, rtol=1e-4, atol=1e-4)


def test_batch_rows_are_independent():
    """Each sequence of a batch generates what it generates alone (its own cache row, its own
    positions): padding and the other rows never leak into it."""
    model = _model("qwen2")
    program = _program(model)
    together = generate(_stepper(program), PROMPTS, 12)
    for prompt, ids in zip(PROMPTS, together):
        assert generate(_stepper(program), [prompt], 12)[0] == ids


def test_stop_ids_end_a_sequence_and_keep_the_stop():
    model = _model("llama")
    program = _program(model)
    free = generate(_stepper(program), [PROMPTS[0]], 10)[0]
    stop = free[3]
    got = generate(_stepper(program), [PROMPTS[0]], 10, stop_ids=[stop])[0]
    assert got == free[:free.index(stop) + 1]


class ConventionLM(torch.nn.Module):
    """A plain module following docs/generation.md: forward(input_ids, positions, cache)."""

    num_layers, num_kv_heads, head_dim, vocab_size = 2, 2, 8, 50

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.embed = torch.nn.Embedding(self.vocab_size, 32)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(32, 3 * 16) for _ in range(2))
        self.out = torch.nn.ModuleList(torch.nn.Linear(16, 32) for _ in range(2))
        self.head = torch.nn.Linear(32, self.vocab_size)

    def forward(self, input_ids, positions, cache):
        x = self.embed(input_ids)
        b, s, _ = x.shape
        mask = cache.attention_mask()
        for layer in range(self.num_layers):
            q, k, v = self.qkv[layer](x).split(16, dim=-1)
            q, k, v = (t.view(b, s, 2, 8).transpose(1, 2) for t in (q, k, v))
            k, v = cache.update(k, v, layer)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.out[layer](a.transpose(1, 2).reshape(b, s, 16))
        return self.head(x)

    def full(self, ids):
        """The same model without a cache (causal attention over ids [1, N])."""
        x = self.embed(ids)
        b, s, _ = x.shape
        for layer in range(self.num_layers):
            q, k, v = self.qkv[layer](x).split(16, dim=-1)
            q, k, v = (t.view(b, s, 2, 8).transpose(1, 2) for t in (q, k, v))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out[layer](a.transpose(1, 2).reshape(b, s, 16))
        return self.head(x)


def test_convention_module_generates_like_its_cacheless_self():
    model = ConventionLM().eval()
    step = _stepper(_program(model, max_seq=32, max_batch=2))
    prompts = [[1, 2, 3, 4], [7, 7]]
    got = generate(step, prompts, 10)
    with torch.no_grad():
        for prompt, ids in zip(prompts, got):
            seq = list(prompt)
            for _ in range(10):
                seq.append(int(model.full(torch.tensor([seq]))[0, -1].argmax()))
            assert ids == seq[len(prompt):]


def test_a_module_without_the_convention_is_refused():
    with pytest.raises(GenerationModelError, match="num_layers, num_kv_heads and head_dim"):
        _program(torch.nn.Linear(4, 4))


def test_a_state_space_model_is_refused_with_the_forward_as_remedy():
    """Mamba's config has layers but no attention heads: one message, not an AttributeError
    from deep inside (found by a new-user trial)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=4,
                                   num_hidden_layers=1, expand=2, conv_kernel=4)
    with pytest.raises(GenerationModelError, match="no num_attention_heads.*without --task"):
        _program(transformers.MambaForCausalLM(cfg).eval())


def test_task_options():
    assert parse_task(None, None, None) is None
    assert parse_task("text-generation", 4096, 8) == GenerationOptions(4096, 8)
    with pytest.raises(GenerationTaskError, match="go with --task"):
        parse_task(None, 128, None)
    with pytest.raises(GenerationTaskError, match="the tasks are"):
        parse_task("summarization", None, None)
    with pytest.raises(GenerationTaskError, match="--max-batch 0"):
        parse_task("text-generation", 128, 0)


def test_request_checks():
    limits = dict(max_batch=2, max_seq_len=16, vocab_size=50)
    check_request([[1, 2], [3]], 15, **limits)
    for prompts, new, match in (([], 4, "batch of 0"), ([[1]] * 3, 4, "batch of 3"),
                                ([[1], []], 4, "prompt 1 is empty"),
                                ([[1, 50]], 4, "token id 50"),
                                ([[1, 2]], 16, "17 cache positions"),
                                ([[1]], 0, "max_new_tokens 0")):
        with pytest.raises(GenerateArgumentError, match=match):
            check_request(prompts, new, **limits)


def test_prefill_inputs_layout():
    ids, positions, last = prefill_inputs([[5, 6, 7], [8]])
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert positions.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert last.tolist() == [2, 3]  # b * S + len_b - 1


def test_kernels_of_a_step_in_the_interpreter():
    """The Triton kernels a generation step adds, run by Triton's interpreter against their
    torch references: argmax over a vocabulary-wide row (by parts), the row scatter
    (rows outside the table skipped), RoPE with per-sequence tables."""
    from aotpack.kernels import run_reference as run_op_reference
    from aotpack.kernels.spec import ReduceOp, RopeOp, ScatterRowsOp, TensorArg, contiguous
    from support.interpret import run_interpreted_batch
    from aotpack.dtypes import DType

    g = torch.Generator().manual_seed(0)
    vocab = 50_000
    logits = torch.randn(3, vocab, generator=g)
    logits[1, 7] = logits[1, 40_123] = 100.0  # a tie across chunks: the first wins
    logits[2, vocab - 1] = 100.0
    arg = ReduceOp("argmax", contiguous("logits", DType.F32, (3, vocab)),
                   contiguous("ids", DType.I64, (3,)))
    scatter = ScatterRowsOp(contiguous("rows", DType.I64, (4,)),
                            contiguous("vals", DType.BF16, (4, 48)),
                            contiguous("cache", DType.BF16, (10, 48)))
    cos = TensorArg("cos", DType.BF16, (2, 5, 16), (5 * 16, 16, 1))
    rope = RopeOp(contiguous("x", DType.BF16, (2, 3, 5, 16)), cos,
                  TensorArg("sin", DType.BF16, (2, 5, 16), (5 * 16, 16, 1)),
                  contiguous("xr", DType.BF16, (2, 3, 5, 16)))
    envs = [{"logits": logits.reshape(-1), "ids": torch.zeros(3, dtype=torch.int64)},
            {"rows": torch.tensor([2, -1, 9, 10]),
             "vals": torch.randn(4 * 48, generator=g).to(torch.bfloat16),
             "cache": torch.randn(10 * 48, generator=g).to(torch.bfloat16)},
            {"x": torch.randn(2 * 3 * 5 * 16, generator=g).to(torch.bfloat16),
             "cos": torch.randn(2 * 5 * 16, generator=g).to(torch.bfloat16),
             "sin": torch.randn(2 * 5 * 16, generator=g).to(torch.bfloat16),
             "xr": torch.zeros(2 * 3 * 5 * 16, dtype=torch.bfloat16)}]
    refs = []
    for op, env in zip((arg, scatter, rope), envs):
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref[op.out.storage])
    before = envs[1]["cache"].clone().reshape(10, 48)
    run_interpreted_batch([(arg, envs[0], None), (scatter, envs[1], None),
                           (rope, envs[2], None)])
    assert envs[0]["ids"].tolist() == refs[0].tolist() == [int(logits[0].argmax()), 7,
                                                           vocab - 1]
    cache = envs[1]["cache"].reshape(10, 48)
    assert torch.equal(envs[1]["cache"], refs[1])
    assert torch.equal(cache[[0, 1, 3, 4, 5, 6, 7, 8]], before[[0, 1, 3, 4, 5, 6, 7, 8]])
    torch.testing.assert_close(envs[2]["xr"].float(), refs[2].float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("splits,window,seq,fixup,t", [
    (1, 0, 1, True, 40), (4, 0, 1, True, 40), (4, 0, 1, False, 40), (1, 5, 3, True, 40),
    (3, 0, 20, True, 40), (3, 0, 20, False, 40),
    # a long cache: one sequence's last query sees all 600 keys (10 tiles over the parts),
    # the other's a few (most parts empty)
    (4, 0, 1, True, 600), (4, 0, 1, False, 600), (3, 0, 20, True, 600),
    # the last query sees 64 keys (one tile: part 0 folds it and stores the rows, no merge)
    # or 65 (2 tiles: split and merged); the first sequence's few keys take the one pass
    (4, 0, 1, True, 64), (4, 0, 1, True, 65), (2, 3, 1, True, 65)])
def test_positional_attention_kernel_in_the_interpreter(splits, window, seq, fixup, t):
    """Attention over a KV cache read up to each query's position (GQA: 4 query heads per kv
    head; split key ranges merged by the last program of each block, or by the combine
    kernel) against the torch reference."""
    from aotpack.dtypes import DType
    from aotpack.kernels import run_reference as run_op_reference
    from aotpack.kernels.spec import AttentionOp, TensorArg, contiguous
    from aotpack.kernels.triton import attention
    from support.interpret import run_interpreted_batch

    b, hq, hkv, d = 2, 8, 2, 16
    g = torch.Generator().manual_seed(splits + window)
    # the cache laid out [B, T, Hkv, D] and read as [B, Hkv, T, D]
    k = TensorArg("k", DType.BF16, (b, hkv, t, d), (t * hkv * d, d, hkv * d, 1))
    v = TensorArg("v", DType.BF16, (b, hkv, t, d), (t * hkv * d, d, hkv * d, 1))
    op = AttentionOp(contiguous("q", DType.BF16, (b, hq, seq, d)), k, v,
                     contiguous("o", DType.BF16, (b, hq, seq, d)), False, 0.25, None,
                     contiguous("pos", DType.I64, (b, seq)), window)
    positions = torch.stack([torch.arange(seq) + 3, torch.arange(seq) + max(19, t - seq)])
    env = {"q": torch.randn(b * hq * seq * d, generator=g).to(torch.bfloat16),
           "k": torch.randn(b * t * hkv * d, generator=g).to(torch.bfloat16),
           "v": torch.randn(b * t * hkv * d, generator=g).to(torch.bfloat16),
           "pos": positions.reshape(-1), "o": torch.zeros(b * hq * seq * d, dtype=torch.bfloat16)}
    ref = {k_: x.clone() for k_, x in env.items()}
    run_op_reference(op, ref)
    config = dict(attention.default_config(op), SPLITS=splits, FIXUP=fixup)
    plans = attention.positional.plans_positional(op, config)
    assert len(plans) == (2 if splits > 1 and not fixup else 1)
    run_interpreted_batch([(op, env, config)])
    torch.testing.assert_close(env["o"].float(), ref["o"].float(), rtol=2e-2, atol=2e-2)
    if t > 40:  # the compiler refuses code the interpreter runs (globals, mixed-type ifs)
        from aotpack.kernels.spec import SM90

        assert all(launch.kernel.cubin for launch in attention.compile(op, SM90, config))


TINY_SRC = """
import torch, transformers as T
def make():
    torch.manual_seed(0)
    return T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)).eval()
"""


def test_build_inspect_and_verify_a_generation_bundle(tmp_path):
    """`aotpack build --task text-generation` end to end on the build host: the manifest's
    state and generation sections, inspect's lines, and verify (CPU reference, teacher forced
    along generated sequences) passing."""
    import json
    import subprocess
    import sys

    from aotpack.bundle import read_bundle
    from aotpack.verify import verify

    (tmp_path / "lm.py").write_text(TINY_SRC)
    spec = f"{tmp_path / 'lm.py'}:make"
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "aotpack", "build", spec, "--task",
                          "text-generation", "--max-seq-len", "32", "--max-batch", "3",
                          "--dtype", "bf16", "-o", str(out), "--no-progress"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "--generate 30 --prompt-ids 1,2,3" in run.stdout  # fits --max-seq-len 32
    m = read_bundle(out / "model.aotpack").manifest
    assert [s["shape"] for s in m["state"]] == [[3, 32, 2, 16]] * 4
    assert m["generation"] == {"max_batch": 3, "max_seq_len": 32, "vocab_size": 96,
                               "input_ids": 0, "positions": 1, "last_index": 2, "next_ids": 0,
                               "logits": 1, "eos_ids": m["generation"]["eos_ids"]}
    assert [i["name"] for i in m["inputs"]] == ["input_ids", "positions", "last_index"]
    assert [o["name"] for o in m["outputs"]] == ["next_ids", "logits"]
    assert json.loads(json.dumps(m["provenance"]["generation"])) == {
        "task": "text-generation", "max_seq_len": 32, "max_batch": 3}
    shown = subprocess.run([sys.executable, "-m", "aotpack", "inspect", str(out)],
                           capture_output=True, text=True).stdout
    assert "session state: 4 buffers" in shown and "text generation: batch up to 3" in shown
    report = verify(out / "model.aotpack", spec, reference="cpu")
    assert report.passed and len(report.outputs) >= 6, report.outputs
    # a bf16 bundle is also measured against a float32 copy of the step (16-bit rounding of
    # the bundle and of eager differ by ~1e-2 on wider models: that alone must not fail)
    logits = [c for c in report.outputs if c.name.startswith("logits")]
    assert all(c.rel_error_f32 is not None and c.rel_error_f32 < 5e-2 for c in logits)
    assert [c.name.split(" @ ")[0] for c in report.outputs].count("next_ids") == 2  # a run


def test_task_refuses_dims_and_inputs_of_its_own(tmp_path):
    import subprocess
    import sys

    (tmp_path / "lm.py").write_text(TINY_SRC)
    run = subprocess.run([sys.executable, "-m", "aotpack", "build", f"{tmp_path / 'lm.py'}:make",
                          "--task", "text-generation", "--dynamic", "x.0=1..4", "-o",
                          str(tmp_path / "o"), "--no-progress"], capture_output=True, text=True)
    assert run.returncode != 0 and "drop --dynamic/--input" in run.stderr + run.stdout
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_a_checkpoint_folder_is_a_spec(tmp_path):
    """`aotpack build ./folder --task text-generation`: a transformers checkpoint saved with
    save_pretrained, loaded from disk only (nothing downloaded)."""
    from aotpack.generation.task import load_for_generation

    model = _model("llama")
    model.save_pretrained(tmp_path / "ckpt")
    loaded = load_for_generation(str(tmp_path / "ckpt"))
    got = generate(_stepper(_program(loaded.model)), PROMPTS[:1], 8)
    assert got[0] == _hf_greedy(model, PROMPTS[0], 8)
    with pytest.raises(GenerationTaskError, match="without config.json"):
        load_for_generation(str(tmp_path))


@pytest.mark.parametrize("family", ["cohere_scale", "granite_scaling", "qwen2_swa_full"])
def test_logit_scales_and_layer_types_follow_the_model(family):
    """Families whose head scales the logits (Cohere: * logit_scale, Granite: /
    logits_scaling), and Qwen2 with use_sliding_window whose layer_types say no layer slides:
    the step's logits are the model's (the build checks them against the model's forward,
    and refuses a family it does not reproduce)."""
    make = {
        "cohere_scale": lambda: T.CohereForCausalLM(T.CohereConfig(**COMMON,
                                                                    logit_scale=0.0625)),
        "granite_scaling": lambda: T.GraniteForCausalLM(T.GraniteConfig(**COMMON,
                                                                         logits_scaling=4.0)),
        "qwen2_swa_full": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(
            **COMMON, use_sliding_window=True, sliding_window=6, max_window_layers=2)),
    }[family]
    torch.manual_seed(0)
    model = make().eval()
    steps = []
    seq = PROMPTS[2]
    generate(_stepper(_program(model)), [seq], 6, on_step=lambda k, lg: steps.append(lg[0]))
    tokens = seq + generate(_stepper(_program(model)), [seq], 6)[0]
    with torch.no_grad():
        for k, logits in enumerate(steps):
            full = model(torch.tensor([tokens[:len(seq) + k]])).logits[0, -1]
            torch.testing.assert_close(logits, full, rtol=1e-4, atol=1e-4)


def test_a_step_that_differs_from_the_model_is_refused(monkeypatch):
    from aotpack.generation import step as step_module

    monkeypatch.setattr(step_module.GenerationStep, "_hf_head",
                        lambda self, h: self.model.get_output_embeddings()(h) * 3)
    with pytest.raises(GenerationTaskError, match="differ from the model's own forward"):
        _program(_model("llama"))


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_a_bf16_model_passes_the_step_check_and_a_wrong_head_does_not(family, monkeypatch):
    """The build's step check tolerates bf16 rounding (the cached step and the plain forward
    round differently) but not a head off by a scale."""
    from aotpack.generation import step as step_module
    from aotpack.generation.task import check_step

    step = step_module.GenerationStep(_model(family).to(torch.bfloat16), MAX_BATCH, MAX_SEQ)
    inputs = example_inputs(MAX_BATCH, MAX_SEQ, step.vocab_size)
    check_step(step, inputs)
    monkeypatch.setattr(step_module.GenerationStep, "_hf_head",
                        lambda self, h: self.model.get_output_embeddings()(h) * 1.3)
    with pytest.raises(GenerationTaskError, match="differ from the model's own forward"):
        check_step(step, inputs)


def test_eos_ids_outside_the_vocabulary_are_not_stop_ids():
    """A config whose vocabulary was cut keeps its eos_token_id (Olmo2's 50279 over 96 words):
    such an id can never be generated, so it is dropped, not written into the manifest (which
    refuses ids outside the vocabulary)."""
    from aotpack.generation.step import GenerationStep

    model = _model("llama")
    model.generation_config.eos_token_id = [2, 50279]
    assert GenerationStep(model, MAX_BATCH, MAX_SEQ).eos_ids == [2]


@pytest.mark.parametrize("family,windows", [("llama", [0, 0]), ("mistral", [6, 6]),
                                             ("gemma2", [6, 0])])
def test_cache_masks_become_positions(family, windows):
    """The step's mask over the cache (CacheView.attention_mask) is recognised as positions
    (passes/attention_positions.py): every attention reads positions, not a mask, with the
    sliding window of its layer."""
    model = _model(family)
    attention = [op for op in _program(model).ops if type(op).__name__ == "AttentionOp"]
    assert [op.kv_limit is not None and op.mask is None for op in attention] == [True] * 2
    assert [op.window for op in attention] == windows
    # Gemma-2's eager attention soft-caps its scores: fused all the same, the cap in the op
    cap = model.config.attn_logit_softcapping if family == "gemma2" else 0.0
    assert [op.softcap for op in attention] == [cap] * 2 and (family != "gemma2" or cap > 0)


def test_max_batch_one_builds():
    """--max-batch 1 (the default): torch.export declares a dim over a range, so the bundle
    serves up to 2 sequences (its cache has 2 rows)."""
    program = _program(_model("llama"), max_seq=16, max_batch=1)
    assert program.storages[program.states[0]].shape[0] == 2
    assert generate(_stepper(program), [[1, 2, 3]], 4)[0] == _hf_greedy(_model("llama"),
                                                                         [1, 2, 3], 4)


class _Accumulate(torch.nn.Module):
    def __init__(self, start: float):
        super().__init__()
        self.register_buffer("acc", torch.full((4,), start))

    def forward(self, x):
        self.acc.add_(x)
        return self.acc * 2


def test_written_buffers_are_state_that_starts_at_zero():
    from aotpack.errors import UserError

    with pytest.raises(UserError, match="does not start as zeros"):
        to_graph(_Accumulate(10.0), (torch.ones(4),))
    program = compile_graph(to_graph(_Accumulate(0.0), (torch.ones(4),)))
    state = new_state(program)
    for k in (1, 2, 3):  # the buffer persists between runs, as the module's does
        out = run_reference(program, [torch.ones(4)], state=state)[0]
        assert out.tolist() == [2.0 * k] * 4


class _Scatter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.zeros(2, 4, 3))

    def forward(self, rows, pos, v):
        self.c.index_put_((rows, pos), v)
        return self.c * 1


def test_a_row_scatter_skips_indices_outside_its_dims():
    """Position 4 of a 4-long row must not land in the next sequence's row 0 (torch would
    raise; the kernel skips it), and the output is the state's new value."""
    program = compile_graph(to_graph(_Scatter(), (torch.tensor([0, 1]), torch.tensor([1, 2]),
                                                  torch.ones(2, 3))))
    state = new_state(program)
    out = run_reference(program, [torch.tensor([0, 0]), torch.tensor([3, 4]),
                                  torch.full((2, 3), 5.0)], state=state)[0]
    assert out[0, 3].tolist() == [5.0] * 3 and float(out[1].abs().sum()) == 0.0
    out = run_reference(program, [torch.tensor([1, -1]), torch.tensor([0, -1]),
                                  torch.full((2, 3), 7.0)], state=state)[0]
    assert out[1, 0].tolist() == [7.0] * 3 and out[1, 3].tolist() == [7.0] * 3  # -1: last


def test_python_api_builds_a_generation_bundle(tmp_path):
    """aotpack.build(..., task="text-generation", max_seq_len, max_batch) as the CLI's --task;
    torch's pytree FutureWarning is not shown; the Generator takes the output folder as
    aotpack.load does (without a GPU it then stops at the driver, not at the path)."""
    import json
    import warnings

    import aotpack
    from aotpack.bundle import MANIFEST_KEY
    from aotpack.bundle.stfile import read_header

    (tmp_path / "lm.py").write_text(TINY_SRC)
    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        aotpack.build(f"{tmp_path / 'lm.py'}:make", out, task="text-generation",
                      max_seq_len=32, max_batch=2, dtype="bf16")
    assert not [w for w in seen if "LeafSpec" in str(w.message)]
    manifest = json.loads(read_header(out / "model.aotpack")[1][MANIFEST_KEY])
    assert manifest["generation"]["max_batch"] == 2
    with pytest.raises(aotpack.UserError):
        aotpack.build(f"{tmp_path / 'lm.py'}:make", tmp_path / "o2", task="summarize")
    from aotpack.runtime import Generator

    try:
        Generator(out).close()
    except Exception as e:  # noqa: BLE001 — no GPU here: the driver, not the folder
        assert "not a regular file" not in str(e), e
