"""Weights a model holds in FP8 (e4m3 + a scale per output row or per tensor, dequantized in its
forward) stay FP8 in the bundle (passes/fp8_sources.py, passes/quantize.keep_checkpoint_fp8):
the GEMMs read the model's own e4m3 bytes and scales, through the stacking of QKV and gate/up,
with --dtype bf16 and under --precision fp8-weights; what the kernels cannot take (f32
activations, a scale per column) folds to a dequantized weight as before. Numbers: the CPU
reference against the model."""
from __future__ import annotations

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.spec import GemmNormOp, GemmOp

F = torch.nn.functional


class FP8Linear(torch.nn.Module):
    """A linear whose weight is held in e4m3 with `scale` per output row ("row"), one per
    tensor ("tensor") or per input column ("column", which no GEMM kernel scales)."""

    def __init__(self, n, k, scale="row", bias=False):
        super().__init__()
        w = torch.randn(n, k) * 0.05
        s = {"row": w.abs().amax(1, keepdim=True), "tensor": w.abs().amax(),
             "column": w.abs().amax(0, keepdim=True)}[scale] / 448
        self.register_buffer("weight", (w / s).to(torch.float8_e4m3fn))
        self.register_buffer("weight_scale", s.float())
        self.bias = torch.nn.Parameter(torch.randn(n) * 0.1) if bias else None

    def dequantized(self, dtype):
        return self.weight.to(dtype) * self.weight_scale.to(dtype)

    def forward(self, x):
        return F.linear(x, self.dequantized(x.dtype), self.bias)


class Block(torch.nn.Module):
    """A decoder block's GEMMs without attention: q/k/v, an output projection, gate/up (one
    SwiGLU GEMM) and down."""

    def __init__(self, d=64, f=128, scale="row"):
        super().__init__()
        self.q, self.k, self.v = (FP8Linear(d, d, scale, bias=True) for _ in range(3))
        self.o = FP8Linear(d, d, scale)
        self.gate, self.up, self.down = (FP8Linear(f, d, scale), FP8Linear(f, d, scale),
                                         FP8Linear(d, f, scale))

    def forward(self, x):
        h = x + self.o(self.q(x) * torch.sigmoid(self.k(x)) + self.v(x))
        return h + self.down(F.silu(self.gate(h)) * self.up(h))


def _program(tmp_path, model, x, **options):
    import aotpack.shared_steps as steps

    torch.save(model, tmp_path / "model.pt")
    torch.save((x,), tmp_path / "inputs.pt")
    spec = tmp_path / "make.py"
    spec.write_text("import torch\n"
                    f"def make():\n    return (torch.load({str(tmp_path / 'model.pt')!r}, "
                    f"weights_only=False), torch.load({str(tmp_path / 'inputs.pt')!r}))\n")
    return steps.load_program(f"{spec}:make", **options)


def _gemms(program):
    """Every GEMM, also those fused with the RMSNorm of their output (GemmNormOp)."""
    return [op if isinstance(op, GemmOp) else op.gemm for op in program.ops
            if isinstance(op, (GemmOp, GemmNormOp))]


def _fp8_gemms(program):
    return [op for op in _gemms(program) if op.b.dtype == DType.F8E4M3]


def _check_numbers(program, model, x, dtype=torch.bfloat16):
    from aotpack.executor import run_reference

    (got,) = run_reference(program, [x.to(dtype)])
    with torch.no_grad():
        ref = model.to(torch.float32)(x.float()) if dtype == torch.float32 else \
            _eager_keeping_fp8(model, dtype)(x.to(dtype))
    err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err < 1.5e-2, err


def _eager_keeping_fp8(model, dtype):
    fp8 = {torch.float8_e4m3fn}
    return model._apply(lambda t: t.to(dtype) if t.is_floating_point() and t.dtype not in fp8
                        else t)


def test_a_block_keeps_the_models_e4m3_bytes_and_scales(tmp_path):
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(4, 64)
    program = _program(tmp_path, model, x, dtype="bf16")
    gemms = _fp8_gemms(program)
    assert len(gemms) == len(_gemms(program)) == 6
    down = next(op for op in gemms if op.b.shape == (64, 128))
    w = program.weights[down.b.storage]
    assert w.dtype == torch.float8_e4m3fn
    assert torch.equal(w.view(torch.uint8), model.down.weight.view(torch.uint8))
    assert torch.equal(program.weights[down.b_scale.storage],  # --dtype bf16 rounded them
                       model.down.weight_scale.reshape(-1).to(torch.bfloat16).float())
    swiglu = next(op for op in gemms if op.b.shape[0] == 256)  # gate/up, rows interleaved
    from aotpack.passes.fuse_swiglu import _interleave

    both = _interleave(model.gate.weight.view(torch.uint8), model.up.weight.view(torch.uint8))
    assert torch.equal(program.weights[swiglu.b.storage].view(torch.uint8), both)
    assert not [n for n, t in program.weights.items()  # no dequantized copy left behind
                if t.dtype == torch.bfloat16 and t.dim() == 2]
    assert any("6 GEMM weights stay FP8" in n for n in program.notes)
    _check_numbers(program, model, x)


def test_one_scale_per_tensor_is_one_per_row(tmp_path):
    torch.manual_seed(1)
    model, x = Block(scale="tensor").eval(), torch.randn(3, 64)
    program = _program(tmp_path, model, x, dtype="bf16")
    assert len(_fp8_gemms(program)) == 6
    down = next(op for op in _fp8_gemms(program) if op.b.shape == (64, 128))
    assert torch.all(program.weights[down.b_scale.storage] ==
                     model.down.weight_scale.to(torch.bfloat16).float())
    _check_numbers(program, model, x)


def test_what_the_kernels_cannot_scale_is_dequantized_at_build(tmp_path):
    """A scale per input column, and f32 activations: the model's own dequantized weight."""
    torch.manual_seed(2)
    model, x = Block(scale="column").eval(), torch.randn(3, 64)
    program = _program(tmp_path, model, x, dtype="bf16")
    assert not _fp8_gemms(program)
    _check_numbers(program, model, x)
    f32 = _program(tmp_path, Block().eval(), x)
    assert not _fp8_gemms(f32)
    assert any("dequantized at build" in n and "--dtype bf16" in n for n in f32.notes)


def test_fp8_weights_precision_takes_the_checkpoint_values(tmp_path):
    """--precision fp8-weights on a model already in FP8: its values, not a requantization
    of their dequantized product (which may round differently)."""
    torch.manual_seed(3)
    model, x = Block().eval(), torch.randn(2, 64)
    program = _program(tmp_path, model, x, dtype="bf16", precision="fp8-weights",
                       measure_error=False)
    down = next(op for op in _fp8_gemms(program) if op.b.shape == (64, 128))
    assert torch.equal(program.weights[down.b.storage].view(torch.uint8),
                       model.down.weight.view(torch.uint8))


def test_dtype_option_leaves_float8_tensors_alone():
    from aotpack.frontend.load import LoadedModel
    from aotpack.frontend.prepare import apply_dtype

    model = FP8Linear(8, 16)
    loaded = apply_dtype(LoadedModel(model, (torch.randn(2, 16),), kind="factory"), "bf16")
    assert loaded.model.weight.dtype == torch.float8_e4m3fn
    assert loaded.model.weight_scale.dtype == torch.bfloat16
    assert loaded.inputs[0].dtype == torch.bfloat16


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_transformers_models_with_fp8_linears(family, tmp_path):
    transformers = pytest.importorskip("transformers")
    T = transformers
    config, cls = {"llama": (T.LlamaConfig, T.LlamaForCausalLM),
                   "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM)}[family]
    torch.manual_seed(0)
    model = cls(config(vocab_size=256, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=64)).eval()
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, torch.nn.Linear) and name != "lm_head":
                fp8 = FP8Linear(child.out_features, child.in_features, bias=False)
                fp8.bias = child.bias
                setattr(mod, name, fp8)
    ids = torch.randint(0, 256, (2, 8))
    program = _program(tmp_path, model, ids, dtype="bf16")
    gemms = _fp8_gemms(program)
    assert len(gemms) == 8  # per layer: qkv (stacked), o, gate/up (one SwiGLU GEMM), down
    attn = model.model.layers[0].self_attn
    stacked = torch.cat([m.weight for m in (attn.q_proj, attn.k_proj, attn.v_proj)])
    assert any(torch.equal(program.weights[op.b.storage].view(torch.uint8),
                           stacked.view(torch.uint8)) for op in gemms)
    from aotpack.executor import run_reference

    logits = run_reference(program, [ids])[0]
    with torch.no_grad():
        ref = _eager_keeping_fp8(model, torch.bfloat16)(ids).logits
    err = ((logits.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err < 2e-2, err


def test_a_weight_past_the_fold_limit_stays_fp8():
    """Folding keeps computations that would make a constant over 64 MiB as nodes (the bundle
    would grow); a dequantized FP8 weight is stored as its e4m3 bytes, so it folds anyway
    (Llama-3-8B's MLP weights and LM head are past the limit; a review found them left as a
    dequantizing kernel before every GEMM)."""
    from aotpack import precision
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    class Big(torch.nn.Module):
        def __init__(self, n=8200, k=4096):  # 64.06 MiB in bf16
            super().__init__()
            self.register_buffer("w8", torch.randn(n, k).to(torch.float8_e4m3fn))
            self.register_buffer("s", torch.full((n, 1), 0.01, dtype=torch.bfloat16))

        def forward(self, x):
            return F.linear(x, self.w8.to(x.dtype) * self.s)

    program = compile_graph(to_graph(Big(), (torch.randn(1, 4096, dtype=torch.bfloat16),)))
    precision.apply(program, "model")
    assert [type(op).__name__ for op in program.ops] == ["GemmOp"]
    assert len(_fp8_gemms(program)) == 1
