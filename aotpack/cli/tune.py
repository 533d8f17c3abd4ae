"""`aotpack tune`: write a tuning job, or import measured results into a tuning database."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape


def write_job(out: Console, spec: str, output: Path, **kw) -> None:
    from aotpack.shared_steps import command_line_from_argv
    from aotpack.tuning.job import make_job

    s = make_job(spec, output, command_line=command_line_from_argv(), **kw)
    for desc in s.dropped:
        out.print(f"[yellow]warning:[/] {escape(desc)}: its default config did not compile; "
                  f"not tuned")
    if s.failed:
        out.print(f"[yellow]note:[/] {s.failed} candidate(s) did not compile (listed in "
                  f"job.json under compile_failures)")
    out.print(f"[bold green]wrote[/] {escape(str(s.path))}: {s.problems} kernel problems, "
              f"{s.candidates} candidates")
    out.print(f"measure it on the target GPU: aotpack-run --tune {escape(str(s.path))} "
              f"-o results.json")


def import_into_db(out: Console, err: Console, files: list[Path], db_path: Path) -> None:
    from aotpack.tuning.db import (FORMAT, TuningDB, check_results, combine_results,
                                   load_results)

    db = TuningDB.load(db_path)
    runs = []
    for f in files:
        doc = load_results(f)
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            n = db.merge(TuningDB.from_doc(doc, f))  # already read: not again
            out.print(f"merged {n} records from database {escape(str(f))}")
        else:
            check_results(doc, str(f))  # before combining, which would trip over its fields
            runs.append(doc)
    where = ", ".join(str(f) for f in files)
    for doc in combine_results(runs):  # partial re-runs of one machine add up
        added, notes = db.import_results(doc, where)
        for n in notes:
            err.print(f"[yellow]note:[/] {escape(n)}")
        out.print(f"imported {added} winners measured on "
                  f"{escape(str((doc.get('device') or {}).get('name')))}")
    db.save(db_path)
    out.print(f"[bold green]saved[/] {escape(str(db_path))}: {len(db.records)} records")
