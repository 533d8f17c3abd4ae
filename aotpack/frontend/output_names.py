"""Names of a model's outputs in the bundle (the manifest, the C API, aotpack-run --outputs).

A model returning one tensor or a tuple/list of tensors gets out0, out1, ...; one returning a
dict or a transformers ModelOutput gets its keys (`logits`, `last_hidden_state`), nested ones
joined by dots (`out1.scores`, `past.0`), from torch.export's output pytree. A key that is
not a plain name, or that another input, weight or value already uses, falls back to outN.
"""
from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


def user_output_names(ep, count: int, taken: set[str]) -> list[str]:
    """The names of the `count` user outputs of ExportedProgram `ep`, in its output order."""
    default = [f"out{i}" for i in range(count)]
    paths = _leaf_paths(ep, count)
    if paths is None or not any(_keyed(p) for p in paths):
        return default
    names = []
    for i, path in enumerate(paths):
        name = _join(path)
        ok = name and _PLAIN.fullmatch(name) and name not in taken and name not in names \
            and name not in default[:i] + default[i + 1:]
        names.append(name if ok else default[i])
    return names


def _leaf_paths(ep, count: int):
    """Each user output's key path in the output pytree (None when it cannot be read)."""
    try:
        from torch.utils import _pytree as pytree

        spec = ep.call_spec.out_spec
        if spec is None or spec.num_leaves != count:
            return None
        tree = pytree.tree_unflatten(list(range(count)), spec)
        leaves = pytree.tree_flatten_with_path(tree)[0]
        return [path for path, _ in sorted(leaves, key=lambda kv: kv[1])]
    except Exception:  # noqa: BLE001 — an unregistered container: plain outN names
        return None


def _keyed(path) -> bool:
    return any(not hasattr(k, "idx") for k in path)


def _join(path) -> str:
    parts = []
    for i, k in enumerate(path):
        if hasattr(k, "idx"):  # SequenceKey
            parts.append(f"out{k.idx}" if i == 0 else str(k.idx))
        elif hasattr(k, "key"):  # MappingKey
            parts.append(str(k.key))
        elif hasattr(k, "name"):  # GetAttrKey (a dataclass or namedtuple field)
            parts.append(str(k.name))
        else:
            return ""
    return ".".join(parts)
