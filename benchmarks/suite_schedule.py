"""The suite's time plan: what each task costs, how important it is, and how the CPU is shared
while background jobs run. Pure Python (no torch).

One run (`--budget-s 450` on the H200, 16 cores) goes through three phases:

  start    t = 0    background jobs: AOTInductor compiles of every core model, aotpack weights
                    (one scripts/make-weights per distinct weights file), reference inputs,
                    the C++ toolchain probes, the extra models' frontend probes. The jobs that
                    will use the GPU (AOTI compiles, torch probes) do their CPU-only start and
                    wait for the suite's go; the others never see the GPU (CUDA hidden).
  window            the ceilings first (8192³ GEMM, 2 GB copy: the GPU is still ours alone),
                    then the go; once no background job can still use the GPU (each AOTI
                    compile writes a marker at its first g++ build), the aotpack latencies
                    (CUDA-graph replays: the host enqueues far ahead of the GPU, which each
                    binding row checks; a row that fails is measured again later) and the
                    first AOTI package's load check (a fallback recipe can still compile).
                    Once the check has passed, each finished compile's run process starts in
                    the background: it loads its package and parks (suite_aoti_preload.py);
                    loading is CPU/disk work plus a weights upload, like the other CPU-only
                    jobs next to the window's GPU-bound timings.
  quiet             once no background job runs but the parked AOTI runs (the compiles that
                    finish now are preloaded at once, and waited for until parked),
                    everything CPU-sensitive: per model ONE process for eager → torch.compile
                    → max-autotune (cold start = eager's first output), aotpack cold starts
                    (fresh processes), the AOTI runs (a go to each parked process: first run,
                    cold start less the time parked, timing); then what was deferred, the
                    extra models' torch rows and the max-autotune warm-cache starts, while
                    budget remains.

ESTIMATE is what admission uses: central figures of the 2026-11-30 H200 run
(benchmarks/results/2026-11-30-8c98e0a.json) split into what one process now does; time limits
are generous multiples. PRIORITY orders what is kept when the budget is short: a task is
admitted only if every more important task still to come fits after it (Ledger.refuse); one
refused only for that reason is retried at the end.

Expected full run on the H200 (the 2026-11-30-5c063bb run, five core models, 480 s):
  0-8 s       ceilings (GPU alone; the background jobs import torch and build models)
  8-50 s      GPU idle: the AOTI compiles export, lower, compile Triton kernels and autotune
              them on the GPU (2 compile threads each with five) until their markers; the
              AOTI run processes start and do aoti_load_package's device-information check
              (~70 s of child processes under that load) while their packages compile
  50-104 s    window: 9 × aotpack-run --bench ~2.5 s, one binding process ~33 s
  105-134 s   the compiles finish (105-134 s, ViT-B/16 the last); each run process loads its
              package as soon as it exists and parks
  ~134-480 s  quiet: torch processes mlp-prefill ~46, mlp-decode ~47, llama-prefill ~65,
              llama-decode ~51, vit-b16 ~46 s without max-autotune (7-13 s of each of the
              first four were the compile workers' shutdown, now killed instead); the host-bound
              binding rows again ~12 s; aotpack cold starts 5 × ~2.7 s; AOTI runs 5 × ~1.7 s
              after their go; then deferred rows, the extra models' torch rows, max-autotune
              warm starts (~28 s each), as far as they fit; the last 8 s are kept for the
              results
"""
from __future__ import annotations

import os

# seconds on the H200 (see the module docstring)
ESTIMATE = {
    "ceilings": 12,            # 10 s alone; its torch import competes with the start
    "aotpack-bench": 4,        # aotpack-run --bench: load + sha256 of weights + 220 forwards
    "aotpack-py-start": 5,     # the binding process: python + import torch + CUDA context
    "aotpack-py": 3,           # per bundle in that process: load, first run, timing, check
    "aotpack-recheck": 4,      # a bundle host-bound in the window, in the quiet phase: binding
                               # (~1.5 s) and aotpack-run --bench (~1.5 s) again (5c063bb:
                               # two bundles, 12 s with the binding process's start)
    "aoti-compile": 110,       # per model, in the background (72-87 s alone, 16 threads)
    # fresh processes: import torch ~5 s + aoti_load_package, whose device-information check
    # took 35-60 s per process on the H200 (benchmarks/aoti_load_probe.py; the package load
    # itself 0.33 s); a preloaded run does the check while its package compiles
    "aoti-check": 60,          # import torch + load package + first run
    "aoti-run": 65,            # cold start + timing (a run not preloaded)
    "aoti-load": 20,           # the quiet phase's wait for the preloads: one load after the
                               # last compile
    "aoti-timed": 3,           # a preloaded run after its go: first run + timing + exit
                               # (1.2-2.1 s in the 2026-11-30 runs 473c0f3, 52a9d96, 5c063bb)
    # the torch process of a model on the H200 (2026-11-30-18d5c7a.json): 38-49 s for eager,
    # compile and max-autotune, of which 16-22 s outside the variants (python, import torch,
    # model build, teardown)
    "torch-start": 18,
    "eager": 5,                # first forward, FLOP count, reference, timing, launches
    "compile": 12,             # warm-up compile (imports, 8-9 s, once per process) + first
                               # call 0.6-3 s + timing
    "compile-max-autotune": 16,  # first call 5-16 s (llama the longer), timing
    "aotpack-cold": 3.5,       # aotpack-run + a binding process + gaps (5c063bb: 0.6-2.4 s
                               # for both, five models in 13.7 s)
    "warm": 30,                # max-autotune, fresh process, warm Inductor cache
    "extra-start": 25,         # HF/torchvision model: a torch process's overhead + imports
}

# 0 is most important. Core rows first, max-autotune last of them (the most expensive row);
# extra models and warm-cache starts only with what is left.
PRIORITY = {"ceilings": 0, "eager": 0, "aotpack-bench": 0, "aotpack-py": 0, "aotpack-cold": 0,
            "compile": 1, "aoti-run": 1, "aoti-check": 1, "aoti-load": 1, "aoti-timed": 1,
            "compile-max-autotune": 2, "extra": 3, "warm": 4}


class Ledger:
    """Work still to come: key → (estimate, priority). A task is admitted when it fits in what
    is left of the budget after the estimates of every more important pending task."""

    def __init__(self, budget):
        self.budget = budget
        self.items: dict[tuple, tuple[float, int]] = {}

    def add(self, key: tuple, estimate: float, priority: int) -> None:
        self.items[key] = (estimate, priority)

    def drop(self, key: tuple) -> None:
        self.items.pop(key, None)

    def reserve(self, priority: int, exclude=()) -> float:
        """Seconds kept for pending tasks more important than `priority`."""
        return sum(est for k, (est, p) in self.items.items() if p < priority and k not in exclude)

    def pending(self, max_priority: int) -> float:
        """Estimated seconds of every pending task of priority ≤ max_priority."""
        return sum(est for est, p in self.items.values() if p <= max_priority)

    def refuse(self, keys: list[tuple]) -> str | None:
        """Admission of the tasks `keys` run back to back (one process): the reservation is
        that of the least important of them, the keys themselves excluded."""
        est = sum(self.items.get(k, (0.0, 0))[0] for k in keys)
        prio = max((self.items.get(k, (0.0, 0))[1] for k in keys), default=0)
        return self.budget.refuse(est, reserve=self.reserve(prio, exclude=set(keys)))


def background_threads(jobs: int, cpus: int | None = None, keep: int = 4) -> int:
    """Threads per heavy background job (AOTI compiles): the cores minus `keep` (the timed
    foreground process and the short CPU-only jobs), shared out; at least 1."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, (cpus - keep) // max(1, jobs))


def thread_env(n: int, compile_threads: bool = False) -> dict:
    """Caps a background process at about n busy cores (BLAS/OpenMP pools, and Inductor's
    compile workers when compile_threads)."""
    env = {"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n),
           "OPENBLAS_NUM_THREADS": str(n)}
    if compile_threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(n)
    return env
