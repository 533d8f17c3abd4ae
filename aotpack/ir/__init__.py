"""The typed graph IR (see graph.py, ops.py, types.py)."""
from aotpack.ir.graph import (  # noqa: F401
    Constant, Graph, GraphBuilder, GraphOutput, Node, SourceLoc, Value, VerifyError,
)
from aotpack.ir.infer import TensorType, infer  # noqa: F401
from aotpack.ir.ops import *  # noqa: F401,F403
from aotpack.ir.types import (  # noqa: F401
    Dim, Shape, broadcast_shapes, contiguous_strides, is_static, numel, static_shape,
)
