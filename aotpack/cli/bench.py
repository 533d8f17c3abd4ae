"""`aotpack bench`: time a bundle through the Python binding of the C runtime."""
from __future__ import annotations

import statistics
from pathlib import Path


def run_bench(bundle: Path, *, iters: int, warmup: int, weights: Path | None = None,
              point: dict | None = None) -> dict:
    """Median/min/p90 latency in ms of `Session.run` on random inputs, each run timed with CUDA
    events on the current stream. The same input and output tensors are reused, so after the
    first run the session replays its cached CUDA graph (what a serving loop would do). A
    dynamic bundle runs at `point` (its dims' values), by default its example shape."""
    import torch

    from aotpack.bundle import read_bundle
    from aotpack.dtypes import DType
    from aotpack.verify import VerifyError, random_inputs
    from aotpack.verify_shapes import _signature_at, example_point

    if not torch.cuda.is_available():
        raise VerifyError("bench needs a CUDA GPU (torch.cuda.is_available() is False here)")
    from aotpack.runtime import Model, Session

    manifest = read_bundle(bundle, weights_path=weights).manifest
    if manifest.get("symbols"):
        point = point or example_point(manifest["symbols"])
    signature = _signature_at(manifest["inputs"], point if manifest.get("symbols") else None)
    examples = [torch.zeros(1, dtype=DType(s["dtype"]).to_torch()) for s in signature]
    inputs = [t.cuda() for t in random_inputs(signature, examples, seed=0)]
    model = Model(str(bundle), weights_path=str(weights) if weights else None)
    shapes = model.output_shapes([tuple(t.shape) for t in inputs])
    outputs = [torch.empty(shape, dtype=DType(s["dtype"]).to_torch(), device="cuda")
               for shape, s in zip(shapes, manifest["outputs"])]
    session = Session(model)
    for _ in range(warmup):
        session.run(inputs, outputs)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for start, end in events:
        start.record()
        session.run(inputs, outputs)
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return {"median_ms": statistics.median(times), "min_ms": times[0],
            "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))], "iters": iters}
