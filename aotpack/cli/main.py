"""The `aotpack` command line (typer). Heavy imports (torch, triton) happen inside commands, so
`aotpack inspect` and `--help` stay fast and work where only the bundle tools are installed."""
from __future__ import annotations

import enum
import functools
import json
import warnings
from pathlib import Path
from typing import Optional

import sys

import typer
import typer.rich_utils
from rich.console import Console
from rich.markup import escape

from aotpack.bundle.reader import bundle_file
from aotpack.cli import report

app = typer.Typer(
    name="aotpack", no_args_is_help=True, add_completion=False,
    pretty_exceptions_show_locals=False, rich_markup_mode="markdown",
    help="Ahead-of-time packaging of PyTorch models for NVIDIA GPUs: one bundle file with "
         "weights, cubins and an execution plan, run by a small C++ runtime with only the driver.",
)
# --help piped or captured (no terminal to measure) renders at rich's 80 columns, where the
# option table's description column is ~24 characters: give it room (TERMINAL_WIDTH wins)
if typer.rich_utils.MAX_WIDTH is None and not sys.stdout.isatty():
    typer.rich_utils.MAX_WIDTH = 120
err = Console(stderr=True)
out = Console()


# Choices are enums: typer lists them in --help and refuses any other value with a usage error
# (exit status 2), the same for every option.
class GemmBackend(str, enum.Enum):
    triton = "triton"
    cutedsl = "cutedsl"
    auto = "auto"


class TuneMode(str, enum.Enum):
    none = "none"
    fast = "fast"
    full = "full"


class TuneLevel(str, enum.Enum):
    fast = "fast"
    full = "full"


class CastDType(str, enum.Enum):
    bf16 = "bf16"
    f16 = "f16"
    f32 = "f32"  # a model saved in bf16/f16, built in float32 (tf32 tensor cores)


class HostPlatform(str, enum.Enum):
    auto = "auto"
    native = "native"
    linux_x86_64 = "linux-x86_64"
    linux_aarch64 = "linux-aarch64"


HOST_PLATFORM_HELP = ("which runtime (aotpack-run, libaotpack) the output folder gets. auto "
                      "(the default, or AOTPACK_HOST_PLATFORM): built for this machine's "
                      "platform against glibc 2.28 by zig (installed with aotpack; once, "
                      "~90 s on 2 cores, then cached), so that "
                      "Ubuntu 20.04, RHEL 8 and newer run it; else native, with a note. native: "
                      "the one installed with aotpack, built for this machine's glibc and "
                      "libstdc++. linux-x86_64, linux-aarch64 (Grace Hopper): built for that "
                      "platform against glibc 2.28; an error without zig")


class Precision(str, enum.Enum):
    model = "model"
    fp8_weights = "fp8-weights"
    fp8 = "fp8"


PRECISION_HELP = ("model: compute as the model is (default). fp8-weights: GEMM weights stored "
                  "in FP8 e4m3 with an f32 scale per output row, activations in the model's "
                  "dtype (half the weight bytes; the weights widen in registers). fp8: the "
                  "activations in e4m3 too, a scale per row computed by each GEMM: the FP8 "
                  "tensor cores (bf16/f16 models). Both halve the weight memory; on the H200 "
                  "fp8 decodes ~1.1x faster than bf16, prefill is slower (docs/precision.md). "
                  "The build measures "
                  "the error against the float32 model on the CPU and records it (aotpack "
                  "inspect shows it)")
MAX_ERROR_HELP = ("with --precision fp8-weights/fp8: refuse the build when an output's relative "
                  "L2 error against the float32 model exceeds this (default: no bound, a "
                  "warning above 0.1; FP8 rounding alone costs ~3 % per GEMM)")


class Reference(str, enum.Enum):
    cpu = "cpu"
    gpu = "gpu"


MODEL_HELP = ("the model: path/to/file.py:factory (returns (model, example_inputs)), a .pt2 "
              "file torch.export.save wrote, or a model.pt from torch.jit.save or "
              "torch.save(model) (give its inputs with --input; loading a torch.save file runs "
              "the code its pickle names: only files you trust), or a model.onnx (opset 13 "
              "and newer; its named dims need ranges: --dynamic PARAM=LO..HI)")
INPUT_HELP = ("an example input, repeatable: NAME=SHAPE[:DTYPE], dims joined by x "
              "(x=1x3x224x224:bf16); a dim LO..HI or LABEL:LO..HI varies at run time "
              "(input_ids=batch:1..64xseq:1..512:i64), a LABEL alone is that same dim "
              "(attention_mask=batch,seq). Needed for a model.pt; for other models it replaces "
              "that input's example.")
BUNDLE_HELP = "a model.aotpack file, or the folder `aotpack build` wrote"
DTYPE_HELP = ("cast the model's floating weights and inputs to this dtype first: bf16/f16 "
              "is the fast path (without it an f32 model builds as it is, its linears and "
              "convolutions on tf32 tensor cores); f32 builds a bf16/f16 model in float32")
DYNAMIC_HELP = ("a dim that varies at run time, repeatable: NAME.DIM=LO..HI "
                "(input_ids.1=1..4096) or NAME.DIM=LABEL:LO..HI to name it (input_ids.0=batch:1..64)"
                "; NAME.DIM=LABEL:LO..HI:STEP for the multiples of STEP only (x.2=H:64..512:32: "
                "a conv net whose strides and ceil-mode pools need them; the dim is then _H, "
                "sizes 32*_H); NAME.DIM=LABEL makes another input's dim the same one. Other inputs' dims of "
                "the same example size follow automatically. For a .onnx model also "
                "PARAM=LO..HI: the range of the ONNX named dim PARAM (batch=1..8); a named "
                "dim with no range is refused, naming the option to give.")


def _print_version(value: bool) -> None:
    if value:
        import aotpack

        typer.echo(f"aotpack {aotpack.__version__}")
        raise typer.Exit()


@app.callback()
def _setup(version: bool = typer.Option(False, "--version", callback=_print_version,
                                        is_eager=True, help="print the version and exit")
           ) -> None:
    """Log to stderr at the level AOTPACK_LOG asks for (default: warnings only)."""
    import logging

    from rich.logging import RichHandler

    from aotpack import knobs

    # torch's own deprecation notices (its pytree, reached by torch.export) are not the
    # user's to act on: they would be printed on every build and verify
    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    level = getattr(logging, knobs.log_level().upper(), logging.WARNING)
    logging.basicConfig(level=level, format="%(message)s",
                        handlers=[RichHandler(console=err, show_path=False)])


def _is_user_error(e: Exception) -> bool:
    """Errors that are the user's to fix: shown as one line, no traceback."""
    from aotpack.errors import UserError

    # path mistakes (an unwritable folder, a file where a folder should be) are the user's too
    return isinstance(e, (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
                          FileExistsError, PermissionError))


def friendly(command):
    """Turn user errors into `error: <message>` and exit status 1."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as e:
            if not _is_user_error(e):
                raise
            kind = f"{type(e).__name__}: " if getattr(e, "named", True) else ""
            err.print(f"[bold red]error:[/] {escape(kind + str(e))}")
            raise typer.Exit(1) from None
    return wrapper


@app.command()
@friendly
def build(
    spec: str = typer.Argument(..., metavar="MODEL", help=MODEL_HELP),
    arch: str = typer.Option("sm90", "--arch", help="target GPU architecture: sm90 (= sm_90a, "
                                                    "H100/H200) is the only one for now"),
    output: Path = typer.Option(..., "-o", "--output", help="output folder to create"),
    external_weights: bool = typer.Option(False, "--external-weights",
                                          help="write weights to weights.safetensors beside the "
                                               "bundle instead of inside it"),
    force: bool = typer.Option(False, "--force", help="replace the output folder if it exists"),
    no_progress: bool = typer.Option(False, "--no-progress",
                                            help="hide the progress bar (default: shown unless "
                                                 "AOTPACK_NO_PROGRESS=1)"),
    gemm_backend: GemmBackend = typer.Option("triton", "--gemm-backend",
                                     help="GEMM kernels: triton (default), cutedsl (Hopper "
                                          "warp-specialized; needs nvidia-cutlass-dsl) or auto "
                                          "(cutedsl where installed and M >= 4096, else triton)"),
    tuning_db: Optional[Path] = typer.Option(None, "--tuning-db", help="tuning database "
                                             "(aotpack tune --import): ops measured there are "
                                             "compiled with their measured winners"),
    tune: TuneMode = typer.Option("none", "--tune", help="tune on this machine's "
                             "GPU first (needs one; GEMM candidates of every installed backend, "
                             "whatever --gemm-backend says), saving winners to --tuning-db or to "
                             # not <output>: markdown help drops it as an HTML tag
                             "OUTPUT.tuning.json beside the output folder"),
    tune_budget: Optional[float] = typer.Option(None, "--tune-budget", min=1,
                                                help="seconds of GPU measuring at most"),
    dynamic: Optional[list[str]] = typer.Option(None, "--dynamic", help=DYNAMIC_HELP),
    input_: Optional[list[str]] = typer.Option(None, "--input", help=INPUT_HELP),
    dtype: Optional[CastDType] = typer.Option(None, "--dtype", help=DTYPE_HELP),
    task: Optional[str] = typer.Option(None, "--task", help="text-generation: compile the "
                                       "model's generation step (prefill and decode over a KV "
                                       "cache kept in the session; docs/generation.md). SPEC is "
                                       "then a factory returning a transformers causal LM (or a "
                                       "module following docs/generation.md), a torch.save'd "
                                       "model or a local checkpoint folder"),
    max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len", help="with --task "
                                              "text-generation: prompt + generated tokens per "
                                              "sequence at most (the KV cache's length; default "
                                              "2048)"),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", help="with --task "
                                            "text-generation: sequences generated at once at "
                                            "most (default 1)"),
    precision: Precision = typer.Option("model", "--precision", help=PRECISION_HELP),
    max_error: Optional[float] = typer.Option(None, "--max-error", min=0.0, help=MAX_ERROR_HELP),
    host_platform: Optional[HostPlatform] = typer.Option(None, "--host-platform",
                                                         help=HOST_PLATFORM_HELP),
):
    """Compile a model into an output folder: model.aotpack (+ weights.safetensors), the
    aotpack-run launcher, libaotpack, headers and a README. Needs no GPU (except --tune).

    Dynamic shapes: a dim given with `--dynamic` (or a torch.export.Dim in a .pt2 or in the
    factory's third return value) varies at run time within its range; one bundle serves
    every shape (kernels chosen per size bucket, memory planned for the largest shape).

    ONNX: `aotpack build model.onnx --arch sm90 -o out/m` translates the ONNX graph itself
    (opsets 13 to the newest the installed onnx knows; external data read from beside the
    file). Its named dims (dim_param) become dynamic dims and need a range:
    `--dynamic batch=1..8 --dynamic sequence=1..512`, or pin them with `--input`.

    Text generation: `aotpack build llm.py:make --task text-generation --max-seq-len 4096
    --max-batch 8 --dtype bf16 -o out/llm`, then `out/llm/aotpack-run out/llm/model.aotpack
    --generate 256 --prompt-ids 1,15043,3186`.

    FP8: `--precision fp8-weights` (weights) or `fp8` (weights and activations, the FP8
    tensor cores; docs/precision.md); the error against the float32 model is measured at build
    time and bounded by `--max-error`."""
    from aotpack.builder import build as run_build
    from aotpack.shared_steps import command_line_from_argv, parse_arch
    from aotpack.generation.task import parse_task

    parse_arch(arch)  # refuse a bad --arch before loading the model
    generation = parse_task(task, max_seq_len, max_batch)
    result = run_build(spec, output, arch=arch, external_weights=external_weights, force=force,
                       progress=False if no_progress else None,
                       command_line=command_line_from_argv(),
                       gemm_backend=gemm_backend.value, tuning_db=tuning_db, tune=tune.value,
                       tune_budget_s=tune_budget, dynamic=dynamic or (), inputs=input_ or (),
                       dtype=dtype and dtype.value, generation=generation,
                       precision=precision.value, max_error=max_error,
                       host_platform=host_platform and host_platform.value)
    for n in result.notes:
        if n.startswith("warning: "):
            n = n[len("warning: "):]
            kind = "[yellow]warning:[/]"
        else:
            kind = "[yellow]warning:[/]" if "stale" in n else "note:"
        err.print(f"{kind} {escape(n)}")
    for w in result.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    out.print(f"[bold green]built[/] {escape(str(result.out_dir))}: {result.steps} steps, "
              f"{result.kernels} kernels ({result.compiled_ops} distinct compiles), arena "
              f"{report.human_bytes(result.arena_bytes)}")
    if (result.out_dir / "aotpack-run").is_file():
        how = "--bench 100"
        if generation is not None:  # prompt + new tokens - 1 must fit the cache
            prompt = min(3, generation.max_seq_len - 1)
            new = min(64, generation.max_seq_len - prompt + 1)
            ids = ",".join(str(i) for i in range(1, prompt + 1))
            how = f"--generate {new} --prompt-ids {ids}  (prompt ids: your tokenizer's)"
        else:  # a bundle with dynamic dims: its smallest and its largest shapes
            from aotpack.bundle import read_bundle
            from aotpack.verify_shapes import run_shape_options

            manifest = read_bundle(result.bundle, require_weights=False).manifest
            how = " ".join([how, *run_shape_options(manifest)])
        out.print(f"run it on the GPU machine: cd {escape(str(result.out_dir))} && "
                  f"./aotpack-run model.aotpack {how}")


@app.command()
@friendly
def tune(
    spec: Optional[str] = typer.Argument(None, metavar="[MODEL]",
                                         help="the model (as for build); omit with --import"),
    arch: str = typer.Option("sm90", "--arch", help="target GPU architecture (sm90)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="job folder to write (e.g. job.aotune)"),
    level: TuneLevel = typer.Option("full", "--level", help="fast: a few configs per kernel; "
                                                      "full: the whole candidate space"),
    gemm_backend: GemmBackend = typer.Option("auto", "--gemm-backend", help="GEMM candidates: triton, "
                                     "cutedsl or auto (both, where CuTeDSL is installed)"),
    jobs: Optional[int] = typer.Option(None, "-j", "--jobs", min=1,
                                       help="parallel compile processes (default: cores, <= 8)"),
    force: bool = typer.Option(False, "--force", help="replace the job folder if it exists"),
    import_: Optional[list[Path]] = typer.Option(None, "--import", help="results.json of "
                                                 "`aotpack-run --tune` (or another database) to "
                                                 "merge into --db; repeatable"),
    db: Optional[Path] = typer.Option(None, "--db", help="tuning database to create or update"),
    no_progress: bool = typer.Option(False, "--no-progress", help="hide the progress bar"),
    dynamic: Optional[list[str]] = typer.Option(None, "--dynamic", help="as for build: "
                                                "each dynamic op is tuned per size bucket"),
    input_: Optional[list[str]] = typer.Option(None, "--input", help="as for build"),
    dtype: Optional[CastDType] = typer.Option(None, "--dtype", help="as for build"),
    precision: Precision = typer.Option("model", "--precision", help="as for build: tune the "
                                        "GEMMs of the FP8 plan (their records key on it)"),
):
    """Offline autotuning (docs/tuning.md). On the build host (no GPU needed):
    `aotpack tune MODEL -o job.aotune` compiles every candidate config of every tunable kernel
    into a job folder. On the target GPU: `aotpack-run --tune job.aotune -o results.json`
    measures them. Back here: `aotpack tune --import results.json --db tuning.json`, then
    `aotpack build MODEL --tuning-db tuning.json`."""
    from aotpack.cli.tune import import_into_db, write_job

    if import_:
        if db is None:
            err.print("[bold red]error:[/] --import needs --db (the database to update)")
            raise typer.Exit(2)
        if spec is not None:  # `--import a.json b.json` would drop b.json silently
            err.print(f"[bold red]error:[/] with --import no model is read; to import "
                      f"{escape(spec)} too, repeat the option: --import A.json --import B.json")
            raise typer.Exit(2)
        import_into_db(out, err, import_, db)
        return
    if spec is None or output is None:
        err.print("[bold red]error:[/] give MODEL and -o JOB_FOLDER (or --import RESULTS --db DB)")
        raise typer.Exit(2)
    write_job(out, spec, output, arch=arch, level=level.value, gemm_backend=gemm_backend.value,
              jobs=jobs, force=force, progress=False if no_progress else None,
              dynamic=dynamic or (), inputs=input_ or (), dtype=dtype and dtype.value,
              precision=precision.value)


def _runtime_verdict(bundle: Path, weights: Optional[Path]):
    """The C runtime's reason for refusing `bundle` (aotpack_model_check_file, no GPU) as a
    BundleError, so inspect and the runtime say the same thing; None when the runtime accepts
    it or its library is not available here."""
    from aotpack.bundle import BundleError

    try:
        from aotpack.runtime import AotpackError, Model

        Model.check_file(bundle, weights)
    except AotpackError as e:
        return BundleError(f"{bundle}: {e.code.name}: {e.message}")
    except (FileNotFoundError, OSError, AttributeError):
        return None  # no libaotpack.so here (or one too old): the Python reader's verdict
    return None


def _one_verdict(reader_error, runtime_error):
    """The runtime's reason first (what loading the bundle would say), the reader's too when
    it words it otherwise; a file that cannot be read at all keeps the reader's advice."""
    if runtime_error is None or ": IO: " in str(runtime_error):
        return reader_error
    theirs, ours = str(runtime_error), str(reader_error)
    if theirs.split(": ", 2)[-1] in ours:
        return runtime_error
    return type(reader_error)(f"{theirs} (aotpack's reader: {ours})")


@app.command()
@friendly
def inspect(
    bundle: Path = typer.Argument(..., metavar="BUNDLE", help=BUNDLE_HELP,
                                 callback=bundle_file),
    as_json: bool = typer.Option(False, "--json", help="print a JSON document instead of tables"),
    check: bool = typer.Option(False, "--check", help="also verify every sha256 (reads all data)"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="external weights file, if "
                                                                   "not next to the bundle"),
):
    """Show what a bundle holds: signature, graph summary, every kernel (backend, fused ops,
    config, shared memory, cluster), the memory plan and provenance. Reads the bundle alone."""
    from aotpack.bundle import BundleError, read_bundle

    # without --check, a bundle whose external weights live elsewhere can still be inspected
    try:
        b = read_bundle(bundle, weights_path=weights, checksums=check, require_weights=check)
    except BundleError as e:
        raise _one_verdict(e, _runtime_verdict(bundle, weights)) from None
    if check:  # the full check: the runtime's own verdict too, when its library is here
        verdict = _runtime_verdict(bundle, weights)
        if verdict:
            raise verdict
    doc = report.inspect_document(b)
    if as_json:
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        report.print_inspect(out, doc)


@app.command()
@friendly
def verify(
    bundle: Path = typer.Argument(..., metavar="BUNDLE", help=BUNDLE_HELP,
                                 callback=bundle_file),
    model: Optional[str] = typer.Option(
        None, "--model", help="the model spec the bundle was built from (default: the one "
        "its build recorded, found by name and sha256 in the current folder or below)"),
    reference: Optional[Reference] = typer.Option(None, "--reference", help="cpu: the plan run with "
                                            "torch references on the CPU; gpu: the bundle run by "
                                            "the C runtime (default when a GPU is present)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random inputs"),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="max ‖out−ref‖/‖ref‖ "
                                              "per output (default 0.01; an FP8 bundle: 1.5x "
                                              "the error its build measured)"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="external weights file"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="a dynamic bundle: check "
                                              "at these input shapes (NAME=AxB[,NAME2=CxD], "
                                              "repeatable) instead of the default set"),
):
    """Compare against eager PyTorch on fresh random inputs; exit status 1 if any output's
    relative error exceeds the tolerance. A bundle with dynamic dims is checked at the example
    shape, both ends of every range and random sizes inside (odd and prime ones)."""
    from aotpack.verify import verify as run_verify

    model = model or _recorded_spec(bundle)
    points = _points(bundle, weights, shape) if shape else None
    with warnings.catch_warnings():  # the report prints them once, as part of the table
        warnings.simplefilter("ignore", UserWarning)
        rep = run_verify(bundle, model, reference=reference and reference.value, seed=seed,
                         tolerance=tolerance, weights_path=weights, points=points)
    report.print_verify(out, rep)
    if not rep.passed:
        raise typer.Exit(1)


@app.command()
@friendly
def bench(
    bundle: Path = typer.Argument(..., metavar="BUNDLE", help=BUNDLE_HELP,
                                 callback=bundle_file),
    iters: int = typer.Option(100, "-n", "--iters", min=1, help="timed runs"),
    warmup: int = typer.Option(10, "--warmup", min=0, help="untimed runs first"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="external weights file"),
    shape: Optional[str] = typer.Option(None, "--shape", help="a dynamic bundle: the input "
                                        "shapes to time (NAME=AxB[,NAME2=CxD]); default: the "
                                        "example shape"),
):
    """Time the bundle on this machine's GPU through the C runtime; prints the median latency.
    (Without Python: `aotpack-run model.aotpack --bench 100` in the build folder.)"""
    from aotpack.cli.bench import run_bench

    point = _points(bundle, weights, [shape])[0] if shape else None
    stats = run_bench(bundle, iters=iters, warmup=warmup, weights=weights, point=point)
    out.print(f"{escape(str(bundle))}: median {stats['median_ms']:.3f} ms, min "
              f"{stats['min_ms']:.3f} ms, p90 {stats['p90_ms']:.3f} ms over {iters} runs")


def _recorded_spec(bundle: Path) -> str:
    """The model spec `aotpack build` was given, found by name and sha256 in the current
    folder or below it (verify.find_recorded_spec); else exit 2 saying to pass --model."""
    from aotpack.bundle import read_bundle
    from aotpack.verify import find_recorded_spec

    provenance = read_bundle(bundle, require_weights=False).manifest.get("provenance") or {}
    spec, why = find_recorded_spec(provenance)
    if spec is None:
        err.print(f"[bold red]error:[/] --model: give the model spec the bundle was built from "
                  f"({escape(why)})")
        raise typer.Exit(2)
    err.print(f"model: {escape(spec)} (the file the bundle was built from)")
    return spec


def _points(bundle: Path, weights, shapes: list[str]) -> list[dict]:
    """The dims' values `--shape` options give for a dynamic bundle (exit 2 for a static one)."""
    from aotpack.bundle import read_bundle
    from aotpack.verify_shapes import points_from_shapes

    manifest = read_bundle(bundle, weights_path=weights, require_weights=False).manifest
    if not manifest.get("symbols"):
        err.print("[bold red]error:[/] --shape: this bundle has no dynamic dims")
        raise typer.Exit(2)
    return points_from_shapes(manifest, shapes)


@app.command()
def doctor():
    """Check this machine: Python, torch, triton, cuobjdump, the C runtime library and
    launcher, the NVIDIA driver and GPU, and aotpack's environment variables."""
    from aotpack.cli.doctor import run_doctor

    run_doctor(out)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
