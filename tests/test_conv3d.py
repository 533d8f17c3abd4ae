"""3-D convolutions (frontend/aten_conv3d.py): video and volumetric nets' Conv3d as 2-D
convolutions over frames, one per temporal tap, summed. Geometries (temporal padding, stride,
dilation, groups, (2+1)-D factorizations, VideoMAE's tubelet embedding) match eager on the CPU
reference; their conv kernels run in Triton's interpreter; the batch may vary, the time dim
may not (refused by name)."""
import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import to_graph
from aotpack.kernels.spec import ConvOp
from aotpack.passes import compile_graph
from conv_checks import check_kernels_interpreted
from program_checks import check_matches_eager, rel_err

GEOMETRIES = {
    "3x3x3_same": (dict(in_channels=3, out_channels=8, kernel_size=3, padding=1), (2, 3, 5, 8, 8)),
    "temporal_3x1x1": (dict(in_channels=3, out_channels=8, kernel_size=(3, 1, 1),
                            padding=(1, 0, 0)), (2, 3, 6, 8, 8)),
    "spatial_1x3x3_s2": (dict(in_channels=3, out_channels=8, kernel_size=(1, 3, 3),
                              stride=(1, 2, 2), padding=(0, 1, 1)), (2, 3, 4, 8, 8)),
    "tubelet_2x4x4": (dict(in_channels=3, out_channels=16, kernel_size=(2, 4, 4),
                           stride=(2, 4, 4)), (2, 3, 8, 16, 16)),
    "depthwise_dilated": (dict(in_channels=4, out_channels=4, kernel_size=3, padding=2,
                               dilation=2, groups=4), (1, 4, 7, 9, 9)),
    "strided_no_bias": (dict(in_channels=3, out_channels=8, kernel_size=3, stride=2, padding=1,
                             bias=False), (2, 3, 9, 10, 10)),
}


class _Conv3dRelu(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.conv = torch.nn.Conv3d(**kw)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_conv3d_geometries_match_eager(name):
    kw, shape = GEOMETRIES[name]
    torch.manual_seed(0)
    program = check_matches_eager(_Conv3dRelu(**kw).eval(), [torch.randn(shape)], 1e-5)
    taps = kw["kernel_size"] if isinstance(kw["kernel_size"], int) else kw["kernel_size"][0]
    assert [type(op).__name__ for op in program.ops].count("ConvOp") == taps


def test_conv3d_kernels_run_in_the_interpreter():
    kw, shape = GEOMETRIES["3x3x3_same"]
    torch.manual_seed(0)
    model = _Conv3dRelu(**kw).eval().to(torch.bfloat16)
    x = torch.randn(shape).to(torch.bfloat16)
    program = compile_graph(to_graph(model, (x,)))
    assert check_kernels_interpreted(program, [x], kinds=(ConvOp,)) == 3


def test_conv3d_with_a_dynamic_batch_and_a_refused_dynamic_time():
    from aotpack.errors import UserError

    kw, shape = GEOMETRIES["temporal_3x1x1"]
    torch.manual_seed(0)
    model = _Conv3dRelu(**kw).eval()
    dims = ({0: torch.export.Dim("B", min=1, max=8)},)
    program = compile_graph(to_graph(model, (torch.randn(shape),), dims))
    x = torch.randn(5, *shape[1:])
    (got,) = run_reference(program, [x])
    with torch.no_grad():
        assert rel_err(got, model(x)) < 1e-5
    dims = ({2: torch.export.Dim("T", min=2, max=16)},)
    with pytest.raises(UserError, match="dynamic time dim"):
        to_graph(model, (torch.randn(shape),), dims)


POOLS = {
    "max_1x3x3_s2_stem": torch.nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)),
    "max_3_s2_p1": torch.nn.MaxPool3d(3, 2, 1),
    "max_2": torch.nn.MaxPool3d(2),
    "max_ceil_past_the_end": torch.nn.MaxPool3d(3, 2, 0, ceil_mode=True),
    "max_ceil_padded": torch.nn.MaxPool3d((3, 2, 2), (2, 2, 2), (1, 0, 0), ceil_mode=True),
    "avg_2": torch.nn.AvgPool3d(2),
    "avg_3_s2_p1": torch.nn.AvgPool3d(3, 2, 1),
    "avg_spatial_pad_excluded": torch.nn.AvgPool3d((1, 3, 3), 1, (0, 1, 1),
                                                   count_include_pad=False),
    "adaptive_global": torch.nn.AdaptiveAvgPool3d(1),
}


class _ConvPool(torch.nn.Module):
    """A conv first (so the pool's input is a computed tensor, some of it negative)."""

    def __init__(self, pool):
        super().__init__()
        self.conv, self.pool = torch.nn.Conv3d(3, 8, 3, padding=1), pool

    def forward(self, x):
        return self.pool(self.conv(x))


@pytest.mark.parametrize("name", list(POOLS))
def test_pool3d_geometries_match_eager(name):
    """3-D max / average pooling (I3D, S3D, video ResNets) as 2-D pools of each temporal tap's
    frames, combined by max or mean; time 6 so ceil_mode adds a window past the end."""
    torch.manual_seed(0)
    check_matches_eager(_ConvPool(POOLS[name]).eval(), [torch.randn(2, 3, 6, 9, 9)], 1e-5)


def test_pool3d_in_bf16_averages_the_taps_in_f32():
    """bf16 frames: the temporal taps' averages summed in f32 and rounded once (as torch's
    f32 accumulation), not rounded after every add."""
    from aotpack.ir.ops import Op

    torch.manual_seed(0)
    model = _ConvPool(torch.nn.AvgPool3d(3, 1, 1)).eval().to(torch.bfloat16)
    x = torch.randn(2, 3, 6, 9, 9).to(torch.bfloat16)
    graph = to_graph(model, [x])
    # the pool's two adds (3 taps) in f32 (the conv before it sums its own taps in bf16)
    assert sum(n.op == Op.ADD and n.output.dtype.nbytes == 4 for n in graph.nodes) == 2
    got = run_reference(compile_graph(graph), [x])[0]  # eager has no bf16 avg_pool3d on CPU
    with torch.no_grad():
        want = model.float()(x.float())
    assert rel_err(got.float(), want) < 1e-2


@pytest.mark.parametrize("pool,why", [
    (torch.nn.AvgPool3d(3, 2, 0, ceil_mode=True), "ceil_mode whose last window"),
    (torch.nn.AvgPool3d(3, 1, 1, count_include_pad=False), "count_include_pad=False"),
    (torch.nn.MaxPool3d(3, 1, 1, dilation=2), "dilation"),
])
def test_pool3d_forms_torch_averages_otherwise_are_refused(pool, why):
    from aotpack.frontend import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match=why):
        compile_graph(to_graph(_ConvPool(pool).eval(), [torch.randn(1, 3, 6, 8, 8)]))
