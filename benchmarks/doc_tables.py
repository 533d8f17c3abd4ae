"""The generated tables of README.md and docs/performance.md, from benchmarks/results/*.json.

    python benchmarks/doc_tables.py            # rewrite every generated block from its JSON
    python benchmarks/doc_tables.py --check    # exit 1 naming each block that is stale

A generated block sits between two markers that name the generator and its sources (paths
relative to the repository root):

    <!-- NAME:begin benchmarks/results/A.json [benchmarks/results/B.json ...] -->
    ...the table, rendered by RENDERERS[NAME] from those files...
    <!-- NAME:end -->

Nothing else in the files is touched. The report scripts (report.py, generate_report.py,
dynamic_report.py, conv_report.py, models_report.py) point their block at a new results file through `update`,
which also refreshes README.md's short table: its sources are those of the docs/performance.md
blocks named in SUMMARY_FROM, so the README's numbers are always the ones the performance page
shows. tests/test_docs.py fails when a block differs from what its renderer makes of its
sources. Needs no GPU and no torch.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
# README.md's short table is made from the sources of these docs/performance.md blocks
SUMMARY_FROM = ("bench", "generate", "conv-resnet18", "conv-peers-families")

_BLOCK = re.compile(r"<!-- ([\w-]+):begin((?: \S+)*) -->\n(.*?)<!-- \1:end -->", re.S)


# ------------------------------------------------------------------------------- markers

@dataclass(frozen=True)
class Block:
    name: str
    sources: tuple[str, ...]
    body: str  # the text between the markers, without the final newline
    start: int
    end: int


def blocks(text: str) -> list[Block]:
    return [Block(m[1], tuple(m[2].split()), m[3].removesuffix("\n"), m.start(), m.end())
            for m in _BLOCK.finditer(text)]


def source_name(path: Path | str) -> str:
    """How a marker names a results file: relative to the repository root when inside it."""
    p = Path(path).resolve()
    try:
        return p.relative_to(ROOT).as_posix()
    except ValueError:
        return str(p)


def source_path(name: str) -> Path:
    return ROOT / name


def marked(name: str, sources, body: str) -> str:
    return f"<!-- {name}:begin {' '.join(sources)} -->\n{body}\n<!-- {name}:end -->"


def _one(text: str, name: str, where: str) -> Block:
    found = [b for b in blocks(text) if b.name == name]
    if len(found) != 1:
        raise SystemExit(f"{where}: expected one block between <!-- {name}:begin ... --> and "
                         f"<!-- {name}:end -->, found {len(found)}")
    return found[0]


def replace(text: str, name: str, sources, body: str, where: str = "the file") -> str:
    """`text` with its one block `name` rendered anew (it must be there exactly once)."""
    b = _one(text, name, where)
    return text[:b.start] + marked(name, sources, body) + text[b.end:]


# ----------------------------------------------------------------------------- renderers

def _load(name: str) -> dict:
    return json.loads(source_path(name).read_text())


def _rel(name: str, doc: Path) -> str:
    """The link from `doc` to a file named relative to the repository root."""
    return Path(os.path.relpath(source_path(name), doc.resolve().parent)).as_posix()


def _bench(sources, doc: Path) -> str:
    import report
    from suite_results import load

    (src,) = sources
    png = src.removesuffix(".json") + ".png"
    return report.render_markdown(load(source_path(src)), _rel(src, doc),
                                  _rel(png, doc) if source_path(png).is_file() else None)


def _table_of(module: str):
    """The renderer `module`.table(results, link) of a block's results files, one after the
    other."""
    def render(sources, doc: Path) -> str:
        table = importlib.import_module(module).table
        return "\n\n".join(table(_load(src), _rel(src, doc)) for src in sources)
    return render


# ------------------------------------------------------------------- README's short table

def _ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1 else f"{ms:.2f} ms"


def _suite_rows(doc: dict, link: str) -> tuple[list[list[str]], list[str]]:
    import report

    rows, missing = [], []
    for name in report.model_names(doc):
        runs = [r for r in report.rows_of(doc, name, "aotpack-run") if report._ok(r)]
        plain = [r for r in runs if "tuned" not in (r.get("label") or "")]
        tuned = [r for r in runs if "tuned" in (r.get("label") or "")]
        peer = report.best_peer(doc, name)
        if not runs or peer is None:
            continue
        best = min(r["median_ms"] for r in runs)
        note = ((doc.get("models", {}).get(name) or {}).get("note") or "").split(";")[0]
        rows.append([f"{name} ({note})" if note else name,
                     _ms(min(r["median_ms"] for r in plain)) if plain else "—",
                     _ms(min(r["median_ms"] for r in tuned)) if tuned else "—",
                     f"{_ms(peer['median_ms'])} ({report.TITLES[peer['variant']]})",
                     f"{peer['median_ms'] / best:.2f}×", f"[{doc['date']}]({link})"])
        for variant in report.PEERS:
            r = report.best_row(doc, name, variant)
            if r is not None and not report._ok(r):
                missing.append(f"{name} {report.TITLES[variant]} ({report.status_text(r)})")
    return rows, missing


def _generate_rows(doc: dict, link: str) -> list[list[str]]:
    """One row per model and prompt length: its batches with a peer, joined."""
    titles = {"gptfast": f"gpt-fast: torch.compile {doc['args']['compile_mode']}",
              "eager": "eager"}
    points: dict[tuple, list] = {}
    for model, m in doc["models"].items():
        for cell, c in m["cells"].items():
            b, p = (int(x[1:]) for x in cell.split("_"))
            ours = (c.get("aotpack") or {}).get("decode_tok_s")
            peers = [(c[k]["decode_tok_s"], t) for k, t in titles.items()
                     if (c.get(k) or {}).get("decode_tok_s")]
            if ours and peers:
                points.setdefault((model, p), []).append((b, ours, *max(peers)))
    return [[f"{model} decode (prompt {p}, batch {' / '.join(str(x[0]) for x in pts)})",
             " / ".join(f"{x[1]:.0f} tok/s" for x in pts), "—",
             " / ".join(f"{x[2]:.0f} tok/s ({x[3]})" for x in pts),
             " / ".join(f"{x[1] / x[2]:.2f}×" for x in pts), f"[{doc['date'][:10]}]({link})"]
            for (model, p), pts in points.items()]


def _conv_rows(doc: dict, link: str) -> list[list[str]]:
    """One row per model: its batches that have a fair peer row (conv_report.fair), joined."""
    import conv_report

    per_model: dict[str, list[tuple]] = {}
    for (model, batch), cells in conv_report.grouped(doc).items():
        ours = cells.pop("aotpack", None)
        peers = {c: r for c, r in cells.items() if conv_report.fair(r)}
        if ours and peers:
            peer, row = min(peers.items(), key=lambda kv: kv[1]["ms"])
            per_model.setdefault(model, []).append((batch, ours, peer, row))
    rows = []
    for model, points in per_model.items():
        rows.append([f"{model} (224², batch {' / '.join(str(p[0]) for p in points)})",
                     " / ".join(_ms(p[1]["ms"]) for p in points), "—",
                     " / ".join(f"{_ms(p[3]['ms'])} ({conv_report.TITLES[p[2]]})"
                                for p in points),
                     " / ".join(f"{p[3]['ms'] / p[1]['ms']:.2f}×" for p in points),
                     f"[{doc['date']}]({link})"])
    return rows


def summary_table(sources, doc: Path) -> str:
    rows: list[list[str]] = []
    missing: list[str] = []
    gpus = []
    for src in sources:
        data, link = _load(src), _rel(src, doc)
        if "schema" in data:  # a benchmark-suite run (suite_results.py)
            found, gone = _suite_rows(data, link)
            rows += found
            missing += gone
            gpus.append((data.get("ceilings") or {}).get("gpu"))
        elif "models" in data and "args" in data:  # bench_generate.py
            rows += _generate_rows(data, link)
            gpus.append(data.get("gpu"))
        else:  # bench_conv.py
            rows += _conv_rows(data, link)
            gpus.append(data.get("gpu"))
    head = ["workload", "aotpack", "aotpack, tuned", "fastest other measured",
            "speed-up of aotpack", "measured"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    gpu = ", ".join(sorted({g for g in gpus if g}))
    lines += ["", f"{gpu}, bf16. aotpack: the bundle through `aotpack-run` (suite models) or "
              "the Python binding, heuristic configs; tuned: built with the tuning database of "
              "its run. Speed-up: the other's latency over aotpack's best (tokens/s: aotpack's "
              "over the other's); above 1 aotpack is faster."]
    if missing:
        lines[-1] += " Without a number in that run: " + ", ".join(missing) + "."
    return "\n".join(lines)


RENDERERS = {"bench": _bench, "generate": _table_of("generate_report"),
             "dynamic": _table_of("dynamic_report"), "conv-resnet18": _table_of("conv_report"),
             "conv-peers-families": _table_of("conv_report"),
             "conv-families": _table_of("conv_report"), "conv-depthwise": _table_of("conv_report"),
             "conv-all": _table_of("conv_report"),
             "coverage-models": _table_of("models_report"), "summary": summary_table}


def render(name: str, sources, doc: Path) -> str:
    if name not in RENDERERS:
        raise SystemExit(f"{source_name(doc)}: no renderer for generated block {name!r} "
                         f"(known: {', '.join(RENDERERS)})")
    if not sources:
        raise SystemExit(f"{source_name(doc)}: block {name} names no results file")
    return RENDERERS[name](tuple(sources), doc)


# ---------------------------------------------------------------------------- the files

def summary_sources(performance_text: str) -> tuple[str, ...]:
    by_name = {b.name: b.sources for b in blocks(performance_text)}
    return tuple(s for name in SUMMARY_FROM for s in by_name.get(name, ()))


def regenerate(path: Path, text: str, performance_text: str | None = None) -> str:
    """`text` of the file `path` with every generated block rendered from its sources."""
    for b in reversed(blocks(text)):
        sources = b.sources
        if b.name == "summary" and performance_text is not None:
            sources = summary_sources(performance_text)
        text = text[:b.start] + marked(b.name, sources, render(b.name, sources, path)) + \
            text[b.end:]
    return text


def differences(path: Path, text: str, performance_text: str) -> list[str]:
    """One line per generated block of `text` (the file `path`) whose text or sources are not
    what its sources give (README.md's short table: the sources of docs/performance.md's)."""
    out = []
    for old, new in zip(blocks(text), blocks(regenerate(path, text, performance_text))):
        if (old.sources, old.body) != (new.sources, new.body):
            why = "its sources" if old.sources != new.sources else "its text"
            out.append(f"{source_name(path)}: block {old.name}: {why} differ from what "
                       f"`python benchmarks/doc_tables.py` writes")
    return out


def stale(files=(PERFORMANCE, README)) -> list[str]:
    perf = PERFORMANCE.read_text()
    return [line for path in files for line in differences(path, path.read_text(), perf)]


def write_all() -> None:
    PERFORMANCE.write_text(regenerate(PERFORMANCE, PERFORMANCE.read_text()))
    README.write_text(regenerate(README, README.read_text(), PERFORMANCE.read_text()))


def update(doc: Path, name: str, sources) -> None:
    """Point block `name` of `doc` at `sources` (results files) and render it; when `doc` is
    docs/performance.md, README.md's short table follows."""
    doc = Path(doc)
    names = tuple(source_name(s) for s in sources)
    text = doc.read_text()
    _one(text, name, source_name(doc))  # before reading the sources
    text = replace(text, name, names, render(name, names, doc), source_name(doc))
    doc.write_text(text)
    if doc.resolve() == PERFORMANCE.resolve() and name in SUMMARY_FROM:
        README.write_text(regenerate(README, README.read_text(), text))
        print(f"rewrote {source_name(doc)}'s {name} block and README.md's short table")
    else:
        print(f"rewrote {source_name(doc)}'s {name} block")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming each block that is stale")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        print("\n".join(bad) or "every generated block is up to date")
        return 1 if bad else 0
    write_all()
    print("rewrote the generated blocks of docs/performance.md and README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
