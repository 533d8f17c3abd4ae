"""`--precision`: what a build stores in fewer bits, and the error that costs, measured.

An FP8 bundle computes something else than its model: how far it is from the model is part of
the product. The build runs the quantized plan (the torch reference of every kernel op, CPU)
and the model itself upcast to float32 on the same random inputs (the example shapes; a
generation step's example prompts) and records, per floating output, ‖out − ref‖ / ‖ref‖ in
the manifest's provenance (`precision`); `aotpack inspect` shows it, `--max-error` refuses a build
above it (without it the build warns above WARN_ERROR), and `aotpack verify` holds the bundle to it.
"""
from __future__ import annotations

from aotpack.errors import UserError

# Relative L2 of a floating output against the float32 model above which the build warns
# (without --max-error it does not refuse): e4m3 keeps 3 mantissa bits, so rounding alone costs
# ~2.6 % per GEMM (Gaussian weights, per-row scales); a Llama block measures ~5 %, and a deep
# random-weight model compounds it (Llama-3.2-1B's shape, 16 layers: ~16 %).
WARN_ERROR = 0.1


class PrecisionError(UserError):
    """The quantized plan is further from the float32 model than --max-error allows."""


def quantize(program, loaded, precision: str, max_error: float | None = None,
             measure_error: bool = True):
    """`program` (of the model `loaded`) quantized for `precision`, then, unless
    `measure_error` is off (tuning: the plan, not its accuracy), its error measured against
    the float32 model, bounded by `max_error` and recorded in `program.precision` (the
    bundle's provenance), with notes for the build."""
    import logging

    from aotpack.shared_steps import BuildError, check_supported

    report = apply(program, precision)
    if report is None or not measure_error:
        return program
    check_supported(program)
    program.notes += report.notes()
    why = unmeasurable(loaded)
    if why and max_error is not None:
        raise BuildError(f"--max-error cannot be checked: {why} (build on a larger host, or "
                         f"without --max-error: the error is then not measured)")
    if why:
        errors = {}
        program.notes.append(f"warning: {precision}: the error against the float32 model was "
                             f"not measured: {why}; verify the bundle on a larger host")
    else:
        logging.getLogger(__name__).info("measuring the %s plan against the float32 model "
                                         "(CPU)", precision)
        errors = measure(program, loaded)
        program.notes.append(f"{precision}: error against the float32 model (relative L2): " +
                             ", ".join(f"{k} {v:.3g}" for k, v in errors.items()))
    program.notes += check(errors, max_error)
    program.precision = provenance(report, errors, max_error)
    return program


def apply(program, precision: str | None):
    """Quantize `program` for `precision` (in place), then run the program passes that must
    see the quantized plan (passes/fuse_gemm_norm.py: an FP8 norm stays separate); the
    QuantizeReport, or None for the model's own precision. Build and verify both come through
    here, so they run the same plan."""
    from aotpack.passes.fuse_gemm_norm import fuse_gemm_norm

    report = _quantize(program, precision)
    fuse_gemm_norm(program)
    return report


def _quantize(program, precision: str | None):
    if precision in (None, "model"):
        if getattr(program, "fp8_sources", None):  # FP8 weights the model holds stay FP8
            from aotpack.passes.quantize import keep_checkpoint_fp8

            program.notes += keep_checkpoint_fp8(program).notes()
        return None
    from aotpack.passes.quantize import PRECISIONS, quantize_weights

    if precision not in PRECISIONS:
        raise PrecisionError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    report = quantize_weights(program, activations=precision == "fp8")
    if report.quantized == 0:
        kept = "; ".join(f"{n} x {why}" for why, n in report.skipped.items()) or (
            "its linears are f32, run as tf32 convolutions" if _has_f32_linears(program)
            else "no GEMMs")
        raise PrecisionError(f"--precision {precision}: no GEMM of this model can take FP8 "
                             f"weights ({kept}); an f32 model needs --dtype bf16 first")
    report.mode = precision
    return report


def _has_f32_linears(program) -> bool:
    """f32 GEMMs lower to 1x1 convolutions (lower_conv.f32_gemm_as_conv): a ConvOp that is
    one, with an f32 weight."""
    from aotpack.dtypes import DType
    from aotpack.kernels.spec import ConvOp

    return any(isinstance(op, ConvOp) and op.kernel == (1, 1) and op.x.shape[1:3] == (1, 1)
               and op.w.dtype == DType.F32 for op in program.ops)


def float32_copy_bytes(model) -> int:
    """Host bytes the measurement's float32 copy of `model` takes (parameters and buffers)."""
    module = model.module() if hasattr(model, "graph_signature") else model
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(4 * t.numel() for t in tensors if t.is_floating_point())


def available_bytes() -> int | None:
    """MemAvailable of this host (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def unmeasurable(loaded) -> str | None:
    """Why the error cannot be measured on this host (its float32 copy of the model would not
    fit in the memory available, with a margin for the activations), or None."""
    need, have = float32_copy_bytes(loaded.model), available_bytes()
    if have is not None and need > 0.7 * have:
        return (f"measuring needs a float32 copy of the model ({need / 2**30:.1f} GiB) and this "
                f"host has {have / 2**30:.1f} GiB available")
    return None


def measure(program, loaded, seed: int = 0) -> dict[str, float]:
    """Relative L2 error of each floating output of `program` (run by the CPU reference)
    against `loaded.model` in float32, on inputs drawn like verify's at the example shapes
    (a generation step: its example prompts, which must describe real sequences)."""
    import torch

    from aotpack.executor import run_reference
    from aotpack.verify import _rel, _upcast_eager, random_inputs

    if program.generation is not None:
        inputs = list(loaded.inputs)
    else:
        signature = [{"dtype": program.storages[n].dtype.value, "shape": list(t.shape)}
                     for n, t in zip(program.inputs, loaded.inputs)]
        inputs = random_inputs(signature, loaded.inputs, seed)
    with torch.no_grad():
        outs = run_reference(program, inputs, poison=False)
        refs = _upcast_eager(loaded.model, inputs, "cpu")
    return {name: _rel(o, r)[0] for name, o, r in zip(program.outputs, outs, refs)
            if o.is_floating_point()}


def provenance(report, errors: dict[str, float], max_error: float | None) -> dict:
    """The manifest provenance's `precision` entry (covered by the manifest's digest)."""
    acts = {"activations": "f8e4m3, a scale per row (from the RMSNorm before, or the GEMM)"} \
        if report.mode == "fp8" else {}
    return {"mode": report.mode, "weights": "f8e4m3", "scale": "per output row (f32)", **acts,
            "quantized_gemms": report.quantized, "kept": dict(report.skipped),
            **({"norms_writing_fp8": report.norms_fused} if report.norms_fused else {}),
            "weight_bytes": report.weight_bytes_after,
            "rel_error": {k: float(f"{v:.4g}") for k, v in errors.items()},
            "max_error": max_error}


def check(errors: dict[str, float], max_error: float | None) -> list[str]:
    """PrecisionError naming the outputs over `max_error`; without one, warnings for those
    over WARN_ERROR."""
    if max_error is None:
        return [f"warning: FP8: {k} is {v:.3g} from the float32 model (relative L2); "
                f"check the model's quality in FP8, bound it with --max-error, or build with "
                f"--precision model" for k, v in errors.items() if not v <= WARN_ERROR]
    over = {k: v for k, v in errors.items() if not v <= max_error}
    if over:
        worst = ", ".join(f"{k} {v:.3g}" for k, v in over.items())
        raise PrecisionError(
            f"the FP8 plan is further from the float32 model than --max-error {max_error:g} "
            f"allows (relative L2 per output: {worst}); raise --max-error if that is "
            f"acceptable for this model, or build it with --precision model")
    return []


def mode(manifest: dict) -> str:
    """The precision a bundle was built in ("model" for its model's own)."""
    entry = (manifest.get("provenance") or {}).get("precision")
    return entry.get("mode", "model") if isinstance(entry, dict) else "model"


def verify_tolerance(manifest: dict) -> float | None:
    """The tolerance `aotpack verify` holds a quantized bundle to by default: 1.5x the
    largest error its build measured (another draw of inputs errs a little differently),
    never below verify's own default; None for a bundle in its model's precision."""
    from aotpack.verify import DEFAULT_TOLERANCE

    if mode(manifest) == "model":
        return None
    errors = manifest["provenance"]["precision"].get("rel_error")
    if not errors:  # the build could not measure it: the bound it warns above
        return WARN_ERROR
    return max(DEFAULT_TOLERANCE, 1.5 * max(errors.values(), default=0.0))
