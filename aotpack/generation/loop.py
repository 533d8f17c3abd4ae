"""The token loop in Python, over any step function (the CPU reference of a bundle, or the
eager step module): what `aotpack_session_generate` does in C (docs/generation.md), greedy.
Tests compare it with transformers' generate; `aotpack verify` of a generation bundle uses it.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from aotpack.errors import UserError

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]


class GenerateArgumentError(UserError):
    pass


def check_request(prompts: Sequence[Sequence[int]], max_new_tokens: int, *, max_batch: int,
                  max_seq_len: int, vocab_size: int) -> None:
    """The runtime's checks before anything runs."""
    if not prompts or len(prompts) > max_batch:
        raise GenerateArgumentError(f"a batch of {len(prompts)} prompts: this bundle takes 1 "
                                    f"to {max_batch}")
    if max_new_tokens < 1:
        raise GenerateArgumentError(f"max_new_tokens {max_new_tokens}: at least 1")
    for i, p in enumerate(prompts):
        if not p:
            raise GenerateArgumentError(f"prompt {i} is empty")
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise GenerateArgumentError(f"prompt {i}: token id {bad[0]} is outside the "
                                        f"vocabulary [0, {vocab_size})")
        if len(p) + max_new_tokens - 1 > max_seq_len:
            raise GenerateArgumentError(
                f"prompt {i}: {len(p)} tokens + {max_new_tokens} new need "
                f"{len(p) + max_new_tokens - 1} cache positions; the bundle has {max_seq_len} "
                f"(build with a larger --max-seq-len)")


def prefill_inputs(prompts: Sequence[Sequence[int]]):
    """ids [B, S] (right-padded with 0), positions [B, S] (0..S-1 on every row: padding
    continues the positions and is overwritten before a query sees it), last_index [B]
    (b * S + len_b - 1)."""
    batch, seq = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(batch, seq, dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, :len(p)] = torch.tensor(list(p), dtype=torch.int64)
    positions = torch.arange(seq, dtype=torch.int64).expand(batch, seq).contiguous()
    last = torch.tensor([b * seq + len(p) - 1 for b, p in enumerate(prompts)],
                        dtype=torch.int64)
    return ids, positions, last


def generate(step: Step, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
             stop_ids: Sequence[int] = (), on_step: Callable | None = None) -> list[list[int]]:
    """Greedy tokens per sequence (each at most max_new_tokens, ending at a stop id, which is
    kept). `on_step(step_index, logits)` sees every step's logits [B, V] (teacher checks)."""
    stop = set(int(s) for s in stop_ids)
    lengths = [len(p) for p in prompts]
    next_ids, logits = step(*prefill_inputs(prompts))
    out = [[] for _ in prompts]
    done = [False] * len(prompts)
    for k in range(max_new_tokens):
        if on_step is not None:
            on_step(k, logits)
        for b, t in enumerate(next_ids.tolist()):
            if not done[b]:
                out[b].append(int(t))
                done[b] = int(t) in stop or len(out[b]) == max_new_tokens
        if all(done) or k == max_new_tokens - 1:
            break
        ids = next_ids.reshape(-1, 1).to(torch.int64)
        positions = torch.tensor([[n + k] for n in lengths], dtype=torch.int64)
        last = torch.arange(len(prompts), dtype=torch.int64)
        next_ids, logits = step(ids, positions, last)
    return out
