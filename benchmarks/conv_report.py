"""docs/performance.md's convolutional-network tables, from a bench_conv.py results JSON.

    python benchmarks/conv_report.py benchmarks/results/2026-12-01-h200-conv-families.json \
        [--block conv-families] [--doc docs/performance.md]

Rewrites the doc's block of that name (benchmarks/doc_tables.py: `conv-resnet18` for the
ResNet-18 run, `conv-families` for the other families; default: the JSON's name after
`-conv-`). Reads both layouts bench_conv.py has written: `rows` (model, batch, contender) and
the first run's `results` (one model, contenders named by their setting).
"""
from __future__ import annotations

import argparse
from pathlib import Path

ORDER = ("eager", "compile", "aoti", "aotpack")
TITLES = {"eager": "eager (cuDNN, channels_last)", "compile": "torch.compile max-autotune",
          "aoti": "AOTInductor", "aotpack": "aotpack"}
# the first run (2026-12-01-h200-conv-resnet18.json) named contenders by their setting
ALIASES = {"eager_cudnn_channels_last": "eager", "torch_compile_max_autotune": "compile"}


def grouped(doc: dict) -> dict[tuple[str, int], dict[str, dict]]:
    """{(model, batch): {contender: row}} for the rows with a latency, in the JSON's order."""
    rows = doc.get("rows")
    if rows is None:
        model = doc["model"].split()[0]
        rows = [{**r, "model": model} for r in doc["results"]]
    out: dict[tuple[str, int], dict[str, dict]] = {}
    for r in rows:
        if r.get("ms"):
            contender = ALIASES.get(r["contender"], r["contender"])
            out.setdefault((r["model"], r["batch"]), {})[contender] = r
    return out


def fair(row: dict) -> bool:
    """False for a row flagged `upper_bound` (host-bound and timed while other processes loaded
    the CPU: its true time is at most the one measured, so a speed-up over it is an upper
    bound); the README's summary leaves such rows out."""
    return not row.get("upper_bound")


def _cell(row: dict, best: float, many: bool) -> str:
    text = f"{row['ms']:.3f}" + ("" if fair(row) else "†")
    return f"**{text}**" if row["ms"] == best and many else text


def _fastest_peer(cells: dict) -> dict:
    """The fastest torch.compile / AOTInductor row of a model x batch ({} when none)."""
    peers = [cells[c] for c in ("compile", "aoti") if c in cells]
    return min(peers, key=lambda r: r["ms"]) if peers else {}


def _pair(ours: dict, peer: dict, key: str, fmt: str) -> str:
    """"aotpack's / the peer's" value of `key` (peak memory, build time), "—" where missing."""
    def one(row):
        return fmt.format(row[key]) if row.get(key) is not None else "—"
    return "—" if not ours.get(key) and not peer.get(key) else f"{one(ours)} / {one(peer)}"


def table(doc: dict, link: str) -> str:
    groups = grouped(doc)
    present = [c for c in ORDER if any(c in g for g in groups.values())]
    head = ["model", "batch", *(f"{TITLES[c]} ms" for c in present), "aotpack images/s",
            "aotpack TFLOP/s (% of bf16 ceiling)", "launches (eager → aotpack)",
            "peak MiB (aotpack / fastest peer)", "build s (aotpack / fastest peer)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, batch), cells in groups.items():
        best = min(r["ms"] for r in cells.values())
        times = ["—" if c not in cells else _cell(cells[c], best, len(cells) > 1)
                 for c in present]
        ours = cells.get("aotpack", {})
        tflops = (f"{ours['tflops']:.1f} ({ours['pct_of_bf16_ceiling']:.1f} %)"
                  if ours.get("tflops") is not None else "—")
        eager_launches = cells.get("eager", {}).get("launches")
        launches = (f"{eager_launches} → {ours['launches']}" if eager_launches and
                    ours.get("launches") else str(ours.get("launches", "—")))
        images = f"{ours['images_per_s']:,.0f}" if ours.get("images_per_s") else "—"
        peer = _fastest_peer(cells)
        lines.append("| " + " | ".join([model, str(batch), *times, images, tflops, launches,
                                        _pair(ours, peer, "peak_mib", "{:.0f}"),
                                        _pair(ours, peer, "build_s", "{:.0f}")]) + " |")
    lines += ["", f"{doc['gpu']}, driver {doc['driver']}, torch {doc['torch']}, {doc['date']}, "
              f"commit {doc['commit']} ([results]({link})). {doc['what']}"]
    if any(not fair(r) for g in groups.values() for r in g.values()):
        lines[-1] += (" †: host-bound and timed while other processes loaded the CPU: its true "
                      "time is at most this (the summary leaves it out).")
    return "\n".join(lines)


def main(argv=None) -> int:
    import doc_tables

    ap = argparse.ArgumentParser(description="bench_conv.py results → docs/performance.md")
    ap.add_argument("results", type=Path)
    ap.add_argument("--block", default=None, help="conv-resnet18 | conv-families | conv-depthwise")
    ap.add_argument("--doc", type=Path, default=doc_tables.PERFORMANCE)
    args = ap.parse_args(argv)
    block = args.block or "conv-" + args.results.stem.split("-conv-", 1)[-1]
    doc_tables.update(args.doc, block, [args.results])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
