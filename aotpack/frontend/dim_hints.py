"""When torch.export refuses dynamic dims: which input dims, why, and what declaration works.

A conv net's shape arithmetic (ceil-mode pools, stride-2 chains, a skip connection's cat of an
upsampled map) holds for some sizes only; torch.export then refuses the range, sometimes with a
suggested fix (`H = 32*_H`), sometimes with a guard it could not prove or a failure of its own
fix-finder ("Expected op to be '==', got < for ..."). aotpack names the dims, quotes torch's
fix, or finds the smallest multiple torch.export accepts by exporting again (the failure path
only, a few exports), and says how to declare it: `--dynamic NAME.DIM=LABEL:LO..HI:STEP` or a
factory returning derived `torch.export.Dim`s.
"""
from __future__ import annotations

import math
import re

# multiples tried when torch suggests none (stride chains are powers of two; 5 halvings = 32)
_MULTIPLES = (2, 4, 8, 16, 32, 64)
# torch's constraint solving: an AssertionError raised there is its own fix-finder failing on
# the model's guards (torch 2.9: prettify_results), not the model's code failing
_SOLVER_FRAMES = ("produce_guards", "solve_constraints", "prettify_results")


def is_dims_refusal(e: BaseException) -> bool:
    """Whether torch.export's exception is about the declared dims (a constraint violation, or
    its constraint solver failing on them), not the model's code failing on the inputs."""
    import traceback

    import torch

    if isinstance(e, torch._dynamo.exc.UserError):
        return True
    return any(any(s in f.name for s in _SOLVER_FRAMES)
               for f in traceback.extract_tb(e.__traceback__))


def plain_dims(spec, names) -> list[tuple[str, int, object]]:
    """[(input name, dim, Dim)] for each dim of torch.export's `spec` (a tuple in input order
    or a dict by name) that is a plain Dim (derived ones are declared already)."""
    per_input = spec.items() if isinstance(spec, dict) else zip(names, spec or ())
    out = []
    for name, dims in per_input:
        items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
        for d, dim in items:
            if dim is not None and getattr(dim, "root", None) is None \
                    and hasattr(dim, "__name__") and hasattr(dim, "max"):
                out.append((name, int(d), dim))
    return out


def dims_hint(message: str, dims, retry=None, cli: bool = True) -> str:
    """The hint after torch's reason. `dims`: plain_dims of the refused spec; `retry(mult,
    names)`: exports again with the Dims called `names` as `mult * root`, True when that works
    (None: do not search); `cli`: the dims came from --dynamic (say the option form too)."""
    named = [x for x in dims if re.search(rf"\b{re.escape(x[2].__name__)}\b", message)] or dims
    if not named:
        return "Run with TORCH_LOGS=+dynamic to see why."
    step = _torch_step(message)
    if step:
        found = f"torch.export suggests multiples of {step} (its fix above)"
    else:
        step, named = _search(named, dims, retry) or (None, named)
        found = (f"torch.export accepts multiples of {step} (aotpack exported the model again "
                 f"with them)" if step else None)
    which = " and ".join(f"{dim.__name__} ({name}.{d}, {dim.min}..{dim.max})"
                         for name, d, dim in named)
    why = (f"The model's shape arithmetic constrains {which}: strided convolutions and pools "
           f"(ceil_mode ones especially) and skip connections round sizes, so torch.export "
           f"cannot prove the model's shape checks for every size in the range.")
    if not found:
        return (f"{why} No multiple of {_MULTIPLES[0]}..{_MULTIPLES[-1]} of those dims "
                f"satisfies torch.export either: keep them static"
                f"{' (leave out their --dynamic)' if cli else ''}, or narrow the range.")
    return f"{why} {found}: declare them so,\n{_declarations(named, step, cli)}"


def _torch_step(message: str) -> int | None:
    """The multiple in torch's suggested fix (`H = 32*_H`), if it gave one."""
    fixes = message.partition("Suggested fixes:")[2]
    steps = {int(k) for k in re.findall(r"=\s*(\d+)\*_?\w+", fixes)}
    return math.lcm(*steps) if steps else None


def _search(named, dims, retry):
    """(multiple, dims) for the smallest multiple torch.export accepts: for the dims torch
    named, else for all declared dims (torch's fix-finder failing names one side of an image
    only). A multiple must leave two sizes in each range; `retry` checks that it divides the
    example sizes and that torch.export accepts it."""
    if retry is None:
        return None
    for mult in _MULTIPLES:
        for group in ([named, dims] if len(named) < len(dims) else [named]):
            if all(dim.max // mult > -(-dim.min // mult) for _, _, dim in group) and \
                    retry(mult, {dim.__name__ for _, _, dim in group}):
                return mult, group
    return None


def _declarations(named, step: int, cli: bool) -> str:
    """The two ways to declare the dims as multiples of `step`: the option and the factory."""
    roots = {dim.__name__: (f"_{dim.__name__}", max(1, -(-dim.min // step)), dim.max // step)
             for _, _, dim in named}
    lines = []
    if cli:
        lines.append("  " + " ".join(f"--dynamic {name}.{d}={dim.__name__}:"
                                      f"{roots[dim.__name__][1] * step}..{dim.max // step * step}"
                                      f":{step}" for name, d, dim in named))
        lines.append("  or a factory returning (model, inputs, dynamic_shapes):")
    for root, lo, hi in dict.fromkeys(roots.values()):
        lines.append(f"  {root} = torch.export.Dim({root!r}, min={lo}, max={hi})")
    per_input: dict[str, list[str]] = {}
    for name, d, dim in named:
        per_input.setdefault(name, []).append(f"{d}: {step} * {roots[dim.__name__][0]}")
    shapes = ", ".join(f"{n!r}: {{{', '.join(v)}}}" for n, v in per_input.items())
    lines.append(f"  return model, inputs, {{{shapes}}}   # docs/dynamic-shapes.md")
    return "\n".join(lines)


def derived(spec, names: set[str], mult: int):
    """`spec` with the plain Dims named in `names` replaced by `mult * root` (a root Dim
    `_NAME` over the multiples inside the Dim's range)."""
    import torch

    roots: dict[str, object] = {}

    def swap(dim):
        name = getattr(dim, "__name__", None)
        if name not in names or getattr(dim, "root", None) is not None:
            return dim
        if name not in roots:
            roots[name] = torch.export.Dim(f"_{name}", min=max(1, -(-dim.min // mult)),
                                           max=dim.max // mult)
        return mult * roots[name]

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v) for v in x)
        return swap(x) if x is not None else None
    return walk(spec)


def exports_with(model, inputs, spec):
    """dims_hint's `retry` for `model`: whether torch.export accepts `spec` with the Dims
    called `named` as multiples of `mult`."""
    import torch

    from aotpack.frontend.load import quiet_torch_logs

    def retry(mult: int, named: set) -> bool:
        try:
            with quiet_torch_logs():
                torch.export.export(model, tuple(inputs), strict=False,
                                    dynamic_shapes=derived(spec, named, mult))
        except Exception:  # noqa: BLE001 — any refusal: not this multiple
            return False
        return True
    return retry


def factory_refusal(e, model, inputs, dynamic_shapes) -> str:
    """The message for torch.export refusing a factory's (or a .pt2's) dynamic_shapes: torch's
    reason, then dims_hint with the search (exports of `model` again)."""
    from aotpack.frontend.dynamic import input_names

    retry = exports_with(model, inputs, dynamic_shapes)
    plain = plain_dims(dynamic_shapes, input_names(model, len(inputs)))
    reason = "\n".join(ln for ln in str(e).strip().splitlines()
                       if ln.strip() and "draft_export" not in ln
                       and not ln.startswith("The error above occurred"))
    return (f"torch.export refused the dynamic dims: {reason}\n"
            f"{dims_hint(str(e), plain, retry, cli=False)}")
