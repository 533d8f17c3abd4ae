"""Example model: one Llama-3-8B decoder layer written with plain torch.nn, in bf16.

RMSNorm → q/k/v projections → RoPE (rotate-half, precomputed cos/sin) → causal GQA
attention → o_proj + residual → RMSNorm → SwiGLU MLP + residual. Full size: d=4096, 32 query
heads, 8 kv heads, head dim 128, ffn 14336, input 1×2048×4096. Small sizes for tests:
`make(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, seq=16)`.
"""
import torch
import torch.nn.functional as F
from torch import nn


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(seq: int, head_dim: int, theta: float):
    """cos/sin tables [seq, head_dim] of the rotate-half rotary embedding (computed in f32)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, head_dim, ffn, max_seq, theta=500000.0, eps=1e-5):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_norm = nn.RMSNorm(d, eps=eps)
        self.q_proj = nn.Linear(d, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, d, bias=False)
        self.post_norm = nn.RMSNorm(d, eps=eps)
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)
        cos, sin = rope_tables(max_seq, head_dim, theta)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:s], self.sin[:s]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        attn = attn.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        x = x + self.o_proj(attn)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def make(d: int = 4096, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
         ffn: int = 14336, batch: int = 1, seq: int = 2048,
         dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    """(model, example_inputs) with deterministic weights (std 0.02 so activations stay O(1))."""
    torch.manual_seed(seed)
    model = LlamaBlock(d, heads, kv_heads, head_dim, ffn, max_seq=seq)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
    model = model.to(dtype).eval()
    x = torch.randn(batch, seq, d, dtype=dtype)
    return model, (x,)


def make_decode(**kw):
    """Decode-sized step: 16 sequences × 1 new token each (no KV cache in this example: every
    sequence attends to its one token). Weight streaming (436 MB at full size) dominates."""
    return make(**{"batch": 16, "seq": 1, **kw})


def make_dynamic(max_batch: int = 64, max_seq: int = 4096, batch: int = 1, seq: int = 2048,
                 **kw):
    """The block for any batch in 1..max_batch and sequence in 1..max_seq (one bundle, dims
    named B and S); rotary tables sized for max_seq."""
    model, (x,) = make(batch=batch, seq=max_seq, **kw)
    x = x[:, :seq].contiguous()
    dims = ({0: torch.export.Dim("B", min=1, max=max_batch),
             1: torch.export.Dim("S", min=1, max=max_seq)},)
    return model, (x,), dims
