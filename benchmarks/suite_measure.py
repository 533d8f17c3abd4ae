"""Measurement helpers shared by the suite's workers (each worker is one fresh process).

Timing follows the method of `aotpack-run --bench` so that every row is measured the same way:
warm-up, then N forwards issued back to back with a CUDA event between consecutive ones; the
median of the N intervals is `median_ms`. A forward whose host side is slower than its GPU side
shows that cost too (the GPU waits between events). `sync_ms` is the median of forwards each
waited for (what a caller that needs the result at once sees). On a CPU (--smoke) the host
clock is used for both. `host_enqueue_ms` is the host time per forward of the back-to-back loop:
while it stays well under `median_ms` the GPU never waited for the host, which is what lets the
suite time CUDA-graph replays while CPU-only background jobs run.
"""
from __future__ import annotations

import statistics
import time

import torch


def load_on(spec: str, device: str, inputs_path: str | None = None):
    """(model, inputs) of a `file.py:fn` spec, on `device`, in eval mode. The inputs are those
    saved in inputs_path (the suite's reference inputs, see suite_worker.task_inputs) when it
    exists, else fresh random ones made the same way."""
    from aotpack.frontend import load_model

    model, example = load_model(spec)
    saved = load_inputs(inputs_path, device)
    return model.to(device).eval(), saved if saved is not None else random_inputs(example, device)


def load_inputs(path: str | None, device: str) -> list | None:
    """Tensors saved by task_inputs ({"inputs": [...]}) or with eager's reference, on device."""
    from pathlib import Path

    if not path or not Path(path).is_file():
        return None
    return [x.to(device) for x in torch.load(path)["inputs"]]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def random_inputs(example, device: str, seed: int = 1234) -> list:
    """Fresh random inputs shaped like the example: normal floats, integers in the example's
    range (token ids stay valid). Never zeros (METHOD.md: zeros hide bugs and time faster)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in example:
        if t.dtype.is_floating_point:
            x = torch.randn(t.shape, generator=g, dtype=torch.float32).to(t.dtype)
        else:
            x = torch.randint(0, int(t.max()) + 1, t.shape, generator=g, dtype=t.dtype)
        out.append(x.to(device))
    return out


def as_list(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in as_list(o)]
    return []


def to_host(out) -> list:
    """Outputs copied to the host: the moment a caller has its first output."""
    return [t.detach().to("cpu", copy=True) for t in as_list(out)]


def rel_err(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; inf when out has a non-finite element."""
    out, ref = out.detach().cpu().double(), ref.detach().cpu().double()
    if out.shape != ref.shape:
        return float("nan")
    if not bool(out.isfinite().all()):
        return float("inf")
    den = float(ref.norm())
    return float((out - ref).norm() / den) if den else float((out - ref).norm())


def max_rel_err(outs, refs) -> float | None:
    errs = [rel_err(o, r) for o, r in zip(outs, refs)]
    return max(errs) if errs else None


def time_forward(fn, device: str, warmup: int = 10, reps: int = 100) -> dict:
    """median/p10/p90 (back to back, CUDA events) and sync_ms (each forward waited for)."""
    for _ in range(warmup):
        fn()
    sync(device)
    host_ms = None
    if device == "cuda":
        piped, host_ms = back_to_back(fn, reps)
    else:
        piped = _host_times(fn, reps, device)
    synced = _host_times(fn, max(10, reps // 4), device)
    q = statistics.quantiles(piped, n=10) if len(piped) >= 10 else [min(piped)] * 9
    return {"median_ms": round(statistics.median(piped), 5), "p10_ms": round(q[0], 5),
            "p90_ms": round(q[-1], 5), "sync_ms": round(statistics.median(synced), 5),
            "host_enqueue_ms": host_ms, "reps": reps, "warmup": warmup}


def back_to_back(fn, reps: int) -> tuple[list[float], float]:
    """CUDA-event intervals of reps forwards, and the host's enqueue time per forward."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    events[0].record()
    t0 = time.perf_counter()
    for i in range(reps):
        fn()
        events[i + 1].record()
    host_ms = (time.perf_counter() - t0) * 1e3 / reps
    events[-1].synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(reps)], round(host_ms, 5)


def gpu_bound(timing: dict, share: float = 0.5) -> bool | None:
    """Whether the host enqueued forwards in well under the GPU's time per forward (so a slower
    host, e.g. CPU contention, could not have changed the intervals); None when unknown."""
    host, gpu = timing.get("host_enqueue_ms"), timing.get("median_ms")
    if host is None or not gpu:
        return None
    return host < share * gpu


def _host_times(fn, reps: int, device: str) -> list[float]:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return times


def count_launches(fn, device: str) -> dict:
    """Kernels one forward launches, from torch.profiler's CUDA activity (CUPTI): kernel events,
    copies and memsets left out. Kernels replayed inside a CUDA graph are counted one by one."""
    if device != "cuda":
        return {"launches": None, "launches_method": "not measured on CPU"}
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if not n.startswith(("Memcpy", "Memset"))]
    graph_launches = sum(1 for e in prof.events() if e.name == "cudaGraphLaunch")
    return {"launches": len(kernels), "graph_launches": graph_launches,
            "launches_method": "torch.profiler CUDA kernel events of one forward"}


class DeviceMemory:
    """Device-wide used memory since this object was made (after the CUDA context exists):
    the same measure the aotpack rows get from cuMemGetInfo in their own fresh process."""

    def __init__(self, device: str):
        self.device = device
        self.free0 = torch.cuda.mem_get_info()[0] if device == "cuda" else None
        self.peak_delta = 0

    def sample(self) -> None:
        if self.device == "cuda":
            self.peak_delta = max(self.peak_delta, self.free0 - torch.cuda.mem_get_info()[0])

    def reset(self) -> None:
        """A new variant in the same process: its own peak (the baseline stays the context's,
        so weights and inputs, resident all along, are counted as in a fresh process)."""
        self.peak_delta = 0

    def fields(self) -> dict:
        return {"device_mem_bytes": self.peak_delta if self.device == "cuda" else None}


def allocator_peak(fn, device: str) -> dict:
    """Peak of torch's caching allocator over one steady-state forward (weights, inputs,
    activations and outputs are all in it)."""
    if device != "cuda":
        return {"peak_mem_bytes": None, "peak_mem_method": "not measured on CPU"}
    sync(device)
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync(device)
    return {"peak_mem_bytes": int(torch.cuda.max_memory_allocated()),
            "peak_mem_method": "torch.cuda.max_memory_allocated over one steady-state forward "
                               "(context, library workspaces outside the allocator not included)"}


def steady_state(fn, device: str, reps: int, stage=lambda name: None) -> dict:
    """Median latency, kernel launches and allocator peak of `fn` (one forward); `stage` names
    each step in the crash log."""
    stage("timing")
    res = time_forward(fn, device, reps=reps)
    stage("launches")
    res.update(count_launches(fn, device))
    stage("allocator peak")
    res.update(allocator_peak(fn, device))
    return res


def model_costs(model, inputs, outputs) -> dict:
    """FLOPs of one forward (torch.utils.flop_counter, on the forward just run) and the fewest
    bytes it must move (every parameter and buffer read once, inputs read, outputs written)."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    sdpa = F.scaled_dot_product_attention
    # The counter's sdpa formula asserts q, k, v have the same head count: GQA (enable_gqa)
    # failed it on the H200 (llama block). Count GQA as the expanded MHA it computes.
    F.scaled_dot_product_attention = _sdpa_gqa_expanded(sdpa)
    try:
        with counter:
            model(*inputs)
        flops = int(counter.get_total_flops())
    except Exception as e:  # a formula that fails must not lose the row: no FLOP figure then
        flops, why = None, f"{type(e).__name__}: {e}"
    else:
        why = None
    finally:
        F.scaled_dot_product_attention = sdpa
    weights = sum(t.numel() * t.element_size()
                  for t in list(model.parameters()) + list(model.buffers()))
    io = sum(t.numel() * t.element_size() for t in list(inputs) + as_list(outputs))
    return {"flops": flops, "flops_error": why, "bytes": int(weights + io),
            "weight_bytes": int(weights),
            "flops_method": "torch.utils.flop_counter.FlopCounterMode on one eager forward "
                            "(matmuls and attention; causal attention counted in full)",
            "bytes_method": "parameters + buffers + inputs + outputs, each moved once"}


def _sdpa_gqa_expanded(sdpa):
    def call(q, k, v, *args, enable_gqa=False, **kw):
        if enable_gqa and k.shape[-3] != q.shape[-3]:
            rep = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
        return sdpa(q, k, v, *args, **kw)

    return call


def save(obj, path: str) -> None:
    """torch.save to a temporary name, then renamed: another process reading the file (the
    suite's background jobs write while the window runs) never sees half of it."""
    import os

    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_outputs(path: str, outputs: list) -> None:
    """Host outputs of a row measured before eager ran, for eager to compare later."""
    save({"outputs": [t.cpu() for t in outputs]}, path)


def compare_saved(paths: dict, ref: list) -> dict:
    """{key: ‖out − ref‖/‖ref‖} of each saved outputs file (None: no such file)."""
    from pathlib import Path

    out = {}
    for key, path in paths.items():
        if Path(path).is_file():
            out[key] = max_rel_err(torch.load(path)["outputs"], ref)
        else:
            out[key] = None
    return out
