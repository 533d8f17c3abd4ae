"""`--dtype`, `--input`, `--dynamic` for an ONNX model: the shapes it is built for
(dims.py) and example inputs drawn at the symbols' example values.

Example values: floats ~ N(0, 1); an integer input that indexes a weight table (a Gather of
an initializer: token ids, token types, positions) draws ids inside the smallest such table;
inputs named like masks are all ones; other integers zero; bools all True.
"""
from __future__ import annotations

import re
from dataclasses import replace

from aotpack.dtypes import DType
from aotpack.frontend.inputs import _DTYPES, parse_input
from aotpack.frontend.load import LoadedModel, ModelLoadError
from aotpack.frontend.onnx.dims import OnnxShapes, resolve
from aotpack.frontend.onnx.model import OnnxModel


def prepare_onnx(loaded: LoadedModel, *, inputs=(), dtype: str | None = None,
                 dynamic=()) -> LoadedModel:
    model: OnnxModel = loaded.model
    if dtype is not None:
        import torch

        td = getattr(torch, _DTYPES.get(dtype.lower(), "none"), None)
        if td not in (torch.bfloat16, torch.float16, torch.float32):
            raise ModelLoadError(f"--dtype {dtype!r}: use bf16, f16 or f32")
        model = model.to(td)
    shapes = resolve(model, inputs, dynamic)
    dtypes = {o.name: o.dtype for o in (parse_input(t) for t in inputs) if o.dtype}
    for name, dt in dtypes.items():
        spec = next(i for i in model.inputs if i.name == name)
        # a floating input built with --dtype takes that dtype (verify passes it back)
        allowed = {spec.dtype} | ({model.cast} if spec.dtype.is_float and model.cast else set())
        if DType.from_torch(getattr(__import__("torch"), dt)) not in allowed:
            raise ModelLoadError(f"--input {name}: the ONNX model declares it "
                                 f"{spec.dtype.value}; its dtype cannot be changed")
    tensors = example_inputs(model, shapes)
    return replace(loaded, model=model, inputs=tensors, dynamic_shapes=shapes)


def example_inputs(model: OnnxModel, shapes: OnnxShapes) -> tuple:
    import torch

    vocab = _index_tables(model)
    out = []
    for k, spec in enumerate(model.inputs):
        shape = [d if isinstance(d, int) else shapes.examples[d] for d in shapes.dims[spec.name]]
        dt = spec.dtype
        if dt.is_float and model.cast is not None:
            dt = model.cast
        g = torch.Generator().manual_seed(k)
        if dt.is_float:
            t = torch.randn(shape, generator=g).to(dt.to_torch())
        elif dt == DType.BOOL or re.search(r"mask$", spec.name.lower()):
            t = torch.ones(shape, dtype=dt.to_torch())
        elif spec.name in vocab:
            t = torch.randint(0, vocab[spec.name], shape, generator=g, dtype=dt.to_torch())
        else:
            t = torch.zeros(shape, dtype=dt.to_torch())
        out.append(t)
    return tuple(out)


def _index_tables(model: OnnxModel) -> dict[str, int]:
    """{graph input: rows of the smallest initializer it indexes} through Gather (a Cast or
    Identity on the way allowed)."""
    graph = model.proto.graph
    rows = {t.name: (t.dims[0] if t.dims else 1) for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.dims:
                    rows[n.output[0]] = a.t.dims[0]
    alias = {i.name: i.name for i in model.inputs}
    out: dict[str, int] = {}
    for n in graph.node:
        if n.op_type in ("Cast", "Identity") and n.input and n.input[0] in alias:
            alias[n.output[0]] = alias[n.input[0]]
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] in alias \
                and n.input[0] in rows and _axis(n) == 0:
            src = alias[n.input[1]]
            out[src] = min(out.get(src, rows[n.input[0]]), rows[n.input[0]])
    return out


def _axis(node) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)
