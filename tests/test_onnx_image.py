"""ONNX image ops beyond convolution (frontend/onnx/image.py) in models exported from torch
with the TorchScript exporter: Resize (nearest by whole and by other factors, bilinear with and
without align_corners, bicubic), Pad (constant, reflect, edge, wrap; a zero
pad folded into the convolution after it), DepthToSpace / SpaceToDepth (PixelShuffle and
PixelUnshuffle), InstanceNormalization (GroupNorm and InstanceNorm), each built through the
frontend, run with the kernel references and compared with onnxruntime and with eager torch.
The ONNX backend node tests cover every attribute (test_onnx_node_tests.py)."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import load_spec, to_graph  # noqa: E402
from aotpack.frontend.prepare import prepare  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402


class Fn(nn.Module):
    def __init__(self, fn, conv_after: bool = False, channels: int = 4):
        super().__init__()
        self.fn = fn
        self.conv = nn.Conv2d(channels, 4, 3) if conv_after else None

    def forward(self, x):
        y = self.fn(x)
        return self.conv(y) if self.conv is not None else y


CASES = {
    "nearest_x2": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (2, 4, 5, 7), "Resize"),
    "nearest_to_size": (lambda x: F.interpolate(x, size=(7, 10), mode="nearest"), (1, 4, 5, 7), "Resize"),
    "bilinear_x2": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (2, 4, 5, 7), "Resize"),
    "bilinear_down_align_corners": (lambda x: F.interpolate(
        x, size=(4, 5), mode="bilinear", align_corners=True), (1, 4, 9, 11), "Resize"),
    "bilinear_1_5": (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                     (1, 4, 6, 8), "Resize"),
    "bicubic": (lambda x: F.interpolate(x, size=(9, 6), mode="bicubic"), (1, 4, 5, 7), "Resize"),
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 3), value=0.5), (2, 4, 5, 7), "Pad"),
    "pad_reflect": (lambda x: F.pad(x, (2, 1, 3, 2), mode="reflect"), (2, 4, 5, 7), "Pad"),
    "pad_replicate": (lambda x: F.pad(x, (2, 1, 3, 2), mode="replicate"), (2, 4, 5, 7), "Pad"),
    "pad_circular": (lambda x: F.pad(x, (2, 1, 3, 2), mode="circular"), (2, 4, 5, 7), "Concat"),
    "pixel_shuffle": (nn.PixelShuffle(2), (2, 16, 3, 5), "DepthToSpace"),
    "pixel_unshuffle": (nn.PixelUnshuffle(2), (2, 4, 6, 10), "Reshape"),
    "instance_norm": (nn.InstanceNorm2d(4, affine=True), (2, 4, 5, 7), "InstanceNormalization"),
    "group_norm_1d": (nn.GroupNorm(2, 4), (2, 4, 33), "InstanceNormalization"),
}


def _export(model, x, path, opset=17):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=["y"])
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def _check(path, model, x, tol=1e-4):
    loaded = prepare(load_spec(str(path)))
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    (got,) = run_reference(program, [fresh])
    (ort,) = loaded.model(fresh)
    with torch.no_grad():
        want = model(fresh)
    for ref in (ort, want):
        err = float((got.double() - ref.double()).norm() / ref.double().norm())
        assert err < tol, err
    return program


@pytest.mark.parametrize("name", list(CASES))
def test_image_op_matches_onnxruntime_and_torch(tmp_path, name):
    torch.manual_seed(0)
    fn, shape, op = CASES[name]
    model = Fn(fn, channels=shape[1]).eval()
    if isinstance(fn, nn.Module):
        model.fn = fn.eval()
        for p in fn.parameters():
            torch.nn.init.normal_(p, 1.0, 0.3)
    x = torch.randn(shape)
    assert op in _export(model, x, tmp_path / "m.onnx")  # (circular pads: slices + concat)
    _check(tmp_path / "m.onnx", model, x)


def test_zero_pad_before_a_convolution_joins_its_padding(tmp_path):
    torch.manual_seed(0)
    model = Fn(lambda x: F.pad(x, (1, 2, 2, 1)), conv_after=True).eval()
    x = torch.randn(2, 4, 8, 9)
    assert "Pad" in _export(model, x, tmp_path / "m.onnx")
    program = _check(tmp_path / "m.onnx", model, x)
    assert [type(op).__name__ for op in program.ops] == ["ConvOp"]


def test_nearest_by_a_whole_factor_over_a_dynamic_image(tmp_path):
    """A dynamic side resized by a whole factor: a broadcast copy, any size."""
    model = Fn(lambda x: F.interpolate(x, scale_factor=2, mode="nearest")).eval()
    x = torch.randn(1, 4, 6, 6)
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {2: "H", 3: "W"}})
    loaded = prepare(load_spec(str(path)), dynamic=("H=2..32", "W=2..32"))
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    for h, w in ((5, 7), (32, 3)):
        fresh = torch.randn(1, 4, h, w)
        (got,) = run_reference(program, [fresh])
        assert torch.equal(got, model(fresh))


def test_a_model_stored_in_bf16_builds_and_verifies(tmp_path, monkeypatch):
    """An export of a bf16 model (bf16 weights, inputs and Convs): onnxruntime's CPU provider
    refuses bf16 Convs, so verify's eager run is the model as float32 (float32_copy) and the
    bf16 bundle is checked against it (it was a traceback)."""
    import aotpack
    from aotpack.frontend.onnx.model import float32_copy
    from aotpack.verify import verify

    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2),
                          nn.Conv2d(8, 4, 3)).eval().to(torch.bfloat16)
    x = torch.randn(2, 4, 6, 7).to(torch.bfloat16)
    path = tmp_path / "bf16.onnx"
    _export(model, x, path)
    proto = onnx.load(str(path))
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert all(v.type.tensor_type.elem_type != onnx.TensorProto.BFLOAT16
               for v in float32_copy(proto).graph.input)
    result = aotpack.build(str(path), tmp_path / "out")
    report = verify(result.bundle, str(path), reference="cpu")
    assert report.passed, report.outputs


class UpToSkip(nn.Module):
    """An FPN/U-Net step: the coarse map resized to its skip connection's size (Resize with
    `sizes` from Shape). Over two independent dynamic images no whole factor relates the
    sizes: refused, saying so (it was "sizes computed at run time")."""

    def forward(self, coarse, skip):
        return skip + F.interpolate(coarse, size=skip.shape[-2:], mode="nearest")


def test_resize_to_a_dynamic_skip_size(tmp_path):
    model = UpToSkip().eval()
    coarse, skip = torch.randn(1, 4, 5, 6), torch.randn(1, 4, 10, 12)
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (coarse, skip), str(path), dynamo=False, opset_version=17,
                          input_names=["coarse", "skip"], output_names=["y"],
                          dynamic_axes={"coarse": {2: "H", 3: "W"},
                                        "skip": {2: "H2", 3: "W2"}})
    assert "Resize" in {n.op_type for n in onnx.load(str(path)).graph.node}
    loaded = prepare(load_spec(str(path)), dynamic=("H=2..32", "W=2..32", "H2=4..64",
                                                    "W2=4..64"))
    with pytest.raises(Exception, match="resizing the dynamic size H to H2 .whole factors"):
        compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
