"""The steps `aotpack build` (builder.py) and `aotpack tune` (tuning/job.py) both take, in one
module below both, so that neither imports the other: the target named by --arch, the model
spec loaded as a Program of kernel ops, ops that differ only in their storages compiled once
(`canonical`), Triton compiling into aotpack's cache (`triton_cache`), the provenance a bundle
records, and an output folder written under a temporary name and renamed into place.

torch/triton are imported inside the functions that need them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from aotpack import knobs
from aotpack.errors import UserError
from aotpack.kernels.spec import SM90, Target, TensorArg

_ARCHES = {"sm90": SM90, "sm_90": SM90, "sm_90a": SM90, "sm90a": SM90}


class BuildError(UserError):
    """A user error (bad arguments, output folder exists, ...); the message says what to do."""

    named = False  # the message says what kind it is


def parse_arch(arch: str) -> Target:
    try:
        return _ARCHES[arch.strip().lower()]
    except KeyError:
        raise BuildError(f"unsupported --arch {arch!r}: aotpack targets Hopper only for now "
                         f"(use --arch sm90, i.e. sm_90a: H100/H200)") from None


# ----------------------------------------------------------------------------- provenance
def source_file(spec: str) -> Path:
    """The file a model spec names: `path/to/model.py:factory` → model.py; `m.pt2` → m.pt2;
    a transformers checkpoint folder → its config.json."""
    path = spec.rsplit(":", 1)[0] if ":" in Path(spec).name else spec
    if Path(path).is_dir() and (Path(path) / "config.json").is_file():
        return Path(path) / "config.json"
    return Path(path)


def model_kind(spec: str) -> str:
    """What kind of model file a spec names (recorded for `aotpack inspect`)."""
    if spec.endswith(".onnx"):
        return "onnx"
    if spec.endswith(".pt2"):
        return "torch.export"
    if ":" in Path(spec).name:
        return "python factory"
    if Path(spec).is_dir():
        return "transformers checkpoint"
    return "torchscript or saved module"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def provenance(spec: str, command_line: str) -> dict:
    """What built the bundle; no timestamps, so rebuilding gives identical bytes."""
    import aotpack

    return {"aotpack": aotpack.__version__, "torch": package_version("torch"),
            "triton": package_version("triton"),
            "cutedsl": package_version("nvidia-cutlass-dsl"),
            "source": source_file(spec).name, "source_sha256": file_sha256(source_file(spec)),
            "model_kind": model_kind(spec), "spec": portable_command(spec),
            "created_by": command_line}


def command_line_from_argv() -> str:
    return shlex.join(["aotpack", *sys.argv[1:]])


def portable_command(command_line: str) -> str:
    """`command_line` with every path it names cut to its last part (`-o /srv/out/llama` →
    `-o llama`, `dir/model.py:make` → `model.py:make`), so that one model built into two
    folders, or on two hosts, records the same bytes (a bundle is compared by hash)."""
    try:
        words = shlex.split(command_line)
    except ValueError:  # unbalanced quotes: not a command this process wrote
        return command_line

    def cut(word: str) -> str:
        key, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        return key + eq + (value if "/" not in value else value.rstrip("/").rsplit("/", 1)[-1])

    return shlex.join(cut(w) for w in words)


# ----------------------------------------------------------------------------- compiling
def rename_storages(obj, rename):
    """A copy of a kernel op (or any part of it) with every TensorArg's storage renamed."""
    if isinstance(obj, TensorArg):
        return dataclasses.replace(obj, storage=rename(obj.storage))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: rename_storages(getattr(obj, f.name), rename)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple):
        return tuple(rename_storages(x, rename) for x in obj)
    return obj


def canonical(op):
    """(op with storages renamed `__op.<i>` in order of appearance, map back to real names).
    Two ops that differ only in which storages they touch compile to the same cubin with the
    same slots up to those names, so they share one compile."""
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        return names.setdefault(name, f"__op.{len(names)}")

    canon = rename_storages(op, rename)
    return canon, {v: k for k, v in names.items()}


@contextmanager
def triton_cache():
    """Triton compiles into knobs.triton_cache_dir() in the `with` body. Set through
    triton.knobs (Triton 3.6), whose scope() puts Triton's settings and the environment
    variable it mirrors them into back as they were: the caller's process keeps its own."""
    if importlib.util.find_spec("triton") is None:  # nothing here compiles with Triton
        yield
        return
    import triton

    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(knobs.triton_cache_dir())
        # no source line table in the cubins: it records each kernel file's path and size,
        # so the same kernels built from two checkouts (or installs) differed in their bytes
        # (the SASS is the same; profilers lose the source view)
        triton.knobs.compilation.disable_line_info = True
        yield


# ----------------------------------------------------------------------------- the model
def load_program(spec: str, dynamic=(), inputs=(), dtype: str | None = None,
                 generation=None, precision: str = "model", max_error: float | None = None,
                 measure_error: bool = True):
    """The model `spec` names, as a Program of kernel ops (load → to_graph → compile_graph);
    `dynamic`: `--dynamic` options (aotpack/frontend/dynamic.py); `inputs`, `dtype`: `--input`
    and `--dtype` options (aotpack/frontend/inputs.py); `generation`: GenerationOptions
    (`--task text-generation`: the model's generation step, aotpack/generation/);
    `precision`, `max_error`, `measure_error`: `--precision fp8-weights` / `fp8`, the error
    bound and whether to measure the error (precision.quantize)."""
    from aotpack.frontend import load_spec, to_graph
    from aotpack.precision import quantize
    from aotpack.frontend.prepare import prepare
    from aotpack.passes import compile_graph

    if generation is not None:
        program, loaded = _load_generation(spec, dynamic, inputs, dtype, generation)
        return quantize(program, loaded, precision, max_error, measure_error)
    loaded = prepare(load_spec(spec), inputs=inputs, dtype=dtype, dynamic=dynamic)
    try:
        program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    except UserError as e:
        if loaded.kind == "torchscript" and len(e.args) == 1:
            e.args = (f"{e}\n(the model came from a TorchScript archive, whose conversion keeps "
                      f"what tracing recorded; if the model's source is at hand, torch.save(model) "
                      f"or torch.export.save usually builds where this does not)",)
        raise
    program.notes = list(loaded.notes)
    check_supported(program)
    return quantize(program, loaded, precision, max_error, measure_error)


def _load_generation(spec: str, dynamic, inputs, dtype, generation):
    from aotpack.frontend import to_graph
    from aotpack.generation.task import (
        generation_info, load_for_generation, name_step_outputs, prepare_generation,
    )
    from aotpack.passes import compile_graph

    if dynamic or inputs:
        raise BuildError("--task text-generation declares the step's inputs and dims itself "
                         "(input_ids, positions, last_index; B up to --max-batch, S up to "
                         "--max-seq-len): drop --dynamic/--input")
    loaded = prepare_generation(load_for_generation(spec), generation, dtype)
    program = compile_graph(name_step_outputs(to_graph(loaded.model, loaded.inputs,
                                                       loaded.dynamic_shapes)))
    program.generation = generation_info(loaded.model, generation)
    program.notes = list(loaded.notes)
    dropped = getattr(loaded.model, "dropped_eos_ids", [])
    if dropped:
        kept = program.generation["eos_ids"]
        program.notes.append(
            f"the config's end-of-sequence id {', '.join(map(str, dropped))} is outside the "
            f"vocabulary ({program.generation['vocab_size']} ids): the bundle "
            + (f"stops at {', '.join(map(str, kept))} only" if kept else
               "has no stop id, so a sequence runs to its --generate count")
            + "; give yours with aotpack-run --stop-id (the C API's stop_ids)")
    check_supported(program)
    return program, loaded


def check_supported(program) -> None:
    """BuildError for the first op no kernel here runs (an f32 GEMM: the plan is right, the
    CPU reference runs it, the GPU has no kernel): before any compile or measurement."""
    from aotpack.kernels.templates import template_for

    for op in program.ops:
        template = template_for(op)
        why = template.supports(op)
        if why is not None:
            raise BuildError(f"{template.describe(op)}: {why}")


# ----------------------------------------------------------------------------- output folders
def check_destination(out: Path, force: bool) -> None:
    """Refuse an output path that is a file, or a folder with something in it unless `force`."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} exists and is not a folder: choose another -o")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BuildError(f"{out} already exists and is not empty: pass --force to replace it")


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` folder to `out`, replacing an existing `out` (--force)."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.replace(out, old / out.name)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
