"""The GEMM template (kernels/templates.py's contract) over its two backends: the Triton TMA /
split-K kernels (triton/gemm.py, gemm_splitk.py) and the CuTeDSL warp-specialized kernel
(cutedsl/). Configs: {"template": "gemm.triton", BM, BN, ...} or {"template": "gemm.cutedsl",
tile_m, tile_n, cluster_m, ...}. The backend choice and the candidate space are heuristics,
outside the tuning key (only `sources` are hashed)."""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.kernels.spec import GemmNormOp, GemmOp, Target, swiglu_group
from aotpack.kernels.templates import BackendCannotCompile, Template

GEMM_BACKENDS = ("triton", "cutedsl", "auto")
# auto: CuTeDSL only where the H200 measured it faster end to end (2026-11-30): the MLP at
# M=4096 (1.52 vs 1.57 ms); the Llama block at M=2048 was slower with it (1.45 vs 1.37 ms), and
# decode-sized M needs split-K, which it lacks. Tuning (per shape) replaces this rule.
AUTO_CUTEDSL_MIN_M = 4096


def cutedsl():
    """The CuTeDSL backend module, or None when nvidia-cutlass-dsl is not installed."""
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():
        return None
    cute_build.import_cutlass()  # before anything else imports it: the cubins must be sm_90a
    from aotpack.kernels.cutedsl import compile as cute

    return cute


def check_backend(backend: str) -> None:
    """Refuse an unknown backend, or cutedsl where CuTeDSL is missing, with what to do."""
    if backend not in GEMM_BACKENDS:
        raise ValueError(f"unknown GEMM backend {backend!r}: {' or '.join(GEMM_BACKENDS)}")
    if backend == "cutedsl" and cutedsl() is None:
        raise RuntimeError("the cutedsl GEMM backend needs CuTeDSL on the build host: "
                           "pip install nvidia-cutlass-dsl==4.8.1 (or use --gemm-backend triton)")


class GemmTemplate(Template):
    name, op_type, module, tunable = "gemm", GemmOp, "gemm", True
    sources = ("spec.py", "triton/gemm.py", "triton/gemm_configs.py", "triton/gemm_splitk.py",
               "triton/gemm_epilogue.py", "triton/fp8.py", "triton/compile.py", "triton/_common.py",
               "cutedsl/gemm.py", "cutedsl/epilogue.py", "cutedsl/compile.py", "cutedsl/build.py",
               "cutedsl/slots.py")
    fast = 6

    def fast_limit(self, backend_template):
        return 3 if backend_template == "gemm.cutedsl" else self.fast

    def supports(self, op):
        if op.b_scale is not None:  # an FP8 weight (passes/quantize.py): the kernels' check
            from aotpack.kernels.triton.gemm import dtype_problem

            return dtype_problem(op)
        dtypes = {op.a.dtype, op.b.dtype}
        if dtypes <= {DType.BF16, DType.F16}:
            return None
        have = "/".join(sorted(d.value for d in dtypes))
        return (f"GEMMs run on tensor cores in bf16 or f16, and this one's operands are {have}: "
                + ("build with --dtype bf16 (casts the model's weights and float inputs), or "
                   "cast the model where it is made" if len(dtypes) == 1 else
                   "part of the model computes in another dtype: give the inputs the weights' "
                   "dtype, or build with --dtype bf16 (a TorchScript trace keeps the dtypes it "
                   "was traced in: trace it in bf16)"))

    def bucket_size(self, op):
        return op.out.shape[0]  # M: split-K for decode sizes, tiles by waves above

    def default_config(self, op, target, backend="triton"):
        check_backend(backend)
        cute = cutedsl() if backend != "triton" else None
        why = cute.supports(op) if cute is not None else "not installed"
        if backend == "cutedsl" and why is not None:  # say so rather than mix backends
            raise BackendCannotCompile(f"the cutedsl GEMM cannot compile {list(op.out.shape)} "
                                       f"{op.a.dtype.value} GEMM: {why} "
                                       f"(use --gemm-backend triton or auto)")
        if why is None and (backend == "cutedsl" or op.out.shape[0] >= AUTO_CUTEDSL_MIN_M):
            return _cute_dict(cute.default_config(op))
        from aotpack.kernels.triton import gemm

        return _triton_dict(gemm.config_for(op, target))

    def candidates(self, op, target, backend="auto"):
        triton = _triton_candidates(op, target) if backend in ("triton", "auto") else []
        cute = _cutedsl_candidates(op) if backend in ("cutedsl", "auto") else []
        first = [self.default_config(op, target, backend)]
        return first + [c for c in triton + cute if c not in first]

    def compile(self, op, config, target):
        fields = {k: v for k, v in config.items() if k != "template"}
        if config.get("template") == "gemm.cutedsl":
            cute = cutedsl()
            if cute is None:
                raise RuntimeError("this config needs CuTeDSL on the build host: "
                                   "pip install nvidia-cutlass-dsl==4.8.1")
            return cute.compile_config(op, cute.default_config(op, **fields), target)
        if config.get("template") != "gemm.triton":
            raise ValueError(f"gemm: not a GEMM config: {config}")
        from aotpack.kernels.triton import gemm, gemm_configs as gc, gemm_heuristic

        cfg = gc.config_from_dict(fields)
        if isinstance(cfg, gc.SplitKConfig):  # PDL and the prefetch are the build's policy
            cfg = gemm_heuristic.with_prefetch(op, cfg)  # (knobs), not a tuned dimension
        return gemm.compile_fitting(op, cfg, target)

    def describe(self, op):
        (m, k), n = op.a.shape, op.b.shape[0]
        epi = ",".join(type(s).__name__[2:].lower() +
                       (f":{s.act.value}" if hasattr(s, "act") else "") for s in op.epilogue)
        quant = f" weights={op.b.dtype.value}" if op.b_scale is not None else ""
        quant += " acts=e4m3" if op.fp8_activations else ""
        return (f"gemm M={m} N={n} K={k} {op.a.dtype.value}->{op.out.dtype.value}{quant}"
                f" epilogue=[{epi}]")


class GemmNormTemplate(Template):
    """A GEMM and the RMSNorm of its rows (GemmNormOp): the GEMM's configs, backends and
    candidates as they are (configs keep their "gemm.triton" / "gemm.cutedsl" names); a
    two-launch split-K config normalizes in its reduce (triton/gemm_norm.py), any other
    appends the RMSNorm kernel."""

    name, op_type, module, tunable = "gemm_norm", GemmNormOp, "gemm_norm", True
    sources = GemmTemplate.sources + ("triton/gemm_norm.py", "triton/rmsnorm.py")
    gemm = GemmTemplate()

    def fast_limit(self, backend_template):
        return self.gemm.fast_limit(backend_template)

    def tuned_as(self, op):
        return op.gemm, self.gemm  # records measured for the plain GEMM (norm not fused)

    def supports(self, op):
        return self.gemm.supports(op.gemm)

    def bucket_size(self, op):
        return self.gemm.bucket_size(op.gemm)

    def default_config(self, op, target, backend="triton"):
        return self.gemm.default_config(op.gemm, target, backend)

    def candidates(self, op, target, backend="auto"):
        return self.gemm.candidates(op.gemm, target, backend)

    def compile(self, op, config, target):
        from aotpack.kernels.triton import gemm_configs as gc, gemm_norm

        launches = self.gemm.compile(op.gemm, config, target)
        cfg = None
        if config.get("template") == "gemm.triton":
            cfg = gc.config_from_dict({k: v for k, v in config.items() if k != "template"})
        return gemm_norm.compile(op, launches, cfg, target)

    def describe(self, op):
        return f"{self.gemm.describe(op.gemm)} + rmsnorm"


def _cute_dict(cfg) -> dict:
    return {"template": "gemm.cutedsl", "tile_m": cfg.tile_m, "tile_n": cfg.tile_n,
            "cluster_m": cfg.cluster_m, "cluster_n": cfg.cluster_n,
            "raster_along_m": cfg.raster_along_m, "swizzle": cfg.swizzle}


def _triton_dict(cfg) -> dict:
    """A Triton GEMM config as a tuning/config dict, without PDL and PREFETCH: those are the
    build's policy (compile sets them), so the heuristic is one candidate, not two."""
    d = {"template": "gemm.triton", **cfg.as_dict()}
    d.pop("PDL", None), d.pop("PREFETCH", None)
    return d


def _triton_candidates(op: GemmOp, target: Target) -> list[dict]:
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
        d = _triton_dict(cfg)
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


def _cutedsl_candidates(op: GemmOp) -> list[dict]:
    cute = cutedsl()
    if cute is None or cute.supports(op) is not None:
        return []
    out = []
    for cfg in [cute.default_config(op)] + cute.candidates(op):
        d = _cute_dict(cfg)
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
    g = swiglu_group(op) or 0
    # 224 = 14336 / 64 and 192 = 6144 / 32: whole waves of 64-row tiles for unfused GEMMs of
    # Llama-3 widths (a fused SwiGLU keeps tiles that hold whole gate/up pairs).
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
