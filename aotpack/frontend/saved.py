"""`model.pt`: a TorchScript archive (`torch.jit.save`) or a whole module saved with
`torch.save(model)`. Neither carries example inputs: `--input` gives them (frontend/inputs.py).

A TorchScript module is turned into an ExportedProgram by torch's TorchScript converter, once
the example inputs are known (`exportable`), then handled like any module. Loading a module
saved with torch.save unpickles it, which runs code the file names (torch.load with
weights_only=False): load only files you trust.
"""
from __future__ import annotations

import os
import sys
import warnings
import zipfile
from pathlib import Path

from aotpack.frontend.load import LoadedModel, ModelLoadError, quiet_torch_logs

SAVE_HINT = ("save the model itself: torch.jit.save(torch.jit.script(model), 'model.pt'), "
             "torch.save(model, 'model.pt') or torch.export.save(torch.export.export(model, "
             "inputs), 'model.pt2'); or give a file.py:factory that builds it")


def is_torchscript(path: Path) -> bool:
    """A TorchScript archive: a zip whose records include compiled code (`<name>/code/...`);
    torch.save's zip holds only data.pkl and tensors."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any("/code/" in n for n in z.namelist())


def load_saved(path: Path) -> LoadedModel:
    """The module in `path`, with its input names and no example inputs."""
    import torch

    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} does not exist")
    if is_torchscript(path):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as e:  # noqa: BLE001 — torch's message says what is wrong
            raise ModelLoadError(f"{path}: torch.jit.load failed: {e}") from e
        return LoadedModel(module.eval(), None, input_names=_script_inputs(module, path),
                           kind="torchscript")
    # the class is looked up by module name: as `python model_script.py` would find it, from
    # the working folder or the file's own folder (a console script's sys.path has neither)
    for folder in (str(path.resolve().parent), os.getcwd()):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except (ModuleNotFoundError, AttributeError) as e:
        where = ("its class was defined in the script that saved it (__main__), which no one "
                 "can import: move the class into a module, save again, and keep that module "
                 "importable here" if "__main__" in str(e) else
                 "its class must be importable here (its module in the working folder, beside "
                 "the file, or installed)")
        raise ModelLoadError(f"{path}: torch.load could not rebuild the saved module ({e}): "
                             f"{where}; or save it with torch.jit.save or torch.export.save, "
                             f"which carry the code") from e
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{path} is not a file torch.save or torch.jit.save wrote: "
                             f"{type(e).__name__}: {e}") from e
    if isinstance(obj, torch.nn.Module):
        return LoadedModel(obj.eval(), None, input_names=None)
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ModelLoadError(f"{path} holds a state_dict ({len(obj)} tensors, e.g. "
                             f"{next(iter(obj))!r}): weights without the model's code. "
                             f"aotpack needs the model: {SAVE_HINT}")
    raise ModelLoadError(f"{path} holds a {type(obj).__name__}, not a model: {SAVE_HINT}")


def _script_inputs(module, path: Path) -> list[str]:
    args = module.forward.schema.arguments[1:]  # [0] is self
    wrong = [f"{a.name}: {a.type}" for a in args if str(a.type) != "Tensor"]
    if wrong:
        raise ModelLoadError(f"{path}: forward takes {', '.join(wrong)}; torch's TorchScript "
                             f"converter takes every argument, as a tensor (script a wrapper "
                             f"whose forward takes exactly the input tensors)")
    return [a.name for a in args]


_INDEX_ARG = {"aten::embedding": 1, "aten::index_select": 2, "aten::gather": 2,
              "aten::one_hot": 0}
_SHAPE_ONLY = {"aten::view", "aten::reshape", "aten::flatten", "aten::contiguous",
               "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::slice", "aten::select",
               "aten::repeat", "aten::transpose", "aten::permute"}


def index_inputs(module) -> set[int]:
    """Positions of a TorchScript module's inputs that it uses as indices (an embedding's ids,
    through views): an archive keeps no input dtypes, so these are how it says int64."""
    try:
        graph = module.inlined_graph
        inputs = {v.unique(): i for i, v in enumerate(list(graph.inputs())[1:])}
        found = set()
        for node in graph.nodes():
            if node.kind() not in _INDEX_ARG:
                continue
            value = node.inputsAt(_INDEX_ARG[node.kind()])
            while value.unique() not in inputs and value.node().kind() in _SHAPE_ONLY:
                value = value.node().inputsAt(0)
            if value.unique() in inputs:
                found.add(inputs[value.unique()])
        return found
    except RuntimeError:  # a graph this walk does not understand: no hint, not an error
        return set()


def exportable(module, inputs: tuple, names: list[str]):
    """A TorchScript module as an nn.Module torch.export can trace (an fx GraphModule whose
    forward takes `names`), converted with the example `inputs`."""
    try:
        from torch._export.converter import TS2EPConverter
    except ImportError as e:  # the converter is torch's own, present since torch 2.4
        raise ModelLoadError(f"this torch has no TorchScript converter ({e}): export the model "
                             f"with torch.export instead") from e
    try:
        with quiet_torch_logs(), warnings.catch_warnings():
            # "Manually populate ...num_batches_tracked" once per batch norm: the converter's
            # note about a buffer eval mode never reads
            warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
            ep = TS2EPConverter(module, tuple(inputs)).convert()
    except Exception as e:  # noqa: BLE001
        shapes = ", ".join(f"{n} {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
                           for n, t in zip(names, inputs))
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelLoadError(f"converting the TorchScript module with inputs {shapes} failed: "
                             f"{type(e).__name__}: {first}\n(an input that holds integer ids "
                             f"needs its dtype: --input "
                             f"NAME=SHAPE:i64; else export the model with torch.export, or save "
                             f"it with torch.save, if its source is at hand)") from e
    gm = ep.module()
    # the converter declares every dim dynamic from 2 up and checks that on each call; the
    # dims that really vary are declared again by --input / --dynamic when re-exported
    gm._forward_pre_hooks.clear()
    codegen = gm.graph._codegen
    renamed = dict(zip(codegen.pytree_info.orig_args, names))
    for node in gm.graph.nodes:  # the converter appends _1 to every input's name
        if node.op == "placeholder" and node.target in renamed:
            node.target = node.name = renamed[node.target]
    codegen.pytree_info = codegen.pytree_info._replace(orig_args=list(names))
    gm.recompile()
    return gm
