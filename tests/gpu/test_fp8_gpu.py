"""FP8 weights on the GPU, bit for bit: every finite e4m3 code (subnormals, zeros of both signs,
the largest) through the widening to bf16 (inline PTX, aotpack/kernels/triton/fp8.py) of the
split-K kernel (TMA and pointer loads) and of the tile kernel, with the same Triton source the
bundles cross-compile (gemm.jit_runner). The activations are rows of the identity and the
output f32, so each output is one weight times its scale: exact, or wrong.

    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from aotpack.dtypes import DType
from aotpack.kernels.spec import GemmOp, contiguous

pytestmark = pytest.mark.gpu

K = 256  # one column per byte value
N = 128


def _codes() -> torch.Tensor:
    """[N, K] e4m3: row r holds every byte value rotated by r, NaN codes (0x7F, 0xFF) as 0."""
    codes = torch.arange(256, dtype=torch.int32)
    codes[(codes & 0x7F) == 0x7F] = 0
    rows = torch.stack([codes.roll(r) for r in range(N)]).to(torch.uint8)
    return rows.view(torch.float8_e4m3fn)


CONFIGS = {
    "splitk_tma": ("splitk", dict(BN=64, BM=16, BK=128, SPLIT_K=2, num_warps=4, num_stages=3)),
    "splitk_ptr": ("splitk", dict(BN=64, BM=16, BK=64, SPLIT_K=1, num_warps=4, num_stages=3,
                                  TMA=False)),
    "tile": ("tile", dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3,
                          EPI_SPLIT=2)),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_e4m3_code_widens_exactly(name):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from aotpack.kernels.triton import gemm
    from aotpack.kernels.triton.gemm_configs import GemmConfig, SplitKConfig

    kind, fields = CONFIGS[name]
    cfg = SplitKConfig(**fields) if kind == "splitk" else GemmConfig(**fields)
    M = 16 if kind == "splitk" else K
    w = _codes()
    scale = torch.exp2(torch.arange(N, dtype=torch.float32) % 7 - 3)  # powers of two: exact
    env = {"a": torch.eye(K, dtype=torch.bfloat16)[:M].reshape(-1).cuda(),
           "b": w.reshape(-1).cuda(), "s": scale.cuda(),
           "out": torch.full((M * N,), float("nan"), device="cuda")}
    op = GemmOp(contiguous("a", DType.BF16, (M, K)), contiguous("b", DType.F8E4M3, (N, K)),
                contiguous("out", DType.F32, (M, N)), (), contiguous("s", DType.F32, (N,)))
    gemm.jit_runner(op, env, cfg, torch.cuda.get_device_properties(0).multi_processor_count)()
    torch.cuda.synchronize()
    got = env["out"].view(M, N).cpu()
    want = (w.float() * scale[:, None]).t()[:M]  # out[m, n] = w[n, m] * s[n]
    bad = ~((got == want) | (got.isnan() & want.isnan()))
    assert not bad.any(), (f"{int(bad.sum())} outputs differ, e.g. code "
                           f"{int(w.view(torch.uint8)[bad.nonzero()[0][1], bad.nonzero()[0][0]])}"
                           f": got {got[bad][:4].tolist()}, want {want[bad][:4].tolist()}")
