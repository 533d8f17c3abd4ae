"""sort / argsort / topk of N-D tensors along any dim (issue 15): ascending and descending,
the largest and the smallest, floats (NaN placed as torch places it) and integers (exact), a
static and a dynamic sorted dim. Compiled programs (kernel references) against eager with
inputs other than the example's; the sort and topk kernels in Triton's interpreter and
cross-compiled for sm_90a with symbolic sizes.
"""
import pytest
import torch

from aotpack.dtypes import DType
from aotpack.executor import run_reference
from aotpack.frontend import UnsupportedOpError, to_graph
from aotpack.kernels import run_reference as run_op_reference
from aotpack.kernels.spec import SortOp, TensorArg, TopkOp, contiguous
from aotpack.passes import compile_graph
from program_checks import Fn


class Orders(torch.nn.Module):
    """Every form along the last, a middle and the first dim."""

    def forward(self, x, ids):
        down = torch.sort(x, dim=1, descending=True, stable=True)
        up = torch.sort(x, dim=0, stable=True)
        order = torch.argsort(x, dim=-1, stable=True)
        small = torch.topk(x, 2, dim=1, largest=False)
        big = torch.topk(x, 3)
        # integers (the sorted row's first k), distinct along dim 0 (no ties to order)
        ids_top = torch.topk(ids * 8 + torch.arange(5)[:, None], 2, dim=0)
        ids_up = torch.sort(ids, descending=True, stable=True)
        return (down.values, down.indices, up.values, up.indices, order, small.values,
                small.indices, big.values, big.indices, ids_top.values, ids_top.indices,
                ids_up.values, ids_up.indices)


# outputs of Orders that are topk indices over x: {output: its dim}; checked by what they
# pick (torch leaves the order of equal values open)
_PICKS = {6: 1, 8: 2}


def _inputs(batch, seq, seed, dtype=torch.float32):
    """x with a NaN and (in bf16) equal values; ids with many equal values."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randperm(batch * 6 * seq, generator=g).reshape(batch, 6, seq).to(dtype) / 8
    x[0, 2, 1] = float("nan")
    return x, torch.randint(-4, 4, (5, seq), generator=g)


def _equal(got, want) -> bool:
    """Same dtype, shape and values, NaN where the other has NaN."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.is_floating_point():
        return torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(),
                                                                      want.nan_to_num())
    return torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_orders_match_eager(dtype):
    """Static, then batch and the sorted last dim dynamic (topk over a dynamic dim is a sort
    and its first k); exact values and indices."""
    model = Orders()
    b, s = torch.export.Dim("B", min=1, max=8), torch.export.Dim("S", min=3, max=300)
    for dims in (None, ({0: b, 2: s}, {1: s})):
        program = compile_graph(to_graph(model, _inputs(2, 9, 0, dtype), dims))
        kinds = {type(op).__name__ for op in program.ops}
        assert {"SortOp", "TopkOp"} <= kinds if dims is None else "SortOp" in kinds
        for batch, seq in (((1, 3), (3, 40), (2, 257)) if dims else ((2, 9),)):
            args = _inputs(batch, seq, batch + seq, dtype)
            wants = model(*args)
            for n, (got, want) in enumerate(zip(run_reference(program, list(args)), wants)):
                if n in _PICKS:
                    got, want = args[0].gather(_PICKS[n], got), wants[n - 1]
                assert _equal(got, want), (batch, seq, n)


def test_moe_routing_sort_is_one_row():
    """The routing's 1-D sort of expert ids is a sort of one row (the kernel is the same)."""
    ids = torch.tensor([3, 1, 3, 0, 1, 2, 0, 3])
    program = compile_graph(to_graph(Fn(lambda i: torch.sort(i, stable=True)), (ids,)))
    (op,) = [op for op in program.ops if isinstance(op, SortOp)][:1]
    assert tuple(op.x.shape) == (1, 8)
    got = run_reference(program, [ids])
    want = torch.sort(ids, stable=True)
    assert torch.equal(got[0], want.values) and torch.equal(got[1], want.indices)


def test_sort_and_topk_kernels_in_the_interpreter():
    """Rows longer than one block of either loop (300: 5 x 64 and 3 x 128), several rows, a
    strided row view; NaNs and ties in f32, bf16 and int32, ascending and descending; topk of
    the smallest with a tie (the first index wins)."""
    from support.interpret import run_interpreted_batch

    g = torch.Generator().manual_seed(0)
    r, c = 3, 300
    jobs = []
    for dtype, descending in ((DType.F32, False), (DType.BF16, True), (DType.I32, False),
                              (DType.I32, True)):
        if dtype.is_float:
            x = torch.randint(-20, 20, (r, c), generator=g).to(dtype.to_torch()) / 4
            x[0, ::37] = float("nan")
            x[1, 5] = float("-inf")
        else:
            x = torch.randint(-20, 20, (r, c), generator=g, dtype=torch.int32)
        # the rows every other row of a [2r, c] tensor (row stride 2c)
        whole = torch.zeros(2 * r, c, dtype=x.dtype)
        whole[::2] = x
        src = TensorArg("x", dtype, (r, c), (2 * c, 1))
        for indices in (False, True):
            out = contiguous("o", DType.I64 if indices else dtype, (r, c))
            jobs.append((SortOp(src, out, indices, descending),
                         {"x": whole.reshape(-1).clone(),
                          "o": torch.zeros(r * c, dtype=out.dtype.to_torch())}))
    probs = torch.rand(5, 40, generator=g)
    probs[1, 7] = probs[1, 30] = -1.0  # a tie at the bottom
    probs[2, 3] = probs[2, 9] = float("nan")  # NaN above +inf (largest), never the smallest
    probs[2, 5] = float("inf")
    probs[3, 4:] = float("nan")  # fewer numbers than k: NaNs after them
    for largest in (False, True):
        for indices in (False, True):
            out = contiguous("t", DType.I64 if indices else DType.F32, (5, 6))
            jobs.append((TopkOp(contiguous("p", DType.F32, (5, 40)), out, 6, indices, largest),
                         {"p": probs.reshape(-1).clone(),
                          "t": torch.zeros(30, dtype=out.dtype.to_torch())}))
    refs = []
    for op, env in jobs:
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref[op.out.storage])
    run_interpreted_batch([(op, env, None) for op, env in jobs])
    for (op, env), ref in zip(jobs, refs):
        assert _equal(env[op.out.storage], ref), op
    assert jobs[-3][1]["t"].reshape(5, 6)[1, :2].tolist() == [7, 30]
    assert jobs[-1][1]["t"].reshape(5, 6)[2, :3].tolist() == [3, 9, 5]
    first = jobs[1][1]["o"].reshape(r, c)[0]  # NaNs last, in their order
    assert first[-9:].tolist() == list(range(0, c, 37))


def test_sort_and_topk_compile_for_sm90a_with_symbolic_sizes():
    from aotpack.ir.sym import symbol
    from aotpack.kernels.triton import routing

    rows, cols = symbol("R", 1, 4096), symbol("C", 1, 32768)
    ops = [SortOp(contiguous("x", DType.BF16, (rows, cols)),
                  contiguous("o", DType.I64, (rows, cols)), True, True),
           SortOp(contiguous("x", DType.I64, (rows, cols)),
                  contiguous("o", DType.I64, (rows, cols)), False, False),
           TopkOp(contiguous("p", DType.F32, (rows, 64)), contiguous("o", DType.F32, (rows, 5)),
                  5, False, False)]
    for op in ops:
        (launch,) = routing.compile(op)
        assert launch.kernel.cubin


# --------------------------------------------------------------------------- bucketize
class Buckets(torch.nn.Module):
    """bucketize (left and right edges, int32 out) and searchsorted (side="right") against
    constant bins, of floats with NaN and infinities and of integers with repeated bins."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bins", torch.tensor([-1.0, 0.0, 0.5, 2.0]))

    def forward(self, x, ids):
        return (torch.bucketize(x, self.bins), torch.bucketize(x, self.bins, right=True),
                torch.bucketize(x, self.bins, out_int32=True),
                torch.searchsorted(self.bins, x, side="right"),
                torch.bucketize(ids, torch.tensor([0, 2, 2, 5])))


def test_bucketize_and_searchsorted_against_constant_bins():
    """Exact against eager (bucket indices and dtypes); each output one pointwise kernel of a
    compare per bin, run in the interpreter."""
    from conv_checks import check_kernels_interpreted
    from aotpack.kernels.spec import PointwiseOp

    x = torch.tensor([[float("nan"), -5.0, -1.0, 0.0, 0.25],
                      [0.5, 2.0, 3.0, float("inf"), float("-inf")]])
    ids = torch.tensor([3, 0, 2, -1, 9, 5])
    program = compile_graph(to_graph(Buckets(), (x, ids)))
    assert {type(op).__name__ for op in program.ops} == {"PointwiseOp"}
    assert len(program.ops) <= 6  # one per output (x's NaN test shared by four of them)
    for args in ((x, ids), (torch.randn(2, 5) * 2, torch.randint(-3, 8, (6,)))):
        for got, want in zip(run_reference(program, list(args)), Buckets()(*args)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    assert check_kernels_interpreted(program, [x, ids], tol=0, kinds=(PointwiseOp,)) >= 5


# --------------------------------------------------------------------------- refusals


REFUSALS = {  # what a model does -> (inputs, words the one-line error must contain)
    "f64": (lambda x: torch.sort(x.double(), dim=0).values, (torch.randn(4, 3),), "of f64"),
    "k_zero": (lambda x: torch.topk(x, 0, dim=0).values, (torch.randn(2, 5),), "k=0"),
    "bins_at_run_time": (lambda x, b: torch.bucketize(x, b), (torch.randn(4), torch.randn(3)),
                         "computed at run time"),
    "bins_unsorted": (lambda x: torch.bucketize(x, torch.tensor([1.0, 0.0])),
                      (torch.randn(4),), "not sorted"),
    "too_many_bins": (lambda x: torch.bucketize(x, torch.arange(100.0)), (torch.randn(4),),
                      "at most 64"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_op_and_the_line(case):
    fn, inputs, words = REFUSALS[case]
    with pytest.raises(UnsupportedOpError) as e:
        to_graph(Fn(fn), inputs)
    message = str(e.value)
    assert words in message and "aten." in message and "test_sort_ops.py" in message, message
