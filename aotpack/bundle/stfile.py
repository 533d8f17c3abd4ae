"""The safetensors container, written and parsed by hand (docs/manifest.md, first section).

Alignment: the header is padded with spaces so the data section starts 256-aligned, and every
tensor starts 256-aligned. safetensors readers refuse gaps between tensors (each tensor must
start where the previous one ended), so the zero bytes before an unaligned tensor are stored
as a U8 tensor named `__aotpack__.pad.<i>`: the file stays a valid safetensors file.
No torch import: entries carry raw bytes (anything supporting the buffer protocol).
"""
from __future__ import annotations

import json
import os
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aotpack.dtypes import DType
from aotpack.errors import UserError

ALIGN = 256
PAD_PREFIX = "__aotpack__.pad."
MAX_HEADER_BYTES = 256 << 20  # a header beyond this is a corrupt or hostile file


class BundleError(UserError):
    """A bundle (or weights file) that cannot be written or read; the message says what to do."""

    named = False  # the message says what kind it is


@dataclass(frozen=True)
class Entry:
    """One tensor to write: `data` is its raw little-endian bytes (buffer protocol)."""

    name: str
    dtype: str  # safetensors spelling, e.g. "BF16"
    shape: tuple[int, ...]
    data: object


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a parsed file; `begin`/`end` are absolute byte positions in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _nbytes(data) -> int:
    return memoryview(data).nbytes


def _layout(entries: list[Entry]) -> tuple[dict, list[tuple[int, object]]]:
    """Header tensor entries and the (size, data-or-None-for-zeros) chunks of the data section,
    in file order, padding tensors included."""
    header, chunks, pos, pads = {}, [], 0, 0
    for e in entries:
        if e.name.startswith(PAD_PREFIX) or e.name == "__metadata__":
            raise BundleError(f"tensor name {e.name!r} is reserved")
        if e.name in header:
            raise BundleError(f"two tensors are named {e.name!r}")
        gap = _align(pos) - pos
        if gap:
            header[f"{PAD_PREFIX}{pads}"] = {"dtype": "U8", "shape": [gap],
                                             "data_offsets": [pos, pos + gap]}
            chunks.append((gap, None))
            pads, pos = pads + 1, pos + gap
        size = _nbytes(e.data)
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape),
                          "data_offsets": [pos, pos + size]}
        chunks.append((size, e.data))
        pos += size
    return header, chunks


def encode_header(header: dict, metadata: dict[str, str]) -> bytes:
    """8-byte length + JSON (sorted keys, compact) padded with spaces to a 256-aligned end."""
    doc = dict(header)
    doc["__metadata__"] = dict(metadata)
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    padded = raw + b" " * (_align(8 + len(raw)) - 8 - len(raw))
    return struct.pack("<Q", len(padded)) + padded


def write_safetensors(out, entries: list[Entry], metadata: dict[str, str]) -> None:
    """Write one safetensors file to the open binary file `out`."""
    header, chunks = _layout(entries)
    out.write(encode_header(header, metadata))
    for size, data in chunks:
        out.write(bytes(size) if data is None else memoryview(data).cast("B"))


@contextmanager
def atomic_output(path: Path):
    """Yield an open temp file next to `path`; rename it onto `path` only if the block
    succeeds, so a failure leaves no half-written file (and no temp file) behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- reading
def loads_strict(text: str):
    """json.loads as the runtime's parser reads JSON: a key named twice, or a lone surrogate
    escape (\\ud800), is an error (json.JSONDecodeError / ValueError)."""
    doc = json.loads(text, object_pairs_hook=_unique_keys)
    json.dumps(doc, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError on a surrogate
    return doc


def _unique_keys(pairs: list) -> dict:
    """A JSON object that names a key twice is refused (as the runtime's parser does): which
    of the two counts would otherwise depend on the reader."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise json.JSONDecodeError(f"duplicate key in object: {dup!r}", "", 0)
    return out


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Parse and check a safetensors header: (tensors by name, metadata, data section start)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BundleError(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, MAX_HEADER_BYTES):
                raise BundleError(f"{path}: header length {n} is beyond the file "
                                  f"({size} bytes): the file is truncated or not a bundle")
            raw = f.read(n)
    except OSError as e:
        raise BundleError(f"{path}: cannot read ({e.strerror})") from None
    try:
        doc = loads_strict(raw.decode("utf-8"))
    except (UnicodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"{path}: header is not valid JSON ({e}): not a safetensors file") from None
    if not isinstance(doc, dict):
        raise BundleError(f"{path}: header is not a JSON object")
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise BundleError(f"{path}: __metadata__ must map strings to strings")
    start = 8 + n
    tensors = {name: _tensor_info(path, name, info, start) for name, info in doc.items()}
    _check_coverage(path, tensors, start, size)
    return tensors, metadata, start


def _tensor_info(path: Path, name: str, info, start: int) -> TensorInfo:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise BundleError(f"{where}: entry is not an object")
    dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    try:
        elem = DType.from_safetensors(dtype).nbytes
    except ValueError:
        raise BundleError(f"{where}: unknown dtype {dtype!r}") from None
    if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
        raise BundleError(f"{where}: shape must be a list of non-negative integers")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
            and 0 <= offs[0] <= offs[1]):
        raise BundleError(f"{where}: bad data_offsets {offs!r}")
    n = elem
    for s in shape:
        n *= s
    if offs[1] - offs[0] != n:
        raise BundleError(f"{where}: {offs[1] - offs[0]} bytes stored, shape {shape} "
                          f"of {dtype} needs {n}")
    return TensorInfo(name, dtype, tuple(shape), start + offs[0], start + offs[1])


def _check_coverage(path: Path, tensors: dict[str, TensorInfo], start: int, size: int) -> None:
    pos = start
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != pos:
            raise BundleError(f"{path}: tensor {t.name!r} does not start where the previous "
                              f"one ends (overlap or gap): the file is corrupt")
        pos = t.end
    if pos != size:
        raise BundleError(f"{path}: data section ends at byte {pos} but the file has {size} "
                          f"bytes: the file is truncated or has trailing data")


def read_bytes(path: Path, info: TensorInfo) -> bytes:
    with open(path, "rb") as f:
        f.seek(info.begin)
        data = f.read(info.nbytes)
    if len(data) != info.nbytes:
        raise BundleError(f"{path}: tensor {info.name!r} is truncated")
    return data
