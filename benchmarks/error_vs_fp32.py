"""How far a bf16 bundle is from the model computed in float32, next to how far eager bf16 is.

    python benchmarks/error_vs_fp32.py SPEC BUNDLE [--seeds 3]

`aotpack verify` compares the bundle with eager PyTorch in the model's own dtype; for a deep
bf16 model both carry rounding error, so ‖bundle − eager‖ alone cannot say whose it is. Here
both are compared with the same model upcast to float32 on the same inputs (the METHOD: a
reference in higher precision). The bundle's external weights must sit beside it. Needs a GPU,
torch and libaotpack (AOTPACK_LIB).
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def main() -> int:
    import torch

    from aotpack.frontend import load_model
    from aotpack.runtime import Model, Session
    from aotpack.verify import _eager, random_inputs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec")
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    # a float32 reference, not TF32 (cuDNN convolutions default to TF32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, examples = load_model(a.spec)
    if hasattr(model, "module") and hasattr(model, "graph_signature"):  # a .pt2 spec
        model = model.module()
    model = model.cuda().eval()
    model32 = copy.deepcopy(model).float()
    session = Session(Model(str(a.bundle)))
    signature = [{"dtype": t.dtype, "shape": list(t.shape)} for t in session.model.inputs]
    print("seed  bundle-vs-fp32  eager-bf16-vs-fp32  bundle-vs-eager")
    for seed in range(a.seeds):
        inputs = [t.cuda() for t in random_inputs(signature, examples, seed)]
        ours = session.run(inputs)
        eager = _eager(model, inputs)
        fp32 = _eager(model32, [t.float() if t.is_floating_point() else t for t in inputs])
        if not len(ours) == len(eager) == len(fp32):
            raise SystemExit(f"output counts differ: bundle {len(ours)}, eager {len(eager)}, "
                             f"fp32 {len(fp32)}")
        for o, e, f in zip(ours, eager, fp32):
            print(f"{seed:4d}  {rel(o, f):14.2e}  {rel(e, f):18.2e}  {rel(o, e):15.2e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
