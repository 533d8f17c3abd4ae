"""What can be tuned, and how: the candidate configs of one kernel op and how to compile one.

A candidate is a JSON-able dict `{"template": <name>, **fields}` — the same dict the tuning
database stores for a winner, so a build can compile exactly what was measured. The first
candidate of every op is the one a build without tuning data compiles (the heuristic), which
makes it the natural reference for correctness and the baseline of the speed-up.

Tunable today: GEMMs (Triton tile and split-K configs, CuTeDSL tiles/clusters), attention
(Triton tile/stage configs), RMSNorm and RoPE (rows or positions per program, warps) and
LayerNorm / softmax / last-dim reductions (warps). Generated pointwise kernels have one config
(a fixed block; nothing to choose).
"""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.kernels.spec import (
    AttentionOp, GemmOp, KernelOp, LayerNormOp, ReduceOp, RMSNormOp, RopeOp, SoftmaxOp, Target,
)

LEVELS = ("fast", "full")
# per backend, how many configs `fast` measures (the heuristic's is always among them)
_FAST = {"gemm.triton": 6, "gemm.cutedsl": 3, "attention.triton": 4, "rmsnorm.triton": 3,
         "rope.triton": 3}

# Source files whose change invalidates measurements of each op family (relative to kernels/).
# Only what makes a config's kernel: triton/gemm_heuristic.py (which config a shape gets
# without measurements, and the candidate space) is left out on purpose.
_GEMM_SOURCES = ("spec.py", "triton/gemm.py", "triton/gemm_configs.py", "triton/gemm_splitk.py",
                 "triton/gemm_epilogue.py", "triton/compile.py", "triton/_common.py",
                 "cutedsl/gemm.py", "cutedsl/epilogue.py", "cutedsl/fragments.py",
                 "cutedsl/compile.py", "cutedsl/build.py", "cutedsl/slots.py")
_ATTENTION_SOURCES = ("spec.py", "triton/attention.py", "triton/compile.py", "triton/_common.py")
_TRITON_COMMON = ("spec.py", "triton/compile.py", "triton/_common.py")
_ROWWISE = ("triton/_rowwise.py", "triton/_rowwise_jit.py")
# Row-wise and RoPE templates: module under aotpack.kernels.triton, its sources.
_SMALL = {RMSNormOp: ("rmsnorm", _TRITON_COMMON + ("triton/rmsnorm.py",) + _ROWWISE),
          LayerNormOp: ("layernorm", _TRITON_COMMON + ("triton/layernorm.py",) + _ROWWISE),
          SoftmaxOp: ("softmax", _TRITON_COMMON + ("triton/softmax.py",) + _ROWWISE),
          ReduceOp: ("reduce", _TRITON_COMMON + ("triton/reduce.py",) + _ROWWISE),
          RopeOp: ("rope", _TRITON_COMMON + ("triton/rope.py",))}


@dataclass(frozen=True)
class Family:
    template: str  # key component: which family of kernels competes for the op
    sources: tuple[str, ...]


def family(op: KernelOp) -> Family | None:
    """The tunable family of `op`, or None when it has a single config."""
    if isinstance(op, GemmOp):
        return Family("gemm", _GEMM_SOURCES)
    if isinstance(op, AttentionOp):
        return Family("attention", _ATTENTION_SOURCES)
    if type(op) in _SMALL:
        name, sources = _SMALL[type(op)]
        return Family(name, sources)
    return None


def candidate_name(config: dict) -> str:
    fields = " ".join(f"{k}={_short(v)}" for k, v in config.items() if k != "template")
    return f"{config['template']} {fields}".strip()


def _short(v) -> str:
    return {True: "1", False: "0"}.get(v, str(v)) if isinstance(v, bool) else str(v)


# ----------------------------------------------------------------------------- GEMM
def _triton_gemm_configs(op: GemmOp, target: Target) -> list[dict]:
    from aotpack.kernels.triton import gemm, gemm_heuristic as gh

    M, K = op.a.shape
    N = op.b.shape[0]
    heuristic = gemm.config_for(op, target)
    space = gh.candidate_configs(M, N, K, op.a.dtype, target, op.out.dtype)
    out = []
    rest = [c for c in space if c != heuristic]
    # the extras early (after the heuristic's two nearest neighbours): `fast` measures them too
    for cfg in [heuristic] + rest[:2] + _splitk_extras(M, N, K) + rest[2:]:
        if gemm.supports_config(op, cfg) is not None:
            continue
        d = {"template": "gemm.triton", **cfg.as_dict()}
        if d not in out:
            out.append(d)
    return out


def _splitk_extras(M: int, N: int, K: int) -> list:
    """Split-K tiles the heuristic's neighbourhood misses for 64 < M <= 128: 64-row activation
    tiles (two per M) and 64-row weight tiles at 2-16 splits. At M=128 N=1024 the best split-K
    config (BN=64 BM=128 x8) ran at 0.95x cuBLAS on the H200, the tile configs lower."""
    from aotpack.kernels.triton import gemm_configs as gc

    if not 64 < M <= 128:
        return []
    return [gc.SplitKConfig(BN=64, BM=bm, BK=64, SPLIT_K=sk, num_warps=4, num_stages=stages)
            for bm in (64, 128) for sk in (2, 4, 8, 16) for stages in (4, 6)
            if sk <= gc.cdiv(K, 64)]


def _cutedsl_gemm_configs(op: GemmOp) -> list[dict]:
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        return []
    cute_build.ensure_env()
    from aotpack.kernels.cutedsl import compile as cute

    if cute.supports(op) is not None:
        return []
    out = []
    for cfg in [cute.default_config(op)] + cute.candidates(op):
        d = {"template": "gemm.cutedsl", "tile_m": cfg.tile_m, "tile_n": cfg.tile_n,
             "cluster_m": cfg.cluster_m, "cluster_n": cfg.cluster_n,
             "raster_along_m": cfg.raster_along_m, "swizzle": cfg.swizzle}
        if d not in out:
            out.append(d)
    # the persistent scheduler's other raster order for the two big tiles (L2 reuse of A
    # instead of B); the GPU check ran it (128x128, cluster 1x2) correctly on 2026-11-30
    for d in [c for c in out if c["tile_m"] == 128 and c["cluster_m"] * c["cluster_n"] == 1]:
        flipped = dict(d, raster_along_m=not d["raster_along_m"])
        if flipped not in out:
            out.append(flipped)
    # Decode-sized M: narrow tiles put more CTAs on the weights (M=128, N=4096: a 64x128 tile
    # fills 64 of 132 SMs, 64x64 fills 128), with no split-K partials to write and reduce.
    from aotpack.kernels.spec import swiglu_group

    g = swiglu_group(op) or 0
    # 224 = 14336 / 64 and 192 = 6144 / 32: whole waves of 64-row tiles for unfused GEMMs of
    # Llama-3 widths (a fused SwiGLU keeps tiles that hold whole gate/up pairs of 64).
    narrow = [(tm, 64, c) for tm in (64, 128) for c in ((1, 1), (2, 1), (1, 2))]
    narrow += [(64, tn, c) for tn in (224, 192) for c in ((1, 1), (2, 1))]
    if out and op.out.shape[0] <= 128:
        extra = []
        for tm, tn, (cm, cn) in narrow:
            d = dict(out[0], tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn,
                     raster_along_m=True)
            if d not in out and d not in extra and not (g and tn % (2 * g)):
                extra.append(d)
        out = out[:1] + extra + out[1:]  # right after the default: `fast` measures them too
    return out


def _gemm_candidates(op: GemmOp, target: Target, gemm_backend: str) -> list[dict]:
    triton = _triton_gemm_configs(op, target) if gemm_backend in ("triton", "auto") else []
    cute = _cutedsl_gemm_configs(op) if gemm_backend in ("cutedsl", "auto") else []
    first = triton[:1]
    if gemm_backend == "cutedsl" or (gemm_backend == "auto" and cute and _auto_picks_cutedsl(op)):
        first = cute[:1]
    return first + [c for c in triton + cute if c not in first]


def _auto_picks_cutedsl(op: GemmOp) -> bool:
    from aotpack.kernels import AUTO_CUTEDSL_MIN_M

    return op.out.shape[0] >= AUTO_CUTEDSL_MIN_M


# ----------------------------------------------------------------------------- small kernels
def _small_configs(op: KernelOp) -> list[dict]:
    """Memory-bound row-wise kernels and RoPE: rows (or positions) per program and warps
    around the default; the first is the default (what `plan` uses without a config)."""
    name = _SMALL[type(op)][0]
    if isinstance(op, RopeOp):
        from aotpack.kernels.triton import rope

        base = rope.default_config(op.x.shape[3])
        variants = [{"num_warps": 8}, {"BLOCK_S": base["BLOCK_S"] * 2},
                    {"BLOCK_S": max(1, base["BLOCK_S"] // 2)},
                    {"BLOCK_S": base["BLOCK_S"] * 2, "num_warps": 8}]
    elif isinstance(op, RMSNormOp):
        from aotpack.kernels.triton import rmsnorm

        base = rmsnorm.default_config(op.x.shape[1])
        rows, block = base["ROWS"], base["BLOCK_C"]
        variants = [{"num_warps": w} for w in (4, 8, 16)]
        if block * rows * 2 <= 8192:
            variants += [{"ROWS": rows * 2}, {"ROWS": rows * 2, "num_warps": 8}]
        if rows > 1:
            variants.append({"ROWS": rows // 2})
    else:  # layernorm / softmax / reduce: their block shapes depend on the row length
        base = {}
        variants = [{"num_warps": w} for w in (2, 4, 8, 16)]
    configs = [{"template": f"{name}.triton", **base}]
    for v in variants:
        c = {"template": f"{name}.triton", **base, **v}
        if c not in configs:
            configs.append(c)
    return configs


# ----------------------------------------------------------------------------- public
def candidates(op: KernelOp, target: Target, *, level: str = "full",
               gemm_backend: str = "auto") -> list[dict]:
    """Candidate configs of `op`, heuristic first; [] when the op is not tunable."""
    if level not in LEVELS:
        raise ValueError(f"unknown tuning level {level!r}: {' or '.join(LEVELS)}")
    if isinstance(op, GemmOp):
        configs = _gemm_candidates(op, target, gemm_backend)
    elif isinstance(op, AttentionOp):
        from aotpack.kernels.triton import attention

        configs = [{"template": "attention.triton", **c}
                   for c in attention.candidate_configs(op)]
    elif type(op) in _SMALL:
        configs = _small_configs(op)
    else:
        return []
    if level == "fast":
        kept, seen = [], {}
        for i, c in enumerate(configs):
            n = seen.get(c["template"], 0)
            if i == 0 or n < _FAST.get(c["template"], 4):
                kept.append(c)
                seen[c["template"]] = n + 1
        configs = kept
    return configs


def compile_candidate(op: KernelOp, target: Target, config: dict):
    """Launches of `op` compiled with exactly `config` (a candidate dict). Raises ValueError /
    RuntimeError when the config cannot compile this op on `target`."""
    fields = {k: v for k, v in config.items() if k != "template"}
    template = config.get("template")
    if template == "gemm.triton":
        from aotpack.kernels.triton import gemm, gemm_configs as gc

        return gemm.compile_config(op, gc.config_from_dict(fields), target)
    if template == "gemm.cutedsl":
        from aotpack.kernels.cutedsl import build as cute_build

        if not cute_build.available():
            raise RuntimeError("this candidate needs CuTeDSL on the build host: "
                               "pip install nvidia-cutlass-dsl==4.8.1")
        cute_build.ensure_env()
        from aotpack.kernels.cutedsl import compile as cute

        return cute.compile_config(op, cute.default_config(op, **fields), target)
    if template == "attention.triton":
        from aotpack.kernels.triton import attention

        return attention.compile(op, target, fields)
    small = {f"{name}.triton": name for name, _ in _SMALL.values()}
    if template in small:
        import importlib

        module = importlib.import_module(f"aotpack.kernels.triton.{small[template]}")
        return module.compile(op, target, fields)
    raise ValueError(f"unknown tuning template {template!r} (a database from a newer aotpack?)")
