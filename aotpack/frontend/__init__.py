"""Frontends: model loading and torch.export → aotpack.ir.Graph."""
from aotpack.frontend.load import ModelLoadError, load_model  # noqa: F401
from aotpack.frontend.translate import UnsupportedOpError, to_graph  # noqa: F401
