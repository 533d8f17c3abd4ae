"""Weights a model dequantizes from FP8 stay FP8 in the bundle.

A checkpoint that holds its linears' weights in float8_e4m3fn with a scale per output row (or
per tensor) dequantizes them in its forward: `F.linear(x, w8.to(x.dtype) * scale)`. The weight
and the scale are constants, so constant folding computes a bf16 weight from them, and the
bundle would stream twice the bytes. Folding records where such a weight came from instead
(Constant.fp8: the e4m3 tensor and an f32 scale per row); the passes that stack weights (QKV,
gate/up) stack those parts alike; and passes/quantize.keep_checkpoint_fp8 gives each GEMM that
reads such a weight the e4m3 tensor and its scales (the kernels of --precision fp8-weights):
e4m3 -> bf16 is exact, and the scale applied to the f32 accumulator rounds less than the
model's bf16 product w8 * scale.

Recognized (anything else folds as before): a cast of an e4m3 constant to a float type (scale
1), that times a constant scale of one value or one per row ([N, 1]), in either order, and
float-to-float casts of such a product.
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.ops import Op


def parts_of_fold(node, ins, known_parts: dict, consts: dict) -> tuple | None:
    """(e4m3 tensor, f32 scales [N]) of the value `node` computes from the constants `ins`
    (its inputs, renamed as folding goes), or None. `known_parts`: value name -> parts of the
    constants folded so far; `consts`: value name -> tensor of every constant."""
    import torch

    if node.op == Op.CAST and len(ins) == 1 and node.output.dtype.is_float:
        src = ins[0]
        if src.dtype == DType.F8E4M3 and len(src.shape) >= 2:
            t = consts[src.name]
            return t, torch.ones(t.shape[:-1], dtype=torch.float32)
        return known_parts.get(src.name)  # float -> float: the same values, rounded
    if node.op == Op.MUL and len(ins) == 2 and node.attrs.scalar is None:
        for w, s in (ins, ins[::-1]):
            parts = known_parts.get(w.name)
            if parts is None or s.name not in consts or tuple(node.output.shape) != tuple(w.shape):
                continue
            q, scale = parts
            rows = _row_scales(consts[s.name], tuple(w.shape))
            if rows is not None:
                return q, scale * rows
    if node.op == Op.MUL and len(ins) == 1 and isinstance(node.attrs, O.BinaryAttrs) \
            and node.attrs.scalar is not None and ins[0].name in known_parts:
        q, scale = known_parts[ins[0].name]
        return q, scale * float(node.attrs.scalar)
    return None


def _row_scales(s, shape: tuple):
    """`s` as f32 scales per row of a `shape` weight ([.., N, K]) when it is one value or one
    per row ([.., N, 1]); None when it scales anything else (columns, elements)."""
    import torch

    rows = shape[:-1]
    if s.numel() == 1:
        return torch.full(rows, float(s.reshape(-1)[0]), dtype=torch.float32)
    if s.dim() == len(shape) and s.shape[-1] == 1 and tuple(s.shape[:-1]) == rows:
        return s.reshape(rows).float()
    return None


def stacked(parts: list) -> tuple | None:
    """The parts of weights stacked along their rows (torch.cat dim 0), None unless all have
    parts."""
    import torch

    if not parts or any(p is None for p in parts):
        return None
    return (torch.cat([p[0] for p in parts], 0).contiguous(),
            torch.cat([p[1] for p in parts], 0).contiguous())


def rows_of(parts, rows: slice) -> tuple | None:
    """The parts of rows `rows` (the last-but-one dim) of a weight."""
    if parts is None:
        return None
    return parts[0][..., rows, :], parts[1][..., rows]


def interleaved(gate, up, interleave) -> tuple | None:
    """The parts of `interleave(gate weight, up weight)` (passes/fuse_swiglu.py: row blocks)."""
    if gate is None or up is None:
        return None
    scales = interleave(gate[1][..., None], up[1][..., None])[..., 0]
    return interleave(gate[0].view(_u8()), up[0].view(_u8())).view(gate[0].dtype), \
        scales.contiguous()


def _u8():
    import torch

    return torch.uint8  # e4m3 tensors are moved as bytes: stack/reshape of float8 may refuse
