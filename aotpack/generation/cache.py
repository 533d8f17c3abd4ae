"""The KV cache a generation step writes in place (docs/generation.md).

`StaticKVCache` owns two buffers per layer, `[max_batch, max_seq_len, kv_heads, head_dim]`,
registered on the step module (so torch.export sees them as buffers the step mutates: the
compiler turns them into session state). `CacheView` is what one step call hands the model:
it writes each layer's new keys/values at (b, positions[b, s]) and returns the whole cache of
the batch's rows, in the [B, kv_heads, max_seq_len, head_dim] layout attention reads.

It implements the part of transformers' `Cache` interface that decoder layers call
(`update`, `get_seq_length`, ...) and is what a plain module following aotpack's convention
`forward(input_ids, positions, cache)` calls too: `k, v = cache.update(k, v, layer_idx)`.
"""
from __future__ import annotations

import torch
from torch import nn


class StaticKVCache(nn.Module):
    def __init__(self, layers: int, max_batch: int, max_seq_len: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, v_head_dim: int | None = None):
        """`v_head_dim`: the values' head dim where it is not the keys' (multi-head latent
        attention: DeepSeek-V2/V3 keys carry their rotary part, values do not)."""
        super().__init__()
        self.layers, self.max_batch, self.max_seq_len = layers, max_batch, max_seq_len
        shape = (max_batch, max_seq_len, kv_heads, head_dim)
        v_shape = shape[:3] + (v_head_dim or head_dim,)
        for i in range(layers):
            # persistent=False: the cache is state, never a weight the bundle stores
            self.register_buffer(f"k{i}", torch.zeros(shape, dtype=dtype), persistent=False)
            self.register_buffer(f"v{i}", torch.zeros(v_shape, dtype=dtype), persistent=False)

    def view(self, positions: torch.Tensor) -> "CacheView":
        return CacheView(self, positions)


class CacheView:
    """One step's handle on the cache: `positions` [B, S] (int64) say where each new token's
    keys and values go."""

    is_compileable = True  # transformers asks before tracing

    def __init__(self, cache: StaticKVCache, positions: torch.Tensor):
        self.cache, self.positions = cache, positions
        batch, seq = positions.shape
        self._rows = torch.arange(batch, device=positions.device).unsqueeze(1).expand(batch, seq)

    # -- the convention (and transformers' Cache.update) ------------------------------------
    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int,
               cache_kwargs=None) -> tuple[torch.Tensor, torch.Tensor]:
        """key/value [B, kv_heads, S, head_dim] → the batch's whole cache for this layer
        [B, kv_heads, max_seq_len, head_dim], with these tokens written."""
        return (self._write(getattr(self.cache, f"k{layer_idx}"), key),
                self._write(getattr(self.cache, f"v{layer_idx}"), value))

    def _write(self, buf: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        batch = new.shape[0]
        buf.index_put_((self._rows, self.positions), new.transpose(1, 2).to(buf.dtype))
        return buf[:batch].transpose(1, 2)

    def attention_mask(self, window: int | None = None) -> torch.Tensor:
        """bool [B, 1, S, max_seq_len]: key t is visible to token (b, s) iff t <= its position
        (and, with a sliding `window`, t > its position - window)."""
        from aotpack.kernels.reference.attention import positional_mask

        # the form passes/attention_positions.py turns back into the positions
        return positional_mask(self.positions, window or 0, self.cache.max_seq_len)

    # -- the rest of transformers' Cache interface that models call -------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # unused: the step passes cache_position and a prepared 4-D mask

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        return self.cache.max_seq_len

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0):
        return self.cache.max_seq_len, 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return 0

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * self.cache.layers

    def __len__(self) -> int:
        return self.cache.layers
