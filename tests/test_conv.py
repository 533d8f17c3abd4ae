"""Convolutional networks (issue 17), CPU: the compiled program run with the kernel references
equals eager torch for many convolution geometries and small nets; batch norm folds into the
convolutions; the convolution / depthwise / pooling kernels match their references in Triton's
interpreter and cross-compile for sm_90a; dynamic batch; clear refusals. GPU: a ResNet-18
bundle against eager torch on CUDA."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aotpack.errors import UserError  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.ir.ops import Op  # noqa: E402
from aotpack.kernels import template_for  # noqa: E402
from aotpack.kernels.spec import ConvOp, PoolOp, op_inputs  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from aotpack.passes.pipeline import optimize  # noqa: E402
from conv_checks import check_kernels_interpreted  # noqa: E402
from program_checks import check_matches_eager, kinds  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import conv_nets  # noqa: E402


class Conv(nn.Module):
    """One convolution (+ optional zero pad before it, + relu)."""

    def __init__(self, conv: nn.Module, pad=None):
        super().__init__()
        self.conv, self.pad = conv, pad

    def forward(self, x):
        if self.pad is not None:
            x = F.pad(x, self.pad)
        return torch.relu(self.conv(x))


# (name, module, input shape)
CONV_CASES = [
    ("3x3_s1_p1", nn.Conv2d(8, 16, 3, 1, 1), (2, 8, 9, 9)),
    ("3x3_s2_p1", nn.Conv2d(8, 16, 3, 2, 1), (2, 8, 9, 9)),
    ("3x3_s2_p0_nobias", nn.Conv2d(8, 16, 3, 2, 0, bias=False), (2, 8, 10, 10)),
    ("1x1", nn.Conv2d(16, 24, 1), (2, 16, 5, 7)),
    ("1x1_s2", nn.Conv2d(16, 24, 1, 2), (2, 16, 8, 8)),
    ("stem_7x7_s2_p3", nn.Conv2d(3, 16, 7, 2, 3, bias=False), (2, 3, 20, 20)),
    ("same_odd", nn.Conv2d(8, 8, 5, padding="same"), (1, 8, 7, 9)),
    ("same_even", nn.Conv2d(8, 8, 4, padding="same"), (1, 8, 7, 9)),
    ("rect_kernel_stride", nn.Conv2d(8, 8, (3, 1), (2, 1), (1, 0)), (2, 8, 9, 6)),
    ("dilation2", nn.Conv2d(8, 8, 3, padding=2, dilation=2), (2, 8, 9, 9)),
    ("groups4", nn.Conv2d(16, 32, 3, padding=1, groups=4), (2, 16, 6, 6)),
    ("depthwise", nn.Conv2d(16, 16, 3, padding=1, groups=16), (2, 16, 7, 7)),
    ("depthwise_s2_5x5", nn.Conv2d(24, 24, 5, 2, 2, groups=24), (2, 24, 9, 9)),
    ("depthwise_x2", nn.Conv2d(8, 16, 3, padding=1, groups=8), (2, 8, 6, 6)),
    ("patch_embedding", nn.Conv2d(3, 16, 4, 4), (2, 3, 16, 16)),
    ("conv1d", nn.Conv1d(8, 16, 3, padding=1), (2, 8, 20)),
    ("conv1d_s2_d2", nn.Conv1d(8, 16, 5, stride=2, padding=3, dilation=2), (2, 8, 21)),
    ("conv1d_depthwise", nn.Conv1d(16, 16, 9, padding=4, groups=16), (2, 16, 20)),
]
PADDED_CASES = [  # asymmetric zero padding in front of a conv joins its padding
    ("asym_pad", nn.Conv2d(8, 8, 3), (0, 1, 2, 0), (2, 8, 7, 7)),
    ("asym_pad_1d", nn.Conv1d(8, 8, 3), (2, 0), (2, 8, 11)),
]


def _conv_model(module, pad=None):
    torch.manual_seed(0)
    m = Conv(module, pad).eval()
    for p in m.parameters():
        p.data.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("name,module,shape", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_geometries_match_eager(name, module, shape):
    program = check_matches_eager(_conv_model(module), [torch.randn(shape)], 1e-5)
    kind = Counter(kinds(program))
    if name == "patch_embedding":  # the GEMM path is kept (f32: a 1x1 conv on tf32)
        assert kind["ConvOp"] == 1 and "GemmOp" not in kind
    else:
        assert kind["ConvOp"] == 1
        conv = next(op for op in program.ops if isinstance(op, ConvOp))
        assert [type(s).__name__ for s in conv.epilogue][-1] == "EpAct"  # relu fused


@pytest.mark.parametrize("name,module,pad,shape", PADDED_CASES, ids=[c[0] for c in PADDED_CASES])
def test_zero_padding_joins_the_conv(name, module, pad, shape):
    program = check_matches_eager(_conv_model(module, pad), [torch.randn(shape)], 1e-5)
    # the conv reads the unpadded input and writes the NCHW output in place: one launch
    assert kinds(program) == ["ConvOp"]
    conv = program.ops[0]
    assert conv.x.storage == program.inputs[0]
    assert conv.out.storage == program.outputs[0] and len(conv.out.shape) == 4
    assert conv.padding != ((0, 0), (0, 0))


@pytest.mark.parametrize("name", list(conv_nets.nets()))
def test_nets_match_eager(name):
    model, x = conv_nets.make(name)
    program = check_matches_eager(model, [x], 1e-4)
    assert "ConvOp" in kinds(program)


def test_resnet18_plan():
    """BN folded (no multiply left), every conv's epilogue fused (bias, relu, shortcut add),
    pooling kernels, the stem's 2x2 fold of the image + 20 convs + 2 pools + the classifier =
    24 launches (in f32 the classifier GEMM is a 1x1 conv on tf32 too)."""
    model, x = conv_nets.make("resnet18")
    graph = optimize(to_graph(model, [x]))
    assert not any(n.op == Op.MUL for n in graph.nodes)
    program = compile_graph(to_graph(model, [x]))
    assert Counter(kinds(program)) == {"PointwiseOp": 1, "ConvOp": 21, "PoolOp": 2}
    convs = [op for op in program.ops if isinstance(op, ConvOp)]
    adds = [op for op in convs if any(type(s).__name__ == "EpAdd" for s in op.epilogue)]
    assert len(adds) == 8  # one shortcut per basic block
    for op in convs:  # channels-last between kernels, the stem's folded image included
        assert op.x.strides[3] == 1
    assert all(template_for(op).describe(op) for op in program.ops)


def test_mobilenet_block_fuses_relu6_hardswish_depthwise():
    model, x = conv_nets.make("mobilenet_v2_block")
    program = compile_graph(to_graph(model, [x]))
    convs = [op for op in program.ops if isinstance(op, ConvOp)]
    acts = [s.act.value for op in convs for s in op.epilogue if hasattr(s, "act")]
    assert acts.count("relu6") == 4 and acts.count("hardswish") == 1
    assert sum(op.depthwise for op in convs) == 2
    assert "depthwise conv" in template_for(convs[2]).describe(convs[2])


def test_squeeze_excitation_pools_and_gates_in_kernels():
    model, x = conv_nets.make("squeeze_excitation")
    program = compile_graph(to_graph(model, [x]))
    assert Counter(kinds(program)) == {"ConvOp": 3, "PoolOp": 1, "PointwiseOp": 1}
    gate = [op for op in program.ops if isinstance(op, ConvOp)][-1]
    assert gate.epilogue[-1].act.value == "sigmoid"


POOL_CASES = [
    ("max3_s2_p1", nn.MaxPool2d(3, 2, 1), (2, 8, 9, 9)),
    ("max2_ceil", nn.MaxPool2d(2, 2, ceil_mode=True), (2, 8, 7, 7)),
    ("avg3_s2_p1", nn.AvgPool2d(3, 2, 1), (2, 8, 9, 9)),
    ("avg3_nopad_count", nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 8, 9, 9)),
    ("avg_ceil", nn.AvgPool2d(3, 2, 1, ceil_mode=True), (2, 8, 8, 8)),
    ("avg_divisor", nn.AvgPool2d(2, divisor_override=3), (2, 8, 6, 6)),
    ("adaptive_2x2", nn.AdaptiveAvgPool2d(2), (2, 8, 6, 6)),
    ("global", nn.AdaptiveAvgPool2d(1), (2, 8, 5, 7)),
    ("max_global", nn.MaxPool2d((5, 7)), (2, 8, 5, 7)),
]


@pytest.mark.parametrize("name,pool,shape", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_pooling_matches_eager(name, pool, shape):
    model = nn.Sequential(nn.Conv2d(shape[1], shape[1], 1), pool).eval()
    program = check_matches_eager(model, [torch.randn(shape)], 1e-5)
    assert "PoolOp" in kinds(program)


def test_global_mean_is_a_pool():
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).eval()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return self.body(x).mean((-1, -2))
    program = check_matches_eager(Net().eval(), [torch.randn(2, 8, 6, 6)], 1e-5)
    assert Counter(kinds(program)) == {"ConvOp": 1, "PoolOp": 1}


# ----------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("name", list(conv_nets.nets()))
def test_kernels_interpreted_on_nets(name):
    model, x = conv_nets.make(name, torch.bfloat16)
    program = compile_graph(to_graph(model, [x]))
    assert check_kernels_interpreted(program, [x]) >= 1


def test_kernels_interpreted_on_geometries():
    """Every bf16 geometry of CONV_CASES and POOL_CASES in one interpreter child."""
    programs = []
    for _, module, shape in CONV_CASES:
        m = _conv_model(module).to(torch.bfloat16)
        x = torch.randn(shape).to(torch.bfloat16)
        programs.append((compile_graph(to_graph(m, [x])), x))
    for _, pool, shape in POOL_CASES:
        m = nn.Sequential(nn.Conv2d(shape[1], shape[1], 1), pool).eval().to(torch.bfloat16)
        x = torch.randn(shape).to(torch.bfloat16)
        programs.append((compile_graph(to_graph(m, [x])), x))
    checked = sum(check_kernels_interpreted(p, [x]) for p, x in programs)
    assert checked >= len(CONV_CASES) + 2 * len(POOL_CASES) - 1


@pytest.mark.parametrize("batch,size,channels", [(1, 30, 40), (3, 9, 72)])
def test_global_pool_kernel(batch, size, channels):
    """Global pooling streams each image in [BR, BC] tiles (its own kernel): ragged pixel and
    channel tails, batch 1 (16 channels per program) and more."""
    from aotpack.kernels import compile as compile_op

    model = conv_nets.SqueezeExcitation(channels, 8).eval().to(torch.bfloat16)
    x = torch.randn(batch, channels, size, size).to(torch.bfloat16)
    program = compile_graph(to_graph(model, [x]))
    pool = next(op for op in program.ops if isinstance(op, PoolOp))
    assert compile_op(pool)[0].kernel.entry == "global_pool_kernel"
    assert check_kernels_interpreted(program, [x]) == 2  # the conv and the pool


def test_squeeze_excitation_gate_is_applied_by_the_next_conv():
    """EfficientNet's MBConv: the SE gate x * s is not stored; the projection conv multiplies
    its input tiles by s[n, c] as it loads them (ConvOp.x_scale). Eager's result in f32; the
    kernels in the interpreter in bf16 (batch 3: the scale differs per image)."""
    import vision_nets

    torch.manual_seed(0)
    block = conv_nets.randomize_batch_norms(vision_nets.MBConv(6, 3, 1, 16, 16)).eval()
    program = check_matches_eager(block, [torch.randn(3, 16, 9, 9)], 1e-5)
    scaled = [op for op in program.ops if isinstance(op, ConvOp) and op.x_scale is not None]
    assert len(scaled) == 1 and scaled[0].x_scale.shape == (3, 96)
    gate = scaled[0].x_scale.storage  # read by the conv only: no kernel multiplies it apart
    assert [op for op in program.ops if gate in {t.storage for t in op_inputs(op)}] == scaled
    x = torch.randn(3, 16, 9, 9).to(torch.bfloat16)
    bf16 = compile_graph(to_graph(block.to(torch.bfloat16), [x]))
    assert any(isinstance(op, ConvOp) and op.x_scale is not None for op in bf16.ops)
    assert check_kernels_interpreted(bf16, [x]) >= 2


def test_resnet18_kernels_compile_for_sm90():
    """Full-size ResNet-18 at 224x224, bf16: every kernel cross-compiles (no GPU); the
    implicit GEMM convolutions use wgmma-free mma or wgmma (tensor cores either way). Issue
    17's launch budget: 24 per forward (the classifier, 2x1000x512, is one launch: a split of
    its K would cost a reduce launch for less than it saves)."""
    from aotpack.kernels import compile as compile_op

    model, (x,) = conv_nets.make_resnet18(batch=2)
    program = compile_graph(to_graph(model, [x]))
    seen, launches_per_forward = set(), 0
    for op in program.ops:
        launches = compile_op(op)
        assert launches and all(launch.kernel.cubin for launch in launches)
        seen.add(launches[0].kernel.entry)
        launches_per_forward += len(launches)
    assert {"conv_kernel", "pool_kernel"} <= seen
    assert launches_per_forward == 24


def test_dynamic_batch():
    model, inputs, dims = conv_nets.make_resnet18_dynamic(max_batch=8, width=8, size=32,
                                                           classes=10, dtype=torch.float32)
    program = compile_graph(to_graph(model, inputs, dims))
    assert program.dynamic
    from aotpack.executor import run_reference
    from program_checks import rel_err

    for b in (1, 3, 8):
        x = torch.randn(b, 3, 32, 32)
        (got,) = run_reference(program, [x])
        with torch.no_grad():
            assert rel_err(got, model(x)) < 1e-4
    model, inputs, dims = conv_nets.make_resnet18_dynamic(max_batch=8, width=8, size=32,
                                                           classes=10)
    program = compile_graph(to_graph(model, inputs, dims))
    conv = next(op for op in program.ops if isinstance(op, ConvOp))
    assert not isinstance(conv.out.shape[0], int)  # M follows the batch
    from aotpack.kernels.triton import conv as conv_kernels

    launches = conv_kernels.compile(conv)
    assert not isinstance(launches[0].grid[0], int)  # the grid is an expression of B


# ----------------------------------------------------------------------------- refusals
def _refused(model, x, *words):
    with pytest.raises(UserError) as e:
        compile_graph(to_graph(model, [x]))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_3d_conv_transpose_is_refused():
    """(1-D and 2-D ones compile: tests/test_conv_transpose.py.)"""
    _refused(nn.ConvTranspose3d(4, 4, 2, 2).eval(), torch.randn(1, 4, 4, 4, 4),
             "3-D transposed convolution")


def test_training_batch_norm_is_refused():
    _refused(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train(),
             torch.randn(2, 3, 8, 8), "eval")


@pytest.mark.parametrize("shape, out", [((1, 4, 7, 7), 3), ((2, 3, 37, 53), (7, 5)),
                                        ((2, 2, 6, 6), (4, 4)), ((1, 2, 10, 7), (10, 3))])
def test_uneven_adaptive_max_pool_is_exact(shape, out):
    """Blocks of unequal sizes that overlap (7 -> 3: rows 0-2, 2-4, 4-6) and outputs larger
    than the input (6 -> 4 reads rows twice): per axis the largest of a few row gathers; as
    exact as torch's (it was refused)."""
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape).to(dtype)
        program = check_matches_eager(nn.AdaptiveMaxPool2d(out).eval(), [x], 0.0)
        assert "PoolOp" not in kinds(program)


def test_batch_norm_folds_from_its_exact_statistics():
    """The folded weight is (w * scale) rounded once from f64 (Constant.exact, carried
    through the channels-last rewrite): it was rounded twice (scale to bf16 first)."""
    torch.manual_seed(0)
    conv, bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
    model = nn.Sequential(conv, bn).eval().to(torch.bfloat16)
    program = compile_graph(to_graph(model, [torch.randn(1, 3, 8, 8).to(torch.bfloat16)]))
    (op,) = [o for o in program.ops if isinstance(o, ConvOp)]
    scale = (bn.weight.double() / (bn.running_var.double() + bn.eps).sqrt())
    want = (conv.weight.double() * scale[:, None, None, None]).to(torch.bfloat16)
    got = program.weights[op.w.storage].reshape(8, 3, 3, 3)  # packed (oc, kh, kw, c)
    assert torch.equal(got, want.permute(0, 2, 3, 1).reshape(8, 3, 3, 3))


def test_f32_conv_runs_on_tf32_tensor_cores():
    """An f32 convolution is supported: tl.dot on tf32 (what cuDNN does for f32 by default),
    K steps of 32 elements (one 128-byte row) so the stages fit in shared memory."""
    from aotpack.kernels.triton import conv as conv_kernels
    from program_checks import sass_or_skip

    model, x = conv_nets.make("resnet18")
    program = compile_graph(to_graph(model, [x]))
    conv = max((op for op in program.ops if isinstance(op, ConvOp) and op.kernel == (3, 3)),
               key=lambda op: op.x.shape[3])  # 128 channels: bf16 would take BK=64
    assert template_for(conv).supports(conv) is None
    from aotpack.kernels.spec import SM90
    from aotpack.kernels.triton import conv_configs

    assert conv_configs.default_config(conv, SM90)["BK"] == 32
    launches = conv_kernels.compile(conv)
    assert "TF32" in sass_or_skip(launches[0].kernel.cubin)


def test_pool_op_has_a_template():
    model, x = conv_nets.make("resnet18", torch.bfloat16)
    program = compile_graph(to_graph(model, [x]))
    pool = next(op for op in program.ops if isinstance(op, PoolOp))
    assert template_for(pool).describe(pool).startswith("maxpool")


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 8])
def test_gpu_resnet18_bundle_matches_eager(tmp_path, batch):
    import aotpack
    from program_checks import rel_err

    factory = tmp_path / "r18_factory.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(Path(conv_nets.__file__).parent)!r})"
                       f"\nimport conv_nets\n\ndef make():\n"
                       f"    return conv_nets.make_resnet18(batch={batch})\n")
    aotpack.build(f"{factory}:make", tmp_path / "r18", progress=False, command_line="t")
    model, (x,) = conv_nets.make_resnet18(batch=batch)
    with aotpack.load(tmp_path / "r18") as bundle, bundle.session() as session:
        (got,) = session.run([x.cuda()])
    with torch.no_grad():
        want = model.cuda()(x.cuda())
    assert rel_err(got.float().cpu(), want.float().cpu()) < 3e-2


def test_depthwise_rows_of_8_times_odd_channels_load_whole_vectors():
    """72 channels (MobileNetV3, EfficientNet): a row starts 144 bytes after the last, so the
    kernel must know the stride is a multiple of 8 (Triton's JIT only knows 16) to load 16-byte
    vectors; without it every load was a scalar one and the registers spilled. A 5x5 window
    loops over its rows at run time (all 25 tiles unrolled spilled too)."""
    from aotpack.kernels.triton import conv as conv_kernels
    from program_checks import sass_or_skip
    from support.sass import count_instructions

    model = nn.Sequential(nn.Conv2d(16, 72, 1), nn.ReLU(),
                          nn.Conv2d(72, 72, 5, padding=2, groups=72), nn.ReLU())
    model = model.eval().to(torch.bfloat16)
    program = compile_graph(to_graph(model, [torch.randn(4, 16, 28, 28).to(torch.bfloat16)]))
    (op,) = [o for o in program.ops if isinstance(o, ConvOp) and o.depthwise]
    assert op.x.strides[2] == 72 and op.x.strides[3] == 1  # channels-last, rows of 72
    listing = sass_or_skip(conv_kernels.compile(op)[0].kernel.cubin)
    assert count_instructions(listing, "STL") == 0 and count_instructions(listing, "LDL") == 0
    assert count_instructions(listing, "LDG.E.U16") == 0
    assert count_instructions(listing, "LDG.E.128") > 0


@pytest.mark.parametrize("args, shape", [
    (dict(kernel_size=3, stride=1, padding=1, dilation=2), (2, 3, 9, 11)),
    (dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True), (1, 4, 10, 9)),
    (dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0), dilation=(3, 2)), (2, 2, 12, 8)),
    (dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True), (1, 2, 8, 8))])
def test_dilated_max_pool_is_exact(args, shape):
    """A dilated window (was refused): the image padded with the lowest value, the largest of
    one strided slice per tap; ceil_mode's partial last window included."""
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape).to(dtype)
        program = check_matches_eager(nn.MaxPool2d(**args).eval(), [x], 0.0)
        assert "PoolOp" not in kinds(program)
