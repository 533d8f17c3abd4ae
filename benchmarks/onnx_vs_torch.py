"""The same transformers GPT-2, BERT and ViT (real widths, 4 layers) built from ONNX and from
PyTorch, run side by side on the GPU with onnxruntime: kernel counts, latency (CUDA events,
median) and the largest differences between them. Bundles are built here (the Triton backend
compiles on this machine), in bf16.

    python benchmarks/onnx_vs_torch.py [--models gpt2,bert,vit] [--size real|tiny] [--out DIR]

Prints a table and writes DIR/onnx_vs_torch.json ($OUT or results/ by default).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import onnx_families  # noqa: E402
from compare import median_ms  # noqa: E402

SHAPES = {"gpt2": (4, 512), "bert": (8, 128), "vit": (8, 0), "llama": (1, 1024)}
WARMUP, ITERS = 10, 50


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cuda_ms(fn) -> float:
    """Median of ITERS CUDA-event timings of fn() after WARMUP calls."""
    return median_ms(fn, warmup=WARMUP, reps=ITERS)


def build_both(name: str, size: str, work: Path):
    import aotpack

    batch, seq = SHAPES[name] if size == "real" else (2, 16)
    os.environ.update(ONNX_FAMILY_SIZE=size, ONNX_FAMILY_BATCH=str(batch),
                      ONNX_FAMILY_SEQ=str(seq or 16))
    family = onnx_families.make(name, size, batch, seq or 16)
    log(f"{name}: exporting ONNX")
    path = onnx_families.export(family, work / f"{name}.onnx")
    log(f"{name}: building from ONNX")
    t = time.time()
    from_onnx = aotpack.build(path, work / f"{name}-onnx", dtype="bf16", force=True,
                              progress=False)
    log(f"{name}: built from ONNX in {time.time() - t:.0f} s; building from PyTorch")
    t = time.time()
    from_torch = aotpack.build(f"{HERE / 'onnx_families.py'}:torch_{name}",
                               work / f"{name}-torch", dtype="bf16", force=True, progress=False)
    log(f"{name}: built from PyTorch in {time.time() - t:.0f} s")
    return family, path, from_onnx, from_torch


def ort_session(path: str):
    """(run(x) -> output on the GPU as torch, provider used, note)."""
    import numpy as np
    import onnxruntime as ort

    providers = ort.get_available_providers()
    use = "CUDAExecutionProvider" if "CUDAExecutionProvider" in providers else \
        "CPUExecutionProvider"
    note = "" if use.startswith("CUDA") else \
        f"onnxruntime has no CUDA provider here (providers: {providers}): CPU numbers"
    sess = ort.InferenceSession(path, providers=[use])
    name = sess.get_inputs()[0].name

    def run(x: torch.Tensor) -> torch.Tensor:
        if use.startswith("CUDA"):
            binding = sess.io_binding()
            x = x.contiguous()
            binding.bind_input(name, "cuda", 0, np.dtype(str(x.dtype).split(".")[1]),
                               list(x.shape), x.data_ptr())
            binding.bind_output(sess.get_outputs()[0].name, "cuda")
            sess.run_with_iobinding(binding)
            return torch.from_numpy(binding.copy_outputs_to_cpu()[0]).cuda()
        return torch.from_numpy(sess.run(None, {name: x.cpu().numpy()})[0]).cuda()
    return run, use, note


def kernel_count(bundle) -> int:
    from aotpack.bundle import read_bundle

    manifest = read_bundle(bundle).manifest
    steps = manifest.get("steps") or []
    return len(steps)


def compare(name: str, size: str, work: Path) -> dict:
    import aotpack

    family, path, from_onnx, from_torch = build_both(name, size, work)
    x = family.example.cuda()
    row = {"model": name, "size": size, "input": list(x.shape)}
    outs = {}
    with aotpack.load(from_onnx.out_dir) as mo, mo.session() as so, \
            aotpack.load(from_torch.out_dir) as mt, mt.session() as st:
        xb = x if not x.is_floating_point() else x.to(torch.bfloat16)
        outs["onnx"] = so.run([xb])[0].float()
        outs["torch"] = st.run([xb])[0].float()
        row["kernels_onnx"] = kernel_count(from_onnx.bundle)
        row["kernels_torch"] = kernel_count(from_torch.bundle)
        log(f"{name}: timing the bundles")
        row["ms_onnx"] = cuda_ms(lambda: so.run([xb]))
        row["ms_torch"] = cuda_ms(lambda: st.run([xb]))
    run_ort, provider, note = ort_session(path)
    outs["onnxruntime"] = run_ort(x).float()
    log(f"{name}: timing onnxruntime ({provider})")
    row["ms_onnxruntime"], row["onnxruntime_provider"] = cuda_ms(lambda: run_ort(x)), provider
    if note:
        row["note"] = note
    with torch.no_grad():
        outs["eager_f32"] = family.module.cuda()(x).float()

    def err(a, b):
        return float((outs[a] - outs[b]).abs().max() / outs[b].abs().max())

    row["max_err_onnx_vs_torch"] = err("onnx", "torch")
    row["max_err_onnx_vs_onnxruntime"] = err("onnx", "onnxruntime")
    row["max_err_torch_vs_eager_f32"] = err("torch", "eager_f32")
    row["latency_ratio_onnx_over_torch"] = row["ms_onnx"] / row["ms_torch"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,bert,vit")
    ap.add_argument("--size", default="real", choices=sorted(onnx_families.SIZES))
    ap.add_argument("--out", default=os.environ.get("OUT", str(HERE / "results")))
    args = ap.parse_args()
    out = Path(args.out)
    work = out / "onnx_vs_torch_work"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        rows.append(compare(name, args.size, work))
        log(json.dumps(rows[-1]))
    (out / "onnx_vs_torch.json").write_text(json.dumps({"results": rows}, indent=1))
    print(f"\n{'model':6} {'kernels onnx/torch':>18} {'onnx ms':>8} {'torch ms':>9} "
          f"{'ratio':>6} {'ort ms':>8} {'err o/t':>8} {'err o/ort':>9}")
    for r in rows:
        print(f"{r['model']:6} {r['kernels_onnx']:>8}/{r['kernels_torch']:<9} "
              f"{r['ms_onnx']:8.3f} {r['ms_torch']:9.3f} "
              f"{r['latency_ratio_onnx_over_torch']:6.3f} {r['ms_onnxruntime']:8.3f} "
              f"{r['max_err_onnx_vs_torch']:8.1e} {r['max_err_onnx_vs_onnxruntime']:9.1e}"
              + (f"  ({r['onnxruntime_provider']})" if 'CUDA' not in
                 r['onnxruntime_provider'] else ""))


if __name__ == "__main__":
    main()
