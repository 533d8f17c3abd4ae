"""One contract for every kind of kernel op, registered in one place.

A `Template` says, for its op kind:
 - `supports(op)`: None, or why it cannot run the op;
 - `bucket_size(op)`: the size that splits a symbolic op into variants (GEMM: M; attention:
   the query length; row-wise kernels: the rows), or None when one variant serves every size;
 - `default_config(op, target, backend)`: the config a build compiles without measurements,
   for a concrete op (a symbolic op is asked at each bucket's representative size);
 - `candidates(op, target, backend)`: the configs `aotpack tune` measures, default first;
 - `compile(op, config, target)`: launches (cubins + slots) of exactly that config; the op may
   be symbolic: sizes become expressions the runtime evaluates;
 - `reference(op, env)`: the semantics in torch (CPU);
 - `describe(op)`: one line for inspect and tuning jobs.
A config is a JSON-able dict whose "template" names the backend ("gemm.triton"), the form the
tuning database stores (templates may share a backend's configs: GemmNormOp's are its GEMM's,
so dispatch is by op, never by config). Build, tuning, inspect and verify go through
`template_for(op)` and never dispatch on op types themselves. A new kernel kind is one
module with its kernel plus one Template here (or beside it, registered in `_REGISTRY`).

Templates' own heuristics (this file, gemm_template.py) are outside the tuning key: editing
them keeps measured records valid; `sources` lists what is inside it.
"""
from __future__ import annotations

import importlib

from aotpack.kernels.spec import (
    AttentionOp, ConvOp, EmbeddingOp, KernelOp, PoolOp, LayerNormOp, PointwiseOp, ReduceOp,
    RMSNormOp, RopeOp, ScanOp, BmmOp, TopkOp, SortOp, HistcOp, InversePermOp, GroupedMmOp,
    KvWriteOp, ScatterRowsOp,
    SoftmaxOp, Target,
)

# Source files (relative to aotpack/kernels/) that make each family's kernels: an edit to one
# invalidates the family's tuning records (aotpack/tuning/keys.py).
TRITON_COMMON = ("spec.py", "triton/compile.py", "triton/_common.py")
_ROWWISE = ("triton/_rowwise.py", "triton/_rowwise_jit.py")


class BackendCannotCompile(ValueError):
    """The chosen backend cannot run this op (a user choice to revisit, not a compiler bug)."""


class Template:
    name = ""  # family: the tuning key's template component
    op_type: type = object
    module = ""  # aotpack.kernels.triton.<module> (plan / compile)
    sources: tuple[str, ...] = TRITON_COMMON
    tunable = False
    fast = 4  # candidates per backend that `aotpack tune --level fast` measures

    # ------------------------------------------------------------------ contract
    def supports(self, op: KernelOp) -> str | None:
        return None

    def bucket_size(self, op: KernelOp):
        return None

    def default_config(self, op: KernelOp, target: Target, backend: str = "triton") -> dict:
        return {"template": f"{self.name}.triton"}

    def candidates(self, op: KernelOp, target: Target, backend: str = "auto") -> list[dict]:
        return [self.default_config(op, target)]

    def compile(self, op: KernelOp, config: dict, target: Target) -> list:
        self._check_template(config)
        return self.triton().compile(op, target, _fields(config))

    def reference(self, op: KernelOp, env) -> None:
        importlib.import_module(f"aotpack.kernels.reference.{self.module}").reference(op, env)

    def describe(self, op: KernelOp) -> str:
        shape = "x".join(str(n) for n in getattr(getattr(op, "x", None), "shape", ()))
        name = type(op).__name__.removesuffix("Op").lower()
        return f"{name} {shape} {op.out.dtype.value}" if shape else name

    def tuned_as(self, op: KernelOp):
        """(op, template) whose tuning record serves `op` when it has none of its own, or
        None (GemmNormOp: its GEMM's)."""
        return None

    def fast_limit(self, backend_template: str) -> int:
        """How many candidates of one backend `aotpack tune --level fast` measures."""
        return self.fast

    # ------------------------------------------------------------------ helpers
    def triton(self):
        return importlib.import_module(f"aotpack.kernels.triton.{self.module}")

    def _check_template(self, config: dict) -> None:
        want = f"{self.name}.triton"
        if config.get("template", want) != want:
            raise ValueError(f"{self.name}: config of another template: {config}")


def _fields(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "template"}


class AttentionTemplate(Template):
    name, op_type, module, tunable = "attention", AttentionOp, "attention", True
    sources = ("spec.py", "triton/attention.py", "triton/attention_masked.py",
               "triton/attention_positional.py",
               "triton/_attention_jit.py", "triton/compile.py", "triton/_common.py")

    def bucket_size(self, op):
        return op.q.shape[2]  # the decode-sized tiles depend on the query length

    def default_config(self, op, target, backend="triton"):
        return {"template": "attention.triton", **self.triton().default_config(op)}

    def candidates(self, op, target, backend="auto"):
        return [{"template": "attention.triton", **c}
                for c in self.triton().candidate_configs(op)]

    def describe(self, op):
        b, hq, sq, d = op.q.shape
        mask = "" if op.mask is None else f" mask={op.mask.dtype.value}"
        mask += "" if op.bias is None else f" bias={op.bias.dtype.value}"
        if op.kv_limit is not None:
            mask = " positions" + (f" window={op.window}" if op.window else "")
        if op.softcap > 0:
            mask += f" softcap={op.softcap:g}"
        return (f"attention B={b} Hq={hq} Hkv={op.k.shape[1]} Sq={sq} Skv={op.k.shape[2]} "
                f"D={d}{' causal' if op.causal else ''}{mask}")


class RowwiseTemplate(Template):
    """RMSNorm, LayerNorm, softmax and last-dim reductions: rows per program and warps."""

    tunable = True

    def __init__(self, name: str, op_type: type, extra_sources=()):
        self.name, self.op_type, self.module = name, op_type, name
        self.fast = 3 if name == "rmsnorm" else 4
        self.sources = TRITON_COMMON + (f"triton/{name}.py",) + tuple(extra_sources)

    def bucket_size(self, op):
        return op.x.shape[0]  # short rows are packed several per program, up to the rows

    def default_config(self, op, target, backend="triton"):
        if isinstance(op, RMSNormOp):
            return {"template": "rmsnorm.triton", **self.triton().default_config(op.x.shape[1])}
        return {"template": f"{self.name}.triton"}  # block shapes follow the row length

    def candidates(self, op, target, backend="auto"):
        base = self.default_config(op, target)
        if isinstance(op, RMSNormOp):
            rows, block = base["ROWS"], base["BLOCK_C"]
            variants = [{"num_warps": w} for w in (4, 8, 16)]
            if block * rows * 2 <= 8192:
                variants += [{"ROWS": rows * 2}, {"ROWS": rows * 2, "num_warps": 8}]
            if rows > 1:
                variants.append({"ROWS": rows // 2})
        else:
            variants = [{"num_warps": w} for w in (2, 4, 8, 16)]
        return _with_variants(base, variants)


class RopeTemplate(Template):
    name, op_type, module, tunable, fast = "rope", RopeOp, "rope", True, 3
    sources = TRITON_COMMON + ("triton/rope.py",)

    def default_config(self, op, target, backend="triton"):
        return {"template": "rope.triton", **self.triton().default_config(op.x.shape[3])}

    def candidates(self, op, target, backend="auto"):
        base = self.default_config(op, target)
        return _with_variants(base, [{"num_warps": 8}, {"BLOCK_S": base["BLOCK_S"] * 2},
                                     {"BLOCK_S": max(1, base["BLOCK_S"] // 2)},
                                     {"BLOCK_S": base["BLOCK_S"] * 2, "num_warps": 8}])


class KvWriteTemplate(Template):
    """A decoder layer's query rope + key/value cache write (triton/kv_write.py). Bucketed by
    the step's tokens: one per program at decode, blocks of rows for a prefill."""

    # not tuned: the tuner fills an int64 input with small random values, so its cache rows
    # repeat, and which token's store wins a repeated row depends on the config (every
    # candidate would look wrong); the kernel is a few us of stores either way
    name, op_type, module, tunable = "kv_write", KvWriteOp, "kv_write", False
    sources = TRITON_COMMON + ("triton/kv_write.py", "triton/rope.py")  # rope_rows

    def bucket_size(self, op):
        return op.rows.shape[0]

    def default_config(self, op, target, backend="triton"):
        rows = op.rows.shape[0]
        cfg = self.triton().default_config(op)
        if isinstance(rows, int) and rows <= 16:  # decode: more programs beat fuller ones
            cfg["ROWS"] = 1
        return {"template": "kv_write.triton", **cfg}

    def describe(self, op):
        b, hkv, s, d = op.k.shape
        hq = op.q.shape[1] if op.rotates else 0
        rope = ("" if not op.rotates else
                f" R={op.rot_dim}" + (" interleaved" if op.interleaved else ""))
        return (f"kv_write B={b} S={s} Hq={hq} Hkv={hkv} D={d}{rope} "
                f"{op.k_cache.dtype.value}")


class EmbeddingTemplate(Template):
    name, op_type, module = "embedding", EmbeddingOp, "embedding"
    sources = TRITON_COMMON + ("triton/embedding.py",)


class PointwiseTemplate(Template):
    name, op_type, module = "pointwise", PointwiseOp, "pointwise"
    sources = TRITON_COMMON + ("triton/pointwise.py", "triton/_pointwise_codegen.py")


class ConvTemplate(Template):
    """Convolutions (triton/conv.py): an implicit GEMM on tensor cores with the GEMM's fused
    epilogue, or for depthwise convolutions a direct bandwidth-bound kernel. Bucketed by the
    output pixels M = N*OH*OW, which follow the batch (the tile sizes follow M)."""

    name, op_type, module, tunable, fast = "conv", ConvOp, "conv", True, 4
    sources = TRITON_COMMON + ("triton/conv.py", "triton/conv_configs.py",
                               "triton/gemm_epilogue.py")

    def supports(self, op):
        return self.triton().supports(op)

    def bucket_size(self, op):
        return op.rows

    def default_config(self, op, target, backend="triton"):
        return {"template": "conv.triton", **self._configs().default_config(op, target)}

    def candidates(self, op, target, backend="auto"):
        return [{"template": "conv.triton", **c}
                for c in self._configs().candidate_configs(op, target)]

    def compile(self, op, config, target):
        self._check_template(config)
        return self.triton().compile(op, target, _fields(config))

    def describe(self, op):
        n, h, w, c = op.x.shape
        oc = op.out_channels
        kind = "depthwise " if op.depthwise else ""
        geo = f"{op.kernel[0]}x{op.kernel[1]}/s{op.stride[0]}x{op.stride[1]}"
        if op.dilation != (1, 1):
            geo += f"/d{op.dilation[0]}x{op.dilation[1]}"
        if op.groups > 1 and not op.depthwise:
            geo += f"/g{op.groups}"
        epi = ",".join(type(s).__name__[2:].lower() +
                       (f":{s.act.value}" if hasattr(s, "act") else "") for s in op.epilogue)
        if op.x_scale is not None:
            geo += " x*scale[n,c]"
        return (f"{kind}conv N={n} {h}x{w}x{c} -> {op.out_hw[0]}x{op.out_hw[1]}x{oc} {geo} "
                f"{op.x.dtype.value}->{op.out.dtype.value} epilogue=[{epi}]")

    def _configs(self):
        return importlib.import_module("aotpack.kernels.triton.conv_configs")


class BmmTemplate(Template):
    name, op_type, module = "bmm", BmmOp, "bmm"
    sources = TRITON_COMMON + ("triton/bmm.py",)

    def describe(self, op):
        b, m, n = op.out.shape
        return f"bmm B={b} M={m} N={n} K={op.a.shape[2]} {op.a.dtype.value}"


class ScanTemplate(Template):
    name, op_type, module = "cumsum", ScanOp, "scan"
    sources = TRITON_COMMON + ("triton/scan.py",)


class RoutingTemplate(Template):
    """Mixture-of-experts routing (triton/routing.py): topk, sort, histc, inverse
    permutation. Small kernels; one config each."""

    module = "routing"
    sources = TRITON_COMMON + ("triton/routing.py",)

    def __init__(self, name: str, op_type: type):
        self.name, self.op_type = name, op_type


class GroupedMmTemplate(Template):
    """Bucketed by the routed rows T*k: decode (a few rows per expert) wants short, wide
    tiles; prefill square ones (triton/grouped_mm.default_config)."""

    name, op_type, module = "grouped_mm", GroupedMmOp, "grouped_mm"
    sources = TRITON_COMMON + ("triton/grouped_mm.py",)

    def bucket_size(self, op):
        return op.a.shape[0]

    def default_config(self, op, target, backend="triton"):
        return {"template": "grouped_mm.triton", **self.triton().default_config(op)}

    def describe(self, op):
        t, k = op.a.shape
        e, _, n = op.b.shape
        swiglu = f" swiglu={op.swiglu_group}" if op.swiglu_group else ""
        return f"grouped_mm T={t} E={e} K={k} N={n}{swiglu} {op.a.dtype.value}"


class PoolTemplate(Template):
    name, op_type, module = "pool", PoolOp, "pool"
    sources = TRITON_COMMON + ("triton/pool.py",)

    def describe(self, op):
        n, h, w, c = op.x.shape
        oh, ow = op.out.shape[1:3]
        return (f"{op.kind}pool N={n} {h}x{w}x{c} -> {oh}x{ow} k{op.kernel[0]}x{op.kernel[1]} "
                f"s{op.stride[0]}x{op.stride[1]} {op.x.dtype.value}")


def _with_variants(base: dict, variants: list[dict]) -> list[dict]:
    out = [base]
    for v in variants:
        c = {**base, **v}
        if c not in out:
            out.append(c)
    return out


# ---------------------------------------------------------------------------- registry
def _registry() -> dict[type, Template]:
    from aotpack.kernels.gemm_template import GemmNormTemplate, GemmTemplate

    templates = [GemmTemplate(), GemmNormTemplate(), AttentionTemplate(),
                 RowwiseTemplate("rmsnorm", RMSNormOp, _ROWWISE + ("triton/fp8.py",)),
                 RowwiseTemplate("layernorm", LayerNormOp, _ROWWISE),
                 RowwiseTemplate("softmax", SoftmaxOp, _ROWWISE),
                 RowwiseTemplate("reduce", ReduceOp, _ROWWISE),
                 RopeTemplate(), KvWriteTemplate(), EmbeddingTemplate(), PointwiseTemplate(),
                 ConvTemplate(),
                 PoolTemplate(), ScanTemplate(), BmmTemplate(),
                 RoutingTemplate("topk", TopkOp), RoutingTemplate("sort", SortOp),
                 RoutingTemplate("histc", HistcOp),
                 RoutingTemplate("inverse_perm", InversePermOp),
                 RoutingTemplate("scatter_rows", ScatterRowsOp), GroupedMmTemplate()]
    return {t.op_type: t for t in templates}


_REGISTRY: dict[type, Template] | None = None


def templates() -> list[Template]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _registry()
    return list(_REGISTRY.values())


def template_for(op: KernelOp) -> Template:
    templates()
    try:
        return _REGISTRY[type(op)]
    except KeyError:
        raise TypeError(f"no kernel template for {type(op).__name__}") from None
