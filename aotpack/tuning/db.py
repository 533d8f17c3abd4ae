"""The tuning database: measured winners keyed as docs/tuning.md says, in one JSON file.

    {"format": "aotpack-tuning-db", "version": 1, "records": [
       {"key", "shape_key", "desc", "device": {"name", "sm_count", "cc", "driver"},
        "winner": {"name", "config", "median_us"[, "toolchain"]},
        "baseline": {"name", "median_us"},
        "measured": <candidates timed>, "job_id", "runtime"}, ...]}

One record per (key, device name, driver): re-measuring replaces it, results of other
machines are kept side by side (merge = union, newest import wins on a tie). A winner
compiled by a backend whose compiler the key leaves out (CuTeDSL) records its version
(`toolchain`, from the job's problem info). The file is
written sorted, so the same records give the same bytes. A build looks a canonical op up by
key; among records of several drivers it takes the newest driver's.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aotpack.errors import UserError

FORMAT, VERSION = "aotpack-tuning-db", 1
RESULTS_FORMAT = "aotpack-tuning-results"


class TuningDBError(UserError, ValueError):
    """A database or results file that cannot be used (the message says which and why)."""

    named = False  # the message says what kind it is


def _identity(rec: dict) -> tuple:
    d = rec["device"]
    return (rec["key"], d.get("name", ""), int(d.get("driver", 0)))


@dataclass
class TuningDB:
    records: dict[tuple, dict] = field(default_factory=dict)

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, path) -> "TuningDB":
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise TuningDBError(f"{path}: not a readable JSON tuning database ({e})") from None
        return cls.from_doc(doc, path)

    @classmethod
    def from_doc(cls, doc, path) -> "TuningDB":
        """The database in `doc` (parsed JSON read from `path`, named in errors)."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise TuningDBError(f"{path}: not an aotpack tuning database (format "
                                f"{doc.get('format') if isinstance(doc, dict) else None!r})")
        if doc.get("version") != VERSION:
            raise TuningDBError(f"{path}: database version {doc.get('version')} but this "
                                f"aotpack reads version {VERSION}")
        db = cls()
        for i, rec in enumerate(doc.get("records", [])):
            try:
                db.records[_identity(rec)] = rec
            except (KeyError, TypeError, ValueError, AttributeError):  # hand-edited, torn
                raise TuningDBError(f"{path}: records[{i}] lacks a key or a device") from None
        return db

    def save(self, path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "version": VERSION,
               "records": [self.records[k] for k in sorted(self.records)]}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared database from others
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ updates
    def merge(self, other: "TuningDB") -> int:
        self.records.update(other.records)
        return len(other.records)

    def import_results(self, results: dict, where: str = "results") -> tuple[int, list[str]]:
        """Add one record per problem that has a measured winner. Returns (records added,
        notes on problems without one)."""
        check_results(results, where)
        device = results.get("device") or {}
        added, notes = 0, []
        for prob in results.get("problems", []):
            rec = _record(prob, device, results)
            if rec is None:
                notes.append(f"{prob.get('desc', prob.get('key'))}: no candidate passed")
                continue
            self.records[_identity(rec)] = _keep_unmeasured_winner(
                self.records.get(_identity(rec)), rec, prob)
            added += 1
        return added, notes

    # ------------------------------------------------------------------ lookup
    def lookup(self, key: str) -> dict | None:
        """The record of `key` (newest driver first), or None."""
        hits = [r for (k, _, _), r in self.records.items() if k == key]
        return max(hits, key=lambda r: int(r["device"].get("driver", 0))) if hits else None

    def shape_keys(self) -> set[str]:
        return {r.get("shape_key") for r in self.records.values() if r.get("shape_key")}


def _keep_unmeasured_winner(old: dict | None, new: dict, prob: dict) -> dict:
    """Re-measuring on the same machine replaces its record, except when this run did not
    measure the old winner at all (a partial re-run, e.g. of what failed before): then the
    faster of the two winners stays, so a separate import of a re-run never loses a result."""
    if old is None:
        return new
    measured = {c["name"] for c in prob.get("candidates", []) if c.get("status") != "skipped"}
    if old["winner"]["name"] in measured or old["winner"]["median_us"] > new["winner"]["median_us"]:
        return new
    return dict(new, winner=old["winner"], job_id=old.get("job_id"))


def _record(prob: dict, device: dict, results: dict) -> dict | None:
    ok = [c for c in prob.get("candidates", [])
          if c.get("status") == "ok" and c.get("median_us") is not None]
    if not ok:
        return None
    best = min(ok, key=lambda c: (c["median_us"], c["name"]))
    base = prob["candidates"][0]  # the heuristic (`ok` is not empty, so neither is this)
    compilers = ((prob.get("info") or {}).get("toolchain") or {}).get(
        best["config"].get("template"))
    return {
        "key": prob["key"], "shape_key": (prob.get("info") or {}).get("shape_key"),
        "desc": prob.get("desc", ""),
        "device": {"name": device.get("name", ""), "sm_count": device.get("sm_count"),
                   "cc": device.get("cc"), "driver": int(device.get("driver") or 0)},
        "winner": {"name": best["name"], "config": best["config"],
                   "median_us": best["median_us"],
                   **({"toolchain": compilers} if compilers else {})},
        "baseline": {"name": base.get("name"), "median_us": base.get("median_us")},
        "measured": len(ok), "job_id": results.get("job_id"), "runtime": results.get("runtime"),
    }


def check_results(results, where: str = "results") -> None:
    """Raise TuningDBError unless `results` has the shape of an `aotpack-run --tune` results
    file (docs/tuning.md): checked before combining, which indexes problems and candidates."""
    if not isinstance(results, dict) or results.get("format") != RESULTS_FORMAT:
        raise TuningDBError(f"{where}: not an aotpack-run --tune results file")
    if results.get("version") != 1:
        raise TuningDBError(f"{where}: results version {results.get('version')} unknown")
    probs = results.get("problems")
    ok = isinstance(probs, list) and isinstance(results.get("device") or {}, dict)
    for p in probs if ok else []:
        ok = (isinstance(p, dict) and isinstance(p.get("key"), str)
              and isinstance(p.get("candidates"), list)
              and all(isinstance(c, dict) and isinstance(c.get("name"), str)
                      and (c.get("status") != "ok" or isinstance(c.get("config"), dict))
                      for c in p["candidates"]))
        if not ok:
            break
    if not ok:
        raise TuningDBError(f"{where}: malformed results (every problem needs a key and a list "
                            f"of named candidates, every ok candidate a config)")


def combine_results(docs: list[dict]) -> list[dict]:
    """Results of several runs of one machine (same device name and driver) combined per
    problem: candidates by name, a later measurement replacing an earlier one unless it was
    `skipped`. So a partial re-run (e.g. of the candidates that failed) adds to a full run
    instead of replacing its record. Runs of other machines stay separate documents."""
    groups: dict[tuple, dict] = {}
    for doc in docs:
        dev = doc.get("device") or {}
        ident = (dev.get("name"), dev.get("driver"))
        merged = groups.setdefault(ident, dict(doc, problems=[]))
        by_key = {p["key"]: p for p in merged["problems"]}
        for prob in doc.get("problems", []):
            have = by_key.get(prob["key"])
            if have is None:
                have = dict(prob, candidates=[])
                merged["problems"].append(have)
                by_key[prob["key"]] = have
            names = {c["name"]: i for i, c in enumerate(have["candidates"])}
            for c in prob.get("candidates", []):
                i = names.get(c["name"])
                if i is None:
                    names[c["name"]] = len(have["candidates"])
                    have["candidates"].append(c)
                elif c.get("status") != "skipped":
                    have["candidates"][i] = c
    return list(groups.values())


def load_results(path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TuningDBError(f"{path}: cannot read results ({e})") from None
