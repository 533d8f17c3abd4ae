"""aotpack.builder: the pipeline glue with stand-ins for the frontend, the fusion pass and the
Triton compile (those have their own tests), so what is checked here is build's own job: the
identical-op compile cache, the output folder (bundle, launcher copy, README), --force, atomicity
and provenance."""
import dataclasses
import sys
import types
from pathlib import Path

import pytest
import torch

from aotpack import builder as build_mod
from aotpack import shared_steps
from aotpack.builder import build
from aotpack.shared_steps import BuildError, canonical
from aotpack.bundle import read_bundle
from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    SM90, CompiledKernel, GemmOp, Launch, NullSlot, PtrSlot, ScratchSlot, contiguous,
)
from aotpack.program import MemoryPlan, Program, Storage

BF16 = DType.BF16


def _program() -> Program:
    st = {s.name: s for s in [Storage("x", "input", BF16, (16, 32)),
                              Storage("w1", "weight", BF16, (32, 32)),
                              Storage("w2", "weight", BF16, (32, 32)),
                              Storage("h", "intermediate", BF16, (16, 32)),
                              Storage("y", "output", BF16, (16, 32))]}

    def arg(n):
        return contiguous(n, BF16, st[n].shape)

    ops = [GemmOp(arg("x"), arg("w1"), arg("h")), GemmOp(arg("h"), arg("w2"), arg("y"))]
    g = torch.Generator().manual_seed(0)
    weights = {n: torch.randn(32, 32, generator=g).bfloat16() for n in ("w1", "w2")}
    return Program(["x"], ["y"], st, ops, weights, {"nodes": 5, "ops": {"linear": 2}})


def _fake_compile(calls):
    def compile_op(op, target):
        calls.append(op)
        k = CompiledKernel("gemm_kernel", b"cubin-of-" + repr(op.a.shape).encode(), (128, 1, 1), 0,
                           fused_ops=("linear",))
        return [Launch(k, (1, 1, 1), (PtrSlot(op.a.storage), PtrSlot(op.b.storage),
                                      PtrSlot(op.out.storage), ScratchSlot(512), NullSlot()))]
    return compile_op


def _fake_gemm_template(monkeypatch, calls, cute_calls=None):
    """The GEMM template's compile replaced by _fake_compile (per backend), its heuristic by
    a fixed config: build's own job is what is checked."""
    from aotpack.kernels.gemm_template import GemmTemplate

    triton, cute = _fake_compile(calls), _fake_compile(cute_calls if cute_calls is not None
                                                        else calls)

    def compile_op(self, op, config, target):
        return (cute if config["template"] == "gemm.cutedsl" else triton)(op, target)

    monkeypatch.setattr(GemmTemplate, "compile", compile_op)
    monkeypatch.setattr("aotpack.kernels.triton.gemm.config_for",
                        lambda op, target=None: _FixedConfig())


class _FixedConfig:
    def as_dict(self):
        return {"BM": 128}


def _fake_plan(program, launches_per_op):
    flat, offsets, nbytes = [], {"h": 0}, {"h": 2048}
    for step, launch in enumerate(l for ls in launches_per_op for l in ls):
        name = f"__scratch.{step}.3"
        offsets[name], nbytes[name] = 2048 + 512 * step, 512
        flat.append(Launch(launch.kernel, launch.grid,
                           launch.args[:3] + (PtrSlot(name),) + launch.args[4:]))
    return MemoryPlan(2048 + 512 * len(flat), offsets, nbytes, flat, 2048 + 512 * len(flat))


@pytest.fixture
def pipeline(monkeypatch, tmp_path):
    """Stand-in frontend/passes/compile; returns the list of ops actually compiled."""
    calls = []
    from aotpack.frontend.load import LoadedModel

    frontend = types.ModuleType("aotpack.frontend")
    frontend.load_spec = lambda spec: LoadedModel("model", (torch.zeros(16, 32),))
    frontend.to_graph = lambda model, inputs, dynamic=None: "graph"
    passes = types.ModuleType("aotpack.passes")
    passes.compile_graph = lambda graph: _program()
    passes.plan_memory = _fake_plan
    import aotpack.frontend.prepare  # noqa: F401 — the real one: with no options, a no-op
    import aotpack.passes.fuse_gemm_norm  # noqa: F401 — real (precision.apply runs it), imported
    # before the stand-in replaces its package (else this file fails when run alone)
    monkeypatch.setitem(sys.modules, "aotpack.frontend", frontend)
    monkeypatch.setitem(sys.modules, "aotpack.passes", passes)
    import aotpack  # `from aotpack import passes` reads the package attribute, not sys.modules

    monkeypatch.setattr(aotpack, "frontend", frontend, raising=False)
    monkeypatch.setattr(aotpack, "passes", passes, raising=False)
    _fake_gemm_template(monkeypatch, calls)
    runtime = tmp_path / "runtime"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "lib").mkdir()
    (runtime / "include" / "aotpack").mkdir(parents=True)
    (runtime / "bin" / "aotpack-run").write_text("#!/bin/sh\necho launcher\n")
    (runtime / "bin" / "aotpack-run").chmod(0o755)
    for name in ("libaotpack.so", "libaotpack.so.0", "libaotpack.so.0.2.0", "libaotpack.a"):
        (runtime / "lib" / name).write_bytes(name.encode())
    (runtime / "include" / "aotpack" / "aotpack.h").write_text("/* C API */\n")
    (runtime / "lib" / "cmake" / "aotpack").mkdir(parents=True)
    for name in ("aotpackConfig.cmake", "aotpackConfigVersion.cmake", "aotpackTargets.cmake"):
        (runtime / "lib" / "cmake" / "aotpack" / name).write_text(f"# {name}\n")
    (runtime / "lib" / "pkgconfig").mkdir()
    (runtime / "lib" / "pkgconfig" / "aotpack.pc").write_text("prefix=${pcfiledir}/../..\n")
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(runtime))
    (tmp_path / "model.py").write_text("def make():\n    pass\n")
    return calls


def test_identical_ops_compile_once():
    p = _program()
    a, back_a = canonical(p.ops[0])
    b, back_b = canonical(p.ops[1])
    assert a == b and back_a == {"__op.0": "x", "__op.1": "w1", "__op.2": "h"}
    assert back_b == {"__op.0": "h", "__op.1": "w2", "__op.2": "y"}


def test_build_writes_the_output_folder(pipeline, tmp_path):
    out = tmp_path / "out" / "mlp"
    result = build(f"{tmp_path / 'model.py'}:make", out, progress=False,
                   command_line="aotpack build model.py:make -o out/mlp")
    assert len(pipeline) == 1, "the second GEMM has the same shapes: compiled once"
    assert (result.kernels, result.steps, result.compiled_ops) == (1, 2, 1)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "README.md", "aotpack-run", "include/aotpack/aotpack.h",
        "lib/cmake/aotpack/aotpackConfig.cmake", "lib/cmake/aotpack/aotpackConfigVersion.cmake",
        "lib/cmake/aotpack/aotpackTargets.cmake", "lib/libaotpack.a", "lib/libaotpack.so",
        "lib/libaotpack.so.0", "lib/libaotpack.so.0.2.0", "lib/pkgconfig/aotpack.pc",
        "model.aotpack"]
    assert (out / "aotpack-run").stat().st_mode & 0o111
    readme = (out / "README.md").read_text()
    assert "./aotpack-run model.aotpack --bench 100" in readme
    assert "find_package(aotpack CONFIG REQUIRED)" in readme and "lib/pkgconfig" in readme
    m = read_bundle(out / "model.aotpack", checksums=True).manifest
    # slots of the cached compile were renamed back to each op's own storages
    assert [[a.get("buffer") for a in s["args"][:3]] for s in m["steps"]] == [[0, 2, 4], [4, 3, 1]]
    prov = m["provenance"]
    assert prov["created_by"] == "aotpack build model.py:make -o mlp"  # no folder: portable
    assert prov["source"] == "model.py" and len(prov["source_sha256"]) == 64
    assert prov["torch"] and "timestamp" not in prov
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mlp"]  # no temp folders left


def test_build_is_reproducible_and_external_weights(pipeline, tmp_path):
    """Two folders, named alike, in different places: the same bytes (the command each
    recorded names the output and the model by their last parts only)."""
    spec = f"{tmp_path / 'model.py'}:make"
    a = build(spec, tmp_path / "a" / "m", progress=False, external_weights=True)
    b = build(spec, tmp_path / "b" / "m", progress=False, external_weights=True)
    assert read_bundle(a.out_dir / "model.aotpack").manifest["provenance"]["created_by"] == \
        "aotpack build model.py:make --arch sm90 -o m"
    for name in ("model.aotpack", "weights.safetensors"):
        assert (a.out_dir / name).read_bytes() == (b.out_dir / name).read_bytes()
    assert "weights.safetensors" in (a.out_dir / "README.md").read_text()


def test_cubins_do_not_name_where_aotpack_is_installed():
    """Triton's line table named each kernel file's path (and size): two checkouts or
    installs built different cubins of the same SASS. A build compiles without it."""
    import aotpack
    from aotpack.kernels.spec import SM90, RopeOp, contiguous
    from aotpack.kernels.triton import rope

    pytest.importorskip("triton")
    x = contiguous("x", DType.BF16, (1, 3, 5, 48))  # a shape no other test compiles
    op = RopeOp(x, contiguous("c", DType.BF16, (5, 48)), contiguous("s", DType.BF16, (5, 48)),
                contiguous("o", DType.BF16, (1, 3, 5, 48)))
    with shared_steps.triton_cache():
        (launch,) = rope.compile(op, SM90, {"BLOCK_S": 4})
    assert str(Path(aotpack.__file__).parent).encode() not in launch.kernel.cubin


def test_portable_command_cuts_paths():
    from aotpack.shared_steps import portable_command

    assert portable_command("aotpack build /w/x/model.py:make -o /srv/out/m/ "
                            "--tuning-db=/home/u/db.json --dynamic x.0=1..64 --arch sm90") == \
        "aotpack build model.py:make -o m --tuning-db=db.json --dynamic x.0=1..64 --arch sm90"
    assert portable_command("aotpack build 'my dir/m.pt2' -o out") == "aotpack build m.pt2 -o out"
    assert portable_command("aotpack tune 'unbalanced") == "aotpack tune 'unbalanced"


@pytest.mark.parametrize("user_dir", [None, "mine"])
def test_build_leaves_the_environment_alone(pipeline, tmp_path, monkeypatch, user_dir):
    """Triton compiles into aotpack's cache (or the user's TRITON_CACHE_DIR) while the build
    runs, and afterwards the caller's environment is as it was (the build used to set
    TRITON_CACHE_DIR for the rest of the process)."""
    import os

    triton = pytest.importorskip("triton")
    from aotpack.kernels.gemm_template import GemmTemplate

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path / "cache"))
    if user_dir is None:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / user_dir))
    fake_compile, seen = GemmTemplate.compile, []

    def compile_op(self, op, config, target):
        seen.append(triton.knobs.cache.dir)
        return fake_compile(self, op, config, target)

    monkeypatch.setattr(GemmTemplate, "compile", compile_op)
    before = dict(os.environ)
    build(f"{tmp_path / 'model.py'}:make", tmp_path / "out", progress=False)
    assert dict(os.environ) == before
    assert seen == [str(tmp_path / (user_dir or "cache/triton"))]


def test_force_replaces_and_failure_keeps_the_old_folder(pipeline, tmp_path, monkeypatch):
    spec = f"{tmp_path / 'model.py'}:make"
    out = tmp_path / "out"
    build(spec, out, progress=False)
    with pytest.raises(BuildError, match="--force"):
        build(spec, out, progress=False)
    before = (out / "model.aotpack").read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("writer crashed")

    monkeypatch.setattr("aotpack.bundle.write_bundle", broken)
    with pytest.raises(RuntimeError, match="writer crashed"):
        build(spec, out, progress=False, force=True)
    assert (out / "model.aotpack").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py", "out", "runtime"]
    monkeypatch.undo()


def test_missing_runtime_is_a_warning_not_a_failure(pipeline, tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod.runtime_files, "runtime_dir", lambda: None)
    result = build(f"{tmp_path / 'model.py'}:make", tmp_path / "out", progress=False)
    assert any("runtime is not installed" in w for w in result.warnings)
    assert sorted(p.name for p in result.out_dir.iterdir()) == ["README.md", "model.aotpack"]


@pytest.mark.parametrize("arch", ["sm90", "sm_90a", "SM90"])
def test_accepted_arches(arch):
    assert shared_steps.parse_arch(arch).arch == "sm_90a"


@pytest.mark.parametrize("arch", ["sm80", "sm_100a", "hopper"])
def test_refused_arches(arch):
    with pytest.raises(BuildError, match="sm90"):
        shared_steps.parse_arch(arch)


def test_source_file_of_a_spec():
    assert shared_steps.source_file("examples/mlp.py:make").as_posix() == "examples/mlp.py"
    assert shared_steps.source_file("m.pt2").as_posix() == "m.pt2"
    assert shared_steps.source_file("/abs/dir:x/m.pt2").as_posix() == "/abs/dir:x/m.pt2"


@pytest.mark.slow
def test_real_pipeline_small_mlp(tmp_path, monkeypatch):
    """The real frontend, passes and Triton cross-compile (no GPU) on a small MLP: the folder
    is built, the bundle reads back with valid checksums, and the CPU reference agrees with
    eager PyTorch."""
    pytest.importorskip("triton")
    from pathlib import Path

    from aotpack.verify import verify

    examples = Path(__file__).resolve().parents[1] / "examples"
    spec = tmp_path / "small_mlp.py"
    spec.write_text(f"import sys\nsys.path.insert(0, {str(examples)!r})\nimport mlp\n\n"
                    "def make():\n    return mlp.make(d=64, f=256, batch=2, seq=8)\n")
    monkeypatch.setenv("AOTPACK_RUNTIME_DIR", str(tmp_path / "no-runtime"))
    result = build(f"{spec}:make", tmp_path / "out", progress=False, command_line="test")
    b = read_bundle(result.bundle, checksums=True)
    assert b.manifest["inputs"][0]["shape"] == [2, 8, 64] and result.steps >= 2
    assert all(k["backend"] == "triton" and k["cubin_sha256"] for k in b.manifest["kernels"])
    assert verify(result.bundle, f"{spec}:make", reference="cpu").passed


def test_gemm_backend_choice_errors(pipeline, tmp_path, monkeypatch):
    spec = f"{tmp_path / 'model.py'}:make"
    with pytest.raises(BuildError, match="unknown GEMM backend"):
        build(spec, tmp_path / "o1", progress=False, gemm_backend="cublas")
    from aotpack.kernels.cutedsl import build as cute_build

    monkeypatch.setattr(cute_build, "available", lambda: False)
    with pytest.raises(BuildError, match="pip install nvidia-cutlass-dsl"):
        build(spec, tmp_path / "o2", progress=False, gemm_backend="cutedsl")
    assert pipeline == []  # refused before anything was compiled


def test_cutedsl_backend_takes_the_gemms(pipeline, tmp_path, monkeypatch):
    """--gemm-backend cutedsl sends GemmOps to the CuTeDSL backend (stand-in here: CuTeDSL is
    not needed), refuses a GEMM it cannot run, and leaves Triton the default."""
    from aotpack.kernels import gemm_template

    cute_calls = []
    _fake_gemm_template(monkeypatch, pipeline, cute_calls)
    fake = types.SimpleNamespace(
        supports=lambda op: None,
        default_config=lambda op, **kw: types.SimpleNamespace(
            tile_m=128, tile_n=256, cluster_m=1, cluster_n=1, raster_along_m=True, swizzle=1))
    monkeypatch.setattr(gemm_template, "cutedsl", lambda: fake)
    spec = f"{tmp_path / 'model.py'}:make"
    build(spec, tmp_path / "o1", progress=False, command_line="t", gemm_backend="cutedsl")
    assert len(cute_calls) == 1 and pipeline == []  # two identical GEMMs, one compile
    build(spec, tmp_path / "o2", progress=False, command_line="t")
    assert len(cute_calls) == 1 and len(pipeline) == 1  # default: Triton
    fake.supports = lambda op: "A and B must both be bf16 or f16"
    with pytest.raises(BuildError, match="cutedsl GEMM cannot compile.*bf16 or f16"):
        build(spec, tmp_path / "o3", progress=False, gemm_backend="cutedsl")


def test_auto_backend_picks_per_gemm(monkeypatch):
    """auto: CuTeDSL where it measured faster (M >= 4096), Triton elsewhere."""
    from aotpack import kernels
    from aotpack.kernels.cutedsl import build as cute_build

    if not cute_build.available():  # (importing cutlass here would pin the wrong arch)
        pytest.skip("nvidia-cutlass-dsl not installed")
    from aotpack.kernels.gemm_template import GemmTemplate

    picked = []
    monkeypatch.setattr(GemmTemplate, "compile",
                        lambda self, op, config, target: picked.append(config["template"]) or [])
    fn = kernels.compiler("auto")

    def gemm(m):
        return GemmOp(contiguous("x", DType.BF16, (m, 256)), contiguous("w", DType.BF16, (512, 256)),
                      contiguous("y", DType.BF16, (m, 512)))

    fn(gemm(4096), SM90)
    fn(gemm(2048), SM90)
    fn(gemm(16), SM90)
    assert picked == ["gemm.cutedsl", "gemm.triton", "gemm.triton"]


def test_a_kernel_refusing_its_op_is_one_line_naming_the_op(pipeline, tmp_path, monkeypatch):
    """A kernel that refuses what the passes gave it (a defect of aotpack, not of the model)
    ends the build with one line naming the op, not a traceback (AOTPACK_LOG=debug: the
    traceback), and leaves no folder."""
    import aotpack.kernels.variants as variants

    def refuse(op, *args, **kwargs):
        raise ValueError("attention out: inner stride must be 1")

    monkeypatch.setattr(variants, "compile_variants", refuse)
    # the line of the model the first op was lowered from (lower.py records it by output)
    line = "model.py:7: h = self.fc1(x)"
    monkeypatch.setattr(sys.modules["aotpack.passes"], "compile_graph",
                        lambda graph: dataclasses.replace(_program(), origins={"h": line}))
    out = tmp_path / "out"
    with pytest.raises(BuildError, match=r"could not compile gemm.*, from model\.py:7: h = "
                                         r"self\.fc1\(x\) .*inner stride must be 1.*defect of "
                                         r"aotpack.*AOTPACK_LOG=debug"):
        build(f"{tmp_path / 'model.py'}:make", out, progress=False)
    assert not out.exists()
    monkeypatch.setenv("AOTPACK_LOG", "debug")
    with pytest.raises(ValueError, match="inner stride"):
        build(f"{tmp_path / 'model.py'}:make", out, progress=False)
