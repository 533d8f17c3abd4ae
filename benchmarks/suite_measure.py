"""What the suite's child processes share: progress lines, the cold-start clock, inputs, errors
against eager, kernel launches, memory and FLOPs. torch is imported inside the functions that
need it: the binding's cold-start child (suite_aotpack.task_aotpack_cold) imports this module
and must stay free of torch.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SEED = 1234  # every child draws the same inputs for a model


def stage(msg: str) -> None:
    """A progress line in the child's log, with the seconds since its spawn: after a crash the
    last one says which step died."""
    t = since_process_start()
    print(f"stage: {msg}" + (f"  [{t:.1f} s]" if t is not None else ""), file=sys.stderr,
          flush=True)


def since_process_start() -> float | None:
    """Seconds since the suite spawned this process (SUITE_T0, taken just before the spawn):
    cold starts include interpreter start-up and imports."""
    t0 = os.environ.get("SUITE_T0")
    return round(time.time() - float(t0), 3) if t0 else None


def one_line(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"


# ------------------------------------------------------------------------------- models, io

def load_on(spec: str, device: str):
    """(model, inputs) of a `file.py:fn` spec on `device`, eval mode, seeded random inputs."""
    from aotpack.frontend import load_model

    model, example = load_model(spec)
    return model.to(device).eval(), random_inputs(example, device)


def random_inputs(example, device: str, seed: int = SEED) -> list:
    """Fresh random inputs shaped like the example: normal floats, integers in the example's
    range (token ids stay valid). Never zeros: zeros hide bugs and time faster."""
    import torch

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
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in as_list(o)]
    return []


def to_host(out) -> list:
    """Outputs copied to the host: the moment a caller has its first output."""
    return [t.detach().to("cpu", copy=True) for t in as_list(out)]


def save_reference(path: str, inputs: list, outputs: list) -> None:
    """Eager's inputs and host outputs, for the rows measured after it (renamed into place:
    a reader never sees half a file)."""
    import torch

    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"inputs": [x.cpu() for x in inputs], "outputs": outputs}, tmp)
    os.replace(tmp, path)


def load_reference(path: str | None) -> dict | None:
    import torch

    return torch.load(path) if path and Path(path).is_file() else None


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


def vs_reference(outs: list, ref: dict | None) -> dict:
    """rel_err_vs_eager of host outputs when eager's reference exists (None otherwise)."""
    return {"rel_err_vs_eager": max_rel_err(outs, ref["outputs"]) if ref else None}


# ---------------------------------------------------------------------------- measurements

def steady_state(fn, device: str, reps: int, flush_l2: bool = False) -> dict:
    """Latency (timing.bench), kernel launches and allocator peak of one forward `fn`."""
    from timing import bench

    stage("timing")
    res = bench(fn, reps=reps, device=device, flush_l2=flush_l2)
    stage("launches")
    res.update(count_launches(fn, device))
    stage("allocator peak")
    res.update(allocator_peak(fn, device))
    return res


def count_launches(fn, device: str) -> dict:
    """Kernels one forward launches, from torch.profiler's CUDA activity (CUPTI): kernel events,
    copies and memsets left out. Kernels replayed inside a CUDA graph are counted one by one."""
    if device != "cuda":
        return {"launches": None, "launches_method": "not measured on CPU"}
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if not n.startswith(("Memcpy", "Memset"))]
    graph_launches = sum(1 for e in prof.events() if e.name == "cudaGraphLaunch")
    return {"launches": len(kernels), "graph_launches": graph_launches,
            "launches_method": "torch.profiler CUDA kernel events of one forward"}


def allocator_peak(fn, device: str) -> dict:
    """Peak of torch's caching allocator over one steady-state forward."""
    if device != "cuda":
        return {"peak_mem_bytes": None, "peak_mem_method": "not measured on CPU"}
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return {"peak_mem_bytes": int(torch.cuda.max_memory_allocated()),
            "peak_mem_method": "torch.cuda.max_memory_allocated over one steady-state forward "
                               "(context, library workspaces outside the allocator not included)"}


class DeviceMemory:
    """Device-wide used memory (cuMemGetInfo) above what it was when this object was made,
    right after the CUDA context: the measure every row gets in its own fresh process."""

    def __init__(self, device: str):
        import torch

        self.cuda = device == "cuda"
        self.free0 = torch.cuda.mem_get_info()[0] if self.cuda else None
        self.peak = 0

    def sample(self) -> None:
        if self.cuda:
            import torch

            self.peak = max(self.peak, self.free0 - torch.cuda.mem_get_info()[0])

    def fields(self) -> dict:
        return {"device_mem_bytes": self.peak if self.cuda else None}


def model_costs(model, inputs, outputs) -> dict:
    """FLOPs of one forward (torch.utils.flop_counter) and the fewest bytes it must move
    (every parameter and buffer read once, inputs read, outputs written)."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    sdpa = F.scaled_dot_product_attention
    # The counter's sdpa formula asserts q, k, v have the same head count: GQA (enable_gqa)
    # failed it on the H200 (llama block). Count GQA as the expanded MHA it computes.
    F.scaled_dot_product_attention = _sdpa_gqa_expanded(sdpa)
    flops, why = None, None
    try:
        with counter:
            model(*inputs)
        flops = int(counter.get_total_flops())
    except Exception as e:  # a formula that fails must not lose the row: no FLOP figure then
        why = one_line(e)
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
