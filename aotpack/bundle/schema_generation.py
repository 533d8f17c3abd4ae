"""The manifest's "state" list and "generation" section (docs/generation.md), checked with the
C runtime's rules and messages (runtime_cpp/src/manifest_generation.cpp), so the Python reader
and the runtime give one verdict on a generation bundle. Keys are checked by schema.py.
"""
from __future__ import annotations

from aotpack.bundle.schema import bad

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
               "u8": 1, "bool": 1}
MAX_RANK = 8
MAX_STATE_BYTES = 1 << 40  # more is a corrupt manifest, not a model
MAX_I32 = (1 << 31) - 1


def _is_int(v) -> bool:
    return type(v) is int


def _state_entry_bytes(e: dict, i: int) -> int:
    where = f"state[{i}]"
    name = e.get("name")
    if not isinstance(name, str):
        raise bad(where + ".name", "expected a string")
    if not name:
        raise bad(where + ".name", "empty name")
    dtype = e.get("dtype")
    if dtype not in DTYPE_BYTES:
        raise bad(where + ".dtype", f"unknown dtype '{dtype}' (known: bf16 f16 f32 f64 i8 i16 "
                                    f"i32 i64 u8 bool)")
    shape = e.get("shape")
    if not isinstance(shape, list):
        raise bad(where + ".shape", "expected an array")
    if len(shape) > MAX_RANK:
        raise bad(where + ".shape", f"rank {len(shape)} exceeds {MAX_RANK}")
    n = DTYPE_BYTES[dtype]
    for k, d in enumerate(shape):
        if isinstance(d, str):
            raise bad(f"{where}.shape[{k}]", f"'{d}': a state buffer's shape is static (it is "
                                             f"allocated once per session, at its full size): "
                                             f"integers >= 1 only")
        if not _is_int(d) or d < 1 or d >= 1 << 63:
            raise bad(f"{where}.shape[{k}]", f"value {d} is outside [1, {(1 << 63) - 1}]")
        n *= d
    return n


def state_sizes(m: dict) -> list[int]:
    """Bytes of each state buffer; BundleError as the runtime refuses the list."""
    state = m.get("state")
    if state is None:
        return []
    if not isinstance(state, list):
        raise bad("state", "expected an array")
    sizes = [_state_entry_bytes(e, i) for i, e in enumerate(state)]
    names, total = set(), 0
    for i, (e, n) in enumerate(zip(state, sizes)):
        if e["name"] in names:
            raise bad("state", f"duplicate name '{e['name']}'")
        names.add(e["name"])
        total += -(-n // 256) * 256
        if n > MAX_STATE_BYTES or total > MAX_STATE_BYTES:
            raise bad(f"state[{i}] '{e['name']}'", f"the state buffers need more than "
                                                   f"{MAX_STATE_BYTES >> 30} GiB in all: the "
                                                   f"manifest is corrupt; rebuild the bundle")
    return sizes


def _symbol(d, symbols: dict) -> str | None:
    """The symbol a dim is exactly ("S", " S ", "(S)"), else None."""
    if not isinstance(d, str):
        return None
    t = d.replace(" ", "")
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1]
    return t if t in symbols else None


def _gen_int(g: dict, key: str, lo: int, hi: int) -> int:
    if key not in g:
        raise bad("generation", f"missing field '{key}'")
    v = g[key]
    if not _is_int(v):
        raise bad(f"generation.{key}", f"expected an integer, got {v!r}")
    if v < lo or v > hi:
        raise bad(f"generation.{key}", f"value {v} is outside [{lo}, {hi}]")
    return v


def _gen_bad(msg: str):
    return bad("generation", msg)


def check_generation(m: dict) -> None:
    """The "generation" section against the inputs, outputs and symbols (docs/generation.md)."""
    g = m.get("generation")
    if g is None:
        return
    lim = {k: _gen_int(g, k, 1, MAX_I32) for k in ("max_batch", "max_seq_len", "vocab_size")}
    idx = {k: _gen_int(g, k, 0, (1 << 32) - 1)
           for k in ("input_ids", "positions", "last_index", "next_ids", "logits")}
    eos = g.get("eos_ids")
    if eos is not None and not isinstance(eos, list):
        raise bad("generation.eos_ids", "expected an array")
    for i, e in enumerate(eos or []):
        if not _is_int(e) or not 0 <= e < lim["vocab_size"]:
            raise bad(f"generation.eos_ids[{i}]",
                      f"value {e} is outside [0, {lim['vocab_size'] - 1}]")
    ins, outs = m.get("inputs") or [], m.get("outputs") or []
    for key, table, kind in (("input_ids", ins, "input"), ("positions", ins, "input"),
                             ("last_index", ins, "input"), ("next_ids", outs, "output"),
                             ("logits", outs, "output")):
        if idx[key] >= len(table):
            raise _gen_bad(f"{key} = {idx[key]} is out of range (the model has {len(table)} "
                           f"{kind}s)")
    if len({idx["input_ids"], idx["positions"], idx["last_index"]}) < 3:
        raise _gen_bad("input_ids, positions and last_index must name three different inputs")
    if idx["next_ids"] == idx["logits"]:
        raise _gen_bad("next_ids and logits must name two different outputs")
    if len(ins) != 3:
        raise _gen_bad(f"the step has {len(ins)} inputs; a generation step takes exactly "
                       f"input_ids, positions and last_index (the token loop feeds nothing else)")
    t = {k: (ins if k in ("input_ids", "positions", "last_index") else outs)[i]
         for k, i in idx.items()}
    for key, dtype, rank, shape in (("input_ids", "i64", 2, "[B, S]"),
                                    ("positions", "i64", 2, "[B, S]"),
                                    ("last_index", "i64", 1, "[B]"), ("next_ids", "i64", 1, "[B]"),
                                    ("logits", "f32", 2, "[B, vocab_size]")):
        e = t[key]
        if e.get("dtype") != dtype or len(e.get("shape", [])) != rank:
            raise _gen_bad(f"{key} is '{e.get('name')}' ({e.get('dtype')}, rank "
                           f"{len(e.get('shape', []))}) but must be {dtype} {shape}")
    _check_generation_dims(m, t, lim)


def _check_generation_dims(m: dict, t: dict, lim: dict) -> None:
    symbols = {s.get("name"): s for s in m.get("symbols") or [] if isinstance(s, dict)}
    ids = t["input_ids"]
    found = []
    for k, field, role in ((0, "max_batch", "batch"), (1, "max_seq_len", "sequence length")):
        d = ids["shape"][k]
        name = _symbol(d, symbols)
        if name is None:
            raise _gen_bad(f"input_ids '{ids['name']}' dim {k} (the {role}) is '{d}' but must "
                           f"be a symbol: prefill and decode run it at different sizes (bundle "
                           f"format v2)")
        s = symbols[name]
        if s.get("min") != 1 or s.get("max") != lim[field]:
            raise _gen_bad(f"{field} is {lim[field]} but symbol '{name}' (input_ids dim {k}, "
                           f"the {role}) ranges {s.get('min')}..{s.get('max')}: it must range "
                           f"1..{field}")
        found.append(name)
    b, s = found
    if b == s:
        raise _gen_bad("input_ids' two dims are the same symbol: batch and length must differ")
    for key, k, want in (("positions", 0, b), ("positions", 1, s), ("last_index", 0, b),
                         ("next_ids", 0, b), ("logits", 0, b)):
        d = t[key]["shape"][k]
        if _symbol(d, symbols) != want:
            raise _gen_bad(f"{key} '{t[key]['name']}' dim {k} is '{d}' but must be the symbol "
                           f"'{want}' (as input_ids' dim says)")
    v = t["logits"]["shape"][1]
    if v != lim["vocab_size"] or not _is_int(v):
        raise _gen_bad(f"logits '{t['logits']['name']}' dim 1 is '{v}' but must be vocab_size = "
                       f"{lim['vocab_size']}")
