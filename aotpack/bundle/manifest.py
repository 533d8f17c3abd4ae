"""Manifest v1 and v2 (docs/manifest.md): built from a Program + MemoryPlan, and checked when
read.

The checks here are the runtime's load-time checks that need no GPU (indices in range, offsets
and tensor-map extents inside their buffers, tensor-map rules), so a bad plan fails on the build
host with a message naming the step and slot, not on the target GPU. A v2 manifest (dims that
vary at run time: symbols, expressions, steps with `when`) is checked as the runtime checks it at
load: evaluated at every symbol's minimum and at every symbol's maximum, each a v1 manifest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from aotpack.bundle import schema, schema_generation
from aotpack.bundle.stfile import BundleError
from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    COUNTERS, CompiledKernel, CounterSlot, F32Slot, FastDivmodSlot, IntSlot, NullSlot, PtrSlot,
    ScratchSlot, TensorMapSlot,
)

FORMAT = "aotpack"
MAX_COUNTERS_BYTES = 1 << 26
VERSION = 1  # static shapes
VERSION_DYNAMIC = 2  # symbols, expressions, steps with `when`
CUBIN_PREFIX = "__aotpack__.cubin."
MANIFEST_KEY = "aotpack.manifest"
SUMMARY_KEY = "aotpack.summary"  # informational: graph summary, buffer names, naive bytes

# u64 stops at 2^63: the runtime reads JSON integers as int64
_INT_KINDS = {"i32": (-(1 << 31), 1 << 31), "i64": (-(1 << 63), 1 << 63),
              "u32": (0, 1 << 32), "u64": (0, 1 << 63)}
_SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
_SWIZZLES = ("none", "32B", "64B", "128B")
_L2 = ("none", "64B", "128B", "256B")
_OOB = ("zero", "nan")


@dataclass(frozen=True)
class WeightRecord:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int
    sha256: str
    checksum: str  # the fast 64-bit checksum (aotpack/bundle/checksum.py)

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype.value, "shape": list(self.shape),
                "nbytes": self.nbytes, "sha256": self.sha256, "checksum": self.checksum}


# ----------------------------------------------------------------------------- building
def dim_json(x):
    """An int as itself, a symbolic size as its expression text (docs/manifest.md)."""
    return int(x) if isinstance(x, int) else str(x)


def symbols_json(program) -> list[dict]:
    return [{"name": s.name, "min": s.lo, "max": s.hi,
             "example": int(program.example.get(s.name, s.hi))} for s in program.symbols]


def when_json(when: tuple) -> list[dict]:
    return [{"expr": str(e), "min": int(lo), "max": int(hi)} for e, lo, hi in when]


def signature(program, names: list[str]) -> list[dict]:
    out = []
    for name in names:
        s = program.storage(name)
        out.append({"name": name, "dtype": s.dtype.value, "shape": [dim_json(d) for d in s.shape]})
    return out


def buffers(program, plan, weights: list[WeightRecord]) -> tuple[list[dict], dict[str, int],
                                                                   list[str]]:
    """Manifest buffers, storage name -> buffer index, and each buffer's name (for inspect)."""
    table, index, names = [], {}, []

    def add(name: str, entry: dict) -> None:
        index[name] = len(table)
        table.append(entry)
        names.append(name)

    for i, name in enumerate(program.inputs):
        add(name, {"kind": "input", "index": i})
    for i, name in enumerate(program.outputs):
        if name not in index:  # an output that is also an input keeps the input's buffer
            add(name, {"kind": "output", "index": i})
    for i, name in enumerate(program.states):
        add(name, {"kind": "state", "index": i})
    for i, w in enumerate(weights):
        add(w.name, {"kind": "weight", "index": i})
    if getattr(plan, "counters_bytes", 0):
        add(COUNTERS, {"kind": "counters", "offset": 0, "nbytes": int(plan.counters_bytes)})
    for name in sorted(plan.offsets, key=lambda n: (plan.offsets[n], n)):
        if name in index:
            continue
        add(name, {"kind": "arena", "offset": int(plan.offsets[name]),
                   "nbytes": int(plan.nbytes[name])})
    return table, index, names


def kernel_json(name: str, kernel: CompiledKernel, cubin: int, cubin_sha: str) -> dict:
    doc = {"name": name, "entry": kernel.entry, "cubin": cubin, "cubin_sha256": cubin_sha,
           "block": list(kernel.block), "cluster": list(kernel.cluster), "smem": int(kernel.smem),
           "backend": kernel.backend, "fused_ops": list(kernel.fused_ops),
           "config": jsonable(kernel.config)}
    if kernel.pdl:  # absent means false (manifests of kernels that do not wait stay as they were)
        doc["pdl"] = True
    return doc


def jsonable(value):
    """Config values as plain JSON (tuples → lists, enums/others → str) so the bytes are
    reproducible and any JSON parser reads them."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def slot_json(slot, index: dict[str, int], where: str) -> dict:
    if isinstance(slot, PtrSlot):
        return {"kind": "ptr", "buffer": _buffer(index, slot.storage, where),
                "offset": dim_json(slot.offset)}
    if isinstance(slot, NullSlot):
        return {"kind": "null"}
    if isinstance(slot, IntSlot):
        return {"kind": slot.kind, "value": dim_json(slot.value)}
    if isinstance(slot, FastDivmodSlot):
        return {"kind": "fastdivmod", "value": dim_json(slot.divisor)}
    if isinstance(slot, F32Slot):
        if not math.isfinite(slot.value):
            raise BundleError(f"{where}: f32 value {slot.value} cannot be stored in JSON")
        return {"kind": "f32", "value": float(slot.value)}
    if isinstance(slot, TensorMapSlot):
        return {"kind": "tensormap", "buffer": _buffer(index, slot.storage, where),
                "offset": dim_json(slot.offset), "dtype": slot.dtype.value,
                "dims": [dim_json(d) for d in slot.dims],
                "strides": [dim_json(s) for s in slot.strides], "box": list(slot.box),
                "swizzle": slot.swizzle,
                "l2": slot.l2, "oob": slot.oob}
    if isinstance(slot, CounterSlot):
        raise BundleError(f"{where}: counter slot was not placed by the memory planner "
                          f"(pass MemoryPlan.launches, not the raw launches)")
    if isinstance(slot, ScratchSlot):
        raise BundleError(f"{where}: scratch slot was not placed by the memory planner "
                          f"(pass MemoryPlan.launches, not the raw launches)")
    raise BundleError(f"{where}: unknown slot type {type(slot).__name__}")


def _buffer(index: dict[str, int], storage: str, where: str) -> int:
    try:
        return index[storage]
    except KeyError:
        raise BundleError(f"{where}: storage {storage!r} is neither an input, output, weight "
                          f"nor placed in the arena by the memory plan") from None


# ----------------------------------------------------------------------------- checking
def check(m: dict, where: str = "manifest") -> None:
    """Raise BundleError on anything the runtime would refuse (GPU-independent part). Never
    anything else: a manifest of the wrong shape (a missing key, a list where an object
    belongs) is a BundleError naming what it is, like the runtime's CORRUPT_BUNDLE."""
    try:
        _check(m, where)
    except BundleError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise BundleError(f"{where}: malformed manifest ({what}): the bundle is corrupt or was "
                          f"not written by aotpack; rebuild it") from None


def _check(m: dict, where: str) -> None:
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise BundleError(f"{where}: not an aotpack manifest (format != {FORMAT!r})")
    if m.get("version") in (VERSION, VERSION_DYNAMIC):
        schema.check_all_keys(m)
        schema.check_target(m["target"])
        if m.get("external_weights") is not None:
            schema.check_weights_file(m["external_weights"].get("file"))
        schema_generation.state_sizes(m)
        schema_generation.check_generation(m)
    if m.get("version") == VERSION_DYNAMIC:
        symbols = parse_symbols(m, where)
        named = _bound_symbols(m, symbols)
        for name in symbols:
            if name not in named:
                raise BundleError(f"{where}: symbol {name!r} is no input's dim on its own (nor "
                                  f"k*{name} + c): the runtime could not bind it from the "
                                  f"input shapes")
        for label, point in _check_points(m, symbols):
            _check_static(at_point(m, symbols, point, where), f"{where} ({label})")
        return
    if m.get("version") != VERSION:
        raise BundleError(f"{where}: manifest version {m.get('version')!r}; this aotpack reads "
                          f"versions {VERSION} and {VERSION_DYNAMIC}: rebuild the bundle with "
                          f"this aotpack")
    _check_static(m, where)


def _bound_symbols(m: dict, symbols: dict) -> set[str]:
    """The symbols some input dim binds at run time: the dim is the symbol, or k*S + c."""
    from aotpack.ir.sym import affine_symbol
    from aotpack.ir.sym_parse import parse

    out = set()
    for e in m.get("inputs", []):
        for d in e.get("shape", []):
            if isinstance(d, str):
                try:
                    bound = affine_symbol(parse(d, symbols))
                except ValueError:
                    continue  # a bad expression: reported where the dims are checked
                if bound is not None:
                    out.add(bound[0].name)
    return out


def _check_static(m: dict, where: str) -> None:
    for key in ("target", "inputs", "outputs", "weights", "arena_bytes", "buffers", "kernels",
                "steps"):
        if key not in m:
            raise BundleError(f"{where}: missing key {key!r}")
    arena = _int(m["arena_bytes"], f"{where}: arena_bytes")
    for key in ("inputs", "outputs", "weights", "kernels"):
        names = [e.get("name") for e in m[key]]
        if len(set(names)) != len(names):
            raise BundleError(f"{where}: {key} names are not unique: {names}")
    sizes = [_buffer_bytes(m, b, arena, f"{where}: buffers[{i}]")
             for i, b in enumerate(m["buffers"])]
    for i, k in enumerate(m["kernels"]):
        _check_kernel(k, f"{where}: kernel {i} ({k.get('name')})")
    for i, step in enumerate(m["steps"]):
        _check_step(m, step, sizes, f"{where}: step {i}")


def _int(v, what: str, lo: int = 0) -> int:
    if type(v) is not int or v < lo:
        raise BundleError(f"{what}: expected an integer >= {lo}, got {v!r}")
    return v


def _sig_bytes(entry: dict, what: str) -> int:
    try:
        n = DType(entry["dtype"]).nbytes
    except (KeyError, ValueError, TypeError):
        raise BundleError(f"{what}: bad dtype {entry.get('dtype')!r}") from None
    for s in entry.get("shape", []):
        n *= _int(s, f"{what}: shape (v1 shapes are integers)")
    return n


def _buffer_bytes(m: dict, b: dict, arena: int, what: str) -> int:
    kind = b.get("kind")
    table = {"input": m["inputs"], "output": m["outputs"], "weight": m["weights"],
             "state": m.get("state") or []}.get(kind)
    if table is not None:
        i = _int(b.get("index"), f"{what}: index")
        if i >= len(table):
            raise BundleError(f"{what}: {kind} index {i} out of range ({len(table)})")
        return _sig_bytes(table[i], f"{what}: {kind} {i}")
    if kind == "state":  # session-owned buffers kept across runs (docs/generation.md)
        sizes = schema_generation.state_sizes(m)
        i = _int(b.get("index"), f"{what}: index")
        if i >= len(sizes):
            raise BundleError(f"{what}: state index {i} out of range (the model has "
                              f"{len(sizes)} states)")
        return sizes[i]
    if kind == "arena":
        off, n = _int(b.get("offset"), f"{what}: offset"), _int(b.get("nbytes"), f"{what}: nbytes")
        if off + n > arena:
            raise BundleError(f"{what}: arena region [{off}, {off + n}) beyond arena_bytes {arena}")
        return n
    if kind == "counters":  # session-owned, zeroed int32 counters (docs/manifest.md)
        off, n = _int(b.get("offset"), f"{what}: offset"), _int(b.get("nbytes"), f"{what}: nbytes")
        total = _int(m.get("counters_bytes", 0), f"{what}: counters_bytes")
        if total > MAX_COUNTERS_BYTES:  # runtime_cpp/src/manifest.hpp kMaxCountersBytes
            raise BundleError(f"{what}: counters_bytes {total} is over {MAX_COUNTERS_BYTES}")
        if off + n > total:
            raise BundleError(f"{what}: counters region [{off}, {off + n}) beyond "
                              f"counters_bytes {total}")
        return n
    raise BundleError(f"{what}: unknown buffer kind {kind!r}")


def _check_kernel(k: dict, what: str) -> None:
    _int(k.get("cubin"), f"{what}: cubin")
    for key in ("block", "cluster"):
        dims = k.get(key)
        if not (isinstance(dims, list) and len(dims) == 3):
            raise BundleError(f"{what}: {key} must be 3 integers")
        for d in dims:
            _int(d, f"{what}: {key}", 1)
    if math.prod(k["block"]) > 1024 or k["block"][2] > 64:
        raise BundleError(f"{what}: block {k['block']} has more than 1024 threads or z > 64")
    if math.prod(k["cluster"]) > 16:
        raise BundleError(f"{what}: cluster {k['cluster']} has more than 16 CTAs")
    _int(k.get("smem"), f"{what}: smem")
    if not isinstance(k.get("entry"), str) or not k["entry"]:
        raise BundleError(f"{what}: entry must be a non-empty string")
    pdl = k.get("pdl")
    if pdl is not None and not isinstance(pdl, bool):  # absent or null: false, as the runtime
        raise BundleError(f"{what}: pdl must be true or false")


def _check_step(m: dict, step: dict, sizes: list[int], what: str) -> None:
    ki = _int(step.get("kernel"), f"{what}: kernel")
    if ki >= len(m["kernels"]):
        raise BundleError(f"{what}: kernel index {ki} out of range ({len(m['kernels'])})")
    grid = step.get("grid")
    if not (isinstance(grid, list) and len(grid) == 3):
        raise BundleError(f"{what}: grid must be 3 integers")
    for g in grid:
        _int(g, f"{what}: grid", 1)
    if grid[1] > 65535 or grid[2] > 65535:
        raise BundleError(f"{what}: grid {grid}: y and z must be <= 65535")
    cluster = m["kernels"][ki].get("cluster") or [1, 1, 1]
    if any(g % c for g, c in zip(grid, cluster)):
        raise BundleError(f"{what}: grid {grid} is not a multiple of the kernel's cluster "
                          f"{cluster}")
    for j, slot in enumerate(step.get("args", [])):
        where = f"{what} ({m['kernels'][ki].get('name')}) slot {j}"
        _check_slot(slot, sizes, where)
        if slot.get("kind") == "tensormap":
            base = m["buffers"][slot["buffer"]]
            if base.get("kind") == "arena" and (base["offset"] + slot.get("offset", 0)) % 16:
                raise BundleError(f"{where}: tensor-map address (arena offset {base['offset']} + "
                                  f"{slot.get('offset', 0)}) is not 16-byte aligned")


def _check_slot(s: dict, sizes: list[int], what: str) -> None:
    kind = s.get("kind")
    if kind in _INT_KINDS:
        lo, hi = _INT_KINDS[kind]
        if type(s.get("value")) is not int or not lo <= s["value"] < hi:
            raise BundleError(f"{what}: {kind} value {s.get('value')!r} out of range")
    elif kind == "fastdivmod":
        if type(s.get("value")) is not int or not 1 <= s["value"] < 1 << 31:
            raise BundleError(f"{what}: fastdivmod divisor {s.get('value')!r} not in 1..2^31-1")
    elif kind == "f32":
        if not isinstance(s.get("value"), (int, float)):
            raise BundleError(f"{what}: f32 value must be a number")
    elif kind == "ptr":
        b, off = _slot_buffer(s, sizes, what)
        if off > sizes[b]:
            raise BundleError(f"{what}: offset {off} beyond buffer {b} ({sizes[b]} bytes)")
    elif kind == "tensormap":
        _check_tensormap(s, sizes, what)
    elif kind != "null":
        raise BundleError(f"{what}: unknown slot kind {kind!r}")


def _slot_buffer(s: dict, sizes: list[int], what: str) -> tuple[int, int]:
    b = _int(s.get("buffer"), f"{what}: buffer")
    if b >= len(sizes):
        raise BundleError(f"{what}: buffer index {b} out of range ({len(sizes)})")
    return b, _int(s.get("offset", 0), f"{what}: offset")


def _check_tensormap(s: dict, sizes: list[int], what: str) -> None:
    b, off = _slot_buffer(s, sizes, what)
    elem = _sig_bytes({"dtype": s.get("dtype"), "shape": []}, what)
    dims, strides, box = s.get("dims"), s.get("strides"), s.get("box")
    if not all(isinstance(x, list) and x for x in (dims, strides, box)) or \
            not len(dims) == len(strides) == len(box) or len(dims) > 5:
        raise BundleError(f"{what}: dims/strides/box must be lists of the same rank (1..5)")
    if off % 16:
        raise BundleError(f"{what}: tensor-map address offset {off} is not 16-byte aligned")
    if strides[-1] != 1 or any(_int(st, f"{what}: stride") * elem % 16 for st in strides[:-1]):
        raise BundleError(f"{what}: strides {strides} (last must be 1, others × {elem} B "
                          f"multiples of 16)")
    if any(not 1 <= _int(x, f"{what}: box") <= 256 for x in box) or box[-1] * elem % 16:
        raise BundleError(f"{what}: box {box} (each 1..256, innermost × {elem} B multiple of 16)")
    extent = elem * (1 + sum((_int(d, f"{what}: dims") - 1) * st for d, st in zip(dims, strides)))
    if any(not 1 <= d <= 1 << 32 for d in dims):
        raise BundleError(f"{what}: tensor-map dims {dims} must each be in 1..2^32")
    if any(st * elem >= 1 << 40 for st in strides[:-1]):
        raise BundleError(f"{what}: tensor-map strides {strides} reach 2^40 bytes")
    if off + extent > sizes[b]:
        raise BundleError(f"{what}: tensor map reaches byte {off + extent} of buffer {b} "
                          f"({sizes[b]} bytes)")
    for key, allowed in (("swizzle", _SWIZZLES), ("l2", _L2), ("oob", _OOB)):
        if s.get(key) not in allowed:
            raise BundleError(f"{what}: {key} {s.get(key)!r} not one of {allowed}")
    span = _SWIZZLE_SPAN[s["swizzle"]]
    if span is not None and box[-1] * elem > span:
        raise BundleError(f"{what}: innermost box {box[-1]} × {elem} B exceeds the "
                          f"{s['swizzle']} swizzle span")
    dtype = DType(s["dtype"])
    if dtype == DType.BOOL or (s["oob"] == "nan" and not dtype.is_float):
        raise BundleError(f"{what}: tensor map of {dtype.value} (bool has no TMA type; "
                          f"oob 'nan' needs a float dtype)")


# ----------------------------------------------------------------------------- v2
def parse_symbols(m: dict, where: str = "manifest") -> dict:
    """{name: aotpack.ir.sym.Sym} of a v2 manifest, checked as the runtime checks them."""
    from aotpack.ir.sym import Sym

    out = {}
    for i, s in enumerate(m.get("symbols") or []):
        what = f"{where}: symbols[{i}]"
        name = s.get("name") if isinstance(s, dict) else None
        if not isinstance(name, str) or not name.isidentifier() or name in ("min", "max") \
                or name in out:
            raise BundleError(f"{what}: name {name!r} is not a unique identifier")
        lo, hi = _int(s.get("min"), f"{what}: min"), _int(s.get("max"), f"{what}: max")
        if hi < lo or hi >= 1 << 31:
            raise BundleError(f"{what}: range {lo}..{hi} is empty or too large")
        out[name] = Sym(name, lo, hi)
    if not out:
        raise BundleError(f"{where}: a version {VERSION_DYNAMIC} manifest needs symbols")
    return out


def _check_points(m: dict, symbols: dict) -> list[tuple[str, dict]]:
    """Where a v2 manifest is checked on the build host: every symbol at its min and at its max
    (what the runtime checks at load), and both ends of every `when` range, so that no bucket's
    launches are first checked in production."""
    from aotpack.ir.sym import subs
    from aotpack.ir.sym_parse import parse
    from aotpack.ir.sym_ranges import point_near

    lo = {n: s.lo for n, s in symbols.items()}
    points = [("every symbol at its min", lo),
              ("every symbol at its max", {n: s.hi for n, s in symbols.items()})]
    conditions = {(c["expr"], c["min"], c["max"]) for st in m["steps"] for c in st.get("when") or []}
    for text, cmin, cmax in sorted(conditions):
        try:
            expr = parse(text, symbols)
        except ValueError:
            continue  # at_point names the bad expression
        for end in (cmin, cmax):
            point = point_near(expr, end, symbols.values(), lo, cmin)
            if cmin <= subs(expr, point) <= cmax:
                points.append((f"{text} = {subs(expr, point)}, the {'bottom' if end == cmin else 'top'} "
                               f"of its bucket {cmin}..{cmax}", point))
    return points


def evaluate(v, symbols: dict, point: dict, what: str):
    """An integer field: itself, or its expression evaluated at `point`."""
    if not isinstance(v, str):
        return v
    from aotpack.ir.sym import subs
    from aotpack.ir.sym_parse import parse

    try:
        return subs(parse(v, symbols), point)
    except (ValueError, KeyError, ZeroDivisionError) as e:
        raise BundleError(f"{what}: bad expression {v!r}: {e}") from None


def step_runs(step: dict, symbols: dict, point: dict, what: str) -> bool:
    """Whether a step's `when` holds at `point` and its grid is not empty."""
    for c in step.get("when") or []:
        if not c["min"] <= evaluate(c["expr"], symbols, point, f"{what}: when") <= c["max"]:
            return False
    return all(evaluate(g, symbols, point, f"{what}: grid") != 0 for g in step["grid"])


def at_point(m: dict, symbols: dict, point: dict, where: str = "manifest") -> dict:
    """The v1 manifest a v2 manifest is at one point of the dims: expressions evaluated, the
    steps that run there (in order), nothing else changed."""
    def ev(v, what):
        return evaluate(v, symbols, point, what)

    def tensors(key):
        return [dict(e, shape=[ev(d, f"{where}: {key} {e.get('name')}") for d in e["shape"]])
                for e in m[key]]

    def slot(s, what):
        s = dict(s)
        for key in ("value", "offset"):
            if key in s:
                s[key] = ev(s[key], f"{what}: {key}")
        for key in ("dims", "strides"):
            if key in s:
                s[key] = [ev(x, f"{what}: {key}") for x in s[key]]
        return s

    steps = []
    for i, st in enumerate(m["steps"]):
        what = f"{where}: step {i}"
        if step_runs(st, symbols, point, what):
            steps.append({"kernel": st["kernel"], "grid": [ev(g, what) for g in st["grid"]],
                          "args": [slot(s, f"{what} slot {j}")
                                   for j, s in enumerate(st.get("args", []))]})
    return dict(m, version=VERSION, inputs=tensors("inputs"), outputs=tensors("outputs"),
                steps=steps)
