"""Model coverage on the CPU: run-time attention masks, comparisons/logic/where/cumsum on token
ids, and indexing by constant indices, as real models use them. Each transformers family is
built with a padded batch (`attention_mask` a real input) and its compiled program (kernel
references) compared with eager; the kernels behind the new ops run in Triton's interpreter.
"""
import pytest
import torch

from aotpack.dtypes import DType
from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.ir import Op
from aotpack.kernels import run_reference as run_op_reference
from aotpack.kernels.spec import SM90, PointwiseOp, PwConst, PwExpr, PwInput, ScanOp, contiguous
from support.interpret import run_interpreted_batch
from aotpack.passes import compile_graph
from program_checks import Fn, rel_err

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=256, vocab_size=1000)
FAMILIES = {  # name: (factory, the attention the kernel must get: causal, mask strides)
    "bert": (lambda: transformers.BertModel(transformers.BertConfig(**SMALL)), False),
    "roberta": (lambda: transformers.RobertaModel(
        transformers.RobertaConfig(**SMALL, pad_token_id=1)), False),
    "gpt2": (lambda: transformers.GPT2Model(
        transformers.GPT2Config(n_embd=128, n_layer=2, n_head=2, vocab_size=1000)), True),
    "llama": (lambda: transformers.LlamaModel(
        transformers.LlamaConfig(**SMALL, num_key_value_heads=1)), True),
    "opt": (lambda: transformers.OPTModel(transformers.OPTConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=2, ffn_dim=256,
        vocab_size=1000, word_embed_proj_dim=128)), True),
    "t5_encoder": (lambda: transformers.T5EncoderModel(transformers.T5Config(
        d_model=128, num_layers=2, num_heads=2, d_ff=256, d_kv=64, vocab_size=1000)), False),
    "falcon": (lambda: transformers.FalconModel(transformers.FalconConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000)), True),
    "xlm_roberta": (lambda: transformers.XLMRobertaModel(
        transformers.XLMRobertaConfig(**SMALL, pad_token_id=1)), False),
    "electra": (lambda: transformers.ElectraModel(
        transformers.ElectraConfig(**SMALL, embedding_size=64)), False),
    "qwen2": (lambda: transformers.Qwen2Model(
        transformers.Qwen2Config(**SMALL, num_key_value_heads=1)), True),
    "gemma": (lambda: transformers.GemmaModel(  # head dim 256 (Gemma's default)
        transformers.GemmaConfig(**SMALL, num_key_value_heads=1)), True),
    "phi3": (lambda: transformers.Phi3Model(
        transformers.Phi3Config(**SMALL, pad_token_id=0)), True),
    # a window of 4 over 16 tokens: the window is active (the mask: window, causal, padding)
    "mistral_window": (lambda: transformers.MistralModel(
        transformers.MistralConfig(**SMALL, num_key_value_heads=1, sliding_window=4)), None),
}


class WithMask(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _padded(batch=3, seq=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 1000, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq // 2:] = 0  # one row padded from the middle, one with a single token
    mask[2, 1:] = 0
    return ids, mask


@pytest.mark.parametrize("family", list(FAMILIES))
def test_padded_batch_matches_eager(family):
    """The attention mask is a run-time input: a second padding pattern (not the example's)
    runs through the same program. Causal models keep the causal kernel and read only the
    [B, 1, 1, T] padding mask (stride 0 over heads and queries); padded positions are not
    compared (their values are whatever the model computes for tokens no one reads)."""
    factory, causal = FAMILIES[family]
    torch.manual_seed(0)
    model = WithMask(factory().eval()).to(torch.bfloat16)
    program = compile_graph(to_graph(model, _padded(seed=0)))
    attention = [op for op in program.ops if type(op).__name__ == "AttentionOp"]
    assert attention and all(op.mask is not None for op in attention)
    if causal is not None:  # (a window: a per-query mask, whatever the causal flag)
        assert all(op.causal == causal for op in attention)
    if family not in ("t5_encoder", "mistral_window"):  # T5's relative-position bias and a
        # window make the mask per query: [B, H, S, T] / [B, 1, S, T]
        assert all(op.mask.strides[1:3] == (0, 0) for op in attention)
    ids, mask = _padded(seed=1)
    mask[0, 11:] = 0
    with torch.no_grad():
        want = model(ids, mask)
    got = run_reference(program, [ids, mask])[0]
    keep = mask.bool()[..., None]
    assert rel_err(got * keep, want * keep) < 2e-2


@pytest.mark.parametrize("family", ["bert", "llama", "t5_encoder"])
def test_padded_batch_with_dynamic_batch_and_sequence(family):
    """attention_mask with dynamic batch and sequence: transformers 5 builds the padding mask
    as mask[arange(B)[:, None, None], arange(S)[None, None, :]], indices that follow the
    dims beside static ones (was refused: "indices computed at run time"); it is a view of the
    mask, and one program runs every (B, S) in the ranges."""
    factory, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = WithMask(factory().eval())
    dims = {0: torch.export.Dim("B", min=1, max=4), 1: torch.export.Dim("S", min=2, max=32)}
    program = compile_graph(to_graph(model, _padded(seed=0), (dims, dims)))
    static = compile_graph(to_graph(model, _padded(seed=0)))
    embeddings = [[type(op).__name__ for op in p.ops].count("EmbeddingOp")
                  for p in (program, static)]
    assert embeddings[0] == embeddings[1]  # the mask is a view, not a row gather
    for b, s in [(1, 2), (4, 32), (3, 17)]:
        ids, mask = _padded(batch=max(b, 3), seq=s, seed=b + s)
        ids, mask = ids[:b], mask[:b]
        with torch.no_grad():
            want = model(ids, mask)
        got = run_reference(program, [ids, mask])[0]
        keep = mask.bool()[..., None]
        assert rel_err(got * keep, want * keep) < 1e-4, (b, s)


def test_falcon_multi_query_uses_gqa():
    """One k/v head broadcast over the query heads (sdpa without enable_gqa) is GQA."""
    factory, _ = FAMILIES["falcon"]
    model = WithMask(factory().eval()).to(torch.bfloat16)
    g = to_graph(model, _padded())
    assert all(n.attrs.gqa for n in g.nodes if n.op == Op.SDPA)


# --------------------------------------------------------------------------- small models
class IdsLogic(torch.nn.Module):
    """What models compute from ids: a padding mask, positions from a cumsum (RoBERTa/OPT),
    where/masked_fill, comparisons with numbers on either side."""

    def forward(self, ids, x):
        keep = ids.ne(1)
        positions = torch.cumsum(keep.int(), dim=1) * keep + 1
        big = (ids > 500) & ~(3 >= ids) | ids.eq(7)
        y = torch.where(big[..., None], x, -x).masked_fill(~keep[..., None], 0.0)
        return y * positions[..., None].to(x.dtype), positions


def test_ids_logic_matches_eager():
    ids = torch.tensor([[5, 600, 1, 7, 3, 1], [1, 2, 900, 4, 5, 6]])
    x = torch.randn(2, 6, 8)
    model = IdsLogic()
    program = compile_graph(to_graph(model, (ids, x)))
    kinds = {type(op).__name__ for op in program.ops}
    assert "ScanOp" in kinds and "PointwiseOp" in kinds
    got = run_reference(program, [ids, x])
    want = model(ids, x)
    assert torch.equal(got[1], want[1])  # integer positions: exact
    assert rel_err(got[0], want[0]) < 1e-6


def test_index_by_constant_aranges_is_a_view():
    """transformers' padding-mask code: mask[batch_arange[:, None, None, None],
    kv_arange[None, None, None, :]] is a strided view of the mask (no gather kernel)."""
    class Picks(torch.nn.Module):
        def forward(self, mask):
            b, s = mask.shape
            return mask[torch.arange(b)[:, None, None, None], torch.arange(s)[None, None, None]]

    mask = torch.rand(3, 10) > 0.5
    g = to_graph(Picks(), (mask,))
    assert [n.op for n in g.nodes] == [Op.AS_STRIDED]
    assert torch.equal(run_reference(compile_graph(g), [mask])[0], Picks()(mask))


# --------------------------------------------------------------------------- kernels
def _f(fn, *args):
    return PwExpr(fn, tuple(args))


def test_integer_and_logic_kernels_in_the_interpreter():
    """All-integer expressions run in int64 (ids past 2**24 stay exact), predicates give 1/0,
    where selects; cumsum over long ragged rows (several chunks, a carry between them)."""
    big = 2**40
    ids = contiguous("ids", DType.I64, (3, 50))
    other = contiguous("other", DType.I64, (50,))
    expr = _f("where", _f("ne", PwInput(0), PwConst(7.0)),
              _f("add", PwInput(0), PwConst(3.0)), PwInput(1))
    int_op = PointwiseOp((ids, other), expr, contiguous("out", DType.I64, (3, 50)))
    flags = contiguous("flags", DType.BOOL, (3, 50))
    logic = _f("and", _f("gt", PwInput(0), PwConst(0.0)), _f("not", PwInput(1)))
    bool_op = PointwiseOp((contiguous("x", DType.BF16, (3, 50)), flags), logic,
                          contiguous("bout", DType.BOOL, (3, 50)))
    scan_i = ScanOp(contiguous("si", DType.I32, (4, 5000)), contiguous("so", DType.I64, (4, 5000)))
    scan_f = ScanOp(contiguous("sf", DType.BF16, (2, 37)), contiguous("sfo", DType.F32, (2, 37)))
    g = torch.Generator().manual_seed(0)
    envs = [
        {"ids": big + torch.randint(0, 10, (150,), generator=g), "other": -torch.arange(50),
         "out": torch.zeros(150, dtype=torch.int64)},
        {"x": torch.randn(150, generator=g).to(torch.bfloat16),
         "flags": torch.rand(150, generator=g) > 0.5, "bout": torch.zeros(150, dtype=torch.bool)},
        {"si": torch.randint(0, 2, (20000,), generator=g, dtype=torch.int32),
         "so": torch.zeros(20000, dtype=torch.int64)},
        {"sf": torch.randn(74, generator=g).to(torch.bfloat16), "sfo": torch.zeros(74)},
    ]
    envs[0]["ids"][::9] = 7
    ops = [int_op, bool_op, scan_i, scan_f]
    refs = []
    for op, env in zip(ops, envs):
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref[op.out.storage])
    run_interpreted_batch([(op, env, None) for op, env in zip(ops, envs)])
    for op, env, ref in zip(ops, envs, refs):
        got = env[op.out.storage]
        if op.out.dtype.is_float:
            assert rel_err(got, ref) < 1e-5, op
        else:
            assert torch.equal(got, ref), op
    assert int(envs[0]["out"][0]) in (big + 3, big + 4, big + 5, big + 6, big + 7, big + 8,
                                      big + 9, big + 10, big + 11, big + 12, 0)


def test_padded_batch_with_dynamic_dims():
    """Batch and sequence dynamic: the padding mask's view of the run-time mask (indexing by
    aranges of the dims) is symbolic, one program serves every size."""
    factory, _ = FAMILIES["bert"]
    torch.manual_seed(0)
    model = WithMask(factory().eval()).to(torch.bfloat16)
    b, s = torch.export.Dim("B", min=1, max=8), torch.export.Dim("S", min=1, max=64)
    program = compile_graph(to_graph(model, _padded(), ({0: b, 1: s}, {0: b, 1: s})))
    for batch, seq in ((3, 5), (5, 37)):
        ids, mask = _padded(batch, seq, seed=seq)
        with torch.no_grad():
            want = model(ids, mask)
        got = run_reference(program, [ids, mask])[0]
        keep = mask.bool()[..., None]
        assert rel_err(got * keep, want * keep) < 2e-2


@pytest.mark.parametrize("eos", [2, 999])
def test_clip_text_pools_at_the_end_token(eos):
    """CLIP's text pooling: with eos_token_id 2 (the original checkpoints) transformers takes
    hidden[arange(B), ids.int().argmax(-1)] (their end token has the largest id), with any other
    hidden[arange(B), (ids == eos).int().argmax(-1)] — an argmax kernel on the ids (or on a
    comparison of them), then the embedding kernel reading rows of the hidden states at flat
    ids; with a dynamic batch too."""
    cfg = transformers.CLIPTextConfig(hidden_size=128, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=256,
                                      vocab_size=1000, max_position_embeddings=77,
                                      eos_token_id=eos)
    torch.manual_seed(0)
    clip = transformers.CLIPTextModel(cfg).eval()

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.clip = clip

        def forward(self, ids):
            return self.clip(input_ids=ids).pooler_output

    model = Pooled().to(torch.bfloat16)

    def ids_with_end(batch, ends, seed):
        ids = torch.randint(3, 999, (batch, 77), generator=torch.Generator().manual_seed(seed))
        for row, end in enumerate(ends):
            ids[row, end] = eos
        return ids

    b = torch.export.Dim("B", min=1, max=16)
    program = compile_graph(to_graph(model, (ids_with_end(3, (10, 76, 0), 0),), ({0: b},)))
    reduce_kinds = [op.kind for op in program.ops if type(op).__name__ == "ReduceOp"]
    assert reduce_kinds == ["argmax"]
    ids = ids_with_end(4, (5, 40, 70, 0), 1)
    with torch.no_grad():
        want = model(ids)
    assert rel_err(run_reference(program, [ids])[0], want) < 2e-2


def test_argmax_and_row_gather_kernels_in_the_interpreter():
    from aotpack.kernels.spec import EmbeddingOp, ReduceOp, TensorArg

    flags = contiguous("flags", DType.I32, (5, 77))
    arg = ReduceOp("argmax", flags, contiguous("pos", DType.I64, (5,)))
    table = contiguous("hidden", DType.BF16, (5 * 77, 64))
    ids = TensorArg("flat", DType.I64, (5, 1), (1, 1))
    rows = EmbeddingOp(table, ids, contiguous("pooled", DType.BF16, (5, 64)))
    g = torch.Generator().manual_seed(0)
    f = torch.zeros(5, 77, dtype=torch.int32)
    f[0, 3] = f[0, 9] = 1  # two maxima: the first wins, as torch's argmax
    f[1, 76] = f[3, 0] = f[4, 50] = 1  # row 2: all equal -> 0
    envs = [{"flags": f.reshape(-1), "pos": torch.zeros(5, dtype=torch.int64)},
            {"hidden": torch.randn(5 * 77 * 64, generator=g).to(torch.bfloat16),
             "flat": torch.tensor([3, 77 + 76, 2 * 77, 3 * 77, 4 * 77 + 50]),
             "pooled": torch.zeros(5 * 64, dtype=torch.bfloat16)}]
    refs = []
    for op, env in ((arg, envs[0]), (rows, envs[1])):
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref[op.out.storage])
    run_interpreted_batch([(arg, envs[0], None), (rows, envs[1], None)])
    assert envs[0]["pos"].tolist() == [3, 76, 0, 0, 50] == refs[0].tolist()
    assert torch.equal(envs[1]["pooled"], refs[1])


EAGER_ATTENTION = {  # families whose attention is written out with a term sdpa cannot take
    "bloom": lambda: transformers.BloomModel(transformers.BloomConfig(
        hidden_size=128, n_layer=2, n_head=2, vocab_size=1000)),  # ALiBi through baddbmm
    "mpt": lambda: transformers.MptModel(transformers.MptConfig(
        d_model=128, n_layers=2, n_heads=2, vocab_size=1000)),  # ALiBi and a masked_fill
    "gptj": lambda: transformers.GPTJModel(transformers.GPTJConfig(
        n_embd=128, n_layer=2, n_head=2, vocab_size=1000, rotary_dim=32)),  # f32 scores
    "mpnet": lambda: transformers.MPNetModel(transformers.MPNetConfig(**SMALL)),  # rel. bias
    # Gemma-2 eager: logit soft-capping (tanh) between the products, head dim 256, windows
    "gemma2_softcap": lambda: transformers.Gemma2Model(transformers.Gemma2Config(
        **SMALL, num_key_value_heads=1, head_dim=256, sliding_window=8,
        attn_implementation="eager", attn_logit_softcapping=50.0)),
}


@pytest.mark.parametrize("family", list(EAGER_ATTENTION))
def test_eager_attention_families_compile(family):
    """Attention written out with terms between its products (ALiBi and a mask, a
    relative-position bias and a mask, f32 scores, a soft cap) is the attention kernel
    (passes/attention_terms.py): no batched matmul, no softmax kernel; matches eager."""
    torch.manual_seed(0)
    model = WithMask(EAGER_ATTENTION[family]().eval()).to(torch.bfloat16)
    program = compile_graph(to_graph(model, _padded(seed=0)))
    kinds = [type(op).__name__ for op in program.ops]
    assert kinds.count("AttentionOp") == 2 and "BmmOp" not in kinds and "SoftmaxOp" not in kinds
    ids, mask = _padded(seed=2)
    with torch.no_grad():
        want = model(ids, mask)
    keep = mask.bool()[..., None]
    assert rel_err(run_reference(program, [ids, mask])[0] * keep, want * keep) < 2e-2


def test_bmm_kernel_in_the_interpreter():
    """Batched matmul over strided views: a transposed operand, a batch broadcast (stride 0),
    ragged M/N/K; bf16 and f32 (full precision)."""
    from aotpack.kernels.spec import BmmOp, TensorArg

    cases = []
    for dt, tol in ((DType.BF16, 1e-2), (DType.F32, 1e-5)):
        a = contiguous("a", dt, (3, 37, 45))
        b = TensorArg("b", dt, (3, 45, 70), (0, 1, 45))  # one [70, 45] matrix, transposed
        cases.append((BmmOp(a, b, contiguous("out", dt, (3, 37, 70))), tol))
    g = torch.Generator().manual_seed(0)
    jobs, refs = [], []
    for op, _ in cases:
        t = op.a.dtype.to_torch()
        env = {"a": torch.randn(3 * 37 * 45, generator=g).to(t),
               "b": torch.randn(45 * 70, generator=g).to(t),
               "out": torch.full((3 * 37 * 70,), float("nan")).to(t)}
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref["out"])
        jobs.append((op, env, None))
    run_interpreted_batch(jobs)
    for (op, tol), (_, env, _), ref in zip(cases, jobs, refs):
        assert rel_err(env["out"], ref) < tol, op.a.dtype


class Seq2Seq(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids).last_hidden_state


class Pixels(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state


def _t5():
    cfg = transformers.T5Config(d_model=128, num_layers=2, num_heads=2, d_ff=256, d_kv=64,
                                vocab_size=1000)
    dec = torch.randint(2, 1000, (3, 7), generator=torch.Generator().manual_seed(5))
    return Seq2Seq(transformers.T5Model(cfg)), (*_padded(), dec)


def _swin():
    cfg = transformers.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                  num_heads=[2, 4], window_size=4)
    return Pixels(transformers.SwinModel(cfg)), (torch.randn(2, 3, 64, 64),)


def _deberta():
    return WithMask(transformers.DebertaV2Model(transformers.DebertaV2Config(**SMALL))), _padded()


def _mobilebert():  # NoNorm after bias + residual: more epilogue than one kernel takes
    cfg = transformers.MobileBertConfig(
        vocab_size=1000, hidden_size=128, embedding_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, intra_bottleneck_size=64,
        true_hidden_size=64, max_position_embeddings=128)
    return WithMask(transformers.MobileBertModel(cfg)), _padded()


def _squeezebert():  # grouped 1-D convs; the attention's output permuted to [B, H, D, S]
    cfg = transformers.SqueezeBertConfig(
        vocab_size=1000, hidden_size=128, embedding_size=128, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=256, max_position_embeddings=128,
        q_groups=4, k_groups=4, v_groups=4, post_attention_groups=1, intermediate_groups=4,
        output_groups=4)
    return WithMask(transformers.SqueezeBertModel(cfg)), _padded()


def _funnel():  # relative_shift: aranges from .item() of positions the build knows
    cfg = transformers.FunnelConfig(vocab_size=1000, block_sizes=[1, 1], d_model=128, n_head=4,
                                    d_head=32, d_inner=256)
    return WithMask(transformers.FunnelModel(cfg)), _padded()


MORE = {"t5_encoder_decoder": _t5, "swin": _swin, "deberta_v2": _deberta,
        "mobilebert": _mobilebert, "squeezebert": _squeezebert, "funnel": _funnel}


@pytest.mark.parametrize("family", list(MORE))
def test_more_families_match_eager(family):
    """T5 with its decoder (cross-attention, causal with relative bias, padded encoder
    batch), Swin (shifted windows: roll as slices, relative-position bias picked from its
    table at build time, window masks), DeBERTa-v2 (disentangled attention through batched
    matmuls and gathers of constants), MobileBERT and SqueezeBERT (each once a traceback:
    tests/test_model_edges.py; every kernel op is cross-compiled too), Funnel (its relative
    positions: aranges over .item() of tensors the build computes)."""
    torch.manual_seed(0)
    model, inputs = MORE[family]()
    model = model.eval().to(torch.bfloat16)
    inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)
    program = compile_graph(to_graph(model, inputs))
    with torch.no_grad():
        want = model(*inputs)
    assert rel_err(run_reference(program, list(inputs))[0], want) < 2e-2
    if family in ("mobilebert", "squeezebert"):
        from aotpack.builder import compile_ops

        compile_ops(program, SM90, progress=False)


# --------------------------------------------------------------------------- refusals


REFUSALS = {  # what a model does -> (example inputs, words the one-line error must contain)
    "gather_apart": (lambda x, i: x[i, :, i], (torch.randn(3, 5, 4), torch.tensor([2, 0])),
                     "not side by side"),
    "bitwise_on_integers": (lambda i: (i & 3) + 1, (torch.tensor([5, 6, 7]),),
                            "bit operations on integers"),
    "argmax_of_everything": (lambda x: torch.argmax(x), (torch.randn(3, 4),),
                             "argmax over all elements"),
    # exported with a side-effect token (its error check): the op is named, not the token
    "inverse_with_error_check": (lambda x: torch.linalg.inv(x * 2), (torch.randn(2, 4, 4),),
                                 "linalg_inv_ex"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_op_and_the_line(case):
    """What the run-time ops do not cover is one UnsupportedOpError naming the aten op, what
    form of it is refused, and the model's source line — never a traceback from inside."""
    from aotpack.frontend import UnsupportedOpError

    fn, inputs, words = REFUSALS[case]
    with pytest.raises(UnsupportedOpError) as e:
        to_graph(Fn(fn), inputs)
    message = str(e.value)
    assert words in message and "aten." in message and "test_model_coverage.py" in message, \
        message


def test_complex_values_of_a_dynamic_size_are_refused_by_name():
    """A complex table whose size follows a dim (a rotary table from torch.polar, as
    DeepSeek-V2's) cannot be folded per size: one UnsupportedOpError naming the op, the dtype
    and the user's line (was a ValueError traceback from the dtype table)."""
    from aotpack.frontend import UnsupportedOpError

    class Polar(torch.nn.Module):
        def forward(self, x):
            t = torch.arange(x.shape[1], dtype=torch.float32)
            table = torch.polar(torch.ones_like(t), t)
            return x * torch.view_as_real(table)[..., 0]

    s = torch.export.Dim("S", min=2, max=64)
    with pytest.raises(UnsupportedOpError) as e:
        to_graph(Polar(), (torch.randn(2, 8),), ({1: s},))
    message = str(e.value)
    assert "aten.polar" in message and "complex64" in message
    assert "test_model_coverage.py" in message and "torch.polar" in message


def test_source_lines_skip_generated_code():
    """A node whose innermost frame is generated code (<eval_with_key>: a decorator's traced
    wrapper) is placed at the user's frame below it, or at none: never at the generated file."""
    from types import SimpleNamespace

    from aotpack.frontend.translate import source_loc

    trace = ('File "/home/u/model.py", line 12, in forward\n    y = rope(x)\n'
             'File "<eval_with_key>.42", line 18, in forward\n    polar = torch.polar(a, b)')
    loc = source_loc(SimpleNamespace(name="polar", meta={"stack_trace": trace}))
    assert (loc.file, loc.line, loc.code) == ("/home/u/model.py", 12, "y = rope(x)")
    only = source_loc(SimpleNamespace(name="polar", meta={"stack_trace": trace.split("File")[0]
                                                          + "File" + trace.split("File")[2]}))
    assert only.file is None
