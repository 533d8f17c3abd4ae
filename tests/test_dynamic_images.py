"""Dynamic image sizes in conv nets: a side given as a torch.export derived Dim (16*h, the way
torch asks for a U-Net that halves and doubles its sides) binds h at run time, and
upsampling (nearest, bilinear, ConvTranspose) by whole factors follows the dims. Each program
runs with the kernel references on the CPU at sizes across the ranges and is compared with
eager; the sizes the bundle cannot take are refused with the form they must have."""
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aotpack.program import ShapeError
from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.ir.sym import bounds, symbol
from aotpack.passes import compile_graph
from program_checks import rel_err

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import conv_nets  # noqa: E402


def _matches(model, program, shapes, tol=1e-5):
    for shape in shapes:
        x = torch.randn(shape)
        (got,) = run_reference(program, [x])
        with torch.no_grad():
            want = model(x)
        assert got.shape == want.shape and rel_err(got, want) < tol, shape


def test_unet_takes_every_side_that_is_a_multiple_of_16():
    model, inputs, dims = conv_nets.make_unet_dynamic(max_batch=4, max_side=128)
    program = compile_graph(to_graph(model, inputs, dims))
    assert [(s.name, s.lo, s.hi) for s in program.symbols] == [("B", 1, 4), ("h", 2, 8),
                                                                ("w", 2, 8)]
    assert program.bind([(3, 3, 48, 128)]) == {"B": 3, "h": 3, "w": 8}
    _matches(model, program, [(1, 3, 32, 32), (3, 3, 48, 112), (4, 3, 128, 64)])
    for bad, why in [((1, 3, 40, 32), "is 40, which is not 16*h for a whole h in 2..8 "
                                      "(the sizes 32, 48, ... 128)"),
                     ((1, 3, 32, 144), "is 144, which is not 16*w"),
                     ((1, 3, 16, 32), "is 16, which is not 16*h")]:
        with pytest.raises(ShapeError) as e:
            program.bind([bad])
        assert why in str(e.value), str(e.value)


class _Upsample(torch.nn.Module):
    def __init__(self, factor, mode):
        super().__init__()
        self.factor, self.mode = factor, mode

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.factor, mode=self.mode) + 1.0


@pytest.mark.parametrize("factor", [2, 3])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsampling_by_a_whole_factor_at_any_size(factor, mode):
    """Sides from 1 row (both of bilinear's border clamps at once) to 20."""
    model = _Upsample(factor, mode)
    dims = ({0: torch.export.Dim("B", min=1, max=3), 2: torch.export.Dim("H", min=1, max=20),
             3: torch.export.Dim("W", min=2, max=20)},)
    program = compile_graph(to_graph(model, (torch.randn(2, 4, 7, 9),), dims))
    _matches(model, program, [(1, 4, 1, 2), (3, 4, 5, 20), (2, 4, 20, 3)], tol=1e-6)


def test_bilinear_with_align_corners_at_dynamic_sizes_is_refused_by_name():
    class Corners(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)

    dims = ({2: torch.export.Dim("H", min=2, max=20)},)
    from aotpack.errors import UserError

    with pytest.raises(UserError, match="align_corners=False"):
        to_graph(Corners(), (torch.randn(1, 2, 8, 8),), dims)


def test_bounds_see_a_shared_factor():
    """W - 1 - H*W = W*(1 - H) - 1 < 0 for H >= 1: a slice's read check must decide it."""
    H, W = symbol("H", 1, 20), symbol("W", 2, 20)
    assert bounds(W - 1 - H * W) == (-381, -1)
    assert bounds(H * W + W) == (4, 420)


class _CeilPools(torch.nn.Module):
    """SqueezeNet's and GoogLeNet's shape: ceil-mode pools (3x3, stride 2, padded or not)
    between convs."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)
        self.pool1 = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
        self.pool2 = torch.nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)
        self.pool3 = torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True)

    def forward(self, x):
        return self.pool3(self.pool2(self.pool1(torch.relu(self.conv(x)))))


def test_ceil_mode_pools_at_every_size_of_a_dynamic_side():
    """The pools' output sides are expressions of the input's (ceil of the windows, less the
    one that would start in the right padding: torch's rule), checked against eager at every
    side of the range. (torch.export takes such a net's sides as multiples of 2 only.)"""
    model = _CeilPools().eval()
    h, w = torch.export.Dim("h", min=8, max=20), torch.export.Dim("w", min=8, max=20)
    program = compile_graph(to_graph(model, [torch.randn(1, 3, 24, 24)],
                                     ({2: 2 * h, 3: 2 * w},)))
    assert {s.name for s in program.symbols} == {"h", "w"}
    _matches(model, program, [(1, 3, 2 * s, 2 * (28 - s)) for s in range(8, 21)])


def test_ceil_mode_pool_size_follows_torch_for_every_window():
    """pool_out_size over a symbol, substituted, against torch's output size for every kernel,
    stride and padding up to 5x5, stride 4: including the windows whose last one would start in
    the right padding at some sizes only (kernel - padding < stride), which torch drops."""
    from aotpack.ir.infer import pool_out_size
    from aotpack.ir.sym import subs

    for k in range(1, 6):
        for s in range(1, 5):
            for p in range(k // 2 + 1):
                side = symbol("H", max(1, k - 2 * p), 64)
                out = pool_out_size(side, p, k, s, ceil_mode=True)
                for h in range(max(1, k - 2 * p), 40):
                    want = F.max_pool2d(torch.zeros(1, 1, h, 1), (k, 1), (s, 1), (p, 0),
                                        ceil_mode=True).shape[2]
                    assert subs(out, {"H": h}) == want, (k, s, p, h)


def test_ceil_mode_pool_kernels_at_dynamic_sides():
    """The pool and conv kernels compiled for the symbolic sides, run under Triton's
    interpreter at sides other than the example's, match their references."""
    from test_dynamic import _run_cases, _symbolic_cases

    model = _CeilPools().eval()
    h, w = torch.export.Dim("h", min=8, max=20), torch.export.Dim("w", min=8, max=20)
    program = compile_graph(to_graph(model, [torch.randn(1, 3, 24, 24)],
                                     ({2: 2 * h, 3: 2 * w},)))
    checked = 0
    for concrete, env, want, point in _run_cases(_symbolic_cases(
            program, [{"h": 8, "w": 13}, {"h": 17, "w": 9}])):
        out = concrete.out
        got = torch.as_strided(env[out.storage], out.shape, out.strides, out.offset)
        ref = torch.as_strided(want[out.storage], out.shape, out.strides, out.offset)
        assert not got.float().isnan().any() and rel_err(got, ref) < 1e-4, \
            (type(concrete).__name__, point)
        checked += type(concrete).__name__ == "PoolOp"
    assert checked == 6  # three pools at two points
