"""What `aotpack inspect` and `aotpack verify` print. Only the bundle is read: no torch."""
from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _sig(entries: list[dict]) -> list[str]:
    return [f"{e['name']}: {e['dtype']}{e['shape']}" for e in entries]


def inspect_document(b) -> dict:
    """Everything inspect shows, as plain JSON-able data."""
    m, summary = b.manifest, b.summary
    uses = Counter(s["kernel"] for s in m["steps"])
    kernels = [{"name": k["name"], "entry": k["entry"], "backend": k.get("backend"),
                "fused_ops": k.get("fused_ops", []), "config": k.get("config", {}),
                "block": k["block"], "cluster": k.get("cluster", [1, 1, 1]), "smem": k["smem"],
                "cubin": k["cubin"], "cubin_bytes": b.tensors[f"__aotpack__.cubin.{k['cubin']}"].nbytes,
                "steps": uses.get(i, 0)} for i, k in enumerate(m["kernels"])]
    cubins = {k["cubin"]: k["cubin_bytes"] for k in kernels}
    intermediates = summary.get("intermediate_bytes")
    return {
        "path": str(b.path), "file_bytes": b.path.stat().st_size,
        "format": m["format"], "version": m["version"], "target": m["target"],
        "inputs": m["inputs"], "outputs": m["outputs"],
        "graph": {"summary": summary.get("graph", {}), "kernel_ops": summary.get("ops")},
        "weights": {"count": len(m["weights"]), "bytes": sum(w["nbytes"] for w in m["weights"]),
                    "external": (m.get("external_weights") or {}).get("file"),
                    "external_found": b.weights_path is not None},
        "kernels": kernels, "steps": len(m["steps"]),
        "cubins": {"count": len(cubins), "bytes": sum(cubins.values())},
        "memory": {"arena_bytes": m["arena_bytes"], "intermediate_bytes": intermediates,
                   "naive_bytes": summary.get("naive_bytes"),
                   "regions": sum(1 for x in m["buffers"] if x["kind"] == "arena"),
                   "counters_bytes": m.get("counters_bytes", 0)},
        "provenance": m.get("provenance", {}),
        "dynamic": _dynamic(m, summary),
        "state": [dict(e, nbytes=_nbytes(e)) for e in m.get("state") or []],
        "generation": m.get("generation"),
    }


_DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "bool": 1, "u8": 1, "i8": 1}


def _nbytes(entry: dict) -> int:
    n = _DTYPE_BYTES.get(entry["dtype"], 1)
    for d in entry["shape"]:
        n *= int(d)
    return n


def _dynamic(m: dict, summary: dict) -> dict | None:
    """Symbols (range, example, where from), recorded guards, the kernel variants per bucket
    and the arena at the example shape; None for a static bundle."""
    if not m.get("symbols"):
        return None
    graph = summary.get("graph", {}) if isinstance(summary.get("graph"), dict) else {}
    sources = graph.get("dims", {})
    symbols = [dict(s, source=sources.get(s["name"])) for s in m["symbols"]]
    variants: dict[tuple, list] = {}
    for s in m["steps"]:
        for c in s.get("when") or []:
            key = (c["expr"], c["min"], c["max"])
            name = m["kernels"][s["kernel"]]["name"]
            if name not in variants.setdefault(key, []):
                variants[key].append(name)
    return {"symbols": symbols, "guards": graph.get("guards", []),
            "arena_bytes_example": summary.get("arena_bytes_example"),
            "variants": [{"size": k[0], "min": k[1], "max": k[2], "kernels": v}
                         for k, v in variants.items()]}


def _counts(counts) -> str:
    """{"linear": 2, "gelu": 1} → "gelu×1, linear×2"."""
    if not isinstance(counts, dict):
        return "?"
    return ", ".join(f"{k}×{v}" for k, v in sorted(counts.items()))


def _config(cfg: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(cfg.items()))


def print_inspect(out: Console, d: dict) -> None:
    t = d["target"]
    out.print(f"[bold]{escape(d['path'])}[/] — aotpack bundle v{d['version']}, "
              f"{human_bytes(d['file_bytes'])}, target {t['arch']} (cc {t['cc'][0]}.{t['cc'][1]}, "
              f"driver ≥ {t['min_driver']}, {t.get('sm_count')} SMs)")
    out.print("inputs:  " + escape(", ".join(_sig(d["inputs"]))))
    out.print("outputs: " + escape(", ".join(_sig(d["outputs"]))))
    g = d["graph"]
    summary = g["summary"] if isinstance(g["summary"], dict) else {}
    aten = summary.get("aten_ops")
    aten_part = ""
    if isinstance(aten, dict):  # (an ONNX model's are its nodes, counted as "onnx.<op>")
        onnx = bool(aten) and all(str(k).startswith("onnx.") for k in aten)
        aten_part = f"{sum(aten.values())} {'ONNX nodes' if onnx else 'aten calls'} → "
    kinds = summary.get("kernel_ops")
    kinds_part = f" ({_counts(kinds)})" if isinstance(kinds, dict) else ""
    out.print(f"graph: {aten_part}{summary.get('nodes', '?')} nodes "
              f"({escape(_counts(summary.get('ops')))}) → {g['kernel_ops']} kernel ops"
              f"{escape(kinds_part)} → {len(d['kernels'])} kernels, {d['steps']} steps")
    w = d["weights"]
    where = (f"external: {w['external']}" + ("" if w.get("external_found", True)
                                             else ", not found: not checked")
             if w["external"] else "embedded")
    out.print(f"weights: {w['count']} tensors, {human_bytes(w['bytes'])} ({escape(where)}); "
              f"cubins: {d['cubins']['count']}, {human_bytes(d['cubins']['bytes'])}")
    for table in _kernel_tables(d["kernels"], out.width):
        out.print(table)
    mem = d["memory"]
    naive = mem["naive_bytes"]
    saving = f" (no reuse would need {human_bytes(naive)})" if naive else ""
    regions = f"{mem['regions']} region" + ("" if mem["regions"] == 1 else "s")
    out.print(f"memory plan: arena {human_bytes(mem['arena_bytes'])} in {regions}{saving}; "
              f"intermediates total {human_bytes(mem['intermediate_bytes'] or 0)}")
    if mem.get("counters_bytes"):  # split kernels' last-CTA counters (docs/manifest.md)
        out.print(f"counters: {human_bytes(mem['counters_bytes'])} per session, zero at rest")
    if d.get("dynamic"):
        _print_dynamic(out, d["dynamic"], mem["arena_bytes"])
    if d.get("state"):
        total = sum(e["nbytes"] for e in d["state"])
        out.print(f"session state: {len(d['state'])} buffers, {human_bytes(total)} per session "
                  f"(allocated at session create, kept between runs; e.g. "
                  f"{escape(_sig(d['state'][:1])[0])})")
    gen = d.get("generation")
    if gen:
        out.print(f"text generation: batch up to {gen['max_batch']}, {gen['max_seq_len']} cache "
                  f"positions per sequence, vocabulary {gen['vocab_size']}, stop ids "
                  f"{gen.get('eos_ids', [])}: aotpack-run model.aotpack --generate N "
                  f"--prompt-ids ...")
    prec = d["provenance"].get("precision")
    if isinstance(prec, dict):  # --precision fp8-weights/fp8: what was quantized, the error it cost
        errors = ", ".join(f"{k} {v:.3g}" for k, v in (prec.get("rel_error") or {}).items()) \
            or "not measured (the build host could not hold a float32 copy)"
        kept = sum((prec.get("kept") or {}).values())
        acts = f"; activations {prec['activations']}" if prec.get("activations") else ""
        out.print(f"precision: {escape(str(prec.get('mode')))} — {prec.get('quantized_gemms')} "
                  f"GEMM weights in {escape(str(prec.get('weights')))}, scale "
                  f"{escape(str(prec.get('scale')))}{escape(acts)}"
                  + (f", {kept} GEMMs kept" if kept else "")
                  + f"; error vs float32 model (relative L2): {escape(errors)}"
                  + (f" (bound {prec['max_error']})" if prec.get("max_error") is not None else ""))
    prov = {k: v for k, v in d["provenance"].items() if k not in ("tuning", "precision")}
    out.print("provenance: " + escape(", ".join(f"{k}={v}" for k, v in sorted(prov.items())
                                               if v is not None)))
    records = (d["provenance"].get("tuning") or {}).get("records") or []
    if records:
        out.print(_tuning_table(records))


def _print_dynamic(out: Console, dyn: dict, arena: int) -> None:
    for s in dyn["symbols"]:
        src = f" (input {s['source']})" if s.get("source") else ""
        out.print(f"dynamic dim {escape(s['name'])}: {s['min']}..{s['max']}, example "
                  f"{s.get('example')}{escape(src)}")
    for g in dyn["guards"]:
        out.print(f"guard recorded by torch.export (holds over the ranges): {escape(g)}")
    if dyn.get("arena_bytes_example") is not None:
        out.print(f"arena: {human_bytes(arena)} planned for the largest shape; the example "
                  f"shape alone needs {human_bytes(dyn['arena_bytes_example'])}")
    table = Table(title="kernel variants per size bucket", show_lines=False)
    for col in ("size", "range", "kernels"):
        table.add_column(col, overflow="fold")
    for v in dyn["variants"]:
        table.add_row(escape(v["size"]), f"{v['min']}..{v['max']}", escape(", ".join(v["kernels"])))
    out.print(table)


def _tuning_table(records: list[dict]) -> Table:
    """The measured winners a --tuning-db build compiled (provenance.tuning.records)."""
    table = Table(title="tuned kernels (measured winners)", show_lines=False)
    for col in ("kernel op", "winner", "µs", "default µs", "measured on"):
        table.add_column(col)
    for r in records:
        base = r.get("baseline_us")
        table.add_row(escape(r.get("desc", "")), escape(r.get("winner", "")),
                      f"{r.get('median_us', 0):.1f}", f"{base:.1f}" if base else "—",
                      escape(f"{r.get('device')} (driver {r.get('driver')})"))
    return table


def _dims(d: list[int]) -> str:
    """128 for [128, 1, 1]; 2×2×1 otherwise."""
    return str(d[0]) if d[1:] == [1, 1] else "×".join(map(str, d))


# Below this terminal width the kernels table would squeeze its free-text columns to nothing
# (names and numbers are never split): they get a table of their own instead.
_WIDE_TERMINAL = 120


def _kernel_tables(kernels: list[dict], width: int) -> list[Table]:
    wide = width >= _WIDE_TERMINAL
    cols = ("name", "backend", *(("fused ops", "config") if wide else ()), "block", "smem",
            "cluster", "steps")
    table = Table(title="kernels", show_lines=False)
    for col in cols:  # names and numbers are never split; the free-text columns fold
        free = col in ("fused ops", "config")
        table.add_column(col, overflow="fold", no_wrap=not free, min_width=12 if free else None)
    for k in kernels:
        text = (escape(", ".join(k["fused_ops"])), escape(_config(k["config"])))
        table.add_row(escape(k["name"]), escape(str(k["backend"])), *(text if wide else ()),
                      _dims(k["block"]), human_bytes(k["smem"]), _dims(k["cluster"]),
                      str(k["steps"]))
    if wide:
        return [table]
    detail = Table(title="kernels: fused ops and config", show_lines=False)
    for col in ("name", "fused ops", "config"):
        detail.add_column(col, overflow="fold", no_wrap=col == "name")
    for k in kernels:
        detail.add_row(escape(k["name"]), escape(", ".join(k["fused_ops"])),
                       escape(_config(k["config"])))
    return [table, detail]


def print_verify(out: Console, rep) -> None:
    for w in rep.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    table = Table(title=f"verify against {rep.against} (bundle run: {rep.reference}, seed "
                        f"{rep.seed}, tolerance {rep.tolerance:g} on ‖out−ref‖/‖ref‖)")
    # the float32 column only where a 16-bit output failed against eager (it is measured
    # then only): without it the table fits 80 columns (a log, a pipe)
    upcast = any(o.rel_error_f32 is not None for o in rep.outputs)
    cols = ("output", "max |ref|", "rel. error", "max |out−ref|") + \
        (("vs f32 (eager vs f32)",) if upcast else ()) + ("result",)
    for col in cols:
        table.add_column(col)
    for o in rep.outputs:
        verdict = "[green]pass[/]" if o.ok else "[bold red]FAIL[/]"
        f32 = ("—" if o.rel_error_f32 is None else
               f"{o.rel_error_f32:.3e} ({o.eager_rel_error_f32:.3e})")
        size = "—" if o.ref_max_abs is None else f"{o.ref_max_abs:.3g}"
        table.add_row(escape(o.name), size, f"{o.rel_error:.3e}", f"{o.max_abs_error:.3e}",
                      *((f32,) if upcast else ()), verdict)
    out.print(table)
    if rep.reference == "cpu" and rep.float32:
        out.print("bundle run on the cpu: the plan with each kernel's torch reference, float32 "
                  "matmuls and convolutions exact (the GPU runs them on tf32 tensor cores: "
                  "~1e-3 there)")
    if upcast:
        from aotpack.verify import HP_MARGIN

        out.print("a 16-bit output over the tolerance against eager passes when it is at most "
                  f"{HP_MARGIN:g}x as far from the model upcast to float32 as eager itself is")
    out.print("[bold green]passed[/]" if rep.passed else "[bold red]failed[/]")
