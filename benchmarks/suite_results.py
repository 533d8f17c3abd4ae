"""The suite's results document: one JSON file, rewritten (atomically) after every row, so a run
that is killed keeps everything measured until then. benchmarks/report.py and doc_tables.py
read it; documents of the older, scheduled suite (benchmarks/results/2026-11-30-*.json) have the
same schema with more keys ("schedule", "budget", "aoti.attempts").

Every planned (model, variant, label) is a row from the start, status "pending"; a row ends as
  ok           measured
  error        the variant raised (message in "error")
  crash        the process died on a signal (e.g. SIGSEGV), "error" says which
  timeout      the process ran past its time limit and was killed
  skipped      not run: the --budget-s deadline or the choice of variants ("error" says why)
  unsupported  aotpack cannot build this model yet ("error": "unsupported: <reason>")
  missing      no bundle was provided for this model
A row is never dropped: a variant that fails is a row with its error.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA = "aotpack-bench-suite/1"
STATUSES = ("ok", "error", "crash", "timeout", "skipped", "unsupported", "missing", "pending")

# Measured fields of a row; None until measured (the report prints "—").
ROW_FIELDS = (
    "median_ms", "p10_ms", "p90_ms", "sync_ms", "reps",
    "tflops", "gbps", "ceiling_frac",
    "build_s", "build_note", "artifact_bytes", "artifact_note",
    "peak_mem_bytes", "peak_mem_method", "device_mem_bytes",
    "launches", "graph_launches", "launches_method",
    "cold_start_s", "cold_start_runs", "cold_start_note",
    "rel_err_vs_eager", "wall_s",
)


def new_row(model: str, variant: str, label: str = "") -> dict:
    row = {"model": model, "variant": variant, "label": label, "status": "pending", "error": None}
    row.update({k: None for k in ROW_FIELDS})
    row["notes"] = []
    return row


def row_key(row: dict) -> tuple[str, str, str]:
    return row["model"], row["variant"], row["label"]


class Results:
    def __init__(self, path: Path | None, meta: dict):
        self.path = path
        self.doc = {"schema": SCHEMA, **meta, "ceilings": {}, "models": {}, "rows": [],
                    "aoti": {"toolchain": {}, "recipe": None, "conclusion": None},
                    "warnings": []}

    @property
    def rows(self) -> list[dict]:
        return self.doc["rows"]

    def row(self, model: str, variant: str, label: str = "") -> dict:
        for r in self.rows:
            if row_key(r) == (model, variant, label):
                return r
        r = new_row(model, variant, label)
        self.rows.append(r)
        return r

    def reset(self, model: str, variant: str, label: str = "") -> dict:
        """The row as planned (pending, nothing measured), in its place: what this run measures
        replaces what a merged document had."""
        fresh = new_row(model, variant, label)
        for i, r in enumerate(self.rows):
            if row_key(r) == (model, variant, label):
                self.rows[i] = fresh
                return fresh
        self.rows.append(fresh)
        return fresh

    def update(self, model: str, variant: str, label: str = "", **fields) -> dict:
        """Merges measured fields (unknown keys go to the row too; "notes" are appended)."""
        r = self.row(model, variant, label)
        notes = fields.pop("notes", None) or []
        if isinstance(notes, str):
            notes = [notes]
        r["notes"].extend(n for n in notes if n not in r["notes"])
        r.update(fields)
        self.write()
        return r

    def merge(self, path: Path, meta: dict) -> None:
        """Continue the document of an earlier run (--merge): its rows, ceilings and models
        stay, this run's rows replace theirs (a model measured in several GPU calls becomes
        one document); this run's meta is added under "runs"."""
        old = load(path)
        runs = old.pop("runs", None) or [{k: old.get(k) for k in ("date", "commit", "command")}]
        old.update(meta, runs=runs + [{k: meta.get(k) for k in ("date", "commit", "command")}])
        self.doc = {**self.doc, **old}
        self.write()

    def finish_pending(self, reason: str) -> None:
        for r in self.rows:
            if r["status"] == "pending":
                r["status"], r["error"] = "skipped", reason
        self.write()

    def warn(self, message: str) -> None:
        self.doc["warnings"].append(message)
        self.write()

    def write(self) -> None:
        derive_throughput(self.doc)
        if self.path is None:
            return
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, sort_keys=False) + "\n")
        os.replace(tmp, self.path)


def derive_throughput(doc: dict) -> None:
    """TFLOP/s and GB/s of every timed row from its model's FLOPs/bytes, and the fraction of the
    ceiling that bounds the model (GEMM ceiling for compute-bound, copy ceiling for memory-bound),
    both measured in the same run."""
    ceil = doc.get("ceilings") or {}
    for r in doc["rows"]:
        m = doc["models"].get(r["model"]) or {}
        t = r.get("median_ms")
        if not t or not m:
            continue
        if m.get("flops"):
            r["tflops"] = round(m["flops"] / (t * 1e-3) / 1e12, 2)
        if m.get("bytes"):
            r["gbps"] = round(m["bytes"] / (t * 1e-3) / 1e9, 1)
        if m.get("bound") == "memory" and r["gbps"] and ceil.get("copy_gbps"):
            r["ceiling_frac"] = round(r["gbps"] / ceil["copy_gbps"], 3)
        elif m.get("bound") == "compute" and r["tflops"] and ceil.get("gemm_tflops"):
            r["ceiling_frac"] = round(r["tflops"] / ceil["gemm_tflops"], 3)


def failure_fields(status: str, error: str, **extra) -> dict:
    """The fields of a row whose variant did not produce a measurement."""
    assert status in STATUSES and status not in ("ok", "pending"), status
    return {"status": status, "error": error, **extra}


def load(path: Path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    return doc
