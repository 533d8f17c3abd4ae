"""The documentation cannot go stale silently: the generated tables of README.md and
docs/performance.md are what benchmarks/doc_tables.py makes of the committed results JSON, every
relative link resolves, and the README's environment variables and CI install are the code's."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import doc_tables  # noqa: E402

README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
MARKDOWN = [README, *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "benchmarks").glob("*.md")), ROOT / "runtime_cpp" / "README.md"]


# ----------------------------------------------------------------------- generated tables

def test_every_generated_block_is_what_its_results_files_give():
    assert doc_tables.stale() == [], "run `python benchmarks/doc_tables.py`"


def test_the_generated_blocks_are_where_the_docs_expect_them():
    perf = {b.name: b for b in doc_tables.blocks(PERFORMANCE.read_text())}
    assert set(perf) == {"bench", "generate", "dynamic", "conv-resnet18", "conv-families",
                         "conv-depthwise", "conv-all", "coverage-models", "conv-peers-families"}
    readme = doc_tables.blocks(README.read_text())
    assert [b.name for b in readme] == ["summary"]
    # the README's short table comes from the same results files as the performance page's
    assert readme[0].sources == tuple(s for n in doc_tables.SUMMARY_FROM for s in perf[n].sources)
    for b in [*perf.values(), *readme]:
        assert b.sources and all((ROOT / s).is_file() for s in b.sources), b


def test_the_readme_keeps_no_dated_performance_log():
    text = README.read_text()
    assert "bench:begin" not in text and "Tuning and GEMM results" not in text
    assert len(text.splitlines()) < 450


def _tmp_doc(tmp_path: Path, *names: str) -> Path:
    doc = tmp_path / "perf.md"
    doc.write_text("# t\n" + "".join(f"before {n}\n<!-- {n}:begin -->\nold\n<!-- {n}:end -->\n"
                                     f"after {n}\n" for n in names))
    return doc


def test_each_report_script_points_its_block_at_a_results_file(tmp_path):
    import conv_report
    import dynamic_report
    import generate_report
    import models_report

    results = ROOT / "benchmarks" / "results"
    doc = _tmp_doc(tmp_path, "generate", "dynamic", "conv-families", "coverage-models")
    readme_before = README.read_text()
    generate_report.main([str(results / "2026-12-02-h200-generate.json"), "--doc", str(doc)])
    dynamic_report.main([str(results / "2026-12-01-h200-dynamic-shapes.json"), "--doc", str(doc),
                         "--no-chart"])
    conv_report.main([str(results / "2026-12-01-h200-conv-families.json"), "--doc", str(doc)])
    models_report.main([str(results / "2026-12-03-h200-coverage-models.json"), "--doc", str(doc)])
    text = doc.read_text()
    assert README.read_text() == readme_before  # only docs/performance.md moves the README
    assert "\nold\n" not in text and text.startswith("# t\nbefore generate\n")
    for b in doc_tables.blocks(text):
        assert b.sources == (f"benchmarks/results/{b.sources[0].rsplit('/', 1)[1]}",)
        assert b.body == doc_tables.render(b.name, b.sources, doc)
        assert f"after {b.name}" in text
    assert "[2026-12-01-h200-dynamic-shapes.json](" in text


def test_a_block_that_is_missing_or_twice_is_refused(tmp_path):
    doc = _tmp_doc(tmp_path, "generate", "generate")
    src = ROOT / "benchmarks" / "results" / "2026-12-02-h200-generate.json"
    with pytest.raises(SystemExit, match="found 2"):
        doc_tables.update(doc, "generate", [src])
    with pytest.raises(SystemExit, match="found 0"):
        doc_tables.update(doc, "dynamic", [src])
    with pytest.raises(SystemExit, match="no renderer"):
        doc_tables.render("nope", (), doc)


def test_check_finds_a_hand_edited_table():
    readme, perf = README.read_text(), PERFORMANCE.read_text()
    assert doc_tables.differences(README, readme, perf) == []
    edited = readme.replace("| mlp-decode (16x1 tokens) | 0.0744 ms",
                            "| mlp-decode (16x1 tokens) | 0.0700 ms")
    assert edited != readme
    assert doc_tables.differences(README, edited, perf) == [
        "README.md: block summary: its text differ from what `python benchmarks/doc_tables.py` "
        "writes"]
    # a new results file behind a performance table: the README's table must follow it
    moved = perf.replace("2026-12-04-h200-conv-peers.json -->",
                         "2026-12-01-h200-conv-families.json -->")
    assert moved != perf
    assert "block summary: its sources" in doc_tables.differences(README, readme, moved)[0]


def test_summary_table_reads_every_kind_of_results_file():
    text = doc_tables.summary_table(
        ("benchmarks/results/2026-11-30-43ce7b7.json",
         "benchmarks/results/2026-12-02-h200-generate.json",
         "benchmarks/results/2026-12-01-h200-conv-resnet18.json"), README)
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert [r.split(" | ")[0] for r in rows][:2] == ["| mlp-prefill (8x512 tokens, d=4096, "
                                                     "f=16384)", "| mlp-decode (16x1 tokens)"]
    assert not any("resnet50" in r for r in rows)  # a model aotpack did not run is left out
    gen = next(r for r in rows if r.startswith("| llama32_1b decode (prompt 128, batch 1 / 8)"))
    assert "911 tok/s / 6855 tok/s" in gen and "730 tok/s" in gen and "1.25× / 2.68×" in gen
    conv = next(r for r in rows if r.startswith("| resnet18 (224², batch 1 / 32)"))
    assert "0.335 ms / 0.796 ms" in conv and f"/ {0.8376 / 0.7965:.2f}×" in conv
    assert "gpt2 max-autotune (timeout)" in text


def test_summary_leaves_out_peer_rows_timed_under_load(tmp_path):
    """A conv peer row flagged upper_bound (host-bound, timed while other processes compiled)
    gives no speed-up in the README: with MobileNetV3's max-autotune rows at batch 1 and 32
    taken out, it keeps batch 128 only (the flagged AOTInductor rows are no peer), and
    ConvNeXt-T's batch 1 is against max-autotune, not the flagged AOTInductor."""
    import json

    data = json.loads((doc_tables.ROOT / "benchmarks/results/"
                       "2026-12-04-h200-conv-peers-families.json").read_text())
    data["rows"] = [r for r in data["rows"] if not (
        r["model"] == "mobilenet_v3_large" and r["batch"] < 128 and r["contender"] == "compile")]
    assert any(r["model"] == "mobilenet_v3_large" and r["batch"] == 1 and r.get("upper_bound")
               for r in data["rows"])
    src = tmp_path / "conv.json"
    src.write_text(json.dumps(data))
    text = doc_tables.summary_table((str(src),), README)
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    mbv3 = next(r for r in rows if r.startswith("| mobilenet_v3_large"))
    assert mbv3.startswith("| mobilenet_v3_large (224², batch 128) | 2.05 ms |")
    convnext = next(r for r in rows if r.startswith("| convnext_tiny (224², batch 1 / 32 / 128)"))
    assert "0.781 ms (torch.compile max-autotune) / 2.40 ms (AOTInductor)" in convnext


# ---------------------------------------------------------------------------------- links

def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _no_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    for line in _no_fences(path.read_text()).splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = _slug(m[1])
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path):
    """Relative link targets, outside code."""
    prose = re.sub(r"`[^`\n]*`", "", _no_fences(path.read_text()))
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if not re.match(r"[a-z]+:", target):
            yield target


def _broken(path: Path) -> list[str]:
    bad = []
    for target in _links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor}")
    return bad


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(path):
    assert _broken(path) == []


def test_the_link_check_sees_a_missing_file_and_heading(tmp_path):
    (tmp_path / "b.md").write_text("# B\n## Run `aotpack-run`: the launcher\n")
    page = tmp_path / "a.md"
    page.write_text("# A, the page\n[ok](b.md) [ok](b.md#run-aotpack-run-the-launcher) "
                    "[ok](#a-the-page) [web](https://example.com/x) `[code](nope.md)`\n"
                    "[gone](nope.md) [bad anchor](b.md#nope) [self](#nope)\n"
                    "```\n[fenced](nope.md)\n```\n")
    assert _broken(page) == ["nope.md: no such file", "b.md#nope: no heading #nope",
                             "#nope: no heading #nope"]


def test_the_readme_links_the_docs_it_names():
    links = set(_links(README))
    for doc in ("docs/architecture.md", "docs/performance.md", "docs/manifest.md",
                "docs/onnx.md", "docs/dynamic-shapes.md", "docs/precision.md"):
        assert doc in links, doc


# ------------------------------------------------------------------------------- claims

def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_readme_environment_variables_are_the_ones_the_code_reads():
    from aotpack import knobs

    section = _section(README.read_text(), "Environment variables")
    named = set(re.findall(r"`((?:AOTPACK|TRITON)_[A-Z_]+)`", section))
    runtime = set()  # getenv("AOTPACK_...") and weight_stream's env_in("AOTPACK_...", ...)
    for src in (ROOT / "runtime_cpp" / "src").rglob("*.[ch]pp"):
        runtime |= set(re.findall(r'(?:getenv|env_in)\("(AOTPACK_[A-Z_]+)"', src.read_text()))
    assert runtime, "the C runtime's environment reads moved: update this test"
    assert named == {k.name for k in knobs.ALL} | runtime
    for k in knobs.ALL:  # each knob's default as knobs.py has it
        if k.name == "AOTPACK_CACHE_DIR":
            assert "`~/.cache/aotpack`" in section
        elif k.default:
            assert re.search(rf"`{k.name}` \|.*\| `{k.default}` \|", section), k.name


def test_readme_says_what_ci_installs():
    ci = (ROOT / ".ci" / "run").read_text()
    section = _section(README.read_text(), "Install")
    extras = re.search(r"pip install -e '(\.\[[a-z,]+\])'", ci)[1]
    torch = re.search(r"pip install (torch==[\d.]+)", ci)[1]
    assert f"pip install -e '{extras}'" in section and f"`{torch}`" in section
    for apt in re.search(r"apt-get install -y -qq ([\w\- ]+?) >", ci)[1].split():
        assert apt in section, apt
