"""Python binding of the aotpack C runtime (libaotpack.so, through ctypes).

    from aotpack.runtime import Model, Session
    model = Model("out/model.aotpack")          # verify + load on cuda:0
    outs = Session(model).run([x.cuda()])       # list of torch CUDA tensors

`Session.run` also takes DLPack and __cuda_array_interface__ objects (CuPy, Numba, JAX), and
skips the checks of tensors it has seen (same pointer, shape, dtype, device) — see its
docstring. `Model.check_file(path)` verifies a bundle without a GPU. Errors raise
AotpackError(code, message). Importing this package imports neither torch nor triton.

A bundle whose dims vary at run time (format v2) lists its `model.symbols`; inputs of any
shape in their ranges run as they are (`Session.run` reads the shapes from the tensors), and
`model.output_shapes(input_shapes)` gives the output shapes ahead of a run.

A text-generation bundle (docs/generation.md) runs its whole token loop in the runtime:
`Generator(path).generate([[1, 15043, 3186]], max_new_tokens=64)` (greedy or sampled).
"""
from aotpack.runtime._lib import library_path, load_library
from aotpack.runtime.errors import AotpackError, StatusCode
from aotpack.runtime.generation import GenerateResult, Generator
from aotpack.runtime.model import DimInfo, Model, Symbol, TensorInfo
from aotpack.runtime.session import Session


def version() -> str:
    """Version string of the loaded libaotpack.so."""
    return load_library().aotpack_version().decode()


__all__ = ["AotpackError", "DimInfo", "GenerateResult", "Generator", "Model", "Session", "StatusCode", "Symbol", "TensorInfo",
           "library_path", "load_library", "version"]
