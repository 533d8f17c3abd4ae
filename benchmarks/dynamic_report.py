"""docs/performance.md's dynamic-shapes table and the latency-vs-shape chart, from a results JSON
written from benchmarks/dynamic_bench.py runs (benchmarks/results/*-dynamic-shapes.json).

    python benchmarks/dynamic_report.py benchmarks/results/2026-12-01-h200-dynamic-shapes.json
        [--doc docs/performance.md] [--no-chart]

Writes <json stem>.png beside the JSON (needs matplotlib) and points the doc's `dynamic` block
(benchmarks/doc_tables.py) at this results file and rewrites it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ("llama_prefill", "llama_decode", "gpt2", "bert_base", "vit_b16")


def _run_rows(model: dict) -> dict:
    return {r["shape"]: r for r in model.get("aotpack_run", [])}


def _compiled(doc: dict, name: str, shape: str):
    """torch.compile's time at a shape, the commit of the run that measured it and its mode:
    max-autotune runs first (the stronger peer), then the latest run of any mode."""
    found = []
    for run in [doc["final"], *doc.get("earlier", [])]:
        model = run["models"].get(name, {})
        for r in model.get("rows", []):
            if r["shape"] == shape and "compiled_ms" in r:
                found.append((r["compiled_ms"], model.get("commit", run["commit"]),
                              model.get("compile_mode", "default")))
    found.sort(key=lambda f: f[2] != "max-autotune")
    return found[0] if found else (None, None, None)


def table(doc: dict, link: str) -> str:
    """The table; `link`: the results JSON relative to the doc that shows it."""
    lines = ["| model (dims) | shape | dynamic ms | static ms | dynamic ÷ static "
             "(aotpack-run) | eager ms | torch.compile(dynamic=True) ms | rel. error |",
             "|---|---|---|---|---|---|---|---|"]
    models = doc["final"]["models"]
    for name in ORDER:
        m = models.get(name)
        if m is None:
            continue
        runs = _run_rows(m)
        dims = ", ".join(d.split("=", 1)[1] for d in doc["dims"][name])
        for i, r in enumerate(m["rows"]):
            run = runs.get(r["shape"])
            ratio = f"{r['dynamic_ms'] / r['static_ms']:.2f}" if "static_ms" in r else "—"
            if run:
                r_med = run["dynamic_ms"] / run["static_ms"]
                r_p10 = run["dynamic_p10_ms"] / run["static_p10_ms"]
                # a median over 5 % off with equal p10s is a throttled window, not the kernels
                ratio += (f" ({r_med:.2f}; p10 {r_p10:.2f})" if abs(r_med - 1) > 0.05
                          else f" ({r_med:.2f})")
            compiled, commit, mode = _compiled(doc, name, r["shape"])
            comp = "—" if compiled is None else (
                f"{compiled:.3f} ({'max-autotune' if mode == 'max-autotune' else 'default'}"
                f"{'' if commit == doc['final']['commit'] else ', ' + commit})")
            label = f"{name} ({dims})" + (f", {m['commit']}" if "commit" in m else "")
            lines.append(f"| {label if i == 0 else ''} | "
                         f"{r['shape']} | {r['dynamic_ms']:.3f} | "
                         f"{r.get('static_ms', float('nan')):.3f} | {ratio} | "
                         f"{r['eager_ms']:.3f} | {comp} | {r['rel_err_vs_eager']:.1e} |")
    lines.append("")
    lines.append(f"{doc['gpu']}, driver {doc['driver']}, torch {doc['torch']}, "
                 f"{doc['date']}, bundles of commit {doc['final']['commit']} "
                 f"([{Path(link).name}]({link}), chart beside it). Latencies "
                 "through the Python binding (CUDA events, inputs and outputs as torch tensors); "
                 "in brackets the same two bundles through `aotpack-run`. torch.compile: its "
                 "mode, and the commit of the run that measured it when not this one (same "
                 "model and shapes). A model whose rows carry a `commit` was not re-measured "
                 "in this run. Rel. error: the dynamic bundle against eager bf16.")
    return "\n".join(lines)


def chart(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in ORDER if m in doc["final"]["models"]]
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6))
    for ax, name in zip(axes, models):
        rows = doc["final"]["models"][name]["rows"]
        x = list(range(len(rows)))
        series = [("dynamic bundle", "dynamic_ms", "o-"), ("static bundles", "static_ms", "s--"),
                  ("eager", "eager_ms", "^:")]
        for label, key, style in series:
            ax.plot(x, [r.get(key) for r in rows], style, label=label)
        compiled = [_compiled(doc, name, r["shape"])[0] for r in rows]
        if any(c is not None for c in compiled):
            ax.plot(x, compiled, "d-.", label="torch.compile(dynamic=True)")
        ax.set_xticks(x, [r["shape"] for r in rows], rotation=45, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("ms (log)")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"one dynamic bundle per model vs a static bundle per shape "
                 f"({doc['gpu']}, {doc['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    import doc_tables

    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=Path)
    ap.add_argument("--doc", type=Path, default=doc_tables.PERFORMANCE)
    ap.add_argument("--no-chart", action="store_true")
    args = ap.parse_args(argv)
    if not args.no_chart:
        chart(json.loads(args.results.read_text()), args.results.with_suffix(".png"))
        print(f"wrote {args.results.with_suffix('.png')}")
    doc_tables.update(args.doc, "dynamic", [args.results])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
