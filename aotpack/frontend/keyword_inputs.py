"""Example inputs given as a dict of keyword arguments ({"input_ids": ..., "attention_mask":
...}, what a tokenizer returns): the model seen through a module whose forward takes exactly
those keywords, in the dict's order, as positional parameters of the same names (a subclass
over the model's own attributes, so its weights keep their names). torch.export
and every --input / --dynamic option then see the names the user wrote, and nothing lands on
a parameter it was not meant for (GPTBigCode takes past_key_values second)."""
from __future__ import annotations

import inspect
import keyword

from aotpack.frontend.load import ModelLoadError


def wrap_keyword_inputs(model, inputs: dict, where: str):
    """(wrapper module, inputs as a tuple in the dict's order)."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        raise ModelLoadError(f"{where}(): a TorchScript module's example inputs must be a "
                             f"tuple in forward's order (its converter takes no names)")
    names = list(inputs)
    if not names:
        raise ModelLoadError(f"{where}(): the example inputs are an empty dict")
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()
           or not n.isascii() or keyword.iskeyword(n) or n == "self"]
    if bad:
        raise ModelLoadError(f"{where}(): example input names {bad} cannot be forward's "
                             f"parameter names; use a tuple in forward's order")
    if not all(isinstance(t, torch.Tensor) for t in inputs.values()):
        kinds = {n: type(t).__name__ for n, t in inputs.items()
                 if not isinstance(t, torch.Tensor)}
        raise ModelLoadError(f"{where}(): example inputs must be tensors, got {kinds}")
    _check_accepted(model, names, where)
    params = ", ".join(names)
    call = ", ".join(f"{n}={n}" for n in names)
    # a subclass of the model's own class whose forward takes these very parameters (so
    # torch.export names the graph's inputs after them, and --input / --dynamic / verify read
    # them from its signature), over the model's own attributes: its weights keep their names
    scope: dict = {"_forward": model.forward}  # (bound: an instance's own forward too)
    source = f"def forward(self, {params}):\n    return _forward({call})\n"
    exec(source, scope)  # noqa: S102 — names checked above: identifiers, ASCII, no keywords
    cls = type(type(model).__name__, (type(model),), {"forward": scope["forward"],
                                                      "__module__": type(model).__module__})
    wrapper = object.__new__(cls)
    wrapper.__dict__.update(model.__dict__)  # (the same submodules and weights, not copies)
    wrapper.__dict__.pop("forward", None)
    object.__setattr__(wrapper, "_aotpack_wrapped", model)
    return wrapper, tuple(inputs.values())


def unwrapped(model):
    """The user's model behind a keyword view (the model itself otherwise)."""
    return getattr(model, "_aotpack_wrapped", model)


def _check_accepted(model, names: list[str], where: str) -> None:
    """Each keyword is a parameter of forward (or forward takes **kwargs)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    unknown = [n for n in names if n not in params or params[n].kind is params[n].POSITIONAL_ONLY]
    if unknown:
        raise ModelLoadError(f"{where}(): forward takes no parameter {unknown[0]!r} by name "
                             f"(it takes {', '.join(params)}): pass a tuple in its order")
