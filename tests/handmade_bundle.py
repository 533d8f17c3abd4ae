"""A small hand-made Program + MemoryPlan (no frontend, no triton) for the bundle and CLI tests.

y = relu(x @ w^T + b) as two launches of one kernel and one of a second kernel whose cubin bytes
are identical (so: 3 steps, 2 kernels, 1 cubin), with every slot kind the manifest knows.
"""
from __future__ import annotations

import torch

from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    SM90, CompiledKernel, F32Slot, IntSlot, Launch, NullSlot, PtrSlot, TensorMapSlot,
)
from aotpack.program import MemoryPlan, Program, Storage

CUBIN = b"\x7fELF fake cubin bytes " * 7  # 154 bytes


def storages() -> dict[str, Storage]:
    f32, bf16 = DType.F32, DType.BF16
    return {s.name: s for s in [
        Storage("x", "input", bf16, (64, 64)),
        Storage("fc.weight", "weight", bf16, (64, 64)),
        Storage("fc.bias", "weight", f32, (64,)),
        Storage("fc.scale", "weight", f32, (3,)),  # 12 bytes: the next tensor needs padding
        Storage("h", "intermediate", f32, (64, 64)),
        Storage("y", "output", f32, (64, 64)),
    ]}


def make_program(seed: int = 0) -> Program:
    g = torch.Generator().manual_seed(seed)
    weights = {"fc.weight": torch.randn(64, 64, generator=g).to(torch.bfloat16),
               "fc.bias": torch.randn(64, generator=g), "fc.scale": torch.rand(3, generator=g)}
    # no ops: the writer reads only the plan's launches
    return Program(inputs=["x"], outputs=["y"], storages=storages(), ops=[], weights=weights,
                   summary={"nodes": 4, "ops": {"linear": 1, "relu": 1}})


def kernels() -> tuple[CompiledKernel, CompiledKernel]:
    gemm = CompiledKernel("gemm_kernel", CUBIN, (128, 1, 1), 65536, (2, 1, 1), "triton",
                          ("linear", "bias"), {"BM": 64, "BN": 64, "num_warps": 4})
    relu = CompiledKernel("relu_kernel", CUBIN, (256, 1, 1), 0, fused_ops=("relu",))
    return gemm, relu


def make_plan() -> MemoryPlan:
    gemm, relu = kernels()
    tmap = TensorMapSlot("x", 0, DType.BF16, (64, 64), (64, 1), (64, 64), "128B", "128B", "zero")
    gemm_args = (tmap, PtrSlot("fc.weight"), PtrSlot("fc.bias"), PtrSlot("h"), IntSlot("i32", 64),
                 IntSlot("i64", 4096), F32Slot(0.5), PtrSlot("__scratch.0.7"), NullSlot())
    launches = [
        Launch(gemm, (2, 1, 1), gemm_args),
        Launch(gemm, (4, 1, 1), gemm_args[:7] + (PtrSlot("__scratch.0.7"), NullSlot())),
        Launch(relu, (16, 1, 1), (PtrSlot("h"), PtrSlot("y", 256), IntSlot("u32", 4032),
                                  NullSlot(), NullSlot())),
    ]
    return MemoryPlan(arena_bytes=16384 + 1024, offsets={"h": 0, "__scratch.0.7": 16384},
                      nbytes={"h": 16384, "__scratch.0.7": 1024}, launches=launches,
                      naive_bytes=16384 + 1024)


def write_handmade(path, **kw):
    from aotpack.bundle import write_bundle

    prov = {"aotpack": "0.1.0", "torch": torch.__version__, "source_sha256": "0" * 64,
            "created_by": "tests"}
    return write_bundle(path, make_program(), make_plan(), target=SM90, provenance=prov, **kw)
