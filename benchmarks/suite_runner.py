"""Running the suite's measurements as child processes, under a time budget.

Each worker runs in a fresh process (its own session, so a timeout kills it and anything it
started, e.g. Inductor's compile workers). Its output goes to a log file, not a pipe: a
grandchild that outlives the worker must not keep the suite waiting for end-of-file. The worker
writes its result as JSON to a file named in its task; a process that dies on a signal or runs
past its limit becomes a failed result with the reason, never a silent gap.

Budget admits a task when its estimate fits (after what suite_schedule.Ledger keeps for more
important work); Background runs the jobs started early and tells the suite when none of them
can still use the GPU (wait_gpu_free) and when all are done or parked (wait_all). A parked job
(an AOTI run whose package is loaded, sleeping until its go file: suite_proc.park) counts as
idle; resume gives it the go and waits for its result.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "suite_worker.py"


@dataclass
class TaskResult:
    status: str  # ok | error | crash | timeout
    rc: int | None
    wall_s: float
    result: dict = field(default_factory=dict)
    error: str | None = None
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Budget:
    """Seconds left of the run. A task is admitted when its estimate fits in what is left after
    `reserve` (the estimates of more important work still to come, suite_schedule.Ledger); its
    limit is then its own cap or what is left, whichever is smaller (minus a reserve for writing
    results)."""

    def __init__(self, total_s: float, reserve_s: float = 8.0):
        self.total_s, self.reserve_s = total_s, reserve_s
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def refuse(self, estimate_s: float, reserve: float = 0.0) -> str | None:
        """None when the task fits, else the reason to skip it."""
        left = self.left() - self.reserve_s
        if estimate_s <= left - reserve:
            return None
        why = (f"budget: needs ~{estimate_s:.0f} s, {max(left, 0):.0f} s left of "
               f"{self.total_s:.0f} s")
        if estimate_s <= left:
            why += f", {reserve:.0f} s of it kept for more important work still to come"
        return why

    def deadline(self, keep_s: float) -> float:
        """The monotonic time by which waiting must end so that keep_s still fits."""
        return self.t0 + self.total_s - self.reserve_s - keep_s

    def limit(self, cap_s: float) -> float:
        return max(1.0, min(cap_s, self.left() - self.reserve_s))


def signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc), collected before anything is killed: an orphan
    is re-parented to init and could no longer be found."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_group(pid: int) -> None:
    """The worker's session (it and what it started) and every descendant that made a session
    of its own (a stray g++ or compile worker would load the quiet phase's CPU)."""
    strays = _descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill(strays)


def kill_tree(pid: int) -> None:
    """SIGKILL to pid and every process below it (a process that is not a session leader,
    e.g. Inductor's compile-worker pool inside a worker)."""
    _kill([pid, *_descendants(pid)])


def _kill(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def classify(rc: int | None, timed_out: bool, result: dict, log_tail: str,
             limit_s: float) -> tuple[str, str | None]:
    """(status, error) of a finished child."""
    if timed_out:
        return "timeout", f"timeout: killed after {limit_s:.0f} s"
    if rc is not None and rc < 0:
        return "crash", f"crash: {signal_name(rc)} (rc {rc}); see the log for the last stage"
    if result.get("error"):
        return "error", str(result["error"])
    if rc != 0:
        last = log_tail.strip().splitlines()[-1:] or ["no output"]
        return "error", f"exit code {rc}: {last[0][:300]}"
    return "ok", None


def run_command(cmd: list[str], *, env: dict, limit_s: float, log_path: Path,
                result_path: Path | None = None) -> TaskResult:
    """Runs cmd with SUITE_T0 (the spawn time, for cold-start figures) in its env."""
    env = dict(env, SUITE_T0=repr(time.time()))
    start = time.monotonic()
    timed_out = False
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            rc = proc.wait()
        except BaseException:  # the suite is being stopped: take the child down with it
            _kill_group(proc.pid)
            raise
        _kill_group(proc.pid)  # strays (compile workers) of a worker that has exited
    wall = round(time.monotonic() - start, 2)
    result = {}
    if result_path is not None and result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError as e:
            result = {"error": f"unreadable result file: {e}"}
    tail = _tail(log_path)
    status, error = classify(rc, timed_out, result, tail, limit_s)
    return TaskResult(status, rc, wall, result, error, tail)


def result_path(work: Path, tag: str) -> Path:
    """Where the worker of task `tag` writes its result."""
    return work / f"result-{tag}.json"


def read_result(path: Path) -> dict:
    """A background job's result file ({} when it wrote none)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def write_task(task: dict, work: Path) -> tuple[Path, Path]:
    """task-<id>.json for suite_worker.py (a dict with "task", "id" and the task's arguments;
    result_path added, and cleared of an earlier run's result): (task file, result file)."""
    task_path, result = work / f"task-{task['id']}.json", result_path(work, task["id"])
    result.unlink(missing_ok=True)
    task_path.write_text(json.dumps(dict(task, result_path=str(result))))
    return task_path, result


def run_worker(task: dict, *, work: Path, env: dict, limit_s: float, log_path: Path) -> TaskResult:
    """Runs one suite_worker task (a dict with "task" and its arguments) in a fresh process."""
    task_path, result = write_task(task, work)
    cmd = [sys.executable, "-X", "faulthandler", str(WORKER), str(task_path)]
    return run_command(cmd, env=env, limit_s=limit_s, log_path=log_path, result_path=result)


def _note_end(job) -> None:
    job.proc.wait()
    job.end = time.monotonic()


@dataclass
class Job:
    proc: subprocess.Popen
    start: float
    limit_s: float
    log_path: Path
    gpu: bool  # may use the GPU (until `marker` exists, when it has one)
    marker: Path | None = None
    parked: Path | None = None  # written by the job once it only waits for its go
    go_at: float | None = None  # when resume gave it the go
    result: TaskResult | None = None
    end: float | None = None  # when the process exited (set by a watcher thread)

    def alive(self) -> bool:
        return self.result is None and self.proc.poll() is None

    def is_parked(self) -> bool:
        """Alive, loaded and sleeping until its go: idle for the suite's timings."""
        return self.alive() and self.parked is not None and self.parked.exists()

    def gpu_phase(self) -> bool:
        """True while the job may still run work on the GPU."""
        if not self.gpu or self.result is not None or self.proc.poll() is not None:
            return False
        return self.marker is None or not self.marker.exists()


class Background:
    """Jobs started early that later measurements wait for, each under its own limit: weights
    generation, reference inputs, aotpack frontend probes (CPU only: started without a visible
    GPU), AOTInductor compiles (GPU until their marker file appears, CPU afterwards: see
    suite_aoti.task_aoti_compile) and preloaded AOTI runs (CPU and disk while loading, plus
    one weights upload; then parked). The suite times nothing on the GPU while a job may use
    it (wait_gpu_free) and nothing CPU-sensitive while any job runs unparked (wait_all)."""

    def __init__(self):
        self.jobs: dict[str, Job] = {}

    def start(self, name: str, cmd: list[str], env: dict, limit_s: float, log_path: Path, *,
              gpu: bool = False, marker: Path | None = None, hide_gpu: bool | None = None,
              parked: Path | None = None) -> None:
        """gpu: the job's GPU work keeps GPU timings waiting (until `marker`); hide_gpu
        (default: not gpu): CUDA_VISIBLE_DEVICES="", so a CPU-only job cannot touch the GPU by
        accident. limit_s: for a job with `parked`, the limit to reach it (resume sets the
        next). SUITE_T0: the spawn time, for a preloaded run's cold start."""
        if (not gpu) if hide_gpu is None else hide_gpu:
            env = dict(env, CUDA_VISIBLE_DEVICES="")
        env = dict(env, SUITE_T0=repr(time.time()))
        for f in (marker, parked):
            if f is not None:
                f.unlink(missing_ok=True)
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(map(str, cmd))}\n".encode())
            log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        job = self.jobs[name] = Job(proc, time.monotonic(), limit_s, log_path, gpu, marker,
                                    parked)
        threading.Thread(target=_note_end, args=(job,), daemon=True).start()

    def running(self, name: str) -> bool:
        job = self.jobs.get(name)
        return bool(job) and job.alive()

    def parked(self) -> list[str]:
        return [n for n, j in self.jobs.items() if j.is_parked()]

    def gpu_busy(self) -> list[str]:
        return [n for n, j in self.jobs.items() if j.gpu_phase()]

    def wait(self, name: str, deadline: float | None = None, why: str = "") -> TaskResult:
        """The job's result, waiting for it until its own limit or `deadline` (monotonic),
        whichever comes first; a job still running then is killed (`why` says why)."""
        job = self.jobs[name]
        if job.result is not None:
            return job.result
        end = job.start + job.limit_s
        own = deadline is None or end <= deadline
        timed_out = False
        try:
            rc = job.proc.wait(timeout=max(0.1, (end if own else deadline) - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(job.proc.pid)
            rc = job.proc.wait()
        _kill_group(job.proc.pid)  # strays (compile workers) must not load the quiet phase
        job.result = self._result(job, rc, timed_out, own, why)
        return job.result

    def _result(self, job: Job, rc: int | None, timed_out: bool, own: bool,
                why: str) -> TaskResult:
        wall = round((job.end or time.monotonic()) - job.start, 2)
        tail = _tail(job.log_path)
        status, error = classify(rc, timed_out, {}, tail, job.limit_s)
        if timed_out and not own:
            error = f"timeout: killed after {wall:.0f} s: {why or 'the suite could not wait'}"
        elif timed_out and job.go_at is not None:
            error = (f"timeout: killed {time.monotonic() - job.go_at:.0f} s after its go "
                     f"({job.go_at - job.start:.0f} s after its start)")
        elif timed_out and job.parked is not None:
            where = "parked" if job.parked.exists() else "before it was parked (still loading)"
            error = f"timeout: killed after {wall:.0f} s, {where}"
        return TaskResult(status, rc, wall, {}, error, tail)

    def settle(self, name: str, deadline: float | None = None, why: str = "") -> bool:
        """Waits until the job has exited (its result is kept) or is parked; past its limit or
        `deadline` it is killed. True when it is parked."""
        job = self.jobs[name]
        if job.parked is None:
            self.wait(name, deadline, why)
            return False
        end = min(job.start + job.limit_s, deadline if deadline is not None else float("inf"))
        while job.alive() and not job.is_parked() and time.monotonic() < end:
            time.sleep(0.05)
        if job.is_parked():
            return True
        self.wait(name, time.monotonic() if job.alive() else None, why)  # kills one still loading
        return False

    def resume(self, name: str, go: Path, limit_s: float) -> TaskResult:
        """A parked job: writes its go file, then waits for its result at most limit_s."""
        job = self.jobs[name]
        if job.alive() and job.go_at is None:
            job.go_at = time.monotonic()
            job.limit_s = job.go_at - job.start + limit_s  # from now on: limit_s after the go
            go.write_text("go\n")
        return self.wait(name)

    def wait_gpu_free(self, deadline: float | None = None, why: str = "") -> float:
        """Waits until no job may use the GPU; past `deadline`, kills those that still may.
        Returns the seconds waited."""
        t0 = time.monotonic()
        while busy := self.gpu_busy():
            if deadline is not None and time.monotonic() >= deadline:
                for name in busy:
                    self.wait(name, deadline, why)
                break
            time.sleep(0.2)
        return time.monotonic() - t0

    def wait_all(self, deadline: float | None = None, why: str = "") -> float:
        """Until every job has exited or is parked (a parked process only sleeps); returns the
        seconds waited."""
        t0 = time.monotonic()
        for name in list(self.jobs):
            self.settle(name, deadline, why)
        return time.monotonic() - t0

    def kill_all(self) -> None:
        """Every job still alive, parked ones included (the end of a run, or SIGTERM/SIGINT),
        with its process tree."""
        for job in self.jobs.values():
            if job.proc.poll() is None:
                _kill_group(job.proc.pid)
