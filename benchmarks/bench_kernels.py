"""Benchmark the attention / RMSNorm / RoPE / pointwise templates on a GPU (Llama-3-8B prefill).

Runs the SAME @triton.jit kernels and the SAME argument plans that aotpack cross-compiles into
bundles, launched through Triton's normal JIT, next to the torch equivalents:
  attention  B=1, Hq=32, Hkv=8, S=2048, D=128, causal (sweep of the candidate configs: pointer
             loads and TMA descriptors) and full; q/k/v are views of one fused QKV
             projection [1, 2048, 48*128] (no transpose copies)
                                                             | F.scaled_dot_product_attention
  rmsnorm    2048 x 4096 with weight                         | F.rms_norm
  rope       q [1,32,2048,128] and k [1,8,2048,128] views of the QKV projection -> contiguous
                                                             | eager x*cos + rotate_half(x)*sin
  swiglu     silu(gate) * up, 2048 x 14336 (pointwise codegen) | eager F.silu(g) * u
Correctness: relative error vs aotpack's torch references (f32). Timing: triton.testing.do_bench
median (L2 flushed between reps). Floors: 790 TFLOP/s bf16 dense, 4.26 TB/s copy bandwidth.

    python benchmarks/bench_kernels.py          # from the repo root; writes $OUT/kernels_bench.json
No aotpack install needed (the repo root is put on sys.path). Each case is guarded; < 3 minutes.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels import run_reference  # noqa: E402
from aotpack.kernels.reference import view  # noqa: E402
from aotpack.kernels.spec import (  # noqa: E402
    AttentionOp, PointwiseOp, PwExpr, PwInput, RMSNormOp, RopeOp, TensorArg, contiguous,
)
from aotpack.kernels.triton import attention, pointwise, rmsnorm, rope  # noqa: E402
from aotpack.kernels.triton._common import jit_launcher  # noqa: E402

PEAK_TFLOPS = 790.0
PEAK_GBS = 4260.0
TIME_BUDGET_S = 150.0
DEVICE = "cuda"
BF16 = DType.BF16
B, HQ, HKV, S, D, HIDDEN, FFN = 1, 32, 8, 2048, 128, 4096, 14336
QKV_ROW = (HQ + 2 * HKV) * D


def qkv_views():
    strides = (S * QKV_ROW, D, QKV_ROW, 1)
    q = TensorArg("qkv", BF16, (B, HQ, S, D), strides)
    k = TensorArg("qkv", BF16, (B, HKV, S, D), strides, HQ * D)
    v = TensorArg("qkv", BF16, (B, HKV, S, D), strides, (HQ + HKV) * D)
    return q, k, v


def bench(fn) -> float:
    """Median milliseconds."""
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def rel_err(got, ref) -> float:
    return ((got.float() - ref.float()).norm() / ref.float().norm()).item()


def reference_output(op, env):
    """The f32 torch reference, run on CPU copies (device independent, and the host has the
    memory for the full attention matrix)."""
    ref_env = {name: t.cpu() for name, t in env.items()}
    run_reference(op, ref_env)
    return view(ref_env, op.out).float()


def checked(op, env, run_ours, ref=None):
    """Run ours on a NaN-poisoned output; relative error against the reference."""
    ref = reference_output(op, env) if ref is None else ref
    env[op.out.storage].fill_(float("nan"))
    run_ours()
    return rel_err(view(env, op.out).float().cpu(), ref)


def row(name, ms, torch_ms, err, flops=None, nbytes=None, config=None):
    r = {"case": name, "ms": ms, "torch_ms": torch_ms, "rel_err": err, "config": config or {}}
    if flops:
        r["tflops"] = flops / ms / 1e9
        r["pct_of_floor"] = 100.0 * r["tflops"] / PEAK_TFLOPS
    if nbytes:
        r["gbs"] = nbytes / ms / 1e6
        r["pct_of_floor"] = 100.0 * r["gbs"] / PEAK_GBS
    return r


def case_attention():
    """Causal over the template's candidate configs (the first is what `compile` ships by
    default), then non-causal with the default."""
    q, k, v = qkv_views()
    env = {"qkv": torch.randn(B * S * QKV_ROW, device=DEVICE).to(torch.bfloat16),
           "out": torch.empty(B * HQ * S * D, device=DEVICE, dtype=torch.bfloat16)}
    qt, kt, vt = (view(env, t) for t in (q, k, v))
    rows = []
    for causal in (True, False):
        op = AttentionOp(q, k, v, contiguous("out", BF16, (B, HQ, S, D)), causal, D ** -0.5)
        name = f"attention {'causal' if causal else 'full'} gqa"
        torch_ms = bench(lambda: F.scaled_dot_product_attention(
            qt, kt, vt, is_causal=causal, scale=op.scale, enable_gqa=True))
        ref = reference_output(op, env)
        default = attention.default_config(op)
        configs = (attention.candidate_configs(op) if causal
                   else [default, dict(default, TMA=True)])
        for cfg in configs:
            try:
                ours = jit_launcher(attention.plan(op, cfg), env)
                err = checked(op, env, ours, ref)
                rows.append(row(name, bench(ours), torch_ms, err, flops=attention.flops(op),
                                config=cfg))
            except Exception as e:  # a config that does not fit must not hide the others
                rows.append({"case": name, "config": cfg, "error": repr(e)})
    return rows


def case_rmsnorm():
    op = RMSNormOp(contiguous("x", BF16, (S, HIDDEN)), contiguous("w", BF16, (HIDDEN,)),
                   contiguous("y", BF16, (S, HIDDEN)), 1e-5)
    env = {"x": torch.randn(S * HIDDEN, device=DEVICE).to(torch.bfloat16),
           "w": torch.randn(HIDDEN, device=DEVICE).to(torch.bfloat16),
           "y": torch.empty(S * HIDDEN, device=DEVICE, dtype=torch.bfloat16)}
    ours = jit_launcher(rmsnorm.plan(op), env)
    err = checked(op, env, ours)
    ms = bench(ours)
    x, w = view(env, op.x), view(env, op.weight)
    torch_ms = bench(lambda: F.rms_norm(x, (HIDDEN,), w, 1e-5))
    return [row("rmsnorm 2048x4096", ms, torch_ms, err, nbytes=rmsnorm.bytes_moved(op),
                config=rmsnorm.default_config(HIDDEN))]


def _rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., :D // 2]), dim=-1)


def case_rope():
    q, k, _ = qkv_views()
    env = {"qkv": torch.randn(B * S * QKV_ROW, device=DEVICE).to(torch.bfloat16),
           "cos": torch.randn(S * D, device=DEVICE).to(torch.bfloat16),
           "sin": torch.randn(S * D, device=DEVICE).to(torch.bfloat16),
           "q_rot": torch.empty(B * HQ * S * D, device=DEVICE, dtype=torch.bfloat16),
           "k_rot": torch.empty(B * HKV * S * D, device=DEVICE, dtype=torch.bfloat16)}
    cos, sin = contiguous("cos", BF16, (S, D)), contiguous("sin", BF16, (S, D))
    rows = []
    for name, x, heads in (("q_rot", q, HQ), ("k_rot", k, HKV)):
        op = RopeOp(x, cos, sin, contiguous(name, BF16, (B, heads, S, D)))
        ours = jit_launcher(rope.plan(op), env)
        err = checked(op, env, ours)
        ms = bench(ours)
        xt, ct, st = view(env, x), view(env, cos), view(env, sin)
        torch_ms = bench(lambda: xt * ct + _rotate_half(xt) * st)
        rows.append(row(f"rope {name[0]} [1,{heads},2048,128]", ms, torch_ms, err,
                        nbytes=rope.bytes_moved(op), config=rope.default_config(D)))
    return rows


def case_swiglu():
    shape = (S, FFN)
    expr = PwExpr("mul", (PwExpr("silu", (PwInput(0),)), PwInput(1)))
    op = PointwiseOp((contiguous("gate", BF16, shape), contiguous("up", BF16, shape)), expr,
                     contiguous("act", BF16, shape))
    env = {n: torch.randn(S * FFN, device=DEVICE).to(torch.bfloat16) for n in ("gate", "up")}
    env["act"] = torch.empty(S * FFN, device=DEVICE, dtype=torch.bfloat16)
    ours = jit_launcher(pointwise.plan(op), env)
    err = checked(op, env, ours)
    ms = bench(ours)
    g, u = view(env, op.inputs[0]), view(env, op.inputs[1])
    torch_ms = bench(lambda: F.silu(g) * u)
    return [row("swiglu 2048x14336 (pointwise)", ms, torch_ms, err, nbytes=3 * S * FFN * 2,
                config={"BLOCK": pointwise.BLOCK, "num_warps": pointwise.NUM_WARPS})]


def print_table(rows) -> None:
    print(f"\n{'case':34s} {'ms':>8s} {'torch ms':>9s} {'rate':>14s} {'% floor':>8s} "
          f"{'rel err':>9s}  config")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:34s} ERROR {r['error'][:90]}  {r.get('config', '')}")
            continue
        rate = (f"{r['tflops']:.0f} TFLOP/s" if "tflops" in r else f"{r['gbs']:.0f} GB/s")
        cfg = ",".join(f"{k}={v}" for k, v in r["config"].items())
        print(f"{r['case']:34s} {r['ms']:8.4f} {r['torch_ms']:9.4f} {rate:>14s} "
              f"{r['pct_of_floor']:7.1f}% {r['rel_err']:9.2e}  {cfg}")


def print_best_attention(rows) -> None:
    timed = [r for r in rows if r.get("case", "").startswith("attention causal") and "ms" in r]
    if timed:
        best = min(timed, key=lambda r: r["ms"])
        print(f"best causal attention: {best['ms']:.4f} ms ({best['tflops']:.0f} TFLOP/s) with "
              f"{best['config']}; default is the first row")


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_kernels: no CUDA device")
        return 1
    start = time.time()
    rows = []
    for case in (case_attention, case_rmsnorm, case_rope, case_swiglu):
        if time.time() - start > TIME_BUDGET_S:
            rows.append({"case": case.__name__, "error": "skipped: time budget spent"})
            continue
        try:
            rows.extend(case())
        except Exception as e:
            traceback.print_exc()
            rows.append({"case": case.__name__, "error": repr(e)})
    print_table(rows)
    print_best_attention(rows)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "seconds": round(time.time() - start, 1),
              "floors": {"tflops_bf16": PEAK_TFLOPS, "copy_gbs": PEAK_GBS}, "rows": rows}
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "kernels_bench.json"
        path.write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
