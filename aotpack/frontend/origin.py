"""What the user wrote for an exported node: their source line and their op.

torch.export hands aotpack core aten ops, often pieces of a decomposition (F.pad(mode='reflect')
arrives as arange/abs/index, F.max_unpool2d as add/index_put). A refusal that names only that
piece names something the user never wrote; the node's metadata still says where it came from:
`torch_fn` (the torch function called), `nn_module_stack` (the modules it ran in) and
`original_aten` (the aten op before decomposition). This module turns them into words.
"""
from __future__ import annotations

import re

from aotpack.ir.graph import SourceLoc

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)')
# installed libraries (transformers, timm): their lines are not the user's when the user's own
# file is on the stack too; a model that is all library code (a transformers model built in a
# factory) still gets the library's line
_LIBRARY = ("/site-packages/", "/dist-packages/")
# the argument a decomposed aten op stands for (its name says which mode F.pad was given)
_MODES = ((re.compile(r"reflection_pad\dd"), "mode='reflect'"),
          (re.compile(r"replication_pad\dd"), "mode='replicate'"),
          (re.compile(r"_pad_circular"), "mode='circular'"))


def user_frame(trace: str) -> tuple[str, int, str] | None:
    """(file, line, code) of the deepest frame of a node's stack trace that the user wrote:
    not torch's (nn.Sequential's `input = module(input)`, nn.Conv2d's forward), not generated
    code (`<eval_with_key>.42`: a decorator's traced wrapper), and not an installed library's
    when a frame of the user's own files is there."""
    frames = [(f, int(n), c.strip()) for f, n, c in _FRAME.findall(trace or "")
              if "/torch/" not in f and not f.startswith("<")]
    own = [f for f in frames if not any(lib in f[0] for lib in _LIBRARY)]
    return (own or frames or [None])[-1]


def source_loc(fx_node) -> SourceLoc:
    """The node's name and the user's source line (see user_frame); none for a node whose
    stack has torch's frames only (a TorchScript model's conversion)."""
    frame = user_frame(fx_node.meta.get("stack_trace") or "")
    if frame is None:
        return SourceLoc(fx_node.name)
    return SourceLoc(fx_node.name, *frame)


def original_aten(fx_node) -> str | None:
    """The aten op torch.export decomposed into this node ("aten.reflection_pad2d"), or None
    when the node is that op itself."""
    orig = fx_node.meta.get("original_aten")
    if orig is None or str(orig) == str(fx_node.target):
        return None
    return str(orig).removesuffix(".default")


def torch_call(fx_node) -> str | None:
    """The torch function the user called, as they would write it ("F.pad(mode='reflect')",
    "torch.cat", "Tensor.view"), from torch.export's `torch_fn` record."""
    record = fx_node.meta.get("torch_fn")
    if not record or len(record) < 2:
        return None
    kind, _, name = str(record[1]).rpartition(".")
    if not name or kind.split(".")[0] == "OpOverload":  # an aten op called directly: its node
        return None
    import torch
    import torch.nn.functional as F

    prefix = ("Tensor." if kind.startswith("method") else "F." if hasattr(F, name) else
              "torch." if hasattr(torch, name) else "")  # (operator.getitem: no prefix)
    mode = next((m for pattern, m in _MODES if pattern.search(str(fx_node.meta.get(
        "original_aten", "")))), None)
    return f"{prefix}{name}" + (f"({mode})" if mode else "")


def torch_module(fx_node) -> str | None:
    """The innermost torch.nn module the node ran in, with its path in the model
    ("model.0 (nn.ReflectionPad2d)"): inside an nn.Sequential the source line is the
    Sequential's caller, and the path says which layer. None for the user's own modules
    (their line says it)."""
    stack = fx_node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path, kind = list(stack.values())[-1][:2]
    kind = getattr(kind, "__module__", "") + "." + getattr(kind, "__qualname__", "") \
        if isinstance(kind, type) else str(kind)
    if not kind.startswith("torch.nn.modules."):
        return None
    return f"{_attribute_path(path)} (nn.{kind.rsplit('.', 1)[-1]})"


def _attribute_path(path: str) -> str:
    """torch.export's module path as Python spells it: `model.0` -> `self.model[0]`."""
    parts = [p.split("@")[0] for p in str(path).split(".") if p]  # (`@1`: a second call)
    out = "self"
    for p in parts:
        out += f"[{p}]" if p.isdigit() else f".{p}"
    return out


def describe(fx_node) -> str | None:
    """One line naming the user's op for a refusal: the torch call, the nn module, and the
    aten op torch.export decomposed into this node. None when the metadata says nothing
    beyond the node itself."""
    call, module, orig = torch_call(fx_node), torch_module(fx_node), original_aten(fx_node)
    parts = []
    if call:
        parts.append(call)
    if module:
        parts.append(f"in {module}" if call else module)
    if orig:
        parts.append(f"(torch.export decomposed {orig} into this {fx_node.target})")
    return " ".join(parts) or None


def user_op(fx_node) -> str:
    """The shortest name of the user's op for a headline: the torch call, else the module,
    else the aten op before decomposition, else the node's target."""
    return (torch_call(fx_node) or torch_module(fx_node) or original_aten(fx_node)
            or str(fx_node.target))
