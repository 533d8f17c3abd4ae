"""Element types shared by the IR, the kernels and the bundle (manifest spelling: `bf16`, ...).

No torch import at module import time: the runtime binding uses this on machines where only the
bundle matters.
"""
from __future__ import annotations

import enum


class DType(enum.Enum):
    BF16 = "bf16"
    F16 = "f16"
    F32 = "f32"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    BOOL = "bool"
    # FP8 e4m3 (finite, max 448: torch.float8_e4m3fn): quantized GEMM weights and (with
    # --precision fp8) GEMM inputs an RMSNorm wrote, always with f32 scales beside them
    # (GemmOp.b_scale / a_scale); never a bundle's input or output
    F8E4M3 = "f8e4m3"

    @property
    def nbytes(self) -> int:
        return _NBYTES[self]

    @property
    def safetensors(self) -> str:
        """The dtype spelling used in a safetensors header."""
        return _SAFETENSORS[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.BF16, DType.F16, DType.F32, DType.F64)

    def to_torch(self):
        import torch

        return _torch_map()[self]

    @staticmethod
    def from_torch(dt) -> "DType":
        for k, v in _torch_map().items():
            if v == dt:
                return k
        raise ValueError(f"aotpack has no dtype for torch dtype {dt}")

    @staticmethod
    def from_safetensors(name: str) -> "DType":
        for k, v in _SAFETENSORS.items():
            if v == name:
                return k
        raise ValueError(f"unknown safetensors dtype {name!r}")


_NBYTES = {
    DType.BF16: 2, DType.F16: 2, DType.F32: 4, DType.F64: 8, DType.I8: 1, DType.I16: 2,
    DType.I32: 4, DType.I64: 8, DType.U8: 1, DType.BOOL: 1, DType.F8E4M3: 1,
}
_SAFETENSORS = {
    DType.BF16: "BF16", DType.F16: "F16", DType.F32: "F32", DType.F64: "F64", DType.I8: "I8",
    DType.I16: "I16", DType.I32: "I32", DType.I64: "I64", DType.U8: "U8", DType.BOOL: "BOOL",
    DType.F8E4M3: "F8_E4M3",
}


def _torch_map():
    import torch

    return {
        DType.BF16: torch.bfloat16, DType.F16: torch.float16, DType.F32: torch.float32,
        DType.F64: torch.float64, DType.I8: torch.int8, DType.I16: torch.int16,
        DType.I32: torch.int32, DType.I64: torch.int64, DType.U8: torch.uint8,
        DType.BOOL: torch.bool, DType.F8E4M3: torch.float8_e4m3fn,
    }
