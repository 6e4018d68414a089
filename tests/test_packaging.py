"""What a non-editable install (``pip install .``, a wheel) ships: every package of the source
tree and every CUDA template, as ``pyproject.toml`` lists them by hand."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from polymap.codegen import cuda

tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_source_tree_is_listed():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "polymap").rglob("__init__.py")}
    listed = set(_setuptools()["packages"])
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found == {"polymap.cuda_templates"}


def test_every_template_ships_inside_the_package():
    config = _setuptools()
    folder = ROOT / config["package-dir"]["polymap.cuda_templates"]
    patterns = config["package-data"]["polymap.cuda_templates"]
    templates = [p.name for p in folder.iterdir() if p.is_file()]
    assert templates, "no templates found"
    for name in templates:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), f"{name} would not ship"


def test_the_templates_are_found_inside_an_installed_package_first(tmp_path, monkeypatch):
    package = tmp_path / "polymap"
    (package / "codegen").mkdir(parents=True)
    (package / "cuda_templates").mkdir()
    monkeypatch.setattr(cuda, "__file__", str(package / "codegen" / "cuda.py"))
    assert cuda._templates_folder() == (package / "cuda_templates").resolve()
    (package / "cuda_templates").rmdir()
    assert cuda._templates_folder() == (tmp_path / "cuda_templates").resolve()
