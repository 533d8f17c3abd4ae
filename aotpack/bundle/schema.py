"""The manifest's schema rules that the C runtime applies before anything else, with the C
runtime's own messages (runtime_cpp/src/manifest.cpp, bundle.cpp), so the Python reader and the
runtime give one verdict on a bundle: the manifest's checksum, the keys each object may have
(a misspelled key would otherwise be ignored and its default used), the target's arch against
its compute capability, and where an external weights file may be; and the "state" list and
"generation" section of docs/generation.md (runtime_cpp/src/manifest_generation.cpp).
"""
from __future__ import annotations

import hashlib

from aotpack.bundle.stfile import BundleError

DIGEST_KEY = "aotpack.manifest_sha256"

# Keys each manifest object may hold. `provenance` and a kernel's `config` / `fused_ops` are
# free-form facts for people (inspect); the runtime never reads them (the digest covers them).
TOP_V1 = ("format", "version", "target", "inputs", "outputs", "weights", "external_weights",
          "arena_bytes", "buffers", "kernels", "steps", "state", "generation", "provenance",
          "counters_bytes")
TOP_V2 = TOP_V1[:3] + ("symbols",) + TOP_V1[3:]
TARGET = ("arch", "cc", "min_driver", "sm_count")
SYMBOL = ("name", "min", "max", "example")
TENSOR = ("name", "dtype", "shape")
WEIGHT = ("name", "dtype", "shape", "nbytes", "sha256", "checksum")  # checksum: optional
BUFFER = {"arena": ("kind", "offset", "nbytes"), "counters": ("kind", "offset", "nbytes")}
BUFFER_INDEXED = ("kind", "index")
KERNEL = ("name", "entry", "cubin", "cubin_sha256", "block", "cluster", "smem", "backend",
          "fused_ops", "config", "pdl")
STEP = ("kernel", "grid", "args", "when")
WHEN = ("expr", "min", "max")
SLOT = {"ptr": ("kind", "buffer", "offset"),
        "tensormap": ("kind", "buffer", "offset", "dtype", "dims", "strides", "box", "swizzle",
                      "l2", "oob"),
        "null": ("kind",)}
SLOT_VALUE = ("kind", "value")  # i32 i64 u32 u64 fastdivmod f32
STATE = ("name", "dtype", "shape")
GENERATION = ("max_batch", "max_seq_len", "vocab_size", "input_ids", "positions", "last_index",
              "next_ids", "logits", "eos_ids")


def bad(where: str, msg: str) -> BundleError:
    return BundleError(f"manifest: {where}: {msg}")


def _check_digests(weight, where: str) -> None:
    """A weight's sha256 (64) and optional checksum (16): lower-case hex, as the runtime
    requires (runtime_cpp/src/manifest.cpp)."""
    if not isinstance(weight, dict):
        return
    for key, digits in (("sha256", 64), ("checksum", 16)):
        value = weight.get(key)
        if value is None:
            continue
        if not (isinstance(value, str) and len(value) == digits
                and all(c in "0123456789abcdef" for c in value)):
            name = weight.get("name")
            raise bad(f"{where}.{key}", f"weight '{name}': not {digits} lower-case hex digits")


def check_digest(metadata: dict, manifest_text: str, path) -> None:
    """The runtime's first check: the manifest string's sha256 is the one recorded next to it."""
    recorded = metadata.get(DIGEST_KEY)
    if recorded is None:
        raise BundleError(f"'{path}' has no manifest checksum (__metadata__[\"{DIGEST_KEY}\"]): "
                          f"it was written by an aotpack older than 0.2 (or the checksum was "
                          f"removed); rebuild the bundle with this aotpack")
    got = digest(manifest_text)
    if recorded != got:
        raise BundleError(f"the manifest of '{path}' has sha256 {got} but the bundle records "
                          f"{recorded}: the manifest was modified or corrupted; rebuild or "
                          f"re-copy the bundle")


def digest(manifest_text: str) -> str:
    return hashlib.sha256(manifest_text.encode("utf-8")).hexdigest()


def _distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) from a to b, as the runtime counts."""
    if len(a) > 64 or len(b) > 64:
        return 1 << 30
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def check_keys(obj, where: str, allowed) -> None:
    if not isinstance(obj, dict):
        raise bad(where, "expected an object")
    for key in obj:
        if key in allowed:
            continue
        best, close = 3, None
        for a in allowed:
            d = _distance(key, a)
            if d < best:
                best, close = d, a
        hint = f"did you mean '{close}'? " if close else ""
        newer = "" if close else (f"; if a newer aotpack wrote the bundle, read it with that "
                                  f"aotpack (this one is {_version()})")
        raise bad(where, f"unknown field '{key}' ({hint}allowed: {' '.join(allowed)}){newer}")


def _version() -> str:
    from aotpack import __version__

    return __version__


def check_all_keys(m: dict) -> None:
    """Every object of the manifest against its key list (types are checked afterwards)."""
    version = m.get("version")
    if version == 1 and "symbols" in m:
        raise BundleError("manifest: \"symbols\" (symbolic, dynamic dims) need bundle format "
                          "v2 but this bundle says \"version\": 1; rebuild the bundle")
    check_keys(m, "manifest", TOP_V2 if type(version) is int and version >= 2 else TOP_V1)
    if isinstance(m.get("target"), dict):
        check_keys(m["target"], "target", TARGET)
    for key, allowed in (("symbols", SYMBOL), ("inputs", TENSOR), ("outputs", TENSOR),
                         ("weights", WEIGHT)):
        for i, e in enumerate(_list(m, key)):
            check_keys(e, f"{key}[{i}]", allowed)
    for i, w in enumerate(_list(m, "weights")):
        _check_digests(w, f"weights[{i}]")
    if isinstance(m.get("external_weights"), dict):
        check_keys(m["external_weights"], "external_weights", ("file",))
    for i, e in enumerate(_list(m, "state")):
        check_keys(e, f"state[{i}]", STATE)
    if m.get("generation") is not None:
        check_keys(m["generation"], "generation", GENERATION)
    for i, b in enumerate(_list(m, "buffers")):
        kind = b.get("kind") if isinstance(b, dict) else None
        check_keys(b, f"buffers[{i}]", BUFFER.get(kind, BUFFER_INDEXED))
    for i, k in enumerate(_list(m, "kernels")):
        check_keys(k, f"kernels[{i}]", KERNEL)
    for i, st in enumerate(_list(m, "steps")):
        check_keys(st, f"steps[{i}]", STEP)
        for j, s in enumerate(st.get("args") if isinstance(st.get("args"), list) else []):
            kind = s.get("kind") if isinstance(s, dict) else None
            check_keys(s, f"steps[{i}].args[{j}]", SLOT.get(kind, SLOT_VALUE))
        for j, w in enumerate(st.get("when") if isinstance(st.get("when"), list) else []):
            check_keys(w, f"steps[{i}].when[{j}]", WHEN)


def _list(m: dict, key: str) -> list:
    v = m.get(key)
    return v if isinstance(v, list) else []


def parse_arch(arch: str) -> tuple[int, int] | None:
    """'sm_90a' -> (9, 0): sm_, two or three digits, an optional a or f."""
    if not isinstance(arch, str) or not arch.startswith("sm_"):
        return None
    digits = arch[3:-1] if arch[-1:] in ("a", "f") else arch[3:]
    if not (2 <= len(digits) <= 3 and digits.isascii() and digits.isdigit()):
        return None
    return int(digits) // 10, int(digits) % 10


def check_target(t: dict) -> None:
    arch, cc = t.get("arch"), t.get("cc")
    parsed = parse_arch(arch)
    if parsed is None:
        raise bad("target.arch", f"'{arch}' is not a GPU architecture like sm_90a (sm_, the "
                                 f"compute capability's digits, an optional a or f)")
    if isinstance(cc, list) and len(cc) == 2 and list(parsed) != cc:
        raise bad("target", f"arch '{arch}' means compute capability {parsed[0]}.{parsed[1]} "
                            f"but cc says {cc[0]}.{cc[1]}: the manifest contradicts itself; "
                            f"rebuild the bundle")


def check_weights_file(f) -> None:
    """external_weights.file stays inside the bundle's folder; elsewhere is the caller's choice."""
    if not isinstance(f, str) or not f or f.startswith("/") or ".." in f.split("/") or "\0" in f:
        raise bad("external_weights.file", f"'{f}' must be a relative path inside the bundle's "
                                           f"folder (no leading '/', no '..'); to load weights "
                                           f"from elsewhere, pass their path (weights_path / "
                                           f"--weights)")
