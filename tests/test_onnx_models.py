"""transformers GPT-2, BERT, Llama and ViT exported with torch.onnx.export as a user does
(benchmarks/onnx_families.py says how), eager and sdpa attention: the ONNX build matches
onnxruntime (CPU) on fresh inputs, and has the same kernel ops, in the same order, as the same
module built through the PyTorch front door."""
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import onnx_families  # noqa: E402

from aotpack.executor import run_reference  # noqa: E402
from aotpack.frontend import load_spec  # noqa: E402
from program_checks import rel_err  # noqa: E402


def _fresh(example: torch.Tensor, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    if example.is_floating_point():
        return torch.randn(example.shape, generator=g)
    return torch.randint(0, vocab, example.shape, generator=g)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "vit"])
def test_exported_model_matches_onnxruntime_and_torch_build(tmp_path, name, attn):
    family = onnx_families.make(name, "tiny", attn=attn)
    path = onnx_families.export(family, tmp_path / f"{name}.onnx")
    from_onnx, from_torch = onnx_families.programs(family, path)
    assert onnx_families.kernel_kinds(from_onnx) == onnx_families.kernel_kinds(from_torch)
    kinds = onnx_families.kernel_kinds(from_onnx)
    assert kinds.count("AttentionOp") == 2 and "MatmulOp" not in kinds
    x = _fresh(family.example, onnx_families.SIZES["tiny"]["vocab"])
    (got,) = run_reference(from_onnx, [x])
    (ort,) = load_spec(path).model(x)  # onnxruntime, CPU
    assert rel_err(got, ort) < 1e-4
    with torch.no_grad():
        assert rel_err(got, family.module(x)) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_onnx_and_torch_bundles_agree_on_the_gpu(tmp_path, name):
    """benchmarks/onnx_vs_torch.py at tiny size: both bundles built here, run on the GPU with
    onnxruntime beside them; same launches, outputs agree."""
    import onnx_vs_torch

    row = onnx_vs_torch.compare(name, "tiny", tmp_path)
    assert row["kernels_onnx"] == row["kernels_torch"]
    assert row["max_err_onnx_vs_torch"] < 2e-2
    assert row["max_err_onnx_vs_onnxruntime"] < 5e-2
