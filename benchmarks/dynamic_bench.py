"""One dynamic bundle against static bundles built for single shapes, eager PyTorch and
torch.compile(dynamic=True), at several shapes, in one process on one GPU.

    python benchmarks/dynamic_bench.py MODEL DYN_DIR [STATIC_DIR ...] [--compile MODE]

MODEL is a name in benchmarks/dynamic_models.py. Each DIR holds model.aotpack built with
--external-weights and spec.txt (its factory); the weights are written here from the seeded
factories (as scripts/make-weights does). For every shape of the model: the dynamic bundle's
relative error against eager (fresh inputs), and the median latency (CUDA events, warm-up) of
the dynamic bundle, the static bundle of that shape (when one was given), eager and the
compiled model. Prints a table and writes $OUT/dynamic-<MODEL>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare import median_ms  # noqa: E402

import dynamic_models as dm  # noqa: E402


def write_weights(folder: Path) -> float:
    """The folder's external weights from its factory (the dims its manifest declares
    applied); seconds taken. Fails loudly when a weight's sha256 differs from the bundle's."""
    from aotpack.bundle import MANIFEST_KEY
    from aotpack.bundle.stfile import BundleError, atomic_output, read_header, write_safetensors
    from aotpack import precision
    from aotpack.bundle.writer import external_entries
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph
    from aotpack.verify import _load

    t0 = time.time()
    manifest = json.loads(read_header(folder / "model.aotpack")[1][MANIFEST_KEY])
    loaded = _load((folder / "spec.txt").read_text().strip(), manifest)
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    precision.apply(program, precision.mode(manifest))  # the plan the bundle was built from
    try:
        entries = external_entries(manifest, program)
    except BundleError as e:
        raise SystemExit(f"{folder}: {e}") from None
    with atomic_output(folder / manifest["external_weights"]["file"]) as out:
        write_safetensors(out, entries, {"aotpack.weights_of": "model.aotpack"})
    return time.time() - t0


def inputs_for(model_name: str, b: int, s: int | None, seed: int):
    """Fresh inputs of one shape: images, hidden states, or token ids in the vocabulary."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if model_name == "vit_b16":
        return [torch.randn(b, 3, 224, 224, generator=g).to(torch.bfloat16)]
    if model_name.startswith("llama"):
        return [torch.randn(b, s, 4096, generator=g).to(torch.bfloat16)]
    vocab = 50257 if model_name == "gpt2" else 30522
    return [torch.randint(0, vocab, (b, s), generator=g)]


def _ends(model_name: str) -> list[tuple]:
    """Both ends of the dims' ranges (correctness only: the measured shapes are in MODELS)."""
    _, dims, example, _ = dm.MODELS[model_name]
    lo, hi = list(example), list(example)
    for d in dims:
        i = int(d.split(".")[1].split("=")[0])
        lo[i], hi[i] = (int(v) for v in d.rsplit(":", 1)[1].split(".."))
    return [tuple(lo), tuple(hi)]


def _check_end(model_name, dyn, eager, shape) -> dict:
    import torch

    x = [t.cuda() for t in inputs_for(model_name, shape[0], shape[1], seed=99)]
    with torch.no_grad():
        err = rel_err(dyn.run(x)[0], eager(*x))
    return {"shape": dm.shape_name(*shape), "rel_err_vs_eager": err}


def rel_err(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("model", choices=sorted(dm.MODELS))
    p.add_argument("dynamic", type=Path)
    p.add_argument("static", type=Path, nargs="*")
    p.add_argument("--compile", default="default", help="torch.compile mode (dynamic=True), "
                   "or none")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--weights-only", action="store_true",
                   help="write every folder's weights and stop (run these in parallel first)")
    args = p.parse_args()
    dirs = [args.dynamic, *args.static]
    if args.weights_only:
        print(json.dumps({str(d): round(write_weights(d), 1) for d in dirs}))
        return 0
    from aotpack.runtime import Model, Session

    factory, _, example, shapes = dm.MODELS[args.model]
    result = {"model": args.model, "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "compile_mode": args.compile, "rows": []}
    result["weights_s"] = {str(d): write_weights(d) for d in dirs
                           if not (d / "weights.safetensors").is_file()}
    eager, _ = factory(*example)
    eager = eager.cuda()
    dyn = Session(Model(str(args.dynamic / "model.aotpack")))
    static = {}
    for d in args.static:
        name = (d / "spec.txt").read_text().strip().rsplit(":", 1)[1]
        static[name] = Session(Model(str(d / "model.aotpack")))
    compiled = None
    if args.compile != "none":
        mode = None if args.compile == "default" else args.compile
        compiled = torch.compile(eager, dynamic=True, mode=mode)
    result["ends"] = [_check_end(args.model, dyn, eager, point) for point in _ends(args.model)]
    print(json.dumps({"ends": result["ends"]}), flush=True)
    for k, (b, s) in enumerate(shapes):
        x = [t.cuda() for t in inputs_for(args.model, b, s, seed=k)]
        with torch.no_grad():
            want = eager(*x)
            got = dyn.run(x)[0]
            row = {"shape": dm.shape_name(b, s), "rel_err_vs_eager": rel_err(got, want),
                   "dynamic_ms": median_ms(lambda: dyn.run(x), reps=args.reps),
                   "eager_ms": median_ms(lambda: eager(*x), reps=args.reps)}
            key = f"{args.model}_{dm.shape_name(b, s)}"
            if key in static:
                row["static_ms"] = median_ms(lambda: static[key].run(x), reps=args.reps)
                row["dynamic_over_static"] = row["dynamic_ms"] / row["static_ms"]
            if compiled is not None:
                t0 = time.time()
                compiled(*x)
                torch.cuda.synchronize()
                row["compile_first_call_s"] = time.time() - t0
                row["compiled_ms"] = median_ms(lambda: compiled(*x), reps=args.reps)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        _save(result)  # after every row: a call stopped at its time limit keeps what it measured
    return 0


def _save(result: dict) -> None:
    out = Path(os.environ.get("OUT", "."))
    (out / f"dynamic-{result['model']}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
