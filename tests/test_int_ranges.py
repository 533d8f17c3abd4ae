"""passes/int_ranges.py: comparisons that the value ranges of integer tensors decide are folded
(and the `where` on them becomes the operand it picks); anything the ranges leave open stays,
and the program still computes what eager does."""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.ir.ops import Op
from aotpack.passes import compile_graph
from aotpack.passes.pipeline import optimize
from program_checks import rel_err


class Guarded(torch.nn.Module):
    """Expert ids from a topk over 8 columns, guarded as transformers' grouped-GEMM experts
    guard them (ids >= E are another GPU's), plus arithmetic on the ids compared at the edge
    of their range: 2 * id + 1 <= 15 always (folded), == 15 only sometimes (kept); a sum
    that wraps in its integer type (int8, int32) is not ranged (kept)."""

    def __init__(self, form: str):
        super().__init__()
        self.form = form
        self.gate = torch.nn.Linear(16, 8)

    def forward(self, x, other_ids):
        ids = self.gate(x).softmax(-1).topk(2).indices  # [T, 2] in 0..7
        if self.form == "guard":
            invalid = ids.view(-1).sort().values >= 8
        elif self.form == "arith_always":
            invalid = (ids * 2 + 1).clamp(min=0) > 15
        elif self.form == "arith_open":
            invalid = (ids * 2 + 1) == 15
        elif self.form == "wraps_int8":  # 126 + id wraps past 127 for ids 2 and 3
            invalid = (ids.to(torch.int8) + 126) < 0
        elif self.form == "wraps_int32":
            invalid = (ids.int() + (2**31 - 2)) < 0
        elif self.form == "cat":  # two argmaxes joined, as PhiMoE's mixer picks its experts
            second = self.gate(x)[:, 1:].argmax(-1, keepdim=True) + 1
            invalid = torch.cat([ids[:, :1], second], 1) >= 8
        else:  # ids from the caller: nothing is known about them
            invalid = other_ids >= 8
        rows = x.repeat_interleave(2, 0) if invalid.dim() == 1 else x[:, None, :].expand(-1, 2, -1)
        return rows.masked_fill(invalid.reshape(rows.shape[:-1])[..., None], 0.0)


@pytest.mark.parametrize("form, folded", [
    ("guard", True), ("arith_always", True), ("cat", True), ("arith_open", False),
    ("input", False), ("wraps_int8", False), ("wraps_int32", False),
])
def test_decided_comparisons_fold(form, folded):
    model = Guarded(form).eval()
    x = torch.randn(6, 16)
    other = torch.tensor([[0, 9], [3, 8], [1, 2], [7, 7], [8, 0], [5, 6]])
    graph = optimize(to_graph(model, (x, other)))
    ops = {n.op for n in graph.nodes}
    assert (Op.WHERE not in ops) == folded, sorted(o.value for o in ops)
    program = compile_graph(to_graph(model, (x, other)))
    if form == "wraps_int32":  # (the kernels add int32 in int64: no wrap to compare)
        return
    x2 = torch.randn(6, 16)
    with torch.no_grad():
        want = model(x2, other)
    assert rel_err(run_reference(program, [x2, other])[0], want) < 1e-6
