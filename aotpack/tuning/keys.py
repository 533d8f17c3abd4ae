"""The tuning-database key of a kernel op (docs/tuning.md, "The database key").

A key changes whenever anything that decides the measured time changes: target arch and SM
count, the op itself (shapes, strides, dtypes, epilogue; storages renamed in order so that two
identical GEMMs of one model share a key), the source of every template that may compile it,
and the toolchain versions. `shape_key` leaves out sources and toolchain: a database record
whose shape_key matches an op but whose key does not was measured with other kernels (stale).
"""
from __future__ import annotations

import ast
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


SPEC = "spec.py"  # shared by every family: hashed by the definitions a family uses, not whole
_SPEC_FILES = (SPEC, "launch.py")  # spec.py re-exports launch.py's definitions
_SPEC_MODULE = "aotpack.kernels.spec"


@lru_cache(maxsize=None)
def template_sources_sha256(rel_paths: tuple[str, ...]) -> str:
    """sha256 over the named source files under aotpack/kernels (missing files count as empty:
    an optional backend that is not there changes the key, as it changes the candidates).
    `spec.py` counts by the top-level definitions the other files import from it and what
    those refer to in turn (spec_closure), so an op kind added there for another family, or an
    edit to one, leaves this family's records valid."""
    h = hashlib.sha256()
    for rel in rel_paths:
        h.update(rel.encode() + b"\0")
        if rel == SPEC:
            defs = spec_definitions()
            for name in spec_closure(tuple(r for r in rel_paths if r != SPEC)):
                h.update(name.encode() + b"\0" + defs[name][0].encode() + b"\0")
        elif (_KERNELS / rel).is_file():
            h.update((_KERNELS / rel).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def spec_definitions() -> dict[str, tuple[str, frozenset]]:
    """Top-level definitions of kernels/spec.py (with kernels/launch.py, the compiled form it
    re-exports): name -> (their source, decorators included; the names of other definitions
    they refer to, quoted annotations too)."""
    out = {}
    for rel in _SPEC_FILES:
        out.update(_definitions((_KERNELS / rel).read_text()))
    return out


def _definitions(src: str) -> dict[str, tuple[str, frozenset]]:
    lines = src.splitlines(keepends=True)
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue  # imports, docstring: not definitions a template can use
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "".join(lines[first - 1:node.end_lineno])
        refs = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        refs |= {n.value for n in ast.walk(node)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()}
        for name in names:
            out[name] = (text, frozenset(refs - {name}))
    return out


@lru_cache(maxsize=None)
def spec_closure(rel_paths: tuple[str, ...]) -> tuple[str, ...]:
    """The spec.py definitions that the files import (`from aotpack.kernels.spec import ...`),
    and everything those refer to in spec.py, sorted."""
    defs = spec_definitions()
    todo = []
    for rel in rel_paths:
        path = _KERNELS / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in (_SPEC_MODULE,
                                                                     "aotpack.kernels.launch"):
                todo += [a.name for a in node.names]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in defs and name not in seen:
            seen.add(name)
            todo += list(defs[name][1])
    return tuple(sorted(seen))


@lru_cache(maxsize=None)
def toolchain() -> dict:
    """What compiles every candidate: aotpack and Triton. A backend's own compiler is not in
    the key (a Triton kernel would otherwise depend on whether CuTeDSL is installed, and a
    plain install would match no record): it is recorded with the winner it compiled
    (`backend_toolchain`), and tuning/apply.py uses that winner only where the same versions
    would compile it."""
    import aotpack
    from aotpack.shared_steps import package_version

    return {"aotpack": aotpack.__version__, "triton": package_version("triton")}


# The compilers of a backend beyond those in every key: backend template -> name -> package
_BACKEND_PACKAGES = {"gemm.cutedsl": {"cutedsl": "nvidia-cutlass-dsl"}}


def backend_toolchain(template: str) -> dict:
    """The versions of the compilers a config of backend `template` ("gemm.cutedsl") needs
    beyond toolchain()'s: {} for Triton configs. None for a package that is not installed."""
    from aotpack.shared_steps import package_version

    return {name: package_version(dist)
            for name, dist in _BACKEND_PACKAGES.get(template, {}).items()}


def problem_keys(op: KernelOp, target: Target, template: str,
                 sources: tuple[str, ...]) -> tuple[str, str]:
    """(key, shape_key) of canonical op `op` (storages renamed by shared_steps.canonical)."""
    shape = {"arch": target.arch, "sm_count": target.sm_count, "template": template,
             "op": jsonable(op)}
    full = dict(shape, template_source_sha256=template_sources_sha256(sources),
                toolchain=toolchain())
    return digest(full), digest(shape)
