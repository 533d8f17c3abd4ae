"""`aotpack build model.pt2` — the same pipeline from a file written by torch.export.save: the
bundle matches the one built from the factory (same kernels, same plan), and the CPU reference
of the .pt2 build agrees with eager PyTorch."""
import sys
from pathlib import Path

import pytest
import torch

from aotpack.builder import build
from aotpack.bundle import read_bundle

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _small_mlp():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import mlp
    finally:
        sys.path.remove(str(EXAMPLES))
    return mlp.make(d=64, f=256, batch=2, seq=8)


def test_build_from_pt2_matches_the_factory_build(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from aotpack.verify import verify

    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))
    model, inputs = _small_mlp()
    pt2 = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, inputs, strict=False), pt2)
    factory = tmp_path / "small_mlp.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nimport mlp\n\n"
                       "def make():\n    return mlp.make(d=64, f=256, batch=2, seq=8)\n")

    from_pt2 = build(str(pt2), tmp_path / "a", progress=False, command_line="test")
    from_py = build(f"{factory}:make", tmp_path / "b", progress=False, command_line="test")
    ma, mb = (read_bundle(r.bundle, checksums=True).manifest for r in (from_pt2, from_py))
    assert [k["cubin_sha256"] for k in ma["kernels"]] == [k["cubin_sha256"] for k in mb["kernels"]]
    assert ma["steps"] == mb["steps"] and ma["arena_bytes"] == mb["arena_bytes"]
    assert {w["sha256"] for w in ma["weights"]} == {w["sha256"] for w in mb["weights"]}
    assert verify(from_pt2.bundle, str(pt2), reference="cpu").passed


def test_pt2_of_a_transformers_model_output_loads_in_a_fresh_process(tmp_path):
    """A .pt2 whose output is a transformers ModelOutput: torch.export.load in a process that
    has not imported transformers fails (the type is not registered); aotpack imports the
    module torch names and loads it again. Outputs keep their names (logits)."""
    import subprocess

    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg).eval()
    pt2 = tmp_path / "bert.pt2"
    torch.export.save(torch.export.export(model, (torch.randint(0, 100, (1, 8)),)), pt2)
    code = ("import sys, torch\nfrom aotpack.frontend import load_spec, to_graph\n"
            "assert 'transformers' not in sys.modules\n"
            f"loaded = load_spec({str(pt2)!r})\n"
            "print([o.name for o in to_graph(loaded.model, list(loaded.inputs)).outputs])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "['logits']"


def test_pt2_with_keyword_inputs_says_how_to_export_it(tmp_path):
    from aotpack.frontend import load_spec
    from aotpack.frontend.load import ModelLoadError

    class Two(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    pt2 = tmp_path / "kw.pt2"
    torch.export.save(torch.export.export(Two(), (), {"x": torch.ones(2), "y": torch.ones(2)}),
                      pt2)
    with pytest.raises(ModelLoadError, match=r"keyword inputs \(x, y\).*torch\.export\.export"
                                             r"\(model, \(x, y,\)\)"):
        load_spec(str(pt2))
