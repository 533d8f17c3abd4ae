"""`--dynamic NAME.DIM=[LABEL:]LO..HI[:STEP]`: dynamic dims from the command line, as
torch.export Dims (`NAME.DIM=static` keeps a dim out of the automatic links below).

Each option makes one dim of one input dynamic in LO..HI. A LABEL names the dim (it is the
symbol's name in the bundle, `aotpack inspect` and error messages; default `NAME_DIM`); the
same label on another input's dim (`--dynamic mask.0=B`, no range) makes the two one dim.
A STEP makes the dim the multiples of STEP in LO..HI: torch.export's derived Dim `STEP*_LABEL`
(a net whose stride-2 layers and ceil-mode pools need a side divisible by 32: `x.2=H:64..512:32`);
the bundle's dim is then `_LABEL` and the runtime refuses a size that is not a multiple.
Dims of inputs that declare none, whose example size equals a declared dim's example size (and
is not 1 or shared by two declared dims), are made that dim too, since models nearly always need them
equal (an attention mask beside its token ids): if torch.export refuses that, the model is
exported without those links.
"""
from __future__ import annotations

import inspect
import re

from aotpack.frontend.dim_hints import dims_hint, exports_with, is_dims_refusal, plain_dims
from aotpack.frontend.export_errors import model_failed
from aotpack.frontend.load import LoadedModel, ModelLoadError, quiet_torch_logs

# an input's name is anything without '=' or spaces (ONNX's default names: input.1, x:0): its
# dim is the last .N before the '='
_SPEC = re.compile(r"^(?P<input>[^=\s]+?)\.(?P<dim>-?\d+)="
                   r"(?:(?P<label>[A-Za-z_]\w*)(?::|$))?"
                   r"(?:(?P<lo>\d+)\.\.(?P<hi>\d+)(?::(?P<step>\d+))?)?$")
STATIC = "static"


def parse_dynamic(specs: list[str]) -> list[tuple[str, int, str | None, int | None, int | None]]:
    """[(input, dim, label, lo, hi)]; ModelLoadError naming a malformed option, or a STEP
    (the ONNX frontend's dims take none; torch models read them with parse_steps)."""
    out = []
    for (name, dim, label, lo, hi, step), s in zip(parse_steps(specs), specs):
        if step > 1:
            raise ModelLoadError(f"--dynamic {s!r}: a STEP is for torch models only")
        out.append((name, dim, label, lo, hi))
    return out


def parse_steps(specs: list[str]) -> list[tuple[str, int, str | None, int | None, int | None,
                                                int]]:
    """[(input, dim, label, lo, hi, step)] (step 1 when none is given)."""
    out = []
    for s in specs:
        m = _SPEC.match(s.strip())
        if m is None or (m["label"] is None and m["lo"] is None):
            raise ModelLoadError(f"--dynamic {s!r}: expected NAME.DIM=LO..HI or "
                                 f"NAME.DIM=LABEL:LO..HI[:STEP] (e.g. input_ids.1=1..4096, "
                                 f"input_ids.0=batch:1..64, x.2=H:64..512:32), or NAME.DIM=LABEL "
                                 f"to reuse a dim")
        lo = int(m["lo"]) if m["lo"] is not None else None
        hi = int(m["hi"]) if m["hi"] is not None else None
        step = int(m["step"]) if m["step"] is not None else 1
        if lo is not None and not 1 <= lo <= hi:
            raise ModelLoadError(f"--dynamic {s!r}: the range must be 1 <= LO <= HI")
        if step < 1 or (step > 1 and hi // step <= -(-lo // step)):
            raise ModelLoadError(f"--dynamic {s!r}: the range holds fewer than two multiples "
                                 f"of {step}")
        out.append((m["input"], int(m["dim"]), m["label"], lo, hi, step))
    return out


def input_names(model, n: int | None) -> list[str]:
    """Names of the model's first `n` inputs (None: all it takes by position): forward's
    parameters, or an exported program's user inputs."""
    sig = getattr(model, "graph_signature", None)
    if sig is not None:
        return list(sig.user_inputs)[:n]
    params = [p.name for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return params[:n] + [f"arg{i}" for i in range(len(params), n or 0)]


def apply_dynamic(loaded: LoadedModel, specs: list[str]) -> LoadedModel:
    """`loaded` with the `--dynamic` options applied: the model exported with them (a .pt2
    again from its module), and the spec kept for naming the dims. No options: unchanged."""
    if not specs:
        return loaded
    import torch

    if loaded.dynamic_shapes is not None:
        raise ModelLoadError("the factory declares its dynamic dims (its third return value): "
                             "declare them all there, or return (model, inputs) and give "
                             "every dim with --dynamic")
    parsed = parse_steps(specs)
    names = input_names(loaded.model, len(loaded.inputs))
    static = {(names.index(n), d % loaded.inputs[names.index(n)].dim())
              for n, d, label, *_ in parsed if label == STATIC and n in names}
    parsed = [p for p in parsed if p[2] != STATIC]
    dims, labels = _declared(parsed, names, loaded.inputs)
    model = loaded.model.module() if hasattr(loaded.model, "graph_signature") else loaded.model
    linked = _linked(dims, loaded.inputs, static)
    notes = [f"--dynamic: {names[i]}.{d} follows {label} (the same example size "
             f"{int(loaded.inputs[i].shape[d])}); --dynamic {names[i]}.{d}=static keeps it "
             f"static" for (i, d), label in sorted(linked.items()) if (i, d) not in dims]
    errors, specs_tried = [], []
    for attempt in ([linked, dims] if linked != dims else [dims]):
        spec = tuple({d: labels[key] for (i, d), key in attempt.items() if i == k} or None
                     for k in range(len(loaded.inputs)))
        try:
            ep = _export(model, loaded.inputs, spec)
        except Exception as e:  # noqa: BLE001 — torch.export's own message says why
            errors.append(e)
            specs_tried.append(spec)
            continue
        used = notes if attempt is linked else []
        return LoadedModel(ep, loaded.inputs, spec, loaded.notes + used)  # exported once, here
    # the first attempt (the dims that follow a declared one tied to it) is what the user
    # asked for: its reason names the range the model's code allows; the retry with those
    # dims static mostly fails on the static dim's size, which helps no one
    error = errors[0]
    if not is_dims_refusal(error) and isinstance(error, (AttributeError, KeyError)):
        # not the dims' doing (a TypeError may be: an int() of a symbolic size)
        raise model_failed(error, model, loaded.inputs) from error
    tied = [f"{names[i]}.{d}" for (i, d) in sorted(linked) if (i, d) not in dims]
    retry = ("" if len(errors) == 1 else f"\n(with {', '.join(tied)} static instead: "
             f"{_first_line(str(errors[1]))})")
    raise ModelLoadError(f"torch.export refused the --dynamic dims: "
                         f"{_torch_reason(str(error)) or type(error).__name__}{retry}"
                         f"\n{_hint(error, model, loaded.inputs, dims, specs_tried[0], names)}")


def _export(model, inputs, spec):
    import torch

    with quiet_torch_logs():
        return torch.export.export(model, tuple(inputs), dynamic_shapes=spec, strict=False)


def _first_line(message: str) -> str:
    return next((ln.strip() for ln in message.splitlines() if ln.strip()), "")


def _declared(parsed, names, inputs):
    """{(input index, dim): label} and {label: Dim} for the options."""
    import torch

    dims, labels, ranges = {}, {}, {}
    for name, d, label, lo, hi, step in parsed:
        if name in names and (names.index(name), d % inputs[names.index(name)].dim()) in dims:
            raise ModelLoadError(f"{name}.{d} is declared twice (by --dynamic, or by a range in "
                                 f"--input {name}=...): declare it once")
        if name not in names:
            raise ModelLoadError(f"--dynamic {name}.{d}: the model has no input {name!r} "
                                 f"(inputs: {', '.join(names)})")
        i = names.index(name)
        rank = inputs[i].dim()
        if not -rank <= d < rank:
            raise ModelLoadError(f"--dynamic {name}.{d}: input {name!r} has {rank} dims")
        d %= rank
        label = label or f"{name}_{d}"
        if lo is not None:
            if label in ranges and ranges[label] != (lo, hi, step):
                raise ModelLoadError(f"--dynamic: dim {label} given two ranges")
            example = int(inputs[i].shape[d])
            if not lo <= example <= hi:
                raise ModelLoadError(f"--dynamic {name}.{d}={lo}..{hi}: the example input's "
                                     f"size {example} is outside the range (give the dim as a "
                                     f"range in --input {name}=... instead: aotpack then picks "
                                     f"an example inside it)")
            if example % step:
                raise ModelLoadError(f"--dynamic {name}.{d}={lo}..{hi}:{step}: the example "
                                     f"input's size {example} is not a multiple of {step}")
            ranges[label] = (lo, hi, step)
        dims[(i, d)] = label
    for label in set(dims.values()):
        if label not in ranges:
            raise ModelLoadError(f"--dynamic: dim {label} has no range (give LO..HI once)")
        lo, hi, step = ranges[label]
        labels[label] = torch.export.Dim(label, min=lo, max=hi) if step == 1 else \
            step * torch.export.Dim(f"_{label}", min=-(-lo // step), max=hi // step)
    return dims, labels


def _linked(dims: dict, inputs, static=frozenset()) -> dict:
    """`dims` plus every dim of an input that declares none whose example size equals that of
    exactly one declared dim (an input that declares a dim keeps its other dims static, and so
    does a dim given as `static`)."""
    by_size: dict[int, set] = {}
    for (i, d), label in dims.items():
        by_size.setdefault(int(inputs[i].shape[d]), set()).add(label)
    declaring = {i for i, _ in dims}
    out = dict(dims)
    for i, t in enumerate(inputs):
        if i in declaring:
            continue
        for d, n in enumerate(t.shape):
            labels = by_size.get(int(n), set())
            if n > 1 and len(labels) == 1 and (i, d) not in static:
                out[(i, d)] = next(iter(labels))
    return out


def _torch_reason(message: str) -> str:
    """torch.export's reason, its suggested fixes included (they say which range works)."""
    lines = [ln for ln in message.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith("The error above occurred")
            and "draft_export" not in ln]
    return "\n".join(keep[:12])


def _hint(error, model, inputs, dims: dict, spec, names) -> str:
    """What to do after torch's reason: an example size torch fixes, a dim the model's code
    fixes, or (dim_hints) a dim its shape arithmetic constrains to multiples."""
    message = str(error)
    small = [f"input {i} dim {d}" for (i, d) in dims if int(inputs[i].shape[d]) <= 1]
    if small:
        return (f"The example's size is 0 or 1 in {', '.join(small)}: torch.export fixes such "
                f"sizes; give an example input of size 2 or more there.")
    if "specialized" in message:
        return ("The model's code constrains that dim (a shape check, a Python branch on it, a "
                "buffer of some size): keep the dim static, or use the range torch.export "
                "suggests above. An input that declares one dim keeps its other dims static: "
                "tie them with NAME.DIM=LABEL where the model needs them equal.")
    if not is_dims_refusal(error):
        return "Run with TORCH_LOGS=+dynamic to see why."
    return dims_hint(message, plain_dims(spec, names), exports_with(model, inputs, spec),
                     cli=True)
