"""A stride-2 stem over an image of 1-4 channels runs folded 2x2 into 4C channels
(frontend/aten_conv_stem.py): one copy of the image, then a stride-1 conv over aligned pixels.
Every geometry must equal eager; the kernels (each candidate config, gathered and per-tap) are
checked in Triton's interpreter. Also the other window that needed a layout/loop decision to
build at all: depthwise windows larger than 7x7 loop over their rows."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "examples")]
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aotpack.frontend import aten_conv_stem, to_graph  # noqa: E402
from aotpack.kernels.spec import SM90, ConvOp  # noqa: E402
from aotpack.kernels.triton import conv_configs  # noqa: E402
from aotpack.passes import compile_graph  # noqa: E402
from conv_checks import check_kernels_interpreted  # noqa: E402
from program_checks import check_matches_eager, kinds  # noqa: E402
from test_conv import _conv_model as _model  # noqa: E402  (a conv + pad + relu, seeded)


# (name, conv, zero pad before it, input shape)
FOLDED = [
    ("resnet_7x7_p3", nn.Conv2d(3, 16, 7, 2, 3, bias=False), None, (2, 3, 20, 20)),
    ("effnet_3x3_p1", nn.Conv2d(3, 8, 3, 2, 1), None, (2, 3, 16, 18)),
    ("p0", nn.Conv2d(3, 8, 3, 2, 0), None, (1, 3, 14, 12)),
    ("gray_5x5", nn.Conv2d(1, 8, 5, 2, 2), None, (2, 1, 12, 12)),
    ("rgba_even_kernel", nn.Conv2d(4, 8, 4, 2, 1), None, (1, 4, 10, 14)),
    ("two_channels_rect", nn.Conv2d(2, 8, (5, 3), 2, (2, 1)), None, (1, 2, 12, 10)),
    ("asymmetric_pad", nn.Conv2d(3, 8, 3, 2, 0), (0, 1, 1, 0), (1, 3, 16, 14)),
    ("same_output_crop", nn.Conv2d(3, 8, 3, 2, 1), None, (1, 3, 8, 8)),
]
GATHERED = [  # still the one-tap gather: the fold does not apply
    ("odd_height", nn.Conv2d(3, 8, 3, 2, 1), (1, 3, 15, 16)),
    ("stride_2x1", nn.Conv2d(3, 8, 3, (2, 1), 1), (1, 3, 16, 16)),
    ("five_channels", nn.Conv2d(5, 8, 3, 2, 1), (1, 5, 16, 16)),
    ("dilated", nn.Conv2d(3, 8, 3, 2, 2, dilation=2), (1, 3, 16, 16)),
    ("stride_1", nn.Conv2d(3, 8, 3, 1, 1), (1, 3, 16, 16)),
]


def _stem(program) -> ConvOp:
    return next(op for op in program.ops if isinstance(op, ConvOp))


@pytest.mark.parametrize("name,conv,pad,shape", FOLDED, ids=[c[0] for c in FOLDED])
def test_folded_stem_matches_eager(name, conv, pad, shape):
    program = check_matches_eager(_model(conv, pad), [torch.randn(shape)], 1e-5)
    op = _stem(program)
    c = shape[1]
    assert op.stride == (1, 1) and op.x.shape[3] == 4 * c and op.x.strides[3] == 1
    assert op.x.shape[1:3] == (shape[2] // 2, shape[3] // 2)
    assert Counter(kinds(program)) == {"PointwiseOp": 1, "ConvOp": 1}  # the fold, the conv


@pytest.mark.parametrize("name,conv,shape", GATHERED, ids=[c[0] for c in GATHERED])
def test_other_convs_are_not_folded(name, conv, shape):
    program = check_matches_eager(_model(conv), [torch.randn(shape)], 1e-5)
    assert kinds(program) == ["ConvOp"]
    assert _stem(program).x.storage == program.inputs[0]  # the image read in place


def test_folded_weight_places_every_tap():
    """Each weight element lands at its (a, b, c) channel and (p, q) tap; the rest is zero."""
    w = torch.arange(1, 1 + 2 * 3 * 7 * 7, dtype=torch.float32).reshape(2, 3, 7, 7)
    dims = [aten_conv_stem._folded_pads(20, 7, (3, 3))] * 2
    w2 = aten_conv_stem.folded_weight(w, dims)
    assert w2.shape == (2, 12, 4, 4)
    assert sorted(w2[w2 != 0].tolist()) == sorted(w.flatten().tolist())
    # folded channel (a, b, c) is (2a + b) * 3 + c; the odd padding 3 puts one zero row and
    # column before the kernel: kh = 0 is row 2p + a = 1 (p = 0, a = 1), so a = 0 at p = 0
    # (and b = 0 at q = 0) hold only zeros
    assert (w2[:, 0:6, 0, :] == 0).all() and (w2[:, [0, 1, 2, 6, 7, 8], :, 0] == 0).all()
    for c in range(3):
        assert (w2[:, 9 + c, 0, 0] == w[:, c, 0, 0]).all()  # a = b = 1, p = q = 0
        assert (w2[:, 9 + c, 3, 3] == w[:, c, 6, 6]).all()  # the last tap: p = q = 3
        # shifted by the zero tap: kh 2 -> row 3 = (p 1, a 1), kw 3 -> column 4 = (q 2, b 0)
        assert (w2[:, 6 + c, 1, 2] == w[:, c, 2, 3]).all()


def test_dynamic_batch_folds():
    model = _model(nn.Conv2d(3, 8, 3, 2, 1))
    batch = torch.export.Dim("batch", min=1, max=64)
    program = compile_graph(to_graph(model, [torch.randn(2, 3, 16, 16)],
                                     dynamic_shapes=({0: batch},)))
    assert _stem(program).stride == (1, 1)


def test_folded_kernels_interpreted_in_every_config():
    """bf16: the default (per tap: a 16-wide K step over the 12 channels of a tap, masked) and
    the gathered candidate (FLAT_K: K walked across taps) match the reference."""
    x = torch.randn(2, 3, 20, 20).to(torch.bfloat16)
    model = _model(nn.Conv2d(3, 16, 7, 2, 3)).to(torch.bfloat16)
    program = compile_graph(to_graph(model, [x]))
    op = _stem(program)
    configs = conv_configs.candidate_configs(op, SM90)
    assert any(c["FLAT_K"] for c in configs) and not configs[0]["FLAT_K"]
    for cfg in configs:
        if cfg["BM"] == 64 and cfg["BN"] == 32 or cfg["FLAT_K"] or cfg is configs[0]:
            assert check_kernels_interpreted(program, [x], configs={"ConvOp": cfg},
                                             kinds=(ConvOp,)) == 1


def test_large_depthwise_windows_loop_over_rows():
    """Up to 7x7 a depthwise window is unrolled whole (measured faster); larger ones loop over
    their rows at run time: unrolled, a 17x17 took 2-7 min to compile and a 31x31 never
    finished (a RepLKNet-style block), looped they compile in seconds."""
    def depthwise(k):
        x = torch.randn(1, 16, 32, 32).to(torch.bfloat16)
        conv = nn.Conv2d(16, 16, k, padding=k // 2, groups=16)
        program = compile_graph(to_graph(_model(conv).to(torch.bfloat16), [x]))
        return next(op for op in program.ops if isinstance(op, ConvOp) and op.depthwise), x, \
            program

    assert not conv_configs.default_config(depthwise(7)[0], SM90)["ROW_LOOP"]
    op, x, program = depthwise(17)
    assert conv_configs.default_config(op, SM90)["ROW_LOOP"]
    assert check_kernels_interpreted(program, [x], kinds=(ConvOp,)) == 1
