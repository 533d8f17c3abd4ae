"""One measurement of the benchmark suite in a fresh process (started by benchmarks/suite.py).

    python benchmarks/suite_worker.py TASK.json

TASK.json holds "task" (a key of TASKS), its arguments and "result_path", where the result (a
JSON object) is written. A task that raises writes {"error", "traceback"} and exits 1; after a
crash (e.g. SIGSEGV) the log's last "stage:" line says where it happened. Task modules are
imported only for their own task: aotpack-cold measures a process without torch.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # aotpack (repo root) and the suite's modules

MODULES = {"ceilings": "suite_torch", "eager": "suite_torch", "compile": "suite_torch",
           "compile-max-autotune": "suite_torch", "warm-start": "suite_torch",
           "frontend-probe": "suite_torch", "aoti-compile": "suite_aoti", "aoti-run": "suite_aoti",
           "aotpack-run": "suite_aotpack", "aotpack-py": "suite_aotpack",
           "aotpack-cold": "suite_aotpack"}


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)


def main() -> int:
    from suite_measure import one_line, stage

    task = json.loads(Path(sys.argv[1]).read_text())
    out = Path(task["result_path"])
    stage(f"task {task['task']} ({task.get('id')})")
    try:
        fn = importlib.import_module(MODULES[task["task"]]).TASKS[task["task"]]
        result = fn(task)
    except Exception as e:
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        write_json(out, {"error": one_line(e)[:500], "traceback": tb[-3000:]})
        return 1
    write_json(out, result)
    stage("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
