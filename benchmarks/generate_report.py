"""docs/performance.md's text-generation table, from a bench_generate.py result JSON.

    python benchmarks/generate_report.py benchmarks/results/2026-12-02-h200-generate.json
        [--doc docs/performance.md]

--doc points the doc's `generate` block (benchmarks/doc_tables.py) at this result and
rewrites it; for docs/performance.md, README.md's short table follows. Without it: printed.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

CONTENDERS = ("aotpack", "aotpack-run", "gptfast", "eager")


def table(doc: dict, source: str) -> str:
    lines = [f"{doc['gpu']}, driver {doc['driver']}, torch {doc['torch']}, transformers "
             f"{doc['transformers']}, {doc['date'][:10]} ([results]({source})). Greedy, 256 new "
             f"tokens; decode tok/s for the whole batch; floor: weights + KV cache read per step "
             f"at the measured copy bandwidth ({doc['copy']['gbps'] / 1000:.2f} TB/s). gpt-fast: "
             f"static KV cache + torch.compile(mode=\"{doc['args']['compile_mode']}\") of the "
             f"decode step. Cold start: process start to first token of `aotpack-run --generate`.",
             "",
             "| model | batch | prompt | aotpack tok/s (% floor) | TTFT ms | gpt-fast tok/s | "
             "TTFT ms | eager tok/s | aotpack / gpt-fast | cold start ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model, m in doc["models"].items():
        for cell, c in m["cells"].items():
            b, p = (int(x[1:]) for x in cell.split("_"))
            a, g, e, r = (c.get(k) or {} for k in ("aotpack", "gptfast", "eager", "aotpack-run"))
            ratio = (f"{a['decode_tok_s'] / g['decode_tok_s']:.2f}x"
                     if a.get("decode_tok_s") and g.get("decode_tok_s") else "—")
            lines.append(
                f"| {model} | {b} | {p} | {_n(a, 'decode_tok_s')} ({_n(a, 'pct_of_floor')}) | "
                f"{_n(a, 'ttft_ms', 2)} | {_n(g, 'decode_tok_s')} | {_n(g, 'ttft_ms', 1)} | "
                f"{_n(e, 'decode_tok_s')} | {ratio} | {_n(r, 'cold_first_token_ms')} |")
    return "\n".join(lines)


def _n(d: dict, key: str, digits: int = 0) -> str:
    v = d.get(key)
    return "—" if v is None else f"{v:.{digits}f}"


def main(argv=None) -> int:
    import doc_tables

    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("--doc", "--readme", dest="doc",
                    help="markdown file with a generate block to rewrite (docs/performance.md)")
    args = ap.parse_args(argv)
    if args.doc:
        doc_tables.update(Path(args.doc), "generate", [args.result])
    else:
        print(table(json.loads(Path(args.result).read_text()), args.result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
