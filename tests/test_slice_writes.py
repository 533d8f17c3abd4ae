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
from program_checks import kinds, rel_err


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
