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


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_with_a_run_time_padding_mask_matches_onnxruntime(tmp_path, attn):
    """BERT exported with attention_mask as a graph input: the mask computed from it at run
    time is the attention kernel's mask operand, [B, 1, 1, T] read through stride-0 dims;
    padded batches agree with onnxruntime and eager torch."""
    from aotpack.frontend.prepare import prepare

    family = onnx_families.make("bert", "tiny", attn=attn)
    path = onnx_families.export(family, tmp_path / "bert_masked.onnx", with_mask=True)
    loaded = prepare(load_spec(path))
    program = onnx_families.compile_loaded(loaded)
    kinds = onnx_families.kernel_kinds(program)
    assert kinds.count("AttentionOp") == 2 and "MatmulOp" not in kinds
    for op in program.ops:
        if type(op).__name__ == "AttentionOp":
            assert op.mask is not None and op.mask.strides[1:3] == (0, 0)
    module = onnx_families.WithMask(family.module.inner).eval()
    x = _fresh(family.example, onnx_families.SIZES["tiny"]["vocab"])
    for lengths in ((5, 16), (16, 16), (1, 9)):
        mask = onnx_families.padding_mask(2, x.shape[1], lengths)
        (got,) = run_reference(program, [x, mask])
        (ort,) = loaded.model(x, mask)
        with torch.no_grad():
            want = module(x, mask)
        assert rel_err(got, ort) < 1e-4
        assert rel_err(got, want) < 1e-4


POINTS = ((2, 16), (1, 1), (3, 7), (4, 64), (1, 33))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name, with_mask", [("gpt2", False), ("llama", False),
                                             ("gpt2", True), ("bert", True)])
def test_dynamic_export_matches_onnxruntime_at_several_sizes(tmp_path, name, attn, with_mask):
    """Exported with batch and sequence dynamic (the causal mask is then computed from Range
    over the dims): built once for batch 1..4, seq 1..64, matching onnxruntime at several
    (batch, seq) points; without a mask input the causal mask becomes the kernel's causal
    flag, with one (left padding: whole rows masked) the computed mask is its operand, with
    the causal part split off into the flag where that keeps fully masked rows as they are
    (sdpa's -inf masks; eager's finfo.min masks keep the combined [B, 1, S, T] mask)."""
    from aotpack.frontend.prepare import prepare

    family = onnx_families.make(name, "tiny", attn=attn)
    path = onnx_families.export(family, tmp_path / f"{name}.onnx", dynamic=True,
                                with_mask=with_mask)
    loaded = prepare(load_spec(path), dynamic=("batch=1..4", "seq=1..64"))
    program = onnx_families.compile_loaded(loaded)
    attention = [op for op in program.ops if type(op).__name__ == "AttentionOp"]
    assert len(attention) == 2 and "MatmulOp" not in onnx_families.kernel_kinds(program)
    if not with_mask:
        assert all(op.causal and op.mask is None for op in attention) == (name != "bert")
    elif attn == "sdpa" or name == "bert":  # -inf / bool masks: causal part split off
        assert all(op.causal == (name == "gpt2") and op.mask.strides[1:3] == (0, 0)
                   for op in attention)
    g = torch.Generator().manual_seed(3)
    for b, s in POINTS:
        xs = [torch.randint(0, onnx_families.SIZES["tiny"]["vocab"], (b, s), generator=g)]
        if with_mask:
            xs.append(onnx_families.padding_mask(b, s, [max(1, s // 2)] + [s] * (b - 1),
                                                 left=name == "gpt2"))
        (got,) = run_reference(program, xs)
        (ort,) = loaded.model(*xs)
        assert rel_err(got, ort) < 1e-4, (b, s)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_dynamic_masked_export_bundle_on_the_gpu(tmp_path, name):
    """A dynamic export with a padding-mask input (sdpa attention, whole rows masked for
    GPT-2's left padding) as a bf16 bundle run by the C runtime: the masked attention kernel
    against onnxruntime at several (batch, seq) points."""
    import aotpack
    from aotpack.frontend.prepare import prepare

    family = onnx_families.make(name, "tiny", attn="sdpa")
    path = onnx_families.export(family, tmp_path / f"{name}.onnx", dynamic=True,
                                with_mask=True)
    dims = ["batch=1..4", "seq=1..64"]
    result = aotpack.build(path, tmp_path / "out", dynamic=dims, dtype="bf16")
    loaded = prepare(load_spec(path), dynamic=dims)
    g = torch.Generator().manual_seed(4)
    with aotpack.load(result.out_dir) as bundle, bundle.session() as s:
        for b, t in POINTS:
            ids = torch.randint(0, onnx_families.SIZES["tiny"]["vocab"], (b, t), generator=g)
            mask = onnx_families.padding_mask(b, t, [max(1, t // 2)] + [t] * (b - 1),
                                              left=name == "gpt2")
            out = s.run([ids.cuda(), mask.cuda()])[0].float().cpu()
            (ref,) = loaded.model(ids, mask)
            assert rel_err(out, ref) < 2e-2, (b, t)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_masked_bert_onnx_and_torch_builds_agree(tmp_path, attn):
    """BERT with attention_mask as an input, built from its ONNX export and from the module
    through the PyTorch front door with the same attention implementation: same kernels (but
    for the small mask conversions the sdpa export repeats per layer), same outputs on a
    padded batch (skipped while the PyTorch frontend refuses the mask code's
    integer ops on run-time inputs)."""
    from aotpack.frontend import UnsupportedOpError, to_graph
    from aotpack.frontend.prepare import prepare
    from aotpack.passes import compile_graph

    family = onnx_families.make("bert", "tiny", attn=attn)
    path = onnx_families.export(family, tmp_path / "bert_masked.onnx", with_mask=True)
    from_onnx = onnx_families.compile_loaded(prepare(load_spec(path)))
    module = onnx_families.WithMask(family.module.inner).eval()
    ids = family.example
    mask = onnx_families.padding_mask(2, ids.shape[1], (16, 11))
    try:
        from_torch = compile_graph(to_graph(module, (ids, mask)))
    except UnsupportedOpError as e:
        pytest.skip(f"the PyTorch frontend refuses BERT's mask code: {str(e).splitlines()[0]}")
    kinds_onnx = onnx_families.kernel_kinds(from_onnx)
    kinds_torch = onnx_families.kernel_kinds(from_torch)
    if attn == "sdpa":  # the exporter's sdpa expansion converts the bool mask in each layer
        kinds_onnx = [k for k in kinds_onnx if k != "PointwiseOp"]
        kinds_torch = [k for k in kinds_torch if k != "PointwiseOp"]
    assert kinds_onnx == kinds_torch
    x = _fresh(ids, onnx_families.SIZES["tiny"]["vocab"])
    mask = onnx_families.padding_mask(2, ids.shape[1], (3, 14))
    (a,) = run_reference(from_onnx, [x, mask])
    (b,) = run_reference(from_torch, [x, mask])
    assert rel_err(a, b) < 1e-4
