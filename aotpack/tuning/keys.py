"""The tuning-database key of a kernel op (docs/tuning.md, "The database key").

A key changes whenever anything that decides the measured time changes: target arch and SM
count, the op itself (shapes, strides, dtypes, epilogue; storages renamed in order so that two
identical GEMMs of one model share a key), the source of every template that may compile it,
and the toolchain versions. `shape_key` leaves out sources and toolchain: a database record
whose shape_key matches an op but whose key does not was measured with other kernels (stale).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from functools import lru_cache
from pathlib import Path

from aotpack.kernels.spec import KernelOp, Target

_KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def jsonable(obj):
    """A deterministic JSON-able form of a kernel op (dataclasses → {"type": name, fields})."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        d = {"type": type(obj).__name__}
        d.update({f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        return d
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (tuple, list)):
        return [jsonable(x) for x in obj]
    if isinstance(obj, float):
        return repr(obj)  # exact, and never a NaN that JSON cannot spell
    return obj


def digest(doc) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


@lru_cache(maxsize=None)
def template_sources_sha256(rel_paths: tuple[str, ...]) -> str:
    """sha256 over the named source files under aotpack/kernels (missing files count as empty:
    an optional backend that is not there changes the key, as it changes the candidates)."""
    h = hashlib.sha256()
    for rel in rel_paths:
        path = _KERNELS / rel
        h.update(rel.encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def toolchain() -> dict:
    from aotpack.build import _version
    import aotpack

    return {"aotpack": aotpack.__version__, "triton": _version("triton"),
            "cutedsl": _version("nvidia-cutlass-dsl")}


def problem_keys(op: KernelOp, target: Target, template: str,
                 sources: tuple[str, ...]) -> tuple[str, str]:
    """(key, shape_key) of canonical op `op` (storages already renamed by build.canonical)."""
    shape = {"arch": target.arch, "sm_count": target.sm_count, "template": template,
             "op": jsonable(op)}
    full = dict(shape, template_source_sha256=template_sources_sha256(sources),
                toolchain=toolchain())
    return digest(full), digest(shape)
