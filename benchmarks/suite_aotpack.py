"""The suite's aotpack children, one bundle each:

  aotpack-run   the C++ launcher: `aotpack-run BUNDLE --bench` (CUDA-graph replays, its own
                median/p10/p90), its outputs on eager's inputs (--inputs/--outputs), and its
                cold start (wall time of `aotpack-run BUNDLE` in a fresh process). This child
                never touches the GPU itself: it compares on the CPU.
  aotpack-py    the Python binding on torch tensors: timing.bench of Session.run, error vs eager.
  aotpack-cold  the binding with no torch in the process (ctypes driver calls): process start →
                first output, and the device memory the model takes (cuMemGetInfo).

Also what the suite and scripts/gpu-check need to know about bundles without torch: the
launcher's --bench line, and which bundles share one external weights file (weights_key).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import suite_models as sm
from suite_measure import since_process_start, stage


def parse_bench(text: str) -> dict:
    """median/p10/p90 of `aotpack-run --bench` output."""
    m = re.search(r"median_ms=([\d.]+) p10_ms=([\d.]+) p90_ms=([\d.]+).*runs=(\d+)", text)
    if not m:
        return {}
    return {"median_ms": float(m[1]), "p10_ms": float(m[2]), "p90_ms": float(m[3]),
            "reps": int(m[4])}


def weights_key(b) -> tuple[str, str] | None:
    """(spec, names + sha256 of every weight) of a bundle with external weights (None when
    they are embedded): bundles with one key can share one made weights file."""
    manifest = sm.bundle_manifest(b.bundle)
    if not (manifest.get("external_weights") or {}).get("file"):
        return None
    sums = sorted((w["name"], w["sha256"]) for w in manifest.get("weights", []))
    return b.spec, json.dumps(sums)


def weights_file(b) -> Path:
    return b.dir / sm.bundle_manifest(b.bundle)["external_weights"]["file"]


# ---------------------------------------------------------------------------- aotpack-run

def task_aotpack_run(t: dict) -> dict:
    run, bundle = t["aotpack_run"], t["bundle"]
    stage("aotpack-run --bench")
    p = subprocess.run([run, bundle, "--bench", str(2 * t["reps"]), "--warmup", "20"],
                       capture_output=True, text=True)
    res = parse_bench(p.stdout)
    if p.returncode != 0 or not res:
        raise RuntimeError(f"aotpack-run --bench rc {p.returncode}: "
                           f"{(p.stderr or p.stdout)[-300:]}")
    stage("aotpack-run --inputs/--outputs")
    res.update(_outputs_vs_eager(run, bundle, t.get("ref_path")))
    stage("cold start")
    t0 = time.perf_counter()
    cold = subprocess.run([run, bundle], capture_output=True, text=True)
    if cold.returncode == 0:
        res["cold_start_s"] = round(time.perf_counter() - t0, 3)
    else:
        res["cold_start_note"] = f"not measured: rc {cold.returncode}: {cold.stderr[-200:]}"
    return res


def _outputs_vs_eager(run: str, bundle: str, ref_path: str | None) -> dict:
    """The launcher's outputs on eager's inputs, against eager's outputs (CPU only)."""
    import suite_measure as M

    ref = M.load_reference(ref_path)
    manifest = sm.bundle_manifest(Path(bundle))
    if ref is None or not _same_signature(ref["inputs"], manifest["inputs"]):
        return {"notes": ["outputs not compared: no eager reference with this bundle's inputs"]}
    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory() as tmp:
        xin, yout = Path(tmp, "x.safetensors"), Path(tmp, "y.safetensors")
        save_file({i["name"]: x.contiguous() for i, x in zip(manifest["inputs"], ref["inputs"])},
                  str(xin))
        p = subprocess.run([run, bundle, "--inputs", str(xin), "--outputs", str(yout)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"aotpack-run --inputs rc {p.returncode}: "
                               f"{(p.stderr or p.stdout)[-300:]}")
        got = load_file(str(yout))
    return M.vs_reference([got[o["name"]] for o in manifest["outputs"]], ref)


def _same_signature(tensors: list, infos: list) -> bool:
    from aotpack.dtypes import DType

    return [(tuple(x.shape), x.dtype) for x in tensors] == \
        [(tuple(i["shape"]), DType(i["dtype"]).to_torch()) for i in infos]


# ----------------------------------------------------------------------------- aotpack-py

def task_aotpack_py(t: dict) -> dict:
    """The bundle through the binding on torch tensors (CUDA-graph replays)."""
    import torch

    import suite_measure as M
    from aotpack.runtime import Model, Session
    from timing import bench

    stage("load bundle")
    model = Model(t["bundle"])
    session = Session(model)
    try:
        ref = M.load_reference(t.get("ref_path"))
        infos = [{"shape": i.shape, "dtype": i.dtype} for i in model.inputs]
        if ref is not None and _same_signature(ref["inputs"], infos):
            inputs, notes = [x.cuda() for x in ref["inputs"]], []
        else:
            inputs = _random_like(torch, infos)
            ref, notes = None, ["outputs not compared: no eager reference with these inputs"]
        stage("first run")
        outs = session.run(inputs)
        torch.cuda.synchronize()
        res = {"notes": notes, **M.vs_reference(M.to_host(outs), ref)}
        stage("timing")
        res.update(bench(lambda: session.run(inputs, outs), reps=t["reps"],
                         flush_l2=t["flush_l2"]))
        return res
    finally:
        session.close()
        model.close()


def _random_like(torch, infos: list) -> list:
    from aotpack.dtypes import DType

    g = torch.Generator().manual_seed(1234)
    return [torch.randn(i["shape"], generator=g).to(DType(i["dtype"]).to_torch()).cuda()
            for i in infos]


# --------------------------------------------------------------------------- aotpack-cold

def task_aotpack_cold(t: dict) -> dict:
    """Process start → first output on the host through libaotpack with no torch in the
    process, and the device memory the model takes: cuMemGetInfo before load vs after load +
    first run (weights, arena, io, CUDA graph)."""
    from aotpack.runtime import Model, Session

    stage("driver")
    drv = Driver()
    free0 = drv.mem_free()
    stage("load bundle")
    t0 = time.perf_counter()
    model = Model(t["bundle"])
    session = Session(model)
    load_s = time.perf_counter() - t0
    ins = [drv.alloc(i.nbytes) for i in model.inputs]
    for p, i in zip(ins, model.inputs):
        drv.upload(p, finite_random_bytes(i.dtype, i.nbytes))
    outs = [drv.alloc(o.nbytes) for o in model.outputs]
    stage("first run")
    session.run_pointers(ins, outs, 0)
    drv.synchronize()
    host = [drv.download(p, o.nbytes) for p, o in zip(outs, model.outputs)]
    cold = since_process_start()
    return {"cold_start_s": cold, "load_s": round(load_s, 3),
            "output_bytes": sum(map(len, host)), "device_mem_bytes": free0 - drv.mem_free(),
            "torch_imported": "torch" in sys.modules}


class Driver:
    """The few CUDA driver calls the cold child needs, through ctypes (it must not import
    torch). The device's primary context is made current first: the runtime retains the same
    one, and cuMemGetInfo's baseline then excludes the context itself."""

    def __init__(self, device: int = 0):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
                    "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {rc} {(name.value or b'').decode()}")

    def mem_free(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
                    "cuMemGetInfo")
        return free.value

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1))),
                    "cuMemAlloc")
        return p.value

    def upload(self, ptr: int, data: bytes) -> None:
        self._check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), data,
                                             ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

    def download(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self._check(self.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes)),
                    "cuMemcpyDtoH")
        return buf.raw

    def synchronize(self) -> None:
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


# Masks that clear the top exponent bit of each element's high byte: random bytes become finite
# values of magnitude < 2 (no NaN/Inf), made at C speed with bytes.translate.
_HIGH_BYTE = {"bf16": (2, 1), "f16": (2, 1), "f32": (4, 3)}
_CLEAR_BIT6 = bytes(b & 0xBF for b in range(256))


def finite_random_bytes(dtype: str, nbytes: int) -> bytes:
    """Random input bytes for a tensor of manifest dtype `dtype` (bf16/f16/f32: finite values;
    other dtypes: zeros, which is safe for integer ids)."""
    if dtype not in _HIGH_BYTE:
        return bytes(nbytes)
    size, hi = _HIGH_BYTE[dtype]
    data = bytearray(os.urandom(nbytes))
    data[hi::size] = bytes(data[hi::size]).translate(_CLEAR_BIT6)
    return bytes(data)


TASKS = {"aotpack-run": task_aotpack_run, "aotpack-py": task_aotpack_py,
         "aotpack-cold": task_aotpack_cold}
