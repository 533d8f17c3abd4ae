"""The message for a model whose own code fails while torch.export runs it on the example
inputs (not a refusal of the declared dims, not an unsupported op): what ran, as a call
with each example input bound to the forward parameter it landed on, and torch's reason.

Example inputs go to forward by position, so a mask given second lands on whatever forward
takes second (GPTBigCode's past_key_values): the call shows that at a glance."""
from __future__ import annotations

import inspect

from aotpack.frontend.load import ModelLoadError

# what a Python-level failure inside the model's code looks like (an attribute or method a
# value lacks, a wrong argument type, a missing key): the inputs' binding is the first suspect
BINDING_SUSPECTS = (AttributeError, TypeError, KeyError)


def described(x) -> str:
    """An example input as a message names it: shape and dtype (nested: each element)."""
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(described(t) for t in x) + ")"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}"
    return type(x).__name__


def described_call(model, inputs) -> str:
    """forward(input_ids=(2, 8) int64, past_key_values=(2, 8) int64): each example input
    with the parameter it is passed to; plain shapes when forward's signature is unknown."""
    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError, AttributeError):
        params = []
    if len(params) < len(inputs):
        return ", ".join(described(t) for t in inputs)
    return "forward(" + ", ".join(f"{n}={described(t)}" for n, t in zip(params, inputs)) + ")"


def first_sentences(text: str, limit: int = 600) -> str:
    """torch's message up to its first blank line (its explanation, not the stack or the
    suggested-fix listing), on one line, at most `limit` characters."""
    head = text.strip().split("\n\n")[0]
    one = " ".join(line.strip() for line in head.splitlines() if line.strip())
    return one if len(one) <= limit else one[:limit - 3] + "..."


def model_failed(e: BaseException, model, inputs) -> ModelLoadError:
    """The model's own code failed on its example inputs: the user's to fix, said as torch
    says it, with the call that failed."""
    hint = ""
    if "DataDependent" in type(e).__name__ + str(e):
        hint = ("; sizes that depend on the data (a loop over the experts that were hit) "
                "cannot be exported: for transformers' mixture-of-experts blocks built on "
                "their own, pass experts_implementation='grouped_mm' in the config")
    elif isinstance(e, BINDING_SUSPECTS) and hasattr(model, "_aotpack_wrapped"):
        hint = ("; the example inputs were passed by name (the factory's dict): check the "
                "names against forward's parameters")
    elif isinstance(e, BINDING_SUSPECTS):
        hint = ("; example inputs are passed to forward by position: if one landed on a "
                "parameter it was not meant for, return them in forward's order (or as a "
                "dict by name), or wrap the model in a module that takes exactly these")
    return ModelLoadError(f"torch.export could not run the model on its example inputs "
                          f"({described_call(model, inputs)}): {type(e).__name__}: "
                          f"{first_sentences(str(e))}{hint}")
