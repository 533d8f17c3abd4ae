"""ONNX operators of image and audio models beyond convolution: Resize, Pad, DepthToSpace, SpaceToDepth, InstanceNormalization, GroupNormalization.

Resize follows the ONNX formulas (coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
exclude_outside) one axis after the other on static sizes: each output row's source rows and
weights are computed here at build time and applied as constant row gathers and one weighted
sum per axis (in f32), as frontend/aten_resize.py does for torch's bilinear. A nearest resize
whose rows repeat by a whole factor is a broadcast copy instead; on a dynamic side only whole
factors are taken (nearest, or linear with half-pixel centers). Pad's constant mode is torch's
constant pad (a zero pad before a convolution joins its padding); reflect, edge and wrap are
row gathers of constant indices. DepthToSpace / SpaceToDepth (PixelShuffle) are a view, a
permute and a copy. Instance and group norms are the torch frontend's group norm.
"""
from __future__ import annotations

import math

import numpy as np

from aotpack.dtypes import DType
from aotpack.frontend.aten_conv import _constant_pad, _group_norm
from aotpack.frontend.aten_resize import _upsample_axis, _whole_factor, gather_axis
from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx.host import is_symbolic_array
from aotpack.frontend.onnx.layout import ints
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import is_symbolic


def _known(v, what: str) -> np.ndarray | None:
    """A known array input (None when absent or empty: Resize's unused roi/scales)."""
    if v is None:
        return None
    if isinstance(v, Value) or is_symbolic_array(v):
        raise Unsupported(f"{what} computed at run time (it must be known at build time)")
    a = np.asarray(v)
    return a if a.size else None


def _axes(cx, ins, index: int, rank: int) -> list[int]:
    axes = cx.attr("axes")
    if axes is None and len(ins) > index:
        axes = _known(ins[index], "axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in ints(axes)]
    return axes


# ----------------------------------------------------------------------------- Resize
def _resize(cx, n, ins):
    x = cx.tensor(ins[0])
    rank = len(x.shape)
    mode = cx.attr("mode", "nearest")
    ctm = cx.attr("coordinate_transformation_mode", "half_pixel")
    if cx.attr("antialias", 0):
        raise Unsupported("antialias=1 (resize without antialiasing)")
    if ctm == "tf_crop_and_resize":
        raise Unsupported("coordinate_transformation_mode='tf_crop_and_resize'")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode={mode!r}")
    scales, sizes = _scales_and_sizes(ins)
    axes = [int(a) % rank for a in cx.attr("axes") or range(rank)]
    count = len(sizes if sizes is not None else scales)
    if count != len(axes):
        raise Unsupported(f"{count} scales/sizes for a rank-{rank} input")
    policy = cx.attr("keep_aspect_ratio_policy", "stretch")
    if sizes is not None and policy != "stretch":
        scales, sizes = _keep_aspect_ratio(x, axes, sizes, policy), None
    wide = x if mode == "nearest" or x.dtype == DType.F32 else \
        cx.emit(Op.CAST, [x], O.CastAttrs(DType.F32))
    for i, axis in enumerate(axes):
        size = x.shape[axis]
        if sizes is not None:
            new = sizes[i] if is_symbolic(sizes[i]) else int(sizes[i])
            scale = new / size if isinstance(size, int) and isinstance(new, int) else None
        else:
            scale = float(scales[i])
            new = _scaled_size(size, scale, policy != "stretch")
        if new == size and (scale is None or scale == 1.0):
            continue
        wide = _resize_axis(cx, wide, axis, size, new, scale, mode, ctm)
    if wide is x:
        return cx.emit(Op.COPY, [x], O.NoAttrs())
    return wide if wide.dtype == x.dtype else cx.emit(Op.CAST, [wide], O.CastAttrs(x.dtype))


def _scales_and_sizes(ins):
    scales = _known(ins[2] if len(ins) > 2 else None, "scales")
    sizes = ins[3] if len(ins) > 3 else None
    if is_symbolic_array(sizes):  # a skip connection's Shape over dynamic dims: expressions
        return None, list(sizes.flat)
    sizes = _known(sizes, "sizes")
    if (scales is None) == (sizes is None):
        raise Unsupported("other than exactly one of scales and sizes")
    return (None, sizes.astype(np.int64)) if sizes is not None else (scales.astype(np.float64),
                                                                     None)


def _keep_aspect_ratio(x: Value, axes, sizes, policy: str) -> np.ndarray:
    """One scale for every axis: the smallest (not_larger) or largest (not_smaller) of
    sizes / input sizes."""
    ratios = []
    for axis, new in zip(axes, sizes):
        if not isinstance(x.shape[axis], int):
            raise Unsupported(f"keep_aspect_ratio_policy={policy!r} over a dynamic size")
        ratios.append(int(new) / x.shape[axis])
    if policy not in ("not_larger", "not_smaller"):
        raise Unsupported(f"keep_aspect_ratio_policy={policy!r}")
    return np.full(len(axes), min(ratios) if policy == "not_larger" else max(ratios))


def _scaled_size(size, scale: float, half_up: bool = False):
    if isinstance(size, int):  # the reference's rounding: down, or half up for a policy
        return int(size * scale + 0.5) if half_up else int(math.floor(size * scale))
    if scale == int(scale) and scale >= 1:
        return size * int(scale)
    raise Unsupported(f"a scale of {scale} of the dynamic size {size} (whole factors only)")


def _resize_axis(cx, x: Value, axis: int, size, new, scale, mode: str, ctm: str) -> Value:
    if not (isinstance(size, int) and isinstance(new, int)):
        factor = _whole_factor(size, new)
        if factor is None:
            raise Unsupported(f"resizing the dynamic size {size} to {new} (whole factors only)")
        if mode == "nearest" and ctm in ("asymmetric", "half_pixel", "pytorch_half_pixel") \
                and cx.attr("nearest_mode", "round_prefer_floor") in ("floor",
                                                                      "round_prefer_floor"):
            return _repeat_rows(cx, x, axis, factor)
        if mode == "linear" and ctm in ("half_pixel", "pytorch_half_pixel"):
            return _upsample_axis(cx, x, axis, factor)
        raise Unsupported(f"{mode} resizing of the dynamic size {size} with "
                          f"coordinate_transformation_mode={ctm!r}")
    src = _source_coords(new, size, scale, ctm)
    if mode == "nearest":
        idx = _nearest_rows(src, size, cx.attr("nearest_mode", "round_prefer_floor"))
        factor = new // size if new % size == 0 else 0
        if factor and np.array_equal(idx, np.arange(new) // factor):
            return _repeat_rows(cx, x, axis, factor)
        return gather_axis(cx, x, axis, idx)
    taps, weights = (_linear_taps(src, size) if mode == "linear" else
                     _cubic_taps(src, size, float(cx.attr("cubic_coeff_a", -0.75)),
                                 bool(cx.attr("exclude_outside", 0))))
    return _weighted_rows(cx, x, axis, taps, weights)


def _source_coords(new: int, size: int, scale, ctm: str) -> np.ndarray:
    """The input coordinate of each output row (the ONNX Resize formulas)."""
    j = np.arange(new, dtype=np.float64)
    scale = new / size if scale is None else scale
    length = size * scale  # the output length before rounding (the reference's)
    if ctm == "half_pixel":
        return (j + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (j + 0.5) / scale - 0.5 if length != 1 else np.full(new, -0.5)
    if ctm == "align_corners":
        return j * (size - 1) / (length - 1) if length != 1 else np.zeros(new)
    if ctm == "asymmetric":
        return j / scale
    if ctm == "tf_half_pixel_for_nn":
        return (j + 0.5) / scale
    if ctm == "half_pixel_symmetric":
        adjustment = new / (size * scale)
        return size / 2 * (1 - adjustment) + (j + 0.5) / scale - 0.5
    raise Unsupported(f"coordinate_transformation_mode={ctm!r}")


def _nearest_rows(src: np.ndarray, size: int, nearest_mode: str) -> np.ndarray:
    rounding = {"round_prefer_floor": lambda s: np.ceil(s - 0.5),
                "round_prefer_ceil": lambda s: np.floor(s + 0.5),
                "floor": np.floor, "ceil": np.ceil}
    if nearest_mode not in rounding:
        raise Unsupported(f"nearest_mode={nearest_mode!r}")
    return np.clip(rounding[nearest_mode](src), 0, size - 1).astype(np.int64)


def _linear_taps(src: np.ndarray, size: int):
    lo = np.floor(src)
    w1 = src - lo
    taps = [np.clip(lo + k, 0, size - 1).astype(np.int64) for k in (0, 1)]
    return taps, [1.0 - w1, w1]


def _cubic_taps(src: np.ndarray, size: int, a: float, exclude_outside: bool):
    """Keys' cubic convolution over the 4 rows around each coordinate (rows past an edge
    repeat it, or with exclude_outside get no weight and the rest are renormalized)."""
    lo = np.floor(src)
    t = src - lo
    d = [t + 1, t, 1 - t, 2 - t]  # distances to the 4 taps
    near = lambda s: ((a + 2) * s - (a + 3)) * s * s + 1  # noqa: E731 (|s| <= 1)
    far = lambda s: ((a * s - 5 * a) * s + 8 * a) * s - 4 * a  # noqa: E731 (1 < |s| < 2)
    weights = [far(d[0]), near(d[1]), near(d[2]), far(d[3])]
    raw = [lo + k for k in (-1, 0, 1, 2)]
    if exclude_outside:
        weights = [np.where((r >= 0) & (r < size), w, 0.0) for r, w in zip(raw, weights)]
        total = sum(weights)
        weights = [w / total for w in weights]
    return [np.clip(r, 0, size - 1).astype(np.int64) for r in raw], weights


def _weighted_rows(cx, x: Value, axis: int, taps, weights) -> Value:
    """sum_k x[taps[k]] * weights[k] along `axis` (x in f32)."""
    import torch

    shape = (len(taps[0]),) + (1,) * (len(x.shape) - axis - 1)
    out = None
    for idx, w in zip(taps, weights):
        if not np.any(w):
            continue
        rows = gather_axis(cx, x, axis, idx)
        wv = cx.add_constant("w", torch.from_numpy(np.ascontiguousarray(w, np.float32))
                             .reshape(shape))
        term = cx.emit(Op.MUL, [rows, wv], O.BinaryAttrs())
        out = term if out is None else cx.emit(Op.ADD, [out, term], O.BinaryAttrs())
    return out


def _repeat_rows(cx, x: Value, axis: int, factor: int) -> Value:
    """Each row `factor` times in a row: a broadcast, one copy kernel."""
    if factor == 1:
        return x
    shape = tuple(x.shape)
    split = shape[:axis + 1] + (1,) + shape[axis + 1:]
    wide = shape[:axis + 1] + (factor,) + shape[axis + 1:]
    v = cx.emit(Op.VIEW, [x], O.ViewAttrs(split))
    c = cx.emit(Op.COPY, [cx.emit(Op.EXPAND, [v], O.ExpandAttrs(wide))], O.NoAttrs())
    return cx.emit(Op.VIEW, [c], O.ViewAttrs(shape[:axis] + (shape[axis] * factor,)
                                               + shape[axis + 1:]))


# ----------------------------------------------------------------------------- Pad
def _pad(cx, n, ins):
    x = cx.tensor(ins[0])
    rank = len(x.shape)
    pads = [int(p) for p in _known(ins[1], "pads")]
    c = _known(ins[2] if len(ins) > 2 else None, "constant_value")
    value = float(c.reshape(-1)[0]) if c is not None else 0.0
    axes = _axes(cx, ins, 3, rank) if cx.opset >= 18 else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"{len(pads)} pads for {len(axes)} axes")
    pairs = {a: (pads[i], pads[i + len(axes)]) for i, a in enumerate(axes)}
    mode = cx.attr("mode", "constant")
    if mode == "constant":  # torch's pad list: the last dim first, down to the first padded
        first = min([a for a, p in pairs.items() if p != (0, 0)], default=rank - 1)
        torch_pads = [p for a in range(rank - 1, first - 1, -1) for p in pairs.get(a, (0, 0))]
        return _constant_pad(cx, x, torch_pads, value)
    for axis, (lo, hi) in sorted(pairs.items()):
        if (lo, hi) != (0, 0):
            x = gather_axis(cx, x, axis, _padded_rows(x.shape[axis], lo, hi, mode))
    return cx.emit(Op.COPY, [x], O.NoAttrs())


def _padded_rows(size, lo: int, hi: int, mode: str) -> np.ndarray:
    """The source row of each row of a reflect / edge / wrap pad (negative pads crop)."""
    if not isinstance(size, int):
        raise Unsupported(f"{mode} padding of the dynamic size {size}")
    j = np.arange(-lo, size + hi)
    if mode == "edge":
        return np.clip(j, 0, size - 1)
    if mode == "wrap":
        return np.mod(j, size)
    if mode != "reflect":
        raise Unsupported(f"mode={mode!r}")
    if max(lo, hi) >= size:
        raise Unsupported(f"reflect padding by {max(lo, hi)} of a size of {size} (at most "
                          f"{size - 1})")
    return np.where(j < 0, -j, np.where(j >= size, 2 * (size - 1) - j, j))


# ----------------------------------------------------------------------------- the rest
def _image_and_block(cx, ins):
    """(x, blocksize) of DepthToSpace / SpaceToDepth."""
    x = cx.tensor(ins[0])
    if len(x.shape) != 4:
        raise Unsupported(f"a rank-{len(x.shape)} input (4-D [N, C, H, W] only)")
    return x, int(cx.attr("blocksize"))


def _depth_to_space(cx, n, ins):
    x, b = _image_and_block(cx, ins)
    batch, c, h, w = x.shape
    if c % (b * b):
        raise Unsupported(f"{c} channels in blocks of {b}x{b}")
    if cx.attr("mode", "DCR") == "DCR":
        split, order = (batch, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:  # CRD: PixelShuffle
        split, order = (batch, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    return _rearranged(cx, x, split, order, (batch, c // (b * b), h * b, w * b))


def _space_to_depth(cx, n, ins):
    x, b = _image_and_block(cx, ins)
    batch, c, h, w = x.shape
    if not (isinstance(h, int) and isinstance(w, int)) or h % b or w % b:
        raise Unsupported(f"a {h}x{w} image in blocks of {b}")
    order = (0, 3, 5, 1, 2, 4) if cx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    return _rearranged(cx, x, (batch, c, h // b, b, w // b, b), order,
                       (batch, c * b * b, h // b, w // b))


def _rearranged(cx, x: Value, split, order, shape) -> Value:
    v = cx.emit(Op.VIEW, [x], O.ViewAttrs(split))
    p = cx.emit(Op.COPY, [cx.emit(Op.PERMUTE, [v], O.PermuteAttrs(order))], O.NoAttrs())
    return cx.emit(Op.VIEW, [p], O.ViewAttrs(shape))


def _instance_norm(cx, n, ins):
    x = cx.tensor(ins[0])
    if len(x.shape) < 3:
        raise Unsupported(f"a rank-{len(x.shape)} input ([N, C, ...] with spatial dims)")
    scale, bias = cx.tensor(ins[1]), cx.tensor(ins[2])
    return _group_norm(cx, x, scale, bias, None, None, None, x.shape[1],
                       float(cx.attr("epsilon", 1e-5)))[0]


def _group_norm_rule(cx, n, ins):
    x = cx.tensor(ins[0])
    groups = int(cx.attr("num_groups"))
    scale, bias = cx.tensor(ins[1]), cx.tensor(ins[2])
    if len(x.shape) < 3 or scale.shape != (x.shape[1],):
        raise Unsupported(f"a scale of shape {list(scale.shape)} (one per channel, opset 21's "
                          f"form; export with opset >= 21)")
    return _group_norm(cx, x, scale, bias, None, None, None, groups,
                       float(cx.attr("epsilon", 1e-5)))[0]


IMAGE_RULES = {
    "Resize": _resize, "Pad": _pad, "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth, "InstanceNormalization": _instance_norm,
    "GroupNormalization": _group_norm_rule,
}
