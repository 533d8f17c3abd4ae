"""`aotpack tune SOURCE -o job.aotune`: every tunable kernel op of the model, its candidate
configs compiled on this host (no GPU), written as a job folder (docs/tuning.md): job.json and
one ordinary one-op bundle per candidate, whose operands are all bundle inputs.

Identical ops (same canonical form) are one problem. Compiles run in worker processes and are
cached on disk by (problem key, config): a second `aotpack tune` of the same model is quick.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aotpack import knobs
from aotpack.ir.sym import subs, subs_tree
from aotpack.kernels.spec import KernelOp, Target, op_inputs, op_outputs
from aotpack.kernels.templates import template_for
from aotpack.kernels.variants import buckets
from aotpack.program import Program, Storage
from aotpack.shared_steps import (
    BuildError, canonical, check_destination, load_program, parse_arch, portable_command,
    provenance, replace_dir, source_file, triton_cache,
)
from aotpack.tuning import keys, space

FORMAT, VERSION = "aotpack-tuning-job", 1
SETTINGS = {"warmup": 5, "reps": 30, "l2_flush_bytes": 256 << 20, "candidate_timeout_s": 20}
RTOL = {"bf16": 0.02, "f16": 0.01, "f32": 0.001}


@dataclass
class Problem:
    key: str
    shape_key: str
    kind: str
    desc: str
    op: KernelOp  # canonical: storages named __op.<i>
    storages: dict[str, Storage]  # canonical name -> storage (input/output of the one-op bundle)
    candidates: list[dict]
    count: int = 1  # how many ops of the model share this problem
    compiled: dict[int, list] = field(default_factory=dict)  # candidate index -> launches
    failed: dict[int, str] = field(default_factory=dict)  # candidate index -> why


def _one_op_storages(program: Program, canon: KernelOp, back: dict[str, str], env: dict):
    """Storages of the one-op bundle at the dims `env`: every operand an input, the result the
    output; None when the op writes a storage it also reads (its result would depend on stale
    bytes)."""
    outs = [a.storage for a in op_outputs(canon)]
    extra = outs[1:]  # written too (an RMSNorm's FP8 scales): outputs, compared as such
    ins = [a.storage for a in op_inputs(canon) if a.storage not in extra]
    if canon.out.storage in ins:
        return None
    st = {}
    for name in [*ins, *outs]:
        real = program.storages[back[name]]
        st[name] = Storage(name, "output" if name in outs else "input", real.dtype,
                           tuple(subs(real.shape, env)))
    return st


def find_problems(program: Program, target: Target, *, level: str,
                  gemm_backend: str) -> list[Problem]:
    """One problem per distinct tunable op; a symbolic op gives one per bucket of its sizes
    (kernels/variants.py), at the bucket's representative shape: the shape a build looks its
    config up at."""
    problems: dict[str, Problem] = {}
    for op in program.ops:
        template = template_for(op)
        if not template.tunable:
            continue
        canon, back = canonical(op)
        for b in buckets(canon, template, program.symbols, program.example, target,
                         gemm_backend if gemm_backend != "auto" else "triton"):
            concrete = subs_tree(canon, b.env)
            key, shape_key = keys.problem_keys(concrete, target, template.name,
                                               template.sources)
            if key in problems:
                problems[key].count += 1
                continue
            storages = _one_op_storages(program, canon, back, b.env)
            cands = space.candidates(concrete, target, level=level, gemm_backend=gemm_backend)
            if storages is None or len(cands) < 2:
                continue
            problems[key] = Problem(key, shape_key, template.name, template.describe(concrete),
                                    concrete, storages, cands)
    return list(problems.values())


# ----------------------------------------------------------------------------- compiling
def _cache_path(key: str, config: dict) -> Path:
    # the decode prefetch knob changes what GemmTemplate.compile makes of a split-K config
    name = keys.digest({"key": key, "config": config,
                        "decode_prefetch": knobs.decode_prefetch_bytes()})
    return knobs.cache_dir() / "tuning" / name[:2] / f"{name}.pkl"


def _compile_one(op: KernelOp, target: Target, config: dict, cache: str):
    """(launches, None) or (None, why). Runs in a worker process (each with its own CuTeDSL
    dump folder: kernels/cutedsl/build.py)."""
    path = Path(cache)
    if path.is_file():
        try:
            return pickle.loads(path.read_bytes()), None
        except Exception:  # a torn or foreign cache file: compile again
            pass
    try:
        with triton_cache():
            launches = space.compile_candidate(op, target, config)
    except Exception as e:  # noqa: BLE001 — a candidate that cannot compile is data, not a crash
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:400]
    for la in launches:
        if la.kernel.entry.encode() not in la.kernel.cubin:
            return None, f"entry {la.kernel.entry[:60]}... is not in its cubin"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(launches))
    os.replace(tmp, path)
    return launches, None


def compile_all(problems: list[Problem], target: Target, *, jobs: int, progress: bool) -> None:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    work = [(p, i, c) for p in problems for i, c in enumerate(p.candidates)]
    columns = (TextColumn("[bold]compiling candidates[/]"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("", total=len(work))

        def done(p: Problem, i: int, result) -> None:
            launches, why = result
            if launches is None:
                p.failed[i] = why
            else:
                p.compiled[i] = launches
            bar.advance(task)

        if jobs <= 1:
            for p, i, c in work:
                done(p, i, _compile_one(p.op, target, c, str(_cache_path(p.key, c))))
            return
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = [(p, i, pool.submit(_compile_one, p.op, target, c,
                                          str(_cache_path(p.key, c)))) for p, i, c in work]
            for p, i, f in futures:
                done(p, i, f.result())


# ----------------------------------------------------------------------------- writing
def _candidate_bundle(path: Path, p: Problem, launches: list, target: Target, prov: dict) -> None:
    from aotpack.bundle import write_bundle
    from aotpack.passes import plan_memory

    st = p.storages
    program = Program(inputs=[n for n, s in st.items() if s.kind == "input"],
                      outputs=[n for n, s in st.items() if s.kind == "output"],
                      storages=dict(st), ops=[p.op])
    write_bundle(path, program, plan_memory(program, [launches]), target=target, provenance=prov)


def _problem_json(p: Problem, index: int, kept: list[int]) -> dict:
    out = p.storages[p.op.out.storage]
    return {
        "key": p.key, "kind": p.kind, "desc": p.desc + (f" (x{p.count} in model)" if p.count > 1
                                                       else ""),
        "reference": 0, "rtol": RTOL.get(out.dtype.value, 0.02),
        "seed": int(p.key[:8], 16) % 100003, "info": _problem_info(p, kept),
        "candidates": [{"name": space.candidate_name(p.candidates[i]),
                        "bundle": f"c/p{index:03d}-c{i:03d}.aotpack",
                        "config": p.candidates[i]} for i in kept],
        "compile_failures": [{"name": space.candidate_name(p.candidates[i]), "why": why}
                             for i, why in sorted(p.failed.items())],
    }


def _problem_info(p: Problem, kept: list[int]) -> dict:
    """What the launcher echoes into the results untouched: the shape key, and the compilers
    of the backends among the candidates that the key leaves out ({"gemm.cutedsl":
    {"cutedsl": "4.8.1"}}), which the database records with a winner of that backend."""
    backends = sorted({p.candidates[i].get("template", "") for i in kept})
    compilers = {b: keys.backend_toolchain(b) for b in backends if keys.backend_toolchain(b)}
    return {"shape_key": p.shape_key, **({"toolchain": compilers} if compilers else {})}


def write_job(out: Path, problems: list[Problem], target: Target, provenance: dict) -> dict:
    """Write the job folder `out` atomically; returns job.json's content."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp.", dir=out.parent))
    try:
        (tmp / "c").mkdir()
        entries = []
        for p in problems:
            if 0 not in p.compiled:  # no reference: nothing to check the others against
                continue
            kept = sorted(p.compiled)
            index = len(entries)
            for i in kept:
                _candidate_bundle(tmp / f"c/p{index:03d}-c{i:03d}.aotpack", p, p.compiled[i],
                                  target, provenance)
            entries.append(_problem_json(p, index, kept))
        job = {"format": FORMAT, "version": VERSION,
               "job_id": keys.digest([(e["key"], [c["config"] for c in e["candidates"]])
                                      for e in entries]),
               "target": {"arch": target.arch, "cc": list(target.cc),
                          "sm_count": target.sm_count},
               "settings": dict(SETTINGS), "toolchain": keys.toolchain(),
               "provenance": provenance, "problems": entries}
        (tmp / "job.json").write_text(json.dumps(job, indent=1, sort_keys=True) + "\n")
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return job


@dataclass
class JobSummary:
    path: Path
    problems: int
    candidates: int
    failed: int
    dropped: list[str]  # problems without a reference candidate


def make_job(spec: str, out, *, arch: str = "sm90", level: str = "full",
             gemm_backend: str = "auto", jobs: int | None = None, force: bool = False,
             progress: bool | None = None, command_line: str = "",
             program: Program | None = None, dynamic=(), inputs=(),
             dtype: str | None = None, precision: str = "model") -> JobSummary:
    """`program`: the model `spec` names, already loaded (`build --tune` compiles it too);
    `dynamic`: `--dynamic` options (a symbolic op is tuned at each bucket's size); `inputs`:
    `--input` options; `dtype`: `--dtype`; `precision`: `--precision` (FP8 GEMMs are their
    own problems)."""
    target = parse_arch(arch)
    out = Path(out)
    if not source_file(spec).is_file():
        raise BuildError(f"model spec {spec!r}: {source_file(spec)} does not exist")
    check_destination(out, force)
    if level not in space.LEVELS:
        raise BuildError(f"--level {level!r}: use {' or '.join(space.LEVELS)}")
    from aotpack.kernels import GEMM_BACKENDS

    if gemm_backend not in GEMM_BACKENDS:  # else no GEMM has candidates: a silently empty job
        raise BuildError(f"--gemm-backend {gemm_backend!r}: use {', '.join(GEMM_BACKENDS)}")
    progress = knobs.show_progress() if progress is None else progress
    if program is None:
        program = load_program(spec, dynamic, inputs, dtype, precision=precision,
                               measure_error=False)
    problems = find_problems(program, target, level=level, gemm_backend=gemm_backend)
    jobs = jobs if jobs is not None else min(8, os.cpu_count() or 1)
    compile_all(problems, target, jobs=jobs, progress=progress)
    command = portable_command(command_line or "aotpack tune")
    job = write_job(out, problems, target, provenance(spec, command))
    return JobSummary(out, len(job["problems"]),
                      sum(len(p["candidates"]) for p in job["problems"]),
                      sum(len(p.failed) for p in problems),
                      [p.desc for p in problems if 0 not in p.compiled])
