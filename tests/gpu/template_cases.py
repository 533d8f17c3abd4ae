"""Small plain-torch modules, each exercising one kernel template (aotpack/kernels/templates.py)
with dims that vary at run time, for tests/gpu/test_kernel_templates_gpu.py (built and run on
the GPU) and tests/test_gpu_suite_builds.py (built and verified with the CPU references).

Every factory is a model spec (`tests/gpu/template_cases.py:make_<name>`): it returns (model,
example inputs, dynamic dims), weights seeded, in bf16 unless the case says otherwise. The
dims are as small as still take each path (ragged tiles, split-K, TMA and pointer stores);
the row-like dims span 1..8192 so that one bundle holds every size bucket of its template.
`CASES` says what kernels each bundle must contain and which extra sizes to run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

BF16 = torch.bfloat16
MAX_ROWS = 8192
MAX_SEQ = 2048
# sizes that are tiny, ragged against every tile (1, 7, 77, 129, 1000) and large
ROW_SIZES = (1, 7, 77, 129, 1000, MAX_ROWS)
SEQ_SIZES = (1, 7, 77, 129, 1000, MAX_SEQ)


@dataclass(frozen=True)
class Case:
    """`expect`: tokens that must each appear among the bundle's kernels (their fused_ops or
    entry names), so the case cannot pass without the template it is about. `sizes`: values
    run per dim on top of every bucket of the variant table and the ranges' ends."""

    name: str
    expect: tuple[str, ...]
    sizes: dict = field(default_factory=lambda: {"R": ROW_SIZES})
    options: dict = field(default_factory=dict)  # aotpack.build options (e.g. precision)
    min_torch: tuple = ()  # a torch older than this cannot export it with its dynamic dims

    @property
    def spec_function(self) -> str:
        return f"make_{self.name}"


def _rows(name: str = "R", hi: int = MAX_ROWS):
    return torch.export.Dim(name, min=1, max=hi)


def _init(model: nn.Module, dtype=BF16) -> nn.Module:
    """Weights ~ N(0, 0.05) (norm weights ~ 1 + N(0, 0.1)), then cast: activations stay O(1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1 and not name.endswith("bias"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.05)
    return model.to(dtype).eval()


# ----------------------------------------------------------------------------------- GEMM
def _tail(kind: str, y, extra, vec):
    if kind == "none" or kind == "bias":
        return y
    if kind == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if kind == "gelu_erf":
        return F.gelu(y)
    if kind == "silu":
        return F.silu(y)
    if kind == "relu":
        return F.relu(y)
    if kind == "residual":
        return y + extra
    if kind == "mul":
        return y * extra
    if kind == "scale":
        return y * 0.5
    if kind == "scale_vector":
        return y * vec
    if kind == "scale_input":
        return y * extra  # an f32 [N] graph input: a per-channel EpScale
    if kind == "cast":
        return y.float()
    if kind == "chain":  # bias -> gelu -> residual -> scale: one epilogue of four steps
        return (F.gelu(y, approximate="tanh") + extra) * 0.25
    raise ValueError(kind)


class GemmTail(nn.Module):
    """y = x @ W^T [+ b], then one epilogue `kind` (see _tail)."""

    def __init__(self, k: int, n: int, bias: bool, kind: str):
        super().__init__()
        self.lin = nn.Linear(k, n, bias=bias)
        self.kind = kind
        self.register_buffer("vec", 0.5 + torch.rand(n))

    def forward(self, x, extra=None):
        return _tail(self.kind, self.lin(x), extra, self.vec)


def _gemm(kind: str, k: int = 256, n: int = 200, bias: bool = True, dtype=BF16, seed: int = 0):
    torch.manual_seed(seed)
    model = _init(GemmTail(k, n, bias, kind), dtype)
    model.vec = model.vec.float() if kind == "scale_vector" else model.vec.to(dtype)
    r = _rows()
    x = torch.randn(5, k, dtype=dtype)
    if kind in ("residual", "mul", "chain"):
        return model, (x, torch.randn(5, n, dtype=dtype)), ({0: r}, {0: r})
    if kind == "scale_input":
        return model, (x, 0.5 + torch.rand(n)), ({0: r}, None)
    return model, (x,), ({0: r},)


def make_gemm_plain():
    return _gemm("none", bias=False)


def make_gemm_bias():
    return _gemm("bias")


def make_gemm_gelu_tanh():
    return _gemm("gelu_tanh")


def make_gemm_gelu_erf():
    return _gemm("gelu_erf")


def make_gemm_silu():
    return _gemm("silu", bias=False)


def make_gemm_relu():
    return _gemm("relu")


def make_gemm_residual():
    return _gemm("residual", bias=False)


def make_gemm_mul():
    return _gemm("mul")


def make_gemm_scale():
    return _gemm("scale")


def make_gemm_scale_vector():
    return _gemm("scale_vector", bias=False)


def make_gemm_scale_input():
    return _gemm("scale_input")


def make_gemm_cast():
    return _gemm("cast")


def make_gemm_chain():
    return _gemm("chain")


def make_gemm_f16():
    return _gemm("gelu_tanh", dtype=torch.float16)


def make_gemm_ragged():
    """N = 100 (a 200-byte output row: no TMA store) and K = 72 (not a multiple of BK)."""
    return _gemm("bias", k=72, n=100)


def make_gemm_few_k():
    """ConvNeXt's fc1 (K = 96 -> N = 384, erf GELU) at up to 60k rows: two persistent CTAs
    per SM, BK = 32, registers capped (gemm_heuristic.few_k_steps)."""
    torch.manual_seed(0)
    model = _init(GemmTail(96, 384, True, "gelu_erf"))
    return model, (torch.randn(5, 96, dtype=BF16),), ({0: _rows(hi=60000)},)


def make_gemm_splitk():
    """A long K and a narrow N: decode-sized M splits K over several CTAs (partials + reduce)."""
    return _gemm("bias", k=4096, n=128)


class ProjectNorm(nn.Module):
    """A pre-norm layer's output projection: h = x @ W^T + residual, then RMSNorm(h); both
    returned (h is the residual stream). A GemmNormOp: at decode sizes split-K's reduce
    normalizes the rows, at prefill sizes the norm kernel follows the GEMM."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.lin = nn.Linear(k, n, bias=False)
        self.norm = nn.RMSNorm(n, eps=1e-5)

    def forward(self, x, residual):
        h = self.lin(x) + residual
        return h, self.norm(h)


def make_gemm_norm():
    """N = 2100: the fused reduce walks two column chunks of 2048."""
    torch.manual_seed(0)
    model = _init(ProjectNorm(4096, 2100))
    r = _rows()
    return model, (torch.randn(5, 4096, dtype=BF16), torch.randn(5, 2100, dtype=BF16)), (
        {0: r}, {0: r})


class SwiGLU(nn.Module):
    """h + down(silu(gate(h)) * up(h)): gate and up become one GEMM with EpSwiGLU."""

    def __init__(self, d: int, f: int):
        super().__init__()
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, h):
        return h + self.down(F.silu(self.gate(h)) * self.up(h))


def make_gemm_swiglu():
    torch.manual_seed(0)
    model = _init(SwiGLU(128, 192))
    return model, (torch.randn(5, 128, dtype=BF16),), ({0: _rows()},)


def _fp8_exact(model: nn.Module) -> nn.Module:
    """Every Linear weight made exactly representable by --precision fp8-weights: each row
    e4m3 values times a power of two, its largest magnitude 448 times that power (what the
    build's scale amax / 448 then recovers exactly), so the FP8 bundle must match eager
    within the usual bf16 tolerances: what is tested is the kernels, not FP8 rounding."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                w = mod.weight.float()
                amax = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
                scale = torch.exp2(torch.floor(torch.log2(amax / 448.0)))
                q = (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()
                top = w.abs().argmax(dim=1, keepdim=True)
                q.scatter_(1, top, 448.0 * torch.sign(w.gather(1, top)))
                mod.weight.copy_((q * scale).to(mod.weight.dtype))
    return model


def make_fp8_gemm_bias():
    """A decode-to-prefill GEMM on FP8 weights: split-K for small M, the tile kernel above."""
    model, inputs, dims = _gemm("bias", k=512, n=200)
    return _fp8_exact(model), inputs, dims


def make_fp8_swiglu():
    """SwiGLU MLP on FP8 weights: the scale per accumulator column before the pairing."""
    model, inputs, dims = make_gemm_swiglu()
    return _fp8_exact(model), inputs, dims


def make_fp8_gemm_f16():
    model, inputs, dims = _gemm("gelu_tanh", k=256, n=136, dtype=torch.float16)
    return _fp8_exact(model), inputs, dims


# ------------------------------------------------------------------------------ attention
class Attention(nn.Module):
    def __init__(self, causal: bool, scale: float | None = None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale,
                                              enable_gqa=q.shape[1] != k.shape[1])


def _attention(causal: bool, d: int, hq: int = 4, hkv: int = 4, cross: bool = False,
               scale: float | None = None, b: int = 2):
    torch.manual_seed(0)
    s = torch.export.Dim("S", min=1, max=MAX_SEQ)
    t = torch.export.Dim("T", min=1, max=MAX_SEQ) if cross else s
    q = torch.randn(b, hq, 33, d, dtype=BF16)
    kv = [torch.randn(b, hkv, 45 if cross else 33, d, dtype=BF16) for _ in range(2)]
    return Attention(causal, scale).eval(), (q, *kv), ({2: s}, {2: t}, {2: t})


def make_attention_causal_d64():
    return _attention(True, 64)


def make_attention_causal_d128():
    return _attention(True, 128)


def make_attention_full_d64():
    return _attention(False, 64, scale=0.2)


def make_attention_full_d128():
    return _attention(False, 128)


def make_attention_gqa_causal_d128():
    return _attention(True, 128, hq=8, hkv=2)


def make_attention_gqa_full_d64():
    return _attention(False, 64, hq=8, hkv=2, b=1)


def make_attention_cross_d64():
    """Queries S and keys T vary independently (S != T)."""
    return _attention(False, 64, cross=True)


def make_attention_causal_d80():
    """A head dim that is no power of two: zero-padded to a 128-wide tile."""
    return _attention(True, 80)


def make_attention_full_d256():
    return _attention(False, 256, hq=2, hkv=1, b=1)


def make_attention_cross_gqa_d128():
    return _attention(False, 128, hq=8, hkv=4, cross=True, b=1)


class MaskedAttention(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=q.shape[1] != k.shape[1])


def _masked(mask_shape, dtype, d=64, hq=4, hkv=4, b=2):
    """A run-time mask input (sizes S or T follow the dims); the masked attention kernel."""
    torch.manual_seed(0)
    s, t = torch.export.Dim("S", min=1, max=MAX_SEQ), torch.export.Dim("T", min=1, max=MAX_SEQ)
    q = torch.randn(b, hq, 33, d, dtype=BF16)
    kv = [torch.randn(b, hkv, 45, d, dtype=BF16) for _ in range(2)]
    sizes = {"S": 33, "T": 45}
    shape = [sizes.get(n, n) for n in mask_shape]
    mask = (torch.rand(shape) > 0.3) if dtype == torch.bool else torch.randn(shape).to(dtype)
    mask_dims = {i: {"S": s, "T": t}[n] for i, n in enumerate(mask_shape) if n in sizes}
    return MaskedAttention().eval(), (q, *kv, mask), ({2: s}, {2: t}, {2: t}, mask_dims)


def make_attention_mask_padding():
    """A padding mask [B, 1, 1, T] (transformers' attention_mask, broadcast)."""
    return _masked((2, 1, 1, "T"), torch.bool)


def make_attention_mask_bias_gqa_d128():
    """An additive per-head bias [1, H, S, T] (ALiBi / relative positions), GQA."""
    return _masked((1, 8, "S", "T"), BF16, d=128, hq=8, hkv=2, b=1)


def make_attention_mla_d192_dv128():
    """DeepSeek-V3's MLA shape: keys of 192 (padded to a 256-wide tile), values of 128, causal;
    the masked kernel without a mask."""
    torch.manual_seed(0)
    s = torch.export.Dim("S", min=1, max=MAX_SEQ)
    q, k = (torch.randn(1, 4, 33, 192, dtype=BF16) for _ in range(2))
    v = torch.randn(1, 4, 33, 128, dtype=BF16)
    return Attention(True, 192 ** -0.5).eval(), (q, k, v), ({2: s}, {2: s}, {2: s})


class CappedAttention(nn.Module):
    """Gemma-2's eager attention written out: scores soft-capped by tanh, then an optional
    additive mask, an f32 softmax (the masked kernel's cap; MASK_KIND 0 without a mask)."""

    def __init__(self, cap: float):
        super().__init__()
        self.cap = cap

    def forward(self, q, k, v, mask=None):
        # K/V repeated per query head as transformers' repeat_kv does (expand + reshape):
        # torch 2.11's export refuses repeat_interleave over a dynamic T
        b, hkv, t, d = k.shape
        group = q.shape[1] // hkv
        k, v = (x[:, :, None].expand(b, hkv, group, t, d).reshape(b, hkv * group, t, d)
                for x in (k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5
        scores = torch.tanh(scores / self.cap) * self.cap
        if mask is not None:
            scores = scores + mask
        return torch.matmul(torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype), v)


def make_attention_softcap_gqa_d128():
    torch.manual_seed(0)
    s, t = torch.export.Dim("S", min=1, max=MAX_SEQ), torch.export.Dim("T", min=1, max=MAX_SEQ)
    q = torch.randn(1, 8, 33, 128, dtype=BF16) * 4  # scores the cap bends
    kv = [torch.randn(1, 2, 45, 128, dtype=BF16) for _ in range(2)]
    return CappedAttention(3.0).eval(), (q, *kv), ({2: s}, {2: t}, {2: t})


def make_attention_softcap_mask_d64():
    torch.manual_seed(0)
    s, t = torch.export.Dim("S", min=1, max=MAX_SEQ), torch.export.Dim("T", min=1, max=MAX_SEQ)
    q = torch.randn(2, 4, 33, 64, dtype=BF16) * 4
    kv = [torch.randn(2, 4, 45, 64, dtype=BF16) for _ in range(2)]
    mask = torch.randn(2, 1, 33, 45).to(BF16)
    return CappedAttention(5.0).eval(), (q, *kv, mask), ({2: s}, {2: t}, {2: t}, {2: s, 3: t})


class AlibiAttention(nn.Module):
    """BLOOM's eager attention: baddbmm of an ALiBi bias over [B*H, S, T] scores in f32,
    rounded to bf16, viewed [B, H, S, T] plus the causal + padding mask, f32 softmax, bmm.
    The terms become one f32 mask operand of the masked kernel (passes/attention_terms.py)."""

    def forward(self, q, k, v, alibi, pad):
        b, h, s, d = q.shape
        q3, k3, v3 = (x.reshape(b * h, s, d) for x in (q, k, v))
        scores = alibi.reshape(b * h, 1, s).float().baddbmm(
            q3.float(), k3.transpose(1, 2).float(), alpha=d ** -0.5).to(q.dtype)
        keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()[None, None] \
            & pad.bool()[:, None, None, :]
        mask = torch.where(keep, 0.0, torch.finfo(q.dtype).min).to(q.dtype)
        p = torch.softmax((scores.view(b, h, s, s) + mask).float(), -1).to(q.dtype)
        return torch.bmm(p.view(b * h, s, s), v3).view(b, h, s, d)


def make_attention_alibi_terms():
    torch.manual_seed(0)
    s = torch.export.Dim("S", min=2, max=MAX_SEQ)
    q, k, v = (torch.randn(2, 4, 33, 64, dtype=BF16) for _ in range(3))
    slopes = 2.0 ** -torch.arange(1, 5)
    alibi = (slopes[None, :, None, None] * torch.arange(33)).expand(2, 4, 1, 33).to(BF16)
    pad = torch.ones(2, 33, dtype=torch.long)
    pad[1, 20:] = 0
    return AlibiAttention().eval(), (q, k, v, alibi.contiguous(), pad), \
        ({2: s}, {2: s}, {2: s}, {3: s}, {1: s})


# --------------------------------------------------------------------------- row-wise ops
class RowOp(nn.Module):
    def __init__(self, kind: str, c: int):
        super().__init__()
        self.kind = kind
        if kind == "rmsnorm":
            self.norm = nn.RMSNorm(c, eps=1e-5)
        elif kind == "layernorm":
            self.norm = nn.LayerNorm(c, eps=1e-5)

    def forward(self, x):
        if self.kind in ("rmsnorm", "layernorm"):
            return self.norm(x)
        if self.kind == "rmsnorm_plain":
            return F.rms_norm(x, (x.shape[-1],), eps=1e-6)
        if self.kind == "layernorm_plain":
            return F.layer_norm(x, (x.shape[-1],), eps=1e-5)
        if self.kind == "softmax":
            return torch.softmax(x, dim=-1)
        if self.kind == "log_softmax":
            return torch.log_softmax(x, dim=-1)
        if self.kind == "reduce":
            return x.sum(-1), x.mean(-1), x.amax(-1), x.amin(-1)
        if self.kind == "argmax":  # a vocabulary-wide row: by parts, the last part picks
            return x.float().argmax(-1)
        if self.kind == "reduce_keepdim_3d":  # [B, S, C] -> [B, S, 1]
            return x.mean(-1, keepdim=True), x.amax(-1, keepdim=True)
        raise ValueError(self.kind)


def _rowwise(kind: str, c: int):
    torch.manual_seed(0)
    model = _init(RowOp(kind, c))
    return model, (torch.randn(5, c, dtype=BF16),), ({0: _rows()},)


def make_rmsnorm():
    return _rowwise("rmsnorm", 1024)


def make_rmsnorm_ragged():
    return _rowwise("rmsnorm_plain", 77)


def make_layernorm():
    return _rowwise("layernorm", 768)


def make_layernorm_ragged():
    return _rowwise("layernorm_plain", 129)


def make_softmax():
    return _rowwise("softmax", 1000)


def make_log_softmax():
    return _rowwise("log_softmax", 77)


def make_reduce():
    return _rowwise("reduce", 1000)


def make_argmax_vocab():
    """argmax over a 50,257-column row (ragged parts), rows 1..64: exact ids (first of ties)."""
    torch.manual_seed(0)
    rows = torch.export.Dim("R", min=1, max=64)
    return _init(RowOp("argmax", 50257)), (torch.randn(5, 50257, dtype=BF16),), ({0: rows},)


def make_reduce_3d():
    torch.manual_seed(0)
    model = _init(RowOp("reduce_keepdim_3d", 256))
    s = torch.export.Dim("S", min=1, max=MAX_ROWS // 2)
    return model, (torch.randn(2, 9, 256, dtype=BF16),), ({1: s},)


# ------------------------------------------------------------------------- rope, embedding
def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rope(nn.Module):
    """Rotate-half rotary embedding with tables for the longest sequence, read through [:S]."""

    def __init__(self, d: int, max_seq: int):
        super().__init__()
        inv = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        ang = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())

    def forward(self, x):
        s = x.shape[2]
        return x * self.cos[:s] + _rotate_half(x) * self.sin[:s]


def _rope(d: int):
    torch.manual_seed(0)
    model = Rope(d, MAX_SEQ).to(BF16).eval()
    s = torch.export.Dim("S", min=1, max=MAX_SEQ)
    return model, (torch.randn(2, 4, 17, d, dtype=BF16),), ({2: s},)


def make_rope_d64():
    return _rope(64)


def make_rope_d128():
    return _rope(128)


class Embed(nn.Module):
    def __init__(self, vocab: int, d: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)

    def forward(self, ids):
        return self.emb(ids)


def _embedding(id_dtype, d: int):
    torch.manual_seed(0)
    model = _init(Embed(1000, d))
    ids = torch.randint(0, 1000, (2, 11), dtype=id_dtype)
    ids[0, 0], ids[0, 1] = 0, 999  # the ids tests draw span the whole table
    s = torch.export.Dim("S", min=1, max=MAX_SEQ)
    return model, (ids,), ({1: s},)


def make_embedding():
    return _embedding(torch.int64, 256)


def make_embedding_i32_ragged():
    return _embedding(torch.int32, 72)


# ------------------------------------------------------------------------------ pointwise
class Pointwise(nn.Module):
    """Every unary function of the pointwise kernel, binary ops, and broadcasting of a row
    vector [C] and a column [R, 1] against [R, C]; each output its own fused expression."""

    def forward(self, x, row, col):
        a = x.abs() + 0.5
        return (torch.exp(x * 0.5) - torch.sigmoid(x) * torch.tanh(x),
                torch.log(a) + torch.sqrt(a) * torch.rsqrt(a + 1.0),
                torch.sin(x) * torch.cos(x) + torch.reciprocal(a) - (-x),
                F.silu(x) + F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh"),
                torch.maximum(x, row) * torch.minimum(x, col) + torch.pow(a, 1.5) / (row.abs() + 1.0),
                x.float() * 2.0 + col.float())  # a cast to f32 inside the expression


def make_pointwise():
    torch.manual_seed(0)
    r = _rows()
    inputs = (torch.randn(5, 100, dtype=BF16), torch.randn(100, dtype=BF16),
              torch.randn(5, 1, dtype=BF16))
    return Pointwise().eval(), inputs, ({0: r}, None, {0: r})


# ------------------------------------------------------------------ scatters, sort and topk
class Scatters(nn.Module):
    """Accumulating writes at run-time indices (duplicates everywhere): scatter_add (bf16
    summed in f32), amax over what lands only, index_add along a static dim."""

    def forward(self, x, idx, src, cols):
        return (x.scatter_add(1, idx, src),
                x.scatter_reduce(1, idx, src, "amax", include_self=False),
                x.index_add(1, cols, src, alpha=0.5))


def make_scatter_add():
    torch.manual_seed(0)
    r = _rows()
    idx = torch.randint(0, 64, (5, 16))
    idx[0, 0], idx[0, 1] = 0, 63  # the indices tests draw span the whole dim
    cols = torch.randint(0, 64, (16,))
    cols[0], cols[1] = 0, 63
    inputs = (torch.randn(5, 64, dtype=BF16), idx, torch.randn(5, 16, dtype=BF16), cols)
    return Scatters().eval(), inputs, ({0: r}, {0: r}, {0: r}, None)


class Orders(nn.Module):
    """sort (descending values) and topk of the smallest along a middle dim, of bf16 rows; a
    stable argsort of integers with many ties (exact on both sides)."""

    def forward(self, x, ids):
        return (torch.sort(x, dim=-1, descending=True).values,
                torch.topk(x, 3, dim=1, largest=False).values,
                torch.argsort(ids, dim=-1, stable=True))


def make_sort_topk():
    torch.manual_seed(0)
    r = _rows()
    ids = torch.randint(0, 10, (5, 50))
    return Orders().eval(), (torch.randn(5, 4, 100, dtype=BF16), ids), ({0: r}, {0: r})


# ------------------------------------------------------------------------ grouped GEMM
class Experts(nn.Module):
    """Rows routed to experts by integer ids (exact on both sides: no router to round), sorted
    by expert, one grouped GEMM over the experts' [N, K] weights (nn.Linear's layout: the TMA
    kernel at prefill sizes), back to row order. Empty and ragged groups come from the ids."""

    def __init__(self, experts: int = 8, k: int = 256, n: int = 320):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, n, k))
        self.experts = experts

    def forward(self, x, ids):
        sorted_ids, order = ids.sort(stable=True)
        counts = torch.histc(sorted_ids.float(), self.experts, 0, self.experts - 1)
        offs = counts.cumsum(0).to(torch.int32)
        out = torch._grouped_mm(x[order], self.weight.transpose(1, 2), offs=offs)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        return out[inverse]


def make_grouped_mm():
    torch.manual_seed(0)
    r = _rows()
    ids = torch.randint(0, 8, (100,))
    ids[0], ids[1] = 0, 7
    return _init(Experts()), (torch.randn(100, 256, dtype=BF16), ids), ({0: r}, {0: r})


# ------------------------------------------------------------------------------- the table
_GEMM = ("gemm",)
_ATTN = ("attention",)
_FP8 = {"precision": "fp8-weights"}
CASES = [
    Case("gemm_plain", _GEMM),
    Case("gemm_bias", _GEMM + ("bias",)),
    Case("gemm_gelu_tanh", _GEMM + ("bias", "gelu_tanh")),
    Case("gemm_gelu_erf", _GEMM + ("bias", "gelu_erf")),
    Case("gemm_few_k", _GEMM + ("bias", "gelu_erf"), sizes={"R": (1, 77, 4099, 33000, 60000)}),
    Case("gemm_silu", _GEMM + ("silu",)),
    Case("gemm_relu", _GEMM + ("bias", "relu")),
    Case("gemm_residual", _GEMM + ("add",)),
    Case("gemm_mul", _GEMM + ("bias", "mul")),
    Case("gemm_scale", _GEMM + ("bias", "scale")),
    Case("gemm_scale_vector", _GEMM + ("scale_n",)),
    Case("gemm_scale_input", _GEMM + ("bias", "scale_n")),
    Case("gemm_cast", _GEMM + ("bias",)),
    Case("gemm_chain", _GEMM + ("bias", "gelu_tanh", "add", "scale")),
    Case("gemm_f16", _GEMM + ("bias", "gelu_tanh")),
    Case("gemm_ragged", _GEMM + ("bias",)),
    Case("gemm_splitk", _GEMM + ("bias", "splitk_reduce")),
    Case("gemm_swiglu", _GEMM + ("swiglu", "add")),
    Case("gemm_norm", _GEMM + ("add", "splitk_reduce_norm_kernel", "rmsnorm_kernel")),
    Case("attention_causal_d64", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_causal_d128", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_full_d64", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_full_d128", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_gqa_causal_d128", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_gqa_full_d64", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_cross_d64", _ATTN, {"S": SEQ_SIZES, "T": (1, 77, 1000, MAX_SEQ)}),
    Case("attention_cross_gqa_d128", _ATTN, {"S": (1, 129, MAX_SEQ), "T": (7, 1000)}),
    Case("attention_causal_d80", _ATTN, {"S": SEQ_SIZES}),
    Case("attention_full_d256", _ATTN, {"S": (1, 77, 1000, MAX_SEQ)}),
    Case("attention_mask_padding", _ATTN + ("mask",), {"S": (1, 77, MAX_SEQ),
                                                       "T": (1, 129, 1000, MAX_SEQ)}),
    Case("attention_mask_bias_gqa_d128", _ATTN + ("mask",), {"S": (1, 129, MAX_SEQ),
                                                             "T": (7, 1000)}),
    Case("attention_mla_d192_dv128", _ATTN + ("causal",), {"S": (1, 77, 1000, MAX_SEQ)}),
    Case("attention_softcap_gqa_d128", _ATTN + ("softcap",), {"S": (1, 77, MAX_SEQ),
                                                               "T": (1, 129, 1000)},
         min_torch=(2, 13)),  # torch 2.11: "Constraints violated (T)" in repeat_kv's expand
    Case("attention_softcap_mask_d64", _ATTN + ("mask", "softcap"), {"S": (1, 129, MAX_SEQ),
                                                                     "T": (7, 1000)}),
    Case("attention_alibi_terms", _ATTN + ("mask",), {"S": (2, 77, 1000)},
         min_torch=(2, 13)),  # torch 2.11: "Constraints violated (S)" (built static below)
    Case("rmsnorm", ("rmsnorm",)),
    Case("rmsnorm_ragged", ("rmsnorm",)),
    Case("layernorm", ("layernorm",)),
    Case("layernorm_ragged", ("layernorm",)),
    Case("softmax", ("softmax",)),
    Case("log_softmax", ("softmax",)),
    Case("reduce", ("reduce",)),
    Case("argmax_vocab", ("argmax", "parts"), {"R": (1, 7, 64)}),
    Case("reduce_3d", ("reduce",), {"S": (1, 7, 77, 129, 1000, MAX_ROWS // 2)}),
    Case("rope_d64", ("rope",), {"S": SEQ_SIZES}),
    Case("rope_d128", ("rope",), {"S": SEQ_SIZES}),
    Case("embedding", ("embedding",), {"S": SEQ_SIZES}),
    Case("embedding_i32_ragged", ("embedding",), {"S": SEQ_SIZES}),
    Case("pointwise", ("pointwise",)),
    Case("scatter_add", ("scatter_rows_sum", "scatter_rows_amax")),
    Case("sort_topk", ("sort", "topk"), {"R": (1, 7, 77, 1000, MAX_ROWS)}),
    Case("grouped_mm", ("grouped_mm", "sort", "histc", "inverse_perm")),
    Case("fp8_gemm_bias", _GEMM + ("fp8_weight", "bias"), options=_FP8),
    Case("fp8_swiglu", _GEMM + ("fp8_weight", "swiglu"), options=_FP8),
    Case("fp8_gemm_f16", _GEMM + ("fp8_weight", "gelu_tanh"), options=_FP8),
]

# Static builds of a few cases at one size each (`make_static_<case>_<n>`): constant shapes
# compile differently (sizes as constants, no `when` groups).
STATIC = [("gemm_chain", 1), ("gemm_chain", 77), ("gemm_splitk", 7), ("gemm_swiglu", 8192),
          ("gemm_ragged", 129), ("attention_causal_d128", 129), ("attention_cross_d64", 7),
          ("layernorm_ragged", 1000), ("rmsnorm", 1), ("softmax", 8192), ("rope_d64", 77),
          ("embedding", 1000), ("pointwise", 7), ("attention_alibi_terms", 77),
          ("attention_alibi_terms", 1000),
          ("grouped_mm", 5000)]


def _at_size(factory, n: int):
    """factory's model with inputs whose varying dims are all `n`, and no dynamic dims."""
    model, inputs, dims = factory()
    g = torch.Generator().manual_seed(n)
    out = []
    for x, d in zip(inputs, dims):
        shape = [n if i in (d or {}) else s for i, s in enumerate(x.shape)]
        if x.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(x.dtype))
        else:
            out.append(torch.randint(int(x.min()), int(x.max()) + 1, shape, generator=g,
                                     dtype=x.dtype))
    return model, tuple(out)


def _static_factory(name: str, n: int):
    def make():
        return _at_size(globals()[f"make_{name}"], n)
    make.__name__ = f"make_static_{name}_{n}"
    return make


STATIC_CASES = []
for _name, _n in STATIC:
    globals()[f"make_static_{_name}_{_n}"] = _static_factory(_name, _n)
    _base = next(c for c in CASES if c.name == _name)
    STATIC_CASES.append(Case(f"static_{_name}_{_n}", _base.expect))
