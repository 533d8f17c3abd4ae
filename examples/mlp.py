"""Example model: a transformer-style MLP, Linear → GELU(tanh) → Linear, in bf16.

`aotpack build examples/mlp.py:make --arch sm90 -o out/mlp`. Smaller sizes for tests:
`make(d=64, f=256, batch=2, seq=8)`.
"""
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int, f: int):
        super().__init__()
        self.fc1 = nn.Linear(d, f, bias=True)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(f, d, bias=True)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def make(d: int = 4096, f: int = 16384, batch: int = 8, seq: int = 512,
         dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    """(model, example_inputs) with deterministic weights (std 0.02, biases small)."""
    torch.manual_seed(seed)
    model = MLP(d, f)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    model = model.to(dtype).eval()
    x = torch.randn(batch, seq, d, dtype=dtype)
    return model, (x,)


def make_decode(**kw):
    """Decode-sized MLP: 16 sequences × 1 token (weight streaming dominates)."""
    return make(**{"batch": 16, "seq": 1, **kw})


def make_dynamic(max_batch: int = 64, max_seq: int = 4096, **kw):
    """The MLP for any batch in 1..max_batch and sequence in 1..max_seq (dims B and S)."""
    model, inputs = make(**kw)
    dims = ({0: torch.export.Dim("B", min=1, max=max_batch),
             1: torch.export.Dim("S", min=1, max=max_seq)},)
    return model, inputs, dims
