"""Hopper GEMM template: out[M, N] = epilogue(a[M, K] @ b[N, K]^T), f32 accumulation.

One @triton.jit source, specialised per op through constexprs:
- A and B come in through host-side TMA descriptors (the runtime encodes them from the
  manifest's tensormap slots); `tl.dot` on them lowers to wgmma (HGMMA in SASS).
- Persistent grid: min(#tiles, SM count) CTAs walk the tiles in grouped order (GROUP_M rows
  of tiles share B columns while they are hot in L2); the K loop is software-pipelined
  (num_stages) and flattened with the tile loop so the next tile's loads overlap this epilogue.
- The epilogue chain of the op (bias / activation / add / mul / scale, in order) is compiled
  in as up to MAX_STEPS constexpr step kinds, each with its own operand pointer and strides; it
  runs on the f32 accumulator in registers (optionally in EPI_SPLIT column subtiles), then one
  store: TMA (clips out-of-bounds rows/cols) or masked pointer stores into any strided 2-D view.
- SwiGLU (EpSwiGLU, group G): B's rows interleave gate and up blocks of G, so a tile of BN
  accumulator columns (BN a multiple of 2G) holds BN/(2G) whole gate/up pairs; they are paired
  in registers (reshape + split), leaving a [BM, BN/2] tile for the other steps and the store.
The same source runs through Triton's own launcher (`jit_runner`): on a GPU in benchmarks
(bench_gemm.py), on CPU tensors under Triton's interpreter in tests (tests/support/interpret.py).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.ir.sym import (
    bounds, decided, divisible, subs, subs_tree, sym_max, sym_min, upper_bound,
)
from aotpack.kernels.spec import SM90, GemmOp, Launch, Target, TensorArg, swiglu_group
from aotpack.kernels.triton.compile import (
    Const, Desc, I32, I64, Ptr, cdiv, compile_kernel, int_divisibility, launch,
)
from aotpack.kernels.triton import gemm_splitk
from aotpack.kernels.triton.fp8 import dot_fp8, quantize_rows, row_scales, widen as _widen
from aotpack.kernels.triton.gemm_configs import GemmConfig, SplitKConfig
# The epilogue (device helpers and host-side step mapping) lives in gemm_epilogue.py.
from aotpack.kernels.triton.gemm_epilogue import (  # noqa: F401  (re-exported)
    MAX_STEPS, MAX_TENSOR_OPERANDS, _activation, _column_block, _epilogue_step, _finish_subtile,
    _swiglu_pairs,
    check_epilogue as _check_epilogue, epilogue_steps, fused_ops, out_tile_n, swiglu_config,
)

_INPUT_DTYPES = (DType.BF16, DType.F16)
_OUTPUT_DTYPES = (DType.BF16, DType.F16, DType.F32)
_TMA_ALIGN = 16  # bytes: TMA base address and outer strides
# Triton issues a TMA box at most one 128-byte swizzle span wide and reports that box, not the
# block, in its metadata; blocks are kept that narrow so the manifest box equals the block.
_TMA_ROW_BYTES = 128


# ----------------------------------------------------------------------------- device code
@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    # Grouped rasterization: consecutive tiles walk down GROUP_M tile-rows before moving right,
    # so the CTAs running at one time share a few B column blocks and A row blocks in L2.
    tiles_per_group = GROUP_M * tiles_n
    group = tile // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_per_group) % group_rows
    pid_n = (tile % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def gemm_kernel(a_desc, b_desc, out_desc, out_ptr, stride_om, stride_on, M, N, K, bs_ptr, as_ptr,
                e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                e4, e4_m, e4_n,
                S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                S4: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                EPI_SPLIT: tl.constexpr, TMA_STORE: tl.constexpr, FLATTEN: tl.constexpr,
                WIDE_INDEX: tl.constexpr, UPCAST_DOT: tl.constexpr, SWIGLU_G: tl.constexpr,
                BN_OUT: tl.constexpr, B_SCALE: tl.constexpr, A_FP8: tl.constexpr,
                A_SCALED: tl.constexpr):
    # N counts accumulator columns (B's rows); with SwiGLU (SWIGLU_G > 0) the output has N / 2
    # columns and each tile stores BN_OUT = BN / 2 of them; otherwise BN_OUT = BN.
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = tiles_m * tiles_n
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        if A_FP8:  # --precision fp8: each activation row's scale, over all of K, first
            amax = tl.zeros((BM,), dtype=tl.float32)
            for ki in range(k_tiles):
                amax = tl.maximum(amax, tl.max(tl.abs(
                    a_desc.load([off_m, ki * BK]).to(tl.float32)), axis=1))
            a_scale = row_scales(amax)
            a_inv = 1.0 / a_scale
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            # TMA zero-fills rows/cols past M, N, K, so ragged edges need no masks here
            a = a_desc.load([off_m, ki * BK])
            b = b_desc.load([off_n, ki * BK])
            if A_FP8:  # e4m3 x e4m3 on the tensor cores
                acc = dot_fp8(quantize_rows(a, a_inv), b.T, acc)
            elif A_SCALED:  # a arrived in e4m3 (the op before quantized it)
                acc = dot_fp8(a, b.T, acc)
            else:
                b = _widen(b, a)  # FP8 weights widen in registers
                if UPCAST_DOT:  # interpreter only: its dot multiplies bf16 bits (#11584)
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b.T, acc)
        if A_FP8:
            acc = acc * a_scale[:, None]
        if A_SCALED:
            rows = off_m + tl.arange(0, BM)
            acc = acc * tl.load(as_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if B_SCALE:  # dequantize: one scale per accumulator column (b's row)
            cols = off_n + tl.arange(0, BN)
            acc = acc * tl.load(bs_ptr + cols, mask=cols < N, other=0.0)[None, :]
        n_out = N
        if SWIGLU_G > 0:
            acc = _swiglu_pairs(acc, BM, BN, SWIGLU_G)
            n_out = N // 2
        for q in tl.static_range(EPI_SPLIT):
            _finish_subtile(_column_block(acc, q, EPI_SPLIT, BM, BN_OUT), off_m,
                            pid_n * BN_OUT + q * (BN_OUT // EPI_SPLIT), M, n_out, out_desc,
                            out_ptr, stride_om, stride_on, S0, e0, e0_m, e0_n, S1, e1, e1_m, e1_n,
                            S2, e2, e2_m, e2_n, S3, e3, e3_m, e3_n, S4, e4, e4_m, e4_n,
                            BM, BN_OUT // EPI_SPLIT, WIDE_INDEX, TMA_STORE)


# ----------------------------------------------------------------------------- host side
def check_op(op: GemmOp) -> None:
    """Raise ValueError naming what this template cannot run."""
    a, b, out = op.a, op.b, op.out
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        raise ValueError("gemm: a, b and out must be 2-D views")
    (M, K), (N, Kb) = a.shape, b.shape
    if swiglu_group(op):
        N //= 2  # B holds interleaved gate and up rows: 2N accumulator columns, N outputs
    if Kb != K or tuple(out.shape) != (M, N):
        raise ValueError(f"gemm: shapes do not match: a {a.shape}, b {b.shape}, out {out.shape}")
    if decided(lambda: min(M, N, K) <= 0, False):
        raise ValueError(f"gemm: empty problem M={M} N={N} K={K} is not supported")
    why = dtype_problem(op)
    if why:
        raise ValueError(f"gemm: {why}")
    for name, arg in (("a", a), ("b", b)):
        problem = tma_problem(arg)
        if problem:
            raise ValueError(f"gemm: operand {name} cannot be loaded by TMA: {problem} "
                             "(make it contiguous with a 16-byte aligned row pitch)")
    _check_epilogue(op)


def quantized_problem(op: GemmOp) -> str | None:
    """Why the Triton GEMMs cannot run `op`'s quantized weight (b f8e4m3 with b_scale), or
    None: the activations are bf16/f16 (the weight widens to them in registers) and the
    scale is f32, one per row of b."""
    a, b, scale = op.a, op.b, op.b_scale
    if b.dtype is not DType.F8E4M3:
        return f"a weight with a dequantization scale must be f8e4m3, got {b.dtype.value}"
    if a.dtype not in _INPUT_DTYPES + (DType.F8E4M3,) or \
            (a.dtype is DType.F8E4M3 and op.a_scale is None):
        return f"FP8 weights need bf16, f16 or scaled f8e4m3 activations, got {a.dtype.value}"
    if scale.dtype is not DType.F32 or len(scale.shape) != 1 or scale.shape[0] != b.shape[0] \
            or tuple(scale.strides) != (1,):
        return (f"the weight's scale must be f32 [{b.shape[0]}] (one per row), got "
                f"{scale.dtype.value} {list(scale.shape)}")
    return None


def dtype_problem(op: GemmOp) -> str | None:
    """Why the Triton GEMMs (tile and split-K) cannot take `op`'s dtypes, or None."""
    a, b, out = op.a, op.b, op.out
    if op.fp8_activations and op.b_scale is None:
        return "FP8 activations need an FP8 weight with its scale"
    if op.quantize_a and op.a_scale is not None:
        return "an FP8 input (a_scale) is not quantized again (quantize_a)"
    if (op.a_scale is not None) != (a.dtype is DType.F8E4M3):
        return "an f8e4m3 input and its a_scale come together"
    if op.a_scale is not None and (op.a_scale.dtype is not DType.F32 or tuple(
            op.a_scale.shape) != (a.shape[0],) or tuple(op.a_scale.strides) != (1,)):
        return f"the input's scale must be a contiguous f32 [{a.shape[0]}] (one per row)"
    if op.b_scale is not None:
        why = quantized_problem(op)
        if why:
            return why
    elif a.dtype not in _INPUT_DTYPES or b.dtype != a.dtype:
        return f"a and b must both be bf16 or f16, got {a.dtype.value}, {b.dtype.value}"
    if out.dtype not in _OUTPUT_DTYPES:
        return f"output dtype {out.dtype.value} not supported (bf16, f16, f32)"
    return None


def fp8_bk_problem(op: GemmOp, bk: int) -> str | None:
    """Why K tiles of `bk` cannot serve `op` (FP8 activations: an e4m3 wgmma's K is 32)."""
    if op.fp8_activations and bk < 32:
        return f"FP8 activations need BK >= 32 (an e4m3 wgmma's K), got BK={bk}"
    return None


def tma_problem(arg: TensorArg) -> str | None:
    """Why a 2-D view cannot be a TMA tensor map (None if it can)."""
    nb = arg.dtype.nbytes
    if arg.strides[-1] != 1:
        return f"inner stride is {arg.strides[-1]}, not 1"
    if not divisible(arg.offset * nb, _TMA_ALIGN):
        return f"base offset {arg.offset * nb} B is not a multiple of {_TMA_ALIGN}"
    if any(not divisible(s * nb, _TMA_ALIGN) or bounds(s)[0] <= 0 for s in arg.strides[:-1]):
        return f"outer strides {arg.strides[:-1]} x {nb} B are not positive multiples of 16 B"
    return None


def _int_arg(v):
    # 0 and 1 compile in (unit inner strides let loads/stores vectorise); others stay runtime
    if v in (0, 1):
        return Const(v)
    lo, hi = bounds(v)
    return I32(v) if -2**31 <= lo and hi < 2**31 else I64(v)


def _max_offset(arg: TensorArg) -> int:
    """The largest element offset the view reaches (at the dims' maxima)."""
    return sum(upper_bound((d - 1) * s) if bounds(s)[0] >= 0 else upper_bound((d - 1) * -s)
               for d, s in zip(arg.shape, arg.strides))


def uses_tma_store(op: GemmOp, cfg: GemmConfig) -> bool:
    """TMA store if the config asks, the output view allows, and a subtile row fits one box."""
    row_bytes = out_tile_n(op, cfg) // cfg.EPI_SPLIT * op.out.dtype.nbytes
    return cfg.TMA_STORE and tma_problem(op.out) is None and row_bytes <= _TMA_ROW_BYTES


def check_config(op: GemmOp, cfg: GemmConfig) -> None:
    why = fp8_bk_problem(op, cfg.BK)
    if why:
        raise ValueError(f"gemm: {why}")
    if cfg.BK * op.a.dtype.nbytes > _TMA_ROW_BYTES:
        raise ValueError(f"gemm: BK={cfg.BK} makes {cfg.BK * op.a.dtype.nbytes} B TMA rows; "
                         f"at most {_TMA_ROW_BYTES} B (BK=64 for bf16/f16)")
    if cfg.EPI_SPLIT not in (1, 2, 4) or cfg.BN % cfg.EPI_SPLIT:
        raise ValueError(f"gemm: EPI_SPLIT={cfg.EPI_SPLIT} must be 1, 2 or 4 and divide BN")
    g = swiglu_group(op)
    if g is not None and (cfg.BN % (2 * g) or (cfg.BN // 2) % cfg.EPI_SPLIT):
        raise ValueError(f"gemm: SwiGLU group {g} needs BN a multiple of {2 * g} (whole "
                         f"gate/up pairs per tile) and EPI_SPLIT dividing BN/2; got BN={cfg.BN}, "
                         f"EPI_SPLIT={cfg.EPI_SPLIT}")


def kernel_args(op: GemmOp, cfg: GemmConfig) -> dict:
    """Every argument of gemm_kernel for `op` under `cfg`, as compile.py ArgValues."""
    check_config(op, cfg)
    M, K = op.a.shape
    N = op.b.shape[0]
    steps = epilogue_steps(op)
    tma_store = uses_tma_store(op, cfg)
    out = op.out
    views = [out] + [t for _, t in steps if t is not None]
    args = {
        "a_desc": Desc(op.a, (cfg.BM, cfg.BK)),
        "b_desc": Desc(op.b, (cfg.BN, cfg.BK)),
        "out_desc": (Desc(out, (cfg.BM, out_tile_n(op, cfg) // cfg.EPI_SPLIT)) if tma_store
                     else Const(None)),
        "out_ptr": Const(None) if tma_store else Ptr(out),
        "stride_om": Const(0) if tma_store else _int_arg(out.strides[0]),
        "stride_on": Const(0) if tma_store else _int_arg(out.strides[1]),
        "M": I32(M), "N": I32(N), "K": I32(K),
        "bs_ptr": Ptr(op.b_scale) if op.b_scale is not None else Const(None),
        "as_ptr": Ptr(op.a_scale) if op.a_scale is not None else Const(None),
    }
    for i in range(MAX_STEPS):
        kind, t = steps[i] if i < len(steps) else ("", None)
        args[f"S{i}"] = Const(kind)
        args[f"e{i}"] = Ptr(t) if t is not None else Const(None)
        if kind in ("bias", "scale_n", "scale"):  # 1-D; a per-tensor scale has one element
            sm, sn = 0, (t.strides[0] if kind != "scale" else 0)
        else:
            sm, sn = t.strides if t is not None else (0, 0)
        args[f"e{i}_m"], args[f"e{i}_n"] = _int_arg(sm), _int_arg(sn)
    wide = any(_max_offset(v) >= 2**31 for v in views)
    for name in ("BM", "BN", "BK", "GROUP_M", "EPI_SPLIT", "FLATTEN"):
        args[name] = Const(getattr(cfg, name))
    args["TMA_STORE"] = Const(tma_store)
    args["WIDE_INDEX"] = Const(wide)
    args["UPCAST_DOT"] = Const(False)
    args["SWIGLU_G"] = Const(swiglu_group(op) or 0)
    args["BN_OUT"] = Const(out_tile_n(op, cfg))
    args["B_SCALE"] = Const(op.b_scale is not None)
    args["A_FP8"] = Const(op.quantize_a)
    args["A_SCALED"] = Const(op.a_scale is not None)
    if op.quantize_a:  # two K loops per tile (scales, then the product): not flattened
        args["FLATTEN"] = Const(False)
    return args


def num_tiles(op: GemmOp, cfg: GemmConfig):
    M, N = op.out.shape[0], op.b.shape[0]  # accumulator columns (2x the output's with SwiGLU)
    return cdiv(M, cfg.BM) * cdiv(N, cfg.BN)


def grid_size(op: GemmOp, cfg: GemmConfig, sm_count: int):
    """Persistent grid: CTAS_PER_SM CTAs per SM at most, never more CTAs than tiles (an
    expression of the dims when M is symbolic: the runtime evaluates it per shape)."""
    return sym_max(1, sym_min(num_tiles(op, cfg), sm_count * cfg.CTAS_PER_SM))


def config_for(op: GemmOp, target: Target = SM90) -> GemmConfig | SplitKConfig:
    """The config `op` gets without measurements (gemm_heuristic.py, outside the tuning key)."""
    from aotpack.kernels.triton.gemm_heuristic import config_for as heuristic

    return heuristic(op, target)


# ----------------------------------------------------------------------------- cross-compile
_COMPILED: dict = {}  # in-process memo: compile key -> TritonKernel


def _arg_key(v) -> tuple:
    # exactly what the cubin depends on (see compile.py's _signature)
    if isinstance(v, Const):
        return ("const", v.value)
    if isinstance(v, Ptr):
        return ("ptr", v.arg.dtype, divisible(v.byte_offset, 16))
    if isinstance(v, Desc):
        return ("desc", v.arg.dtype, tuple(v.block))
    if isinstance(v, I32):
        return ("i32", int_divisibility(v.value))
    return (type(v).__name__,)


def compile_config(op: GemmOp, cfg: GemmConfig, target: Target = SM90) -> list[Launch]:
    """Launches of `op` compiled with exactly `cfg` (memoized per kernel specialisation)."""
    if isinstance(cfg, SplitKConfig):
        return gemm_splitk.compile_config(op, cfg, target)
    check_op(op)
    args = kernel_args(op, cfg)
    key = (tuple((n, _arg_key(v)) for n, v in args.items()), cfg, target)
    tk = _COMPILED.get(key)
    if tk is None:
        tk = compile_kernel(gemm_kernel, args, num_warps=cfg.num_warps,
                            num_stages=cfg.num_stages, target=target, fused_ops=fused_ops(op),
                            config=dict(cfg.as_dict(), TMA_STORE=args["TMA_STORE"].value),
                            maxnreg=cfg.maxnreg())
        _COMPILED[key] = tk
    return [launch(tk, gemm_kernel, args, (grid_size(op, cfg, target.sm_count),))]


def compile(op: GemmOp, target: Target = SM90) -> list[Launch]:
    """Cubin + launch for `op` with the heuristic config (see compile_fitting)."""
    return compile_fitting(op, config_for(op, target), target)


def compile_fitting(op: GemmOp, cfg, target: Target = SM90) -> list[Launch]:
    """Launches of `op` with `cfg`; if the compiled kernel needs more shared memory than the
    target has, retry with fewer pipeline stages."""
    if not isinstance(cfg, SplitKConfig):  # split-K checks the op itself (it needs less)
        check_op(op)
    while True:
        try:
            return compile_config(op, cfg, target)
        except ValueError as e:
            if "shared memory" not in str(e) or cfg.num_stages <= 2:
                raise
            cfg = cfg.with_(num_stages=cfg.num_stages - 1)
        except Exception as e:  # ptxas: the register cap of two CTAs per SM is too tight
            if getattr(cfg, "CTAS_PER_SM", 1) == 1 or "registers" not in str(e).lower():
                raise
            cfg = cfg.with_(CTAS_PER_SM=1)


def supports_config(op: GemmOp, cfg: GemmConfig | SplitKConfig) -> str | None:
    """Why `cfg` (a tile or split-K config) cannot compile `op`, or None if it can."""
    if isinstance(cfg, SplitKConfig):
        return gemm_splitk.supports_config(op, cfg)
    try:
        check_op(op)
        check_config(op, cfg)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


# ----------------------------------------------------------------------------- run with torch
def runtime_args(args: dict, env) -> dict:
    """compile.py ArgValues -> values for a Triton launch over the torch tensors in `env`
    (storage name -> flat tensor): Desc -> TensorDescriptor, Ptr -> tensor at the view's start."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    def value(v):
        if isinstance(v, Const):
            return v.value
        if isinstance(v, Desc):
            base = torch.as_strided(env[v.arg.storage], v.arg.shape, v.arg.strides, v.arg.offset)
            return TensorDescriptor(base, list(v.arg.shape), list(v.arg.strides), list(v.block))
        if isinstance(v, Ptr):
            return env[v.arg.storage][v.arg.offset:]
        return v.value

    return {name: value(v) for name, v in args.items()}


def jit_runner(op: GemmOp, env, cfg: GemmConfig, sm_count: int, point: dict | None = None):
    """A no-argument function that runs `op` through Triton's own launcher: GPU tensors in the
    benchmark, CPU tensors under the interpreter in tests. Same source and arguments as the
    cross-compiled cubin; descriptors are built once, here. A split-K config runs
    gemm_splitk's launches (its grid is fixed by the config: sm_count is not used). A
    symbolic op runs at `point` (the dims' values): its arguments and grid are evaluated there,
    as the runtime evaluates the bundle's expressions."""
    if isinstance(cfg, SplitKConfig):
        return gemm_splitk.jit_runner(op, env, cfg, point)
    check_op(op)
    args = kernel_args(op, cfg)
    args = runtime_args(subs_tree(args, point) if point else args, env)
    # Triton's interpreter computes bf16 dots on the raw bits (triton-lang/triton#11584, "not
    # supported yet"): give it f32 tiles; compiled kernels never take this branch.
    args["UPCAST_DOT"] = _is_interpreted(gemm_kernel) and op.a.dtype is DType.BF16
    if _is_interpreted(gemm_kernel):
        from aotpack.kernels.triton._interpret import patch_interpreter

        patch_interpreter()
    grid = (subs(grid_size(op, cfg, sm_count), point or {}),)

    def run():
        gemm_kernel[grid](**args, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    return run


def jit_launch(op: GemmOp, env, cfg: GemmConfig, sm_count: int) -> None:
    jit_runner(op, env, cfg, sm_count)()


def _is_interpreted(kernel) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)
