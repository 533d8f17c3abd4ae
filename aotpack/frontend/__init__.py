"""Frontends: model loading and torch.export → aotpack.ir.Graph."""
from aotpack.frontend.load import LoadedModel, ModelLoadError, load_model, load_spec  # noqa: F401
from aotpack.frontend.translate import UnsupportedOpError, to_graph  # noqa: F401
