"""Graph passes: canonicalize → fuse_patterns → fuse_horizontal → lower (→ Program), then
plan_memory on the Program and its launches."""
from aotpack.passes.canonicalize import canonicalize  # noqa: F401
from aotpack.passes.pipeline import compile_graph  # noqa: F401
from aotpack.passes.plan_memory import plan_memory  # noqa: F401
