"""What a non-editable install (``pip install .``, a wheel) ships: every package of the source
tree and every CUDA template, as ``pyproject.toml`` lists them by hand."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
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


def _copy_source(to: Path) -> Path:
    """The files a build reads, copied (a build writes ``build/`` and ``*.egg-info`` next to
    its source: the checkout stays untouched, and parallel test runs do not meet)."""
    skip = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "docs")
    return Path(shutil.copytree(ROOT, to, ignore=skip))


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None, reason="no host C++ compiler"
)
def test_a_built_wheel_installed_in_a_fresh_venv_runs_a_model(tmp_path):
    """The wheel ``pip wheel .`` builds, installed (without its dependencies, which the
    fresh venv borrows from this one's site-packages) into a venv of its own: the console
    script compiles a model from the installed package's templates, runs it on the host and
    checks it against the reference, far from the source tree."""
    source = _copy_source(tmp_path / "src")
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("polymap-*.whl")
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    python = fresh / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the dependencies: this environment's site-packages as a plain path (its own .pth
    # files, this checkout's editable install among them, are not read from there)
    deps = [p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "islpy").is_dir()]
    assert deps, "islpy's site-packages not found"
    (site / "deps.pth").write_text(f"{deps[0]}\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run(
        [str(python), "-c", "import polymap; print(polymap.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), where
    model = tmp_path / "axpy.te"
    model.write_text((ROOT / "models" / "axpy.te").read_text())
    env = {**os.environ, "POLYMAP_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(fresh / "bin" / "polymap"), "run", str(model), "--host", "--size", "N=1000"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "z: max abs error 0.0e+00" in run.stdout and ", OK" in run.stdout, run.stdout
