"""Tensor ops on run-time inputs as models use them, against eager on the CPU reference (and
kernel by kernel in Triton's interpreter where a new kernel form is involved): roll and
index_select (constant and run-time indices), explicit as_strided views, GroupNorm,
zeros_like/ones_like/full_like and triangles of run-time data, gather/scatter along any dim,
integer remainder, repeat and clamp with tensor bounds, cumsum over a leading dim.
(Split from tests/test_model_coverage.py, which keeps the model families and refusals.)"""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.kernels.spec import PointwiseOp, ScanOp
from aotpack.passes import compile_graph
from program_checks import Fn, rel_err


def test_roll_and_index_select_are_slices():
    class Shift(torch.nn.Module):
        def forward(self, x):
            y = torch.roll(x, shifts=(-2, 3), dims=(1, 2))
            return y.index_select(1, torch.tensor([4, 5, 0, 1, 2]))

    x = torch.randn(2, 6, 7)
    program = compile_graph(to_graph(Shift(), (x,)))
    assert {type(op).__name__ for op in program.ops} <= {"PointwiseOp"}  # copies only
    assert torch.equal(run_reference(program, [x])[0], Shift()(x))


def test_run_time_index_select_explicit_as_strided_and_group_norm():
    """index_select at indices the caller passes (a row gather), an explicit as_strided that
    is a view (overlapping windows), GroupNorm over 4 groups of 2 channels, against eager."""
    class Ops(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(4, 8)

        def forward(self, x, idx, img):
            picked = x.index_select(1, idx) * 2.0
            windows = torch.as_strided(x, (3, 4, 3), (42, 6, 1), 2)  # rows overlap by 3
            return picked, windows + 1.0, self.norm(img)

    torch.manual_seed(0)
    model = Ops().eval()
    with torch.no_grad():
        model.norm.weight.normal_()
        model.norm.bias.normal_()
    args = (torch.randn(3, 7, 6), torch.tensor([6, 0, 3, 3]), torch.randn(2, 8, 5, 5))
    program = compile_graph(to_graph(model, args))
    for idx in (torch.tensor([1, 2, 5, 6]), torch.tensor([0, 0, 0, 4])):
        new = (torch.randn(3, 7, 6), idx, torch.randn(2, 8, 5, 5))
        with torch.no_grad():
            want = model(*new)
        for got, w in zip(run_reference(program, list(new)), want):
            assert rel_err(got, w) < 1e-5


def test_full_like_of_run_time_tensors_and_triangles():
    """zeros_like / ones_like / full_like of inputs (only their shapes are read: a broadcast
    constant, symbolic dims too) and tril / triu of run-time data, against eager."""
    class Likes(torch.nn.Module):
        def forward(self, x, ids):
            z = torch.zeros_like(x) + torch.ones_like(x) * 2.0
            keep = torch.ones_like(ids, dtype=torch.bool)
            return torch.triu(x, 1) + z + torch.tril(x, -1), (torch.full_like(ids, 7) + ids) * keep

    x, ids = torch.randn(3, 8, 8), torch.randint(0, 9, (3, 8))
    b = torch.export.Dim("B", min=1, max=16)
    for dims in (None, ({0: b}, {0: b})):
        program = compile_graph(to_graph(Likes(), (x, ids), dims))
        for n in ((3, 1, 5) if dims else (3,)):
            xs, idn = torch.randn(n, 8, 8), torch.randint(0, 9, (n, 8))
            got, want = run_reference(program, [xs, idn]), Likes()(xs, idn)
            assert torch.equal(got[1], want[1]) and rel_err(got[0], want[0]) < 1e-6


def test_gather_and_scatter_along_any_dim_with_run_time_indices():
    """torch.gather / scatter (src and value forms) with indices computed at run time, along
    inner and outer dims: element-wise row gathers and scatters (the embedding and
    scatter-rows kernels with rows of one element), against eager and, kernel by kernel, in
    Triton's interpreter."""
    from conv_checks import check_kernels_interpreted
    from aotpack.kernels.spec import EmbeddingOp, ScatterRowsOp

    class GatherScatter(torch.nn.Module):
        def forward(self, x, idx, src, idx0):
            picked = x.gather(2, idx) + x.gather(0, idx0)[:, :, :3]
            written = x.scatter(2, idx, src).scatter(1, idx[:, :4, :] % 6, 0.5)
            return picked, written

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 8, generator=g)
    idx = torch.stack([torch.randperm(8, generator=g)[:3] for _ in range(12)]).reshape(2, 6, 3)
    idx0 = torch.randint(0, 2, (2, 6, 8), generator=g)
    src = torch.randn(2, 6, 3, generator=g)
    args = (x, idx, src, idx0)
    program = compile_graph(to_graph(GatherScatter(), args))
    for got, want in zip(run_reference(program, list(args)), GatherScatter()(*args)):
        assert torch.equal(got, want)
    bad = idx.clone()
    bad[0, 0, 0] = 9  # outside dim 2 (torch raises): read within the row, not the next one
    single = compile_graph(to_graph(Fn(lambda x, i: x.gather(2, i)), (x, idx)))
    assert run_reference(single, [x, bad])[0][0, 0, 0] == x[0, 0, 7]
    with pytest.raises(Exception, match="gather of a 0-d tensor"):
        to_graph(Fn(lambda x, i: x.sum().gather(0, i)), (x, torch.tensor(0)))
    assert check_kernels_interpreted(program, list(args), tol=0, kinds=(EmbeddingOp,)) == 2
    assert check_kernels_interpreted(program, list(args), tol=0, kinds=(ScatterRowsOp,),
                                     poison=False) == 2


def test_remainder_of_run_time_tensors():
    """remainder (the divisor's sign, as torch) of integers (int64, int32), by a number and by
    a tensor, negative values included; of floats refused."""
    class Rem(torch.nn.Module):
        def forward(self, ids, d):
            return ids % 5, torch.remainder(ids, -3), torch.remainder(ids, d), ids.int() % 7

    args = (torch.arange(-7, 9).reshape(2, 8), torch.tensor([[3], [-4]]))
    program = compile_graph(to_graph(Rem(), args))
    for got, want in zip(run_reference(program, list(args)), Rem()(*args)):
        assert got.dtype == want.dtype and torch.allclose(got, want, atol=1e-5)
    from conv_checks import check_kernels_interpreted

    assert check_kernels_interpreted(program, list(args), tol=1e-6, kinds=(PointwiseOp,)) >= 1
    with pytest.raises(Exception, match="remainder of floating-point values"):
        to_graph(Fn(lambda x: x % 1.5), (torch.randn(4),))


def test_repeat_and_clamp_with_tensor_bounds():
    """x.repeat (more counts than dims too) is one copy kernel; clamp with tensor bounds
    (broadcast, min only, both) is max/min; static and with a batch dim that varies."""
    class RepeatClamp(torch.nn.Module):
        def forward(self, x, lo, hi):
            tiled = x.repeat(1, 2, 3) + x.repeat(2, 1, 1, 1).sum(0).repeat(1, 2, 3)
            return tiled.clamp(min=lo), x.clamp(lo[:, :4, :1], hi)

    x, lo, hi = torch.randn(3, 4, 5), torch.randn(1, 8, 15) * 0.1, torch.rand(3, 4, 5)
    b = torch.export.Dim("B", min=1, max=8)
    for dims in (None, ({0: b}, None, {0: b})):
        program = compile_graph(to_graph(RepeatClamp(), (x, lo, hi), dims))
        assert {type(op).__name__ for op in program.ops} <= {"PointwiseOp", "ReduceOp"}
        for n in ((3, 1, 6) if dims else (3,)):
            args = (torch.randn(n, 4, 5), lo, torch.rand(n, 4, 5))
            for got, want in zip(run_reference(program, list(args)), RepeatClamp()(*args)):
                assert rel_err(got, want) < 1e-6


def test_cumsum_over_a_leading_dim_runs_it_moved_last():
    """(tests/test_reductions.py has the other layouts.) The scan kernel reads the [4, 3]
    tensor's columns as rows through their strides: no copy."""
    x = torch.randn(4, 3)
    program = compile_graph(to_graph(Fn(lambda x: torch.cumsum(x, 0)), (x,)))
    (scan,) = program.ops
    assert isinstance(scan, ScanOp) and scan.x.shape == (3, 4) and scan.x.strides == (1, 3)
    assert rel_err(run_reference(program, [x])[0], torch.cumsum(x, 0)) < 1e-6
