"""Text generation in the runtime (docs/generation.md): the manifest's "state" and
"generation" sections judged alike by the Python reader (aotpack/bundle/schema_generation.py)
and the C loader, the ctypes mirrors of the new C structs, and aotpack.runtime.Generator on
the CMake build's fake driver (its `gen_step` kernel writes a KV-cache-like state in place and
hashes each sequence's history into its next id; `fake_next_ids` is the same on the host).

GPU test: a real generation bundle from env AOTPACK_GEN_BUNDLE.
"""
from __future__ import annotations

import copy
import ctypes
import inspect
import os
import shutil
import subprocess

import pytest
from test_runtime_binding import (FAKE_CUBIN, REPO, WEIGHT, _fake_driver, _fake_env,
                                  _lib_available, _run_py, _sha, manifest, write_bundle)

from aotpack.bundle import manifest as mf
from aotpack.bundle.stfile import BundleError

VOCAB = 32


def gen_manifest() -> dict:
    """runtime_cpp's TestBundle::generation(): B in 1..4, S in 1..16; input_ids, positions
    i64 [B, S], last_index i64 [B] -> next_ids i64 [B], logits f32 [B, 32]; state cache.k.0
    i64 [4, 16]; one step of the fake driver's gen_step kernel."""
    ptrs = [{"kind": "ptr", "buffer": i} for i in range(6)]
    scalars = [{"kind": "i64", "value": v} for v in ("B", "S", VOCAB, 16)]
    return {
        "format": "aotpack", "version": 2,
        "symbols": [{"name": "B", "min": 1, "max": 4, "example": 1},
                    {"name": "S", "min": 1, "max": 16, "example": 8}],
        "target": {"arch": "sm_90a", "cc": [9, 0], "min_driver": 12000, "sm_count": 132},
        "inputs": [{"name": "input_ids", "dtype": "i64", "shape": ["B", "S"]},
                   {"name": "positions", "dtype": "i64", "shape": ["B", "S"]},
                   {"name": "last_index", "dtype": "i64", "shape": ["B"]}],
        "outputs": [{"name": "next_ids", "dtype": "i64", "shape": ["B"]},
                    {"name": "logits", "dtype": "f32", "shape": ["B", VOCAB]}],
        "weights": [{"name": "w", "dtype": "f32", "shape": [64], "nbytes": 256,
                     "sha256": _sha(WEIGHT)}],
        "external_weights": None, "arena_bytes": 0,
        "buffers": [{"kind": "input", "index": 0}, {"kind": "input", "index": 1},
                    {"kind": "input", "index": 2}, {"kind": "output", "index": 0},
                    {"kind": "output", "index": 1}, {"kind": "state", "index": 0}],
        "kernels": [{"name": "gen_step", "entry": "gen_step", "cubin": 0,
                     "cubin_sha256": _sha(FAKE_CUBIN), "block": [128, 1, 1],
                     "cluster": [1, 1, 1], "smem": 0, "backend": "test"}],
        "steps": [{"kernel": 0, "grid": ["B", 1, 1], "args": ptrs + scalars}],
        "state": [{"name": "cache.k.0", "dtype": "i64", "shape": [4, 16]}],
        "generation": {"max_batch": 4, "max_seq_len": 16, "vocab_size": VOCAB, "input_ids": 0,
                       "positions": 1, "last_index": 2, "next_ids": 0, "logits": 1,
                       "eos_ids": []},
        "provenance": {"aotpack": "0.2.0", "created_by": "tests/test_generation_runtime.py"},
    }


def fake_next_ids(prompt: list[int], n: int, vocab: int = VOCAB) -> list[int]:
    """What the fake gen_step generates greedily after `prompt`."""
    seq, out = list(prompt), []
    for _ in range(n):
        h = 0
        for t in seq:
            h = (h * 1000003 + t + 1) & (2**64 - 1)
        h ^= h >> 29
        out.append(h % vocab)
        seq.append(out[-1])
    return out


def test_fake_next_ids_matches_the_cli_test():
    # runtime_cpp/tests/CMakeLists.txt cli.fake_gen_greedy expects these exact ids.
    assert fake_next_ids([5, 9, 2, 7, 1], 5) == [22, 10, 24, 12, 2]
    assert fake_next_ids([3], 5) == [4, 17, 31, 10, 24]


# ------------------------------------------------------------------- one verdict (schema)

def _set(path: str, value):
    """A change of gen_manifest(): the JSON path ("generation.max_batch", "state.0.shape.1")
    set to value (None deletes it)."""
    def change(m):
        *parents, last = path.split(".")
        obj = m
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        if value is None:
            del obj[last]
        elif isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
    return change


def _append(path: str, value):
    def change(m):
        m[path].append(copy.deepcopy(value))
    return change


CASES = [
    ("valid", lambda m: None, None),
    ("state_symbolic_dim", _set("state.0.shape.1", "S"), "state[0].shape[1]: 'S': a state"),
    ("state_zero_dim", _set("state.0.shape.0", 0), "state[0].shape[0]: value 0 is outside [1,"),
    ("state_dtype", _set("state.0.dtype", "f8"), "state[0].dtype: unknown dtype 'f8'"),
    ("state_key", _set("state.0.shpe", 1), "unknown field 'shpe' (did you mean 'shape'?"),
    ("state_huge", _set("state.0.shape", [1 << 20, 1 << 20, 1 << 10]), "1024 GiB"),
    ("state_dup", _append("state", {"name": "cache.k.0", "dtype": "i64", "shape": [4]}),
     "duplicate name 'cache.k.0'"),
    ("state_not_list", _set("state", 3), "state: expected an array"),
    ("state_index", _set("buffers.5.index", 3), "state index 3 out of range"),
    ("gen_missing", _set("generation.vocab_size", None), "missing field 'vocab_size'"),
    ("gen_key", _set("generation.max_batches", 4), "unknown field 'max_batches'"),
    ("gen_input_index", _set("generation.input_ids", 5),
     "input_ids = 5 is out of range (the model has 3 inputs)"),
    ("gen_same_inputs", _set("generation.positions", 0), "three different inputs"),
    ("gen_same_outputs", _set("generation.next_ids", 1), "two different outputs"),
    ("gen_max_batch", _set("generation.max_batch", 8), "max_batch is 8 but symbol 'B'"),
    ("gen_max_seq_len", _set("generation.max_seq_len", 32), "max_seq_len is 32 but symbol 'S'"),
    ("gen_vocab", _set("generation.vocab_size", 64),
     "logits 'logits' dim 1 is '32' but must be vocab_size = 64"),
    ("gen_eos", _set("generation.eos_ids", [2, 32]), "generation.eos_ids[1]"),
    ("gen_logits_dtype", _set("outputs.1.dtype", "bf16"),
     "logits is 'logits' (bf16, rank 2) but must be f32 [B, vocab_size]"),
    ("gen_positions_dim", _set("inputs.1.shape.1", "B"),
     "positions 'positions' dim 1 is 'B' but must be the symbol 'S'"),
    ("gen_fixed_length", _set("inputs.0.shape.1", 16),
     "input_ids 'input_ids' dim 1 (the sequence length) is '16' but must be a symbol"),
    ("gen_symbol_min", _set("symbols.1.min", 2), "ranges 2..16"),
    ("gen_extra_input", _append("inputs", {"name": "extra", "dtype": "f32", "shape": ["B"]}),
     "the step has 4 inputs"),
]


@pytest.mark.parametrize("name, change, needle", CASES, ids=[c[0] for c in CASES])
def test_schema_one_verdict(tmp_path, name, change, needle):
    """The Python check and the C loader accept and refuse the same manifests, for the same
    reason (the C side only where libaotpack.so is built)."""
    m = gen_manifest()
    change(m)
    if needle is None:
        mf.check(m)
    else:
        with pytest.raises(BundleError, match=None) as e:
            mf.check(m)
        assert needle in str(e.value)
    if not _lib_available():
        return
    from aotpack.runtime import AotpackError, Model
    from aotpack.runtime._lib import has_generation, load_library
    if not has_generation(load_library()):
        pytest.skip("this libaotpack.so predates text generation: rebuild it")
    path = write_bundle(tmp_path, m)
    if needle is None:
        Model.check_file(path)
        return
    with pytest.raises(AotpackError) as e:
        Model.check_file(path)
    assert e.value.code.name == "CORRUPT_BUNDLE" and needle in e.value.message


def test_state_without_generation_reads_in_v1():
    """A state list and buffer of kind state are not tied to generation nor to format v2."""
    m = manifest()
    m["state"] = [{"name": "counter", "dtype": "i32", "shape": [3]}]
    m["buffers"].append({"kind": "state", "index": 0})
    mf.check(m)


# ------------------------------------------------------------------------ C structs (ctypes)

@pytest.mark.skipif(not _lib_available(), reason="libaotpack.so not built")
def test_generation_structs_match_header(tmp_path):
    from aotpack.runtime import _lib

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's layout")
    structs = {"aotpack_generation_info": _lib.GenerationInfoC,
               "aotpack_generate_options": _lib.GenerateOptionsC,
               "aotpack_generate_stats": _lib.GenerateStatsC}
    lines = []
    for cname, ct in structs.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        lines += [f'printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));' for f, _ in ct._fields_]
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "aotpack/aotpack.h"\n'
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", f"-I{REPO / 'runtime_cpp' / 'include'}", str(src), "-o",
                    str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    want = []
    for cname, ct in structs.items():
        want.append(f"{cname} size {ctypes.sizeof(ct)}")
        want += [f"{cname} {f} {getattr(ct, f).offset}" for f, _ in ct._fields_]
    assert got.split("\n")[:-1] == want


# --------------------------------------------------------------- Generator (fake driver)

def _run_fake(tmp_path, body: str):
    path = write_bundle(tmp_path, gen_manifest())
    plain = tmp_path / "plain"
    plain.mkdir()
    plain_path = write_bundle(plain, manifest())
    code = f"""
from aotpack.runtime import AotpackError, Generator, GenerateResult
path, plain_path = {str(path)!r}, {str(plain_path)!r}
VOCAB = {VOCAB}
{inspect.getsource(fake_next_ids)}def refused(needle, fn):
    try:
        fn()
    except AotpackError as e:
        assert e.code.name == "INVALID_ARGUMENT" and needle in e.message, (needle, str(e))
        return
    raise SystemExit("not refused: " + needle)
{body}
print("ok")
"""
    r = _run_py(code, **_fake_env())
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


needs_fake = pytest.mark.skipif(_fake_driver() is None, reason="fake driver not built (CMake tests)")


@needs_fake
def test_generator_on_fake_driver(tmp_path):
    _run_fake(tmp_path, """
g = Generator(path)
assert (g.max_batch, g.max_seq_len, g.vocab_size, g.eos_ids) == (4, 16, 32, [])
assert g.state_bytes == 512
prompts = [[5, 9, 2, 7, 1], [3], [8, 8, 30]]
r = g.generate(prompts, 6)
assert isinstance(r, GenerateResult) and r.decode_steps == 5 and not r.stopped_by_callback
for p, toks in zip(prompts, r.tokens):
    assert toks == fake_next_ids(p, 6), (p, toks)
    assert g.generate([p], 6).tokens[0] == toks  # alone = in a batch of other lengths
assert r.ttft_ms >= 0 and r.decode_ms >= 0 and r.decode_tokens_per_s >= 0
import numpy
assert g.generate([numpy.array([5, 9, 2, 7, 1])], 2).tokens[0] == fake_next_ids(prompts[0], 2)
# top_k 1 samples the argmax; a seed reproduces its draws
assert g.generate(prompts, 6, temperature=0.9, top_k=1).tokens == r.tokens
a = g.generate(prompts, 8, temperature=3.0, seed=4)
assert a.tokens == g.generate(prompts, 8, temperature=3.0, seed=4).tokens
assert any(g.generate(prompts, 8, temperature=3.0, seed=s).tokens != a.tokens for s in range(5, 12))
assert all(0 <= t < 32 for seq in a.tokens for t in seq)
# stop ids end a sequence (the stop id included)
full = fake_next_ids([6, 1], 8)
assert g.generate([[6, 1]], 8, stop_ids=[full[2]]).tokens[0] == full[:full.index(full[2]) + 1]
# streaming: every token in order; a true return stops
seen = []
r = g.generate([[6, 1], [6, 1]], 8, on_token=lambda s, t, k: seen.append((s, t, k)) or len(seen) >= 5)
assert seen[:4] == [(0, full[0], 0), (1, full[0], 0), (0, full[1], 1), (1, full[1], 1)]
assert r.stopped_by_callback and [len(t) for t in r.tokens] == [3, 2]
def boom(s, t, k):
    raise KeyError("from the callback")
try:
    g.generate([[6, 1]], 4, on_token=boom)
    raise SystemExit("the callback's error was lost")
except KeyError as e:
    assert "from the callback" in str(e)
g.reset_state()
assert g.generate([[6, 1]], 8).tokens[0] == full
""")


@needs_fake
def test_generator_argument_errors(tmp_path):
    _run_fake(tmp_path, """
g = Generator(path)
refused("batch is 0", lambda: g.generate([], 4))
refused("batch is 5", lambda: g.generate([[1]] * 5, 4))
refused("sequence 1 has an empty prompt", lambda: g.generate([[1], []], 4))
refused("sequence 0 token 1 is id 32, outside the vocabulary [0, 32)", lambda: g.generate([[1, 32]], 4))
refused("sequence 0 token 0 is id -1", lambda: g.generate([[-1]], 4))
refused("prompt length 12 + max_new_tokens 6 - 1 = 17 exceeds max_seq_len = 16",
        lambda: g.generate([[1] * 12], 6))
refused("max_new_tokens is 0", lambda: g.generate([[1]], 0))
refused("max_new_tokens is True", lambda: g.generate([[1]], True))
refused("prompts must be a list", lambda: g.generate("1,2,3", 4))
refused("prompts[0] must be a list of token ids", lambda: g.generate([5], 4))
refused("prompts[0][1] is 1.5", lambda: g.generate([[1, 1.5]], 4))
refused("temperature is -1", lambda: g.generate([[1]], 4, temperature=-1))
refused("temperature is 'hot'", lambda: g.generate([[1]], 4, temperature="hot"))
refused("top_p is 1.5", lambda: g.generate([[1]], 4, temperature=1, top_p=1.5))
refused("top_p is 0", lambda: g.generate([[1]], 4, temperature=1, top_p=0))
refused("top_k is -2", lambda: g.generate([[1]], 4, top_k=-2))
refused("stop_ids[0] is 40", lambda: g.generate([[1]], 4, stop_ids=[40]))
refused("seed is -1", lambda: g.generate([[1]], 4, seed=-1))
assert g.generate([[1]], 3).tokens == [fake_next_ids([1], 3)]  # still usable
refused("not a text-generation bundle", lambda: Generator(plain_path))
""")


# ----------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_generate_on_gpu():
    """A real generation bundle (aotpack build --task text-generation) from AOTPACK_GEN_BUNDLE:
    tokens in range, greedy deterministic, and a batch of different lengths gives each
    sequence the tokens it gets alone."""
    bundle = os.environ.get("AOTPACK_GEN_BUNDLE")
    if not bundle:
        pytest.skip("set AOTPACK_GEN_BUNDLE to a generation bundle (model.aotpack)")
    from aotpack.runtime import Generator

    g = Generator(bundle)
    n = min(16, g.max_seq_len // 2)
    prompts = [[(7 * i + 3 * j + 1) % g.vocab_size for j in range(length)]
               for i, length in enumerate([n // 2 + 3, 1, n // 2][:g.max_batch])]
    r = g.generate(prompts, n, ignore_eos=True)
    assert [len(t) for t in r.tokens] == [n] * len(prompts)
    assert all(0 <= t < g.vocab_size for seq in r.tokens for t in seq)
    assert g.generate(prompts, n, ignore_eos=True).tokens == r.tokens  # greedy: deterministic
    for p, toks in zip(prompts, r.tokens):
        assert g.generate([p], n, ignore_eos=True).tokens[0] == toks
    s = g.generate(prompts, n, temperature=0.8, top_k=50, top_p=0.9, seed=1, ignore_eos=True)
    assert s.tokens == g.generate(prompts, n, temperature=0.8, top_k=50, top_p=0.9, seed=1,
                                  ignore_eos=True).tokens
    assert r.ttft_ms > 0 and r.decode_tokens_per_s > 0
