"""write_bundle: Program + MemoryPlan → `model.aotpack` (and optionally an external weights file).

Byte-reproducible: the manifest has sorted keys and no timestamps, lists follow the program's
order, and identical cubins/kernels are deduplicated in first-use order. Atomic: every file is
written to a temp file in its destination folder and renamed only when all files succeeded.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack
from pathlib import Path

from aotpack.bundle import manifest as mf
from aotpack.bundle import schema
from aotpack.bundle.checksum import checksum64
from aotpack.bundle.cubin_params import check_params, param_sizes
from aotpack.bundle.stfile import BundleError, Entry, atomic_output, write_safetensors
from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import CompiledKernel, Target


def write_bundle(path, program, plan, *, target: Target, provenance: dict,
                 external_weights: str | None = None, summary: dict | None = None) -> Path:
    """Write the bundle for `program` run as `plan` to `path`. With `external_weights` (a file
    name relative to the bundle's folder, e.g. "weights.safetensors") the weights go to that
    safetensors file and the bundle records only their name, dtype, shape, size and sha256."""
    path = Path(path)
    weights, weight_data = _weights(program)
    cubins, kernels, steps = _kernels_and_steps(program, plan)
    table, index, buffer_names = mf.buffers(program, plan, weights)
    manifest = {
        "format": mf.FORMAT, "version": mf.VERSION_DYNAMIC if program.dynamic else mf.VERSION,
        "target": {"arch": target.arch, "cc": list(target.cc), "min_driver": target.min_driver,
                   "sm_count": target.sm_count},
        "inputs": mf.signature(program, program.inputs),
        "outputs": mf.signature(program, program.outputs),
        "weights": [w.to_json() for w in weights],
        "external_weights": {"file": external_weights} if external_weights else None,
        "arena_bytes": int(plan.arena_bytes),
        "buffers": table,
        "kernels": kernels,
        "steps": [_step_json(k, launch, index, i) for i, (k, launch) in enumerate(steps)],
        "provenance": mf.jsonable(provenance),
    }
    if program.dynamic:  # v1 bundles stay byte for byte what they were
        manifest["symbols"] = mf.symbols_json(program)
    if program.states:  # session state (docs/generation.md)
        manifest["state"] = mf.signature(program, program.states)
    if program.generation:
        manifest["generation"] = dict(program.generation)
    if plan.counters_bytes:  # split fix-up counters (docs/manifest.md)
        manifest["counters_bytes"] = int(plan.counters_bytes)
    mf.check(manifest, f"{path.name} (being written)")
    for i, k in enumerate(kernels):  # the slots against what each cubin says it takes
        sizes = param_sizes(cubins[k["cubin"]], k["entry"])
        if sizes is not None:
            check_params(manifest, i, sizes)
    text = _dumps(manifest)
    metadata = {mf.MANIFEST_KEY: text, schema.DIGEST_KEY: schema.digest(text),
                mf.SUMMARY_KEY: _dumps({**_summary(program, plan, buffer_names),
                                        **(summary or {})})}
    cubin_entries = [Entry(f"{mf.CUBIN_PREFIX}{i}", "U8", (len(c),), c) for i, c in enumerate(cubins)]
    weight_entries = [Entry(w.name, w.dtype.safetensors, w.shape, d)
                      for w, d in zip(weights, weight_data)]
    with ExitStack() as stack:  # the outputs are renamed into place only if all writes succeed
        if external_weights:
            wpath = _external_path(path, external_weights)
            out = stack.enter_context(atomic_output(wpath))
            write_safetensors(out, weight_entries, {"aotpack.weights_of": path.name})
            weight_entries = []
        out = stack.enter_context(atomic_output(path))
        write_safetensors(out, weight_entries + cubin_entries, metadata)
    return path


def _dumps(doc) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def _external_path(bundle: Path, name: str) -> Path:
    p = Path(name)
    if p.is_absolute() or ".." in p.parts:
        raise BundleError(f"external weights file {name!r} must be a plain name relative to "
                          f"the bundle's folder, like 'weights.safetensors'")
    if p == Path(bundle.name):
        raise BundleError("the external weights file cannot have the bundle's own name")
    return bundle.parent / p


def _weights(program) -> tuple[list[mf.WeightRecord], list[memoryview]]:
    """Weight records in storage order, with each weight's raw bytes."""
    records, data = [], []
    for s in program.by_kind("weight"):
        if s.name not in program.weights:
            raise BundleError(f"weight {s.name!r} has a storage but no tensor in program.weights")
        raw = raw_bytes(program.weights[s.name])
        if raw.nbytes != s.nbytes:
            raise BundleError(f"weight {s.name!r}: tensor has {raw.nbytes} bytes, storage "
                              f"{s.dtype.value}{list(s.shape)} needs {s.nbytes}")
        records.append(mf.WeightRecord(s.name, s.dtype, tuple(s.shape), s.nbytes,
                                       hashlib.sha256(raw).hexdigest(), checksum64(raw)))
        data.append(raw)
    return records, data


def match_weights(manifest_weights: list, records, fixed=frozenset()) -> dict | None:
    """{name: its record} for each of a bundle's weights (its manifest's `weights` entries)
    when `records` (a re-run of the frontend and passes) hold exactly them, matched by name,
    or else by content (sha256, dtype and shape): a model whose code iterates a Python set
    (transformers' per-layer-type rotary tables: `for t in set(config.layer_types)`) is traced
    in another order in another process (string hashes are salted per process), so folded
    tables may swap names. Names in `fixed` (the model's own parameters and buffers) match by
    name only: weights swapped between two layers are another model. None otherwise."""
    def key(sha, dtype, shape):
        return sha, str(getattr(dtype, "value", dtype)), tuple(shape)

    want = {w["name"]: key(w["sha256"], w["dtype"], w["shape"]) for w in manifest_weights}
    mine = {r.name: r for r in records}
    if len(mine) != len(want):
        return None
    out, loose = {}, []
    for name, k in want.items():
        r = mine.get(name)
        if r is not None and key(r.sha256, r.dtype, r.shape) == k:
            out[name] = r
        elif name in fixed:
            return None
        else:
            loose.append(name)
    left: dict[tuple, list] = {}
    for name, r in mine.items():
        if name not in out:
            if name in fixed:
                return None
            left.setdefault(key(r.sha256, r.dtype, r.shape), []).append(r)
    for name in loose:
        same = left.get(want[name])
        if not same:
            return None
        out[name] = same.pop()
    return out


def differing_weights(manifest_weights: list, records) -> list[str]:
    """The names whose sha256 differs between a bundle's weights and `records` (or that only
    one side has), sorted: what a refusal names."""
    want = {w["name"]: w["sha256"] for w in manifest_weights}
    got = {r.name: r.sha256 for r in records}
    return sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))


def external_entries(manifest: dict, program) -> list:
    """The safetensors entries of a bundle's external weights file, named as its manifest
    names them, from `program` (the frontend and passes run again, e.g. on the GPU machine:
    scripts/make-weights); BundleError naming a few weights when they are not the bundle's."""
    records, data = _weights(program)
    matched = match_weights(manifest["weights"], records)
    if matched is None:
        raise BundleError(f"weights differ from the bundle's: "
                          f"{differing_weights(manifest['weights'], records)[:5]}")
    raw = {id(r): d for r, d in zip(records, data)}
    return [Entry(name, r.dtype.safetensors, r.shape, raw[id(r)]) for name, r in matched.items()]


def raw_bytes(value) -> memoryview:
    """The raw bytes of a weight: a torch tensor (any dtype, incl. bf16), a numpy array, or
    bytes. No copy for contiguous CPU tensors/arrays."""
    if hasattr(value, "untyped_storage"):  # torch.Tensor, without importing torch here
        import torch

        t = value.detach().to("cpu").contiguous().reshape(-1)
        value = t.view(torch.uint8).numpy() if t.numel() else b""
    elif hasattr(value, "__array_interface__"):
        import numpy as np

        value = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    return memoryview(value).cast("B")


def _kernels_and_steps(program, plan):
    """Deduplicated cubins (by bytes) and kernels (by CompiledKernel equality), in first-use
    order, and each launch paired with its manifest kernel index."""
    cubin_index: dict[bytes, int] = {}
    kernel_index: dict[CompiledKernel, int] = {}
    cubins, kernels, steps = [], [], []
    for launch in plan.launches:
        k = launch.kernel
        if k not in kernel_index:
            if k.cubin not in cubin_index:
                cubin_index[k.cubin] = len(cubins)
                cubins.append(k.cubin)
            ci = cubin_index[k.cubin]
            kernel_index[k] = len(kernels)
            kernels.append(mf.kernel_json(_kernel_name(k, len(kernels)), k, ci,
                                          hashlib.sha256(k.cubin).hexdigest()))
        steps.append((kernel_index[k], launch))
    return cubins, kernels, steps


def _kernel_name(k: CompiledKernel, i: int) -> str:
    """The manifest's unique kernel `name` (messages, inspect); `entry` stays the cubin symbol.
    CuTeDSL entry symbols are ~300 characters of mangled type names: those kernels get a short
    `cutedsl_gemm_<i>` instead of `<entry>_<i>`."""
    if k.backend == "cutedsl":
        return f"cutedsl_gemm_{i}" if "linear" in k.fused_ops else f"cutedsl_{i}"
    return f"{k.entry}_{i}"


def _step_json(kernel: int, launch, index: dict[str, int], step: int) -> dict:
    where = f"step {step} ({launch.kernel.entry})"
    out = {"kernel": kernel, "grid": [mf.dim_json(g) for g in launch.grid],
           "args": [mf.slot_json(s, index, f"{where} slot {j}") for j, s in enumerate(launch.args)]}
    if launch.when:
        out["when"] = mf.when_json(launch.when)
    return out


def _summary(program, plan, buffer_names: list[str]) -> dict:
    """What `aotpack inspect` shows beyond the manifest; the runtime never reads it."""
    intermediates = sum(upper_bound(s.nbytes) for s in program.by_kind("intermediate"))
    return {"graph": mf.jsonable(program.summary), "ops": len(program.ops),
            "buffer_names": buffer_names, "intermediate_bytes": intermediates,
            "naive_bytes": int(plan.naive_bytes or intermediates)}
