"""What benchmarks/bench_generate.py runs: transformers' generate (eager), the gpt-fast recipe (a
static KV cache and a torch.compile'd decode step), aotpack's Generator and aotpack-run, and
the copy-bandwidth probe. The calls into aotpack's runtime (issue 18, still being written) are
each in one small adapter function (`aotpack_*`), so that an interface change is a one-line fix.

Every function here runs on the CPU too (timing with perf_counter instead of CUDA events), so
the CPU tests can run the eager and static-cache paths on the tiny model.
"""
from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import torch


# --------------------------------------------------------------------------- timing
class Stopwatch:
    """Marks on the device's stream (CUDA events) or the host clock; ms between marks. On
    CUDA, read only after `finish()` (one synchronize, after the timed work)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def finish(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, a: int, b: int) -> float:
        if self.cuda:
            return self.marks[a].elapsed_time(self.marks[b])
        return (self.marks[b] - self.marks[a]) * 1000.0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Fixed prompts: ids drawn by Python's own generator (the same on every machine), below
    128000 so that they avoid Llama-3's special ids."""
    rng = random.Random(seed * 1_000_003 + length * 131 + batch)
    top = min(vocab, 128000)
    return [[rng.randrange(top) for _ in range(length)] for _ in range(batch)]


def as_tensor(batch_prompts: list[list[int]], device) -> torch.Tensor:
    """Equal-length prompts as one [B, L] int64 tensor."""
    if len({len(p) for p in batch_prompts}) != 1:
        raise ValueError("the timed runs use prompts of one length (no padding)")
    return torch.tensor(batch_prompts, dtype=torch.int64, device=device)


# ------------------------------------------------------------------ transformers eager
def hf_generate(model, ids: torch.Tensor, new: int, **extra) -> torch.Tensor:
    """Greedy, exactly `new` tokens, eos ignored as aotpack's ignore_eos does: the model's
    generation config has no eos id during the call. (min_new_tokens=new would give the same
    lengths, but it masks the eos logit, so a greedy run that reaches eos picks the runner-up
    there: other ids than a loop that just goes on.) [B, new] ids."""
    config = model.generation_config
    eos = config.eos_token_id
    config.eos_token_id = None
    try:
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=new, do_sample=False, **extra)
    finally:
        config.eos_token_id = eos
    return out[:, ids.shape[1]:]


def timed_generate(model, ids: torch.Tensor, new: int, **extra) -> tuple[float, torch.Tensor]:
    """ms of one generate call, end to end (its ids come back to the host: generate syncs)."""
    watch = Stopwatch(ids.device)
    watch.mark()
    out = hf_generate(model, ids, new, **extra)
    watch.mark()
    watch.finish()
    return watch.ms(0, 1), out


EAGER = {"disable_compile": True}  # 5.x compiles a static cache's forward on its own: not here


# ------------------------------------------------------------------ gpt-fast's recipe
def _decode_one(model, token, cache_position, cache):
    logits = model(input_ids=token, cache_position=cache_position, past_key_values=cache,
                   use_cache=True, return_dict=False)[0]
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True)


class StaticLoop:
    """gpt-fast's recipe on transformers' model: a StaticCache (fixed addresses and shapes),
    the prefill run as is, every decode step one call of a torch.compile'd function (one
    token in, the next greedy token out; CUDA graphs under reduce-overhead / max-autotune).

    One cache per batch size, reused (reset) by every run of that batch, so that the compiled
    step and its CUDA graph are made once per batch size, not per prompt."""

    def __init__(self, model, max_cache_len: int, mode: str | None, fullgraph: bool = True):
        self.model, self.max_cache_len = model, max_cache_len
        self.mode = None if mode == "none" else mode
        self.fullgraph = fullgraph
        self.caches: dict[int, object] = {}
        self.step = self._compiled() if self.mode else _decode_one
        self.notes: list[str] = []

    def _compiled(self):
        return torch.compile(_decode_one, mode=None if self.mode == "default" else self.mode,
                             fullgraph=self.fullgraph)

    def _cache(self, batch: int):
        from transformers import StaticCache

        cache = self.caches.get(batch)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=self.max_cache_len)
            self.caches[batch] = cache
        else:
            cache.reset()
        return cache

    @torch.no_grad()
    def run(self, ids: torch.Tensor, new: int) -> tuple[dict, torch.Tensor]:
        """{"ttft_ms", "decode_ms"} (the prefill with its token; the new-1 decode steps) and
        the [B, new] ids."""
        batch, length = ids.shape
        if length + new > self.max_cache_len:
            raise ValueError(f"prompt {length} + {new} new > the cache's {self.max_cache_len}")
        cache = self._cache(batch)
        watch = Stopwatch(ids.device)
        watch.mark()
        logits = self.model(input_ids=ids, cache_position=torch.arange(length, device=ids.device),
                            past_key_values=cache, use_cache=True, logits_to_keep=1,
                            return_dict=False)[0]
        token = torch.argmax(logits[:, -1], dim=-1, keepdim=True)
        watch.mark()
        tokens = [token]
        # one position tensor stepped in place (gpt-fast's input_pos += 1): no host-to-device
        # copy per step, and the same tensor (shape, offset) for the compiled step every time
        position = torch.tensor([length], dtype=torch.int64, device=ids.device)
        for _ in range(new - 1):
            if self.mode and self.mode != "default":
                torch.compiler.cudagraph_mark_step_begin()
            # clone: a CUDA graph's output is overwritten by its next replay
            token = self.step(self.model, token, position, cache).clone()
            tokens.append(token)
            position += 1
        watch.mark()
        watch.finish()
        return {"ttft_ms": watch.ms(0, 1), "decode_ms": watch.ms(1, 2)}, torch.cat(tokens, 1)


# --------------------------------------------------------------- aotpack (adapters)
def aotpack_generator(bundle: Path, device: int = 0):
    """aotpack's runtime on a generation bundle (the bundle's external weights beside it)."""
    from aotpack.runtime import Generator

    return Generator(str(bundle), device=device)


def aotpack_generate(generator, batch_prompts: list[list[int]], new: int) -> dict:
    """One greedy run of exactly `new` tokens per sequence: the runtime's own timings (TTFT:
    prefill and its token; decode_ms: the new-1 decode steps) and the ids."""
    result = generator.generate(batch_prompts, max_new_tokens=new, temperature=0.0,
                                ignore_eos=True)
    return {"tokens": [list(t) for t in result.tokens], "ttft_ms": float(result.ttft_ms),
            "decode_ms": float(result.decode_ms),
            "runtime_decode_tok_s": float(result.decode_tokens_per_s)}


def aotpack_run_command(run: str, bundle: Path, new: int, batch: int, prompt: list[int]
                        ) -> list[str]:
    """aotpack-run's generate mode: `batch` sequences from one prompt (sequence i its first
    len - i tokens), exactly `new` tokens each."""
    return [run, str(bundle), "--generate", str(new), "--prompt-ids",
            ",".join(map(str, prompt)), "--batch", str(batch), "--ignore-eos"]


def run_process(cmd: list[str], timeout_s: float) -> tuple[float, int, str]:
    """Wall ms from process start to its exit, its return code and its output."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timed out after {timeout_s:.0f} s: {e}"
    return (time.perf_counter() - t0) * 1000.0, rc, text


def find_aotpack_run(given: str | None) -> str | None:
    for candidate in (given, os.environ.get("AOTPACK_RUN")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


# ---------------------------------------------------------------------- the ceiling
def copy_bandwidth(device: torch.device, gib: float = 2.0, reps: int = 20) -> dict:
    """A device-to-device copy of `gib` GiB (far past the L2), median of `reps` after a
    warm-up, CUDA events: the bandwidth decode can hope for."""
    from gen_math import copy_gbps

    n = int(gib * 2 ** 30)
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)  # not zeros
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        watch = Stopwatch(device)
        watch.mark()
        dst.copy_(src)
        watch.mark()
        watch.finish()
        times.append(watch.ms(0, 1))
    times.sort()
    ms = times[len(times) // 2]
    del src, dst
    return {"bytes": n, "ms": ms, "gbps": copy_gbps(n, ms)}


# ------------------------------------------------------------------ the reference's view
@torch.no_grad()
def reference_logits(model, prompt: list[int], prefix: list[int]) -> dict:
    """The eager model's next-token logits after prompt + prefix, with the LM head in float32
    (bf16 logits tie too often to rank two tokens): {"top2", "logit": {id: value}} for
    gen_math.divergence_report, every id's logit available through a lazy mapping."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + prefix], dtype=torch.int64, device=device)
    hidden = model.model(input_ids=ids, return_dict=False)[0][0, -1]
    head = model.get_output_embeddings().weight
    logits = (head.float() @ hidden.float()).cpu()
    values, index = torch.topk(logits, 2)
    top2 = [(int(i), float(v)) for i, v in zip(index, values)]
    return {"top2": top2, "logit": _Lookup(logits)}


class _Lookup(dict):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def __missing__(self, key):
        return float(self.logits[key])
