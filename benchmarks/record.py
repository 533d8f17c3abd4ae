"""Collect what scripts/gpu-check wrote under $OUT into one results file for the repo.

    python benchmarks/record.py DEVICE_OUT_DIR [DEVICE_OUT_DIR ...] -o benchmarks/results/X.json

Keeps the numbers (latency, error, TFLOP/s), the GPU and driver, the date and the commit they
were measured at, so docs/performance.md and later sessions can cite them (a generated table
of it needs a renderer in benchmarks/doc_tables.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path


def _gpu(folder: Path) -> dict:
    txt = folder / "gpu.txt"
    if not txt.is_file():
        return {}
    lines = [l for l in txt.read_text().splitlines() if l.strip()]
    if len(lines) < 2:
        return {}
    keys = [k.strip() for k in lines[0].split(",")]
    vals = [v.strip() for v in lines[1].split(",")]
    return dict(zip(keys, vals))


def _json_lines(path: Path):
    text = path.read_text().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def collect(folders: list[Path]) -> dict:
    out: dict = {"bundles": {}, "kernels": {}}
    for folder in folders:
        out.setdefault("gpu", _gpu(folder))
        for f in sorted(folder.glob("compare-*.json")):
            out["bundles"][f.stem.removeprefix("compare-")] = _json_lines(f)
        for name in ("gemm_bench.json", "kernels_bench.json", "cutedsl_gemm.json"):
            if (folder / name).is_file():
                out["kernels"][name.removesuffix(".json")] = _json_lines(folder / name)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--command", default="scripts/gpu-check")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    doc = {"date": datetime.date.today().isoformat(), "commit": commit.strip(),
           "command": args.command, **collect(args.folders)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
