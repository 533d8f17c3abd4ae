"""aotpack: ahead-of-time model packaging for NVIDIA GPUs (docs/architecture.md).

    import aotpack
    aotpack.build("model.pt", "out/m", inputs=["x=1..64x1024"], dtype="bf16")  # no GPU needed
    with aotpack.load("out/m") as model, model.session() as session:           # on the GPU
        y, = session.run([x])          # torch, DLPack or __cuda_array_interface__ inputs

`build` takes what `aotpack build` takes (the model: file.py:factory, .pt2 or model.pt;
keyword options as the CLI's: arch, inputs, dynamic, dtype, external_weights, force,
tuning_db, gemm_backend, ...) and returns a BuildResult; `load` returns an aotpack.runtime
Model. Errors the user fixes raise aotpack.UserError subclasses. Importing aotpack imports
neither torch nor triton.
"""

from aotpack.errors import UserError

__version__ = "0.2.0"


def build(model: str, out, *, task: str | None = None, max_seq_len: int | None = None,
          max_batch: int | None = None, **options):
    """Compile `model` into the folder `out` (see aotpack.builder.build for the options).
    `task="text-generation"` with `max_seq_len` / `max_batch` builds a generation bundle, as
    `aotpack build --task text-generation --max-seq-len N --max-batch B` does.
    Progress bars are off unless `progress=True`. torch's FutureWarnings about its own
    internals (pytree's LeafSpec), which say nothing about the model, are not shown (as the
    CLI does); the caller's warning filters are left as they were."""
    import warnings

    from aotpack.builder import build as build_folder
    from aotpack.generation.task import parse_task

    options.setdefault("progress", False)
    if task is not None or max_seq_len is not None or max_batch is not None:
        options["generation"] = parse_task(task, max_seq_len, max_batch)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        return build_folder(model, out, **options)


def load(bundle, weights_path=None, device: int = 0, verify=None):
    """The bundle (a model.aotpack file, or the folder `build` wrote) verified and loaded
    onto GPU `device`: an aotpack.runtime.Model; `verify` "fast" (default), "full" or "none"
    checks the weights' bytes as Model says. `model.session()` gives a Session, whose
    `run(inputs, outputs=None, stream=None)` takes torch tensors, DLPack objects or
    __cuda_array_interface__ objects and returns torch tensors (DLPack objects themselves).
    Both are context managers that free their handle on exit."""
    from aotpack.bundle.reader import bundle_file
    from aotpack.runtime import Model

    return Model(bundle_file(bundle), weights_path=weights_path, device=device, verify=verify)


__all__ = ["UserError", "__version__", "build", "load"]
