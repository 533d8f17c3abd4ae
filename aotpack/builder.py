"""`aotpack build`: model spec → output folder (bundle + C++ launcher + README).

load → to_graph → compile_graph → compile every kernel op (identical ops compiled once) →
plan_memory → write_bundle → assemble the folder. The folder is written under a temp name in
the destination's parent and renamed into place only when everything succeeded.
torch/triton are imported inside the functions that need them.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import platform
import shlex
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from aotpack import knobs, portable, runtime_files
from aotpack.bundle.reader import BUNDLE_NAME
from aotpack.kernels.spec import PtrSlot, Target, TensorMapSlot
# the steps `aotpack tune` takes too; BuildError, canonical, load_program, parse_arch and the
# provenance helpers stay importable from here
from aotpack.shared_steps import (  # noqa: F401
    BuildError, canonical, check_destination, check_supported, command_line_from_argv,
    file_sha256, load_program, model_kind, parse_arch, portable_command, provenance,
    replace_dir, source_file, triton_cache,
)

log = logging.getLogger(__name__)

WEIGHTS_NAME = "weights.safetensors"


@dataclass
class BuildResult:
    out_dir: Path
    bundle: Path
    kernels: int
    steps: int
    arena_bytes: int
    compiled_ops: int  # distinct compiles (after the identical-op cache)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # facts worth a line (tuning used, ...)


# ----------------------------------------------------------------------------- compiling
def _restore(launch, back: dict[str, str]):
    args = tuple(dataclasses.replace(s, storage=back.get(s.storage, s.storage))
                 if isinstance(s, (PtrSlot, TensorMapSlot)) else s for s in launch.args)
    return dataclasses.replace(launch, args=args)


def default_chooser(target: Target, gemm_backend: str = "triton"):
    """choose(op, template) -> the template's heuristic config (GEMMs on `gemm_backend`)."""
    def choose(op, template):
        return template.default_config(op, target, gemm_backend)
    return choose


def compile_ops(program, target: Target, *, choose=None, progress: bool = True,
                gemm_backend: str = "triton"):
    """Launches for every op of `program` (every variant of a symbolic op, each with its
    bucket's `when`), in order, with a progress bar; identical ops compile once. `choose(op,
    template)` gives a concrete op's config (default: the heuristics). Returns
    (launches_per_op, number of distinct compiles)."""
    with triton_cache():
        return _compile_all(program, target, choose or default_chooser(target), progress,
                            gemm_backend)


def _compile_all(program, target: Target, choose, progress: bool, gemm_backend: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cache: dict = {}
    result = []
    columns = (TextColumn("[bold]compiling[/] {task.description:<24}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("", total=len(program.ops))
        for op in program.ops:
            bar.update(task, description=type(op).__name__)
            canon, back = canonical(op)
            if canon not in cache:
                start = time.perf_counter()
                cache[canon] = _compile_one(canon, target, choose, program, gemm_backend,
                                            program.origin(op))
                log.debug("compiled %s: %d launches (%.2f s)", type(op).__name__,
                          len(cache[canon]), time.perf_counter() - start)
            else:
                log.debug("reused the compile of an identical %s", type(op).__name__)
            result.append([_restore(launch, back) for launch in cache[canon]])
            bar.advance(task)
    return result, len(cache)


def _compile_one(op, target: Target, choose, program, gemm_backend: str,
                 origin: str | None = None):
    """compile_variants(op); a kernel refusing what the passes gave it (a defect of aotpack,
    not of the model) is one line naming the op and `origin` (the model's source line it was
    lowered from), with the traceback at AOTPACK_LOG=debug."""
    from aotpack.errors import UserError
    from aotpack.kernels import BackendCannotCompile, template_for
    from aotpack.kernels.variants import compile_variants

    try:
        return compile_variants(op, target, choose, program.symbols, program.example,
                                backend=gemm_backend)
    except (UserError, BackendCannotCompile, KeyboardInterrupt):
        raise
    except Exception as e:
        if knobs.log_level() == "debug":
            raise
        try:
            what = template_for(op).describe(op)
        except Exception:  # describing it failed too: its type will do
            what = type(op).__name__
        where = f", from {origin}" if origin else ""
        raise BuildError(f"aotpack could not compile {what}{where} ({type(e).__name__}: {e}). "
                         f"This is a defect of aotpack, not of the model: please report it "
                         f"with the model (AOTPACK_LOG=debug shows the traceback)") from None


# ----------------------------------------------------------------------------- the folder
README = """# {name} — built by aotpack

Run it (needs only the NVIDIA driver; {arch} GPU):

    ./aotpack-run model.aotpack --bench 100

{runtime}
Embed it in a C/C++ program: include `include/aotpack/aotpack.h` (C API) or `aotpack.hpp`
(C++ wrapper) and link the shared or the static library (either opens libcuda.so.1 at run
time; nothing else is needed):

    cc app.c -Iinclude -Llib -laotpack -Wl,-rpath,'$ORIGIN/lib' -o app
{static_line}
This folder is also an install prefix: CMake `find_package(aotpack CONFIG REQUIRED)` with
`-DCMAKE_PREFIX_PATH=<this folder>` gives `aotpack::aotpack` (`aotpack::aotpack_static`), and
`PKG_CONFIG_PATH=<this folder>/lib/pkgconfig pkg-config --cflags --libs aotpack` the flags.
{weights}
Inspect it: `aotpack inspect model.aotpack`. Built with: `{command}`
"""


# The static library's link line: the installed runtime's needs the host's libstdc++; the
# portable one carries zig's libc++ inside, which other toolchains cannot link.
STATIC_LINK_LINE = {
    False: "    cc app.c -Iinclude lib/libaotpack.a -lstdc++ -lm -ldl -pthread -o app\n",
    True: "(lib/libaotpack.a was built by zig against its own libc++: link it with `zig cc` only;\n"
          "with any other compiler, link lib/libaotpack.so as above.)\n",
}


def runtime_paragraph(choice) -> str:
    """What the folder's README says of where aotpack-run and lib/ run (portable.Choice)."""
    if choice.platform is not None:
        text = (f"This folder's `aotpack-run` and `lib/` were built for {choice.platform} "
                f"against glibc {'.'.join(map(str, portable.GLIBC_BASELINE))} with the C++ "
                f"library linked in: they run on Ubuntu 20.04, RHEL 8 and newer, no libstdc++ "
                f"needed.")
    elif knobs.runtime_dir() is not None:
        text = "This folder's `aotpack-run` and `lib/` were copied from AOTPACK_RUNTIME_DIR."
    else:
        text = _host_runtime_note(choice.fallback, "This folder's")
    return textwrap.fill(text, 95, break_on_hyphens=False, break_long_words=False) + "\n"


def _host_runtime_note(fallback: str | None, whose: str = "the output folder's") -> str:
    """The runtime installed here, and why `auto` did not give the portable one."""
    libc, version = platform.libc_ver()
    text = (f"{whose} `aotpack-run` and `lib/` were built on the build machine, against its "
            f"{libc or 'C library'} {version} and libstdc++: a system older than that "
            f"(Ubuntu 20.04, RHEL 8) may not start them.")
    if fallback is not None:
        text += (f" The portable ones (glibc 2.28) were not available: {fallback}. Then build "
                 f"again for them; `--host-platform native` keeps these without this note.")
    return text


def copy_launcher(out: Path, root: Path | None = None) -> list[str]:
    """Copy aotpack-run, libaotpack.{so,a}, the headers, the CMake package and aotpack.pc into
    `out` (runtime_files.output_folder_files) from the runtime prefix `root` (default: the
    installed one); returns warnings for pieces that are not installed (the bundle is still
    usable with a runtime built elsewhere)."""
    root = root or runtime_files.runtime_dir()
    if root is None:
        return ["the C++ runtime is not installed (pip install . builds it; or set "
                "AOTPACK_RUNTIME_DIR): the output folder holds the bundle only"]
    missing = []
    # Copies are plain files, not symlinks (the folder may be zipped or copied anywhere).
    pieces = runtime_files.output_folder_files(root)
    for src_rel, dst_rel in pieces:
        src, dst = root / src_rel, out / dst_rel
        if src.is_dir():
            shutil.copytree(src, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        else:
            missing.append(src_rel.as_posix())
    if missing:
        return [f"not found in {root}: {', '.join(missing)} (not copied)"]
    return []


def _choose_runtime(host_platform: str | None):
    """The runtime the folder gets (portable.Choice) for `--host-platform` (None: the
    AOTPACK_HOST_PLATFORM knob, `auto` by default); a platform named but not buildable here
    is an error, `auto` falls back to the host's runtime."""
    requested = host_platform or knobs.host_platform()
    auto = requested == portable.AUTO
    name = portable.host_platform() if auto else requested

    def announce(cache: Path) -> None:  # the first build's cost, said before it is paid
        print(f"building the {name} runtime with zig for glibc 2.28 (once, ~90 s on 2 cores; "
              f"cached in {cache.parent}{'; --host-platform native skips it' if auto else ''})",
              file=sys.stderr, flush=True)

    try:
        return portable.choose(requested, announce=announce)
    except portable.PortableRuntimeError as e:
        asked = (f"--host-platform {requested}" if host_platform
                 else f"{knobs.HOST_PLATFORM.name}={requested}")
        raise BuildError(f"{asked}: {e}") from None


def check_gemm_backend(gemm_backend: str) -> None:
    """Refuse an unknown `--gemm-backend`, or cutedsl without CuTeDSL, with what to do."""
    from aotpack.kernels import check_backend

    try:
        check_backend(gemm_backend)
    except (ValueError, RuntimeError) as e:
        raise BuildError(str(e)) from None


def build(spec: str, out, *, arch: str = "sm90", external_weights: bool = False,
          force: bool = False, progress: bool | None = None,
          command_line: str | None = None, gemm_backend: str = "triton",
          tuning_db=None, tune: str = "none", tune_budget_s: float | None = None,
          dynamic=(), inputs=(), dtype: str | None = None,
          generation=None, precision: str = "model",
          max_error: float | None = None, host_platform: str | None = None) -> BuildResult:
    """`tuning_db`: compile measured winners from this database (docs/tuning.md).
    `dynamic`: `--dynamic NAME.DIM=[LABEL:]LO..HI` options (dims that vary at run time).
    `inputs`: `--input NAME=SHAPE[:DTYPE]` options (example inputs; a model.pt needs them).
    `dtype`: cast the model's floating weights and inputs first (bf16, f16 or f32; recorded in the
    bundle's provenance, so that verify casts the model the same way).
    `tune` (fast|full): first tune on this machine's GPU and add the results to `tuning_db`
    (or to `<out>.tuning.json` beside the output folder when none is given).
    `generation`: GenerationOptions (`--task text-generation`, docs/generation.md).
    `precision`, `max_error`: `--precision fp8-weights` / `fp8` and its error bound
    (precision.py).
    `host_platform`: auto | native | linux-x86_64 | linux-aarch64 (None: AOTPACK_HOST_PLATFORM,
    auto by default): which runtime the output folder's launcher and library are (portable.py:
    built for that platform against glibc 2.28, or the one installed here)."""
    target = parse_arch(arch)
    if max_error is not None and precision == "model":
        raise BuildError("--max-error bounds the error of a quantized build: give it with "
                         "--precision fp8-weights or fp8")
    if precision != "model" and gemm_backend == "cutedsl":
        raise BuildError(f"--precision {precision}: FP8 GEMMs run on the Triton backend only; "
                         f"use --gemm-backend triton or auto")
    check_gemm_backend(gemm_backend)  # refuse a missing backend before the model loads
    out = Path(out)
    if not source_file(spec).is_file():
        raise BuildError(f"model spec {spec!r}: {source_file(spec)} does not exist "
                         f"(expected file.py:factory, a .pt2 file, a model.pt or a model.onnx)")
    check_destination(out, force)
    runtime = _choose_runtime(host_platform)  # before the model: a missing zig is fast
    progress = knobs.show_progress() if progress is None else progress
    command_line = portable_command(command_line or shlex.join(
        ["aotpack", "build", spec, "--arch", arch, "-o", str(out)]))
    notes = [_host_runtime_note(runtime.fallback)] if runtime.fallback else []
    program = db = None
    if tune != "none":  # the model is loaded once, for the job and for this build
        db, program = _tune_here(spec, arch, out, tune, tune_budget_s, gemm_backend, tuning_db,
                                 progress, notes, dynamic, inputs, dtype, generation,
                                 precision, max_error)
    elif tuning_db is not None:
        db = _load_tuning_db(tuning_db)  # refuse a missing database before the model loads
    tuned = _tuned_chooser(db, target, gemm_backend)
    if program is None:
        program = load_program(spec, dynamic, inputs, dtype, generation, precision, max_error)
    from aotpack.kernels import BackendCannotCompile
    from aotpack.passes import plan_memory

    try:
        launches_per_op, distinct = compile_ops(
            program, target, choose=tuned or default_chooser(target, gemm_backend),
            progress=progress, gemm_backend=gemm_backend)
    except BackendCannotCompile as e:  # an op the chosen GEMM backend cannot run
        raise BuildError(str(e)) from None
    plan = plan_memory(program, launches_per_op)
    notes += program.notes
    notes += _arena_warning(plan.arena_bytes, program)
    extra = {}
    if program.dynamic:  # inspect: the planned arena serves the largest shape; this, one
        from aotpack.passes.plan_memory import arena_at

        extra["arena_bytes_example"] = arena_at(program, launches_per_op, program.example)
    result = _write_folder(out, program, plan, target, spec, command_line, external_weights,
                           distinct, tuning=tuned.provenance() if tuned else None,
                           summary=extra, options={"dtype": dtype, "inputs": list(inputs),
                                                    "generation": generation and
                                                    generation.to_json(),
                                                    "precision": program.precision},
                           runtime=runtime)
    result.notes[:0] = notes + (tuned.notes() if tuned else [])
    return result


# the smallest sm_90 part (H100 80 GB): an arena beyond it cannot be allocated on any target
_TARGET_MEMORY = 80 * 10**9


def _arena_warning(arena_bytes: int, program) -> list[str]:
    if arena_bytes <= _TARGET_MEMORY // 2:
        return []
    dims = ", ".join(f"{s.name} <= {s.hi}" for s in program.symbols)
    return [f"warning: the arena is {arena_bytes / 2**30:.1f} GiB"
            + (f", planned for the largest shape ({dims})" if dims else "")
            + "; a session allocates it whole, and an H100 has 80 GB"
            + (": lower the dims' maxima" if dims else "")]


def _load_tuning_db(tuning_db):
    """The `--tuning-db` database, which must exist."""
    from aotpack.tuning.db import TuningDB, TuningDBError

    if not Path(tuning_db).is_file():
        raise BuildError(f"--tuning-db {tuning_db}: no such file (create one with "
                         f"`aotpack tune --import results.json --db {tuning_db}`)")
    try:
        return TuningDB.load(tuning_db)
    except TuningDBError as e:
        raise BuildError(str(e)) from None


def _tuned_chooser(db, target: Target, gemm_backend: str):
    """A TunedChooser over the TuningDB `db` (None when there is none)."""
    if db is None:
        return None
    from aotpack.tuning.apply import TunedChooser

    return TunedChooser(db, target, gemm_backend)


def _tune_here(spec, arch, out: Path, level: str, budget_s, gemm_backend, tuning_db, progress,
               notes: list[str], dynamic=(), inputs=(), dtype=None, generation=None,
               precision: str = "model", max_error: float | None = None):
    """`build --tune`: job → measured on this machine's GPU → merged into the database.
    Returns (the database as saved, the model's Program, which the build compiles too)."""
    from aotpack.tuning import measure
    from aotpack.tuning.db import TuningDB, TuningDBError, load_results
    from aotpack.tuning.job import make_job

    if measure.gpu_count() == 0:
        raise BuildError("--tune measures on this machine's GPU, and there is none: run "
                         "`aotpack tune` here, `aotpack-run --tune` on the target, then build "
                         "with --tuning-db (docs/tuning.md)")
    db_path = Path(tuning_db) if tuning_db else out.parent / f"{out.name}.tuning.json"
    try:  # before measuring: an unusable database must not cost the GPU time nor its results
        TuningDB.load(db_path)
    except TuningDBError as e:
        raise BuildError(str(e)) from None
    program = load_program(spec, dynamic, inputs, dtype, generation, precision, max_error)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".aotpack-tune.", dir=out.parent) as tmp:
        job = make_job(spec, Path(tmp) / "job.aotune", arch=arch, level=level,
                       gemm_backend="auto" if gemm_backend == "triton" else gemm_backend,
                       progress=progress, program=program)
        try:
            results = measure.run_job(job.path, Path(tmp) / "results.json", budget_s=budget_s)
        except measure.MeasureError as e:
            raise BuildError(str(e)) from None
        try:  # read again: records another process saved while we measured are kept
            db = TuningDB.load(db_path)
            added, _ = db.import_results(load_results(results), str(results))
        except TuningDBError as e:
            raise BuildError(str(e)) from None
        db.save(db_path)
    notes.append(f"tuned {job.problems} kernel problems ({job.candidates} candidates); "
                 f"{added} winners saved in {db_path}")
    return db, program


def _write_folder(out: Path, program, plan, target: Target, spec: str, command_line: str,
                  external_weights: bool, distinct: int, tuning: dict | None = None,
                  summary: dict | None = None, options: dict | None = None,
                  runtime=None) -> BuildResult:
    """`options`: the build options verify needs to load the model as the build did
    (`--dtype`, `--input`): recorded in the provenance where given. `runtime`: the
    portable.Choice of the runtime copied into the folder (None: the installed one)."""
    from aotpack.bundle import read_bundle, write_bundle

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=out.parent))
    try:
        bundle = write_bundle(tmp / BUNDLE_NAME, program, plan, target=target,
                              provenance=dict(provenance(spec, command_line),
                                              **({"tuning": tuning} if tuning else {}),
                                              **{k: v for k, v in (options or {}).items()
                                                 if v}),
                              external_weights=WEIGHTS_NAME if external_weights else None,
                              summary=summary)
        # read back what the runtime will parse (structure and manifest; the sha256s were taken
        # from the very bytes written, re-hashing gigabytes would only double the time)
        manifest = read_bundle(bundle).manifest
        runtime = runtime or portable.Choice()
        warnings = copy_launcher(tmp, runtime.root)
        weights_note = (f"\nWeights are in `{WEIGHTS_NAME}`; keep it next to model.aotpack.\n"
                        if external_weights else "")
        (tmp / "README.md").write_text(README.format(
            name=out.name, arch=target.arch, weights=weights_note, command=command_line,
            runtime=runtime_paragraph(runtime) if (tmp / "aotpack-run").is_file() else "",
            static_line=STATIC_LINK_LINE[runtime.platform is not None]))
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildResult(out, out / BUNDLE_NAME, len(manifest["kernels"]), len(manifest["steps"]),
                       manifest["arena_bytes"], distinct, warnings)
