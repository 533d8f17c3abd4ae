"""The model as the build compiles it: `prepare` applies `--dtype`, `--input` and the dynamic
dims (`--input` ranges, `--dynamic`, a .pt2's own) to what `load_spec` loaded, in that order,
and converts a TorchScript module once its example inputs are known.

A .pt2's shapes and dtypes are baked into its program, so an option that changes them exports
its module again; the program's own dims are declared again as `--dynamic` options, except a
dim an option names (then that dim's whole group, the dims torch.export proved equal, is the
option's to declare).
"""
from __future__ import annotations

import sys

from dataclasses import dataclass, replace

from aotpack.frontend.dynamic import apply_dynamic, parse_steps
from aotpack.frontend.inputs import _DTYPES, _names, apply_inputs, is_script, parse_input
from aotpack.frontend.keyword_inputs import unwrapped
from aotpack.frontend.load import LoadedModel, ModelLoadError


def prepare(loaded: LoadedModel, *, inputs=(), dtype: str | None = None,
            dynamic=()) -> LoadedModel:
    if loaded.kind == "onnx":
        from aotpack.frontend.onnx.prepare import prepare_onnx

        return prepare_onnx(loaded, inputs=inputs, dtype=dtype, dynamic=dynamic)
    own: list[_OwnDim] = []
    if hasattr(loaded.model, "graph_signature") and (inputs or dtype or dynamic):
        own = _exported_dims(loaded.model)
        _check_pt2_inputs(loaded.model, own, [parse_input(o) for o in inputs])
        module = loaded.model.module()
        # its guards are the program's own dims, which are declared again below (or changed)
        module._forward_pre_hooks.clear()
        loaded = replace(loaded, model=module)
    loaded = apply_dtype(loaded, dtype)
    loaded = drop_cache_output(loaded)
    loaded, ranges = apply_inputs(loaded, list(inputs))
    if is_script(loaded.model):
        from aotpack.frontend.saved import exportable

        loaded = replace(loaded, model=exportable(loaded.model, loaded.inputs,
                                                  _names(loaded)[:len(loaded.inputs)]))
    overridden = {parse_input(o).name for o in inputs}
    named = {(n, d) for n, d, *_ in parse_steps(list(dynamic) + ranges)}
    return apply_dynamic(loaded, _own_options(own, overridden, named) + ranges + list(dynamic))


def drop_cache_output(loaded: LoadedModel) -> LoadedModel:
    """A transformers model configured to return its KV cache (`config.use_cache`, on by
    default for causal LMs) is built without it: a static bundle keeps no state between runs,
    so the cache object (which torch.export cannot even return) would be dead output. Said in
    a note; `--task text-generation` is the build that keeps a cache."""
    transformers = sys.modules.get("transformers")  # loaded by the factory if it made one
    model = unwrapped(loaded.model)
    if transformers is None or not isinstance(model, transformers.PreTrainedModel):
        return loaded
    config = model.config
    if not getattr(config, "use_cache", False):
        return loaded
    config.use_cache = False
    if not _returns_cache(model, transformers):
        return loaded  # an encoder (BERT's config says use_cache too): nothing was left out
    note = ("the model's KV cache output is left out (aotpack set config.use_cache = False): "
            "this bundle computes the logits of whole sequences; --task text-generation "
            "builds prefill and decode steps over a cache kept in the session")
    return replace(loaded, notes=[*loaded.notes, note])


def _returns_cache(model, transformers) -> bool:
    """Whether `model` with use_cache on returns a KV cache: a generating head, a decoder
    (BERT as one), an encoder-decoder's decoder, or the headless body of a decoder-only
    family (LlamaModel; a family with a masked-LM head, BERT's, is an encoder)."""
    config = model.config
    if isinstance(model, transformers.GenerationMixin) or getattr(config, "is_decoder", False) \
            or getattr(config, "is_encoder_decoder", False):
        return True
    from transformers.models.auto import modeling_auto as auto
    kind = getattr(config, "model_type", None)
    return kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
        and kind not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES


def apply_dtype(loaded: LoadedModel, dtype: str | None) -> LoadedModel:
    """`loaded` with its floating weights and example inputs cast to `dtype` (`--dtype`:
    bf16 or f16 for a model saved in f32, f32 for one saved in bf16/f16); None: unchanged.
    FP8 weights stay FP8 (the model dequantizes them itself; passes/fp8_sources.py keeps them
    so in the bundle)."""
    if dtype is None:
        return loaded
    import torch

    td = getattr(torch, _DTYPES.get(dtype.lower(), "none"), None)
    if td not in (torch.bfloat16, torch.float16, torch.float32):
        raise ModelLoadError(f"--dtype {dtype!r}: use bf16, f16 or f32")
    inputs = None if loaded.inputs is None else tuple(
        t.to(td) if t.is_floating_point() else t for t in loaded.inputs)
    fp8 = {torch.float8_e4m3fn, torch.float8_e5m2}
    model = loaded.model._apply(  # Module.to(dtype) would widen float8 tensors too
        lambda t: t.to(td) if t.is_floating_point() and t.dtype not in fp8 else t)
    return replace(loaded, model=model, inputs=inputs)


@dataclass(frozen=True)
class _OwnDim:
    input: str
    dim: int
    label: str  # the group: dims of one torch symbol
    lo: int
    hi: int | None  # None: no upper bound
    derived: str | None = None  # the size's expression, where it is no plain symbol


def _exported_dims(ep) -> list[_OwnDim]:
    """An exported program's dynamic dims, each group labelled as the .pt2's own build names
    it (after the first input dim that has it)."""
    import sympy

    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    out, label_of = [], {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in ep.graph_signature.user_inputs:
            continue
        for d, size in enumerate(getattr(node.meta.get("val"), "shape", ())):
            expr = getattr(getattr(size, "node", None), "expr", None)
            if expr is None or isinstance(expr, (int, sympy.Integer)):
                continue
            if not isinstance(expr, sympy.Symbol):
                out.append(_OwnDim(node.name, d, str(expr), 1, None, derived=str(expr)))
                continue
            label = label_of.setdefault(str(expr), f"{node.name}_{d}")
            vr = ranges.get(str(expr))
            bounded = vr is not None and str(vr.upper) not in ("int_oo", "oo")
            out.append(_OwnDim(node.name, d, label, max(int(vr.lower), 1) if vr else 1,
                               int(vr.upper) if bounded else None))
    return out


def _check_pt2_inputs(ep, own: list[_OwnDim], options) -> None:
    """An --input for a .pt2's input keeps inside what the program was exported for: its
    static dims as they are, its dynamic dims within their ranges."""
    shapes = {n.name: tuple(getattr(n.meta.get("val"), "shape", ())) for n in ep.graph.nodes
              if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs}
    ranges = {(o.input, o.dim): (o.lo, o.hi) for o in own if o.derived is None}
    for opt in options:
        shape = shapes.get(opt.name, ())
        for k, d in enumerate(opt.dims[:len(shape)]):
            lo, hi = (d.size, d.size) if d.size is not None else (d.lo, d.hi)
            if lo is None:
                continue  # a label given a range elsewhere: checked there
            where = f"--input {opt.name}: dim {k}"
            if (opt.name, k) in ranges:
                have = ranges[(opt.name, k)]
                if lo < have[0] or (have[1] is not None and hi > have[1]):
                    raise ModelLoadError(f"{where} ({lo}..{hi}) is outside the range "
                                         f"{have[0]}..{have[1]} the .pt2 was exported for")
            elif isinstance(shape[k], int) and (lo, hi) != (shape[k], shape[k]):
                raise ModelLoadError(f"{where} is {shape[k]} in the .pt2, exported static: export "
                                     f"it again with a torch.export.Dim there, or build from "
                                     f"the model (a file.py:factory)")


def _own_options(own: list[_OwnDim], overridden: set, named: set) -> list[str]:
    """`--dynamic` options for the program's own dims that no option touches."""
    touched = {o.label for o in own if o.input in overridden or (o.input, o.dim) in named}
    out, first = [], set()
    for o in own:
        if o.label in touched or o.input in overridden:
            continue
        where = f"dim {o.dim} of input {o.input!r}"
        if o.derived is not None:
            raise ModelLoadError(f"{where} is {o.derived} in the .pt2, derived from another dim: "
                                 f"its module cannot be exported again with it; give that "
                                 f"input with --input, or build from the model (a factory)")
        if o.hi is None:
            raise ModelLoadError(f"{where} is dynamic with no upper bound: aotpack plans memory "
                                 f"for the largest shape, so give it a maximum (--dynamic "
                                 f"{o.input}.{o.dim}=1..N)")
        if o.label in first:
            out.append(f"{o.input}.{o.dim}={o.label}")
        else:
            out.append(f"{o.input}.{o.dim}={o.label}:{o.lo}..{o.hi}")
            first.add(o.label)
    return out
