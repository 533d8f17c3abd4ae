"""The ONNX frontend: a .onnx file → the same IR the torch frontend produces (model.py loads
and checks it, dims.py + prepare.py apply the command line's dims, translate.py + rules.py +
layout.py + host.py translate it, patterns.py finds subgraphs that are one IR node)."""
from aotpack.frontend.onnx.model import OnnxModel, load_onnx  # noqa: F401
