"""Writes into slices (frontend/aten_writes.py) and f32 GEMMs of upcast 16-bit values
(passes/exact_gemm.py), as models found by trying uncovered transformers families use them:
DeepSeek-V3's attention fills a torch.empty key tensor with two slice copies, and its router
computes an f32 linear of bf16 values. CPU: the program's kernel references against eager."""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.frontend.translate import UnsupportedOpError
from aotpack.passes import compile_graph
from program_checks import check_matches_eager, kinds, rel_err


class FillEmpty(torch.nn.Module):
    """DeepSeek-V3's expand_kv: a new_empty tensor written through two slice copies (one of
    them a broadcast source, one a dtype change)."""

    def forward(self, nope, rot):
        out = nope.new_empty(*nope.shape[:-1], 12)
        out[..., :8].copy_(nope)
        out[..., 8:].copy_(rot.expand(-1, nope.shape[1], -1, -1).double())
        return out * 2


class WriteInto(torch.nn.Module):
    """Slice and index assignment into a computed tensor (slice_scatter / select_scatter)."""

    def forward(self, x, y):
        z = x * 3
        z[:, 1:3] = y[:, :2]
        z[:, 0] = 1.0
        z[..., -1] = y[:, :, 0]
        return z


def _check(model, inputs, tol=1e-6):
    program = compile_graph(to_graph(model, inputs))
    fresh = [torch.randn_like(t) for t in inputs]
    with torch.no_grad():
        want = model(*fresh)
    (got,) = run_reference(program, fresh)
    assert got.dtype == want.dtype and rel_err(got, want) < tol
    return program


def test_copies_into_empty_concatenate():
    program = _check(FillEmpty(), (torch.randn(2, 3, 5, 8), torch.randn(2, 1, 5, 4)))
    assert "GemmOp" not in kinds(program)


def test_slice_and_index_assignment_into_a_tensor():
    _check(WriteInto(), (torch.randn(2, 5, 6), torch.randn(2, 5, 6)))


def test_reading_a_partly_written_empty_is_refused():
    class Partly(torch.nn.Module):
        def forward(self, x):
            out = x.new_empty(2, 8)
            out[:, :4].copy_(x)
            return out + 1

    with pytest.raises(UnsupportedOpError, match="uninitialised memory"):
        to_graph(Partly(), (torch.randn(2, 4),))


class Router(torch.nn.Module):
    """An MoE router as DeepSeek-V3 writes it: an f32 linear of the bf16 activations and
    weight, then a sigmoid (and another f32 matmul whose operand is computed in f32)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 64))

    def forward(self, x):
        logits = torch.nn.functional.linear(x.float(), self.weight.float())
        return logits.sigmoid()


def test_f32_linear_of_bf16_values_is_a_bf16_gemm_with_f32_output():
    torch.manual_seed(0)
    model = Router().to(torch.bfloat16)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    program = compile_graph(to_graph(model, (x,)))
    gemms = [op for op in program.ops if type(op).__name__ == "GemmOp"]
    assert len(gemms) == 1
    gemm = gemms[0]
    assert gemm.a.dtype.value == gemm.b.dtype.value == "bf16" and gemm.out.dtype.value == "f32"
    fresh = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    (got,) = run_reference(program, [fresh])
    with torch.no_grad():
        want = model(fresh)
    assert got.dtype == torch.float32 and rel_err(got, want) < 1e-6  # exact but for sum order


def test_f32_linear_of_f32_values_stays_f32():
    """An operand computed in f32 is no upcast: the GEMM keeps f32 (the template refuses it)."""
    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(8, 64))

        def forward(self, x):
            return torch.nn.functional.linear(x.float().exp(), self.weight.float())

    program = compile_graph(to_graph(Wide().to(torch.bfloat16),
                                     (torch.randn(4, 64, dtype=torch.bfloat16),)))
    gemm = next(op for op in program.ops if type(op).__name__ == "GemmOp")
    assert gemm.a.dtype.value == "f32"


def test_deepseek_v3_matches_eager():
    """MLA attention (keys filled into torch.empty), the f32 router with grouped top-k routing
    and a shared expert; two layers, the first dense."""
    t = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = t.DeepseekV3Config(
        vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
        first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16,
        qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=64)
    inner = t.DeepseekV3Model(cfg).eval().to(torch.bfloat16)

    class Ids(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    model = Ids()
    program = compile_graph(to_graph(model, (torch.randint(0, 100, (2, 8)),)))
    fresh = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(fresh)
    (got,) = run_reference(program, [fresh])
    assert rel_err(got, want) < 2e-2


class _Circular(torch.nn.Module):
    def __init__(self, pad):
        super().__init__()
        self.pad = pad

    def forward(self, x):
        return torch.nn.functional.pad(x, self.pad, mode="circular") * 2


@pytest.mark.parametrize("pad,shape", [((1, 2, 1, 1), (2, 3, 6, 7)), ((2, 2), (2, 3, 9)),
                                       ((1, 1, 1, 1, 1, 1), (1, 2, 4, 5, 6)),
                                       ((0, 3, 2, 0), (2, 3, 6, 7))])
def test_circular_pad_matches_eager(pad, shape):
    """F.pad(mode="circular") exports as torch.empty, the input copied into the middle along
    two dims, then each border copied from the opposite side of the buffer itself: writes the
    one-dim bookkeeping cannot follow, made a tensor (unwritten elements zeros) first."""
    torch.manual_seed(0)
    check_matches_eager(_Circular(pad), [torch.randn(*shape)], 0.0)


def test_conv_with_circular_padding_mode_matches_eager():
    """nn.Conv2d(padding_mode="circular") (climate and physics nets) pads with F.pad."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, padding_mode="circular"),
                                torch.nn.ReLU()).eval()
    program = check_matches_eager(model, [torch.randn(2, 3, 8, 8)], 1e-5)
    assert "ConvOp" in kinds(program)
