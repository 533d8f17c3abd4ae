"""CPU-side checks of the CuTeDSL GEMM for the bug class that hung every non-default config on the
H200 (2026-11-30): pipeline state that is not carried across the persistent tile loop.

CuTeDSL turns a dynamic `while`/`for` into an scf loop whose carried values are the names the body
*assigns* or *calls a method on* (`DSLPreprocessor.analyze_region_variables`). A `PipelineState`
handed to a `@cute.jit` helper that advances it, and not reassigned from its return value, is not
carried: every iteration starts again from the state it had before the loop. The consumer's
(stage, phase) restarted at (0, 0) on every tile while the producer's kept running, so a CTA's
second tile waited on a barrier phase that never came -- unless k_tiles was a multiple of
2 * ab_stage (the default 128x256 config at K=4096 or 8192: 64 or 128 k-tiles, 4 stages), which is
why only the default config's multi-tile runs passed.

Two independent checks (tests/test_cutedsl_gemm.py runs both; cutedsl_gpucheck `write` runs the
PTX one on every cubin it packs):
 - `uncarried_state(cls)`: source level, with CuTeDSL's own loop analysis;
 - `constant_wait_parity(ptx)`: on the PTX, an mbarrier wait inside the tile loop whose phase is a
   constant set after the loop head (what the bug compiles to).
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap

# Calls whose result is mutable pipeline / scheduler state that must survive the tile loop.
_STATE_FACTORIES = ("make_pipeline_state", "StaticPersistentTileScheduler.create")


def uncarried_state(cls) -> list[str]:
    """For every method of `cls`: pipeline/scheduler state objects that a dynamic loop uses but
    that CuTeDSL would not carry through it. Empty when correct. Imports cutlass."""
    from cutlass.base_dsl.ast_preprocessor import DSLPreprocessor

    pre = DSLPreprocessor([])
    problems = []
    for name, fn in inspect.getmembers(cls):
        fn = getattr(fn, "__wrapped__", fn)
        if not inspect.isfunction(fn):
            continue
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        tree = ast.parse(src).body[0]
        if not isinstance(tree, ast.FunctionDef):
            continue
        state = _state_names(tree)
        if not state:
            continue
        defined = {a.arg for a in tree.args.args} | {
            n.id for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for loop in ast.walk(tree):
            if not _is_dynamic_loop(loop):
                continue
            used = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name)} & state
            carried, _, _ = pre.analyze_region_variables(loop, [defined], [set()])
            for v in sorted(used - set(carried)):
                line = loop.lineno + fn.__code__.co_firstlineno - 1
                problems.append(f"{cls.__name__}.{name}: `{v}` is used in the loop at line "
                                f"{line} but not carried (reassign it in the loop body)")
    return problems


def _state_names(fn: ast.FunctionDef) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = ast.unparse(node.value.func)
            if any(called.endswith(f) for f in _STATE_FACTORIES):
                for t in node.targets:
                    out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def _is_dynamic_loop(node: ast.AST) -> bool:
    if isinstance(node, ast.While):
        return True
    if isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
        return ast.unparse(node.iter.func) == "range"  # range_constexpr is unrolled in Python
    return False


_BRA = re.compile(r"^\s*(?:@%p\d+\s+)?bra(?:\.uni)?\s+(\$L__BB\d+_\d+);")
_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
_WAIT = re.compile(r"mbarrier\.try_wait\.parity\.shared\.b64\s+\w+,\s*\[[^\]]+\],\s*(%r\d+)")
_MOV = re.compile(r"^\s*mov\.b32\s+(%r\d+),\s*([^;]+);")
_DEF = re.compile(r"^\s*(?:@!?%p\d+\s+)?[a-z][\w.:]*\s+(%r\d+)\s*[,|]")


def constant_wait_parity(ptx: str) -> list[str]:
    """mbarrier waits of the PTX's persistent tile loops whose phase register is set to a
    constant between the loop head and the wait (a pipeline state restarted on every tile).
    Empty when correct. Each warp role (between `setmaxnreg` instructions) is scanned: its
    outermost loop is the backward branch reaching furthest up; the scan is linear (no control
    flow), which is enough for this kernel's straight-line loop preambles."""
    lines = ptx.splitlines()
    roles = [i for i, l in enumerate(lines) if "setmaxnreg." in l] + [len(lines)]
    problems = []
    for start, end in zip(roles, roles[1:]):
        labels = {}
        outer = None
        for i in range(start, end):
            m = _LABEL.match(lines[i])
            if m:
                labels[m.group(1)] = i
            b = _BRA.match(lines[i])
            if b and b.group(1) in labels:  # backward branch: a loop
                head = labels[b.group(1)]
                if outer is None or head < outer[0]:
                    outer = (head, i)
        if outer is None:
            continue
        const: set[str] = set()
        for i in range(outer[0], outer[1]):
            line = lines[i]
            w = _WAIT.search(line)
            if w and w.group(1) in const:
                problems.append(f"line {i + 1}: mbarrier wait phase {w.group(1)} is a constant "
                                f"set inside the tile loop (head at line {outer[0] + 1})")
            m = _MOV.match(line)
            if m:
                src = m.group(2).strip()
                if re.fullmatch(r"-?\d+|0[fFxX][0-9a-fA-F]+", src) or src in const:
                    const.add(m.group(1))
                else:
                    const.discard(m.group(1))
                continue
            d = _DEF.match(line)
            if d:
                const.discard(d.group(1))
    return problems
