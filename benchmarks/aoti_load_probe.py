"""Where does aoti_load_package spend its 40-60 s on the H200? (the suite's AOTI loads).

Compiles one model's package with the suite's exclude-libs recipe, then loads it in a fresh
process while this one samples that process every second: its child processes, threads,
bytes read, kernel wait channel, and (when gdb is on the machine) native stacks; the child
dumps its Python stack every 5 s. Writes a JSON report.

    python benchmarks/aoti_load_probe.py [--spec examples/mlp.py:make_decode] -o probe.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

CHILD = r"""
import faulthandler, sys, time
faulthandler.dump_traceback_later(5, repeat=True, file=sys.stderr)
t0 = time.perf_counter()
import torch
torch.cuda.init()
t1 = time.perf_counter()
print(f"import+init {t1 - t0:.2f}s", file=sys.stderr, flush=True)
if sys.argv[2] == "loader":
    runner = torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], "model", False, 1, -1)
else:
    runner = torch._inductor.aoti_load_package(sys.argv[1])
t2 = time.perf_counter()
print(f"LOAD {t2 - t1:.2f}s", file=sys.stderr, flush=True)
faulthandler.cancel_dump_traceback_later()
"""


def compile_package(spec: str, pkg: Path, work: Path) -> float:
    import suite_aoti_plan as plan

    facts = plan.toolchain_facts()
    recipe = plan.recipes(work, facts)["exclude-libs"]
    os.environ.update(recipe.env)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "cache")
    import suite_aoti

    t0 = time.perf_counter()
    res = suite_aoti.task_aoti_compile({"spec": spec, "package": str(pkg),
                                        "configs": recipe.configs, "device": "cuda"})
    print(f"compiled in {time.perf_counter() - t0:.1f}s: {res.get('package')}", flush=True)
    return time.perf_counter() - t0


def sample(pid: int, gdb: str | None, t: float) -> dict:
    s: dict = {"t": round(t, 1)}
    try:
        kids = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid=,etime=,args="],
                              capture_output=True, text=True, timeout=5).stdout.strip()
        s["children"] = kids.splitlines()[:5]
        status = Path(f"/proc/{pid}/status").read_text()
        s["threads"] = next(ln.split()[1] for ln in status.splitlines()
                            if ln.startswith("Threads"))
        s["state"] = next(ln.split(None, 1)[1] for ln in status.splitlines()
                          if ln.startswith("State"))
        io = dict(ln.split(": ") for ln in Path(f"/proc/{pid}/io").read_text().splitlines())
        s["read_mb"] = round(int(io["read_bytes"]) / 1e6, 1)
        s["rchar_mb"] = round(int(io["rchar"]) / 1e6, 1)
        stat = Path(f"/proc/{pid}/stat").read_text().split()
        s["cpu_s"] = round((int(stat[13]) + int(stat[14])) / os.sysconf("SC_CLK_TCK"), 1)
        s["wchan"] = Path(f"/proc/{pid}/wchan").read_text()
    except (OSError, StopIteration, subprocess.SubprocessError) as e:
        s["error"] = str(e)
    if gdb and int(t) in (8, 20, 35):
        out = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"],
                             capture_output=True, text=True, timeout=60).stdout
        s["native"] = [ln for ln in out.splitlines() if ln.startswith(("#", "Thread"))][:120]
    return s


def load_and_watch(pkg: Path, how: str, log: Path) -> dict:
    gdb = shutil.which("gdb") or shutil.which("cuda-gdb")
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(pkg), how], stderr=f, stdout=f)
        t0, samples = time.monotonic(), []
        while p.poll() is None and time.monotonic() - t0 < 150:
            samples.append(sample(p.pid, gdb, time.monotonic() - t0))
            time.sleep(1.0)
        if p.poll() is None:
            p.kill()
    return {"how": how, "wall_s": round(time.monotonic() - t0, 1), "rc": p.returncode,
            "gdb": gdb, "samples": samples, "log_tail": log.read_text()[-6000:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="examples/mlp.py:make_decode")
    ap.add_argument("--work", default="/tmp/aoti-probe")
    ap.add_argument("--how", default="aoti_load_package,loader")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    pkg = work / "probe.pt2"
    report = {"compile_s": round(compile_package(args.spec, pkg, work), 1), "loads": []}
    for how in args.how.split(","):
        report["loads"].append(load_and_watch(pkg, how, work / f"load-{how}.log"))
        Path(args.out).write_text(json.dumps(report, indent=1))
        print(how, report["loads"][-1]["wall_s"], "s", flush=True)


if __name__ == "__main__":
    main()
