"""Edges of dynamic shapes that a review found wrong (each test fails on the code before its
fix): a kernel's index width follows its sizes' ranges, tables computed from the dims are
compared bit for bit, a complete CuTeDSL config is not decided again on a symbolic M, split-K
scratch is sized for its bucket, --dynamic ties dims of other inputs only, a bucket's
representative lies inside the bucket, the build-host check visits every bucket, and strided
convs in a row take dynamic image sizes (a floor of a floor is torch's single floor)."""
import sys
from pathlib import Path

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.frontend import to_graph
from aotpack.ir.sym import Sym, subs, symbol
from aotpack.ir.sym_ranges import point_near, restrict
from aotpack.kernels.spec import PointwiseOp, PwConst, PwExpr, PwInput, ScratchSlot, TensorArg
from aotpack.passes import compile_graph
from aotpack.executor import run_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import mlp  # noqa: E402

B, S = symbol("B", 1, 64), symbol("S", 1, 8192)


def test_pointwise_kernels_of_different_reach_are_different_kernels():
    """x*2 over [B, 4096] stays inside i32 offsets; over [B*S, 4096] it does not: same code
    template, but the second needs 64-bit offsets, so they must not share one kernel."""
    from aotpack.kernels.triton import pointwise

    def op(rows):
        x = TensorArg("x", DType.BF16, (rows, 4096), (4096, 1), 0)
        return PointwiseOp((x,), PwExpr("mul", (PwInput(0), PwConst(2.0))),
                           TensorArg("o", DType.BF16, (rows, 4096), (4096, 1), 0))

    assert pointwise.kernel_name(op(B)) != pointwise.kernel_name(op(B * S))


def test_tables_from_the_dims_are_compared_exactly():
    """(x + pos) - 1e5 with pos = arange(S) + 1e5: the rows differ by less than a relative
    1e-3, and a tolerant comparison took them for constant along S (all zeros out)."""
    class Offset(torch.nn.Module):
        def forward(self, x):
            pos = torch.arange(x.shape[1], dtype=torch.float32) + 1e5
            return (x + pos) - 1e5

    dims = ({1: torch.export.Dim("S", min=1, max=32)},)
    program = compile_graph(to_graph(Offset(), (torch.zeros(2, 8),), dims))
    for s in (5, 32):
        (got,) = run_reference(program, [torch.zeros(2, s)])
        assert torch.equal(got[0], torch.arange(s, dtype=torch.float32))


def test_cutedsl_config_for_a_symbolic_m_is_not_decided_again():
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        pytest.skip("nvidia-cutlass-dsl not installed")
    from aotpack.kernels.gemm_template import cutedsl
    from aotpack.kernels.spec import GemmOp, contiguous

    cute = cutedsl()
    m = B * S
    op = GemmOp(contiguous("a", DType.BF16, (m, 256)), contiguous("b", DType.BF16, (512, 256)),
                contiguous("o", DType.BF16, (m, 512)))
    cfg = cute.default_config(op, tile_m=64, tile_n=128)
    assert (cfg.tile_m, cfg.tile_n) == (64, 128)


def test_split_k_scratch_is_sized_for_its_bucket():
    """Compiled with the bucket's narrowed dims (B, S <= 64 for B*S <= 64), the request is
    bounded by the bucket's condition on the program's dims: 64 rows, not 64 * 64."""
    from aotpack.passes.plan_memory import _scratch_bytes

    syms = [Sym("B", 1, 64), Sym("S", 1, 4096)]
    full = {s.name: subs(symbol(s.name, s.lo, s.hi), {}) for s in syms}
    narrowed = restrict(syms, full["B"] * full["S"], 1, 64)
    nbytes = subs(4 * 4 * 4096 * full["B"] * full["S"], narrowed)  # 4 splits x 4096 cols x f32
    got = _scratch_bytes(ScratchSlot(nbytes), ((full["B"] * full["S"], 1, 64),), full)
    assert got == 4 * 4 * 4096 * 64


def test_dynamic_options_tie_dims_of_other_inputs_only():
    from aotpack.frontend.dynamic import _linked

    x, mask = torch.zeros(8, 8, 64), torch.zeros(8, 8)
    linked = _linked({(0, 0): "B"}, (x, mask))
    assert (0, 1) not in linked  # x's own seq dim (also 8) stays static
    assert linked[(1, 0)] == "B" and linked[(1, 1)] == "B"  # the mask's dims of that size


def test_representative_points_lie_inside_their_bucket():
    s = Sym("S", 1, 4096)
    syms = [Sym("B", 1, 64), s]
    point = point_near(symbol("B", 1, 64) * symbol("S", 1, 4096), 6000, syms, {}, 4097)
    assert 4097 <= point["B"] * point["S"] <= 6000


def test_the_build_host_check_visits_every_bucket(tmp_path, monkeypatch):
    """Besides every dim at its min and max, each `when` range is checked at both ends."""
    from aotpack.builder import build
    from aotpack.bundle import read_bundle
    from aotpack.bundle.manifest import _check_points, parse_symbols

    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))
    spec = tmp_path / "small.py"
    spec.write_text(f"import sys\nsys.path.insert(0, {str(Path(mlp.__file__).parent)!r})\n"
                    "import mlp\n\ndef make():\n    return mlp.make(d=64, f=256, batch=2, seq=8)\n")
    r = build(f"{spec}:make", tmp_path / "o", progress=False, command_line="t",
              dynamic=["x.0=B:1..16", "x.1=S:1..256"])
    m = read_bundle(r.bundle).manifest
    ranges = {(c["min"], c["max"]) for st in m["steps"] for c in st.get("when") or []}
    labels = [label for label, _ in _check_points(m, parse_symbols(m))]
    assert len(ranges) >= 3 and len(labels) >= 2 + len(ranges)
    for lo, hi in ranges:
        assert any(f"bucket {lo}..{hi}" in label for label in labels)


class _TwoStridedConvs(torch.nn.Module):
    """Two stride-2 convs: the second's output size is a floor of a floor of H."""
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).mean(dim=(2, 3))


def _two_convs_dims():
    return ({0: torch.export.Dim("B", min=1, max=4), 2: torch.export.Dim("H", min=16, max=64),
             3: torch.export.Dim("W", min=16, max=64)},)


def test_strided_convs_in_a_row_take_dynamic_image_sizes():
    torch.manual_seed(0)
    model = _TwoStridedConvs().eval()
    program = compile_graph(to_graph(model, (torch.randn(2, 3, 32, 32),), _two_convs_dims()))
    assert program.dynamic
    for shape in [(1, 3, 16, 16), (3, 3, 33, 47), (4, 3, 64, 17)]:
        x = torch.randn(shape)
        (got,) = run_reference(program, [x])
        with torch.no_grad():
            assert torch.allclose(got, model(x), atol=1e-4, rtol=1e-4), shape


def test_a_size_aotpack_cannot_prove_equal_is_named_as_its_own_limit(monkeypatch):
    """Without the nested-floor rewrite the two forms of the second conv's size differ: the
    refusal must say it is a size aotpack cannot prove equal, not an unsupported op."""
    from aotpack.errors import UserError
    from aotpack.ir import sym

    monkeypatch.setattr(sym, "_nested_floor", lambda a: None)
    with pytest.raises(UserError) as e:
        to_graph(_TwoStridedConvs().eval(), (torch.randn(2, 3, 32, 32),), _two_convs_dims())
    text = str(e.value)
    assert "cannot prove the two equal" in text and "not supported" not in text, text


def test_build_prints_run_options_at_both_ends_of_the_dims():
    """`aotpack build` of a bundle with dynamic dims prints how to run its smallest and largest
    shapes with aotpack-run (derived dims evaluated, every input named)."""
    from aotpack.verify_shapes import run_shape_options

    m = {"inputs": [{"name": "x", "dtype": "bf16", "shape": ["B", 3, "2*_H", "2*_H"]},
                    {"name": "mask", "dtype": "i64", "shape": ["B", 7]}],
         "symbols": [{"name": "B", "min": 1, "max": 8, "example": 2},
                     {"name": "_H", "min": 32, "max": 64, "example": 40}]}
    assert run_shape_options(m) == ["--shape x=1x3x64x64,mask=1x7",
                                    "--shape x=8x3x128x128,mask=8x7"]
    assert run_shape_options({"inputs": m["inputs"][1:2], "symbols": []}) == []
