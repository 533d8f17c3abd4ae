"""Lowering: canonical IR → Program (kernel ops over named storages).

Walks the nodes in order. Every value gets a TensorArg (how kernels reach it): inputs, weights
and compute results are contiguous storages; AS_STRIDED nodes are views of those (no kernel).
GEMM roots emit one GemmOp for their whole epilogue chain (gemm_chain.py), elementwise roots one
PointwiseOp (pointwise.py); SDPA, ROPE, RMS_NORM map to their kernel ops; LAYER_NORM,
(LOG_)SOFTMAX and last-dim SUM/MEAN/AMAX/AMIN to row-wise reduction ops (lower_reductions.py).
A COPY that only un-permutes a kernel's result is elided: the kernel writes its output in the
copy's layout; likewise the inputs of a cat are written straight into their slices of the cat's
storage.
"""
from __future__ import annotations

import math

from aotpack.errors import UserError
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import SymbolicError
from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    AttentionOp, BmmOp, EmbeddingOp, EpAct, EpAdd, EpBias, EpMul, EpScale, EpSwiGLU, GemmOp,
    PointwiseOp, RMSNormOp, RopeOp, TensorArg, contiguous, op_inputs,
)
from aotpack.passes.fuse_kv_write import fuse_kv_write
from aotpack.passes.op_motion import kernel_op_counts
from aotpack.passes import lower_conv, lower_moe, lower_reductions, lower_state, pointwise as pw
from aotpack.passes.gemm_chain import Chain, find_chains
from aotpack.passes.lower_args import (  # noqa: F401  (broadcast_to: lower_conv, tests)
    _as_1d, _flatten_2d, _inverse_permutation, _rope_table, broadcast_to,
)
from aotpack.passes.views import View, compose, is_reshape, normalized
from aotpack.program import Program, Storage


class LoweringError(UserError):
    """A node no kernel op covers (the message names the op, the node and its source)."""


def lower(graph: Graph) -> Program:
    return _Lowering(graph).run()


_ROW_KERNELS = (Op.RMS_NORM,)  # write [R, C] views, unit inner stride (reductions: RULES)


# kernels that write any strided view whose last dim is contiguous (attention and RoPE load
# and store whole head rows)
_UNIT_INNER_STRIDE = (Op.SDPA, Op.ROPE)


def _kernel_writes_strided(n: Node | None) -> bool:
    """Kernels whose output may be any 4-D/N-D strided view (not GEMM: its out is 2-D)."""
    return n is not None and (n.op in (Op.SDPA, Op.ROPE, Op.POOL) or n.op in O.ELEMENTWISE)


class _Lowering:
    def __init__(self, graph: Graph):
        self.g = graph
        self.producers = graph.producers()
        self.users = graph.users()
        self.chains = find_chains(graph)
        self.chain_of: dict[str, Chain] = {}  # any node covered by a chain -> its chain
        for c in self.chains.values():
            for n in c.nodes():
                self.chain_of[n.output.name] = c
        self.absorbed = pw.absorbed_nodes(graph, set(self.chain_of))
        # squeeze-excitation gates multiplied in by the convolution reading them
        self.conv_scaled = lower_conv.scaled_conv_inputs(graph, self.users, self.absorbed,
                                                          set(self.chain_of))
        self.absorbed |= self.conv_scaled
        self.fused_casts = lower_reductions.fuse_casts(  # casts around reduction kernels
            graph, self.producers, self.users, set(self.chain_of) | self.absorbed)
        # an absorbed output cast's value is written by its reduction kernel, not by the cast
        self.cast_writer = {c.output.name: self.producers[red]
                            for red, c in self.fused_casts.out_cast.items()}
        self.storages: dict[str, Storage] = {}
        self.args: dict[str, TensorArg] = {}
        self.ops: list = []
        self.weights: dict = {}
        self.fp8_sources: dict = {}  # weight -> (e4m3, f32 row scales): Program.fp8_sources
        self.preset: dict[str, TensorArg] = {}  # value -> where its producer must write it
        self.value_names = graph.names()
        self.in_place: set[str] = set()  # cat inputs written by their producer into the cat
        self.out_storage = self._output_storages()
        self._plan_copy_elision()

    # ------------------------------------------------------------------ setup
    def _output_storages(self) -> dict[str, str]:
        """value name -> output storage name, for outputs a kernel can write directly."""
        seen, out = set(), {}
        for o in self.g.outputs:
            if lower_state.is_state_output(o.name):
                continue  # written into the state's own storage (lower_state.py)
            n = self.producers.get(o.value.name)
            # (a row scatter's result lives in its table's storage: copied out after)
            direct = n is not None and n.op not in (Op.AS_STRIDED, Op.SCATTER_ROWS)
            if direct and o.value.name not in seen:
                out[o.value.name] = o.name
            seen.add(o.value.name)
        return out

    def _plan_copy_elision(self) -> None:
        """Kernels write straight into the storage a copy would go to: a COPY (or a graph
        output) of a permuted view of a kernel's result, and every cat input. Planned from the
        last node back, so a consumer's layout is fixed before its producers are planned."""
        outputs = {}
        for o in self.g.outputs:
            if not lower_state.is_state_output(o.name):
                outputs.setdefault(o.value.name, []).append(o.name)
        for n in reversed(self.g.nodes):
            if n.op == Op.COPY:
                self._try_elide(n.inputs[0], n.output, None)
            elif n.op == Op.AS_STRIDED and len(outputs.get(n.output.name, [])) == 1:
                if not self._try_elide_reshape(n, outputs[n.output.name][0]):
                    self._try_elide(n.output, n.output, outputs[n.output.name][0])
            elif n.op == Op.CAT:
                self._plan_cat(n)

    def _plan_cat(self, n: Node) -> None:
        """Producers of cat inputs write their slice of the cat's storage (no copies)."""
        out = self._new_storage(n.output)
        dim, start = n.attrs.dims[0], 0
        for v in n.inputs:
            part = TensorArg(out.storage, out.dtype, tuple(v.shape), out.strides,
                             out.offset + start * out.strides[dim])
            start += v.shape[dim]
            if self._can_write_into(v, part) and n.inputs.count(v) == 1:
                self.preset[v.name] = part
                self.in_place.add(v.name)

    def _writer(self, v: Value) -> Node | None:
        """The node whose kernel writes `v`."""
        return self.cast_writer.get(v.name) or self.producers.get(v.name)

    def _can_write_into(self, v: Value, dest: TensorArg) -> bool:
        n = self._writer(v)
        if (n is None or v.name in self.preset or v.name in self.g.output_names()
                or len(self.users.get(v.name, [])) != 1 or v.dtype != dest.dtype):
            return False
        flat = _flatten_2d(dest)
        row_major = flat is not None and (flat.strides[1] == 1 or flat.shape[1] == 1)
        if v.name in self.chain_of:
            return self.chain_of[v.name].end == v and row_major
        if n.op in lower_reductions.RULES:
            return lower_reductions.writes_view(n, dest)
        if n.op in _ROW_KERNELS:
            return row_major
        return _kernel_writes_strided(n) and v.name not in self.absorbed

    def _try_elide_reshape(self, view_node: Node, output_name: str) -> bool:
        """A graph output that is a reshape of a kernel's contiguous result (GPT-2's projection
        [B*S, N] viewed back as [B, S, N]; the last norm of a transformer): the kernel writes
        the output storage itself, with the same bytes, instead of a copy after it."""
        src = view_node.inputs[0]
        chain = self.chain_of.get(src.name)
        writer = self._writer(src)
        # kernels that allocate their result with _new_storage (and so honour a preset)
        kernel = writer is not None and writer.op != Op.SCATTER_ROWS and (  # (in place)
            src.name in self.chain_of or writer.op in O.ELEMENTWISE or writer.op in _LOWER
            or writer.op in (Op.COPY, Op.CAT))
        if (not is_reshape(view_node.attrs, src.shape) or not kernel
                or src.name in self.preset or src.name in self.absorbed
                or src.name in self.g.output_names()
                or len(self.users.get(src.name, [])) != 1
                or (chain is not None and chain.end != src)):
            return False
        self.out_storage[view_node.output.name] = output_name
        out = self._new_storage(view_node.output)
        self.preset[src.name] = contiguous(out.storage, src.dtype, tuple(src.shape))
        return True

    def _try_elide(self, view: Value, dest: Value, output_name: str | None) -> None:
        view_node = self.producers.get(view.name)
        if view_node is None or view_node.op != Op.AS_STRIDED:
            return
        src = view_node.inputs[0]
        view_users = len(self.users.get(view.name, [])) + (output_name is not None)
        if not (self._writes_any_view(src)
                and src.name not in self.preset
                and len(self.users.get(src.name, [])) == 1 and view_users == 1
                and src.name not in self.g.output_names()):
            return
        inverse = _inverse_permutation(view_node.attrs, tuple(src.shape))
        if inverse is None:
            return
        strides = normalized(View(tuple(src.shape), inverse)).strides
        writer = self._writer(src)
        if writer is not None and writer.op in _UNIT_INNER_STRIDE and strides[-1] != 1:
            return  # SqueezeBERT's attention output permuted to [B, H, D, S]: copied after
        if output_name is not None:
            self.out_storage[dest.name] = output_name
        out = self._new_storage(dest, storage_name=src.name)
        self.preset[src.name] = TensorArg(out.storage, src.dtype, tuple(src.shape), strides, 0)

    def _writes_any_view(self, src: Value) -> bool:
        """Whether the kernel writing `src` can write it through any strided view: not a GEMM
        (2-D row-major views), but a convolution chain's end (its pixel rows' own strides: a
        model's NCHW output is written in place, no copy after the last conv)."""
        chain = self.chain_of.get(src.name)
        if chain is not None:
            return chain.root.op == Op.CONV and chain.end == src and len(src.shape) in (3, 4)
        return _kernel_writes_strided(self._writer(src))

    # ------------------------------------------------------------------ driver
    def run(self) -> Program:
        states = lower_state.state_names(self.g)
        for v in self.g.inputs:
            kind = "state" if v.name in states else "input"
            self.storages[v.name] = Storage(v.name, kind, v.dtype, tuple(v.shape))
            self.args[v.name] = contiguous(v.name, v.dtype, tuple(v.shape))
        for name, c in self.g.constants.items():
            self._add_weight(name, c.tensor, c.value)
            if c.fp8 is not None:
                self.fp8_sources[name] = c.fp8
        origins = {}
        for n in self.g.nodes:
            first = len(self.ops)
            try:
                self._lower_node(n)
            except SymbolicError as e:  # a size decision the dims' ranges leave open
                self._fail(n, f"{e}: narrow the dims' ranges or keep that dim static")
            if n.loc is not None and n.loc.file:
                origins.update((op.out.storage, str(n.loc)) for op in self.ops[first:])
        self._write_outputs()
        # an op that writes nothing (a cat's empty part: Phi-3's rotary pass-through at a
        # rotary factor of 1) would still be a launch
        self.ops = [op for op in self.ops if math.prod(op.out.shape) != 0]
        self.ops = fuse_kv_write(self.ops, self.storages)
        self._drop_unread_weights()
        return Program([v.name for v in self.g.inputs if v.name not in states],
                       [o.name for o in self.g.outputs
                        if not lower_state.is_state_output(o.name)],
                       self.storages, self.ops, self.weights, self._summary(),
                       list(self.g.meta.get("symbols", [])), dict(self.g.meta.get("example", {})),
                       states=states, origins=origins,
                       fp8_sources={k: v for k, v in self.fp8_sources.items()
                                    if k in self.weights})

    def _drop_unread_weights(self) -> None:
        """Constants no kernel reads: a matmul's [K, N] weight once its transposed copy was
        made (GPT-2's Conv1D), a table folded away with its lookup. Kept, each would be a
        second copy in the bundle."""
        read = {t.storage for op in self.ops for t in op_inputs(op)}
        for name in [n for n in self.weights if n not in read]:
            del self.weights[name]
            del self.storages[name]

    def _summary(self) -> dict:
        return {"fused_nodes": len(self.g.nodes), "fused_ops": self.g.count_ops(),
                "kernel_ops": kernel_op_counts(self.ops)}

    def _lower_node(self, n: Node) -> None:
        name = n.output.name
        if n.op == Op.AS_STRIDED and name not in self.chain_of:
            self.args[name] = self._view_or_copy(self.args[n.inputs[0].name], n)
        elif name in self.chains:
            if n.op == Op.CONV:
                lower_conv.lower_conv(self, self.chains[name])
            else:
                self._lower_gemm(self.chains[name])
        elif name in self.chain_of or name in self.absorbed or name in self.fused_casts.skip:
            return  # emitted with its GEMM / its pointwise root / its reduction
        elif n.op in O.ELEMENTWISE:
            self._lower_pointwise(n)
        elif n.op == Op.COPY:
            if name not in self.args:
                self._copy(self.args[n.inputs[0].name], self._new_storage(n.output))
        elif n.op == Op.CAT:
            self._lower_cat(n)
        elif n.op in _LOWER:
            _LOWER[n.op](self, n)
        else:
            self._fail(n, "no kernel op implements it (supported after fusion: linear/matmul "
                          "+ epilogue, embedding, sdpa, rms_norm, layer_norm, (log_)softmax, "
                          "sum/mean/amax/amin, cumsum, rope, elementwise, cat, views, conv, pool)")

    def _fail(self, n: Node, why: str):
        raise LoweringError(f"cannot lower {n.op.value} node %{n.output.name} "
                            f"({n.loc or 'no source'}): {why}")

    # ------------------------------------------------------------------ storages and views
    def _new_storage(self, v: Value, storage_name: str | None = None) -> TensorArg:
        """The contiguous TensorArg `v` is written to (its output storage if it is one)."""
        if v.name in self.preset:
            self.args[v.name] = self.preset[v.name]
            return self.preset[v.name]
        name = self.out_storage.get(v.name) or storage_name or v.name
        kind = "output" if v.name in self.out_storage else "intermediate"
        self.storages[name] = Storage(name, kind, v.dtype, tuple(v.shape))
        arg = contiguous(name, v.dtype, tuple(v.shape))
        self.args[v.name] = arg
        return arg

    def _add_weight(self, name: str, tensor, v: Value) -> TensorArg:
        self.storages[name] = Storage(name, "weight", v.dtype, tuple(v.shape))
        self.weights[name] = tensor
        self.args[name] = contiguous(name, v.dtype, tuple(v.shape))
        return self.args[name]

    def _view(self, base: TensorArg, attrs) -> TensorArg:
        inner = View(base.shape, base.strides, base.offset)
        v = compose(inner, View(attrs.shape, attrs.strides, attrs.offset))
        if v is None:
            raise LoweringError(f"view {attrs} of {base} is not strided")
        return TensorArg(base.storage, base.dtype, v.shape, v.strides, v.offset)

    def _view_or_copy(self, base: TensorArg, n: Node) -> TensorArg:
        """The view node `n` of `base`; of a contiguous copy of it where `base` is laid out so
        that the view is no strided view of it (e.g. a softmax over a middle dim is stored
        with that dim last, and a reshape merges it with its neighbour)."""
        try:
            return self._view(base, n.attrs)
        except LoweringError:
            if base.is_contiguous():
                raise
        return self._view(self._materialize(base, n.inputs[0].name), n.attrs)

    def _copy(self, src: TensorArg, dst: TensorArg) -> None:
        self.ops.append(PointwiseOp((src,), pw.identity_expr(), dst))

    def _fresh_storage_name(self, base: str) -> str:
        """`base`, or `base<i>`: a name no storage and no value has (both may become
        storages)."""
        name, i = base, 0
        while name in self.storages or name in self.value_names:
            i += 1
            name = f"{base}{i}"
        return name

    def _materialize(self, arg: TensorArg, hint: str) -> TensorArg:
        """A contiguous copy of `arg` in a fresh intermediate storage."""
        name = self._fresh_storage_name(f"{hint}_contig")
        self.storages[name] = Storage(name, "intermediate", arg.dtype, arg.shape)
        dst = contiguous(name, arg.dtype, arg.shape)
        self._copy(arg, dst)
        return dst

    def _unit_inner(self, arg: TensorArg, hint: str) -> TensorArg:
        """`arg`, or a contiguous copy of it where its last dim is not contiguous."""
        if arg.shape[-1] != 1 and arg.strides[-1] != 1:
            return self._materialize(arg, hint)
        return arg

    def _as_2d(self, arg: TensorArg, hint: str, inner_unit: bool = True) -> TensorArg:
        """arg viewed as [prod(leading dims), last dim] (copied first if that is no view)."""
        flat = _flatten_2d(arg)
        if flat is None or (inner_unit and flat.strides[1] != 1 and flat.shape[1] > 1):
            flat = _flatten_2d(self._materialize(arg, hint))
        return flat

    # ------------------------------------------------------------------ kernel ops
    def _lower_gemm(self, chain: Chain) -> None:
        root = chain.root
        a_arg = self._as_2d(self.args[root.inputs[0].name], root.inputs[0].name)
        b_arg = self._gemm_b(root)
        epilogue = self._epilogue(chain)
        out = self._new_storage(chain.end)
        out2d = _flatten_2d(out)
        op = GemmOp(a_arg, b_arg, out2d, tuple(epilogue))
        self.ops.append(op if self._sixteen_bit() else lower_conv.f32_gemm_as_conv(op) or op)

    def _sixteen_bit(self) -> bool:
        """The model computes in bf16/f16 (a weight or input of that dtype). An f32 GEMM in such
        a model (an MoE router over an f32 norm) wants f32 products, which tf32 is not (a
        near-tie may pick another expert): it stays a GEMM, which the template refuses with
        what to do, rather than turning into a tf32 convolution."""
        if not hasattr(self, "_narrow"):
            values = [c.value for c in self.g.constants.values()] + list(self.g.inputs)
            self._narrow = any(v.dtype in (DType.BF16, DType.F16) for v in values)
        return self._narrow

    def _epilogue(self, chain: Chain) -> list:
        """The epilogue steps of a GEMM or CONV chain (a linear's own bias first)."""
        root = chain.root
        epilogue = []
        if root.op == Op.LINEAR and len(root.inputs) == 3:
            epilogue.append(EpBias(_as_1d(self.args[root.inputs[2].name])))
        for s in chain.steps:
            if s.kind == "swiglu":
                epilogue.append(EpSwiGLU(s.node.attrs.group))
            elif s.kind == "scale":
                epilogue.append(EpScale(self._scale_arg(s)))
            elif s.kind == "act":
                epilogue.append(EpAct(s.act))
            elif s.kind == "bias":
                epilogue.append(EpBias(_as_1d(self.args[s.operand.name])))
            elif s.kind in ("add", "mul"):
                other = self._as_2d(self.args[s.operand.name], s.operand.name, False)
                epilogue.append(EpAdd(other) if s.kind == "add" else EpMul(other))
        return epilogue

    def _scale_arg(self, step) -> TensorArg:
        """EpScale's f32 operand, (1,) or (N,): an f32 graph input or constant is read where
        it is; a number, or a constant of another dtype, becomes an f32 weight (made here,
        once per constant, deterministically: scripts/make-weights checks every weight's
        bytes)."""
        import torch

        v = step.operand
        if v is not None and v.dtype == DType.F32:
            arg = _as_1d(self.args[v.name])
            return arg if arg.shape else TensorArg(arg.storage, arg.dtype, (1,), (1,), arg.offset)
        if v is None:
            name, tensor = f"{step.node.output.name}.scale", torch.tensor([step.scale])
        else:
            name, tensor = f"{v.name}.f32", self.g.constants[v.name].tensor.reshape(-1)
        if name not in self.weights:
            name = self._fresh_storage_name(name)
            tensor = tensor.to(torch.float32).contiguous()
            self._add_weight(name, tensor, Value(name, DType.F32, tuple(tensor.shape)))
        return self.args[name]

    def _gemm_b(self, root: Node) -> TensorArg:
        """The [N, K] operand: a linear's weight, or a matmul's [K, N] operand transposed
        (a constant once at build time, anything else by a copy: TMA needs unit inner
        strides)."""
        b = root.inputs[1]
        if root.op == Op.LINEAR:
            return self._as_2d(self.args[b.name], b.name)
        if len(b.shape) != 2:  # batched ones are bmm ops (gemm_chain.is_batched_matmul)
            self._fail(root, f"a matmul with a {len(b.shape)}-D second operand")
        if b.name in self.g.constants:
            t_name = f"{b.name}.T"
            tensor = self.g.constants[b.name].tensor.t().contiguous()
            return self._add_weight(t_name, tensor, Value(t_name, b.dtype, tuple(tensor.shape)))
        arg = self.args[b.name]
        transposed = TensorArg(arg.storage, arg.dtype, arg.shape[::-1], arg.strides[::-1],
                               arg.offset)
        return self._materialize(transposed, f"{b.name}_t")

    def _lower_pointwise(self, n: Node) -> None:
        leaves: list[Value] = []
        expr = pw.build_expr(n, self.producers, self.absorbed, leaves)
        inputs = tuple(self.args[v.name] for v in leaves)
        self.ops.append(PointwiseOp(inputs, expr, self._new_storage(n.output)))

    def _lower_cat(self, n: Node) -> None:
        """Copies of the inputs that were not written in place (see _plan_cat)."""
        out = self.args[n.output.name]
        dim, start = n.attrs.dims[0], 0
        for v in n.inputs:
            part = TensorArg(out.storage, out.dtype, tuple(v.shape), out.strides,
                             out.offset + start * out.strides[dim])
            if v.name not in self.in_place:
                self._copy(self.args[v.name], part)
            start += v.shape[dim]

    def _lower_sdpa(self, n: Node) -> None:
        # the kernels read rows of D contiguous elements: an operand seen through a transpose
        # (einsum("bhlk,bhtk->bhlt") materialises keys as [.., D, S]) is copied so first
        q, k, v = (self._unit_inner(self.args[x.name], x.name) for x in n.inputs[:3])
        if q.shape[1] != k.shape[1] and not n.attrs.gqa:
            self._fail(n, "query and key head counts differ without enable_gqa")
        scale = n.attrs.scale if n.attrs.scale is not None else 1.0 / math.sqrt(q.shape[-1])
        mask = positions = bias = None
        if len(n.inputs) == 4 and n.attrs.positions:
            positions = self.args[n.inputs[3].name]
        elif len(n.inputs) >= 4:  # broadcast to the scores: stride 0 where it repeats
            scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
            mask = broadcast_to(self.args[n.inputs[3].name], scores)
            if len(n.inputs) == 5:  # a per-head bias beside the mask (attention_terms.py)
                bias = broadcast_to(self.args[n.inputs[4].name], scores)
        out = self._new_storage(n.output)
        self.ops.append(AttentionOp(q, k, v, out, n.attrs.causal, float(scale), mask,
                                    positions, n.attrs.window, float(n.attrs.softcap), bias))

    def _lower_bmm(self, n: Node) -> None:
        """A matmul of two operands with batch dims (gemm_chain.is_batched_matmul): both
        broadcast to the output's batch dims and seen as [batch, rows, cols]."""
        batch = tuple(n.output.shape[:-2])
        a, b = (self._batched(self.args[v.name], batch, v.name) for v in n.inputs)
        out = self._batched(self._new_storage(n.output), batch, n.output.name)
        self.ops.append(BmmOp(a, b, out))

    def _batched(self, arg: TensorArg, batch: tuple, hint: str) -> TensorArg:
        full = broadcast_to(arg, batch + tuple(arg.shape[-2:]))
        merged = lower_reductions.merge_dims(full.shape[:-2], full.strides[:-2])
        if merged is None:  # batch dims that walk memory unevenly: a contiguous copy
            full = broadcast_to(self._materialize(full, hint), full.shape)
            merged = lower_reductions.merge_dims(full.shape[:-2], full.strides[:-2])
        return TensorArg(full.storage, full.dtype, (merged[0],) + tuple(full.shape[-2:]),
                         (merged[1],) + tuple(full.strides[-2:]), full.offset)

    def _lower_rope(self, n: Node) -> None:
        x, cos, sin = (self.args[v.name] for v in n.inputs)
        if len(x.shape) != 4:
            self._fail(n, f"rope input must be [B, H, S, D], got {list(x.shape)}")
        out = self._new_storage(n.output)
        a = n.attrs  # a.dtype is out's dtype: the kernel's f32 math is rounded once to it
        self.ops.append(RopeOp(x, _rope_table(cos), _rope_table(sin), out, a.interleaved,
                               a.rotary_dim))

    def _lower_embedding(self, n: Node) -> None:
        table = self._as_2d(self.args[n.inputs[0].name], n.inputs[0].name)  # unit inner stride
        ids = self.args[n.inputs[1].name]
        if not ids.shape:  # one id
            ids = TensorArg(ids.storage, ids.dtype, (1,), (1,), ids.offset)
        if math.prod(ids.shape) == 0:
            self._fail(n, "an embedding lookup of no ids")
        ids2d = _flatten_2d(ids) or _flatten_2d(self._materialize(ids, n.inputs[1].name))
        out = _flatten_2d(self._new_storage(n.output))
        self.ops.append(EmbeddingOp(table, ids2d, out))

    def _lower_rms_norm(self, n: Node) -> None:
        if n.attrs.ndim != 1:
            self._fail(n, "rms_norm over more than the last dimension")
        x = self._as_2d(self.args[n.inputs[0].name], n.inputs[0].name)
        weight = _as_1d(self.args[n.inputs[1].name]) if len(n.inputs) > 1 else None
        out = _flatten_2d(self._new_storage(n.output))
        self.ops.append(RMSNormOp(x, weight, out, n.attrs.eps))

    def _write_outputs(self) -> None:
        """Outputs no kernel wrote directly (views, inputs, weights, repeats) get a copy."""
        lower_state.write_state_outputs(self)
        for o in self.g.outputs:
            if (self.out_storage.get(o.value.name) == o.name
                    or lower_state.is_state_output(o.name)):
                continue
            v = o.value
            self.storages[o.name] = Storage(o.name, "output", v.dtype, tuple(v.shape))
            self._copy(self.args[v.name], contiguous(o.name, v.dtype, tuple(v.shape)))


_LOWER = {Op.SDPA: _Lowering._lower_sdpa, Op.ROPE: _Lowering._lower_rope,
          Op.MATMUL: _Lowering._lower_bmm,
          Op.EMBEDDING: _Lowering._lower_embedding,
          Op.RMS_NORM: _Lowering._lower_rms_norm, Op.POOL: lower_conv.lower_pool,
          Op.SCATTER_ROWS: lower_state.lower_scatter_rows,
          **lower_reductions.RULES, **lower_moe.RULES}
