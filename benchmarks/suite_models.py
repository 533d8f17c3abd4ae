"""What the benchmark suite measures: the model list, the variants, and the aotpack bundles found
on disk. Pure Python (no torch at import).

A model is a `file.py:fn` factory returning (model, example_inputs), the same protocol that
`aotpack build` takes, so a model added here can get a bundle as soon as aotpack covers it:
build it with `aotpack build SPEC --arch sm90 --external-weights -o DIR` and put model.aotpack +
spec.txt (+ optional label.txt, build.json) under `.gpu/<name>/`.

The factories below (HF GPT-2, BERT-base, ViT-B/16 from their configs with random init;
torchvision ResNet-50) are imported lazily inside the worker that runs them.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = "benchmarks/suite_models.py"

# Variants in the order the tables show them. "Peers" are what aotpack is compared against.
TORCH_VARIANTS = ("eager", "compile", "compile-max-autotune", "aoti")
AOTPACK_VARIANTS = ("aotpack-run", "aotpack-py")
PEERS = TORCH_VARIANTS


@dataclass(frozen=True)
class ModelDef:
    name: str
    spec: str
    bound: str  # "compute": TFLOP/s against the GEMM ceiling; "memory": GB/s against the copy one
    tier: str = "core"  # "core": measured by default; "extra": when named (--only) or when a
                        # bundle of it is given
    smoke_spec: str | None = None  # tiny CPU stand-in for --smoke
    note: str = ""


MODELS: tuple[ModelDef, ...] = (
    ModelDef("mlp-prefill", "examples/mlp.py:make", "compute",
             smoke_spec=f"{HERE}:smoke_mlp", note="8x512 tokens, d=4096, f=16384"),
    ModelDef("mlp-decode", "examples/mlp.py:make_decode", "memory",
             smoke_spec=f"{HERE}:smoke_mlp_decode", note="16x1 tokens"),
    ModelDef("llama-prefill", "examples/llama_block.py:make", "compute",
             smoke_spec=f"{HERE}:smoke_llama", note="Llama-3-8B layer, 1x2048"),
    ModelDef("llama-decode", "examples/llama_block.py:make_decode", "memory",
             smoke_spec=f"{HERE}:smoke_llama_decode", note="Llama-3-8B layer, 16x1, no KV cache"),
    ModelDef("gpt2", f"{HERE}:gpt2", "compute", tier="extra", note="HF GPT-2 small, 4x512"),
    ModelDef("bert-base", f"{HERE}:bert_base", "compute", tier="extra", note="HF BERT-base, 8x128"),
    ModelDef("vit-b16", f"{HERE}:vit_b16", "compute", tier="extra", note="HF ViT-B/16, 8x224²"),
    ModelDef("resnet50", f"{HERE}:resnet50", "compute", tier="extra",
             note="torchvision ResNet-50, 8x224²"),
)


@dataclass(frozen=True)
class BundleDef:
    """One aotpack bundle to measure: rows (model, "aotpack-run"/"aotpack-py", label)."""

    model: str
    label: str
    dir: Path
    spec: str
    build: dict = field(default_factory=dict)  # build.json: {"build_s": .., "host": .., ...}

    @property
    def bundle(self) -> Path:
        return self.dir / "model.aotpack"


def model_by_name(name: str) -> ModelDef:
    for m in MODELS:
        if m.name == name:
            return m
    raise KeyError(f"unknown model {name!r}; known: {[m.name for m in MODELS]}")


def select_models(names: list[str] | None, smoke: bool,
                  bundled: set[str] = frozenset()) -> list[ModelDef]:
    """The models to measure: by name when given, else the core models and every model a
    bundle was given for. In smoke mode, each model runs its tiny CPU factory and models
    without one are left out."""
    chosen = [model_by_name(n) for n in names] if names else \
        [m for m in MODELS if m.tier == "core" or m.name in bundled]
    if smoke:
        chosen = [ModelDef(m.name, m.smoke_spec, m.bound, m.tier, None, "tiny CPU stand-in")
                  for m in chosen if m.smoke_spec]
    return chosen


def _read_text(path: Path) -> str | None:
    return path.read_text().strip() if path.is_file() else None


def _build_facts(d: Path) -> dict:
    return json.loads(_read_text(d / "build.json") or "{}")


def discover_bundles(dirs: list[Path], models: list[ModelDef]) -> tuple[list[BundleDef], list[str]]:
    """Bundles under each folder of `dirs` that holds model.aotpack + spec.txt; the model is the
    one whose spec equals spec.txt. The label is label.txt, else the folder's name. Returns the
    bundles and one warning per folder skipped (never silently)."""
    by_spec = {m.spec: m for m in models}
    found, warnings = [], []
    for d in sorted(dirs):
        spec = _read_text(d / "spec.txt")
        if spec is None or not (d / "model.aotpack").is_file():
            warnings.append(f"{d}: no model.aotpack + spec.txt, not a bundle folder")
            continue
        model = by_spec.get(spec)
        if model is None:
            warnings.append(f"{d}: spec {spec!r} is not one of the planned models")
            continue
        build = _build_facts(d)
        label = _read_text(d / "label.txt") or d.name
        if any((b.model, b.label) == (model.name, label) for b in found):
            warnings.append(f"{d}: label {label!r} is taken for {model.name}; using {d.name!r}")
            label = d.name
        found.append(BundleDef(model.name, label, d, spec, build))
    return found, warnings


def bundles_from_manifest(path: Path, models: list[ModelDef]) -> tuple[list[BundleDef], list[str]]:
    """A JSON list of {"model": name, "label": .., "dir": ..} (dir relative to the manifest's
    folder): for bundles whose folders carry no spec.txt, or to pick a subset."""
    known = {m.name: m for m in models}
    found, warnings = [], []
    for item in json.loads(path.read_text()):
        d = (path.parent / item["dir"]).resolve()
        model = known.get(item["model"])
        if model is None:
            warnings.append(f"{path}: model {item['model']!r} is not planned")
        elif not (d / "model.aotpack").is_file():
            warnings.append(f"{path}: {d}/model.aotpack does not exist")
        else:
            found.append(BundleDef(model.name, item.get("label") or d.name, d, model.spec,
                                   _build_facts(d)))
    return found, warnings


def bundle_manifest(path: Path) -> dict:
    """The manifest JSON from a bundle's safetensors header (no torch, no aotpack import)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["aotpack.manifest"])


def bundle_facts(path: Path) -> dict:
    m = bundle_manifest(path)
    wfile = (m.get("external_weights") or {}).get("file")
    size = path.stat().st_size
    if wfile and (path.parent / wfile).is_file():
        size += (path.parent / wfile).stat().st_size
    return {"steps": len(m.get("steps", [])), "kernels": len(m.get("kernels", [])),
            "artifact_bytes": size, "arena_bytes": m.get("arena_bytes")}


# ---------------------------------------------------------------------------------------------
# Factories (run inside workers; torch, transformers, torchvision are imported here only).
# ---------------------------------------------------------------------------------------------

def _first_output(module):
    """Wraps an HF model so that forward returns one tensor (the last hidden state): the suite,
    torch.export and aotpack all want tensors, not ModelOutput objects."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, return_dict=False)[0]

    return FirstOutput(module)


def _seeded_init(model, seed: int) -> None:
    """Every parameter drawn again from our own generator, in name order: HF's initialisers
    change between transformers releases (ViT's cls_token and position embeddings did between
    5.17 on the GPU machine and 5.24 here), and the GPU machine must make the same weights as
    the build host from the seed alone. Norm scales stay near 1, everything else N(0, 0.02)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.02
            is_scale = p.ndim == 1 and name.endswith("weight")
            p.copy_(draw + 1.0 if is_scale else draw)


def _hf(model_cls, config, inputs, seed: int):
    import torch

    torch.manual_seed(seed)
    model = model_cls(config)
    _seeded_init(model, seed)
    return _first_output(model).to(torch.bfloat16).eval(), inputs


def gpt2(batch: int = 4, seq: int = 512, seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(use_cache=False, attn_implementation="sdpa")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(1))
    return _hf(GPT2Model, cfg, (ids,), seed)


def bert_base(batch: int = 8, seq: int = 128, seed: int = 0):
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(attn_implementation="sdpa")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(1))
    return _hf(lambda c: BertModel(c, add_pooling_layer=False), cfg, (ids,), seed)


def llama32_1b(batch: int = 1, seq: int = 2048, seed: int = 0):
    """transformers' LlamaModel at Llama-3.2-1B's shape (16 layers, d=2048, GQA 32/8, ffn 8192,
    vocab 128256), seeded weights; the hidden states of one prefill. Not in MODELS (the suite
    does not measure it): for `scripts/gpu-check bundles` runs."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True,
                      use_cache=False, attn_implementation="sdpa")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq),
                        generator=torch.Generator().manual_seed(1))
    return _hf(LlamaModel, cfg, (ids,), seed)


def vit_b16(batch: int = 8, seed: int = 0):
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(attn_implementation="sdpa")
    x = torch.randn(batch, 3, cfg.image_size, cfg.image_size, dtype=torch.bfloat16,
                    generator=torch.Generator().manual_seed(1))
    return _hf(lambda c: ViTModel(c, add_pooling_layer=False), cfg, (x,), seed)


def resnet50(batch: int = 8, seed: int = 0):
    import torch
    from torchvision.models import resnet50 as tv_resnet50

    torch.manual_seed(seed)
    model = tv_resnet50(weights=None).to(torch.bfloat16).eval()
    return model, (torch.randn(batch, 3, 224, 224, dtype=torch.bfloat16),)


def _example(module: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"suite_{module}", ROOT / "examples" / module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# tiny CPU stand-ins for --smoke (same code paths, sizes that run in milliseconds on a CPU)
def smoke_mlp():
    return _example("mlp.py").make(d=64, f=256, batch=2, seq=8, dtype=_f32())


def smoke_mlp_decode():
    return _example("mlp.py").make(d=64, f=256, batch=4, seq=1, dtype=_f32())


def smoke_llama():
    return _example("llama_block.py").make(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512,
                                            seq=16, dtype=_f32())


def smoke_llama_decode():
    return _example("llama_block.py").make(d=256, heads=4, kv_heads=2, head_dim=64, ffn=512,
                                            batch=4, seq=1, dtype=_f32())


def _f32():
    import torch

    return torch.float32  # CPU bf16 matmuls are slow and not what the smoke run checks
