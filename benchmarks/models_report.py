"""docs/performance.md's table of real model families (issue 15), from a bench_models.py
results JSON (rows: model, point, contender, ms, rel_err, launches, build_s).

    python benchmarks/models_report.py benchmarks/results/2026-12-03-h200-coverage-models.json

Rewrites the doc's `coverage-models` block (benchmarks/doc_tables.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

ORDER = ("eager", "compile", "aotpack")
TITLES = {"eager": "eager", "compile": "torch.compile max-autotune", "aotpack": "aotpack"}
NAMES = {"bert_base_padded": "BERT-base, padded batch 8x128",
         "t5_base_encoder": "T5-base encoder, padded 8x256",
         "gemma2_block": "Gemma-2-2B, 2 layers, 1x2048 (head dim 256, soft cap)",
         "mixtral_moe": "Mixtral-8x7B MoE layer (8 experts, top-2)",
         "mpnet_base_padded": "MPNet-base, padded batch 8x128 (relative bias)",
         "bloom_padded": "BLOOM-560m layers x4, padded 4x512 (ALiBi)"}


def grouped(doc: dict) -> dict[tuple[str, str], dict[str, dict]]:
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for r in doc["rows"]:  # rows a later call re-measured say superseded_by: history only
        if r.get("ms") and not r.get("superseded_by"):
            out.setdefault((r["model"], r.get("point", "")), {})[r["contender"]] = r
    return out


def table(doc: dict, link: str) -> str:
    head = ["model", *(f"{TITLES[c]} ms" for c in ORDER), "aotpack vs best other",
            "aotpack rel. err vs eager", "launches (eager → aotpack)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, point), cells in grouped(doc).items():
        best = min(r["ms"] for r in cells.values())
        times = [("—" if c not in cells else f"**{cells[c]['ms']:.3f}**"
                  if cells[c]["ms"] == best else f"{cells[c]['ms']:.3f}") for c in ORDER]
        ours = cells.get("aotpack", {})
        others = [r["ms"] for c, r in cells.items() if c != "aotpack"]
        ratio = f"{min(others) / ours['ms']:.2f}×" if ours and others else "—"
        err = f"{ours['rel_err']:.1e}" if ours.get("rel_err") is not None else "—"
        eager = cells.get("eager", {}).get("launches")
        launches = f"{eager} → {ours.get('launches')}" if eager else str(ours.get("launches"))
        tokens = point.replace("T=", "")
        name = NAMES.get(model, model) + (
            f", {tokens} token{'s' if tokens != '1' else ''}" if point else "")
        lines.append("| " + " | ".join([name, *times, ratio, err, launches]) + " |")
    lines += ["", f"{doc['gpu']}, driver {doc['driver']}, torch {doc['torch']}, {doc['date']}, "
              f"commit {doc['commit']} ([results]({link})). {doc['what']}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    import doc_tables

    ap = argparse.ArgumentParser(description="bench_models.py results → docs/performance.md")
    ap.add_argument("results", type=Path)
    ap.add_argument("--doc", type=Path, default=doc_tables.PERFORMANCE)
    args = ap.parse_args(argv)
    doc_tables.update(args.doc, "coverage-models", [args.results])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
