"""The generation step a bundle compiles (docs/generation.md):

    step(input_ids [B, S], positions [B, S], last_index [B]) -> next_ids [B], logits f32 [B, V]

(last_index[b] = b * S + len_b - 1: sequence b's last real token as a row of [B * S]).

`GenerationStep` wraps either a transformers causal LM (Llama, Qwen2/3, Mistral, Gemma, Phi-3
and their kin: anything whose decoder layers call `past_key_values.update` and accept a
prepared 4-D mask) or a plain module following aotpack's convention

    forward(input_ids [B, S], positions [B, S], cache: CacheView) -> logits [B, S, V]

(call `cache.update(k, v, layer)` for each attention layer and use `cache.attention_mask()`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from aotpack.errors import UserError
from aotpack.generation.cache import CacheView, StaticKVCache


class GenerationModelError(UserError):
    pass


@dataclass(frozen=True)
class CacheShape:
    layers: int
    kv_heads: int
    head_dim: int
    v_head_dim: int | None = None  # the values' head dim where it differs (latent attention)


class GenerationStep(nn.Module):
    def __init__(self, model: nn.Module, max_batch: int, max_seq_len: int,
                 cache: CacheShape | None = None):
        super().__init__()
        self.model = model
        self.hf = _is_transformers(model)
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        shape = cache or _cache_shape(model)
        if self.hf and cache is None:
            shape = self._probed(shape)
        dtype = _float_dtype(model)
        self.cache = StaticKVCache(shape.layers, max_batch, max_seq_len, shape.kv_heads,
                                   shape.head_dim, dtype, shape.v_head_dim)
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.vocab_size = _vocab_size(model)
        # an end-of-sequence id outside the vocabulary can never be generated: not a stop id
        # (a config whose vocabulary was shrunk keeps the original eos_token_id)
        eos = _eos_ids(model)
        self.eos_ids = [e for e in eos if 0 <= e < self.vocab_size]
        self.dropped_eos_ids = [e for e in eos if e not in self.eos_ids]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                last_index: torch.Tensor):
        batch, seq = input_ids.shape
        view = self.cache.view(positions)
        # the last real token of each sequence: last_index[b] = b * S + len_b - 1, a row of
        # the flattened [B * S] batch (the caller computes it: a product with the run-time S
        # would be a size the kernels take as data)
        if self.hf:
            hidden = self._hf_hidden(input_ids, positions, view)
            logits = self._hf_head(hidden.reshape(batch * seq, hidden.shape[-1])[last_index])
        else:
            logits = self.model(input_ids, positions, view)
            logits = logits.reshape(batch * seq, logits.shape[-1])[last_index]
        logits = logits.float()
        return torch.argmax(logits, dim=-1), logits

    def _probed(self, guess: CacheShape) -> CacheShape:
        """The cache's shape from what the model's layers hand `update` on a two-token
        prompt: the config's guess is the layout most families cache, but not all (DeepSeek-V3
        caches its compressed latent, one head of kv_lora_rank, and its rotary key, one head
        of qk_rope_head_dim, as its "keys" and "values"). The guess stays where the probe
        fails or the layers differ (check_step then says whether it fits)."""
        probe = _ShapeProbe(guess.layers)
        positions = torch.arange(2).unsqueeze(0)
        try:
            with torch.no_grad():
                self._hf_hidden(torch.zeros(1, 2, dtype=torch.long), positions,
                                probe.view(positions))
        except Exception:
            return guess
        shapes = set(probe.shapes.values())
        if len(shapes) != 1 or len(probe.shapes) != guess.layers:
            return guess
        k_heads, k_dim, v_heads, v_dim = shapes.pop()
        if k_heads != v_heads:
            return guess
        return CacheShape(guess.layers, k_heads, k_dim, v_dim if v_dim != k_dim else None)

    def _hf_hidden(self, input_ids, positions, view):
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else \
            self.model.model
        if decoder is self.model and hasattr(self.model, "model"):  # Llama-4 in transformers
            decoder = self.model.model  # 5.x: get_decoder() is the causal LM itself
        mask = self._hf_mask(view)
        with _alibi_of_cache_slots(decoder, mask):
            out = decoder(input_ids=input_ids, position_ids=positions, attention_mask=mask,
                          past_key_values=view, use_cache=True, cache_position=positions[0])
        return out[0] if isinstance(out, tuple) else out.last_hidden_state

    def _hf_mask(self, view):
        """The prepared 4-D mask transformers takes as is; models with sliding-window layers
        get the windowed one where the window is shorter than the cache (by layer type where
        the model names them, e.g. Gemma-2's alternating layers; for every layer otherwise,
        as Mistral's sliding_window means)."""
        config = _config(self.model)
        full = self._eager_form(view.attention_mask())
        window = getattr(config, "sliding_window", None)
        if (not isinstance(window, int) or window >= self.max_seq_len
                or getattr(config, "use_sliding_window", True) is False):
            return full
        types = getattr(config, "layer_types", None)
        sliding = self._eager_form(view.attention_mask(window))
        if isinstance(types, (list, tuple)):  # the model says which layers slide (maybe none)
            if "sliding_attention" not in types:
                return full
            return {"full_attention": full, "sliding_attention": sliding}
        return sliding

    def _eager_form(self, mask: torch.Tensor) -> torch.Tensor:
        """The mask as the model's attention reads it: bool (True: seen) for models that
        attend through transformers' attention functions (sdpa); additive (0 where seen, the
        dtype's lowest value elsewhere: transformers' eager mask) for models with their own
        attention code (GPT-J, CodeGen, MPT add it to the scores or fill where it is
        nonzero: a bool mask there is wrong, not refused)."""
        eager = getattr(_config(self.model), "_attn_implementation", None) == "eager"
        if getattr(self.model, "_supports_sdpa", True) and not eager:
            return mask
        dtype = _float_dtype(self.model)
        return torch.zeros((), dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)

    def _hf_head(self, hidden):
        logits = self.model.get_output_embeddings()(hidden)
        config = _config(self.model)
        scale = getattr(config, "logit_scale", None)
        if isinstance(scale, (int, float)) and scale != 1:  # Cohere
            logits = logits * scale
        divide = getattr(config, "logits_scaling", None)
        if isinstance(divide, (int, float)) and divide != 1:  # Granite
            logits = logits / divide
        cap = getattr(config, "final_logit_softcapping", None)
        if cap:  # Gemma-2: logits squashed into (-cap, cap)
            logits = torch.tanh(logits / cap) * cap
        return logits


class _ShapeProbe:
    """A two-key stand-in for StaticKVCache that records each layer's key/value heads and
    dims (`update` returns the new keys and values themselves)."""

    def __init__(self, layers: int):
        self.layers, self.max_seq_len, self.shapes = layers, 2, {}

    def view(self, positions) -> CacheView:
        probe = self

        class Recording(CacheView):
            def update(self, key, value, layer_idx, cache_kwargs=None):
                probe.shapes[layer_idx] = (key.shape[1], key.shape[3], value.shape[1],
                                           value.shape[3])
                return key, value

        return Recording(self, positions)


@contextmanager
def _alibi_of_cache_slots(decoder: nn.Module, mask):
    """BLOOM-style models build their ALiBi bias from a 2-D padding mask ([B, keys]: slope x
    the key's index among the unmasked ones) before their layers read the 4-D mask. The step
    hands them the prepared 4-D mask, so their `build_alibi_tensor` is given, for the call, a
    mask of ones over the cache's slots: slope x slot, the key's position (the cache keeps
    token t of a sequence in slot t), and padding or future slots are hidden by the 4-D mask.
    Their own function computes it, so the slopes are exactly theirs."""
    build = getattr(decoder, "build_alibi_tensor", None)
    if build is None or not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        yield
        return
    def of_slots(attention_mask, num_heads, dtype):  # noqa: E306 (the model's signature)
        ones = torch.ones(mask.shape[0], mask.shape[-1], dtype=torch.long, device=mask.device)
        return build(ones, num_heads, dtype)
    decoder.build_alibi_tensor = of_slots  # an instance attribute over the class's method
    try:
        yield
    finally:
        del decoder.build_alibi_tensor


def example_inputs(max_batch: int, max_seq_len: int, vocab: int):
    """Example step inputs (a batch of 2 prompts of 8 and 5 tokens, clamped to the limits):
    the export traces the step at these; B and S are declared dynamic."""
    batch, seq = min(2, max_batch), min(8, max_seq_len)
    ids = torch.arange(batch * seq, dtype=torch.int64).reshape(batch, seq) % max(vocab, 1)
    positions = torch.arange(seq, dtype=torch.int64).expand(batch, seq).contiguous()
    last = torch.tensor([b * seq + (seq - 1 if b == 0 else max(seq - 4, 0))
                         for b in range(batch)], dtype=torch.int64)
    return ids, positions, last


# ----------------------------------------------------------------------------- model facts
def _is_transformers(model) -> bool:
    return hasattr(model, "config") and hasattr(model, "get_output_embeddings")


def _config(model):
    config = getattr(model, "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _cache_shape(model) -> CacheShape:
    config = _config(model)
    if config is not None and hasattr(config, "num_hidden_layers"):
        heads = getattr(config, "num_attention_heads", None)
        if not isinstance(heads, int) or heads < 1:  # Mamba, RWKV: a recurrent state
            raise GenerationModelError(
                f"{type(model).__name__}: --task text-generation builds a KV cache for "
                f"attention layers, and this model has none (its config has no "
                f"num_attention_heads: state-space or recurrent layers keep another state, "
                f"which the generation task does not build yet). Build its forward without "
                f"--task: the bundle computes the logits of whole sequences")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        return CacheShape(config.num_hidden_layers, kv, head_dim)
    fields = [getattr(model, f, None) for f in ("num_layers", "num_kv_heads", "head_dim")]
    if all(isinstance(f, int) for f in fields):
        return CacheShape(*fields)
    raise GenerationModelError(
        f"{type(model).__name__}: --task text-generation needs a transformers causal LM (a "
        f"config with num_hidden_layers, num_attention_heads, ...) or a module with int "
        f"attributes num_layers, num_kv_heads and head_dim whose forward(input_ids, "
        f"positions, cache) follows docs/generation.md")


def _vocab_size(model) -> int:
    config = _config(model)
    vocab = getattr(config, "vocab_size", None) or getattr(model, "vocab_size", None)
    if not isinstance(vocab, int):
        raise GenerationModelError(f"{type(model).__name__}: no vocab_size (config.vocab_size "
                                   f"or a vocab_size attribute)")
    return vocab


def _eos_ids(model) -> list[int]:
    sources = [getattr(model, "generation_config", None), _config(model), model]
    for source in sources:
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    return []


def _float_dtype(model) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32
