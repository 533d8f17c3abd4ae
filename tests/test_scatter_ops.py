"""Writes at run-time indices (issue 15): scatter_add / scatter_reduce / scatter(reduce="add")
along any dim, index_add, index_put with accumulate=True, broadcast values, whole dims before
the index and bool masks. Each compiled program (kernel references) against eager, with
indices that are run-time inputs (a second set, not the example's, runs through the same
program), static and with a batch dim that varies; the row-scatter kernel's atomics in
Triton's interpreter and cross-compiled for sm_90a.
"""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import UnsupportedOpError, to_graph
from aotpack.kernels.spec import PointwiseOp, ScatterRowsOp
from aotpack.passes import compile_graph
from conv_checks import check_kernels_interpreted
from program_checks import Fn, rel_err


class Accumulate(torch.nn.Module):
    """Every accumulating form, along an inner, a middle and the leading dim."""

    def __init__(self, means=True):
        super().__init__()
        self.means = means

    def forward(self, x, idx, src, rows):
        added = x.scatter_add(2, idx, src) + torch.scatter(x, 1, idx % 6, src, reduce="add")
        sums = x[0].scatter_reduce(0, idx[0] % 6, src[0], "sum", include_self=False)
        peaks = x.scatter_reduce(2, idx, src, "amax") - x.scatter_reduce(
            1, idx % 6, src, "amin", include_self=False)
        indexed = x.index_add(1, rows, src[:, :3, :], alpha=2)
        if not self.means:
            return added, sums, peaks, indexed
        means = x.scatter_reduce(2, idx, src, "mean") + x.scatter_reduce(
            1, idx % 6, src, "mean", include_self=False)
        return added, sums, peaks, indexed, means


def _inputs(batch, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(batch, 6, 8, generator=g) * 4).to(dtype)
    idx = torch.randint(0, 8, (batch, 5, 3), generator=g)  # duplicates within rows
    src = (torch.randn(batch, 6, 8, generator=g) * 4).to(dtype)  # larger than idx: cut
    rows = torch.tensor([5, 0, 5]) if seed else torch.tensor([1, 2, 1])
    return x, idx, src, rows


def _check(program, model, args, tol):
    want = model(*args)
    got = run_reference(program, list(args))
    for n, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, n
        if w.is_floating_point():
            assert rel_err(g, w) <= tol, (n, rel_err(g, w))
        else:
            assert torch.equal(g, w), n


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2),
                                       (torch.int64, 0)])
def test_accumulating_scatters_match_eager(dtype, tol):
    """Static, then the batch dim dynamic (1, 3 and 7 rows) with other indices than the
    example's; bf16 accumulates in f32 (closer to exact than eager's bf16 adds)."""
    model = Accumulate(means=dtype.is_floating_point)  # (integer means: refused)
    b = torch.export.Dim("B", min=1, max=8)
    for dims in (None, ({0: b}, {0: b}, {0: b}, None)):
        program = compile_graph(to_graph(model, _inputs(2, 0, dtype), dims))
        assert sum(isinstance(op, ScatterRowsOp) for op in program.ops) >= 5
        for batch in ((1, 3, 7) if dims else (2,)):
            _check(program, model, _inputs(batch, 1 + batch, dtype), tol)


def test_float_sums_without_eager_rounding():
    """bf16 scatter_add rounds once, after an f32 sum: many small adds to one element do not
    stall as bf16 adds do (eager on the GPU rounds after each atomic add)."""
    x, idx = torch.zeros(1, 1, dtype=torch.bfloat16), torch.zeros(1, 4096, dtype=torch.long)
    src = torch.full((1, 4096), 1.0, dtype=torch.bfloat16)
    program = compile_graph(to_graph(Fn(lambda x, i, s: x.scatter_add(1, i, s)),
                                     (x, idx, src)))
    assert run_reference(program, [x, idx, src])[0].item() == 4096.0


def test_gather_and_scatter_over_a_static_inner_dim_of_dynamic_dims():
    """logits.gather(-1, ids) (the log-probability of chosen tokens) and scatter_add over a
    static vocabulary with batch and sequence dynamic: the ids multiply by static sizes."""
    fn = Fn(lambda logits, ids, w: (logits.log_softmax(-1).gather(-1, ids),
                                     logits.scatter_add(2, ids, w)))
    b, s = torch.export.Dim("B", min=1, max=8), torch.export.Dim("S", min=1, max=64)

    def inputs(batch, seq, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, seq, 50, generator=g),
                torch.randint(0, 50, (batch, seq, 3), generator=g),
                torch.randn(batch, seq, 3, generator=g))

    dims = (({0: b, 1: s}, {0: b, 1: s}, {0: b, 1: s}),)
    program = compile_graph(to_graph(fn, inputs(2, 5, 0), dims))
    for batch, seq in ((1, 1), (3, 17), (8, 64)):
        args = inputs(batch, seq, batch * seq)
        for got, want in zip(run_reference(program, list(args)), fn(*args)):
            assert rel_err(got, want) < 1e-6


def test_index_by_uneven_constant_indices_is_a_row_gather():
    """x[[0, 2, 3]] and x[:, [1, 1, 0]] (no even steps: no strided view) read rows through
    the embedding kernel, as run-time indices do; with a dynamic batch too."""
    fn = Fn(lambda x: (x[torch.tensor([0, 2, 3])] * 2, x[:, [1, 1, 0]]))
    b = torch.export.Dim("B", min=4, max=16)
    for dims in (None, (({0: b},),)):
        program = compile_graph(to_graph(fn, (torch.randn(5, 4, 3),), dims))
        assert any(type(op).__name__ == "EmbeddingOp" for op in program.ops)
        for batch in ((4, 9) if dims else (5,)):
            x = torch.randn(batch, 4, 3)
            for got, want in zip(run_reference(program, [x]), fn(x)):
                assert torch.equal(got, want)


def test_narrow_integers_accumulate_in_int32_and_wrap():
    """uint8 / int16 sums run in int32 and are cast back, wrapping as eager's adds do."""
    x = torch.tensor([[250, 3, 7]], dtype=torch.uint8)
    idx = torch.tensor([[0, 0, 2, 0]])
    fn = Fn(lambda x, i, y: (x.scatter_add(1, i, x[:, [0, 0, 1, 2]]),
                              y.scatter_add(1, i, y[:, [0, 0, 1, 2]])))
    args = (x, idx, torch.tensor([[32000, -5, 9]], dtype=torch.int16))
    program = compile_graph(to_graph(fn, args))
    for got, want in zip(run_reference(program, list(args)), fn(*args)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_index_put_forms_match_eager():
    """x[i] = number, x[:, i] = a broadcast row, x[:, i] += v (index, add, index_put), a bool
    mask with a number, index_put_(accumulate=True) with duplicate rows; batch dynamic."""
    class Puts(torch.nn.Module):
        def forward(self, x, i, row, mask):
            a = x.clone()
            a[:, i] = row  # [8] broadcast over [B, 3, 8]
            a[:, i] += 1.0
            b = x.clone()
            b[mask] = -2.5
            c = x.clone()
            c.index_put_((mask,), torch.tensor(0.25), accumulate=True)
            d = x.permute(1, 0, 2).clone()
            d[i] = 0.5
            d.index_put_((i,), torch.ones(3, 1, 8), accumulate=True)
            return a, b, c, d

    def inputs(batch, seed):
        g = torch.Generator().manual_seed(seed)
        i = torch.tensor([4, -1, 4]) if seed else torch.tensor([0, 2, 3])
        return (torch.randn(batch, 6, 8, generator=g), i, torch.randn(8, generator=g),
                torch.rand(batch, 6, 8, generator=g) > 0.5)

    b = torch.export.Dim("B", min=1, max=8)
    for dims in (None, ({0: b}, None, None, {0: b})):
        program = compile_graph(to_graph(Puts(), inputs(2, 0), dims))
        for batch in ((1, 5) if dims else (2,)):
            _check(program, Puts(), inputs(batch, batch), 1e-6)


def test_row_scatter_atomics_in_the_interpreter():
    """The scatter kernels (overwrite, sum, amax, amin) and the fused row-id kernels run in
    Triton's interpreter against their references: f32 and int64 tables, rows of one element
    and whole rows, duplicates everywhere."""
    class Rows(torch.nn.Module):
        def forward(self, x, idx, src, rows, ids):
            elems = x.scatter_add(2, idx, src).scatter_reduce(1, idx % 6, src, "amax")
            whole = x.index_add(1, rows, src[:, :3, :]).scatter_reduce(
                1, idx % 6, src, "amin", include_self=False)
            return elems, whole, ids.scatter_add(0, rows, rows * 7)

    x, idx, src, rows = _inputs(3, 5)
    args = (x, idx, src, rows, torch.arange(6))
    program = compile_graph(to_graph(Rows(), args))
    reduces = sorted(op.reduce for op in program.ops if isinstance(op, ScatterRowsOp))
    assert reduces == ["amax", "amin", "none", "sum", "sum", "sum"]
    assert check_kernels_interpreted(program, list(args), tol=1e-6, kinds=(ScatterRowsOp,),
                                     poison=False) == 6
    assert check_kernels_interpreted(program, list(args), tol=0, kinds=(PointwiseOp,)) >= 3


def test_accumulating_scatter_compiles_to_atomics():
    """Cross-compiled for sm_90a, the sum / amax kernels issue atomic reductions (RED or
    ATOM), the overwrite none."""
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import contiguous
    from aotpack.kernels.triton import routing
    from program_checks import sass_or_skip

    def listing(reduce, dtype):
        op = ScatterRowsOp(contiguous("rows", DType.I64, (40,)),
                           contiguous("vals", dtype, (40, 1)),
                           contiguous("out", dtype, (30, 1)), reduce)
        return sass_or_skip(routing.compile(op)[0].kernel.cubin)

    for reduce, dtype in (("sum", DType.F32), ("amax", DType.F32), ("sum", DType.I64)):
        assert "RED" in listing(reduce, dtype) or "ATOM" in listing(reduce, dtype)
    assert "RED" not in listing("none", DType.BF16) and "ATOM" not in listing("none", DType.BF16)
    with pytest.raises(ValueError, match="atomics of"):
        routing.plan(ScatterRowsOp(contiguous("r", DType.I64, (4,)),
                                   contiguous("v", DType.BF16, (4, 2)),
                                   contiguous("o", DType.BF16, (8, 2)), "sum"))


# --------------------------------------------------------------------------- refusals


_X, _I = torch.randn(3, 4), torch.tensor([[0, 1], [2, 2], [1, 0]])
REFUSALS = {  # what a model does -> (inputs, words the one-line error must contain)
    "prod": (lambda x, i: x.scatter_reduce(1, i, x, "prod"), (_X, _I), "no atomic multiply"),
    "multiply": (lambda x, i: torch.scatter(x, 1, i, x, reduce="multiply"), (_X, _I),
                 "only 'add'"),
    "integer_mean": (lambda x, i: x.scatter_reduce(1, i, x, "mean"), (_X.long(), _I),
                     "of integers"),
    "bool_sum": (lambda x, i: x.index_put((i[:, 0],), x, accumulate=True),
                 (_X > 0, _I), "no atomics"),
    "not_side_by_side": (lambda x, i: x[i[:, 0], :, i[:, 1]], (torch.randn(3, 4, 5), _I),
                         "not side by side"),
    # the flat ids multiply by the sizes after the first indexed dim: those must be static
    "dynamic_inner_dim": (lambda x, i: x.scatter_add(1, i, x), (_X, _I.repeat(1, 2)),
                          "dynamic dim after the first indexed one",
                          (({1: torch.export.Dim("S", min=2, max=64)},
                            {1: torch.export.Dim("S", min=2, max=64)}),)),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_op_and_the_line(case):
    fn, inputs, words, *dims = REFUSALS[case]
    with pytest.raises(UnsupportedOpError) as e:
        to_graph(Fn(fn), inputs, *dims)
    message = str(e.value)
    assert words in message and "aten." in message and "test_scatter_ops.py" in message, \
        message
