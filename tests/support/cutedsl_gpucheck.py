"""Correctness and speed of the CuTeDSL GEMM cubins on the GPU machine, launched the way the
runtime does it: driver only (ctypes on libcuda.so.1), every parameter from aotpack's slots,
tensor maps from cuTensorMapEncodeTiled. CuTeDSL is NOT needed on the GPU machine.

    # from the repository root. Build host (no GPU, nvidia-cutlass-dsl installed): compile
    python -m tests.support.cutedsl_gpucheck write .gpu/cutedsl_cases.pkl
    # GPU machine (torch with CUDA): run them (never past ~200 s, see RUN_BUDGET_S; the last
    # line is the summary `cutedsl: N ok, M failed`; scripts/gpu-check cutedsl does this)
    timeout 300 python -m tests.support.cutedsl_gpucheck run .gpu/cutedsl_cases.pkl

Every epilogue is checked against torch on random inputs, with M, N, K that are not multiples
of the tile; a few large shapes are also timed (CUDA events, median of 20). Each kernel config
runs in its own child process with a time limit: a kernel that hangs (e.g. a cluster pipeline
deadlock) is killed and reported as `timeout` for its cases, and the other configs still run.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import pickle
import subprocess
import sys
import time

from aotpack.dtypes import DType
from aotpack.passes.fuse_swiglu import GROUP
from aotpack.kernels.cutedsl.slots import pack
from aotpack.kernels.spec import (
    Act, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, FastDivmodSlot, GemmOp, IntSlot,
    NullSlot, PtrSlot, TensorMapSlot, contiguous,
)

# The last shape gives every config more tiles than CTAs (each CTA runs several tiles) with
# k_tiles = 9, not a multiple of 2 * ab_stage: the case that hung on the H200 (2026-11-30, the
# consumer's pipeline state restarted on every tile; see checks.py). 1000x3000 is multi-tile
# for every config but the default 128x256 (96 tiles).
CHECK_SHAPES = [(1000, 3000, 520), (77, 264, 136), (8, 1032, 72), (256, 512, 4096),
                (2000, 3000, 520)]
# Timed shapes: all of them for the main config, the first one for the others.
PERF_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096)]
GROUP_TIMEOUT_S = 45  # one tile/cluster config's cases, child start-up (torch, CUDA) included
PROBE_TIMEOUT_S = 20  # its probe case alone
# The run never starts a group that could end (hang until its limit) past this many seconds;
# those are reported as skipped, so a run where every config hangs still ends in time.
# GPUCHECK_BUDGET_S overrides.
RUN_BUDGET_S = 200
# Probe of every config but the main one, run first in its own child: tile-multiple sizes (no
# TMA box out of bounds, not even partly), no epilogue, but several tiles per CTA (256 tiles of
# 64x256 / 128x128 > 132 CTAs) and k_tiles = 9 (not a multiple of 2 * ab_stage for any
# ab_stage): the multi-tile pipeline-state path that hung. If the probe passes and the ragged
# cases hang, out-of-bounds boxes are the suspect; if the probe hangs, the main loop / cluster
# pipeline is, and the rest of that config is skipped.
PROBE_SHAPE = (1024, 4096, 576)
EPILOGUES = [(), ("bias",), ("gelu_tanh",), ("gelu_erf",), ("silu",), ("relu",), ("add",),
             ("mul",), ("silu", "mul"), ("scale",), ("scale_n", "silu"),
             ("bias", "gelu_tanh", "add")]
# SwiGLU (B = 2N interleaved gate/up rows, group 64) needs N a multiple of 64: its own shapes,
# ragged in M and K, and in N for the 256 tile (320 outputs = 640 accumulator columns = 2.5
# tiles: the last one holds one real and one zero-filled pair)
SWIGLU_EPILOGUES = [("swiglu",), ("swiglu", "scale_n", "add")]
SWIGLU_SHAPES = [(1000, 3008, 520), (77, 320, 136), (8, 1088, 72), (2000, 3008, 520)]
SWIGLU_GROUP = GROUP  # as the passes fuse it
TILES = [(128, 256, 1, 1, True), (128, 128, 1, 1, True), (64, 128, 1, 1, True),
         (128, 128, 2, 1, True), (128, 128, 1, 2, False), (64, 256, 1, 2, True),
         # decode-sized M (tuning/space.py): narrow tiles, and 224 = 14336 / 64
         (64, 64, 1, 1, True), (128, 64, 2, 1, True), (64, 224, 1, 1, True),
         (128, 224, 1, 2, True), (64, 192, 2, 1, True)]


def make_op(m, n, k, steps=(), out=DType.BF16) -> GemmOp:
    """A GemmOp over storages x, w, y (+ bias, res, up, scale, scale_n) with epilogue steps by
    name; "swiglu" (first) makes w [2n, k] with EpSwiGLU(SWIGLU_GROUP)."""
    epi = []
    for s in steps:
        if s == "swiglu":
            epi.append(EpSwiGLU(SWIGLU_GROUP))
        elif s in ("scale", "scale_n"):
            epi.append(EpScale(contiguous(s, DType.F32, (1,) if s == "scale" else (n,))))
        elif s == "bias":
            epi.append(EpBias(contiguous("bias", out, (n,))))
        elif s == "add":
            epi.append(EpAdd(contiguous("res", out, (m, n))))
        elif s == "mul":
            epi.append(EpMul(contiguous("up", out, (m, n))))
        else:
            epi.append(EpAct(Act(s)))
    n_b = 2 * n if "swiglu" in steps else n
    return GemmOp(contiguous("x", DType.BF16, (m, k)), contiguous("w", DType.BF16, (n_b, k)),
                  contiguous("y", out, (m, n)), tuple(epi))


# ----------------------------------------------------------------------------- build host
def write_cases(path: str) -> None:
    from aotpack.kernels.cutedsl import build

    build.import_cutlass()
    from aotpack.kernels.cutedsl import compile as cc

    cases = []
    for tm, tn, cm, cn, ram in TILES:
        if (tm, tn, cm, cn) != (128, 256, 1, 1):
            probe = _case(cc, "check", PROBE_SHAPE, (), tm, tn, cm, cn, ram)
            cases.append({**probe, "probe": True})
        main = (tm, tn, cm, cn) == (128, 256, 1, 1)
        for steps in EPILOGUES if main else EPILOGUES[-3:]:
            for shape in CHECK_SHAPES:
                cases.append(_case(cc, "check", shape, steps, tm, tn, cm, cn, ram))
        for steps in (SWIGLU_EPILOGUES if main else SWIGLU_EPILOGUES[-1:]) \
                if tn % (2 * SWIGLU_GROUP) == 0 else ():  # a tile holds whole gate/up pairs
            for shape in SWIGLU_SHAPES if main else SWIGLU_SHAPES[::3]:
                cases.append(_case(cc, "check", shape, steps, tm, tn, cm, cn, ram))
        for shape in PERF_SHAPES if (tm, tn, cm, cn) == (128, 256, 1, 1) else PERF_SHAPES[:1]:
            cases.append(_case(cc, "perf", shape, ("bias", "silu"), tm, tn, cm, cn, ram))
        if main:  # epilogue cost: the same GEMM without one; a Llama-3-8B gate/up SwiGLU
            cases.append(_case(cc, "perf", PERF_SHAPES[0], (), tm, tn, cm, cn, ram))
            cases.append(_case(cc, "perf", PERF_SHAPES[2], ("swiglu",), tm, tn, cm, cn, ram))
    for out in (DType.F32, DType.F16):  # output casts (operands have the output dtype)
        for shape in CHECK_SHAPES[:2]:
            cases.append(_case(cc, "check", shape, ("bias", "add"), 128, 128, 1, 1, True, out))
        cases.append(_case(cc, "check", SWIGLU_SHAPES[1], ("swiglu", "scale"), 128, 128, 1, 1,
                           True, out))
    with open(path, "wb") as f:
        pickle.dump(cases, f)
    print(f"wrote {len(cases)} cases to {path}")


def _case(cc, kind, shape, steps, tm, tn, cm, cn, ram, out=DType.BF16) -> dict:
    op = make_op(*shape, steps, out)
    cfg = cc.default_config(op, tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn,
                            raster_along_m=ram)
    (launch,) = cc.compile(op, cfg=cfg)
    k = launch.kernel
    _refuse_restarting_pipeline(cc, cfg)
    return {"kind": kind, "shape": shape, "steps": steps, "config": k.config, "out": out.value,
            "entry": k.entry, "cubin": k.cubin, "block": k.block, "cluster": k.cluster,
            "smem": k.smem, "grid": launch.grid, "args": launch.args}


@functools.lru_cache(maxsize=None)
def _refuse_restarting_pipeline(cc, cfg) -> None:
    """Refuse to ship a cubin with the pipeline-state bug (cutedsl_checks.py) to the GPU
    machine; its PTX is scanned once per config (the shapes of one config share the cubin)."""
    from .cutedsl_checks import constant_wait_parity

    built = cc._built(cfg, "bf16", cc.max_clusters(cfg, cc.SM90))
    bad = constant_wait_parity(built.ptx)
    if bad:
        raise RuntimeError(f"{cfg}: pipeline state restarts on every tile: {bad}")


# ----------------------------------------------------------------------------- GPU machine
class _Driver:
    """The few driver calls the runtime makes, through ctypes."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.modules = {}

    def check(self, rc, what):
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what}: {name.value.decode() if name.value else rc}")

    def function(self, case):
        key = (case["entry"], hash(case["cubin"]))
        if key not in self.modules:
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), case["cubin"]),
                       "cuModuleLoadData")
            self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, case["entry"].encode()),
                       "cuModuleGetFunction")
            self.check(self.lib.cuFuncSetAttribute(fn, 8, case["smem"]), "cuFuncSetAttribute")
            self.modules[key] = fn
        return self.modules[key]

    def tensormap(self, s: TensorMapSlot, address: int) -> bytes:
        buf = (ctypes.c_uint8 * 192)()
        at = ctypes.addressof(buf) + (-ctypes.addressof(buf) % 64)
        rank = len(s.dims)
        dims = (ctypes.c_uint64 * rank)(*reversed(s.dims))
        strides = (ctypes.c_uint64 * rank)(*[st * s.dtype.nbytes for st in reversed(s.strides)][1:])
        box = (ctypes.c_uint32 * rank)(*reversed(s.box))
        ones = (ctypes.c_uint32 * rank)(*([1] * rank))
        dt = {DType.BF16: 9, DType.F16: 6, DType.F32: 7}[s.dtype]
        swz = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[s.swizzle]
        l2 = {"none": 0, "64B": 1, "128B": 2, "256B": 3}[s.l2]
        oob = {"zero": 0, "nan": 1}[s.oob]
        self.check(self.lib.cuTensorMapEncodeTiled(
            ctypes.c_void_p(at), dt, rank, ctypes.c_void_p(address), dims, strides, box, ones,
            0, swz, l2, oob), "cuTensorMapEncodeTiled")
        return ctypes.string_at(at, 128)

    def launch(self, case, params: list[bytes], stream: int = 0) -> None:
        self.prepare(case, params, stream)()

    def prepare(self, case, params: list[bytes], stream: int = 0):
        """A no-argument function that launches the case: every ctypes object built once, so
        a timed loop measures the kernel and not Python (building them takes tens of us)."""
        bufs = [ctypes.create_string_buffer(p, len(p)) for p in params]
        argv = (ctypes.c_void_p * len(bufs))(*[ctypes.addressof(b) for b in bufs])
        attr = (ctypes.c_uint8 * 72)()
        ctypes.memmove(attr, (ctypes.c_int * 1)(4), 4)  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint * 3)(*case["cluster"]), 12)
        cfg = _LaunchConfig((ctypes.c_uint * 3)(*case["grid"]), (ctypes.c_uint * 3)(*case["block"]),
                            case["smem"], stream, ctypes.addressof(attr), 1)
        fn = self.function(case)
        launch = self.lib.cuLaunchKernelEx

        def go():
            rc = launch(ctypes.byref(cfg), fn, argv, None)
            if rc:
                self.check(rc, "cuLaunchKernelEx")

        go.keep = (bufs, argv, attr, cfg)  # alive as long as the function
        return go


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


def _tensors(case, torch, seed=0):
    m, n, k = case["shape"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    od = DType(case.get("out", "bf16")).to_torch()

    def r(*shape, dt=torch.bfloat16):
        return torch.randn(*shape, device="cuda", generator=g).to(dt)

    n_b = 2 * n if "swiglu" in case["steps"] else n
    scales = {"scale": r(1, dt=torch.float32).abs() + 0.5,
              "scale_n": r(n, dt=torch.float32).abs() + 0.5}
    return {"x": r(m, k), "w": r(n_b, k) * k ** -0.5,
            "y": torch.empty(m, n, device="cuda", dtype=od),
            "bias": r(n, dt=od), "res": r(m, n, dt=od), "up": r(m, n, dt=od), **scales}


def _params(drv, case, t) -> list[bytes]:
    out = []
    for s in case["args"]:
        if isinstance(s, PtrSlot):
            out.append((t[s.storage].data_ptr() + s.offset).to_bytes(8, "little"))
        elif isinstance(s, NullSlot):
            out.append(bytes(8))
        elif isinstance(s, TensorMapSlot):
            out.append(drv.tensormap(s, t[s.storage].data_ptr() + s.offset))
        elif isinstance(s, (IntSlot, FastDivmodSlot)):
            out.append(pack(s))
        else:
            raise TypeError(f"unexpected slot {s!r}")
    return out


def _reference(case, t, torch):
    from aotpack.kernels.reference.gemm import apply_act, swiglu

    acc = t["x"].float() @ t["w"].float().t()
    for s in case["steps"]:
        if s == "swiglu":  # interleaved [gate block | up block] pairs (spec.EpSwiGLU)
            acc = swiglu(acc, SWIGLU_GROUP)
        elif s in ("scale", "scale_n"):
            acc = acc * t[s]
        elif s == "bias":
            acc = acc + t["bias"].float()
        elif s == "add":
            acc = acc + t["res"].float()
        elif s == "mul":
            acc = acc * t["up"].float()
        else:
            acc = apply_act(acc, Act(s))
    return acc


def run_cases(path: str) -> int:
    """Parent: runs each config's cases in a child process (no torch or CUDA here), prints
    every case's JSON line as it comes back, then the summary line."""
    with open(path, "rb") as f:
        cases = pickle.load(f)
    results, hung = [], set()
    budget = float(os.environ.get("GPUCHECK_BUDGET_S", RUN_BUDGET_S))
    t0 = time.time()
    for key, idx in _groups(cases):
        if key[:4] in hung:  # its probe hung: these would too, and each hang costs time
            results += _report(cases, idx, {}, "skipped: this config's probe case hung")
            continue
        limit = PROBE_TIMEOUT_S if key[4] else GROUP_TIMEOUT_S
        if time.time() - t0 + limit > budget:  # it could hang past the budget: do not start it
            results += _report(cases, idx, {}, f"skipped: run budget of {budget:.0f} s")
            continue
        res = _run_group_child(path, cases, idx, limit)
        if key[4] and any(r.get("error", "").startswith("timeout") for r in res):
            hung.add(key[:4])
        results += res
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "cutedsl_gemm.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    bad = sum(1 for r in results if "error" in r or not r.get("ok", False))
    print(f"cutedsl: {len(results) - bad} ok, {bad} failed", flush=True)
    return 1 if bad else 0


def _groups(cases) -> list[tuple[tuple, list[int]]]:
    """(key, case indices) per tile/cluster config and probe flag: single-CTA clusters first,
    a config's probe before its other cases (a hang costs only its own group; one child per
    group keeps the child start-ups few)."""
    groups: dict = {}
    for i, c in enumerate(cases):
        cfg = c["config"]
        key = (*(cfg[k] for k in ("tile_m", "tile_n", "cluster_m", "cluster_n")),
               bool(c.get("probe")))
        groups.setdefault(key, []).append(i)
    # stable sort: within each half, the configs stay in the order of their first case
    order = sorted(groups, key=lambda k: cases[groups[k][0]]["cluster"] != (1, 1, 1))
    return [(k, groups[k]) for k in order]


def _summary(case) -> dict:
    return {k: case.get(k) for k in ("kind", "shape", "steps", "out", "config", "grid", "probe")
            if k != "probe" or case.get(k)}


def _run_group_child(path, cases, idx, timeout_s) -> list[dict]:
    cmd = [sys.executable, "-m", __spec__.name, "run-group", path, ",".join(map(str, idx))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        out, why = proc.stdout, f"child exited with {proc.returncode}: {proc.stderr[-300:]}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        why = None
    done = {}
    for line in out.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
            done[res.pop("index")] = res
    if why is None:  # the first case without a result is the one that hung; the rest never ran
        pending = [i for i in idx if i not in done]
        if pending:
            done[pending[0]] = {**_summary(cases[pending[0]]),
                                "error": f"timeout: this case hung (group killed after "
                                         f"{timeout_s} s)"}
        why = f"not run: the group was killed after case {pending[0] if pending else '?'} hung"
    return _report(cases, idx, done, why)


def _report(cases, idx, done: dict, why: str) -> list[dict]:
    """Prints and returns each case's result; cases not in `done` get the reason `why`."""
    results = []
    for i in idx:
        res = done.get(i) or {**_summary(cases[i]), "error": why}
        print(json.dumps(res, default=str), flush=True)
        results.append(res)
    return results


def run_group(path: str, indices: str) -> int:
    """Child: runs the given cases on the GPU, one JSON line each, flushed as it goes."""
    import torch

    torch.zeros(1, device="cuda")  # makes the primary context current for the driver calls
    with open(path, "rb") as f:
        cases = pickle.load(f)
    drv = _Driver()
    for i in map(int, indices.split(",")):
        res = {"index": i, **_summary(cases[i])}
        t0 = time.time()
        try:
            res.update(_run_one(drv, cases[i], torch))
            res["s"] = round(time.time() - t0, 3)
        except Exception as e:  # keep going: report every case
            res["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(res, default=str), flush=True)
    return 0


def _run_one(drv, case, torch) -> dict:
    t = _tensors(case, torch)
    params = _params(drv, case, t)
    drv.launch(case, params)
    torch.cuda.synchronize()
    ref = _reference(case, t, torch)
    err = ((t["y"].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    out = {"rel_err": err, "ok": err < 2e-2}
    if case["kind"] == "perf":
        out.update(_time(drv, case, params, torch))
    return out


def _time(drv, case, params, torch, reps=20) -> dict:
    """TFLOP/s two ways. `tflops`: `reps` back-to-back launches between two events, queued
    behind a spin kernel so that the GPU never waits for the host (kernel time only; inputs stay
    in L2 between launches as far as they fit). `tflops_single`: the first H200 runs' method,
    events around each single launch, median -- it also counts the host's launch latency (the
    stream is idle when the first event fires), ~70 us: it made 4096^3 read 519 TFLOP/s."""
    m, n, k = case["shape"]
    flop = 2 * m * n * k * (2 if "swiglu" in case["steps"] else 1)  # B has 2n rows
    stream = torch.cuda.current_stream().cuda_stream
    go = drv.prepare(case, params, stream)
    for _ in range(3):
        go()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(20_000_000)  # ~10 ms of spinning: every launch below is queued before `a` fires
    a.record()
    for _ in range(reps):
        go()
    b.record()
    b.synchronize()
    batched = a.elapsed_time(b) / reps
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        drv.launch(case, params, stream)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    single = times[len(times) // 2]
    return {"tflops": flop / (batched * 1e-3) / 1e12, "us": round(batched * 1e3, 1),
            "tflops_single": flop / (single * 1e-3) / 1e12}


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("write", "run", "run-group"):
        sys.exit(__doc__)
    t0 = time.time()
    if sys.argv[1] == "write":
        write_cases(sys.argv[2])
        print(f"{time.time() - t0:.1f}s")
        sys.exit(0)
    if sys.argv[1] == "run-group":
        sys.exit(run_group(sys.argv[2], sys.argv[3]))
    print(f"# gpucheck: started {time.strftime('%H:%M:%S')}", flush=True)
    sys.exit(run_cases(sys.argv[2]))  # its last line is the summary
