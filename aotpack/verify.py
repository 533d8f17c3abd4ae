"""`aotpack verify`: is a bundle (or the compiler that made it) numerically right?

reference="cpu": re-run frontend + passes on the model spec (a bundle stores no torch
references), run the plan with each kernel's torch reference on the CPU, compare with eager
PyTorch. reference="gpu": run the bundle itself through the C runtime binding and compare with
eager PyTorch on the GPU. Both draw fresh random inputs (not the example inputs) from `seed`.
A bundle with dynamic dims is checked at several shapes (`shape_points`): the example, every
dim at its minimum, every dim at its maximum, each dim alone at its maximum, and random sizes
inside the ranges (odd and prime ones among them), or at the shapes the caller names.
Error per output: ‖out − ref‖ / ‖ref‖ in f64; an output passes at ≤ `tolerance`.
A bf16/f16 model's eager output carries rounding error of its own (a 12-layer ViT-B/16 in
bf16 is ~1e-2 from its float32 self), so two correct implementations can differ by more than
the tolerance. An output that fails against eager is therefore compared, together with eager,
against the model upcast to float32 (TF32 off) on the same inputs: it passes when it is at most
HP_MARGIN times as far from that as eager is (or within the tolerance of it).
torch is imported inside the functions.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from aotpack.bundle import read_bundle
from aotpack.dtypes import DType
from aotpack.errors import UserError
from aotpack.verify_shapes import (
    _example_options, _shapes_label, _signature_at, dynamic_options, shape_points,
)

DEFAULT_TOLERANCE = 1e-2
HP_MARGIN = 1.5  # how much further from float32 than eager a low-precision output may be


class VerifyError(UserError):
    """The bundle and the model spec do not describe the same model, or the reference cannot
    run here; the message says what to do."""


@dataclass
class OutputCheck:
    name: str  # "out0", or "out0 @ x=2x17,mask=2x17" for a dynamic bundle (its inputs' shapes)
    rel_error: float
    max_abs_error: float
    ok: bool
    # against the float32 upcast (only measured when the output failed against eager in a
    # 16-bit model): the output's error, and eager's own
    rel_error_f32: float | None = None
    eager_rel_error_f32: float | None = None
    # the eager output's largest finite |value|: a relative error says how close, this says
    # to what (a randomly initialised head can leave every logit near 1e-8)
    ref_max_abs: float | None = None


@dataclass
class VerifyReport:
    reference: str
    seed: int
    tolerance: float
    outputs: list[OutputCheck]
    warnings: list[str] = field(default_factory=list)
    against: str = "eager PyTorch"  # what computed the references (onnxruntime for ONNX)
    float32: bool = False  # some output is float32 (the CPU reference's exact matmuls matter)

    @property
    def passed(self) -> bool:
        return all(o.ok for o in self.outputs)


def default_reference() -> str:
    try:
        import torch

        return "gpu" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def verify(bundle, model_spec: str, *, reference: str | None = None, seed: int = 0,
           tolerance: float | None = None, weights_path=None,
           points: list[dict] | None = None) -> VerifyReport:
    """`points`: for a dynamic bundle, the dims' values to check at ({name: value} each);
    default `shape_points`. `tolerance`: default DEFAULT_TOLERANCE, or for a quantized
    bundle 1.5x the error its build measured (precision.verify_tolerance)."""
    from aotpack import precision

    reference = reference or default_reference()
    if reference not in ("cpu", "gpu"):
        raise VerifyError(f"reference must be 'cpu' or 'gpu', not {reference!r}")
    b = read_bundle(bundle, weights_path=weights_path)
    if tolerance is None:
        tolerance = precision.verify_tolerance(b.manifest) or DEFAULT_TOLERANCE
    notes = _source_check(b.manifest.get("provenance") or {}, model_spec)
    if b.manifest.get("generation"):  # a generation step: checked along real sequences
        if points:
            raise VerifyError("a generation bundle is checked along generated sequences "
                              "(prefill, then decode steps): --shape does not apply")
        from aotpack.generation.verify import verify_generation

        return verify_generation(bundle, b.manifest, model_spec, reference, seed, tolerance,
                                 weights_path, notes)
    loaded = _load(model_spec, b.manifest)
    model, examples = loaded.model, loaded.inputs
    symbols = b.manifest.get("symbols") or []
    if symbols:
        points = points or shape_points(symbols, seed)
    elif points:
        raise VerifyError("the bundle has no dynamic dims: it runs only its own shapes")
    run = _cpu_runner(b.manifest, loaded) if reference == "cpu" else \
        _gpu_runner(Path(bundle), weights_path, model)
    checks = []
    for k, point in enumerate(points or [None]):
        signature = _signature_at(b.manifest["inputs"], point)
        label = "" if point is None else " @ " + _shapes_label(b.manifest["inputs"], signature)
        inputs = random_inputs(signature, examples, seed + k)
        try:
            outs, refs = run(inputs)
        except _ModelRefused as refusal:  # the model's own code refusing values drawn at random
            e = refusal.__cause__
            inputs = _examples_at(signature, examples)
            if inputs is None:
                raise VerifyError(_refused(e, label) + "; its example inputs have other "
                                  "shapes: verify at their shapes (--shape)") from e
            try:
                outs, refs = run(inputs)
            except _ModelRefused as again:  # not about the values: the model fails anyway
                raise again.__cause__ from None
            notes.append(_refused(e, label) + "; compared on the example inputs instead")
        checks += _checks(b.manifest["outputs"], outs, refs, model, inputs, tolerance, label)
        notes += _vacuous(b.manifest["outputs"], refs, label, notes, tolerance)
    against = "onnxruntime" if getattr(loaded, "kind", "") == "onnx" else "eager PyTorch"
    float32 = any(o["dtype"] == "f32" for o in b.manifest["outputs"])
    return VerifyReport(reference, seed, tolerance, checks, notes, against, float32)


def _vacuous(outputs, refs, label: str, notes: list[str], tolerance: float) -> list[str]:
    """Warnings for floating outputs that a bundle writing one constant would pass (not
    repeated for an output already named in `notes`): a reference that is all zeros or one
    value (a classifier whose last ReLU clips every logit of a randomly initialised model),
    or that varies so little around its mean that the mean everywhere is within `tolerance`
    (YOLOS's random-init boxes: 0.5 +- 3e-4)."""
    found = []
    for spec, ref in zip(outputs, refs):
        name = spec["name"]
        if not ref.is_floating_point() or ref.numel() < 2 \
                or any(f"output {name} " in n for n in notes):
            continue
        r = ref.detach().double()
        first = float(r.reshape(-1)[0])
        if bool((r == first).all()):
            what = "all zeros" if first == 0 else f"constant (every element {first:g})"
            passes = "that value"
        else:
            mean = float(r.mean())
            spread = float((r - mean).norm()) / max(float(r.norm()), 1e-300)
            if not (spread <= tolerance):  # NaN too: nothing to say
                continue
            what = (f"nearly constant ({mean:.4g}; writing that everywhere is {spread:.1e} "
                    f"off)")
            passes = "its mean"
        msg = (f"output {name} of the eager reference is {what}{label}: the comparison is "
               f"vacuous (any bundle that writes {passes} passes). Make the model's output "
               f"vary: random initialisation often leaves a final ReLU, a sigmoid or a "
               f"zero-initialised head near constant; load trained weights, or re-initialise "
               f"them in the factory")
        warnings.warn(msg, stacklevel=3)
        found.append(msg)
    return found


def _checks(outputs, outs, refs, model, inputs, tolerance, label: str) -> list[OutputCheck]:
    checks = [compare(spec["name"] + label, o, r, tolerance)
              for spec, o, r in zip(outputs, outs, refs)]
    low = [i for i, (c, r) in enumerate(zip(checks, refs))
           if not c.ok and DType.from_torch(r.dtype) in (DType.BF16, DType.F16)]
    if low:
        precise = _upcast_eager(model, inputs, refs[0].device)
        for i in low:
            checks[i] = compare(checks[i].name, outs[i], refs[i], tolerance, precise[i])
    return checks


def _load(model_spec: str, manifest: dict):
    """The model as the bundle was built from it: a model.pt given its example inputs at the
    bundle's example shape (as --input did), a dynamic bundle's dims re-declared from its
    manifest when the spec itself declares none (it was built with --dynamic)."""
    from aotpack.frontend import load_spec
    from aotpack.frontend.prepare import prepare

    loaded = load_spec(model_spec)
    provenance = manifest.get("provenance") or {}
    # inputs the build was given (--input, or a model.pt's): again, at the bundle's example
    inputs = _example_options(manifest) if loaded.inputs is None or provenance.get("inputs") \
        else ()
    dtype = provenance.get("dtype")
    dynamic = dynamic_options(manifest) if manifest.get("symbols") and \
        loaded.dynamic_shapes is None else ()
    return prepare(loaded, inputs=inputs, dtype=dtype, dynamic=dynamic)


_SEARCH_DEPTH, _SEARCH_DIRS = 3, 2000  # how far a recorded spec is looked for below here


def find_recorded_spec(prov: dict, root: Path = Path(".")) -> tuple[str | None, str]:
    """(the model spec the build recorded, with its file found under `root`, or None; why
    not). The provenance keeps the file's name only (bundles built in two places stay
    byte-identical), so the file is looked for in `root` and its subfolders (3 levels), and
    only a file with the recorded sha256 counts: a same-named other model is never used."""
    from aotpack.shared_steps import file_sha256, source_file

    spec = prov.get("spec")
    if not spec:
        return None, "the bundle records no model spec"
    name, sep, factory = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    digest = prov.get("source_sha256")
    others = []
    for path in _files_named(root, name):
        if digest is None or file_sha256(source_file(str(path))) == digest:
            return f"{path}{sep}{factory}", ""
        others.append(str(path))
    where = f"no {name} under {root.resolve()} (3 levels)" if not others else \
        f"{', '.join(others[:3])} {'is' if len(others) == 1 else 'are'} not the file it was " \
        f"built from (sha256 differs)"
    return None, f"its build named {spec!r}: {where}"


def _files_named(root: Path, name: str):
    """Files called `name` in `root` (or checkpoint folders: a config.json inside), then
    breadth-first in its subfolders (not hidden ones), bounded in depth and in folders
    visited."""
    level, seen = [root], 0
    for _ in range(_SEARCH_DEPTH + 1):
        following = []
        for folder in level:
            if (folder / name).is_file() or (folder / name / "config.json").is_file():
                yield folder / name if folder != root else Path(name)
            seen += 1
            if seen > _SEARCH_DIRS:
                return
            try:
                following += sorted(d for d in folder.iterdir()
                                    if d.is_dir() and not d.name.startswith("."))
            except OSError:
                continue
        level = following


def _source_check(prov: dict, model_spec: str) -> list[str]:
    from aotpack.shared_steps import file_sha256, source_file

    src = source_file(model_spec)
    if not src.is_file():
        raise VerifyError(f"model spec {model_spec!r}: {src} does not exist")
    recorded = prov.get("source_sha256")
    if recorded and recorded != file_sha256(src):
        msg = (f"{src} changed since the bundle was built (source sha256 differs): the "
               f"comparison is against the current model file")
        warnings.warn(msg, stacklevel=3)
        return [msg]
    return []


def random_inputs(signature: list[dict], examples, seed: int) -> list:
    """Fresh inputs shaped as the bundle's signature: floats ~ N(0, 1); integers uniform in
    the example input's [min, max] (token ids stay valid); bools uniform."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for i, spec in enumerate(signature):
        dtype, shape = DType(spec["dtype"]), tuple(spec["shape"])
        td = dtype.to_torch()
        if dtype.is_float:
            out.append(torch.randn(shape, generator=g, dtype=torch.float32).to(td))
        elif dtype == DType.BOOL:
            out.append(torch.randint(0, 2, shape, generator=g).bool())
        else:
            ex = examples[i] if i < len(examples) else None
            lo, hi = (int(ex.min()), int(ex.max())) if ex is not None and ex.numel() else (0, 1)
            if _padding_mask(spec, ex):
                out.append(_padded_rows(shape, g, td))
                continue
            out.append(torch.randint(lo, hi + 1, shape, generator=g, dtype=td))
    return out


class _ModelRefused(Exception):
    """The eager model raised on these inputs (its cause): the reference, not the bundle."""


def _eager_or_refused(model, inputs: list) -> list:
    """_eager, its failure marked as the model's (the bundle's own failures stay errors)."""
    try:
        return _eager(model, inputs)
    except Exception as e:
        raise _ModelRefused() from e


def _examples_at(signature: list[dict], examples):
    """The example inputs, when they fit `signature` (shapes and dtypes), else None."""
    if examples is None or len(examples) != len(signature):
        return None
    fits = all(tuple(t.shape) == tuple(s["shape"]) and DType.from_torch(t.dtype).value ==
               s["dtype"] for t, s in zip(examples, signature))
    return list(examples) if fits else None


def _refused(e: Exception, label: str) -> str:
    text = " ".join(str(e).split())[:300]
    return (f"the model failed on the random inputs verify draws{label} (integers uniform in "
            f"each example input's range; the model may need related values, e.g. boxes with "
            f"x1 >= x0): {type(e).__name__}: {text}")


def _padding_mask(spec: dict, ex) -> bool:
    """An integer [B, S] input named like a mask whose example rows are each 1s then 0s,
    starting with a 1 (a tokenizer's mask: all 1s for unpadded text); a mask whose 1s mark
    the padding is not one."""
    import torch

    if "mask" not in spec["name"].lower() or len(spec["shape"]) != 2 or ex is None \
            or ex.dim() != 2 or not ex.numel():
        return False
    return bool((ex[:, 0] == 1).all()) and torch.equal(
        ex, _prefix_ones(ex.sum(1), ex.shape[1], ex.dtype))


def _padded_rows(shape, g, dtype):
    """A right-padded batch's mask: row b is 1 for its first L_b positions, L_b random in
    [1, S] with the first row whole, so a mask the example left all 1s is exercised."""
    import torch

    rows, seq = shape
    lengths = torch.randint(1, seq + 1, (rows,), generator=g)
    lengths[0] = seq
    return _prefix_ones(lengths, seq, dtype)


def _prefix_ones(lengths, seq: int, dtype):
    """[len(lengths), seq]: row b is 1 for its first lengths[b] positions, then 0."""
    import torch

    return (torch.arange(seq)[None, :] < lengths[:, None]).to(dtype)


def _exported(model) -> bool:
    """A torch.export ExportedProgram (a .pt2 spec) rather than an nn.Module."""
    return hasattr(model, "module") and hasattr(model, "graph_signature")


def _as_module(model):
    return model.module() if _exported(model) else model


def _eager(model, inputs: list) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    if _exported(model):
        model = model.module()
    elif hasattr(model, "eval"):
        try:
            model.eval()
        except NotImplementedError:  # an exported program's module (a .pt2's, TorchScript's
            pass  # conversion): it has no training mode to leave
    with torch.no_grad():
        result = model(*inputs)
    return [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


def _cpu_runner(manifest: dict, loaded):
    """run(inputs) -> (outputs of the plan with torch references, eager outputs); the plan is
    compiled once and run at any shape its dims allow."""
    from aotpack import precision
    from aotpack.executor import run_reference
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph

    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    precision.apply(program, precision.mode(manifest))  # the plan the bundle was built from
    _check_signature(manifest, program)
    _check_weights(manifest, program, loaded.model)

    def run(inputs):
        refs = _eager_or_refused(loaded.model, inputs)  # first: a refusal is the model's
        return run_reference(program, inputs), refs

    return run


def _own_weight_names(model) -> set:
    """The names of the model's own parameters and buffers (a torch module or exported
    program; an ONNX model's initializers): renamed by content never."""
    if hasattr(model, "named_buffers"):
        return {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    proto = getattr(model, "proto", None)  # frontend/onnx/model.py's OnnxModel
    return {t.name for t in proto.graph.initializer} if proto is not None else set()


def _check_weights(manifest: dict, program, model=None) -> None:
    """The CPU reference runs the model spec's own weights, so they must be the bundle's
    (sha256 each): another model, or a factory that draws its weights unseeded, would
    otherwise pass against itself."""
    from aotpack.bundle.writer import _weights, differing_weights, match_weights

    records = _weights(program)[0]
    if match_weights(manifest["weights"], records, _own_weight_names(model)) is None:
        diff = differing_weights(manifest["weights"], records)
        raise VerifyError(f"the model spec's weights are not the bundle's ({len(diff)} differ, "
                          f"e.g. {diff[0]!r}): is this the model the bundle was built from, "
                          f"and does its factory seed its weights (torch.manual_seed)?")


def _upcast_eager(model, inputs: list, device) -> list:
    """Eager outputs of the model and its floating inputs upcast to float32 (a copy), on
    `device`, with TF32 off: the higher-precision reference."""
    import copy

    import torch

    model32 = copy.deepcopy(_as_module(model)).to(device).float()
    args = [t.to(device).float() if t.is_floating_point() else t.to(device) for t in inputs]
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return _eager(model32, args)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _check_signature(manifest: dict, program) -> None:
    from aotpack.bundle.manifest import dim_json

    def sig(names):
        return [(program.storage(n).dtype.value, [dim_json(d) for d in program.storage(n).shape])
                for n in names]

    for side, names in (("inputs", program.inputs), ("outputs", program.outputs)):
        want = [(s["dtype"], s["shape"]) for s in manifest[side]]
        if sig(names) != want:
            raise VerifyError(f"the model spec's {side} {sig(names)} differ from the bundle's "
                              f"{want}: is this the model the bundle was built from?")


def _gpu_runner(bundle: Path, weights_path, model):
    """run(inputs) -> (the bundle's outputs through the C runtime, eager outputs on the GPU);
    one model and session for every shape."""
    import torch

    if not torch.cuda.is_available():
        raise VerifyError("--reference gpu needs a CUDA GPU; use --reference cpu here")
    from aotpack.runtime import Model, Session

    rt = Model(str(bundle), weights_path=str(weights_path) if weights_path else None)
    session = Session(rt)
    module = _as_module(model).to("cuda")

    def run(inputs):
        cuda_inputs = [t.cuda() for t in inputs]
        refs = _eager_or_refused(module, cuda_inputs)  # first: a refusal is the model's
        outs = session.run(cuda_inputs)
        torch.cuda.synchronize()
        return outs, refs

    return run


def _rel(out, ref) -> tuple[float, float]:
    """(‖out − ref‖ / ‖ref‖, max |out − ref|) in f64; inf for NaN or mismatched shapes."""
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf"), float("inf")
    o, r = out.detach().double().cpu(), ref.detach().double().cpu()
    diff = (o - r)
    denom = float(r.norm())
    rel = float(diff.norm()) / denom if denom > 0 else float(diff.norm())
    if rel != rel:  # NaN anywhere
        rel = float("inf")
    return rel, (float(diff.abs().max()) if diff.numel() else 0.0)


def compare(name: str, out, ref, tolerance: float, precise=None) -> OutputCheck:
    """`out` against eager `ref`; with `precise` (the float32 upcast's output) also both
    against it: then `out` passes when no further from it than HP_MARGIN times eager is."""
    rel, max_abs = _rel(out, ref)
    size = _magnitude(ref)
    if precise is None:
        return OutputCheck(name, rel, max_abs, rel <= tolerance, ref_max_abs=size)
    ours, eager = _rel(out, precise)[0], _rel(ref, precise)[0]
    ok = rel <= tolerance or ours <= max(tolerance, HP_MARGIN * eager)
    return OutputCheck(name, rel, max_abs, ok, ours, eager, size)


def _magnitude(ref) -> float | None:
    """max |ref| over its finite values (None for a non-float or empty output)."""
    if not ref.is_floating_point() or ref.numel() == 0:
        return None
    r = ref.detach().double().cpu().abs()
    r = r[r.isfinite()]
    return float(r.max()) if r.numel() else None
