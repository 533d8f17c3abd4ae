"""softmax / log_softmax / cumsum over a dim that is not the last (issue 15), CPU: the row
kernels read the dim moved last (a view, or a copy where that is none) and write their result
with it last (an intermediate stored so, read through the permuted strides; a fixed
destination written in place when that is a view, else copied into). Compiled programs
against eager in bf16 and f32; the kernels on the moved views in Triton's interpreter.
(tests/test_reductions.py has the other reductions over other dims.)"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from aotpack.frontend import to_graph  # noqa: E402
from aotpack.kernels.spec import ScanOp, SoftmaxOp  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from program_checks import check_matches_eager, kinds  # noqa: E402


class MovedDims(torch.nn.Module):
    """softmax / log_softmax / cumsum over a dim that is not the last: a graph output, an
    intermediate (read by an add), written into a cat, under an output cast."""

    def forward(self, x):
        return (torch.softmax(x, 1), torch.log_softmax(x * 2, 0) + 1, torch.cumsum(x, -2),
                torch.cat([torch.softmax(x, 1), x], 1),
                torch.softmax(x.float(), dim=1).to(x.dtype))


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-5)])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5)])
def test_softmax_and_cumsum_over_another_dim_move_it_last(shape, dtype, tol):
    p = check_matches_eager(MovedDims(), (torch.randn(shape, dtype=dtype),), tol)
    rows = [op for op in p.ops if isinstance(op, (SoftmaxOp, ScanOp))]
    assert len(rows) == 5
    # each kernel reduces its dim as the columns of an [R, C] view
    assert sorted(op.x.shape[1] for op in rows) == [2, 3, 3, 3, shape[-2]]


def test_softmax_over_channels_reads_and_writes_in_place_when_that_is_a_view():
    """softmax(dim=1) of a batch-1 [1, C, L] map: the kernel reads and writes the columns
    through their strides (rows = positions, columns = channels): one launch, no copies."""
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)

    p = check_matches_eager(M(), (torch.randn(1, 6, 40),), 1e-5)
    (op,) = p.ops
    assert isinstance(op, SoftmaxOp) and op.x.shape == (40, 6) and op.x.strides == (1, 40)
    assert op.out.storage == p.outputs[0] and op.out.strides == (1, 40)


def test_moved_softmax_result_is_read_through_its_strides():
    """An intermediate softmax over dim 1 of [B, S, D] is stored with that dim last and its
    user reads the permuted view: the input's copy is the only one."""
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1) * x

    p = check_matches_eager(M(), (torch.randn(2, 7, 16),), 1e-5)
    assert kinds(p) == ["PointwiseOp", "SoftmaxOp", "PointwiseOp"]
    copy, sm, mul = p.ops
    assert sm.x.storage == copy.out.storage and sm.out.shape == (32, 7)
    assert mul.out.storage == p.outputs[0]


def test_moved_dim_kernels_interpreted():
    """The softmax and scan kernels on the moved views (column-strided inputs and outputs) in
    Triton's interpreter, against their references."""
    from conv_checks import check_kernels_interpreted

    x = torch.randn(1, 3, 6, 5, dtype=torch.bfloat16)
    p = compile_graph(to_graph(MovedDims(), (x,)))
    assert check_kernels_interpreted(p, [x], kinds=(SoftmaxOp, ScanOp)) == 5


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_a_view_merging_the_moved_dim_reads_a_copy(dtype, tol):
    """softmax over dim 1 stored with that dim last, then a reshape that merges it with its
    neighbour (no strided view of that layout): the view reads a contiguous copy."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 5)

        def forward(self, x):
            return self.fc(torch.softmax(x, 1).flatten(1)), torch.softmax(x, 1).reshape(2, 12) * 2

    torch.manual_seed(0)
    check_matches_eager(M().to(dtype).eval(), (torch.randn(2, 3, 4, dtype=dtype),), tol)
