"""Small transformer models in plain torch for the ONNX tests: a GPT-2-like decoder (causal
mask added, or filled with masked_fill), a BERT-like encoder, their block."""
import math, torch, torch.nn as nn, torch.nn.functional as F

class Attn(nn.Module):
    def __init__(s, d=64, h=4, causal=True, maxlen=64, fill=False):
        super().__init__(); s.h = h; s.qkv = nn.Linear(d, 3*d); s.o = nn.Linear(d, d); s.causal = causal; s.fill = fill
        s.register_buffer("addmask", torch.full((maxlen, maxlen), float("-inf")).triu(1), persistent=False)
        s.register_buffer("bias", torch.tril(torch.ones(maxlen, maxlen, dtype=torch.bool)).view(1,1,maxlen,maxlen), persistent=False)
    def forward(s, x):
        B, S, D = x.shape
        q, k, v = s.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, S, s.h, D // s.h).transpose(1, 2) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // s.h)
        if s.causal and s.fill:
            w = w.masked_fill(~s.bias[:, :, :S, :S], float("-inf"))
        elif s.causal:
            w = w + s.addmask[:S, :S]
        w = torch.softmax(w, dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(B, S, D)
        return s.o(y)

class Block(nn.Module):
    def __init__(s, d=64, h=4, causal=True, gelu="tanh", fill=False):
        super().__init__(); s.ln1 = nn.LayerNorm(d); s.ln2 = nn.LayerNorm(d); s.attn = Attn(d, h, causal, fill=fill)
        s.fc = nn.Linear(d, 4*d); s.proj = nn.Linear(4*d, d); s.gelu = gelu
    def forward(s, x):
        x = x + s.attn(s.ln1(x))
        return x + s.proj(F.gelu(s.fc(s.ln2(x)), approximate=s.gelu))

class GPT(nn.Module):
    def __init__(s, vocab=100, d=64, h=4, n=2, maxlen=64, fill=False):
        super().__init__(); s.wte = nn.Embedding(vocab, d); s.wpe = nn.Embedding(maxlen, d)
        s.blocks = nn.ModuleList(Block(d, h, True, fill=fill) for _ in range(n)); s.ln = nn.LayerNorm(d); s.head = nn.Linear(d, vocab, bias=False)
    def forward(s, input_ids):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = s.wte(input_ids) + s.wpe(pos)
        for b in s.blocks: x = b(x)
        return s.head(s.ln(x))

class Bert(nn.Module):
    def __init__(s, vocab=100, d=64, h=4, n=2):
        super().__init__(); s.wte = nn.Embedding(vocab, d); s.tt = nn.Embedding(2, d)
        s.blocks = nn.ModuleList(Block(d, h, False, "none") for _ in range(n)); s.ln = nn.LayerNorm(d)
    def forward(s, input_ids, token_type_ids):
        x = s.ln(s.wte(input_ids) + s.tt(token_type_ids))
        for b in s.blocks: x = b(x)
        return x
