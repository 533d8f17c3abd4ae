"""Build with a tuning database: every tunable op (every bucket of a symbolic op, at its
representative size) whose key has a record is compiled with the measured winner; every other
op keeps the heuristic. What was used goes into the bundle's provenance (deterministic: op
order, no timestamps), and the build says how many ops were tuned and how many records for
this model's ops are stale."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aotpack.kernels.spec import KernelOp, Target
from aotpack.tuning import keys
from aotpack.tuning.db import TuningDB

log = logging.getLogger(__name__)


@dataclass
class TunedChooser:
    """choose(op, template) -> config: the measured winner where `db` has one, else the
    template's heuristic (GEMMs on `backend`). `op` is concrete (a bucket's representative)."""

    db: TuningDB
    target: Target
    backend: str = "triton"
    used: dict[str, dict] = field(default_factory=dict)  # key -> provenance entry
    tunable: set = field(default_factory=set)  # keys of tunable ops seen
    stale: set = field(default_factory=set)  # keys whose shape has only stale records
    missing_backend: set = field(default_factory=set)  # winners this install cannot compile

    def __post_init__(self):
        self._shape_keys = self.db.shape_keys()

    def __call__(self, op: KernelOp, template) -> dict:
        if template.tunable:
            key, shape_key = keys.problem_keys(op, self.target, template.name, template.sources)
            self.tunable.add(key)
            rec = self.db.lookup(key)
            inner = template.tuned_as(op) if rec is None else None
            if inner is not None:  # e.g. a GEMM fused with a norm: the GEMM's own record
                rec = self.db.lookup(keys.problem_keys(inner[0], self.target, inner[1].name,
                                                       inner[1].sources)[0])
            if rec is not None and not _can_compile(rec["winner"]["config"]):
                self.missing_backend.add(key)  # a CuTeDSL winner here without CuTeDSL
                rec = None
            if rec is not None and not _same_compilers(rec["winner"]):
                self.stale.add(key)  # won with another CuTeDSL version than the one here
                rec = None
            if rec is not None:
                self.used.setdefault(key, {
                    "key": key, "desc": rec.get("desc", ""), "winner": rec["winner"]["name"],
                    "median_us": rec["winner"]["median_us"],
                    "baseline_us": (rec.get("baseline") or {}).get("median_us"),
                    "device": rec["device"].get("name"), "driver": rec["device"].get("driver")})
                log.debug("tuned: %s -> %s (%.1f us)", template.describe(op),
                          rec["winner"]["name"], rec["winner"]["median_us"])
                return rec["winner"]["config"]
            if shape_key in self._shape_keys:
                self.stale.add(key)
            log.debug("not tuned: %s (key %s%s)", template.describe(op), key[:12],
                      ", stale records" if key in self.stale else "")
        return template.default_config(op, self.target, self.backend)

    def provenance(self) -> dict:
        return {"records": list(self.used.values())}

    def notes(self) -> list[str]:
        """What the build should tell the user (the stale line is a warning in substance)."""
        out = [f"tuning database: {len(self.used)} of {len(self.tunable)} tunable kernel ops "
               f"compiled with measured winners"]
        if self.missing_backend:
            out.append(f"tuning database: {len(self.missing_backend)} op(s) won by a CuTeDSL "
                       f"config compiled with the heuristic instead: nvidia-cutlass-dsl is not "
                       f"installed (pip install nvidia-cutlass-dsl==4.8.1)")
        if self.stale:
            out.append(f"tuning database: {len(self.stale)} op(s) have only stale records "
                       f"(measured with other kernel sources or toolchain versions): ignored; "
                       f"re-run `aotpack tune` and `aotpack-run --tune` to refresh them")
        return out


def _same_compilers(winner: dict) -> bool:
    """The winner's backend compilers (beyond the key's) are the versions installed here.
    Records written before they were recorded say nothing, and are used as before."""
    recorded = winner.get("toolchain")
    template = winner["config"].get("template", "")
    return recorded is None or recorded == keys.backend_toolchain(template)


def _can_compile(config: dict) -> bool:
    if config.get("template") != "gemm.cutedsl":
        return True
    from aotpack.kernels.gemm_template import cutedsl

    return cutedsl() is not None
