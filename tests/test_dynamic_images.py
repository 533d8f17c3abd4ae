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
