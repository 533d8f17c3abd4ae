"""Model loading: `file.py:fn` factories, `.pt2` files written by torch.export.save, and
`model.pt` (TorchScript or a module saved whole: frontend/saved.py; inputs from --input), and
`model.onnx` (frontend/onnx: inputs drawn from its declared shapes and the command line).

A factory returns (model, example_inputs) or (model, example_inputs, dynamic_shapes), the
last in torch.export's own form (a tuple in input order or a dict by argument name, each
input's dims mapped to `torch.export.Dim`s). A `.pt2` keeps the dims it was exported with.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aotpack.errors import UserError


class ModelLoadError(UserError):
    """The model spec could not be turned into (model, example_inputs); the message says why."""


@contextlib.contextmanager
def quiet_torch_logs():
    """torch.export logs a traceback at ERROR level before it raises (fake tensors' failed
    ops); the exception itself is reported once, as one line: keep its log off the screen."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        yield
    finally:
        logging.disable(previous)


@dataclass
class LoadedModel:
    model: object  # torch.nn.Module, torch.export.ExportedProgram or torch.jit.ScriptModule
    inputs: tuple | None  # example inputs (torch tensors); None: the file has none (--input)
    dynamic_shapes: object = None  # torch.export's spec, or None
    notes: list = field(default_factory=list)  # what loading decided that the user should see
    input_names: list | None = None  # where the model's forward cannot say (TorchScript)
    kind: str = ""  # "torchscript" (its failures get a hint), "onnx" (frontend/onnx)


def load_spec(spec: str) -> LoadedModel:
    """The model, example inputs and dynamic dims `spec` names: `path/to/file.py:fn`,
    `model.pt2`, or a `model.pt` that torch.jit.save or torch.save wrote (no inputs)."""
    if spec.endswith(".pt2"):
        return LoadedModel(*_load_pt2(Path(spec)))
    if spec.endswith(".onnx"):
        from aotpack.frontend.onnx import load_onnx

        return LoadedModel(load_onnx(Path(spec)), None, kind="onnx")
    path, sep, fn = spec.rpartition(":")
    if sep and path.endswith(".py") and fn:
        return _load_factory(Path(path), fn)
    if spec.endswith(".py"):
        raise ModelLoadError(f"model spec {spec!r}: name the factory function too "
                             f"({spec}:make_model), which returns (model, example_inputs)")
    if not sep and Path(spec).is_file():
        from aotpack.frontend.saved import load_saved

        return load_saved(Path(spec))
    raise ModelLoadError(f"model spec {spec!r} is none of `file.py:function`, a .pt2 file "
                         f"written by torch.export.save, or a model.pt written by "
                         f"torch.jit.save / torch.save" +
                         (f" ({spec} does not exist)" if not sep else ""))


def load_model(spec: str):
    """(model_or_exported_program, example_inputs tuple) for `spec` (see load_spec)."""
    loaded = load_spec(spec)
    if loaded.inputs is None:
        raise ModelLoadError(f"{spec} carries no example inputs (give them with --input)")
    return loaded.model, loaded.inputs


def _load_factory(path: Path, fn: str):
    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} does not exist")
    module_name = f"aotpack_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    folder = str(path.resolve().parent)  # modules beside the factory import as when run there
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise ModelLoadError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    factory = getattr(module, fn, None)
    if not callable(factory):
        have = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ModelLoadError(f"{path} has no function {fn!r} (callables there: {have})")
    try:
        result = factory()
    except Exception as e:  # the user's code: where it raised, in one line
        raise ModelLoadError(f"{path}:{fn}() raised {type(e).__name__}: {e} "
                             f"({_where_raised(e, path)})") from e
    return _check_factory_result(result, f"{path}:{fn}")


def _where_raised(e: BaseException, path: Path) -> str:
    """The deepest line of `path` in e's traceback (else the deepest line at all)."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    f = (mine or frames)[-1] if frames else None
    return f"{f.filename}:{f.lineno}" if f else "no traceback"


def _check_factory_result(result, where: str) -> LoadedModel:
    import torch

    if isinstance(result, torch.nn.Module):  # the inputs come from --input (or the task)
        return LoadedModel(result, None)
    if not (isinstance(result, tuple) and len(result) in (2, 3)):
        raise ModelLoadError(f"{where}() must return (model, example_inputs), (model, "
                             f"example_inputs, dynamic_shapes) or the model alone (inputs "
                             f"from --input), got {type(result).__name__}")
    model, inputs = result[:2]
    dynamic = result[2] if len(result) == 3 else None
    if dynamic is not None and not isinstance(dynamic, (tuple, list, dict)):
        raise ModelLoadError(f"{where}(): dynamic_shapes must be torch.export's spec (a tuple "
                             f"or dict of per-input {{dim: torch.export.Dim}}), got "
                             f"{type(dynamic).__name__}")
    if not isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)):
        raise ModelLoadError(f"{where}(): model is a {type(model).__name__}, expected a "
                             f"torch.nn.Module or an ExportedProgram")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, Mapping) and isinstance(model, torch.nn.Module):  # keyword inputs
        from aotpack.frontend.keyword_inputs import wrap_keyword_inputs

        model, inputs = wrap_keyword_inputs(model, dict(inputs), where)  # (a dynamic_shapes
        # dict by input name fits the wrapper: its parameters are those names)
    if not isinstance(inputs, (tuple, list)) or not all(
            isinstance(t, torch.Tensor) for t in inputs):
        by_name = ", or a dict of them by name" if isinstance(model, torch.nn.Module) else ""
        raise ModelLoadError(f"{where}(): example_inputs must be a tuple of tensors in "
                             f"forward's order{by_name}")
    return LoadedModel(model, tuple(inputs), dynamic)


_UNREGISTERED = re.compile(r"Deserializing ([\w.]+)\.(\w+) in pytree is not registered")


def _export_load(path: Path):
    """torch.export.load, once more after importing the module of a container type the saved
    program's inputs or outputs use (a transformers ModelOutput: torch only knows it once
    transformers.modeling_outputs is imported; it logs that and raises a generic error)."""
    import importlib

    import torch

    for attempt in range(2):
        log = _Captured()
        logger = logging.getLogger("torch.export")
        logger.addHandler(log)
        logger.propagate, before = False, logger.propagate
        try:
            return torch.export.load(str(path))
        except Exception as e:
            missing = _UNREGISTERED.search(log.text) or _UNREGISTERED.search(str(e))
            if missing is None:
                raise ModelLoadError(f"{path} is not a torch.export .pt2 file: {e}") from e
            module, name = missing.groups()
            try:
                importlib.import_module(module)
            except ImportError:
                raise ModelLoadError(f"{path}: its inputs or outputs are a {module}.{name}, and "
                                     f"{module} cannot be imported here: install it (the "
                                     f"package the model came from)") from None
            if attempt:
                raise ModelLoadError(f"{path}: torch.export cannot read its {module}.{name} "
                                     f"even with {module} imported ({e})") from e
        finally:
            logger.removeHandler(log)
            logger.propagate = before


class _Captured(logging.Handler):
    """A log handler keeping what it is given (torch.export's reason for a failed load)."""

    def __init__(self):
        super().__init__()
        self.text = ""

    def emit(self, record):
        self.text += self.format(record) + "\n"  # with the traceback torch logs


def _load_pt2(path: Path):
    import torch

    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} does not exist")
    ep = _export_load(path)
    inputs = getattr(ep, "example_inputs", None)
    if not inputs:
        raise ModelLoadError(f"{path} carries no example inputs; export it with torch.export "
                             f"(torch >= 2.6 saves them), or use a `file.py:fn` factory")
    args, kwargs = inputs
    if kwargs:
        names = ", ".join(kwargs)
        raise ModelLoadError(f"{path} was exported with keyword inputs ({names}); aotpack takes "
                             f"positional ones: export it again as torch.export.export(model, "
                             f"({names},)) — in the order of the model's forward — or give a "
                             f"`file.py:fn` factory returning the model and the inputs as a tuple")
    return ep, tuple(args)
