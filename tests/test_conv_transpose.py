"""Transposed convolutions (ConvTranspose1d/2d, issue 15), CPU: every geometry torch allows
(stride, padding, output_padding, dilation, groups, bias) compiles to one ordinary convolution
(+ a pixel shuffle) that matches eager; no multiply-adds on zeros when the stride divides the
kernel; kernel == stride is a GEMM in a channels-last net; a dynamic length; the phase
convolution's Triton kernel in the interpreter; DPT (transformers) end to end; 3-D refused.
(tests/test_conv.py runs the U-Net and vocoder of examples/conv_nets.py too.)"""
from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from torch import nn  # noqa: E402

from aotpack.errors import UserError  # noqa: E402
from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import to_graph  # noqa: E402
from aotpack.kernels.spec import ConvOp, GemmOp  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from conv_checks import check_kernels_interpreted  # noqa: E402
from program_checks import check_matches_eager, kinds, rel_err  # noqa: E402

# (name, module, input shape)
CASES = [
    ("k2_s2", nn.ConvTranspose2d(8, 6, 2, 2), (2, 8, 5, 5)),
    ("k4_s4_nobias", nn.ConvTranspose2d(8, 6, 4, 4, bias=False), (1, 8, 3, 4)),
    ("k4_s2_p1", nn.ConvTranspose2d(8, 6, 4, 2, 1), (2, 8, 5, 5)),
    ("k3_s2_p1_op1", nn.ConvTranspose2d(8, 6, 3, 2, 1, output_padding=1), (2, 8, 5, 6)),
    ("k3_s1_p1", nn.ConvTranspose2d(8, 6, 3, 1, 1), (2, 8, 5, 6)),
    ("groups4", nn.ConvTranspose2d(8, 12, 3, 2, 1, groups=4), (2, 8, 5, 6)),
    ("depthwise", nn.ConvTranspose2d(8, 8, 4, 2, 1, groups=8), (2, 8, 5, 6)),
    ("dilation2", nn.ConvTranspose2d(8, 6, 3, 2, 2, dilation=2, output_padding=1), (2, 8, 5, 6)),
    ("rect", nn.ConvTranspose2d(8, 6, (3, 2), (1, 3), (1, 0), output_padding=(0, 2)),
     (2, 8, 5, 6)),
    ("k2_s3_gaps", nn.ConvTranspose2d(8, 6, 2, 3, output_padding=2), (2, 8, 4, 4)),
    ("padding_past_reach", nn.ConvTranspose2d(8, 6, 3, 1, 2), (2, 8, 6, 6)),
    ("1d_k16_s8_p4", nn.ConvTranspose1d(8, 6, 16, 8, 4), (2, 8, 7)),
    ("1d_k2_s2", nn.ConvTranspose1d(8, 6, 2, 2), (2, 8, 7)),
    ("1d_groups2_op1", nn.ConvTranspose1d(8, 6, 5, 3, 2, output_padding=1, groups=2),
     (2, 8, 7)),
    ("1d_dilation3", nn.ConvTranspose1d(8, 6, 3, 2, 1, dilation=3), (2, 8, 7)),
]


def _model(module, dtype=torch.float32):
    torch.manual_seed(0)
    for p in module.parameters():
        p.data.normal_(0, 0.3)
    return nn.Sequential(module, nn.ReLU()).eval().to(dtype)


@pytest.mark.parametrize("name,module,shape", CASES, ids=[c[0] for c in CASES])
def test_geometries_match_eager(name, module, shape):
    program = check_matches_eager(_model(module), [torch.randn(shape)], 1e-5)
    (conv,) = [op for op in program.ops if isinstance(op, ConvOp)]
    assert conv.stride == (1, 1) and conv.dilation == (1, 1)  # an ordinary convolution
    assert set(kinds(program)) <= {"ConvOp", "PointwiseOp"}
    assert kinds(program).count("PointwiseOp") <= 2  # the shuffle, the NCHW output


def test_no_multiply_adds_on_zeros_when_the_stride_divides_the_kernel():
    """HiFi-GAN's k = 2s: each of the s phases has k/s taps, all of them kernel weights (zero
    insertion would convolve s times as many positions, s - 1 of every s of them zeros)."""
    x = torch.randn(1, 8, 7)
    program = compile_graph(to_graph(_model(nn.ConvTranspose1d(8, 6, 16, 8, 4)), [x]))
    (conv,) = [op for op in program.ops if isinstance(op, ConvOp)]
    assert conv.kernel == (1, 2) and conv.out.shape[-1] == 8 * 6  # 8 phases x 6 channels
    w = next(t for t in program.weights.values() if t.numel() == 8 * 6 * 2 * 8)
    assert bool((w != 0).all())


def test_kernel_equal_to_stride_is_a_gemm_in_a_channels_last_net():
    """U-Net's and DPT's upsampling (k == s, no padding) after a conv in bf16: one GEMM over
    the pixels with s*s*OC columns, the bias in its epilogue, then the shuffle copy."""
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ConvTranspose2d(8, 6, 2, 2))
    model = model.eval().to(torch.bfloat16)
    x = torch.randn(2, 4, 6, 6).to(torch.bfloat16)
    program = check_matches_eager(model, [x], 1e-2)
    assert Counter(kinds(program)) == {"ConvOp": 1, "GemmOp": 1, "PointwiseOp": 2}
    gemm = next(op for op in program.ops if isinstance(op, GemmOp))
    assert gemm.a.shape == (72, 8) and gemm.out.shape == (72, 24)
    assert [type(s).__name__ for s in gemm.epilogue] == ["EpBias"]


def test_dynamic_batch_and_length():
    model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.ConvTranspose1d(8, 6, 16, 8, 4),
                          nn.ReLU(), nn.ConvTranspose1d(6, 5, 3, 2, 1, output_padding=1)).eval()
    dims = ({0: torch.export.Dim("B", min=1, max=4), 2: torch.export.Dim("L", min=2, max=64)},)
    program = compile_graph(to_graph(model, [torch.randn(2, 4, 10)], dims))
    assert program.dynamic
    for b, length in ((1, 2), (3, 17), (4, 64)):
        x = torch.randn(b, 4, length)
        (got,) = run_reference(program, [x])
        with torch.no_grad():
            assert rel_err(got, model(x)) < 1e-5


def test_kernels_interpreted():
    """The phase convolutions' Triton kernel (bf16) in one interpreter child, all geometries."""
    programs = []
    for _, module, shape in CASES:
        x = torch.randn(shape).to(torch.bfloat16)
        programs.append((compile_graph(to_graph(_model(module, torch.bfloat16), [x])), x))
    assert sum(check_kernels_interpreted(p, [x]) for p, x in programs) == len(CASES)


def test_bias_computed_at_run_time_is_added_after_the_shuffle():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 3, 3, 3))
            self.b = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return nn.functional.conv_transpose2d(x, self.w, self.b * x.mean(), stride=2)

    program = check_matches_eager(M().eval(), [torch.randn(2, 4, 5, 5)], 1e-5)
    assert kinds(program).count("ConvOp") == 1


def test_leaky_relu_matches_eager():
    model = nn.Sequential(nn.Conv1d(4, 8, 3), nn.LeakyReLU(0.2), nn.Conv1d(8, 4, 1)).eval()
    program = check_matches_eager(model, [torch.randn(2, 4, 9)], 1e-5)
    assert "PointwiseOp" in kinds(program)


def test_dpt_depth_estimation_matches_eager():
    """transformers' DPT: its reassemble stage upsamples by ConvTranspose2d 4x4/4 and 2x2/2
    (refused before). torch's default init, and the head's last bias lifted above its ReLU,
    so the depth map is not all zeros."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.DPTConfig(
        hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, head_in_index=-1)
    torch.manual_seed(0)
    dpt = transformers.DPTForDepthEstimation(cfg).eval()
    for m in dpt.modules():
        if m is not dpt and hasattr(m, "reset_parameters"):
            m.reset_parameters()
    with torch.no_grad():
        dpt.head.head[4].bias.fill_(0.5)

    class Depth(nn.Module):
        def __init__(self):
            super().__init__()
            self.dpt = dpt

        def forward(self, x):
            return self.dpt(x).predicted_depth

    x = torch.randn(1, 3, 32, 32)
    assert bool(Depth()(x).std() > 0)
    program = check_matches_eager(Depth().eval(), [x], 1e-4)
    assert kinds(program).count("ConvOp") > 10


def test_3d_transposed_convolution_is_refused():
    with pytest.raises(UserError) as e:
        compile_graph(to_graph(nn.ConvTranspose3d(2, 2, 2, 2).eval(),
                               [torch.randn(1, 2, 4, 4, 4)]))
    for words in ("3-D transposed convolution", "ConvTranspose1d and ConvTranspose2d",
                  "aten.convolution"):
        assert words in str(e.value), str(e.value)
