"""Dynamic shapes on the CPU: models exported with dynamic dims compile to one symbolic program
whose kernel references match eager PyTorch at every shape of the ranges; every kernel
template's symbolic launch, evaluated at a shape the way the runtime evaluates the bundle's
expressions, matches its reference under Triton's interpreter; a dynamic bundle is a checked
v2 manifest in which exactly one variant of each op runs at any shape; shapes the program
cannot run are refused with the input, dim, value and range named."""
import random
import sys
from pathlib import Path

import pytest
import torch

from aotpack.executor import run_reference
from aotpack.frontend import UnsupportedOpError, to_graph
from aotpack.frontend.dynamic import apply_dynamic
from aotpack.frontend.load import LoadedModel
from aotpack.ir.sym import free_symbols, subs, subs_tree
from aotpack.ir.sym_ranges import restrict
from aotpack.kernels.spec import GemmOp, TensorArg
from aotpack.kernels.templates import template_for
from aotpack.kernels.variants import buckets
from aotpack.passes import compile_graph
from aotpack.program import ShapeError
from program_checks import kinds, rel_err

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import llama_block  # noqa: E402
import mlp  # noqa: E402

SMALL_LLAMA = dict(d=128, heads=4, kv_heads=2, head_dim=32, ffn=256)


def _dynamic_llama(max_batch=4, max_seq=64):
    model, inputs, dims = llama_block.make_dynamic(max_batch=max_batch, max_seq=max_seq,
                                                   batch=2, seq=16, **SMALL_LLAMA)
    return model, inputs, dims


def _program(model, inputs, dims):
    return compile_graph(to_graph(model, inputs, dims))


def _matches_eager(model, program, shape, tol=2e-2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(torch.bfloat16)
    with torch.no_grad():
        want = model(x)
    (got,) = run_reference(program, [x])
    assert got.shape == want.shape
    assert rel_err(got, want) < tol, (shape, rel_err(got, want))


@pytest.fixture(scope="module")
def llama():
    model, inputs, dims = _dynamic_llama()
    return model, _program(model, inputs, dims)


def test_llama_block_one_program_for_every_shape(llama):
    """The block's static fusion, with sizes that are expressions of B and S: both ends of
    both ranges, the example, and odd and prime sizes all match eager."""
    model, program = llama
    static = compile_graph(to_graph(*llama_block.make(batch=2, seq=16, **SMALL_LLAMA)))
    assert kinds(program) == kinds(static)
    assert [s.name for s in program.symbols] == ["B", "S"] and program.example == {"B": 2, "S": 16}
    for b, s in [(1, 1), (2, 16), (4, 64), (3, 17), (1, 63), (4, 1)]:
        _matches_eager(model, program, (b, s, 128), seed=b * 100 + s)


def test_shape_fuzz(llama):
    model, program = llama
    rng = random.Random(7)
    for i in range(6):
        _matches_eager(model, program, (rng.randint(1, 4), rng.randint(1, 64), 128), seed=i)


def test_bad_shapes_are_refused_with_the_dim_and_range(llama):
    _, program = llama
    with pytest.raises(ShapeError, match=r"input 'x' dim 1 is 65, outside the range 1\.\.64 of S"):
        program.bind([(2, 65, 128)])
    with pytest.raises(ShapeError, match=r"input 'x' has rank 2, expected 3"):
        program.bind([(2, 16)])
    with pytest.raises(ShapeError, match=r"input 'x' dim 2 is 64 but must be 128"):
        program.bind([(2, 16, 64)])
    assert program.bind([(3, 5, 128)]) == {"B": 3, "S": 5}


def test_mlp_dynamic_and_cli_dims():
    """The same dims declared from the command line (--dynamic) on a plain factory."""
    model, inputs = mlp.make(d=64, f=256, batch=2, seq=8)
    loaded = apply_dynamic(LoadedModel(model, inputs), ["x.0=B:1..8", "x.1=S:1..32"])
    program = _program(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    assert [(s.name, s.lo, s.hi) for s in program.symbols] == [("B", 1, 8), ("S", 1, 32)]
    for shape in [(1, 1, 64), (8, 32, 64), (3, 7, 64)]:
        _matches_eager(model, program, shape, seed=shape[1])


def test_cli_dims_are_checked():
    from aotpack.frontend import ModelLoadError

    model, inputs = mlp.make(d=64, f=256, batch=2, seq=8)
    for bad, why in [("x.5=1..8", "has 3 dims"), ("y.0=1..8", "no input 'y'"),
                     ("x.0=3..8", "outside the range"), ("x.0", "expected NAME.DIM"),
                     ("x.0=B", "has no range")]:
        with pytest.raises(ModelLoadError, match=why):
            apply_dynamic(LoadedModel(model, inputs), [bad])


def test_dynamic_option_names_may_hold_dots_and_colons():
    """ONNX's default input names (input.1, x:0): the dim is the last .N before the '='."""
    from aotpack.frontend.dynamic import parse_dynamic

    assert parse_dynamic(["input.1.0=1..8", "x:0.1=S:1..64", "x.0=B:1..4"]) == [
        ("input.1", 0, None, 1, 8), ("x:0", 1, "S", 1, 64), ("x", 0, "B", 1, 4)]


def test_other_inputs_follow_a_named_dim():
    """An attention-mask-like second input of the same example size gets the same dim, and the
    build says so (with how to keep it static)."""
    class Two(torch.nn.Module):
        def forward(self, x, mask):
            return x * mask

    x, mask = torch.randn(2, 8), torch.ones(2, 8)
    loaded = apply_dynamic(LoadedModel(Two(), (x, mask)), ["x.1=S:1..16"])
    g = to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    assert [str(d) for v in g.inputs for d in v.shape] == ["2", "S", "2", "S"]
    assert any("mask.1 follows S" in n and "mask.1=static" in n for n in loaded.notes)


def test_a_refused_range_names_what_the_model_allows_with_its_tied_dims():
    """A window-like guard (the model needs S >= 7) with a mask tied to S: the refusal quotes
    torch.export's reason for the dims as tied (the range that works), not only the retry's
    (the mask static, which pins S to the example's size)."""
    from aotpack.frontend import ModelLoadError

    class Windowed(torch.nn.Module):
        def forward(self, x, mask):
            torch._check(x.shape[1] >= 7)
            return x * mask

    x, mask = torch.randn(2, 16), torch.ones(2, 16)
    with pytest.raises(ModelLoadError) as refused:
        apply_dynamic(LoadedModel(Windowed(), (x, mask)), ["x.1=S:4..32"])
    text = str(refused.value)
    assert "7 <=" in text and "with mask.1 static instead" in text


def test_dims_declared_twice_or_in_two_places_are_refused():
    from aotpack.frontend import ModelLoadError

    model, inputs = mlp.make(d=64, f=256, batch=2, seq=8)
    with pytest.raises(ModelLoadError, match=r"x.1 is declared twice \(by --dynamic"):
        apply_dynamic(LoadedModel(model, inputs), ["x.1=S:1..32", "x.1=T:1..16"])
    declared = LoadedModel(model, inputs, ({0: torch.export.Dim("B", min=1, max=4)},))
    with pytest.raises(ModelLoadError, match="factory declares its dynamic dims"):
        apply_dynamic(declared, ["x.1=S:1..32"])
    with pytest.raises(ModelLoadError, match="size 2 or more"):  # torch.export fixes 1s
        apply_dynamic(LoadedModel(model, (inputs[0][:, :1],)), ["x.1=S:1..32"])


def test_dims_the_model_restricts_are_refused_with_the_reason():
    """torch.export's own refusal (a dim the code needs even) is an UnsupportedOpError that
    says why; its suggested fix (a dim derived from another, 2*half) is taken: the dim is
    half, which the runtime reads back from the input's size (and refuses an odd size)."""
    class Even(torch.nn.Module):
        def forward(self, x):
            torch._check(x.shape[1] % 2 == 0)
            return x * 2

    S = torch.export.Dim("S", min=2, max=64)
    with pytest.raises(UnsupportedOpError, match="(?s)refused the dynamic dims.*% 2"):
        to_graph(Even(), (torch.randn(2, 8),), ({1: S},))
    half = torch.export.Dim("half", min=1, max=32)
    program = compile_graph(to_graph(Even(), (torch.randn(2, 8),), ({1: 2 * half},)))
    assert program.bind([(2, 10)]) == {"half": 5}
    with pytest.raises(ShapeError, match="is 9, which is not 2\\*half"):
        program.bind([(2, 9)])


def test_window_mask_is_not_taken_for_causal():
    """A sliding-window mask equals the causal one for short sequences only: it is classified
    at each dim's maximum too, and stays the kernel's mask (not silently made causal), computed
    right at a size where the window hides keys."""
    class Windowed(torch.nn.Module):
        def forward(self, q):
            s = q.shape[2]
            i = torch.arange(s)
            mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 8)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    S = torch.export.Dim("S", min=1, max=64)
    program = compile_graph(to_graph(Windowed(), (torch.randn(1, 2, 4, 16),), ({2: S},)))
    (attention,) = [op for op in program.ops if type(op).__name__ == "AttentionOp"]
    assert attention.mask is not None and not attention.causal
    q = torch.randn(1, 2, 40, 16)
    assert rel_err(run_reference(program, [q])[0], Windowed()(q)) < 1e-5
    causal = compile_graph(to_graph(Windowed(), (torch.randn(1, 2, 4, 16),),
                                    ({2: torch.export.Dim("S", min=1, max=8)},)))
    assert [op.causal for op in causal.ops if type(op).__name__ == "AttentionOp"] == [True]


# --------------------------------------------------------------------------- kernels
def _needed(arg: TensorArg) -> int:
    return arg.offset + sum((d - 1) * s for d, s in zip(arg.shape, arg.strides)) + 1


def _args(obj, out=None):
    import dataclasses

    out = [] if out is None else out
    if isinstance(obj, TensorArg):
        out.append(obj)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _args(getattr(obj, f.name), out)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _args(x, out)
    return out


def _env(op, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    sizes = {}
    for a in _args(op):
        sizes[a.storage] = (max(sizes.get(a.storage, (0,))[0], _needed(a)), a.dtype)
    env = {}
    for name, (n, dtype) in sizes.items():
        if dtype.is_float:
            env[name] = (torch.randn(n, generator=g) * 0.5).to(dtype.to_torch())
        else:
            env[name] = torch.randint(0, 50, (n,), generator=g).to(dtype.to_torch())
    env[op.out.storage].fill_(float("nan") if op.out.dtype.is_float else -1)
    return env


def _symbolic_cases(program, points):
    """(op compiled for its bucket at `point`, config, point, concrete op) per op and point,
    the way a build chooses and the runtime runs them."""
    from aotpack.kernels import SM90

    cases = []
    for op in program.ops:
        t = template_for(op)
        for point in points:
            for b in buckets(op, t, program.symbols, program.example):
                if b.size == 0 or b.lo <= subs(b.size, point) <= b.hi:
                    break
            config = t.default_config(subs_tree(op, b.env), SM90)
            narrowed = subs_tree(op, restrict(program.symbols, b.size, b.lo, b.hi)) \
                if free_symbols(b.size) else op
            cases.append((narrowed, config, point, subs_tree(op, point)))
    return cases


def _run_cases(cases):
    from aotpack.kernels import run_reference as reference
    from support.interpret import run_gemms_interpreted, run_interpreted_batch
    from aotpack.kernels.triton.gemm_configs import config_from_dict

    gemm_runs, other_runs, checks = [], [], []
    for i, (op, config, point, concrete) in enumerate(cases):
        env = _env(concrete, seed=i)
        want = {k: v.clone() for k, v in env.items()}
        reference(concrete, want)
        fields = {k: v for k, v in config.items() if k != "template"}
        if isinstance(op, GemmOp):
            gemm_runs.append((op, env, config_from_dict(fields), 3, point))
        else:
            other_runs.append((op, env, fields, point))
        checks.append((concrete, env, want, point))
    run_gemms_interpreted(gemm_runs)
    run_interpreted_batch(other_runs)
    return checks


@pytest.mark.parametrize("points", [[{"B": 1, "S": 1}, {"B": 3, "S": 17}, {"B": 4, "S": 64}]])
def test_every_symbolic_kernel_matches_its_reference(llama, points):
    _, program = llama
    for concrete, env, want, point in _run_cases(_symbolic_cases(program, points)):
        out = concrete.out
        got = torch.as_strided(env[out.storage], out.shape, out.strides, out.offset)
        ref = torch.as_strided(want[out.storage], out.shape, out.strides, out.offset)
        assert not got.float().isnan().any(), (type(concrete).__name__, point)
        assert rel_err(got, ref) < 2e-2, (type(concrete).__name__, point, rel_err(got, ref))


def test_tuning_problems_per_bucket_share_keys_with_static_ops(llama):
    """A symbolic op is one tuning problem per bucket, at the bucket's largest size: the key is
    the one a static build at that size computes, so one record serves both."""
    from aotpack.shared_steps import canonical
    from aotpack.kernels import SM90
    from aotpack.tuning import keys
    from aotpack.tuning.job import find_problems

    _, program = llama
    problems = find_problems(program, SM90, level="fast", gemm_backend="triton")
    gemms = [p for p in problems if p.kind == "gemm"]
    assert len({p.desc for p in gemms}) == len(gemms) > 4  # distinct sizes per GEMM
    assert not any(free_symbols(p.op) for p in problems)  # every problem is concrete
    static = compile_graph(to_graph(*llama_block.make(batch=1, seq=64, **SMALL_LLAMA)))
    static_keys = set()
    for op in static.ops:
        t = template_for(op)
        if t.tunable:
            static_keys.add(keys.problem_keys(canonical(op)[0], SM90, t.name, t.sources)[0])
    # B=1, S=64 is the top of the last bucket of every GEMM and attention of the range
    assert static_keys & {p.key for p in problems}


def test_pt2_keeps_its_dims(tmp_path):
    """A .pt2 exported with torch.export.Dim builds a dynamic program (dims named after the
    input and dim: the file does not keep Dim names)."""
    from aotpack.frontend import load_spec

    model, (x,) = mlp.make(d=64, f=256, batch=2, seq=8)
    ep = torch.export.export(model, (x,), dynamic_shapes=(
        {1: torch.export.Dim("S", min=1, max=32)},))
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = load_spec(str(tmp_path / "m.pt2"))
    program = _program(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    assert [(s.name, s.lo, s.hi) for s in program.symbols] == [("x_1", 1, 32)]
    _matches_eager(model, program, (2, 5, 64))
    with pytest.raises(ShapeError, match="dim 0 is 3 but must be 2"):
        program.bind([(3, 5, 64)])


def test_dynamic_bundle_is_a_checked_v2_manifest(tmp_path, monkeypatch, caplog):
    """A real build (Triton cross-compile, no GPU) of the small dynamic MLP: manifest v2 with
    its symbols and expressions, refused by the checker where the runtime would refuse it; at
    any shape in range exactly one variant of each GEMM runs; inspect shows the dims and
    variants; a second build gives the same bytes; a static build is still v1; at debug level
    (AOTPACK_LOG=debug) the build logs its passes, each op's buckets, compiles and memory."""
    import copy
    import json
    import logging

    from aotpack.builder import build
    from aotpack.bundle import BundleError, read_bundle
    from aotpack.bundle import manifest as mf
    from aotpack.cli.report import inspect_document

    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))
    spec = tmp_path / "small.py"
    spec.write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nimport mlp\n\n"
                    "def make():\n    return mlp.make(d=64, f=256, batch=2, seq=8)\n")
    dims = ["x.0=B:1..16", "x.1=S:1..256"]
    with caplog.at_level(logging.DEBUG, logger="aotpack"):
        a = build(f"{spec}:make", tmp_path / "a", progress=False, command_line="t", dynamic=dims)
    logged = [r.getMessage() for r in caplog.records]
    for start in ("frontend graph: ", "fuse_patterns: ", "lower: 2 kernel ops",
                  "gemm M=B*S N=256 K=64", "compiled GemmOp: ", "memory: "):
        assert any(m.startswith(start) for m in logged), (start, logged)
    assert any(": B*S in 1.." in m and "; B*S in " in m for m in logged), logged  # buckets
    b = build(f"{spec}:make", tmp_path / "b", progress=False, command_line="t", dynamic=dims)
    assert a.bundle.read_bytes() == b.bundle.read_bytes()
    m = read_bundle(a.bundle, checksums=True).manifest
    assert m["version"] == 2 and m["inputs"][0]["shape"] == ["B", "S", 64]
    assert [(s["name"], s["min"], s["max"], s["example"]) for s in m["symbols"]] == \
        [("B", 1, 16, 2), ("S", 1, 256, 8)]
    symbols = mf.parse_symbols(m)
    for bb, ss in [(1, 1), (16, 256), (3, 17), (2, 200)]:
        steps = mf.at_point(m, symbols, {"B": bb, "S": ss})["steps"]
        assert len(steps) == 2, (bb, ss)  # fc1 (+GELU) and fc2: one variant each
    assert any(s.get("when") for s in m["steps"])
    doc = inspect_document(read_bundle(a.bundle))
    assert [s["name"] for s in doc["dynamic"]["symbols"]] == ["B", "S"]
    assert doc["dynamic"]["variants"] and doc["dynamic"]["arena_bytes_example"] <= m["arena_bytes"]
    broken = copy.deepcopy(m)
    broken["inputs"][0]["shape"] = ["B/2", "S", 64]  # B no longer bindable from an input
    with pytest.raises(BundleError, match="no input's dim on its own"):
        mf.check(broken)
    broken = json.loads(json.dumps(m).replace('"B*S"', '"B*S*Q"', 1))
    with pytest.raises(BundleError, match="unknown symbol"):
        mf.check(broken)
    static = build(f"{spec}:make", tmp_path / "s", progress=False, command_line="t")
    assert read_bundle(static.bundle).manifest["version"] == 1
