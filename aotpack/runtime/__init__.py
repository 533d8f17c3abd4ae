"""Python binding of the aotpack C runtime (libaotpack.so, through ctypes).

    from aotpack.runtime import Model, Session
    model = Model("out/model.aotpack")          # verify + load on cuda:0
    outs = Session(model).run([x.cuda()])       # list of torch CUDA tensors

`Model.check_file(path)` verifies a bundle without a GPU. Errors raise AotpackError(code,
message). Importing this package imports neither torch nor triton.
"""
from aotpack.runtime._lib import library_path, load_library
from aotpack.runtime.errors import AotpackError, StatusCode
from aotpack.runtime.model import Model, Session, TensorInfo


def version() -> str:
    """Version string of the loaded libaotpack.so."""
    return load_library().aotpack_version().decode()


__all__ = ["AotpackError", "Model", "Session", "StatusCode", "TensorInfo", "library_path",
           "load_library", "version"]
