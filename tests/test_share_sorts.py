"""passes/share_sorts.py: where a model uses both results of one sort, one sort kernel runs
and the values are gathered at its order; a sort of several rows keeps its two kernels."""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.passes import compile_graph
from program_checks import rel_err


class BothResults(torch.nn.Module):
    def __init__(self, descending: bool):
        super().__init__()
        self.descending = descending

    def forward(self, x, ids):
        values, order = x.sort(dim=-1, descending=self.descending, stable=True)
        id_values, id_order = ids.sort(stable=True)  # int64 with ties: MoE routing's form
        return values * 2, order, id_values + 1, id_order


@pytest.mark.parametrize("rows, descending, shared", [
    (1, False, True), (1, True, True), (3, False, False)])
def test_one_sort_serves_both_results(rows, descending, shared):
    model = BothResults(descending).eval()
    x = torch.randn(rows, 37)
    x[0, 5] = x[0, 9]  # a tie
    x[0, 11] = float("nan")  # sorts last, as torch
    ids = torch.randint(0, 4, (50,))
    program = compile_graph(to_graph(model, (x, ids)))
    sorts = [op for op in program.ops if type(op).__name__ == "SortOp"]
    # the ids (one row) always share; x shares when it is one row
    assert len(sorts) == (2 if shared else 3), [op.indices for op in sorts]
    outs = run_reference(program, [x, ids])
    want = model(x, ids)
    for got, w in zip(outs, want):
        if w.dtype.is_floating_point:
            assert torch.equal(got.isnan(), w.isnan())
            assert rel_err(torch.nan_to_num(got), torch.nan_to_num(w)) < 1e-6
        else:
            assert torch.equal(got, w)
