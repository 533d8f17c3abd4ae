"""Helpers shared by the attention / rmsnorm / rope / pointwise templates.

A template describes one launch as `KernelPlan`: the @triton.jit function, its arguments as
compile.py values (Ptr / I32 / I64 / F32 / Const), the grid and the compile options. The same plan
is then either cross-compiled to a cubin (`compile_plan`), or launched with torch tensors through
Triton's normal JIT (`jit_launcher` / `run_plan`: GPU benchmarks) or its interpreter
(`_interpret.run_plan_here`: CPU numerics), so the argument mapping that the bundle ships is the
one the numerics tests and the benchmarks exercise.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aotpack.ir.sym import bounds, divisible, subs_tree
from aotpack.kernels.spec import COUNTERS, SM90, Launch, Target, TensorArg
from aotpack.kernels.triton.compile import (
    F32, I32, I64, ArgValue, Const, Counters, Desc, Ptr, Scratch, TritonKernel, compile_kernel,
    int_divisibility, launch,
)

_I32_MAX = 2**31 - 1


@dataclass
class KernelPlan:
    fn: object  # the module-level @triton.jit function
    args: dict[str, ArgValue]
    grid: tuple[int, int, int]
    num_warps: int
    num_stages: int
    fused_ops: tuple[str, ...]
    config: dict = field(default_factory=dict)
    pdl: bool = False  # launch as a programmatic dependent (the kernel waits: pdl.py)


def int_arg(value) -> ArgValue:
    """An integer parameter the way Triton's JIT would specialise it: 1 is compiled in (so a unit
    stride vectorises), everything else is a runtime slot, i64 only when i32 cannot hold it
    (for a symbolic size: at any value of its dims)."""
    if value == 1:
        return Const(1)
    lo, hi = bounds(value)
    return I32(value) if -_I32_MAX - 1 <= lo and hi <= _I32_MAX else I64(value)


def strides_args(prefix: str, arg: TensorArg, names: tuple[str, ...]) -> dict[str, ArgValue]:
    """{prefix_stride_<name>: int_arg(stride)} for the leading dims of `arg` (inner dim is 1)."""
    return {f"{prefix}_stride_{n}": int_arg(s) for n, s in zip(names, arg.strides)}


def require_unit_inner_stride(what: str, arg: TensorArg) -> None:
    if arg.strides[-1] != 1:
        raise ValueError(f"{what}: inner stride must be 1 (a contiguous last dim), "
                         f"got strides {arg.strides}")


# ----------------------------------------------------------------------------- compile
_KERNELS: dict[tuple, TritonKernel] = {}


def _specialisation_key(plan: KernelPlan, target: Target) -> tuple:
    """What decides the cubin: argument kinds, constexpr values, the divisibility of ints and
    of pointer offsets (compile.py specialises those), options and target."""
    parts = []
    for name, v in plan.args.items():
        if isinstance(v, Const):
            parts.append((name, "c", repr(v.value)))
        elif isinstance(v, Ptr):
            parts.append((name, "p", v.arg.dtype.value, divisible(v.byte_offset, 16)))
        elif isinstance(v, (Scratch, Counters)):
            parts.append((name, type(v).__name__, getattr(v, "dtype", None)))
        elif isinstance(v, Desc):
            parts.append((name, "d", v.arg.dtype.value, tuple(v.block)))
        elif isinstance(v, I32):
            parts.append((name, "i32", int_divisibility(v.value)))
        else:
            parts.append((name, type(v).__name__))
    return (plan.fn.fn.__module__, plan.fn.fn.__name__, tuple(parts), plan.num_warps,
            plan.num_stages, plan.pdl, target)


def compile_plan(plan: KernelPlan, target: Target = SM90) -> Launch:
    """Cubin (memoised in-process by specialisation) + the launch's parameter slots."""
    key = _specialisation_key(plan, target)
    tk = _KERNELS.get(key)
    if tk is None:
        tk = compile_kernel(plan.fn, plan.args, num_warps=plan.num_warps,
                            num_stages=plan.num_stages, target=target,
                            fused_ops=plan.fused_ops, config=plan.config, pdl=plan.pdl)
        _KERNELS[key] = tk
    return launch(tk, plan.fn, plan.args, plan.grid)


# ----------------------------------------------------------------------------- torch launch
def torch_args(plan: KernelPlan, env) -> dict:
    """Plan arguments as Triton JIT/interpreter call arguments (views over `env` tensors; a
    Desc becomes Triton's host TensorDescriptor over the view, which Triton encodes itself)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from aotpack.kernels.reference import view

    import torch

    out = {}
    device = next((t.device for t in env.values() if isinstance(t, torch.Tensor)), "cpu")
    for name, v in plan.args.items():
        if isinstance(v, Ptr):
            out[name] = view(env, v.arg)
        elif isinstance(v, Scratch):  # this launch's own workspace
            out[name] = torch.empty(int(v.nbytes) // v.dtype.nbytes, dtype=v.dtype.to_torch(),
                                    device=device)
        elif isinstance(v, Counters):  # one zeroed region in env for every launch, as in a
            n = int(v.nbytes) // 4      # session (each launch leaves it zero)
            t = env.get(COUNTERS)
            if t is None or t.numel() < n:
                t = env[COUNTERS] = torch.zeros(n, dtype=torch.int32, device=device)
            out[name] = t
        elif isinstance(v, Desc):
            out[name] = TensorDescriptor.from_tensor(view(env, v.arg), list(v.block))
        elif isinstance(v, (I32, I64, F32, Const)):
            out[name] = v.value
        else:
            raise TypeError(f"{name}: cannot launch {v!r} from torch")
    return out


def jit_launcher(plan: KernelPlan, env):
    """A no-argument callable launching `plan` through Triton's JIT on the tensors of `env`
    (storage name -> flat tensor, on the GPU); arguments are bound once, so timing loops pay
    only Triton's launch. The plan is the bundle's, the code nearly: the JIT specialises ints
    on 16 only, where the bundle also tells 8, 4 and 2 (aot_launcher compiles as it does)."""
    kwargs = torch_args(plan, env)
    kernel = plan.fn[plan.grid]
    options = {"num_warps": plan.num_warps, "num_stages": plan.num_stages}
    return lambda: kernel(**kwargs, **options)


def aot_launcher(plan: KernelPlan, env, target: Target = SM90):
    """As jit_launcher, but the kernel is compiled as the bundle compiles it (compile.py's
    signature: the facts about integer arguments the JIT would not specialise on, such as a
    divisibility of 8), so a benchmark times the bundle's own code."""
    from aotpack.kernels.triton.compile import triton_compile

    _, compiled = triton_compile(plan.fn, plan.args, plan.num_warps, plan.num_stages, target)
    kwargs = torch_args(plan, env)
    args = [kwargs[name] for name in plan.fn.arg_names]
    runner = compiled[tuple(plan.grid)]
    return lambda: runner(*args)


def run_plan(plan: KernelPlan, env) -> None:
    jit_launcher(plan, env)()


# ----------------------------------------------------------------------------- entry points
def entry_points(plan_fn):
    """The entry points every planned template exposes, made from its `plan(op, config)`:
    compile (launches memoised per op, target and config), run_plan_interpreted_here (in a
    process running Triton's interpreter: the tests' harness, tests/support/interpret.py) and
    run_jit (Triton's own launcher, for benchmarks)."""
    from aotpack.kernels.triton._interpret import run_plan_here

    launches: dict[tuple, list[Launch]] = {}

    def compile(op, target: Target = SM90, config: dict | None = None) -> list[Launch]:
        key = (op, target, tuple(sorted((config or {}).items())))
        if key not in launches:
            launches[key] = [compile_plan(plan_fn(op, config), target)]
        return launches[key]

    def run_plan_interpreted_here(op, env, config: dict | None = None,
                                  point: dict | None = None) -> None:
        """`point`: the dims' values a symbolic op runs at (its plan's sizes evaluated there,
        as the runtime evaluates the bundle's expressions)."""
        plan = plan_fn(op, config)
        run_plan_here(subs_tree(plan, point) if point else plan, env)

    def run_jit(op, env, config: dict | None = None) -> None:
        run_plan(plan_fn(op, config), env)

    return compile, run_plan_interpreted_here, run_jit
