"""Helpers every suite worker process uses (no torch here: the binding's cold-start process
must not import it)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def stage(msg: str) -> None:
    """Progress to the log, with the seconds since the suite spawned this process (where a
    process's time goes); after a crash the last one says which step died."""
    t = since_process_start()
    print(f"stage: {msg}" + (f"  [{t:.1f} s]" if t is not None else ""), file=sys.stderr,
          flush=True)


def since_process_start() -> float | None:
    """Seconds since the suite spawned this process (SUITE_T0, taken just before the spawn), so
    cold-start figures include interpreter start-up and imports."""
    t0 = os.environ.get("SUITE_T0")
    return round(time.time() - float(t0), 3) if t0 else None


def wait_for_go(path: str | None, limit_s: float = 300) -> float:
    """A background job that will use the GPU waits here, after its CPU-only start (imports,
    model build), until the suite has done the timings that must have the GPU alone (the
    ceilings) and writes `path`. Returns the seconds waited."""
    t0 = time.monotonic()
    if path:
        stage("waiting for the suite's go to use the GPU")
        while not os.path.exists(path) and time.monotonic() - t0 < limit_s:
            time.sleep(0.1)
    return round(time.monotonic() - t0, 2)


def park(parked_path: str, go_path: str, info: dict, limit_s: float = 900) -> float:
    """A run started early (its package loaded in the background) writes `parked_path` and
    sleeps until the suite writes `go_path`, in the quiet phase, so that only what follows the
    go is timed. Gives up after limit_s, or when the suite that started it is gone (then
    nobody would ever write the go). Returns the seconds parked."""
    write_json(parked_path, dict(info, parked_at=time.time()))
    stage("parked: waiting for the suite's go")
    waited = _await_file(go_path, limit_s, lambda s: f"parked {s:.0f} s and no go came")
    stage("go")
    return waited


def wait_for_result(path: str, limit_s: float = 600) -> dict:
    """Waits for another job's result file and returns it (gives up as park does)."""
    _await_file(path, limit_s, lambda s: f"waited {s:.0f} s for {path}")
    return json.loads(Path(path).read_text())


def _await_file(path: str, limit_s: float, failure) -> float:
    """Seconds until `path` exists. Polls every 50 ms: a waiting process must not take CPU
    from what the suite times meanwhile. Raises RuntimeError(failure(seconds) + why) after
    limit_s, or once the suite that started this process is gone."""
    t0, parent = time.monotonic(), os.getppid()
    while not os.path.exists(path):
        if time.monotonic() - t0 > limit_s or os.getppid() != parent:
            raise RuntimeError(f"{failure(time.monotonic() - t0)} (limit {limit_s:.0f} s, or "
                               "the suite is gone)")
        time.sleep(0.05)
    return round(time.monotonic() - t0, 3)


def write_json(path, obj) -> None:
    """Atomic: a task that dies mid-write leaves the previous (partial) result readable."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)


class Partial:
    """A task that measures several items (variants, bundles) in one process writes its result
    after each item, with the item in progress under "running": when the process crashes or is
    killed, the suite still gets every finished item and knows which one died."""

    def __init__(self, path, key: str):
        self.path, self.key = path, key
        self.doc: dict = {key: {}, "running": None}

    def start(self, item: str) -> None:
        self.doc["running"] = item
        self.save()

    def done(self, item: str, result: dict) -> None:
        self.doc[self.key][item] = result
        self.doc["running"] = None
        self.save()

    def save(self) -> None:
        if self.path:
            write_json(self.path, self.doc)
