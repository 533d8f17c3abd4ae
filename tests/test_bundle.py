"""Bundle writer/reader: safetensors compatibility, alignment, dedup, checksums, external
weights, byte reproducibility, atomicity and reader validation (docs/manifest.md)."""
import hashlib
import json
import struct

import pytest
import torch
from safetensors import safe_open

from aotpack.bundle import BundleError, read_bundle, stfile, write_bundle
from aotpack.kernels.spec import SM90, CompiledKernel, Launch, PtrSlot, ScratchSlot
from handmade_bundle import CUBIN, make_plan, make_program, write_handmade


def _header(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), n, raw


def test_loads_with_safetensors_and_round_trips(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    program = make_program()
    with safe_open(str(path), "pt") as f:
        for name, tensor in program.weights.items():
            assert torch.equal(f.get_tensor(name), tensor)
            assert f.get_tensor(name).dtype == tensor.dtype
        assert bytes(f.get_tensor("__aotpack__.cubin.0").numpy()) == CUBIN
        manifest = json.loads(f.metadata()["aotpack.manifest"])
    b = read_bundle(path, checksums=True)
    assert b.manifest == manifest
    assert manifest["format"] == "aotpack" and manifest["version"] == 1
    assert manifest["target"] == {"arch": "sm_90a", "cc": [9, 0], "min_driver": 12080,
                                  "sm_count": 132}
    assert manifest["inputs"] == [{"name": "x", "dtype": "bf16", "shape": [64, 64]}]
    assert manifest["outputs"] == [{"name": "y", "dtype": "f32", "shape": [64, 64]}]
    assert [w["name"] for w in manifest["weights"]] == ["fc.weight", "fc.bias", "fc.scale"]
    assert manifest["external_weights"] is None
    assert b.weight("fc.bias") == program.weights["fc.bias"].numpy().tobytes()


def test_buffers_and_slots_follow_the_memory_plan(tmp_path):
    m = read_bundle(write_handmade(tmp_path / "m.aotpack")).manifest
    assert m["arena_bytes"] == 17408
    assert m["buffers"] == [
        {"kind": "input", "index": 0}, {"kind": "output", "index": 0},
        {"kind": "weight", "index": 0}, {"kind": "weight", "index": 1},
        {"kind": "weight", "index": 2},
        {"kind": "arena", "offset": 0, "nbytes": 16384},      # h
        {"kind": "arena", "offset": 16384, "nbytes": 1024},   # __scratch.0.7
    ]
    gemm_args = m["steps"][0]["args"]
    assert gemm_args[0] == {"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "bf16",
                            "dims": [64, 64], "strides": [64, 1], "box": [64, 64],
                            "swizzle": "128B", "l2": "128B", "oob": "zero"}
    assert gemm_args[1:] == [
        {"kind": "ptr", "buffer": 2, "offset": 0}, {"kind": "ptr", "buffer": 3, "offset": 0},
        {"kind": "ptr", "buffer": 5, "offset": 0}, {"kind": "i32", "value": 64},
        {"kind": "i64", "value": 4096}, {"kind": "f32", "value": 0.5},
        {"kind": "ptr", "buffer": 6, "offset": 0}, {"kind": "null"}]
    assert m["steps"][2]["args"][1] == {"kind": "ptr", "buffer": 1, "offset": 256}
    assert [s["grid"] for s in m["steps"]] == [[2, 1, 1], [4, 1, 1], [16, 1, 1]]


def test_alignment_and_zero_padding(tmp_path):
    path = write_handmade(tmp_path / "m.aotpack")
    header, n, raw = _header(path)
    start = 8 + n
    assert start % 256 == 0 and raw[8:start].rstrip(b" ").endswith(b"}")
    pads = [k for k in header if k.startswith("__aotpack__.pad.")]
    assert pads, "the 12-byte weight must force a padding tensor"
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if name in pads:
            assert raw[start + begin:start + end] == bytes(end - begin)
        else:
            assert (start + begin) % 256 == 0, name


def test_cubins_and_kernels_are_deduplicated(tmp_path):
    m = read_bundle(write_handmade(tmp_path / "m.aotpack")).manifest
    assert [k["entry"] for k in m["kernels"]] == ["gemm_kernel", "relu_kernel"]
    assert [k["cubin"] for k in m["kernels"]] == [0, 0]        # identical bytes → one tensor
    assert [s["kernel"] for s in m["steps"]] == [0, 0, 1]      # same kernel → one entry
    header, _, _ = _header(tmp_path / "m.aotpack")
    assert [k for k in header if k.startswith("__aotpack__.cubin.")] == ["__aotpack__.cubin.0"]
    assert m["kernels"][0]["cluster"] == [2, 1, 1] and m["kernels"][0]["smem"] == 65536
    assert m["kernels"][0]["fused_ops"] == ["linear", "bias"]


def test_distinct_cubins_get_their_own_tensor(tmp_path):
    plan = make_plan()
    other = CompiledKernel("other", b"another cubin", (32, 1, 1), 0)
    plan.launches.append(Launch(other, (1, 1, 1), (PtrSlot("y"),)))
    write_bundle(tmp_path / "m.aotpack", make_program(), plan, target=SM90, provenance={})
    b = read_bundle(tmp_path / "m.aotpack", checksums=True)
    assert [k["cubin"] for k in b.manifest["kernels"]] == [0, 0, 1]
    assert b.cubin(1) == b"another cubin"


def test_sha256_of_weights_and_cubins(tmp_path):
    b = read_bundle(write_handmade(tmp_path / "m.aotpack"))
    program = make_program()
    for w in b.manifest["weights"]:
        raw = program.weights[w["name"]].contiguous().view(torch.uint8).numpy().tobytes()
        assert w["sha256"] == hashlib.sha256(raw).hexdigest()
        assert w["nbytes"] == len(raw)
    assert b.manifest["kernels"][0]["cubin_sha256"] == hashlib.sha256(CUBIN).hexdigest()


def test_corrupt_cubin_fails_checksum(tmp_path):
    path = write_handmade(tmp_path / "m.aotpack")
    header, n, raw = _header(path)
    begin = 8 + n + header["__aotpack__.cubin.0"]["data_offsets"][0]
    path.write_bytes(raw[:begin] + b"X" + raw[begin + 1:])
    read_bundle(path)  # structure is fine
    with pytest.raises(BundleError, match="sha256"):
        read_bundle(path, checksums=True)


def test_external_weights(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    wpath = tmp_path / "weights.safetensors"
    with safe_open(str(path), "pt") as f:
        assert list(f.keys()) == ["__aotpack__.cubin.0"]
    program = make_program()
    with safe_open(str(wpath), "pt") as f:
        for name, tensor in program.weights.items():
            assert torch.equal(f.get_tensor(name), tensor)
    b = read_bundle(path, checksums=True)
    assert b.manifest["external_weights"] == {"file": "weights.safetensors"}
    assert b.weights_path == wpath
    assert len(b.manifest["weights"]) == 3 and all(len(w["sha256"]) == 64
                                                   for w in b.manifest["weights"])
    # a weights file from another build (other values) is refused by its checksums
    other = tmp_path / "other"
    from aotpack.bundle import write_bundle as wb
    wb(other / "model.aotpack", make_program(seed=1), make_plan(), target=SM90, provenance={},
       external_weights="weights.safetensors")
    with pytest.raises(BundleError, match="sha256"):
        read_bundle(path, weights_path=other / "weights.safetensors", checksums=True)
    wpath.unlink()
    with pytest.raises(BundleError, match="weights are external"):
        read_bundle(path)


def test_byte_reproducible(tmp_path):
    a = write_handmade(tmp_path / "a" / "model.aotpack", external_weights="w.safetensors")
    b = write_handmade(tmp_path / "b" / "model.aotpack", external_weights="w.safetensors")
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a" / "w.safetensors").read_bytes() == \
        (tmp_path / "b" / "w.safetensors").read_bytes()
    c = write_handmade(tmp_path / "c" / "model.aotpack")
    d = write_handmade(tmp_path / "d" / "model.aotpack")
    assert c.read_bytes() == d.read_bytes()


def _fail_after_some_bytes(monkeypatch, fail_on_call: int):
    real, calls = stfile.write_safetensors, []

    def failing(out, entries, metadata):
        calls.append(1)
        if len(calls) == fail_on_call:
            out.write(b"partial data")
            raise OSError("disk full")
        return real(out, entries, metadata)

    monkeypatch.setattr("aotpack.bundle.writer.write_safetensors", failing)


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    _fail_after_some_bytes(monkeypatch, 1)
    with pytest.raises(OSError, match="disk full"):
        write_handmade(tmp_path / "model.aotpack")
    assert list(tmp_path.iterdir()) == []


def test_failure_after_external_weights_leaves_nothing(tmp_path, monkeypatch):
    _fail_after_some_bytes(monkeypatch, 2)  # weights file done, bundle fails
    with pytest.raises(OSError):
        write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_the_previous_bundle(tmp_path, monkeypatch):
    path = write_handmade(tmp_path / "model.aotpack")
    before = path.read_bytes()
    _fail_after_some_bytes(monkeypatch, 1)
    with pytest.raises(OSError):
        write_handmade(path)
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def test_writer_refuses_unplaced_scratch_and_unknown_storage(tmp_path):
    plan = make_plan()
    k = plan.launches[0].kernel
    plan.launches.append(Launch(k, (1, 1, 1), (ScratchSlot(512),)))
    with pytest.raises(BundleError, match="scratch slot was not placed"):
        write_bundle(tmp_path / "m.aotpack", make_program(), plan, target=SM90, provenance={})
    plan.launches[-1] = Launch(k, (1, 1, 1), (PtrSlot("nowhere"),))
    with pytest.raises(BundleError, match="'nowhere'"):
        write_bundle(tmp_path / "m.aotpack", make_program(), plan, target=SM90, provenance={})
    plan.launches[-1] = Launch(k, (2, 1, 1), (PtrSlot("h", 1 << 20),))
    with pytest.raises(BundleError, match="beyond buffer"):
        write_bundle(tmp_path / "m.aotpack", make_program(), plan, target=SM90, provenance={})
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_a_weight_of_the_wrong_size(tmp_path):
    program = make_program()
    program.weights["fc.bias"] = torch.zeros(63)
    with pytest.raises(BundleError, match="fc.bias"):
        write_bundle(tmp_path / "m.aotpack", program, make_plan(), target=SM90, provenance={})


def test_reader_refuses_truncated_and_foreign_files(tmp_path):
    path = write_handmade(tmp_path / "m.aotpack")
    raw = path.read_bytes()
    (tmp_path / "cut.aotpack").write_bytes(raw[:-10])
    with pytest.raises(BundleError, match="truncated"):
        read_bundle(tmp_path / "cut.aotpack")
    (tmp_path / "junk.aotpack").write_bytes(b"not a bundle at all")
    with pytest.raises(BundleError):
        read_bundle(tmp_path / "junk.aotpack")
    with pytest.raises(BundleError, match="no such bundle"):
        read_bundle(tmp_path / "missing.aotpack")
    plain = tmp_path / "plain.safetensors"
    from safetensors.torch import save_file
    save_file({"a": torch.zeros(2)}, str(plain))
    with pytest.raises(BundleError, match="without an aotpack manifest"):
        read_bundle(plain)


def _rewrite_manifest(path, edit, digest: bool = True):
    """Edits the manifest of `path`; with `digest`, records the new manifest's checksum too
    (an edit made on purpose, which only the schema checks can catch)."""
    header, n, raw = _header(path)
    m = json.loads(header["__metadata__"]["aotpack.manifest"])
    edit(m)
    text = json.dumps(m)
    header["__metadata__"]["aotpack.manifest"] = text
    if digest:
        header["__metadata__"]["aotpack.manifest_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    data = raw[8 + n:]
    new = json.dumps(header).encode()
    new += b" " * (-(8 + len(new)) % 256)
    path.write_bytes(struct.pack("<Q", len(new)) + new + data)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(version=2), "version 2"),
    (lambda m: m["steps"][0].update(kernel=9), "kernel index 9 out of range"),
    (lambda m: m["steps"][0]["args"][1].update(buffer=99), "buffer index 99 out of range"),
    (lambda m: m["buffers"][5].update(nbytes=1 << 30), "beyond arena_bytes"),
    (lambda m: m["steps"][0]["args"][0].update(box=[64, 512]), "box"),
    (lambda m: m["steps"][0]["args"][0].update(dims=[128, 64]), "tensor map reaches"),
    (lambda m: m["inputs"][0].update(shape=["B", 64]), "v1 shapes are integers"),
    (lambda m: m["kernels"][0].update(block=[2048, 1, 1]), "1024 threads"),
    (lambda m: m["kernels"][0].update(cubin=3), "cubin 3 missing"),
    (lambda m: m["steps"][0].update(grid=[3, 1, 1]), "not a multiple of the kernel's cluster"),
    (lambda m: m["steps"][2].update(grid=[1, 70000, 1]), "<= 65535"),
    (lambda m: m["kernels"][0].update(cluster=[32, 1, 1]), "more than 16 CTAs"),
    (lambda m: m["kernels"][0].update(pdl=1), "pdl must be true or false"),
    (lambda m: m["weights"][1].update(name="fc.weight"), "weights names are not unique"),
    (lambda m: m["steps"][0]["args"][0].update(box=[64, 128], dims=[32, 128], strides=[128, 1]),
     "swizzle span"),
    (lambda m: m["steps"][0]["args"][0].update(dtype="bool", box=[64, 16]), "bool has no TMA"),
    (lambda m: m["steps"][0]["args"][6].update(kind="u64", value=1 << 63), "out of range"),
    (lambda m: m["steps"][0]["args"][6].update(kind="fastdivmod", value=0), "fastdivmod divisor"),
    (lambda m: m["steps"][0]["args"][6].update(kind="fastdivmod", value=1 << 31),
     "fastdivmod divisor"),
])
def test_reader_validates_the_manifest(tmp_path, edit, message):
    path = write_handmade(tmp_path / "m.aotpack")
    _rewrite_manifest(path, edit)
    with pytest.raises(BundleError, match=message):
        read_bundle(path)


def _launcher():
    from aotpack import runtime_files

    launcher = runtime_files.launcher_path()
    if launcher is None:
        pytest.skip("the C++ runtime is not installed (pip install -e . builds it)")
    return launcher


@pytest.mark.parametrize("external", [None, "weights.safetensors"])
def test_the_cpp_runtime_accepts_the_bundle(tmp_path, external):
    """The contract both ways: `aotpack-run --check` (load-time validation, checksums, no GPU)
    accepts what the writer produced and refuses a corrupted copy."""
    import subprocess

    launcher = _launcher()
    path = write_handmade(tmp_path / "model.aotpack", external_weights=external)
    ok = subprocess.run([str(launcher), str(path), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    header, n, raw = _header(path)
    begin = 8 + n + header["__aotpack__.cubin.0"]["data_offsets"][0]
    path.write_bytes(raw[:begin] + b"X" + raw[begin + 1:])
    bad = subprocess.run([str(launcher), str(path), "--check"], capture_output=True, text=True)
    assert bad.returncode != 0 and "sha256" in (bad.stdout + bad.stderr).lower()


def test_fastdivmod_slot_json_and_bytes():
    """The manifest carries only the divisor; the 12 parameter bytes are derived (here and in
    runtime_cpp's fastdivmod_fields) as CuTe's host code does -- values measured on CuTeDSL
    4.8.1, the same ones the runtime's ctest fastdivmod_fields_match_cute checks."""
    from aotpack.bundle.manifest import slot_json
    from aotpack.kernels.cutedsl.slots import i32_pair, pack
    from aotpack.kernels.spec import FastDivmodSlot

    assert slot_json(FastDivmodSlot(12), {}, "s") == {"kind": "fastdivmod", "value": 12}
    assert pack(FastDivmodSlot(12)) == struct.pack("<IIBBxx", 12, 0x55555556, 1, 3)
    assert pack(FastDivmodSlot(8)) == struct.pack("<IIBBxx", 8, 1, 1, 2)
    assert pack(FastDivmodSlot(1)) == struct.pack("<IIBBxx", 1, 1, 0, 0)
    # {i32 M, i32 K} by value == the u64 with the same little-endian bytes
    assert pack(i32_pair(1000, 520)) == struct.pack("<ii", 1000, 520)


def test_the_cpp_runtime_accepts_a_fastdivmod_slot(tmp_path):
    import subprocess

    launcher = _launcher()
    path = write_handmade(tmp_path / "model.aotpack")
    _rewrite_manifest(path, lambda m: m["steps"][0]["args"][6].update(kind="fastdivmod",
                                                                      value=132))
    read_bundle(path)  # the Python checker accepts it too
    ok = subprocess.run([str(launcher), str(path), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_checksum64_matches_the_runtime_definition():
    """The values runtime_cpp's ctest checksum64_vectors_and_pieces asserts, so the writer and
    the C runtime compute one checksum; ragged lengths and chunk borders included."""
    from aotpack.bundle.checksum import checksum64

    assert checksum64(b"") == "0000000000000000"
    assert checksum64(b"abc") == "a4e1ccf9ffc61570"
    assert checksum64(bytes(range(256)) * 100) == "d1d6ad5ecb67b064"
    import aotpack.bundle.checksum as cs

    data = bytes((i * 7919) & 0xFF for i in range(8 * 1000 + 5))
    want = checksum64(data)
    small = cs._CHUNK_WORDS
    try:
        cs._CHUNK_WORDS = 64  # many numpy passes: the split must not matter
        assert checksum64(data) == want
    finally:
        cs._CHUNK_WORDS = small
    flipped = bytearray(data)
    flipped[4001] ^= 0x10
    assert checksum64(bytes(flipped)) != want


def test_every_weight_records_its_checksum(tmp_path):
    from aotpack.bundle.checksum import checksum64

    path = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    b = read_bundle(path, checksums=True)
    for w in b.manifest["weights"]:
        assert w["checksum"] == checksum64(b.weight(w["name"]))


@pytest.mark.parametrize("verify, needle", [("fast", "checksum"), ("full", "sha256"),
                                            ("none", None)])
def test_the_cpp_runtime_verify_modes(tmp_path, verify, needle):
    """`aotpack-run --check --verify MODE` on a bundle whose weights file has one changed byte:
    fast refuses it by the writer's checksum, full by sha256, none lets it through."""
    import subprocess

    launcher = _launcher()
    path = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    wpath = tmp_path / "weights.safetensors"
    header, n, raw = _header(wpath)
    name = next(k for k in header if k != "__metadata__")
    at = 8 + n + header[name]["data_offsets"][0] + 3
    wpath.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:])
    r = subprocess.run([str(launcher), str(path), "--check", "--verify", verify],
                       capture_output=True, text=True)
    if needle is None:
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        assert r.returncode == 1 and needle in r.stdout + r.stderr, r.stdout + r.stderr
