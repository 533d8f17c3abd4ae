"""The torch rows of the suite: per model ONE process measures eager, then torch.compile
default, then max-autotune (suite_worker_torch.task_torch), in the quiet phase.

Each variant is admitted against the budget in that order, keeping time for more important
work still to come (suite_schedule.Ledger): max-autotune of one model does not eat the eager
rows of the next. A variant refused only because of that reservation is retried at the end,
alone in a fresh process, if time is left then. A variant that crashes or times out fails its
own row; the variants after it go on in a fresh process.
"""
from __future__ import annotations

from pathlib import Path

from suite_schedule import ESTIMATE, PRIORITY
from suite_worker_torch import ORDER

CAP = {"eager": 120, "compile": 240, "compile-max-autotune": 360}
NOTES = {
    "eager": {"cold_start_note": "cold start: python + import torch + model built from its seed "
                                 "+ first forward + outputs to host (first thing its process "
                                 "computes)"},
    "compile": {"build_note": "build_s: first call after torch._dynamo.reset(), restarted "
                              "compile workers and an empty Inductor/Triton cache, in the "
                              "process that measured eager"},
}
NOTES["compile-max-autotune"] = NOTES["compile"]


class TorchSteps:
    def __init__(self, suite):
        self.s = suite
        self.later: list[tuple] = []  # (model, variant) refused for the reservation only
        self.cache_dirs: dict[tuple, str] = {}  # (model, variant) → its Inductor cache

    def key(self, m, variant: str) -> tuple:
        return ("torch", m.name, variant)

    def plan(self, models: list) -> None:
        for m in models:
            for v in ORDER:
                if self.s.pending(m.name, v):
                    self._add(m, v)

    def _priority(self, m, v: str) -> int:
        return PRIORITY["extra" if m.tier == "extra" else v]

    def _add(self, m, v: str) -> None:
        est = m.estimate(v) + (m.estimate("torch-start") if v == "eager" else 0)
        self.s.ledger.add(self.key(m, v), est, self._priority(m, v))

    def run(self, m, variants: tuple = ORDER) -> None:
        """The pending ones of `variants`, in one process per admitted run of them."""
        todo = [v for v in variants if self.s.pending(m.name, v) and v in self.s.variants]
        while todo:
            admitted = self._admit(m, todo)
            if not admitted:
                return
            todo = self._process(m, admitted)

    def _admit(self, m, todo: list) -> list:
        """The longest prefix of todo that fits; the refused rest is retried at the end (when
        refused for the reservation only) or skipped."""
        admitted: list = []
        for v in todo:  # again after a crash or a deferral: planned keys may be gone
            self._add(m, v)
        for i, v in enumerate(todo):
            keys = [self.key(m, x) for x in admitted + [v]]
            if not admitted and v != "eager":  # a process without eager: its start is paid too
                self.s.ledger.add(("torch-start",), m.estimate("torch-start"),
                                  self._priority(m, v))
                keys.append(("torch-start",))
            refused = self.s.ledger.refuse(keys)
            self.s.ledger.drop(("torch-start",))
            if refused:
                self._refused(m, todo[i:], refused)
                break
            admitted.append(v)
        for v in admitted:
            self.s.ledger.drop(self.key(m, v))
        return admitted

    def _refused(self, m, variants: list, why: str) -> None:
        for v in variants:
            self.s.why_not[(m.name, v, "")] = why
            if "kept for more important work" in why:
                self.later.append((m, v))
            else:
                self.s.ledger.drop(self.key(m, v))
                self.s.set_row(m.name, v, "", status="skipped", error=why)

    def _process(self, m, variants: list) -> list:
        """Runs one process; returns the variants still to run (after a crash)."""
        task = {"task": "torch", "variants": variants, "spec": m.spec, "device": self.s.device,
                "ref_path": self.s.ref_path(m.name), "inputs_path": self.s.inputs_path(m.name),
                "cache_root": str(self.s.work / "cache" / m.name), "reps": self.s.args.reps,
                "compare": self.s.compare.get(m.name) or {}}
        est = sum(m.estimate(v) for v in variants) + m.estimate("torch-start")
        # a variant that runs far over its estimate (max-autotune: 5-29 s) must not take the
        # time kept for the cold starts and AOTI runs after it: the process is stopped first
        # (the variants it finished keep their rows)
        keep = self.s.ledger.reserve(max(self._priority(m, v) for v in variants))
        res = self.s.task(f"{m.name}-torch-{'+'.join(variants)}", task, estimate=est,
                          cap_s=sum(CAP[v] for v in variants),
                          env=self.s.cache_env(f"{m.name}-torch"), keep_s=keep)
        if res.status == "timeout" and keep > 0:
            res.error = f"{res.error} (stopped so as to keep {keep:.0f} s for more important rows)"
        done = (res.result or {}).get("variants") or {}
        running = (res.result or {}).get("running")
        if not done and not running:  # died before any variant started (import, build)
            for v in variants:
                self.s.apply(m.name, v, "", res, **NOTES[v])
            return []
        for i, v in enumerate(variants):
            if v in done:
                self._row(m, v, done[v], res.wall_s)
            elif v == running:
                self.s.apply(m.name, v, "", res, **NOTES[v])  # the process died in this one
            else:
                return variants[i:]
        return []

    def _row(self, m, variant: str, one: dict, process_wall: float) -> None:
        if one.get("error"):
            return self.s.set_row(m.name, variant, "", status="error", error=one["error"],
                                  details={"traceback": one.get("traceback")})
        costs = one.pop("costs", None)
        if costs:
            self.s.results.doc["models"][m.name].update(costs)
        self._compared(m, one.pop("compared", None) or {})
        if one.get("cache_dir"):
            self.cache_dirs[(m.name, variant)] = one["cache_dir"]
        one["wall_s"] = one.pop("variant_s", None)
        one["details"] = {"process_wall_s": process_wall}
        self.s.apply_fields(m.name, variant, "", one, **NOTES[variant])

    def retry_later(self) -> None:
        """Variants refused only to keep time for what came after: alone, if time is left."""
        later, self.later = self.later, []
        for m, v in later:
            if self.s.pending(m.name, v):
                self.run(m, (v,))

    def warm_start(self, m, variant: str = "compile-max-autotune") -> None:
        """Fresh process on the Inductor cache this run's compile left: python + import torch +
        model build + torch.compile (cache hits) + first output."""
        cache = self.cache_dirs.get((m.name, variant))
        if not cache or self.s.results.row(m.name, variant)["status"] != "ok":
            return
        key = ("warm", m.name)
        self.s.ledger.add(key, ESTIMATE["warm"], PRIORITY["warm"])
        refused = self.s.ledger.refuse([key])
        self.s.ledger.drop(key)
        if refused:
            return self.s.set_row(m.name, variant, "",
                                  cold_start_note=f"warm-cache start not measured: {refused}")
        task = {"task": "torch-warm", "variant": variant, "spec": m.spec, "device": self.s.device,
                "inputs_path": self.s.inputs_path(m.name)}
        env = {"TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": str(Path(cache, "triton"))}
        res = self.s.task(f"{m.name}-{variant}-warm", task, estimate="warm", cap_s=180, env=env)
        self.s.set_row(m.name, variant, "", **(
            {"cold_start_s": res.result.get("cold_start_s"),
             "cold_start_note": "fresh process, warm Inductor cache: python + import torch + "
                                "model build + torch.compile + first forward"}
            if res.ok else {"cold_start_note": f"warm-cache start not measured: {res.error}"}))

    def ensure_reference(self, m) -> None:
        """When resuming on a fresh machine: eager's inputs/outputs for the rows still to
        measure, without measuring eager again."""
        todo = any(r["status"] == "pending" for r in self.s.results.rows if r["model"] == m.name)
        if todo and not self.s.pending(m.name, "eager") and not Path(self.s.ref_path(
                m.name)).is_file():
            res = self.s.task(f"{m.name}-reference", {
                "task": "torch", "variants": ["eager"], "spec": m.spec, "device": self.s.device,
                "ref_only": True, "ref_path": self.s.ref_path(m.name),
                "inputs_path": self.s.inputs_path(m.name),
                "compare": self.s.compare.get(m.name) or {}}, estimate="eager", cap_s=120)
            eager = ((res.result or {}).get("variants") or {}).get("eager") or {}
            self._compared(m, eager.get("compared") or {})

    def _compared(self, m, compared: dict) -> None:
        """Errors against eager of rows measured before it (their saved outputs)."""
        for key, err in compared.items():
            v, label = key.split("|", 1)
            self.s.set_row(m.name, v, label, rel_err_vs_eager=err)
