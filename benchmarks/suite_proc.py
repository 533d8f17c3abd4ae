"""Helpers every suite worker process uses (no torch here: the binding's cold-start process
must not import it)."""
from __future__ import annotations

import os
import sys
import time


def stage(msg: str) -> None:
    """Progress to the log; after a crash the last one says which step died."""
    print(f"stage: {msg}", file=sys.stderr, flush=True)


def since_process_start() -> float | None:
    """Seconds since the suite spawned this process (SUITE_T0, taken just before the spawn), so
    cold-start figures include interpreter start-up and imports."""
    t0 = os.environ.get("SUITE_T0")
    return round(time.time() - float(t0), 3) if t0 else None
