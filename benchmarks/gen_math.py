"""The arithmetic of benchmarks/bench_generate.py, apart from any GPU so that tests can check it
on made-up timings: the decode floor, rates from timings, the divergence report, the time
budget, aotpack-run's summary line and the table. No torch at import.
"""
from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass


# ------------------------------------------------------------------------------ the floor
def weight_bytes_per_step(shape, dtype_bytes: int = 2) -> int:
    """Bytes of weights one decode step must read: every parameter once (a tied embedding is
    one matrix, which the LM head reads whole), except an untied input embedding, of which a
    step reads only B rows (left out: a few KB)."""
    s = shape
    attn = s.hidden * s.head_dim * (s.heads + 2 * s.kv_heads) + s.heads * s.head_dim * s.hidden
    mlp = 3 * s.hidden * s.intermediate
    norms = 2 * s.hidden
    head = s.vocab * s.hidden
    return dtype_bytes * (s.layers * (attn + mlp + norms) + s.hidden + head)


def mean_decode_context(prompt: int, new: int) -> float:
    """Keys each sequence attends over in a decode step, averaged over the new-1 decode steps
    (step j = 1..new-1 feeds token prompt+j-1 and attends over prompt+j keys)."""
    if new < 2:
        return float(prompt)
    return prompt + new / 2


def kv_bytes_per_step(shape, batch: int, context: float, dtype_bytes: int = 2) -> float:
    """K and V of every layer read over `context` positions per sequence."""
    per_position = 2 * shape.layers * shape.kv_heads * shape.head_dim * dtype_bytes
    return batch * context * per_position


def decode_floor(shape, batch: int, prompt: int, new: int, copy_gbps: float,
                 dtype_bytes: int = 2) -> dict:
    """The fewest bytes a decode step moves over the measured copy bandwidth (GB/s, bytes read
    plus written): no implementation's step is faster."""
    weights = weight_bytes_per_step(shape, dtype_bytes)
    kv = kv_bytes_per_step(shape, batch, mean_decode_context(prompt, new), dtype_bytes)
    return {"weight_bytes": weights, "kv_bytes": round(kv),
            "floor_step_ms": (weights + kv) / (copy_gbps * 1e6)}


def pct_of_floor(floor_step_ms: float, step_ms: float | None) -> float | None:
    """How close a measured step is to the floor: 100 % is the floor itself."""
    if not step_ms:
        return None
    return 100.0 * floor_step_ms / step_ms


def copy_gbps(buffer_bytes: int, ms: float) -> float:
    """A device-to-device copy of `buffer_bytes` reads and writes it: 2x the bytes."""
    return 2 * buffer_bytes / (ms * 1e6)


# ---------------------------------------------------------------------------- rates
def rates_from_generate(t1_ms: float, tn_ms: float, new: int, batch: int) -> dict:
    """transformers' generate timed with max_new_tokens=1 (prefill + the first token: TTFT)
    and with `new` tokens: each of the new-1 decode steps costs (t(N) - t(1)) / (N - 1)."""
    if new < 2:
        raise ValueError("decode rates need at least 2 new tokens")
    step = (tn_ms - t1_ms) / (new - 1)
    return {"ttft_ms": t1_ms, "decode_step_ms": step, "decode_tok_s": tok_s(batch, step)}


def rates_from_phases(ttft_ms: float, decode_ms: float, new: int, batch: int) -> dict:
    """A loop timed by its own phases: the prefill (TTFT) and the new-1 decode steps."""
    if new < 2:
        raise ValueError("decode rates need at least 2 new tokens")
    step = decode_ms / (new - 1)
    return {"ttft_ms": ttft_ms, "decode_step_ms": step, "decode_tok_s": tok_s(batch, step)}


def tok_s(batch: int, step_ms: float) -> float | None:
    """Tokens per second of the whole batch (each step makes one token per sequence)."""
    return batch * 1000.0 / step_ms if step_ms and step_ms > 0 else None


def median_of(runs: list[dict]) -> dict:
    """Per key, the median over runs (keys of numbers only); 'runs' = how many."""
    out = {"runs": len(runs)}
    for key in runs[0] if runs else ():
        vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if vals and len(vals) == len(runs):
            out[key] = statistics.median(vals)
    return out


# ------------------------------------------------------------------------ correctness
def first_divergence(ref: list[int], got: list[int]) -> int | None:
    """The first index where the two id lists differ (a shorter list differs where it ends);
    None when they are equal."""
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            return i
    return None if len(ref) == len(got) else min(len(ref), len(got))


def bf16_ulp(x: float) -> float:
    """The spacing of bf16 numbers at |x| (8 significant bits)."""
    if x == 0 or not math.isfinite(x):
        return 2.0 ** -133
    return 2.0 ** (math.floor(math.log2(abs(x))) - 7)


def divergence_report(ref: list[int], got: list[int], logits_at=None,
                      tie_ulps: float = 2.0) -> dict:
    """Where `got` (aotpack) leaves `ref` (eager), and the reference's view of that token:
    `logits_at(i)` gives {"top2": [(id, logit), (id, logit)], "logit": {id: logit}} of the
    reference after the common prefix ref[:i] (the same for both up to i). A gap between the
    reference's choice and aotpack's within `tie_ulps` bf16 spacings of the top logit is a
    near tie: bf16 rounding decides it, not a bug (reported, never failed)."""
    i = first_divergence(ref, got)
    report = {"tokens": len(ref), "first_divergence": i,
              "verdict": "match" if i is None else "diverged"}
    if i is None or i >= min(len(ref), len(got)) or logits_at is None:
        return report
    view = logits_at(i)
    ref_logit, got_logit = view["logit"][ref[i]], view["logit"][got[i]]
    gap = ref_logit - got_logit
    report.update({"ref_id": ref[i], "got_id": got[i], "top2": view["top2"],
                   "ref_logit": ref_logit, "got_logit": got_logit, "gap": gap,
                   "verdict": "near-tie" if gap <= tie_ulps * bf16_ulp(view["top2"][0][1])
                   else "mismatch"})
    return report


# ----------------------------------------------------------------------- aotpack-run
_FIELD = re.compile(r"(\w+)=([-+0-9.eE]+|nan|inf)")


def parse_generate_line(output: str) -> dict:
    """aotpack-run --generate's last line `generate: batch=.. prompt=.. new=.. ttft_ms=..
    decode_tok_s=..` as numbers; {} when the output has no such line."""
    lines = [l for l in output.splitlines() if l.startswith("generate:")]
    if not lines:
        return {}
    out = {}
    for key, value in _FIELD.findall(lines[-1]):
        number = float(value)
        out[key] = int(number) if number.is_integer() and key in ("batch", "prompt", "new") \
            else number
    return out


# ---------------------------------------------------------------------------- budget
@dataclass
class Budget:
    """A deadline for the whole run: what does not fit is skipped, and says so."""

    seconds: float
    clock: object = time.monotonic
    start: float | None = None

    def __post_init__(self):
        if self.start is None:
            self.start = self.clock()

    def left(self) -> float:
        return self.seconds - (self.clock() - self.start)

    def fits(self, estimate_s: float) -> bool:
        return estimate_s <= self.left()

    def share(self, weight: float = 1.0, weights_left: float = 1.0) -> float:
        """The slice of what is left for a piece of work of `weight`, where the work not yet
        done (this piece included) weighs `weights_left` in all."""
        return max(self.left(), 0.0) * weight / max(weights_left, weight, 1e-9)


def repeats_that_fit(one_run_s: float, slice_s: float, wanted: int) -> int:
    """Timed repeats of a run of `one_run_s` that fit a slice (at least 1, at most wanted)."""
    if one_run_s <= 0:
        return wanted
    return max(1, min(wanted, int(slice_s // one_run_s)))


# ----------------------------------------------------------------------------- table
COLUMNS = (("model", 11), ("B", 2), ("prompt", 6), ("contender", 13), ("ttft_ms", 9),
           ("step_ms", 8), ("tok_s", 8), ("floor%", 6), ("note", 0))


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"
    return str(value)


def table(rows: list[dict]) -> str:
    """rows: {model, B, prompt, contender, ttft_ms, step_ms, tok_s, floor%, note}."""
    head = " ".join(name.ljust(width) for name, width in COLUMNS).rstrip()
    lines = [head]
    for row in rows:
        lines.append(" ".join((row.get(name) or "" if name == "note" else _cell(row.get(name)))
                              .ljust(width) for name, width in COLUMNS).rstrip())
    return "\n".join(lines)
