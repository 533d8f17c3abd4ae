"""Text generation on the GPU: aotpack (its Generator in this process, and aotpack-run's cold
start) against transformers' generate (eager, bf16, sdpa) and the gpt-fast recipe (a static KV
cache and a torch.compile'd decode step), next to the decode floor, for each model x batch x
prompt length. Greedy, exactly --new tokens (eos ignored).

    python benchmarks/bench_generate.py [--models llama32_1b,llama3_8b] [--batches 1,8]
        [--prompts 128,2048] [--new 256] [--contenders aotpack,aotpack-run,eager,gptfast]
        [--bundles .gpu/gen] [--budget-s 540] [--compile-mode max-autotune] [--out DIR]

Bundles: <bundles>/<model>/model.aotpack with its weights made there (scripts/make-weights; the
`gen` stage of scripts/gpu-check does both). What does not fit the time budget is skipped and
the JSON says so. Output: <out>/generate-<time>.json (rewritten after every measurement: a run
stopped at its limit keeps what it measured) and a table printed last.

Measures (medians over repeats after a warm-up; CUDA events):
- eager: TTFT = generate(max_new_tokens=1); a decode step = (t(N) - t(1)) / (N - 1);
- gptfast: the prefill (TTFT) and the N-1 compiled decode steps timed apart; compile time
  (the first run at each batch size, less a steady run) reported separately;
- aotpack: the runtime's own TTFT and decode time; aotpack-run: wall time of `--generate 1`
  (process start to first token, cold) and the last line of `--generate N`;
- floor: (weights + KV read per step) / the copy bandwidth measured here; % of floor = floor
  step / measured step;
- check: aotpack's first --check-tokens greedy ids against eager's on fixed prompts: the first
  divergence and the reference's top-2 logits there (bf16 near-ties are reported, not failed).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import gen_math as gm  # noqa: E402
import generate_models as models  # noqa: E402

CONTENDERS = ("aotpack", "eager", "gptfast", "aotpack-run")
DEFAULT_CONTENDERS = "aotpack,aotpack-run,eager,gptfast"
COMPILE_MODES = ("max-autotune", "reduce-overhead", "default", "none")
# seconds, first guesses where nothing measured says better (H200, 16 cores)
ESTIMATE = {"load_per_gparam": 4.0, "compile": {"max-autotune": 150, "reduce-overhead": 60,
                                                "default": 40, "none": 0}}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str, known) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; known: {', '.join(known)}")
    return names


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=lambda t: _names(t, models.FACTORIES),
                   default=["llama32_1b", "llama3_8b"])
    p.add_argument("--batches", type=_ints, default=[1, 8])
    p.add_argument("--prompts", type=_ints, default=[128, 2048], help="prompt lengths")
    p.add_argument("--new", type=int, default=256, help="new tokens per sequence")
    p.add_argument("--contenders", type=lambda t: _names(t, CONTENDERS),
                   default=DEFAULT_CONTENDERS.split(","), help=f"of {','.join(CONTENDERS)}")
    p.add_argument("--bundles", type=Path, default=Path(".gpu/gen"),
                   help="folder of <model>/model.aotpack")
    p.add_argument("--aotpack-run", default=None, help="the launcher (default $AOTPACK_RUN)")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="the whole run's wall time; what would not fit is skipped")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default="max-autotune",
                   help="torch.compile mode of gptfast's decode step (default: much faster "
                   "to compile, but no CUDA graphs; none: the static-cache loop uncompiled)")
    p.add_argument("--compile-estimate-s", type=float, default=None,
                   help="expected compile seconds per batch size (skip gptfast when it would "
                   "not fit; default by mode)")
    p.add_argument("--no-fullgraph", action="store_true")
    p.add_argument("--reps", type=int, default=3, help="timed repeats (fewer if short of time)")
    p.add_argument("--check-tokens", type=int, default=64)
    p.add_argument("--check-prompts", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--copy-gib", type=float, default=2.0)
    p.add_argument("--device", default="cuda", help="cuda (cpu: a smoke run of the torch paths)")
    p.add_argument("--out", type=Path, default=None,
                   help="default $OUT, else benchmarks/results")
    args = p.parse_args(argv)
    if args.new < 2:
        p.error("--new: at least 2 (decode rates need a decode step)")
    if min(args.batches + args.prompts) < 1:
        p.error("--batches and --prompts take positive integers")
    args.out = args.out or Path(os.environ.get("OUT") or HERE / "results")
    if args.compile_estimate_s is None:
        args.compile_estimate_s = ESTIMATE["compile"][args.compile_mode]
    return args


# ----------------------------------------------------------------------------- the report
class Report:
    """The JSON document, written again after every measurement."""

    def __init__(self, args, argv):
        import torch
        import transformers

        stamp = datetime.datetime.now(datetime.timezone.utc)
        self.path = args.out / f"generate-{stamp.strftime('%Y%m%d-%H%M%S')}.json"
        self.doc = {"date": stamp.isoformat(timespec="seconds"), "command": " ".join(argv),
                    "args": {k: (str(v) if isinstance(v, Path) else v)
                             for k, v in vars(args).items()},
                    "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                    "driver": _driver(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "copy": None,
                    "models": {}, "rows": [], "skipped": []}

    def model(self, name: str) -> dict:
        return self.doc["models"].setdefault(name, {"cells": {}, "checks": [], "notes": []})

    def skip(self, what: str, why: str) -> None:
        line = f"{what}: {why}"
        self.doc["skipped"].append(line)
        print(f"[gen] skipped {line}", flush=True)

    def row(self, **row) -> None:
        self.doc["rows"].append(row)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        tmp.replace(self.path)


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def log(msg: str) -> None:
    print(f"[gen {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(argv[1:])
    budget = gm.Budget(args.budget_s)
    # SIGTERM -> finally: the table; the caller's handler back after (tests call main())
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = Report(args, argv)
    try:
        run_all(args, budget, report)
    finally:
        signal.signal(signal.SIGTERM, previous)
        report.save()
        print(f"\nwrote {report.path}")
        for line in report.doc["skipped"]:
            print(f"skipped {line}")
        print(gm.table(report.doc["rows"]))
    return 0


def run_all(args, budget: gm.Budget, report: Report) -> None:
    import torch

    from gen_contenders import copy_bandwidth

    device = torch.device(args.device)
    if device.type == "cuda":
        report.doc["copy"] = copy_bandwidth(device, args.copy_gib)
        log(f"copy bandwidth {report.doc['copy']['gbps']:.0f} GB/s")
    from gen_run import run_model

    weights = [model_weight(name) for name in args.models]
    for k, name in enumerate(args.models):
        load_s = ESTIMATE["load_per_gparam"] * models.REAL_PARAMS.get(name, 0) / 1e9
        if not budget.fits(load_s + 30):
            report.skip(name, f"{budget.left():.0f} s left, loading alone takes ~{load_s:.0f} s")
            continue
        # this model's share of what is left; what it does not use goes to the next ones
        share = budget.share(weights[k], sum(weights[k:]))
        run_model(name, args, device, gm.Budget(share), report)
        torch._dynamo.reset()  # compiled steps keep their model (and CUDA graph pools) alive
        if device.type == "cuda":
            torch.cuda.empty_cache()


def model_weight(name: str) -> float:
    """A model's share of the budget: compiles and process starts cost about the same for
    every size, the timed runs grow with the weights (1B: 1.3, 8B: 3)."""
    return 1.0 + models.REAL_PARAMS.get(name, 0) / 4e9


if __name__ == "__main__":
    raise SystemExit(main())
