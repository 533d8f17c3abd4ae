"""What can be tuned, and how: the candidate configs of one kernel op and how to compile one.

A candidate is a JSON-able dict `{"template": <name>, **fields}` — the same dict the tuning
database stores for a winner, so a build can compile exactly what was measured. The first
candidate of every op is the one a build without tuning data compiles (the heuristic), which
makes it the natural reference for correctness and the baseline of the speed-up.

Each op's kernel template (aotpack/kernels/templates.py) gives its candidates and compiles
them; this module adds the tuning level (how many per backend `fast` measures) and the
family key (which template and sources a record belongs to). Tunable today: GEMMs (Triton tile
and split-K configs, CuTeDSL tiles/clusters), convolutions (implicit-GEMM tiles, depthwise
blocks), attention (tile/stage configs), RMSNorm and RoPE (rows or positions per program,
warps) and LayerNorm / softmax / last-dim reductions (warps).
Generated pointwise kernels and embeddings have one config.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotpack.kernels.spec import KernelOp, Target
from aotpack.kernels.templates import template_for

LEVELS = ("fast", "full")


@dataclass(frozen=True)
class Family:
    template: str  # key component: which family of kernels competes for the op
    sources: tuple[str, ...]


def family(op: KernelOp) -> Family | None:
    """The tunable family of `op`, or None when it has a single config."""
    t = template_for(op)
    return Family(t.name, t.sources) if t.tunable else None


def candidate_name(config: dict) -> str:
    fields = " ".join(f"{k}={_short(v)}" for k, v in config.items() if k != "template")
    return f"{config['template']} {fields}".strip()


def _short(v) -> str:
    return {True: "1", False: "0"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def candidates(op: KernelOp, target: Target, *, level: str = "full",
               gemm_backend: str = "auto") -> list[dict]:
    """Candidate configs of a concrete `op`, heuristic first; [] when it is not tunable."""
    if level not in LEVELS:
        raise ValueError(f"unknown tuning level {level!r}: {' or '.join(LEVELS)}")
    t = template_for(op)
    if not t.tunable:
        return []
    configs = t.candidates(op, target, gemm_backend)
    if level == "fast":
        kept, seen = [], {}
        for i, c in enumerate(configs):
            n = seen.get(c["template"], 0)
            if i == 0 or n < t.fast_limit(c["template"]):
                kept.append(c)
                seen[c["template"]] = n + 1
        configs = kept
    return configs


def compile_candidate(op: KernelOp, target: Target, config: dict):
    """Launches of `op` compiled with exactly `config` (a candidate dict). Raises ValueError /
    RuntimeError when the config cannot compile this op on `target`."""
    return template_for(op).compile(op, config, target)
