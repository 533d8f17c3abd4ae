"""Turns a benchmark-suite results file into docs/performance.md's suite section and a chart.
Needs no GPU (and no torch); the chart needs matplotlib.

    python benchmarks/report.py benchmarks/results/DATE-COMMIT.json \
        [--doc docs/performance.md] [--png benchmarks/results/DATE-COMMIT.png] [--print]

--doc points the doc's `bench` block (between `<!-- bench:begin SOURCE -->` and
`<!-- bench:end -->`, benchmarks/doc_tables.py) at this results file and rewrites it; for
docs/performance.md, README.md's short table follows. The section links the chart when it
lies beside the JSON (DATE-COMMIT.png): write it there with --png.
The chart shows, per model, each variant's median latency relative to the best peer (the
fastest of eager, torch.compile, max-autotune and AOTInductor that ran): below 1 is faster.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite_models import AOTPACK_VARIANTS, PEERS  # noqa: E402
from suite_results import load  # noqa: E402

COLUMNS = (*PEERS, *AOTPACK_VARIANTS)
TITLES = {"eager": "eager", "compile": "torch.compile", "compile-max-autotune": "max-autotune",
          "aoti": "AOTInductor", "aotpack-run": "aotpack-run", "aotpack-py": "aotpack (Python)"}


# ----------------------------------------------------------------------------- selection

def model_names(doc: dict) -> list[str]:
    names = list(doc.get("models") or {})
    return names + [r["model"] for r in doc["rows"] if r["model"] not in names]


def _ok(row: dict | None) -> bool:
    """A row that was measured (has a latency)."""
    return bool(row) and row["status"] == "ok" and bool(row.get("median_ms"))


def rows_of(doc: dict, model: str, variant: str) -> list[dict]:
    return [r for r in doc["rows"] if r["model"] == model and r["variant"] == variant]


def best_row(doc: dict, model: str, variant: str) -> dict | None:
    """The fastest measured row of a variant (several bundles: the best one); when none was
    measured, the first row (it carries the status and error)."""
    rows = rows_of(doc, model, variant)
    ok = [r for r in rows if _ok(r)]
    return min(ok, key=lambda r: r["median_ms"]) if ok else (rows[0] if rows else None)


def best_peer(doc: dict, model: str) -> dict | None:
    ok = [r for r in (best_row(doc, model, v) for v in PEERS) if _ok(r)]
    return min(ok, key=lambda r: r["median_ms"]) if ok else None


# ---------------------------------------------------------------------------- formatting

def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.3g}" if ms < 1 else f"{ms:.2f}"


def fmt_num(x, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    if x is None:
        return "—"
    v = x / scale
    return f"{v:.{digits}g}{unit}" if abs(v) < 10 ** digits else f"{v:.0f}{unit}"


def status_text(row: dict | None) -> str:
    if row is None:
        return "—"
    return {"unsupported": "unsupported", "missing": "no bundle", "skipped": "skipped",
            "pending": "not run"}.get(row["status"], row["status"])


def latency_cell(row: dict | None, best_ms: float | None) -> str:
    if not _ok(row):
        return status_text(row)
    text = fmt_ms(row["median_ms"])
    if row.get("label"):
        text += f" ({row['label']})"
    return f"**{text}**" if best_ms is not None and row["median_ms"] <= best_ms else text


def model_title(doc: dict, name: str) -> str:
    note = (doc.get("models", {}).get(name) or {}).get("note")
    return f"{name} ({note})" if note else name


# -------------------------------------------------------------------------------- tables

def latency_table(doc: dict) -> str:
    head = ["model", *(TITLES[c] for c in COLUMNS),
            "aotpack-run ÷ best peer (latency; < 1 is faster)", "aotpack-run % of ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in model_names(doc):
        cells = {c: best_row(doc, name, c) for c in COLUMNS}
        timed = [r["median_ms"] for r in cells.values() if _ok(r)]
        best_ms = min(timed) if timed else None
        peer = best_peer(doc, name)
        ours = cells["aotpack-run"] if _ok(cells["aotpack-run"]) else cells["aotpack-py"]
        ratio = (f"{ours['median_ms'] / peer['median_ms']:.2f}× ({TITLES[peer['variant']]})"
                 if _ok(ours) and peer else "—")
        frac = (f"{100 * ours['ceiling_frac']:.0f}%" if _ok(ours) and ours.get("ceiling_frac")
                else "—")
        row = [model_title(doc, name), *(latency_cell(cells[c], best_ms) for c in COLUMNS),
               ratio, frac]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def cold_table(doc: dict) -> str:
    head = ["model", *(TITLES[c] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in model_names(doc):
        cells = []
        for c in COLUMNS:
            # the best row, or the bundle of the model whose cold start was measured (the
            # scheduled suite measured one per model)
            r = best_row(doc, name, c)
            if r and r["status"] == "ok" and not r.get("cold_start_s"):
                r = next((x for x in rows_of(doc, name, c) if x.get("cold_start_s")), r)
            cells.append(fmt_num(r.get("cold_start_s"), " s") if r and r.get("cold_start_s")
                         else status_text(r) if r and r["status"] != "ok" else "—")
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


DETAIL_HEAD = ["model", "variant", "status", "median ms", "p10–p90 ms", "TFLOP/s", "GB/s",
               "% ceiling", "build s", "artifact MB", "GPU mem MB", "launches", "cold start s",
               "error vs eager"]


def details_table(doc: dict) -> str:
    lines = ["| " + " | ".join(DETAIL_HEAD) + " |", "|" + "---|" * len(DETAIL_HEAD)]
    for r in doc["rows"]:
        variant = r["variant"] + (f" [{r['label']}]" if r.get("label") else "")
        spread = (f"{fmt_ms(r['p10_ms'])}–{fmt_ms(r['p90_ms'])}"
                  if r.get("p10_ms") is not None else "—")
        mem = r.get("device_mem_bytes") or r.get("peak_mem_bytes")
        cells = [r["model"], variant, status_text(r), fmt_ms(r.get("median_ms")), spread,
                 fmt_num(r.get("tflops")), fmt_num(r.get("gbps")),
                 fmt_num(100 * r["ceiling_frac"], "%") if r.get("ceiling_frac") else "—",
                 fmt_num(r.get("build_s")), fmt_num(r.get("artifact_bytes"), scale=1e6),
                 fmt_num(mem, scale=1e6), fmt_num(r.get("launches")),
                 fmt_num(r.get("cold_start_s")), fmt_num(r.get("rel_err_vs_eager"), digits=2)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(doc: dict) -> str:
    bad = [r for r in doc["rows"] if r["status"] != "ok"]
    if not bad:
        return "Every variant ran."
    out = []
    for r in bad:
        label = f" [{r['label']}]" if r.get("label") else ""
        err = (r.get("error") or r["status"]).replace("\n", " ")
        out.append(f"- {r['model']} / {r['variant']}{label}: {err[:240]}")
    return "\n".join(out)


# What documents of the scheduled suite (before 2026-12-02, no "method" key) say of their method.
OLD_TIMING = ("Median of back-to-back forwards timed with CUDA events after warm-up (the method "
              "of `aotpack-run --bench`); fresh random inputs; eager, torch.compile and "
              "max-autotune of a model share one process (cold Inductor caches before each "
              "compile), AOTInductor and cold starts run in fresh processes.")
OLD_AOTI_COLD = ("aoti_load_package, whose CPU ISA check takes 59 s of it per process on torch "
                 "2.11 alone and up to ~70 s in the suite, where it runs beside the compiles — "
                 "its C++ loader loads a package in 0.33 s, "
                 "benchmarks/results/2026-11-30-h200-aoti-load-probe.json")


def header(doc: dict, json_link: str | None) -> str:
    c = doc.get("ceilings") or {}
    gpu = c.get("gpu", "GPU not recorded")
    ceil = (f"bf16 GEMM 8192³ {c['gemm_tflops']} TFLOP/s, device copy {c['copy_gbps']} GB/s "
            f"(read + write)" if c.get("gemm_tflops") else "not measured")
    raw = f" Raw numbers: [{Path(json_link).name}]({json_link})." if json_link else ""
    timing = (doc.get("method") or {}).get("timing", OLD_TIMING)
    return (f"Measured by `benchmarks/suite.py` on {gpu} ({c.get('sm_count', '?')} SMs), torch "
            f"{c.get('torch', '?')}, {doc.get('date')}, commit `{doc.get('commit')}`; ceilings "
            f"measured in the same run: {ceil}.{raw} {timing}")


def render_markdown(doc: dict, json_link: str | None = None, png_link: str | None = None) -> str:
    aoti = doc.get("aoti") or {}
    parts = [header(doc, json_link), "",
             "**Median latency, ms** (bold: fastest; several bundles of a model: the best, "
             "its label in brackets; \"% of ceiling\": TFLOP/s of the GEMM ceiling for "
             "prefill-type models, GB/s of the copy ceiling for decode):", "",
             latency_table(doc), ""]
    if png_link:
        parts += [f"![latency relative to the best peer]({png_link})", ""]
    parts += ["**Cold start**, process start → first output on the host, each in a fresh "
              "process (aotpack-run: the C++ launcher; aotpack (Python): libaotpack through "
              "ctypes, no torch; torch.compile with a warm cache; AOTInductor: Python's "
              f"{(doc.get('method') or {}).get('cold_start', OLD_AOTI_COLD)}):", "",
              cold_table(doc),
              ""]
    if aoti.get("conclusion"):
        parts += [f"**AOTInductor on this machine:** {aoti['conclusion']}", ""]
    parts += ["<details><summary>Every row (build time, artifact, GPU memory, launches, error)"
              "</summary>", "",
              "GPU mem: device memory in use (cuMemGetInfo) after the first forward and timing, "
              "minus what it was once the CUDA context existed; for torch rows it includes what "
              "the caching allocator holds (the JSON also has the allocator's peak). Launches: "
              "kernels of one forward (torch.profiler; aotpack: the bundle's steps, replayed as "
              "one CUDA graph). Build: aotpack on the build host (no GPU); the others on the "
              "GPU machine, cold caches. Error: ‖out − eager‖ / ‖eager‖ on the same "
              "inputs.", "",
              details_table(doc), "", "Rows that did not produce a number:",
              "", failures(doc), "", "</details>"]
    return "\n".join(parts)


# --------------------------------------------------------------------------------- chart

def chart_data(doc: dict) -> tuple[list[str], dict[str, list[float | None]]]:
    """Per model, each column's best latency over the best peer's (None: not measured)."""
    names, series = [], {c: [] for c in COLUMNS}
    for name in model_names(doc):
        peer = best_peer(doc, name)
        if peer is None:
            continue
        names.append(name)
        for c in COLUMNS:
            r = best_row(doc, name, c)
            series[c].append(r["median_ms"] / peer["median_ms"] if _ok(r) else None)
    return names, series


def plot(doc: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, series = chart_data(doc)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(names) + 2), 4.5))
    width = 0.8 / len(COLUMNS)
    for i, c in enumerate(COLUMNS):
        xs = [k + (i - (len(COLUMNS) - 1) / 2) * width for k in range(len(names))]
        ys = [v if v is not None else 0 for v in series[c]]
        ax.bar(xs, ys, width, label=TITLES[c])
        for x, v in zip(xs, series[c]):
            if v is None:  # a variant without a number is marked, not left out
                ax.text(x, 0.02, "×", ha="center", va="bottom", fontsize=8, color="red")
            else:
                ax.text(x, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=6,
                        rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("latency / best peer (lower is better)")
    c = doc.get("ceilings") or {}
    ax.set_title(f"{c.get('gpu', '')} {doc.get('date')} {doc.get('commit')}  (× = no number)",
                 fontsize=9)
    top = max([v for vs in series.values() for v in vs if v is not None] + [1.0])
    ax.set_ylim(0, top * 1.15)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    import doc_tables

    ap = argparse.ArgumentParser(description="benchmark-suite results → docs section + chart")
    ap.add_argument("results", type=Path)
    ap.add_argument("--doc", "--readme", dest="doc", type=Path, default=None,
                    help="markdown file with a bench block to rewrite (docs/performance.md)")
    ap.add_argument("--png", type=Path, default=None)
    ap.add_argument("--print", action="store_true", help="print the markdown section")
    args = ap.parse_args(argv)
    doc = load(args.results)
    if args.png:
        plot(doc, args.png)
    if args.doc:
        doc_tables.update(args.doc, "bench", [args.results])
    if args.print or not args.doc:
        png = args.results.with_suffix(".png")
        rel = lambda p: os.path.relpath(p.resolve(), Path.cwd())  # noqa: E731
        print(render_markdown(doc, rel(args.results), rel(png) if png.is_file() else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
