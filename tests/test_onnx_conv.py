"""ONNX convolutional networks: Conv (strides, asymmetric pads, auto_pad, dilations, groups,
depthwise; 1-D and 2-D), ConvTranspose, BatchNormalization folded into the conv, MaxPool /
AveragePool (asymmetric pads, ceil_mode, count_include_pad), global pooling, Flatten, Clip (ReLU6),
HardSigmoid / HardSwish: hand-made graphs against onnxruntime, and ResNet-18 / MobileNetV2
shapes exported with torch.onnx.export against onnxruntime and the PyTorch build's kernels."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from test_onnx import _check, _compile, _model, _v  # noqa: E402

from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import UnsupportedOpError, load_spec, to_graph  # noqa: E402
from aotpack.ir.ops import Op  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402


def _net(nodes, inputs, inits=(), rank=None):
    """A model whose output `y` has unknown dims (of the input's rank unless given)."""
    rank = rank or len(inputs[0].type.tensor_type.shape.dim)
    return _model(nodes, inputs, [_v("y", [None] * rank)], inits)


def _kinds(program) -> list[str]:
    return [type(op).__name__ for op in program.ops]


def _conv_model(x_shape, w_shape, bias=True, **attrs):
    rng = np.random.RandomState(0)
    w = rng.randn(*w_shape).astype(np.float32)
    inits = [("w", w)] + ([("b", rng.randn(w_shape[0]).astype(np.float32))] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
    return _net([node], [_v("x", list(x_shape))], inits)


CONVS = {
    "stride2_asymmetric_pads": ((2, 4, 9, 10), (6, 4, 3, 3),
                                dict(strides=[2, 2], pads=[1, 0, 2, 1])),
    "dilated": ((1, 3, 12, 11), (5, 3, 3, 2), dict(dilations=[2, 3], pads=[2, 1, 2, 1])),
    "same_upper_even_kernel": ((2, 4, 9, 9), (4, 4, 4, 4), dict(auto_pad="SAME_UPPER",
                                                                 strides=[2, 2])),
    "same_lower": ((2, 4, 8, 7), (4, 4, 4, 3), dict(auto_pad="SAME_LOWER")),
    "valid_strided": ((2, 4, 9, 9), (8, 4, 3, 3), dict(auto_pad="VALID", strides=[2, 1])),
    "grouped": ((2, 8, 7, 7), (6, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "depthwise": ((2, 8, 9, 9), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1],
                                                  strides=[2, 2])),
    "depthwise_multiplier": ((1, 4, 6, 6), (8, 1, 3, 3), dict(group=4, pads=[0, 1, 2, 1])),
    "pointwise": ((2, 16, 5, 5), (24, 16, 1, 1), {}),
    "1d_strided_asymmetric": ((2, 6, 20), (8, 3, 5), dict(group=2, strides=[2], pads=[1, 3],
                                                          dilations=[2])),
    "1d_same_upper": ((2, 4, 15), (4, 4, 4), dict(auto_pad="SAME_UPPER", strides=[2])),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_conv_geometry_matches_onnxruntime(tmp_path, name):
    x_shape, w_shape, attrs = CONVS[name]
    program = _check(_conv_model(x_shape, w_shape, bias=name != "pointwise", **attrs),
                     tmp_path, tol=1e-5)
    assert "ConvOp" in _kinds(program)


def _conv_transpose_model(x_shape, w_shape, **attrs):
    rng = np.random.RandomState(0)
    oc = w_shape[1] * attrs.get("group", 1)
    inits = [("w", rng.randn(*w_shape).astype(np.float32)),
             ("b", rng.randn(oc).astype(np.float32))]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    return _net([node], [_v("x", list(x_shape))], inits)


CONV_TRANSPOSES = {  # (onnx's backend node tests cover the plain forms)
    "asymmetric_pads": ((2, 4, 5, 6), (4, 6, 4, 3), dict(strides=[2, 3], pads=[0, 1, 2, 0])),
    "output_shape": ((1, 4, 3, 3), (4, 2, 3, 3), dict(strides=[3, 2], output_shape=[8, 6])),
    "same_upper": ((1, 4, 3, 4), (4, 2, 4, 5), dict(strides=[3, 2], auto_pad="SAME_UPPER")),
    "same_lower_grouped": ((2, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], group=2,
                                                            auto_pad="SAME_LOWER")),
    "dilated_output_padding": ((2, 4, 5, 6), (4, 3, 3, 2), dict(
        strides=[2, 2], dilations=[2, 3], output_padding=[1, 0], pads=[1, 1, 1, 1])),
    "1d_hifigan": ((2, 8, 7), (8, 4, 16), dict(strides=[8], pads=[4, 4])),
}


@pytest.mark.parametrize("name", list(CONV_TRANSPOSES))
def test_conv_transpose_matches_onnxruntime(tmp_path, name):
    """ConvTranspose: frontend/aten_conv_transpose.py's phase convolution, with ONNX's
    asymmetric pads and the pads output_shape / auto_pad imply (an output_shape past the full
    output, which onnxruntime refuses: onnx's node test test_convtranspose_output_shape)."""
    x_shape, w_shape, attrs = CONV_TRANSPOSES[name]
    program = _check(_conv_transpose_model(x_shape, w_shape, **attrs), tmp_path, tol=1e-5)
    assert _kinds(program).count("ConvOp") == 1


def test_conv_dynamic_batch(tmp_path):
    proto = _conv_model((2, 4, 9, 10), (6, 4, 3, 3), strides=[2, 2], pads=[1, 0, 2, 1])
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    _check(proto, tmp_path, dynamic=("N=1..8",), shapes=[[(1, 4, 9, 10)], [(7, 4, 9, 10)]])


def _bn_inits(c, rng, prefix):
    return [(f"{prefix}_s", rng.rand(c).astype(np.float32) + 0.5),
            (f"{prefix}_b", rng.randn(c).astype(np.float32)),
            (f"{prefix}_m", rng.randn(c).astype(np.float32)),
            (f"{prefix}_v", rng.rand(c).astype(np.float32) + 0.5)]


def test_conv_batchnorm_pool_flatten_gemm(tmp_path):
    """A ResNet stem and head written by hand: BN is folded (no separate multiply kernel)."""
    rng = np.random.RandomState(1)
    inits = [("w", rng.randn(8, 3, 3, 3).astype(np.float32)),
             ("fc_w", rng.randn(10, 8).astype(np.float32)),
             ("fc_b", rng.randn(10).astype(np.float32))] + _bn_inits(8, rng, "bn")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"],
                              ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1)]
    proto = _net(nodes, [_v("x", [2, 3, 16, 16])], inits, rank=2)
    program = _check(proto, tmp_path)
    assert _kinds(program).count("ConvOp") == 2  # the f32 Gemm too: a 1x1 conv on tf32
    assert _kinds(program).count("PoolOp") == 2
    # one pointwise kernel, first: the image folded 2x2 for the stride-2 stem (aten_conv_stem);
    # no batch-norm multiply
    assert [k for k in _kinds(program) if "Pointwise" in k] == ["PointwiseOp"]
    assert _kinds(program)[0] == "PointwiseOp", _kinds(program)


def test_batchnorm_alone_on_a_flat_input(tmp_path):
    rng = np.random.RandomState(2)
    node = helper.make_node("BatchNormalization", ["x", "bn_s", "bn_b", "bn_m", "bn_v"], ["y"])
    _check(_net([node], [_v("x", [3, 6])], _bn_inits(6, rng, "bn")),
           tmp_path)


POOLS = {
    "max_asymmetric_pads": ("MaxPool", (2, 3, 9, 8), dict(kernel_shape=[3, 3],
                                                          strides=[2, 2], pads=[0, 1, 2, 1])),
    "max_same_upper": ("MaxPool", (1, 2, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2],
                                                     auto_pad="SAME_UPPER")),
    "max_ceil": ("MaxPool", (1, 2, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                 ceil_mode=1)),
    "avg_pads_exclude": ("AveragePool", (2, 3, 7, 7), dict(kernel_shape=[3, 3],
                                                           pads=[1, 1, 1, 1])),
    "avg_pads_include": ("AveragePool", (2, 3, 7, 7), dict(kernel_shape=[3, 3],
                                                           pads=[1, 1, 1, 1],
                                                           count_include_pad=1)),
    "avg_ceil_include": ("AveragePool", (1, 2, 10, 9), dict(kernel_shape=[3, 3],
                                                            strides=[2, 2], pads=[1, 1, 1, 1],
                                                            ceil_mode=1, count_include_pad=1)),
    "avg_asymmetric_include": ("AveragePool", (2, 3, 9, 8),
                               dict(kernel_shape=[3, 2], strides=[2, 2], pads=[0, 1, 2, 1],
                                    count_include_pad=1)),
    "avg_same_lower_ceil": ("AveragePool", (1, 2, 9, 9), dict(kernel_shape=[4, 4],
                                                              strides=[2, 2], ceil_mode=1,
                                                              auto_pad="SAME_LOWER")),
    "avg_1d": ("AveragePool", (2, 4, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 0])),
    "max_1d": ("MaxPool", (2, 4, 11), dict(kernel_shape=[2], strides=[2])),
    "global_max_1d": ("GlobalMaxPool", (2, 4, 11), {}),
    "global_avg": ("GlobalAveragePool", (2, 4, 5, 6), {}),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling_matches_onnxruntime(tmp_path, name):
    op, shape, attrs = POOLS[name]
    proto = _net([helper.make_node(op, ["x"], ["y"], **attrs)], [_v("x", list(shape))])
    program = _check(proto, tmp_path)
    assert "PoolOp" in _kinds(program)


def test_global_pooling_over_a_dynamic_image(tmp_path):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["a"]),
             helper.make_node("GlobalMaxPool", ["x"], ["m"]),
             helper.make_node("Add", ["a", "m"], ["y"])]
    proto = _net(nodes, [_v("x", [2, 4, "H", "W"])])
    _check(proto, tmp_path, dynamic=("H=2..16", "W=2..16"), shapes=[[(2, 4, 3, 13)]])


def _activation(tmp_path, nodes, inits=()):
    proto = _net(nodes, [_v("x", [2, 3, 4, 5])], inits)
    program = _check(proto, tmp_path)
    loaded, _ = _compile(proto, tmp_path)
    graph = to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    return program, [n.op for n in graph.nodes]


def test_clip_relu6_and_other_bounds(tmp_path):
    six = [("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32)),
           ("lo2", np.array(-0.5, np.float32))]
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["a"]),
             helper.make_node("Clip", ["x", "lo2"], ["b"]),
             helper.make_node("Clip", ["x", "", "hi"], ["c"]),
             helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    _, ops = _activation(tmp_path, nodes, six)
    assert Op.RELU6 in ops and Op.MAX in ops and Op.MIN in ops


def test_hard_sigmoid_and_hard_swish(tmp_path):
    nodes = [helper.make_node("HardSigmoid", ["x"], ["a"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "a"], ["s"]),  # HardSwish below opset 14
             helper.make_node("HardSwish", ["x"], ["h"]),
             helper.make_node("HardSigmoid", ["x"], ["d"]),  # ONNX's alpha 0.2
             helper.make_node("Sum", ["s", "h", "d"], ["y"])]
    _, ops = _activation(tmp_path, nodes)
    assert ops.count(Op.HARDSWISH) == 2 and Op.MIN in ops


@pytest.mark.parametrize("what, nodes, shape, inits, message", [
    ("3-D conv", [helper.make_node("Conv", ["x", "w"], ["y"])], [1, 2, 3, 4, 5],
     [("w", np.ones((2, 2, 1, 1, 1), np.float32))], "3-D"),
    ("run-time weight", [helper.make_node("Relu", ["x"], ["w"]),
                         helper.make_node("Conv", ["x", "w"], ["y"])], [2, 2, 1, 1], [],
     "weight"),
    ("3-D transposed conv", [helper.make_node("ConvTranspose", ["x", "w"], ["y"])],
     [1, 2, 3, 4, 5], [("w", np.ones((2, 2, 1, 1, 1), np.float32))], "not 3-D"),
    ("same pads past the kernel", [helper.make_node("ConvTranspose", ["x", "w"], ["y"],
                                                    strides=[3, 3], auto_pad="SAME_UPPER")],
     [1, 2, 3, 3], [("w", np.ones((2, 2, 1, 1), np.float32))], "explicit pads"),
    ("dilated pool, asymmetric pads", [helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], pads=[0, 0, 1, 1])],
     [1, 2, 6, 6], [], "dilations .* symmetric pads"),
    ("run-time clip bound", [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                             helper.make_node("Clip", ["x", "", "m"], ["y"])], [1, 2, 6, 6],
     [], "bound"),
])
def test_refusals_name_the_node(tmp_path, what, nodes, shape, inits, message):
    proto = _net(nodes, [_v("x", shape)], inits)
    with pytest.raises(UnsupportedOpError, match=message):
        _compile(proto, tmp_path)


def test_asymmetric_pool_pads_over_a_dynamic_image_are_refused(tmp_path):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 1, 1])
    proto = _net([node], [_v("x", [1, 2, "H", 8])])
    with pytest.raises(UnsupportedOpError, match="dynamic image size"):
        _compile(proto, tmp_path, dynamic=("H=4..16",))


# ----------------------------------------------------------------------------- exported nets
@pytest.mark.parametrize("fold", [True, False], ids=["bn_folded", "bn_kept"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2_block", "squeeze_excitation",
                                  "convnext_block", "audio_stem"])
def test_exported_conv_net_matches_onnxruntime_and_torch_build(tmp_path, name, fold):
    """examples/conv_nets.py exported with the TorchScript exporter, which folds eval-mode
    batch norms into the convolutions unless constant folding is off (then BatchNormalization
    nodes reach aotpack, which folds them itself): same kernels as the PyTorch build, same
    outputs as onnxruntime and as eager torch. Unfolded exports also have a dynamic batch."""
    import warnings

    import conv_nets

    model, x = conv_nets.make(name)
    path = tmp_path / f"{name}.onnx"
    dynamic = None if fold else {"x": {0: "N"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], do_constant_folding=fold,
                          dynamic_axes=dynamic)
    has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert ("BatchNormalization" in ops) == (has_bn and not fold)
    from aotpack.frontend.prepare import prepare

    loaded = prepare(load_spec(str(path)), dynamic=() if fold else ("N=1..8",))
    from_onnx = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    from_torch = compile_graph(to_graph(model, (x,)))
    assert _kinds(from_onnx) == _kinds(from_torch)
    for batch in (x.shape[0], 3):
        fresh = torch.randn((batch,) + tuple(x.shape[1:]),
                            generator=torch.Generator().manual_seed(5))
        if fold and batch != x.shape[0]:
            continue
        (got,) = run_reference(from_onnx, [fresh])
        (ort,) = loaded.model(fresh)
        with torch.no_grad():
            want = model(fresh)
        for ref in (ort, want):
            err = float((got.double() - ref.double()).norm() / ref.double().norm())
            assert err < 1e-4, err


def test_float_input_may_be_given_in_the_build_dtype(tmp_path):
    """`aotpack verify` passes a bf16-built model's float inputs back as bf16: allowed; any
    other dtype change is refused."""
    from aotpack.frontend import ModelLoadError
    from aotpack.frontend.prepare import prepare

    path = tmp_path / "m.onnx"
    onnx.save(_conv_model((2, 4, 9, 10), (6, 4, 3, 3)), str(path))
    loaded = prepare(load_spec(str(path)), dtype="bf16", inputs=("x=2x4x9x10:bf16",))
    assert loaded.inputs[0].dtype == torch.bfloat16
    with pytest.raises(ModelLoadError, match="cannot be changed"):
        prepare(load_spec(str(path)), dtype="bf16", inputs=("x=2x4x9x10:f16",))


@pytest.mark.parametrize("name", ["resnet18", "audio_stem"])
def test_exported_conv_net_with_dynamic_image_size_in_bf16(tmp_path, name):
    """Batch and image size dynamic (global pooling over a dynamic image is a mean), built
    in bf16 with the build's kernel-support check, against onnxruntime at a size unlike the
    example."""
    import warnings

    import conv_nets

    from aotpack.shared_steps import check_supported
    from aotpack.frontend.prepare import prepare

    model, x = conv_nets.make(name)
    spatial = {2: "H", 3: "W"} if x.dim() == 4 else {2: "L"}
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N", **spatial}})
    dims = ("N=1..4",) + tuple(f"{d}=8..64" for d in spatial.values())
    loaded = prepare(load_spec(str(path)), dynamic=dims, dtype="bf16")
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    check_supported(program)
    size = (3, x.shape[1]) + ((17, 26) if x.dim() == 4 else (30,))
    fresh = torch.randn(size, generator=torch.Generator().manual_seed(2)).bfloat16()
    (got,) = run_reference(program, [fresh])
    (ort,) = loaded.model(fresh)
    err = float((got.double() - ort.double()).norm() / ort.double().norm())
    assert err < 2e-2, err


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2_block"])
def test_exported_conv_net_bundle_on_the_gpu(tmp_path, name):
    """The ONNX conv net built as a bundle (bf16, dynamic batch) and run by the C runtime,
    against onnxruntime at several batches."""
    import warnings

    import aotpack
    import conv_nets
    from aotpack.frontend.prepare import prepare

    model, x = conv_nets.make(name)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}})
    result = aotpack.build(str(path), tmp_path / "out", dynamic=["N=1..8"], dtype="bf16")
    loaded = prepare(load_spec(str(path)), dynamic=["N=1..8"])
    with aotpack.load(result.out_dir) as bundle, bundle.session() as s:
        for batch in (1, 3, 8):
            fresh = torch.randn((batch,) + tuple(x.shape[1:]))
            out = s.run([fresh.bfloat16().cuda()])[0].float().cpu()
            (ref,) = loaded.model(fresh)
            err = float((out.double() - ref.double()).norm() / ref.double().norm())
            assert err < 2e-2, (batch, err)
