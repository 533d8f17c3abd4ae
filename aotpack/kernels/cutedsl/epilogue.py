"""The register epilogue of aotpack's CuTeDSL GEMM (gemm.py): step kinds, the SwiGLU pairing of
wgmma accumulator registers, and the per-element math. Device helpers are @cute.jit functions
inlined into the kernel; `swiglu_pairs` is plain Python (static register indices).

Step kinds (a static tuple in GemmConfig.epilogue: one cubin per sequence):
  bias (+ out-dtype [N]), add / mul (out-dtype [M, N]), scale (* one f32), scale_n (* f32 [N]),
  activations gelu_tanh / gelu_erf / silu / relu.
SwiGLU is not a step kind but GemmConfig.swiglu_group: it runs before the steps and turns the
[tile_m, tile_n] accumulator into the [tile_m, tile_n / 2] output fragment.

Importing this module imports cutlass (nvidia-cutlass-dsl).
"""
import cutlass
import cutlass.cute as cute

EPI_KINDS = ("bias", "add", "mul", "scale", "scale_n", "gelu_tanh", "gelu_erf", "silu", "relu")
OPERAND_KINDS = ("bias", "add", "mul", "scale", "scale_n")  # steps that read a tensor
F32_OPERAND_KINDS = ("scale", "scale_n")  # their pointer is f32 (others have the out dtype)


def swiglu_pairs(tile_n: int, mma_m: int, group: int) -> list[tuple]:
    """(output, gate, up) register coordinates ((c, r, k), m, 0) for the SwiGLU pairing.

    A thread's wgmma m64nNk16 f32 accumulator fragment is ((2, 2, N/8), MMA_M, MMA_N): c picks
    column +1, r row +8, k column +8k (the PTX ISA's accumulator layout; the register
    coordinates are checked against it in tests). The pattern repeats every 8 columns, and
    `group` is a multiple of 8, so output column j = 8k + x (x < 8, fixed by the lane and c)
    reads gate column 2G*(j//G) + j%G and up column + G, which are the same thread's
    registers with k_gate = 2*(G/8)*(k // (G/8)) + k % (G/8) and k_up = k_gate + G/8. The
    output fragment is that of an N/2-wide wgmma with the same thread layout. Index-only:
    no thread index enters, so one static list serves every thread."""
    if group % 8 or tile_n % (2 * group):
        raise ValueError(f"swiglu group {group} must be a multiple of 8 dividing tile_n/2 "
                         f"({tile_n // 2})")
    per = group // 8  # column groups of 8 per gate (or up) block
    out = []
    for m in range(mma_m):
        for k in range(tile_n // 16):
            kg = 2 * per * (k // per) + k % per
            for r in range(2):
                for c in range(2):
                    out.append((((c, r, k), m, 0), ((c, r, kg), m, 0), ((c, r, kg + per), m, 0)))
    return out


@cute.jit
def swiglu(acc, acc_out, pairs: cutlass.Constexpr):
    """acc_out = silu(gate) * up over the static register pairs of `swiglu_pairs`."""
    for i in cutlass.range_constexpr(len(pairs)):
        o, g, u = pairs[i]
        acc_out[o] = activation("silu", acc[g]) * acc[u]


@cute.jit
def operand_views(steps: cutlass.Constexpr, operand_steps: cutlass.Constexpr, operands,
                  ld_operands, m_max, n_max):
    """A tensor over each operand pointer, in operand order: [N] for bias / scale_n, one
    element for scale, [M, N] with its row stride for add / mul."""
    views = []
    for j in cutlass.range_constexpr(len(operand_steps)):
        step = steps[operand_steps[j]]
        if cutlass.const_expr(step == "bias" or step == "scale_n"):
            views.append(cute.make_tensor(operands[j], cute.make_layout(n_max + 1)))
        elif cutlass.const_expr(step == "scale"):
            views.append(cute.make_tensor(operands[j], cute.make_layout(1)))
        else:
            views.append(cute.make_tensor(operands[j], cute.make_layout(
                (m_max + 1, n_max + 1), stride=(ld_operands[j], 1))))
    return views


@cute.jit
def apply_steps(steps: cutlass.Constexpr, v, m, n, views, scalars):
    """The static step sequence on one f32 value at (m, n). `scalars[j]` is operand j's
    per-tensor scale, loaded once per tile by the caller (None for other operands)."""
    j = 0
    for s in cutlass.range_constexpr(len(steps)):
        step = steps[s]
        if cutlass.const_expr(step == "bias"):
            v = v + views[j][n].to(cutlass.Float32)
            j += 1
        elif cutlass.const_expr(step == "add"):
            v = v + views[j][m, n].to(cutlass.Float32)
            j += 1
        elif cutlass.const_expr(step == "mul"):
            v = v * views[j][m, n].to(cutlass.Float32)
            j += 1
        elif cutlass.const_expr(step == "scale"):
            v = v * scalars[j]
            j += 1
        elif cutlass.const_expr(step == "scale_n"):
            v = v * views[j][n].to(cutlass.Float32)
            j += 1
        else:
            v = activation(step, v)
    return v


@cute.jit
def activation(kind: cutlass.Constexpr, x):
    if cutlass.const_expr(kind == "relu"):
        return cutlass.max(x, cutlass.Float32(0.0))
    if cutlass.const_expr(kind == "silu"):
        # x * rcp.approx (1 ulp) rather than x / (..): the IEEE div.rn.f32 is a ~15-instruction
        # sequence, 128 of them per thread per tile. 1 + exp(-x) >= 1, so no denormal input.
        return x * cute.arch.rcp_approx(cutlass.Float32(1.0) + cute.math.exp(-x, fastmath=True))
    if cutlass.const_expr(kind == "gelu_erf"):
        return cutlass.Float32(0.5) * x * (cutlass.Float32(1.0) + cute.math.erf(
            x * cutlass.Float32(0.7071067811865476)))
    # gelu_tanh
    inner = cutlass.Float32(0.7978845608028654) * (x + cutlass.Float32(0.044715) * x * x * x)
    return cutlass.Float32(0.5) * x * (cutlass.Float32(1.0) + cute.math.tanh(inner, fastmath=True))
