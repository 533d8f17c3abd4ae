"""The text of a refusal of an exported node: what is not supported, named as the user wrote
it (frontend/origin.py), the node, the user's source line, and what to do.

Refusals are raised where a rule fails, on a core aten node; when that node is a piece of a
decomposition, the headline names the op the user called and keeps aotpack's reason after it.
A few families get their own headline and hint (`_FAMILIES`): the ones whose pieces say least.
"""
from __future__ import annotations

import operator
import re

from aotpack.frontend.origin import describe, original_aten, source_loc, user_op

_REWRITE = "Rewrite that line with supported operators or open an issue."
_NO_LINE = "(no Python source line recorded for it) Change that part of the model or open an issue."

_DYNAMIC_PAD_HINT = (
    "Reflect and replicate padding work over static sizes: keep that input's padded dims static "
    "(leave out their --dynamic, or build one bundle per size you serve); or pad with zeros or "
    "a constant (padding_mode='zeros', F.pad(mode='constant')), which works over dynamic sizes.")
# (pattern on the aten op before decomposition, condition on the node, headline, hint)
_FAMILIES = (
    (re.compile(r"aten\.(reflection|replication)_pad\dd"), "dynamic",
     "{op} over a dynamic size is not supported (output {shape}: torch.export turns the pad "
     "into a gather whose indices follow the size)", _DYNAMIC_PAD_HINT),
)


def refusal(fx_node, what: str, hint: str | None = None, own: bool = False,
            shape: str = "", near: str = "") -> str:
    """The message: a headline (`what`, or for a piece of a decomposed op, that op's name in
    front of it unless `own`: the caller named it already), the op line, the node, the source
    line and the hint (default: rewrite the line). `shape`: the node's output as aotpack
    names its dims (for a family's headline); `near`: similar supported ops, appended."""
    if not own:
        what, hint = _framed(fx_node, what, hint, shape)
    loc = source_loc(fx_node)
    lines = [f"{what}."]
    op = describe(fx_node)
    if op:
        lines.append(f"  op: {op}")
    lines.append(f"  node: {fx_node.name} = {fx_node.target}(...)")
    if loc.file:
        lines += [f"  source: {loc}", f"  {hint or _REWRITE}"]
    else:
        lines.append(f"  {_NO_LINE}" if hint is None else f"  (no Python source line recorded "
                                                           f"for it) {hint}")
    return "\n".join(lines) + near


def _framed(fx_node, what: str, hint: str | None, shape: str) -> tuple[str, str | None]:
    """(headline, hint) for a node that is a piece of a decomposition: the family's when one
    matches, else the user's op in front of aotpack's reason."""
    orig = original_aten(fx_node)
    if orig is None:
        return what, hint
    for pattern, condition, headline, family_hint in _FAMILIES:
        if pattern.search(orig) and (condition != "dynamic" or _dynamic_output(fx_node)):
            # (the family's headline says what aotpack's reason says, in the user's terms)
            return headline.format(op=user_op(fx_node), shape=shape or "?"), hint or family_hint
    return (f"{user_op(fx_node)} is not supported here (torch.export decomposed it, and aotpack "
            f"refused a piece: {what})", hint)


def _dynamic_output(fx_node) -> bool:
    val = fx_node.meta.get("val")
    return any(not isinstance(d, int) for d in getattr(val, "shape", ()))


def uncomputed_operand(fx_node, env: dict) -> tuple[str, str] | None:
    """(headline, hint) when the node reads an output aotpack's rules leave uncomputed (None):
    a max pooling's indices, a batch norm's saved statistics. Without this a rule met None
    and said so in Python's words ("float() argument must be ... not 'NoneType'")."""
    if "_assert" in str(fx_node.target):  # export's metadata checks read no values
        return None
    for arg in fx_node.all_input_nodes:
        if env.get(arg.name, 0) is not None or arg.target is not operator.getitem:
            continue
        producer, index = arg.args[0], arg.args[1]
        if "max_pool" in str(producer.target) and index == 1:
            return (f"{user_op(fx_node)} reads the indices of a max pooling "
                    f"(return_indices=True, node {producer.name}), which aotpack does not "
                    f"compute: its max pooling keeps the values only",
                    "Upsample instead of unpooling (nn.Upsample or F.interpolate with "
                    "scale_factor, as most SegNet ports do), or open an issue.")
        return (f"{user_op(fx_node)} reads output {index} of {producer.target} (node "
                f"{producer.name}, {user_op(producer)}), which aotpack does not compute: it "
                f"computes that op's main output only", None)
    return None


def rule_type_error(fx_node, e: TypeError, operands) -> str:
    """The headline for a TypeError out of a rule. aotpack's own type rules raise theirs on
    purpose with a reason worth showing ("linear: x [2, 3] does not match weight [4, 5]");
    Python's own ("float() argument must be ... not 'NoneType'") says only that a rule met an
    operand it was not written for: say that, with the operands, never Python's words."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    if frames and (frames[-1].line or "").lstrip().startswith("raise "):
        return f"{fx_node.target} cannot be typed: {e}"
    kinds = ", ".join(_kind(a) for a in operands)
    return (f"{fx_node.target} of ({kinds}) is a form aotpack's rule for it does not handle; "
            f"this is aotpack's limit, not a mistake in the model")


def _kind(a) -> str:
    if a is None:
        return "None"
    if hasattr(a, "dtype") and hasattr(a, "shape"):
        return f"{getattr(a.dtype, 'value', a.dtype)}{list(a.shape)}"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_kind(x) for x in a) + "]"
    return type(a).__name__
