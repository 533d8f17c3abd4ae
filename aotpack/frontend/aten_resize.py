"""aten → IR rules for resizing: nearest-neighbour upsampling by whole factors
(`F.interpolate(x, scale_factor=2)`, `nn.Upsample`: FPN, U-Net and YOLO necks) is a
broadcast, one copy kernel: x [N, C, H, W] viewed as [N, C, H, 1, W, 1], expanded to
[N, C, H, sh, W, sw] and viewed as [N, C, H·sh, W·sw]. Other ratios and the other modes
(bilinear, bicubic) are refused; on weights alone they fold (translate._fold_constant_call).
"""
from __future__ import annotations

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
        if not all(isinstance(d, int) for d in ins + outs) or any(
                o % i for i, o in zip(ins, outs)):
            raise Unsupported(f"nearest resizing {list(ins)} -> {list(outs)} (only by whole "
                              f"factors of static sizes)")
        lead = tuple(x.shape[:-spatial])
        split = lead + tuple(d for i in ins for d in (i, 1))
        wide = lead + tuple(d for i, o in zip(ins, outs) for d in (i, o // i))
        v = cx.emit(Op.VIEW, [x], O.ViewAttrs(split))
        e = cx.emit(Op.EXPAND, [v], O.ExpandAttrs(wide))
        c = cx.emit(Op.COPY, [e], O.NoAttrs())
        return cx.emit(Op.VIEW, [c], O.ViewAttrs(tuple(out)), final=True)
    return rule


RULES = {
    "aten.upsample_nearest1d.vec": _nearest(1), "aten.upsample_nearest1d.default": _nearest(1),
    "aten.upsample_nearest2d.vec": _nearest(2), "aten.upsample_nearest2d.default": _nearest(2),
    "aten.upsample_nearest3d.vec": _nearest(3), "aten.upsample_nearest3d.default": _nearest(3),
}
