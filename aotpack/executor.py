"""Execute a Program on the CPU with each kernel op's torch reference.

This is how CI checks the compiler's semantics without a GPU: the same op list that becomes
cubins runs here with `aotpack.kernels.reference`, and the result is compared with eager PyTorch.
Intermediates start as NaN (or -1 for integers) so an op that fails to write its output shows.
"""
from __future__ import annotations

import math

from aotpack.kernels import run_reference as reference_op
from aotpack.program import Program


def _empty(storage, poison: bool):
    import torch

    n = 1
    for s in storage.shape:
        n *= s
    t = torch.empty(n, dtype=storage.dtype.to_torch())
    if poison:
        t.fill_(float("nan") if storage.dtype.is_float else -1)
    return t


def new_state(program: Program) -> dict:
    """The program's session state (docs/generation.md): each state storage zeroed, as the
    runtime allocates it at session create."""
    import torch

    return {name: torch.zeros(math.prod(program.storages[name].shape),
                              dtype=program.storages[name].dtype.to_torch())
            for name in program.states}


def run_reference(program: Program, inputs: list, *, poison: bool = True,
                  state: dict | None = None) -> list:
    """Run `program` on `inputs` (torch tensors in signature order); returns the outputs.
    `state`: the session state (new_state()), read and written in place; None: a fresh
    zeroed state for this run."""
    if len(inputs) != len(program.inputs):
        raise ValueError(f"expected {len(program.inputs)} inputs, got {len(inputs)}")
    if program.dynamic:  # run the program at the inputs' shapes
        program = program.at(program.bind([tuple(t.shape) for t in inputs]))
    env = {}
    for name, t in zip(program.inputs, inputs):
        st = program.storages[name]
        if tuple(t.shape) != st.shape or t.dtype != st.dtype.to_torch():
            raise ValueError(f"input {name}: expected {st.dtype.value}{list(st.shape)}, "
                             f"got {t.dtype}{list(t.shape)}")
        env[name] = _flat(t.detach().to("cpu"))
    for name, w in program.weights.items():
        env[name] = _flat(w.detach())
    env.update(new_state(program) if state is None else state)
    for st in program.storages.values():
        if st.name not in env:
            env[st.name] = _empty(st, poison)
    for op in program.ops:
        reference_op(op, env)
    return [env[n].reshape(program.storages[n].shape) for n in program.outputs]


def _flat(t):
    """`t` as a 1-D tensor at the start of its own storage: the kernels' references view
    storages with torch.as_strided, whose offset counts from the storage's start (a table
    sliced from a buffer, pos[:, 1:], starts 16 elements in)."""
    flat = t.contiguous().reshape(-1)
    return flat.clone() if flat.storage_offset() else flat
