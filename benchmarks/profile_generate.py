"""Where a generation bundle's decode step spends its time: the step run through the Python
binding (a session keeps the KV cache), prefill of a prompt, then decode steps profiled with
torch.profiler (CUPTI sees the kernels of the replayed CUDA graph). Prints the kernels by total
GPU time per step and the step's wall time.

    python benchmarks/profile_generate.py .gpu/gen/llama32_1b/model.aotpack [--batch 1]
        [--prompt 128] [--steps 50] [--json out.json] [--no-pdl]

With programmatic dependent launch a kernel may start before the one ahead of it ends and then
wait: per-kernel times overlap, so compare the wall time per step.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch

    import aotpack
    from aotpack.generation.loop import prefill_inputs

    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--no-pdl", action="store_true",
                    help="launch every kernel after the previous one ends (A/B of PDL)")
    args = ap.parse_args()
    prompts = [[(13 * b + 7 * i + 1) % 1000 for i in range(args.prompt)]
               for b in range(args.batch)]
    with aotpack.load(args.bundle) as model, \
            model.session(programmatic_launch=not args.no_pdl) as s:
        ids, pos, last = (t.cuda() for t in prefill_inputs(prompts))
        next_ids, _ = s.run([ids, pos, last])
        ids = next_ids.view(-1, 1).clone()
        pos = torch.full((args.batch, 1), args.prompt, dtype=torch.int64, device="cuda")
        last = torch.arange(args.batch, device="cuda")
        outs = s.run([ids, pos, last])
        for _ in range(20):  # warm: the decode graph is captured on the first run
            s.run([ids, pos, last], outputs=outs)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            s.run([ids, pos, last], outputs=outs)
        torch.cuda.synchronize()
        step_ms = (time.perf_counter() - t0) * 1000 / args.steps
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                s.run([ids, pos, last], outputs=outs)
            torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0])
            r[0] += 1
            r[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    table = sorted(((name, n / args.steps, us / args.steps) for name, (n, us) in rows.items()),
                   key=lambda r: -r[2])
    total = sum(us for _, _, us in table)
    print(f"decode step: {step_ms:.3f} ms wall, {total / 1000:.3f} ms in kernels, "
          f"{sum(n for _, n, _ in table):.0f} launches (batch {args.batch}, "
          f"position {args.prompt})")
    for name, n, us in table[:25]:
        print(f"{us:9.1f} us  {n:5.1f}x  {name[:100]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"step_ms": step_ms, "kernels": table,
                                               "pdl": not args.no_pdl}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
