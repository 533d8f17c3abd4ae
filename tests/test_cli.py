"""The `aotpack` CLI through typer's CliRunner: help texts, inspect on a hand-made bundle, and
one-line errors (exit status ≠ 0, no traceback) for user mistakes."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aotpack.cli.main import app
from handmade_bundle import CUBIN, write_handmade

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("command, words", [
    ("build", ["--arch", "--external-weights", "--force", "-o", "file.py:factory",
               "--tuning-db", "OUTPUT.tuning.json", "--host-platform", "native", "auto"]),
    ("tune", ["aotpack-run --tune job.aotune -o results.json", "--import", "--db", "--level"]),
    ("inspect", ["--json", "memory plan", "provenance"]),
    ("verify", ["--model", "--reference", "eager PyTorch"]),
    ("bench", ["-n", "median latency"]),
    ("doctor", ["cuobjdump", "driver"]),
])
def test_each_command_explains_itself(command, words):
    result = _run(command, "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for word in words:
        assert word in text, (word, text)


def test_top_level_help_lists_the_commands():
    result = _run("--help")
    assert result.exit_code == 0
    for command in ("build", "inspect", "verify", "bench", "doctor"):
        assert command in result.output


def test_inspect_json(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    result = _run("inspect", path, "--json", "--check")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["format"] == "aotpack" and doc["version"] == 1
    assert doc["target"]["arch"] == "sm_90a"
    assert doc["inputs"] == [{"name": "x", "dtype": "bf16", "shape": [64, 64]}]
    assert [(k["name"], k["steps"]) for k in doc["kernels"]] == [("gemm_kernel_0", 2),
                                                                 ("relu_kernel_1", 1)]
    gemm = doc["kernels"][0]
    assert gemm["backend"] == "triton" and gemm["fused_ops"] == ["linear", "bias"]
    assert gemm["config"] == {"BM": 64, "BN": 64, "num_warps": 4}
    assert gemm["smem"] == 65536 and gemm["cluster"] == [2, 1, 1]
    assert doc["cubins"] == {"count": 1, "bytes": len(CUBIN)}
    assert doc["memory"] == {"arena_bytes": 17408, "intermediate_bytes": 16384,
                             "naive_bytes": 17408, "regions": 2, "counters_bytes": 0}
    assert doc["weights"] == {"count": 3, "bytes": 64 * 64 * 2 + 64 * 4 + 3 * 4, "external": None,
                              "external_found": False}
    assert doc["graph"]["summary"] == {"nodes": 4, "ops": {"linear": 1, "relu": 1}}
    assert doc["provenance"]["created_by"] == "tests"


def test_inspect_tables(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    result = _run("inspect", path)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for expected in ("sm_90a", "x: bf16[64, 64]", "relu_kernel_1", "triton", "arena 17.0 KiB",
                     "external: weights.safetensors", "created_by=tests"):
        assert expected in text, expected


@pytest.mark.parametrize("columns, tables", [(80, 2), (160, 1)])
def test_inspect_kernel_table_fits_the_terminal(tmp_path, monkeypatch, columns, tables):
    """On a narrow terminal the fused ops and configs get a table of their own (rich would
    squeeze those columns to nothing beside the names and numbers)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    result = _run("inspect", write_handmade(tmp_path / "model.aotpack"))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert ("kernels: fused ops and config" in text) == (tables == 2)
    assert "linear, bias" in text and "BM=64" in text


def test_inspect_without_the_external_weights_file(tmp_path):
    """A bundle whose weights live elsewhere (e.g. copied alone to another machine) can still be
    inspected; --check needs the weights and says where it looked."""
    path = write_handmade(tmp_path / "model.aotpack", external_weights="weights.safetensors")
    (tmp_path / "weights.safetensors").unlink()
    result = _run("inspect", path)
    assert result.exit_code == 0, result.output
    assert "not found: not checked" in " ".join(result.output.split())
    result = _run("inspect", path, "--check")
    assert result.exit_code == 1 and "next to the bundle or pass its path" in \
        " ".join(result.output.split())


def test_inspect_needs_no_torch(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    code = ("import sys; from aotpack.cli.main import app; "
            f"sys.argv = ['aotpack', 'inspect', {str(path)!r}, '--json']\n"
            "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'heavy import'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"] == 3


def _assert_friendly(result, *fragments):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "error:" in text
    for f in fragments:
        assert f in text, (f, text)


def test_missing_bundle_is_a_one_line_error(tmp_path):
    _assert_friendly(_run("inspect", tmp_path / "nope.aotpack"), "no such bundle file",
                     "aotpack build")


def test_corrupt_bundle_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    _assert_friendly(_run("inspect", bad), "not valid JSON")


def test_checksum_failure_is_reported(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    raw = path.read_bytes()
    i = raw.rindex(CUBIN[:8])
    path.write_bytes(raw[:i] + b"\x00" + raw[i + 1:])
    assert _run("inspect", path).exit_code == 0  # without --check only structure is read
    _assert_friendly(_run("inspect", path, "--check"), "sha256", "rebuild")


def test_bad_arch(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("def make():\n    raise AssertionError('must not be loaded')\n")
    result = _run("build", f"{model}:make", "--arch", "sm80", "-o", tmp_path / "out")
    _assert_friendly(result, "unsupported --arch 'sm80'", "sm90")
    assert not (tmp_path / "out").exists()


def test_missing_model_file(tmp_path):
    result = _run("build", tmp_path / "nothere.py:make", "-o", tmp_path / "out")
    _assert_friendly(result, "nothere.py does not exist", "file.py:factory")
    assert not (tmp_path / "out").exists()


def test_existing_output_needs_force(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("def make():\n    raise AssertionError('must not be loaded')\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = _run("build", f"{model}:make", "-o", tmp_path / "out")
    _assert_friendly(result, "already exists", "--force")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_a_build_folder_names_its_bundle(tmp_path):
    write_handmade(tmp_path / "model.aotpack")
    result = _run("inspect", tmp_path)
    assert result.exit_code == 0 and "model.aotpack" in result.output, result.output


def test_verify_rejects_an_unknown_reference(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    result = _run("verify", path, "--model", "m.py:make", "--reference", "tpu")
    assert result.exit_code == 2 and "'tpu' is not one of 'cpu', 'gpu'" in _words(result.output)


@pytest.mark.parametrize("argv", [("build", "m.py:make", "-o", "out", "--tune", "slow"),
                                  ("build", "m.py:make", "-o", "out", "--gemm-backend", "cublas"),
                                  ("tune", "m.py:make", "-o", "job", "--level", "medium")])
def test_a_bad_choice_is_a_usage_error(argv):
    """Every option with a fixed set of values: the same status (2) and message form, before
    any model is read (m.py does not exist)."""
    result = _run(*argv)
    assert result.exit_code == 2 and "is not one of" in _words(result.output), result.output


def _words(boxed: str) -> str:
    """The text of rich's error box as one line (it wraps and frames long messages)."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", boxed).split())


def test_verify_missing_model_file(tmp_path):
    path = write_handmade(tmp_path / "model.aotpack")
    result = _run("verify", path, "--model", tmp_path / "gone.py:make", "--reference", "cpu")
    _assert_friendly(result, "gone.py does not exist")


def test_doctor_reports_the_machine(monkeypatch):
    monkeypatch.setenv("AOTPACK_LOG", "debug")
    result = _run("doctor")
    assert result.exit_code == 0, result.output
    for expected in ("python", "torch", "triton", "runtime library", "driver", "AOTPACK_LOG"):
        assert expected in result.output


def test_op_no_kernel_implements_is_one_line(tmp_path):
    """A graph the frontend translates but the lowering cannot (a softmax of a 0-d tensor) is
    an error message naming the node and what to do, no traceback, and no output folder."""
    model = tmp_path / "m.py"
    model.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, a):\n"
        "        return torch.softmax(a.sum(), 0)\n"
        "def make():\n"
        "    return M(), (torch.randn(4, 8),)\n")
    result = _run("build", f"{model}:make", "-o", tmp_path / "out")
    _assert_friendly(result, "LoweringError: cannot lower softmax", "give it at least one dim")
    assert not (tmp_path / "out").exists()


def test_verify_finds_the_model_its_build_recorded(tmp_path, monkeypatch):
    """`aotpack verify BUNDLE` without --model takes the spec the build was given: the file of
    that name and sha256 in the current folder or a subfolder (a build from `models/m.py`
    verified from where it was built); a same-named other file is never used; with none it
    says to pass --model (exit 2)."""
    source = (
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, a):\n"
        "        return torch.relu(a) * 2\n"
        "def make():\n"
        "    return M(), (torch.randn(4, 8, dtype=torch.bfloat16),)\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    built = _run("build", "models/m.py:make", "-o", "out", "--no-progress")
    assert built.exit_code == 0, built.output
    result = _run("verify", "out", "--reference", "cpu")
    assert result.exit_code == 0 and "passed" in result.output, result.output
    assert "models/m.py:make" in _words(result.output)
    (tmp_path / "m.py").write_text(source.replace("* 2", "* 3"))  # same name, another model
    result = _run("verify", "out", "--reference", "cpu")
    assert result.exit_code == 0 and "models/m.py:make" in _words(result.output)
    monkeypatch.chdir(tmp_path / "out")
    result = _run("verify", ".", "--reference", "cpu")
    assert result.exit_code == 2 and "its build named 'm.py:make': no m.py under" in \
        _words(result.output), result.output
    (tmp_path / "models" / "m.py").unlink()
    monkeypatch.chdir(tmp_path)
    result = _run("verify", "out", "--reference", "cpu")
    assert result.exit_code == 2 and "m.py is not the file it was built from" in \
        _words(result.output), result.output


def test_a_factory_that_raises_is_one_line(tmp_path):
    """An exception inside the user's factory: one line naming it and where it was raised."""
    model = tmp_path / "m.py"
    model.write_text("def helper():\n    raise RuntimeError('no weights here')\n"
                     "def make():\n    return helper()\n")
    result = _run("build", f"{model}:make", "-o", tmp_path / "out")
    _assert_friendly(result, "raised RuntimeError: no weights here", f"{model}:2")
    assert not (tmp_path / "out").exists()


def test_verify_finds_a_checkpoint_folder_its_build_recorded(tmp_path):
    """A build from a transformers checkpoint folder records the folder's name and its
    config.json's sha256: verify without --model finds the folder below here (a file of
    that name is not it), and a folder whose config differs is named, not used."""
    import hashlib

    from aotpack.verify import find_recorded_spec

    folder = tmp_path / "ckpt" / "llm"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    digest = hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()
    prov = {"spec": "llm", "source_sha256": digest}
    found, why = find_recorded_spec(prov, tmp_path)
    assert found is not None and Path(found) == tmp_path / "ckpt" / "llm", why
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    found, why = find_recorded_spec(prov, tmp_path)
    assert found is None and "is not the file it was built from" in why, why
