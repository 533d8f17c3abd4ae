"""SwiGLU and scale fusion (passes/fuse_swiglu.py, gemm_chain.py): which graphs become one GEMM
with EpSwiGLU / EpScale, which keep the old lowering, and that every program still matches
eager PyTorch when run with the kernel references (CPU)."""
import hashlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aotpack.dtypes import DType
from aotpack.frontend import to_graph
from aotpack.kernels.spec import Act, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU
from aotpack.passes import compile_graph
from aotpack.passes.fuse_swiglu import GROUP
from program_checks import check_matches_eager, kinds

BF = torch.bfloat16


class SwiGLU(nn.Module):
    """down(silu(gate(h)) * up(h)) [+ extra], in either product order."""

    def __init__(self, d=128, f=192, bias=False, up_first=False, tail="residual"):
        super().__init__()
        self.gate = nn.Linear(d, f, bias=bias)
        self.up = nn.Linear(d, f, bias=bias)
        self.down = nn.Linear(f, d, bias=False)
        self.up_first, self.tail = up_first, tail

    def forward(self, h, r):
        g, u = F.silu(self.gate(h)), self.up(h)
        y = u * g if self.up_first else g * u
        if self.tail == "add":  # a further epilogue step of the fused GEMM
            y = y + r
        elif self.tail == "scale":
            y = y * 0.5
        elif self.tail == "gate_out":  # the gate value is read twice: not fusible
            return self.down(y), g
        return h + self.down(y)


def _model(dtype=BF, seed=0, **kw):
    torch.manual_seed(seed)
    m = SwiGLU(**kw).to(dtype).eval()
    f = m.gate.out_features
    return m, (torch.randn(2, 5, 128, dtype=dtype), torch.randn(2, 5, f, dtype=dtype))


@pytest.mark.parametrize("up_first", [False, True])
@pytest.mark.parametrize("dtype,tol", [(BF, 1e-2), (torch.float32, 1e-5)])
def test_swiglu_becomes_one_gemm(up_first, dtype, tol):
    model, inputs = _model(dtype, up_first=up_first)
    p = check_matches_eager(model, inputs, tol)
    if dtype == torch.float32:  # f32 linears are 1x1 convs on tf32: no SwiGLU pairing
        assert kinds(p) == ["ConvOp"] * 3
        assert not any(isinstance(s, EpSwiGLU) for op in p.ops for s in op.epilogue)
        return
    assert kinds(p) == ["GemmOp", "GemmOp"]
    gate_up, down = p.ops
    assert gate_up.epilogue == (EpSwiGLU(GROUP),)
    assert gate_up.b.shape == (384, 128) and gate_up.out.shape == (10, 192)
    assert down.a.storage == gate_up.out.storage
    w = p.weights[gate_up.b.storage].view(192 // GROUP, 2, GROUP, 128)  # blocks interleaved
    assert torch.equal(w[:, 0].reshape(192, 128), model.gate.weight)
    assert torch.equal(w[:, 1].reshape(192, 128), model.up.weight)


@pytest.mark.parametrize("tail,steps", [("add", [EpSwiGLU, EpAdd]),
                                        ("scale", [EpSwiGLU, EpScale])])
def test_swiglu_then_more_epilogue(tail, steps):
    model, inputs = _model(tail=tail)
    p = check_matches_eager(model, inputs, 1e-2)
    assert [type(s) for s in p.ops[0].epilogue] == steps


@pytest.mark.parametrize("kw", [dict(f=GROUP + 8),  # not a multiple of GROUP
                                dict(bias=True),  # the bias would come before the SwiGLU
                                dict(tail="gate_out")])  # silu(gate) has another user
def test_swiglu_left_unfused(kw):
    model, inputs = _model(**kw)
    p = check_matches_eager(model, inputs, 1e-2)
    gemms = [op for op in p.ops if type(op).__name__ == "GemmOp"]
    assert not any(isinstance(s, EpSwiGLU) for op in gemms for s in op.epilogue)
    assert len(gemms) == 3


def test_swiglu_weight_is_reproducible():
    """scripts/make-weights reruns the passes elsewhere and checks every weight's sha256."""
    from aotpack.bundle.writer import _weights

    def digests():
        model, inputs = _model()
        records, _ = _weights(compile_graph(to_graph(model, inputs)))
        return {r.name: r.sha256 for r in records}

    first = digests()
    assert first == digests() and "gate_up.weight" in first
    model, _ = _model()
    blocks = 192 // GROUP
    w = torch.stack((model.gate.weight.view(blocks, GROUP, 128),
                     model.up.weight.view(blocks, GROUP, 128)), 1)
    raw = w.reshape(384, 128).contiguous().view(torch.uint8).numpy().tobytes()
    assert first["gate_up.weight"] == hashlib.sha256(raw).hexdigest()


# ----------------------------------------------------------------------------- EpScale
class Scaled(nn.Module):
    def __init__(self, kind, n=48):
        super().__init__()
        self.lin = nn.Linear(32, n)
        self.kind = kind
        self.register_buffer("vec", 1 + 0.1 * torch.randn(n))
        self.register_buffer("c0", torch.tensor(1.5))

    def forward(self, x, s):
        y = self.lin(x)
        if self.kind == "number":
            return y * 0.5
        if self.kind == "divide":
            return F.relu(y) / 4.0
        if self.kind == "vector":
            return y * self.vec
        if self.kind == "zero_d":
            return F.silu(y) * self.c0
        return y * s  # a graph input


@pytest.mark.parametrize("kind,s_shape,s_dtype", [
    ("number", (1,), torch.float32), ("divide", (1,), torch.float32),
    ("vector", (1,), torch.float32), ("zero_d", (1,), torch.float32),
    ("input", (48,), torch.float32), ("input", (1,), torch.float32),
    ("input", (), torch.float32)])
@pytest.mark.parametrize("dtype", [BF, torch.float32])
def test_scale_becomes_epilogue(kind, s_shape, s_dtype, dtype):
    torch.manual_seed(0)
    model = Scaled(kind).to(dtype).eval()
    inputs = (torch.randn(3, 32, dtype=dtype), torch.rand(s_shape, dtype=s_dtype) + 0.5)
    p = check_matches_eager(model, inputs, 1e-2 if dtype == BF else 1e-5)
    assert kinds(p) == ["GemmOp" if dtype == BF else "ConvOp"]  # f32: a 1x1 conv on tf32
    scale = p.ops[0].epilogue[-1]
    assert isinstance(scale, EpScale) and scale.scale.dtype == DType.F32
    assert scale.scale.shape == ((48,) if kind == "vector" else s_shape or (1,)
                                 if kind == "input" else (1,))
    if kind == "input":
        assert scale.scale.storage == "s"
    else:
        want = {"number": 0.5, "divide": 0.25, "zero_d": 1.5}.get(kind)
        got = p.weights[scale.scale.storage]
        assert got.dtype == torch.float32
        if want is not None:
            assert got.reshape(-1).tolist() == [want]
        else:
            assert torch.equal(got, model.vec.float())


def test_scale_by_bf16_input_is_not_fused():
    """A bf16 run-time scale would need converting to f32 first: it stays a pointwise op."""
    torch.manual_seed(0)
    model = Scaled("input").to(BF).eval()
    p = check_matches_eager(model, (torch.randn(3, 32, dtype=BF), torch.rand(48, dtype=BF)),
                            1e-2)
    assert kinds(p) == ["GemmOp", "PointwiseOp"]
    assert [type(s) for s in p.ops[0].epilogue] == [EpBias]
