"""The benchmarks' one timing helper, in the style of triton.testing.do_bench: warm-up, then
`reps` calls each between two CUDA events, optionally after an L2 flush, and the median with
the 10th and 90th percentiles (torch.quantile, as do_bench does).

Unlike do_bench it counts repetitions instead of milliseconds (every row of a table gets the
same count) and the flush is optional: without it the events of consecutive calls touch, so
the intervals are those of calls issued back to back, the method of `aotpack-run --bench` (a
call whose host side is slower than its GPU work shows that cost). sync_each waits for every
call before the next (the GPU idles in between, so each interval also holds the launch of the
call's first kernel): the method of compare.py and the GEMM sweeps, kept so that their numbers
stay comparable with the ones they recorded. A CPU device times each call on the host clock
(the suite's --smoke runs).
"""
from __future__ import annotations

import time

L2_FLUSH_BYTES = 256 << 20  # larger than any Hopper L2 (H200: 60 MiB)


def bench(fn, *, reps: int = 100, warmup: int = 10, flush_l2: bool = False,
          sync_each: bool = False, device: str = "cuda") -> dict:
    """{median_ms, p10_ms, p90_ms, min_ms, reps, warmup, flush_l2} of `fn()`."""
    import torch

    for _ in range(warmup):
        fn()
    times = _cuda_times(torch, fn, reps, flush_l2, sync_each) if device == "cuda" \
        else _host_times(fn, reps)
    return summary(times, reps=reps, warmup=warmup, flush_l2=flush_l2)


def summary(times_ms: list[float], **facts) -> dict:
    import torch

    t = torch.tensor(times_ms, dtype=torch.float64)
    med, p10, p90 = t.quantile(torch.tensor([0.5, 0.1, 0.9], dtype=torch.float64)).tolist()
    return {"median_ms": round(med, 5), "p10_ms": round(p10, 5), "p90_ms": round(p90, 5),
            "min_ms": round(float(t.min()), 5), **facts}


def _cuda_times(torch, fn, reps: int, flush_l2: bool, sync_each: bool) -> list[float]:
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if flush_l2 \
        else None
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        if flush is not None:
            flush.zero_()  # outside the events: only fn is timed
        start[i].record()
        fn()
        end[i].record()
        if sync_each:
            end[i].synchronize()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(start, end)]


def _host_times(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times
