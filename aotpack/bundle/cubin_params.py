"""A kernel's parameter sizes as its cubin declares them (ptxas's EIATTR_KPARAM_INFO records in
the ELF section `.nv.info.<entry>`), read as runtime_cpp/src/cubin_params.cpp reads them, so the
build host and the runtime refuse the same slot lists. No GPU, no CUDA toolkit."""
from __future__ import annotations

import struct

_NO_VALUE, _HALF, _SIZED, _KPARAM_INFO = 1, 3, 4, 0x17


def param_sizes(image: bytes, entry: str) -> list[int] | None:
    """Byte size of each parameter of `entry`, in order; None when the image has no table this
    reader understands (not an ELF64 little-endian image, no such section, no records)."""
    b = memoryview(image)
    if len(b) < 64 or bytes(b[:4]) != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    if shentsize < 0x28 or shstrndx >= shnum or shoff + shnum * shentsize > len(b):
        return None
    stroff, strsize = struct.unpack_from("<QQ", b, shoff + shstrndx * shentsize + 0x18)
    if stroff + strsize > len(b):
        return None
    want = f".nv.info.{entry}".encode() + b"\0"
    for s in range(shnum):
        h = shoff + s * shentsize
        name, = struct.unpack_from("<I", b, h)
        off, size = struct.unpack_from("<QQ", b, h + 0x18)
        if name >= strsize or strsize - name < len(want) or \
                bytes(b[stroff + name:stroff + name + len(want)]) != want:
            continue
        if off + size > len(b):
            return None
        return _records(bytes(b[off:off + size]))
    return None


def _records(p: bytes) -> list[int] | None:
    by_ordinal: dict[int, int] = {}
    i = 0
    while i < len(p):
        if len(p) - i < 2:
            return None
        fmt, attr = p[i], p[i + 1]
        if fmt == _NO_VALUE:
            i += 2
        elif fmt == _HALF:
            i += 4
        elif fmt == _SIZED:
            if len(p) - i < 4:
                return None
            n, = struct.unpack_from("<H", p, i + 2)
            if i + 4 + n > len(p):
                return None
            if attr == _KPARAM_INFO:
                if n < 12:
                    return None
                ordinal, = struct.unpack_from("<H", p, i + 8)
                flags, = struct.unpack_from("<I", p, i + 12)
                if ordinal >= 4096 or ordinal in by_ordinal:
                    return None
                by_ordinal[ordinal] = flags >> 18
            i += 4 + n
        else:
            return None
    if not by_ordinal or sorted(by_ordinal) != list(range(len(by_ordinal))):
        return None
    return [by_ordinal[k] for k in range(len(by_ordinal))]


SLOT_BYTES = {"ptr": 8, "null": 8, "i64": 8, "u64": 8, "i32": 4, "u32": 4, "f32": 4,
              "fastdivmod": 12, "tensormap": 128}


def check_params(manifest: dict, kernel: int, sizes: list[int]) -> None:
    """Every step of `kernel` passes exactly the parameters the cubin declares (the runtime's
    message)."""
    from aotpack.bundle.stfile import BundleError

    k = manifest["kernels"][kernel]
    declared = " ".join(str(s) for s in sizes)
    for i, st in enumerate(manifest["steps"]):
        if st.get("kernel") != kernel:
            continue
        where = f"manifest: steps[{i}] (kernel '{k['name']}')"
        args = st.get("args", [])
        if len(args) != len(sizes):
            raise BundleError(f"{where}: {len(args)} parameter slots but the cubin's entry "
                              f"'{k['entry']}' takes {len(sizes)} parameters (bytes: {declared})")
        for a, (slot, size) in enumerate(zip(args, sizes)):
            ours = SLOT_BYTES.get(slot.get("kind"))
            if ours != size:
                raise BundleError(f"{where}: args[{a}] is {slot.get('kind')} ({ours} bytes) but "
                                  f"the cubin's entry '{k['entry']}' declares parameter {a} as "
                                  f"{size} bytes")
