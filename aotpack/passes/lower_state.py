"""Session state in the lowering (docs/generation.md): buffers the model writes in place (a KV
cache) are graph inputs named in `graph.meta["state"]`, and their new values are graph outputs
named `state:<name>`.

A state is a storage of kind "state": the runtime allocates it per session and keeps it across
runs. The row scatter that writes it (SCATTER_ROWS) writes the state's storage itself when
nothing else reads the state's old value (so does a scatter into a computed tensor that
nothing else reads); otherwise it copies the table first. A state output whose value is not
already the state's storage (a model that replaces a buffer with a computed tensor) is copied
into it after the last op.
"""
from __future__ import annotations

from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.kernels.spec import ScatterRowsOp, TensorArg, contiguous
from aotpack.passes.lower_reductions import _rows, _vector

STATE_PREFIX = "state:"


def state_names(graph: Graph) -> list[str]:
    return list(graph.meta.get("state", []))


def is_state_output(name: str) -> bool:
    return name.startswith(STATE_PREFIX)


def lower_scatter_rows(lw, n: Node) -> None:
    table, rows, values = n.inputs
    dest = lw.args[table.name]
    if not _writes_in_place(lw, table):
        dest = lw._new_storage(n.output)
        lw._copy(lw.args[table.name], dest)
    lw.args[n.output.name] = dest
    lw.ops.append(ScatterRowsOp(_vector(lw, rows), _rows(lw, values, 1), dest,
                                n.attrs.reduce))


def _writes_in_place(lw, table: Value) -> bool:
    """The table is a view of a state, or of a kernel's result, that nothing but this write
    reads: the views from the state input (or the kernel's output) down to the table, each
    with no other reader. A computed table is then not copied first (scatter_add's f32 copy
    of a bf16 tensor, the second of two scatters in a row)."""
    arg = lw.args[table.name]
    storage = lw.storages.get(arg.storage)
    if storage is None or storage.kind not in ("state", "intermediate"):
        return False
    v = table
    while True:
        node = lw.producers.get(v.name)
        if len(lw.users.get(v.name, [])) != 1 or v.name in lw.g.output_names():
            return False
        if node is None:
            return storage.kind == "state" and v.name == arg.storage  # the state input
        if node.op != Op.AS_STRIDED:
            return storage.kind == "intermediate"  # the kernel writing the table
        v = node.inputs[0]


def write_state_outputs(lw) -> None:
    """Each state's new value ends in the state's storage (a copy where a kernel did not
    already write it there)."""
    for o in lw.g.outputs:
        if not is_state_output(o.name):
            continue
        name = o.name[len(STATE_PREFIX):]
        st = lw.storages[name]
        whole = contiguous(name, st.dtype, tuple(st.shape))
        arg = lw.args[o.value.name]
        if _same(arg, whole):
            continue
        lw._copy(arg, whole)


def _same(a: TensorArg, b: TensorArg) -> bool:
    return (a.storage == b.storage and tuple(a.shape) == tuple(b.shape)
            and tuple(a.strides) == tuple(b.strides) and a.offset == b.offset)
