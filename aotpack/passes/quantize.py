"""`--precision fp8-weights` / `fp8`: GEMM weights stored as FP8 e4m3, one f32 scale per output
row; with `fp8`, the activations too (quantized per row by the GEMM kernels themselves).

A GEMM whose weight is a constant of the model in bf16/f16 gets an f8e4m3 copy of that weight
(each row divided by its scale, amax / 448, so the row's largest magnitude lands on e4m3's
largest finite value) and the scales beside it; the op reads them through GemmOp.b_scale and
the kernels widen the weight to the activations' dtype in registers, then scale the
accumulator (kernels/triton/gemm.py, gemm_splitk.py). Activations, attention, norms and
every other op keep the model's dtype. This halves the bytes a decode step streams, which is
what decode time is made of.

A weight that something other than GEMM weights reads (a tied embedding table also used as
the LM head) keeps its original beside the FP8 copy; otherwise the original leaves the bundle.
What is not quantized, and why, is counted for the build's notes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from aotpack.dtypes import DType
from aotpack.ir.sym import decided, prod
from aotpack.kernels.spec import GemmOp, TensorArg, epilogue_operands, op_inputs, op_outputs

PRECISIONS = ("model", "fp8-weights", "fp8")  # --precision choices; "model" changes nothing
FP8_MAX = 448.0  # largest finite float8_e4m3fn
_WIDE = (DType.BF16, DType.F16)
FP8_SUFFIX, SCALE_SUFFIX = ".fp8", ".fp8_scale"  # the copies' storage names


@dataclass
class QuantizeReport:
    """What quantize_weights did: GEMMs quantized, and those left as they were by reason."""

    quantized: int = 0
    mode: str = "fp8-weights"
    norms_fused: int = 0  # RMSNorms that write their GEMMs' FP8 input (fp8)
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> count

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def notes(self) -> list[str]:
        if self.mode == "model":  # keep_checkpoint_fp8
            out = [f"{self.quantized} GEMM weights stay FP8 e4m3 as the model holds them (its "
                   f"scales per row applied to the accumulator); weights "
                   f"{self.weight_bytes_before / 2**20:.1f} MiB -> "
                   f"{self.weight_bytes_after / 2**20:.1f} MiB"] if self.quantized else []
            return out + [f"{n} FP8 weight(s) of the model dequantized at build: {why}"
                          for why, n in sorted(self.skipped.items())]
        acts = " (activations in e4m3 too, a scale per row)" if self.mode == "fp8" else ""
        out = [f"{self.mode}: {self.quantized} GEMM weights in FP8 e4m3 with a scale per row"
               f"{acts}; "
               f"weights {self.weight_bytes_before / 2**20:.1f} MiB -> "
               f"{self.weight_bytes_after / 2**20:.1f} MiB"]
        if self.norms_fused:
            out.append(f"{self.mode}: {self.norms_fused} RMSNorms write their GEMMs' input in "
                       f"FP8 with its scale per row (no quantization inside those GEMMs)")
        out += [f"{self.mode}: {n} GEMM(s) kept their dtype: {why}"
                for why, n in sorted(self.skipped.items())]
        return out


def quantize_weights(program, activations: bool = False) -> QuantizeReport:
    """Rewrite `program` (in place) so that its GEMMs read FP8 weights (and, with
    `activations`, take their product on e4m3 activations: GemmOp.quantize_a); see the module
    doc."""
    report = QuantizeReport(weight_bytes_before=_weight_bytes(program),
                            mode="fp8" if activations else "fp8-weights")
    _drop_unread(program, _fp8_gemms(program, report, lambda op: True, activations))
    if activations:
        report.norms_fused = _norms_write_fp8(program)
    report.weight_bytes_after = _weight_bytes(program)
    return report


def keep_checkpoint_fp8(program) -> QuantizeReport | None:
    """Give each GEMM whose weight the model computes from an FP8 one (Program.fp8_sources,
    passes/fp8_sources.py) that e4m3 tensor and its scales instead (in place; the
    --precision fp8-weights kernels); None when the model has no such weight."""
    if not program.fp8_sources:
        return None
    report = QuantizeReport(weight_bytes_before=_weight_bytes(program), mode="model")
    copies = _fp8_gemms(program, report, lambda op: op.b.storage in program.fp8_sources)
    others = {t.storage for op in program.ops if not isinstance(op, GemmOp)
              for t in op_inputs(op)} & set(program.fp8_sources) - set(copies)
    for _ in others:  # an f32 model's GEMMs (tf32 1x1 convolutions), a lookup table
        report.skip("read by a kernel that takes no FP8 weight (a lookup table; or an f32 "
                    "model's GEMMs, tf32 convolutions: --dtype bf16 keeps those FP8)")
    _drop_unread(program, copies)
    report.weight_bytes_after = _weight_bytes(program)
    return report


def _fp8_gemms(program, report: QuantizeReport, chosen, activations: bool = False) -> dict:
    """Each GEMM `chosen(op)` picks reads its weight's FP8 copy (made once per weight) where
    _why_not allows, counted in `report`; the copies made: weight -> (fp8 name, scale name)."""
    copies: dict[str, tuple[str, str]] = {}
    for i, op in enumerate(program.ops):
        if not isinstance(op, GemmOp) or not chosen(op):
            continue
        why = _why_not(program, op, activations)
        if why is None:
            names = copies.get(op.b.storage) or _add_copy(program, op.b.storage)
            copies[op.b.storage] = names
            program.ops[i] = replace(_quantized_op(program, op, *names), quantize_a=activations)
            report.quantized += 1
        else:
            report.skip(why)
    return copies


def _why_not(program, op: GemmOp, activations: bool) -> str | None:
    """None if `op`'s weight can be quantized, else why not (a short reason)."""
    b = op.b
    storage = program.storages[b.storage]
    if storage.kind != "weight":
        return "the second operand is computed at run time, not a weight"
    if op.b_scale is not None or b.dtype not in _WIDE or op.a.dtype not in _WIDE:
        return "not a bf16/f16 GEMM"
    row = storage.shape[-1] if storage.shape else 0
    if len(b.shape) != 2 or tuple(b.strides) != (row, 1) or not isinstance(b.offset, int) \
            or b.offset % max(row, 1):
        return "the weight is read through a transposed or strided view"
    from aotpack.kernels.triton.gemm import tma_problem

    if tma_problem(replace(b, dtype=DType.F8E4M3)):  # the tile kernel loads it by TMA only
        return "its rows are not a multiple of 16 bytes in FP8 (K % 16 != 0)"
    if activations and decided(lambda: b.shape[1] < 32, True):
        return "K < 32 (an e4m3 wgmma multiplies 32 at a time)"
    if not bool(program.weights[b.storage].isfinite().all()):
        return "the weight holds inf or NaN"
    return None


def _add_copy(program, name: str) -> tuple[str, str]:
    """Storages and data of `name`'s FP8 copy and its per-row scales."""
    import torch

    from aotpack.program import Storage

    w = program.weights[name]
    storage = program.storages[name]
    rows = w.reshape(-1, w.shape[-1]).float()
    if name in program.fp8_sources:  # the checkpoint's own e4m3 values and scales
        q, scale = program.fp8_sources[name]
        q, scale = q.reshape(rows.shape), scale.reshape(-1).float()
    else:
        amax = rows.abs().amax(dim=1)
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        q = (rows / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    fp8, scales = name + FP8_SUFFIX, name + SCALE_SUFFIX
    program.storages[fp8] = Storage(fp8, "weight", DType.F8E4M3, storage.shape)
    program.storages[scales] = Storage(scales, "weight", DType.F32, (rows.shape[0],))
    program.weights[fp8] = q.reshape(w.shape).contiguous()
    program.weights[scales] = scale.contiguous()
    return fp8, scales


def _quantized_op(program, op: GemmOp, fp8: str, scales: str) -> GemmOp:
    row = program.storages[op.b.storage].shape[-1]
    b = replace(op.b, storage=fp8, dtype=DType.F8E4M3)
    scale = TensorArg(scales, DType.F32, (op.b.shape[0],), (1,), op.b.offset // row)
    return replace(op, b=b, b_scale=scale)


def _norms_write_fp8(program) -> int:
    """An RMSNorm whose output only FP8 GEMMs read (as their whole input: a pre-norm
    transformer's QKV, gate/up and LM head) writes it in e4m3 with its scale per row
    (RMSNormOp.out_scale, whole rows are in one program), and those GEMMs take it as it is
    (GemmOp.a_scale) instead of quantizing it themselves. Returns how many."""
    from aotpack.kernels.spec import RMSNormOp
    from aotpack.kernels.triton.gemm import tma_problem
    from aotpack.program import Storage

    readers: dict[str, list[int]] = {}
    writers: dict[str, int] = {}
    for i, op in enumerate(program.ops):
        written = {t.storage for t in op_outputs(op)}
        for name in written:
            writers[name] = writers.get(name, 0) + 1
        for name in {t.storage for t in op_inputs(op)} - written:
            readers.setdefault(name, []).append(i)
    fused = 0
    for i, op in enumerate(program.ops):
        if not isinstance(op, RMSNormOp) or op.out_scale is not None:
            continue
        out = op.out
        st = program.storages[out.storage]
        users = [program.ops[j] for j in readers.get(out.storage, [])]
        whole = out.is_contiguous() and out.offset == 0 and \
            decided(lambda: out.numel == prod(st.shape), False)  # the view is all of it
        if st.kind != "intermediate" or not users or not whole or writers[st.name] != 1 or \
                op.x.storage == st.name or tma_problem(replace(out, dtype=DType.F8E4M3)) or \
                not all(_quantizes_whole_input(u, out) for u in users):
            continue
        scale = TensorArg(out.storage + SCALE_SUFFIX, DType.F32, (out.shape[0],), (1,))
        program.storages[out.storage] = replace(st, dtype=DType.F8E4M3)
        program.storages[scale.storage] = Storage(scale.storage, "intermediate", DType.F32,
                                                  scale.shape)
        fp8_out = replace(out, dtype=DType.F8E4M3)
        program.ops[i] = replace(op, out=fp8_out, out_scale=scale)
        for j in readers[out.storage]:
            program.ops[j] = replace(program.ops[j], a=fp8_out, a_scale=scale, quantize_a=False)
        fused += 1
    return fused


def _quantizes_whole_input(op, arg: TensorArg) -> bool:
    """`op` is a GEMM quantizing `arg` as its input, and reads its storage nowhere else."""
    return isinstance(op, GemmOp) and op.quantize_a and op.a == arg and \
        arg.storage not in {t.storage for t in epilogue_operands(op.epilogue)}


def _drop_unread(program, copies: dict) -> None:
    """Originals that nothing reads any more leave the program (and the bundle)."""
    read = {t.storage for op in program.ops for t in op_inputs(op)}
    for name in copies:
        if name not in read:
            del program.storages[name]
            del program.weights[name]


def _weight_bytes(program) -> int:
    return sum(int(s.nbytes) for s in program.by_kind("weight"))
