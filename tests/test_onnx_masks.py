"""Run-time masks in ONNX graphs (frontend/onnx/masks.py, passes/fuse_attention.py): Where of
a run-time condition between known numbers, And / Or with a uniform known operand, and an
attention whose mask comes from a graph input, fused with the mask as the kernel's operand."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_onnx import _check, _compile, _model, _v  # noqa: E402

from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import UnsupportedOpError  # noqa: E402

I64, B = TensorProto.INT64, TensorProto.BOOL


def _scalar(name, value, dtype=np.float32):
    return (name, np.array(value, dtype=dtype))


def test_where_of_a_run_time_condition_between_known_numbers(tmp_path):
    nodes = [helper.make_node("Cast", ["m"], ["c"], to=B),
             helper.make_node("Where", ["c", "a", "b"], ["w"]),
             helper.make_node("Where", ["c", "zero", "ninf"], ["f"]),  # -inf: finite min
             helper.make_node("Exp", ["f"], ["e"]),
             helper.make_node("Add", ["w", "e"], ["y"])]
    inits = [_scalar("a", 1.5), _scalar("b", -2.0), _scalar("zero", 0.0),
             _scalar("ninf", -np.inf)]
    proto = _model(nodes, [_v("m", [3, 5], I64)], [_v("y", [3, 5])], inits)
    loaded, program = _compile(proto, tmp_path)
    m = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    (got,) = run_reference(program, [m])
    want = torch.where(m.bool(), 1.5, -2.0) + m.float()
    torch.testing.assert_close(got, want)


def test_and_or_with_uniform_known_operands(tmp_path):
    nodes = [helper.make_node("Cast", ["m"], ["c"], to=B),
             helper.make_node("And", ["c", "yes"], ["a"]),  # [3, 5] and [2, 1, 1] → [2, 3, 5]
             helper.make_node("Or", ["no", "a"], ["o"]),
             helper.make_node("Where", ["o", "one", "zero"], ["y"])]
    inits = [("yes", np.ones((2, 1, 1), bool)), ("no", np.zeros((1, 5), bool)),
             _scalar("one", 1.0), _scalar("zero", 0.0)]
    proto = _model(nodes, [_v("m", [3, 5], I64)], [_v("y", [2, 3, 5])], inits)
    _, program = _compile(proto, tmp_path)
    m = torch.randint(0, 2, (3, 5))
    (got,) = run_reference(program, [m])
    torch.testing.assert_close(got, m.float().expand(2, 3, 5))


def test_and_or_of_run_time_and_varying_known_masks(tmp_path):
    """A causal mask (known) and a padding mask (run time): 0/1 arithmetic."""
    nodes = [helper.make_node("Cast", ["m"], ["c"], to=B),
             helper.make_node("And", ["c", "tri"], ["a"]),
             helper.make_node("Or", ["a", "diag"], ["o"]),
             helper.make_node("Where", ["o", "one", "zero"], ["y"])]
    inits = [("tri", np.tril(np.ones((5, 5), bool))), ("diag", np.eye(5, dtype=bool)),
             _scalar("one", 1.0), _scalar("zero", 0.0)]
    proto = _model(nodes, [_v("m", [2, 1, 5], I64)], [_v("y", [2, 5, 5])], inits)
    _, program = _compile(proto, tmp_path)
    m = torch.tensor([[[1, 1, 0, 1, 0]], [[0, 1, 1, 1, 1]]])
    (got,) = run_reference(program, [m])
    want = (m.bool() & torch.ones(5, 5).tril().bool()) | torch.eye(5).bool()
    torch.testing.assert_close(got, want.float())


def _attention_with_padding_mask(fill: float):
    """q, k, v from x by known weights; mask [B, T] int64 → bool → [B, 1, 1, T] → And(True)
    → Expand [B, 1, S, T] → Where(m, 0, fill) added to the scaled scores."""
    rng = np.random.RandomState(0)
    d, h = 32, 2  # head dim 16: the attention kernel's smallest (8 is written out)
    w = {n: rng.randn(d, d).astype(np.float32) * 0.3 for n in ("wq", "wk", "wv")}
    nodes = []
    for n in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}0"]),
                  helper.make_node("Reshape", [f"{n}0", "heads"], [f"{n}1"]),
                  helper.make_node("Transpose", [f"{n}1"], [n], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["s0"]),
              helper.make_node("Mul", ["s0", "scale"], ["s1"]),
              helper.make_node("Cast", ["mask"], ["mb"], to=B),
              helper.make_node("Unsqueeze", ["mb", "axes"], ["m4"]),
              helper.make_node("And", ["yes", "m4"], ["m5"]),
              helper.make_node("Shape", ["s1"], ["shape"]),
              helper.make_node("Expand", ["m5", "shape"], ["m6"]),
              helper.make_node("Where", ["m6", "zero", "fill"], ["add"]),
              helper.make_node("Add", ["s1", "add"], ["s2"]),
              helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o0"]),
              helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "flat"], ["y"])]
    inits = list(w.items()) + [
        ("heads", np.array([0, 0, h, d // h])), ("flat", np.array([0, 0, d])),
        ("axes", np.array([1, 2])), ("yes", np.ones((1, 1, 1, 1), bool)),
        _scalar("scale", 1 / np.sqrt(d // h)), _scalar("zero", 0.0), _scalar("fill", fill)]
    return _model(nodes, [_v("x", ["B", "S", d]), _v("mask", ["B", "S"], I64)],
                  [_v("y", ["B", "S", d])], inits)


@pytest.mark.parametrize("fill", [float(np.finfo(np.float32).min), -np.inf])
def test_attention_with_a_run_time_padding_mask(tmp_path, fill):
    proto = _attention_with_padding_mask(fill)
    dynamic = ("B=1..4", "S=1..32")
    loaded, program = _compile(proto, tmp_path, dynamic=dynamic)
    kinds = [type(o).__name__ for o in program.ops]
    assert kinds.count("AttentionOp") == 1 and "MatmulOp" not in kinds
    (att,) = [o for o in program.ops if type(o).__name__ == "AttentionOp"]
    assert att.mask.strides[1:3] == (0, 0)  # [B, 1, 1, T] in memory
    for b, s in ((2, 8), (3, 13), (1, 32)):
        x = torch.randn(b, s, 32)
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, s // 2:] = 0
        (got,) = run_reference(program, [x, mask])
        (ort,) = loaded.model(x, mask)
        torch.testing.assert_close(got, ort, rtol=1e-4, atol=1e-4)


def test_runs_through_the_generic_check(tmp_path):
    """The same graph against onnxruntime through test_onnx's checker (all-ones masks)."""
    _check(_attention_with_padding_mask(-1e9), tmp_path, inputs=("x=2x8x32", "mask=2x8"))


# ----------------------------------------------------------------------------- values from dims
def _positions_model(reverse: bool):
    """y = x + f(positions): positions Range(0, S) from x's shape, reversed (S - 1 - i) or
    not; a value computed from the dims only, stored at S's maximum."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one_i"], ["s"], axis=0),
             helper.make_node("Range", ["zero_i", "s", "one_i"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT)]
    if reverse:
        nodes += [helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
                  helper.make_node("Sub", ["sf", "posf"], ["p0"]),
                  helper.make_node("Sub", ["p0", "onef"], ["p"])]
    else:
        nodes += [helper.make_node("Identity", ["posf"], ["p"])]
    nodes += [helper.make_node("Add", ["x", "p"], ["y"])]
    inits = [("zero_i", np.array(0)), ("one_i", np.array(1)), _scalar("onef", 1.0)]
    return _model(nodes, [_v("x", ["B", "S"])], [_v("y", ["B", "S"])], inits)


def test_positions_from_a_dynamic_dim_are_a_stored_table(tmp_path):
    _check(_positions_model(False), tmp_path, dynamic=("B=1..4", "S=1..32"),
           shapes=[[(3, 1)], [(1, 32)], [(2, 17)]])


def test_a_value_whose_entries_depend_on_the_dims_is_refused(tmp_path):
    with pytest.raises(UnsupportedOpError, match="leading part"):
        _compile(_positions_model(True), tmp_path, dynamic=("B=1..4", "S=1..32"))


def test_a_fill_of_a_dynamic_shape_is_not_evaluated_at_the_maxima(tmp_path):
    """ConstantOfShape(Shape(x)) read by a run-time Add: one element expanded, even where
    the maxima would take gigabytes on the build host."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Mul", ["x", "ones"], ["y"])]
    proto = _model(nodes, [_v("x", ["B", "S", 4096])], [_v("y", ["B", "S", 4096])])
    _check(proto, tmp_path, dynamic=("B=1..512", "S=1..8192"), shapes=[[(2, 3, 4096)]])


@pytest.mark.parametrize("fill, keep_if", [(-np.inf, True), (-3.0e38, False)])
def test_masked_fill_of_run_time_scores(tmp_path, fill, keep_if):
    """Where(run-time mask, scores, fill) (or the fill first, under a Not): an additive mask,
    the attention kernel's operand."""
    rng = np.random.RandomState(0)
    d = 16  # the attention kernel's smallest head dim (8 is written out)
    w = {n: rng.randn(d, d).astype(np.float32) * 0.3 for n in ("wq", "wk", "wv")}
    args = ["m4", "s1", "fill"] if keep_if else ["m4", "fill", "s1"]
    nodes = [helper.make_node("MatMul", ["x", f"w{n}"], [n]) for n in ("q", "k", "v")] + [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["q", "one"], ["q4"]),
        helper.make_node("Unsqueeze", ["kt", "one"], ["kt4"]),
        helper.make_node("Unsqueeze", ["v", "one"], ["v4"]),
        helper.make_node("MatMul", ["q4", "kt4"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Cast", ["mask"], ["mb"], to=B),
        helper.make_node("Not", ["mb"], ["nb"]) if not keep_if else
        helper.make_node("Identity", ["mb"], ["nb"]),
        helper.make_node("Unsqueeze", ["nb", "axes"], ["m4"]),
        helper.make_node("Where", args, ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v4"], ["o"]),
        helper.make_node("Squeeze", ["o", "one"], ["y"])]
    inits = list(w.items()) + [("one", np.array([1])), ("axes", np.array([1, 2])),
                               _scalar("scale", 0.3), _scalar("fill", fill)]
    proto = _model(nodes, [_v("x", [2, 6, d]), _v("mask", [2, 6], I64)], [_v("y", [2, 6, d])],
                   inits)
    loaded, program = _compile(proto, tmp_path)
    x = torch.randn(2, 6, d)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    (got,) = run_reference(program, [x, mask])
    (ort,) = loaded.model(x, mask)
    torch.testing.assert_close(got, ort, rtol=1e-4, atol=1e-4)
    assert "AttentionOp" in [type(o).__name__ for o in program.ops]


def test_masked_fill_with_an_ordinary_number_keeps_the_values(tmp_path):
    nodes = [helper.make_node("Cast", ["m"], ["c"], to=B),
             helper.make_node("Where", ["c", "x", "half"], ["a"]),
             helper.make_node("Where", ["c", "half", "x"], ["b"]),
             helper.make_node("Sub", ["a", "b"], ["y"])]
    proto = _model(nodes, [_v("x", [3, 5]), _v("m", [3, 5], I64)], [_v("y", [3, 5])],
                   [_scalar("half", 0.5)])
    loaded, program = _compile(proto, tmp_path)
    x, m = torch.randn(3, 5), torch.randint(0, 2, (3, 5))
    (got,) = run_reference(program, [x, m])
    torch.testing.assert_close(got, torch.where(m.bool(), x - 0.5, 0.5 - x))


def test_dynamic_masked_fill_by_a_sliced_causal_buffer_is_the_causal_flag(tmp_path):
    """GPT-2's older form, w.masked_fill(~bias[:, :, :S, :S], -inf), exported with dynamic
    dims: the buffer slice is computed from the dims (stored at the maxima), the fill a
    mask made from that constant, classified causal at several sizes: no mask operand."""
    from onnx_models import GPT
    from test_onnx import _against_torch, _export

    torch.manual_seed(0)
    g = GPT(fill=True).eval()
    ids = torch.randint(0, 100, (2, 16))
    spec = _export(g, (ids,), tmp_path / "g.onnx", ["input_ids"],
                   {"input_ids": {0: "batch", 1: "sequence"}})
    program = _against_torch(spec, g, ["batch=1..4", "sequence=1..64"],
                             [(1, 1), (3, 37), (4, 64)])
    attention = [o for o in program.ops if type(o).__name__ == "AttentionOp"]
    assert len(attention) == 2 and all(o.causal and o.mask is None for o in attention)
