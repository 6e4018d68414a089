"""The documentation cannot rot: its examples are executed.

Every ```te block of README.md and docs/*.md must parse and pass the polyhedral analysis;
every ```te-error block starts with '# error: ErrorClass' and must raise exactly that class;
every ```python block of README.md runs (from the repository root); every ```toml block is
a GPU target file that loads.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from polymap import errors
from polymap.ir.parse import parse
from polymap.poly.affinity import analyze_binding_defaults
from polymap.poly.model import analyze

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(tag: str) -> list:
    """A pytest param (doc:line, text) for every fenced ```<tag> block of the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in re.finditer(
            rf"^```{re.escape(tag)}[ \t]*\n(.*?)^```[ \t]*$", text, re.MULTILINE | re.DOTALL
        ):
            where = f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            found.append(pytest.param(where, match.group(1), id=where))
    return found


def test_the_docs_have_examples():
    assert len(blocks("te")) >= 10 and len(blocks("te-error")) >= 4 and blocks("python")


@pytest.mark.parametrize("where,text", blocks("te"))
def test_te_example_is_a_valid_program(where, text):
    analyze_binding_defaults(parse(text, source=where))


@pytest.mark.parametrize("where,text", blocks("te-error"))
def test_te_error_example_fails_as_stated(where, text):
    match = re.fullmatch(r"#\s*error:\s*(\w+).*", text.splitlines()[0])
    assert match, f"{where}: a te-error block starts with '# error: ErrorClass'"
    expected = getattr(errors, match.group(1))
    with pytest.raises(errors.PolymapError) as err:
        analyze(parse(text, source=where))
    assert type(err.value) is expected, f"{where}: got {type(err.value).__name__}: {err.value}"


@pytest.mark.parametrize("where,text", blocks("python"))
def test_python_example_runs(where, text, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(text, where, "exec"), {"__name__": "__doc_example__"})


@pytest.mark.parametrize("where, text", blocks("toml"))
def test_toml_examples_are_gpu_targets_that_load(where, text, tmp_path):
    from polymap.targets import GpuTarget

    path = tmp_path / "target.toml"
    path.write_text(text)
    target = GpuTarget.from_toml(path)
    assert target.name and target.sm_count > 0, where


def test_the_cpp_example_builds_against_its_header_and_runs(tmp_path):
    """docs/codegen.md's C++ caller: the ```te block before it emitted with its header by
    ``polymap emit``, both built with the host emulation's header and run; the sums of
    0.5 * (1..4), 0.5 * (5..8) and 0.5 * (9..12) worked by hand."""
    import subprocess

    from polymap.cli import main
    from polymap.runtime.host import HEADER, compiler

    text = (ROOT / "docs" / "codegen.md").read_text()
    (program,) = [b.values[1] for b in blocks("te") if b.values[1].startswith("# scaled_sums.te")]
    (caller,) = [b.values[1] for b in blocks("cpp") if '#include "scaled_sums.h"' in b.values[1]]
    assert "scaled_sums.te -o scaled_sums.cu --header scaled_sums.h" in text
    (tmp_path / "scaled_sums.te").write_text(program)
    (tmp_path / "main.cu").write_text(caller)
    emitted = [str(tmp_path / "scaled_sums.te"), "-o", str(tmp_path / "scaled_sums.cu")]
    assert main(["emit", *emitted, "--header", str(tmp_path / "scaled_sums.h"), "-q"]) == 0
    build = [compiler(), "-std=c++20", "-pthread", "-x", "c++", "-include", str(HEADER)]
    done = subprocess.run(
        [*build, "main.cu", "scaled_sums.cu", "-o", "main"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    ran = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n") == ["r[0] = 5", "r[1] = 13", "r[2] = 21", ""]


ROOFLINE_MODELS = ("axpy", "gemv", "transpose", "matmul_1024", "softmax_rows")


def _draw_transpose(path):
    from polymap import load, optimize
    from polymap.plot import plot_mapping

    return plot_mapping(optimize(load(ROOT / "models" / "transpose.te")), path)


def _draw_roofline(path):
    from polymap import load, optimize
    from polymap.plot import plot_roofline

    drawn = [(name, optimize(load(ROOT / "models" / f"{name}.te"))) for name in ROOFLINE_MODELS]
    return plot_roofline(drawn, path)


PICTURES = {"pictures/transpose-mapping.png": _draw_transpose, "pictures/roofline.png": _draw_roofline}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_the_docs_pictures_are_drawn_by_the_code_they_describe(picture, tmp_path):
    """docs/mapping.md shows each picture; this draws it with the functions ``--plot`` calls.
    With POLYMAP_REGEN_PICTURES=1 the drawing replaces the committed file; otherwise the
    committed file must have the size of a fresh drawing (a kernel or an access more or less
    changes it), so a picture that no longer matches the code fails here."""
    import os
    import shutil

    docs = (ROOT / "docs" / "mapping.md").read_text()
    assert f"]({picture})" in docs
    fresh = PICTURES[picture](tmp_path / Path(picture).name)
    committed = ROOT / "docs" / picture
    if os.environ.get("POLYMAP_REGEN_PICTURES"):
        committed.parent.mkdir(exist_ok=True)
        shutil.copyfile(fresh, committed)
    assert committed.is_file(), f"docs/{picture} is missing: run with POLYMAP_REGEN_PICTURES=1"
    assert _png_size(committed.read_bytes()) == _png_size(fresh.read_bytes())
