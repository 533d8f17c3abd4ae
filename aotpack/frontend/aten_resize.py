"""aten → IR rules for resizing. Nearest-neighbour upsampling by whole factors
(`F.interpolate(x, scale_factor=2)`, `nn.Upsample`: FPN, U-Net and YOLO necks; static
sizes, or dynamic ones the factor divides exactly, 4*h -> 8*h) is a
broadcast, one copy kernel: x [N, C, H, W] viewed as [N, C, H, 1, W, 1], expanded to
[N, C, H, sh, W, sw] and viewed as [N, C, H·sh, W·sw]. Bilinear: `_bilinear` (dynamic sizes by
whole factors: `_upsample_axis`). Nearest by
other ratios is refused (bicubic reaches the frontend decomposed by torch's export); on weights
alone any resize folds (translate._fold_constant_call).
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _nearest(spatial: int):
    def rule(cx, x, output_size=None, scale_factors=None, *rest):
        if not isinstance(x, Value):
            raise Unsupported("resizing a Python value")
        out = cx.out_shape()
        ins, outs = tuple(x.shape[-spatial:]), tuple(out[-spatial:])
        factors = [_whole_factor(i, o) for i, o in zip(ins, outs)]
        if None in factors and all(isinstance(d, int) for d in ins + outs):
            return _nearest_gather(cx, x, spatial, ins, outs, scale_factors)
        if None in factors:
            raise Unsupported(f"nearest resizing {list(ins)} -> {list(outs)} (on dynamic "
                              f"sides only by whole factors)")
        lead = tuple(x.shape[:-spatial])
        split = lead + tuple(d for i in ins for d in (i, 1))
        wide = lead + tuple(d for i, f in zip(ins, factors) for d in (i, f))
        v = cx.emit(Op.VIEW, [x], O.ViewAttrs(split))
        e = cx.emit(Op.EXPAND, [v], O.ExpandAttrs(wide))
        c = cx.emit(Op.COPY, [e], O.NoAttrs())
        return cx.emit(Op.VIEW, [c], O.ViewAttrs(tuple(out)), final=True)
    return rule


def _nearest_gather(cx, x: Value, spatial: int, ins, outs, scale_factors):
    """Nearest resizing of static sides by any ratio: per axis, the source row of output row
    j is min(floor(j * s), n - 1), s = 1 / scale_factor when given, else n / new (torch's
    rule); a row gather by those constant indices."""
    import torch

    rank = len(x.shape)
    for k, (n, new) in enumerate(zip(ins, outs)):
        axis = rank - spatial + k
        if n == new:
            continue
        scale = 1.0 / scale_factors[k] if scale_factors else n / new
        j = torch.arange(new, dtype=torch.float64)
        x = gather_axis(cx, x, axis, (j * scale).floor().long().clamp(max=n - 1))
    return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)


def gather_axis(cx, x: Value, axis: int, src) -> Value:
    """x with its rows along `axis` picked by the constant indices `src` (a torch or numpy
    integer vector, each in range): a row gather."""
    import torch

    from aotpack.frontend.aten_logic import leading_grid, rows_table

    src = torch.as_tensor(src, dtype=torch.int64).contiguous()
    ids = cx.add_constant("rows", src)
    table, flat = rows_table(cx, x, leading_grid(cx, x, axis, [ids]))
    rows = cx.emit(Op.EMBEDDING, [table, flat], O.NoAttrs())
    shape = tuple(x.shape[:axis]) + (len(src),) + tuple(x.shape[axis + 1:])
    return cx.emit(Op.VIEW, [rows], O.ViewAttrs(shape))


def _whole_factor(size, new):
    """f with new == f * size for every value of the dims (4*h -> 8*h: 2), else None."""
    from aotpack.ir.sym import term_quotient

    f = term_quotient(new, size)
    return f if isinstance(f, int) and f >= 1 and f * size == new else None


RULES = {
    "aten.upsample_nearest1d.vec": _nearest(1), "aten.upsample_nearest1d.default": _nearest(1),
    "aten.upsample_nearest2d.vec": _nearest(2), "aten.upsample_nearest2d.default": _nearest(2),
    "aten.upsample_nearest3d.vec": _nearest(3), "aten.upsample_nearest3d.default": _nearest(3),
}


def _bilinear(cx, x, output_size=None, align_corners=False, scale_factors=None):
    """Bilinear resizing (DPT / Depth-Anything and SegFormer heads) as torch computes it,
    one axis after the other: out = x[i0] * w0 + x[i1] * w1 along H, then along W, with the
    source rows i0, i1 and weights constants (two row gathers and one elementwise kernel per
    axis, computed in f32)."""
    if not isinstance(x, Value) or len(x.shape) != 4:
        raise Unsupported("bilinear resizing of other than a 4-D tensor")
    out = tuple(cx.out_shape())
    wide = x if x.dtype == DType.F32 else cx.emit(Op.CAST, [x], O.CastAttrs(DType.F32))
    if not all(isinstance(d, int) for d in tuple(x.shape[2:]) + out[2:]):
        factors = [_whole_factor(x.shape[a], out[a]) for a in (2, 3)]
        if align_corners or None in factors:
            raise Unsupported("bilinear resizing of dynamic sizes other than by whole factors "
                              "with align_corners=False (export with static image sizes)")
        for axis, factor in zip((2, 3), factors):
            wide = _upsample_axis(cx, wide, axis, factor)
        return cx.emit(Op.CAST, [wide], O.CastAttrs(x.dtype), final=True)
    for axis in (2, 3):
        scale = scale_factors[axis - 2] if scale_factors else None
        i0, i1, w1 = _taps(x.shape[axis], out[axis], bool(align_corners), scale)
        wide = _blend(cx, wide, axis, i0, i1, w1)
    return cx.emit(Op.CAST, [wide], O.CastAttrs(x.dtype), final=True)


def _upsample_axis(cx, x: Value, axis: int, factor: int) -> Value:
    """Bilinear upsampling by a whole factor along `axis` for any size n: output row
    factor*j + r reads rows j + floor(d) and j + floor(d) + 1 at the weight d - floor(d),
    d = (r + 0.5)/factor - 0.5, the same for every j; torch's clamps at the two borders are
    the input with its first and last rows repeated (n + 2 rows). Slices, one weighted sum per
    r, then the rows interleaved: no table that depends on n."""
    import math

    if factor == 1:
        return x
    n = x.shape[axis]
    first = cx.emit(Op.SLICE, [x], O.SliceAttrs(axis, 0, 1, 1))
    last = cx.emit(Op.SLICE, [x], O.SliceAttrs(axis, n - 1, n, 1))
    padded = cx.emit(Op.CAT, [first, x, last], O.DimAttrs((axis,)))
    rows = []
    for r in range(factor):
        d = (r + 0.5) / factor - 0.5
        lo = math.floor(d)
        w = d - lo
        a = cx.emit(Op.SLICE, [padded], O.SliceAttrs(axis, 1 + lo, 1 + lo + n, 1))
        b = cx.emit(Op.SLICE, [padded], O.SliceAttrs(axis, 2 + lo, 2 + lo + n, 1))
        y = cx.emit(Op.ADD, [cx.emit(Op.MUL, [a], O.BinaryAttrs(scalar=1.0 - w)),
                             cx.emit(Op.MUL, [b], O.BinaryAttrs(scalar=w))], O.BinaryAttrs())
        rows.append(cx.emit(Op.UNSQUEEZE, [y], O.DimAttrs((axis + 1,))))
    both = cx.emit(Op.CAT, rows, O.DimAttrs((axis + 1,)))
    shape = tuple(x.shape[:axis]) + (n * factor,) + tuple(x.shape[axis + 1:])
    return cx.emit(Op.VIEW, [both], O.ViewAttrs(shape))


def _taps(size: int, new: int, align_corners: bool, scale_factor):
    """Source rows and the second one's weight of each output row (torch's formula)."""
    import torch

    dst = torch.arange(new, dtype=torch.float64)
    if align_corners:
        src = dst * ((size - 1) / (new - 1) if new > 1 else 0.0)
    else:
        ratio = 1.0 / scale_factor if scale_factor else size / new
        src = ((dst + 0.5) * ratio - 0.5).clamp(min=0)
    i0 = src.floor().long().clamp(max=size - 1)
    i1 = (i0 + 1).clamp(max=size - 1)
    return i0, i1, (src - i0).float()


def _blend(cx, x: Value, axis: int, i0, i1, w1) -> Value:
    from aotpack.frontend.aten_logic import leading_grid, rows_table

    shape = tuple(x.shape[:axis]) + (len(w1),) + tuple(x.shape[axis + 1:])
    weight_shape = (len(w1),) + (1,) * (len(x.shape) - axis - 1)
    picked = []
    for idx in (i0, i1):
        ids = cx.add_constant("rows", idx.contiguous())
        table, flat = rows_table(cx, x, leading_grid(cx, x, axis, [ids]))
        rows = cx.emit(Op.EMBEDDING, [table, flat], O.NoAttrs())
        picked.append(cx.emit(Op.VIEW, [rows], O.ViewAttrs(shape)))
    w = cx.add_constant("w1", w1.reshape(weight_shape).contiguous())
    w0 = cx.add_constant("w0", (1 - w1).reshape(weight_shape).contiguous())
    a = cx.emit(Op.MUL, [picked[0], w0], O.BinaryAttrs())
    b = cx.emit(Op.MUL, [picked[1], w], O.BinaryAttrs())
    return cx.emit(Op.ADD, [a, b], O.BinaryAttrs())


RULES.update({"aten.upsample_bilinear2d.vec": _bilinear,
              "aten.upsample_bilinear2d.default": _bilinear})
