"""One model's part of benchmarks/bench_generate.py: load it, check aotpack's greedy ids against
eager's, then every contender at every (batch, prompt) cell, each within its slice of the
model's time budget. Rows go to the report as they are measured.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

import gen_contenders as gc
import gen_math as gm
import generate_models as models


class Skip(Exception):
    """A measurement that cannot or should not run; its message says why."""


def log(msg: str) -> None:
    print(f"[gen {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_model(name: str, args, device: torch.device, budget: gm.Budget, report) -> None:
    facts = report.model(name)
    t0 = time.perf_counter()
    model = models.FACTORIES[name](args.seed)[0].to(device)
    facts["load_s"] = time.perf_counter() - t0
    shape = models.SHAPES[name]
    facts.update(params=models.param_count(model), weight_bytes_per_step=gm.weight_bytes_per_step(
        shape, next(model.parameters()).element_size()), budget_s=budget.seconds)
    log(f"{name}: {facts['params'] / 1e9:.2f} B parameters, made in {facts['load_s']:.0f} s; "
        f"{budget.left():.0f} s for it")
    bundle = _bundle(name, args, report)
    generator = _open_generator(bundle, args, facts, report) if bundle else None
    if generator is not None:
        check(name, model, generator, bundle, args, facts)
        report.save()
    contenders = [c for c in args.contenders if bundle or c not in ("aotpack", "aotpack-run")]
    units = [(c, cell) for c in contenders for cell in _cells(args)]
    loop = None
    for k, (contender, (batch, prompt)) in enumerate(units):
        what = f"{name} {contender} B={batch} prompt={prompt}"
        # every unit left gets an equal slice of what is left once the compiles still to
        # come are set aside
        reserve = _compile_reserve(units[k:], args, facts)
        slice_s = max(budget.left() - reserve, 0.0) / (len(units) - k)
        try:
            if contender == "gptfast" and loop is None:
                loop = gc.StaticLoop(model, max(args.prompts) + args.new,
                                     args.compile_mode, not args.no_fullgraph)
            batch_prompts = gc.prompts(batch, prompt, shape.vocab, args.seed)
            result = measure(contender, model, generator, loop, bundle, batch_prompts, args,
                             slice_s, budget, facts)
        except Skip as e:
            report.skip(what, str(e))
            continue
        except Exception as e:  # one contender failing must not lose the others' numbers
            report.skip(what, f"failed: {type(e).__name__}: {str(e)[:300]}")
            continue
        _add_rows(report, name, shape, contender, batch, prompt, args, result)
        log(f"{what}: {_brief(result)}")
    del model, generator, loop


def _compile_reserve(units_left, args, facts) -> float:
    """Seconds to keep for gptfast's compiles: one per batch size not compiled yet."""
    if args.compile_mode == "none":
        return 0.0
    done = facts.get("compile", {})
    pending = {b for c, (b, _) in units_left if c == "gptfast" and str(b) not in done}
    return args.compile_estimate_s * len(pending)


def _cells(args) -> list[tuple[int, int]]:
    """(batch, prompt length) in the order measured: small first, so that a short budget
    still gets the cheap points of every contender."""
    return sorted(((b, l) for b in args.batches for l in args.prompts), key=lambda c: c[0] * c[1])


def measure(contender, model, generator, loop, bundle, batch_prompts, args, slice_s, budget,
            facts) -> dict:
    batch, prompt = len(batch_prompts), len(batch_prompts[0])
    if contender == "eager":
        return measure_eager(model, batch_prompts, args, slice_s)
    if contender == "gptfast":
        return measure_gptfast(loop, batch_prompts, args, slice_s, budget, facts)
    if contender in ("aotpack", "aotpack-run") and bundle is None:
        raise Skip("no bundle")
    _fits_bundle(facts.get("generation") or {}, batch, prompt, args.new)
    if contender == "aotpack":
        if generator is None:
            raise Skip("the bundle did not load (see the model's notes)")
        return measure_aotpack(generator, batch_prompts, args, slice_s)
    return measure_aotpack_run(bundle, batch_prompts, args, slice_s)


# ---------------------------------------------------------------------------- contenders
def measure_eager(model, batch_prompts, args, slice_s) -> dict:
    device = next(model.parameters()).device
    ids = gc.as_tensor(batch_prompts, device)
    started = time.perf_counter()
    t1, _ = gc.timed_generate(model, ids, 1, **gc.EAGER)  # warm-up (allocator, kernels)
    t1, _ = gc.timed_generate(model, ids, 1, **gc.EAGER)
    t8, _ = gc.timed_generate(model, ids, 8, **gc.EAGER)
    pair_s = (2 * t1 + (t8 - t1) / 7 * (args.new - 1)) / 1000
    left = slice_s - (time.perf_counter() - started)
    if pair_s > left:
        raise Skip(f"one timed pair takes ~{pair_s:.0f} s, {left:.0f} s left in its slice")
    short, full = [], []
    for _ in range(gm.repeats_that_fit(pair_s, left, args.reps)):
        short.append(gc.timed_generate(model, ids, 1, **gc.EAGER)[0])
        full.append(gc.timed_generate(model, ids, args.new, **gc.EAGER)[0])
    short.sort()
    full.sort()
    result = gm.rates_from_generate(short[len(short) // 2], full[len(full) // 2], args.new,
                                    len(batch_prompts))
    return {**result, "runs": len(full), "t1_ms": short, "tn_ms": full}


def measure_gptfast(loop, batch_prompts, args, slice_s, budget, facts) -> dict:
    device = next(loop.model.parameters()).device
    ids = gc.as_tensor(batch_prompts, device)
    batch = len(batch_prompts)
    compiles = facts.setdefault("compile", {})
    key, note = str(batch), ""
    if loop.mode and key not in compiles:
        if not budget.fits(args.compile_estimate_s):
            raise Skip(f"compiling ({args.compile_mode}) takes ~{args.compile_estimate_s:.0f} s "
                       f"at each batch size, {budget.left():.0f} s left: try --compile-mode "
                       f"default, fewer models or batch sizes")
        try:
            compiles[key] = _first_compiled_run(loop, ids, args.new)
        except Exception as e:  # the other prompt lengths of this batch size need not retry
            compiles[key] = {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
            raise
        note = f"compile {compiles[key]['compile_s']:.0f}s"
        if compiles[key].get("fullgraph_failed"):
            note += " (graph breaks)"
    if compiles.get(key, {}).get("failed"):
        raise Skip(f"the compile failed at this batch size: {compiles[key]['failed']}")
    return {**_timed_phases(lambda: loop.run(ids, args.new)[0], batch, args, slice_s),
            "note": note, "mode": args.compile_mode}


def _first_compiled_run(loop, ids, new) -> dict:
    """Compile time: the first run at this batch size (Dynamo, Inductor's autotuning, CUDA
    graph recording) less a steady run after it."""
    out = {}
    t0 = time.perf_counter()
    try:
        loop.run(ids, new)
    except Exception as e:  # fullgraph=True refused a graph break: gpt-fast's way, then ours
        if not loop.fullgraph:
            raise
        out["fullgraph_failed"] = f"{type(e).__name__}: {str(e)[:300]}"
        torch._dynamo.reset()
        loop.fullgraph = False
        loop.step = loop._compiled()
        loop.run(ids, new)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop.run(ids, new)
    steady = time.perf_counter() - t0
    out.update(first_run_s=first, steady_run_s=steady, compile_s=first - steady,
               fullgraph=loop.fullgraph)
    return out


def measure_aotpack(generator, batch_prompts, args, slice_s) -> dict:
    warm = min(16, args.new)
    result = gc.aotpack_generate(generator, batch_prompts, warm)  # warm-up
    per_step = result["decode_ms"] / max(warm - 1, 1)
    return _timed_phases(lambda: _aotpack_phases(generator, batch_prompts, args.new),
                         len(batch_prompts), args, slice_s,
                         estimate_s=(result["ttft_ms"] + per_step * args.new) / 1000)


def _aotpack_phases(generator, batch_prompts, new) -> dict:
    """The runtime's own phase timings, and the call's wall time beside them (a check on
    them: wall ~ ttft + decode + the ids' copy back)."""
    t0 = time.perf_counter()
    result = gc.aotpack_generate(generator, batch_prompts, new)
    wall_ms = (time.perf_counter() - t0) * 1000
    return {"ttft_ms": result["ttft_ms"], "decode_ms": result["decode_ms"],
            "runtime_decode_tok_s": result["runtime_decode_tok_s"], "wall_ms": wall_ms}


def _timed_phases(run, batch, args, slice_s, estimate_s=None) -> dict:
    """Repeats of a run timed by its phases ({"ttft_ms", "decode_ms", ...}) that fit the
    slice (a warm-up first when no estimate is given), medians."""
    started = time.perf_counter()
    if estimate_s is None:
        t0 = time.perf_counter()
        run()
        estimate_s = time.perf_counter() - t0
    left = slice_s - (time.perf_counter() - started)
    if estimate_s > left:
        raise Skip(f"one run takes ~{estimate_s:.0f} s, {left:.0f} s left in its slice")
    runs = [run() for _ in range(gm.repeats_that_fit(estimate_s, left, args.reps))]
    med = gm.median_of(runs)
    return {**gm.rates_from_phases(med["ttft_ms"], med["decode_ms"], args.new, batch),
            **{k: v for k, v in med.items() if k not in ("ttft_ms", "decode_ms")},
            "decode_ms": med["decode_ms"]}


def measure_aotpack_run(bundle: Path, batch_prompts, args, slice_s) -> dict:
    run = gc.find_aotpack_run(args.aotpack_run)
    if run is None:
        raise Skip("no aotpack-run (give --aotpack-run or set AOTPACK_RUN)")
    batch, prompt = len(batch_prompts), batch_prompts[0]
    started = time.perf_counter()
    timeout = max(min(slice_s, 300), 10)
    cold_ms, rc, text = gc.run_process(gc.aotpack_run_command(run, bundle, 1, batch, prompt),
                                       timeout)
    if rc != 0:
        raise Skip(f"aotpack-run --generate 1 rc={rc}: {text.strip()[-300:]}")
    left = slice_s - (time.perf_counter() - started)
    wall_ms, rc, text = gc.run_process(
        gc.aotpack_run_command(run, bundle, args.new, batch, prompt), max(left, 10))
    line = gm.parse_generate_line(text)
    if rc != 0 or not line:
        raise Skip(f"aotpack-run --generate {args.new} rc={rc}: {text.strip()[-300:]}")
    # decode_tok_s is read as the whole batch's tokens per second (as ours)
    step = batch * 1000.0 / line["decode_tok_s"] if line.get("decode_tok_s") else None
    return {"ttft_ms": line.get("ttft_ms"), "decode_step_ms": step,
            "decode_tok_s": line.get("decode_tok_s"), "cold_first_token_ms": cold_ms,
            "process_ms": wall_ms, "line": line,
            "note": f"cold 1st token {cold_ms:.0f}ms"}


# ------------------------------------------------------------------------------- bundle
def _bundle(name: str, args, report) -> Path | None:
    """<bundles>/<name>/model.aotpack when aotpack is asked for and its weights are there."""
    if not {"aotpack", "aotpack-run"} & set(args.contenders):
        return None
    bundle = args.bundles / name / "model.aotpack"
    if not bundle.is_file():
        report.skip(f"{name} aotpack", f"no bundle {bundle} (scripts/build-generate-bundles)")
        return None
    weights = _manifest(bundle).get("external_weights") or {}
    if weights.get("file") and not (bundle.parent / weights["file"]).is_file():
        report.skip(f"{name} aotpack", f"{bundle.parent / weights['file']} is missing (make it: "
                    f"scripts/make-weights $(cat {bundle.parent}/spec.txt) {bundle.parent})")
        return None
    return bundle


def _manifest(bundle: Path) -> dict:
    from suite_models import bundle_manifest

    return bundle_manifest(bundle)


def _open_generator(bundle: Path, args, facts: dict, report):
    facts["bundle"] = str(bundle)
    facts["generation"] = _manifest(bundle).get("generation") or {}
    if "aotpack" not in args.contenders:
        return None
    t0 = time.perf_counter()
    try:
        generator = gc.aotpack_generator(bundle, 0)
    except Exception as e:
        report.skip(f"{bundle} Generator", f"{type(e).__name__}: {str(e)[:300]}")
        return None
    facts["generator_load_s"] = time.perf_counter() - t0
    return generator


def _fits_bundle(generation: dict, batch: int, prompt: int, new: int) -> None:
    max_batch, max_seq = generation.get("max_batch"), generation.get("max_seq_len")
    if max_batch and batch > max_batch:
        raise Skip(f"batch {batch} > the bundle's max_batch {max_batch}")
    if max_seq and prompt + new - 1 > max_seq:
        raise Skip(f"prompt {prompt} + {new} new > the bundle's max_seq_len {max_seq}")


# ------------------------------------------------------------------------- correctness
def check_prompts(count: int, vocab: int, seed: int) -> list[list[int]]:
    """Prompts of different lengths (16, 77, 138, ...): a batch of them is right-padded."""
    return [gc.prompts(1, 16 + 61 * i, vocab, seed + 100 + i)[0] for i in range(count)]


def check(name, model, generator, bundle, args, facts) -> None:
    """aotpack's greedy ids (one batch of every check prompt when the bundle takes it, else one
    by one) against eager's, prompt by prompt."""
    if args.check_tokens < 1 or args.check_prompts < 1:
        return
    device = next(model.parameters()).device
    batch_prompts = check_prompts(args.check_prompts, models.SHAPES[name].vocab, args.seed)
    try:
        max_batch = facts["generation"].get("max_batch") or 1
        if len(batch_prompts) <= max_batch:
            got = gc.aotpack_generate(generator, batch_prompts, args.check_tokens)["tokens"]
        else:
            got = [gc.aotpack_generate(generator, [p], args.check_tokens)["tokens"][0]
                   for p in batch_prompts]
    except Exception as e:
        facts["checks"].append({"error": f"{type(e).__name__}: {str(e)[:300]}"})
        return
    for prompt, ids in zip(batch_prompts, got):
        ref = gc.hf_generate(model, torch.tensor([prompt], device=device), args.check_tokens,
                             **gc.EAGER)[0].tolist()
        report = gm.divergence_report(
            ref, ids, lambda i, p=prompt, r=ref: gc.reference_logits(model, p, r[:i]))
        report["prompt_len"] = len(prompt)
        facts["checks"].append(report)
        log(f"{name} check prompt {len(prompt)}: {report['verdict']} "
            f"(first divergence {report['first_divergence']})")


# ------------------------------------------------------------------------------- rows
def _add_rows(report, name, shape, contender, batch, prompt, args, result) -> None:
    facts = report.model(name)
    key = f"B{batch}_P{prompt}"
    cell = facts["cells"].setdefault(key, {})
    floor = None
    if report.doc.get("copy"):
        floor = gm.decode_floor(shape, batch, prompt, args.new, report.doc["copy"]["gbps"])
        if "floor" not in cell:
            cell["floor"] = floor
            report.row(model=name, B=batch, prompt=prompt, contender="floor",
                       step_ms=floor["floor_step_ms"],
                       tok_s=gm.tok_s(batch, floor["floor_step_ms"]), **{"floor%": 100.0})
    step = result.get("decode_step_ms")
    result["pct_of_floor"] = gm.pct_of_floor(floor["floor_step_ms"], step) if floor else None
    cell[contender] = result
    report.row(model=name, B=batch, prompt=prompt, contender=contender,
               ttft_ms=result.get("ttft_ms"), step_ms=step, tok_s=result.get("decode_tok_s"),
               note=result.get("note", ""), **{"floor%": result["pct_of_floor"]})


def _brief(result: dict) -> str:
    parts = [f"{k}={result[k]:.3g}" for k in ("ttft_ms", "decode_step_ms", "decode_tok_s",
                                               "pct_of_floor")
             if isinstance(result.get(k), (int, float))]
    return " ".join(parts + ([result["note"]] if result.get("note") else []))
