"""The suite's child processes: each measurement runs in a fresh process of its own session,
under a timeout, with its output in a log file (not a pipe: a grandchild that outlives the
child must not keep the suite waiting for end-of-file). A child that dies on a signal or runs
past its timeout becomes a row with the reason, never a silent gap.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    status: str  # ok | error | crash | timeout | skipped
    result: dict = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"



def run_command(cmd: list[str], *, env: dict, timeout_s: float, log_path: Path,
                result_path: Path | None = None) -> Child:
    """cmd in its own session (a timeout kills it and everything it started, e.g. Inductor's
    compile workers), output to a log file; SUITE_T0 is the spawn time, for cold starts."""
    start = time.monotonic()
    timed_out = False
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(env, SUITE_T0=repr(time.time())))
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc.pid)
            rc = proc.wait()
        except BaseException:  # the suite is being stopped: take the child down with it
            kill_tree(proc.pid)
            raise
        kill_tree(proc.pid)  # strays (compile workers) of a child that has exited
    result = {}
    if result_path is not None and result_path.is_file():
        result = json.loads(result_path.read_text())
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
    status, error = classify(rc, timed_out, result, tail, timeout_s)
    return Child(status, result, error, round(time.monotonic() - start, 2), tail)


def classify(rc: int, timed_out: bool, result: dict, tail: str, timeout_s: float):
    """(status, error) of a finished child."""
    if timed_out:
        return "timeout", f"timeout: killed after {timeout_s:.0f} s"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return "crash", f"crash: {name} (rc {rc}); see the log for the last stage"
    if result.get("error"):
        return "error", str(result["error"])
    if rc != 0:
        last = tail.strip().splitlines()[-1:] or ["no output"]
        return "error", f"exit code {rc}: {last[0][:300]}"
    return "ok", None


def kill_tree(pid: int) -> None:
    """SIGKILL to pid's session and to every process below pid, found before anything is
    killed (an orphan is re-parented to init, and a g++ may have made a session of its own)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    below, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            below.append(c)
            todo.append(c)
    for kill, target in [(os.killpg, pid)] + [(os.kill, p) for p in below]:
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
