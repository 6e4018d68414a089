"""The runtimes against hostile data and a damaged cache (issue 14, items 3 and 9).

An i32 division by zero in the data is the reference executor's ArgumentError, never a
SIGFPE that kills the process (it ran in the test process: on the old code this file
dies); INT_MIN / -1 wraps as in the reference. Every expected value comes from the
reference executor.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.codegen.cuda import ERROR_CONTEXT, ERROR_GRID
from polymap.errors import ArgumentError
from polymap.runtime import cache
from polymap.runtime.faults import ERROR_FAULT, fault_error, records_faults
from polymap.runtime.host import build_library

INT_MIN = np.iinfo(np.int32).min

DIVIDE = """\
param N
in a: i32[N]
in b: i32[N]
out c: i32[N]
out d: i32[N]
par N i {
  c[i] = a[i] + b[i]
  d[i] = 7 * a[i] / b[i] - 1
}
"""

# the division runs in kernels launched inside a host loop: the launcher goes on after
# the fault and reports it once at the end
STEPS = """\
param T
param N
in b: i32[N]
inout x: i32[N]
seq T t {
  par N i {
    x[i] = x[i] / b[i] + t
  }
}
"""


def _reference_error(program, **inputs) -> ArgumentError:
    with pytest.raises(ArgumentError) as caught:
        polymap.reference(program, **inputs)
    return caught.value


def _i32(*values) -> np.ndarray:
    return np.array(values, dtype=np.int32)


@pytest.fixture(scope="module")
def divide():
    program = polymap.parse(DIVIDE, name="divide")
    return program, polymap.compile(program)


def test_division_by_zero_is_the_references_error_and_the_process_survives(divide):
    program, kernel = divide
    inputs = {"a": _i32(7, -7, 3, 1, 9), "b": _i32(2, 2, 0, 5, 0)}
    want = _reference_error(program, **inputs)
    with pytest.raises(ArgumentError) as caught:
        kernel.run_host(**inputs)
    assert str(caught.value) == str(want)  # same statement, same line:col and caret
    assert re.search(r"statement S1 \(d\[i\] = .*\): i32 division by zero at run time", str(caught.value))
    assert caught.value.loc is not None and caught.value.loc.line == 8


def test_int_min_divided_by_minus_one_wraps_as_in_the_reference(divide):
    program, kernel = divide
    # 7 * INT_MIN wraps to INT_MIN; INT_MIN / -1 wraps to INT_MIN (x86 idiv traps on it)
    inputs = {"a": _i32(INT_MIN, INT_MIN, -INT_MIN - 1, 5), "b": _i32(-1, 1, -1, -1)}
    want = polymap.reference(program, **inputs)
    got = kernel.run_host(**inputs)
    assert want["d"][0] == INT_MIN - 1 + 2**32  # INT_MIN / -1 - 1 wraps to INT_MAX
    for name in ("c", "d"):
        np.testing.assert_array_equal(got[name], want[name])


def test_ordinary_division_truncates_like_the_reference_and_a_fault_does_not_stick(divide):
    program, kernel = divide
    with pytest.raises(ArgumentError):
        kernel.run_host(a=_i32(1, 2, 3), b=_i32(1, 0, 1))
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, 257).astype(np.int32)
    b = rng.integers(1, 13, 257).astype(np.int32) * rng.choice(_i32(-1, 1), 257)
    got, want = kernel.run_host(a=a, b=b), polymap.reference(program, a=a, b=b)
    for name in ("c", "d"):
        np.testing.assert_array_equal(got[name], want[name])


def test_a_fault_inside_a_host_loop_is_reported():
    program = polymap.parse(STEPS, name="steps").bind(T=3)
    kernel = polymap.compile(program)
    inputs = {"b": _i32(1, 2, 0, 3), "x": _i32(5, 6, 7, 8)}
    with pytest.raises(ArgumentError) as caught:
        kernel.run_host(**inputs)
    assert str(caught.value) == str(_reference_error(program, **inputs))
    good = {"b": _i32(1, 2, -1, 3), "x": _i32(5, 6, 7, 8)}
    np.testing.assert_array_equal(kernel.run_host(**good)["x"], polymap.reference(program, **good)["x"])


def test_only_sources_that_divide_i32_values_record_faults(divide):
    _, kernel = divide
    assert records_faults(kernel.source)
    floats = polymap.compile(polymap.parse(DIVIDE.replace("i32", "f32"), name="fdivide"))
    assert "pm_idiv(" not in floats.source.split("// polymap helpers")[0]
    assert not records_faults(floats.source)


def test_the_launchers_fault_code_is_the_one_the_runtime_reads():
    header = (Path(polymap.__file__).parents[1] / "cuda_templates" / "polymap_helpers.cuh").read_text()
    assert f"#define POLYMAP_ERROR_FAULT ({ERROR_FAULT})" in header
    assert ERROR_FAULT not in (ERROR_CONTEXT, ERROR_GRID) and ERROR_FAULT < 0  # CUDA errors are > 0


def test_a_fault_word_that_names_no_division_still_names_the_program(divide):
    _, kernel = divide
    error = fault_error(kernel.cuda, 1)  # line 1 is the title comment
    assert "program 'divide': i32 division by zero at run time" in str(error)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_emitted_files_compile_with_nvcc_and_link_into_one_program(divide, tmp_path: Path):
    """The launcher (fenced from NVRTC) with its fault check compiles under nvcc, and two
    emitted files link together: the fault word is per file."""
    _, kernel = divide
    other = polymap.compile(polymap.parse(DIVIDE, name="divide_again"))
    (tmp_path / "a.cu").write_text(kernel.source)
    (tmp_path / "b.cu").write_text(other.source)
    (tmp_path / "main.cu").write_text(
        "#include <cstdio>\n"
        f'extern "C" int {kernel.launcher}(const int*, const int*, int*, int*, int, cudaStream_t);\n'
        f'extern "C" int {other.launcher}(const int*, const int*, int*, int*, int, cudaStream_t);\n'
        f'int main() {{ std::printf("%d\\n", {kernel.launcher} != {other.launcher}); return 0; }}\n'
    )
    for name, flags in (("a", []), ("b", ["-DPOLYMAP_NO_FAULT_CHECK"])):
        _nvcc(tmp_path, *flags, "-c", f"{name}.cu", "-o", f"{name}.o")
    _nvcc(tmp_path, "main.cu", "a.o", "b.o", "-o", "main")


def _nvcc(folder: Path, *args: str) -> None:
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", *args], cwd=folder, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------- the kernel cache


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """One cache folder for these tests (the precompiled header is built once)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYMAP_CACHE_DIR", str(root))
        yield root


def _fresh(tag: str):
    """A program no other test built: its library is not mapped into this process, so
    damaging the file on disk cannot pull pages from under a loaded library."""
    program = polymap.parse(DIVIDE, name=f"cached_{tag}")
    kernel = polymap.compile(program)
    return program, kernel, build_library(kernel.source, kernel.launcher)


def _check_runs(program, kernel) -> None:
    inputs = {"a": _i32(7, -7, 3, 1, 9), "b": _i32(2, 2, -3, 5, 4)}
    got, want = kernel.run_host(**inputs), polymap.reference(program, **inputs)
    for name in ("c", "d"):
        np.testing.assert_array_equal(got[name], want[name])


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 256] = b"\xcc" * 256  # same length, different bytes
    path.write_bytes(bytes(data))


def _matching_garbage(path: Path) -> None:
    path.write_bytes(b"\x7fELF but not a library")
    cache.hash_path(path).write_text(cache.digest(path) + "\n")


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "zero_length": lambda p: p.write_bytes(b""),
    "corrupted": _corrupt,
    "hash_deleted": lambda p: cache.hash_path(p).unlink(),
    "hash_garbled": lambda p: cache.hash_path(p).write_text("not a hash"),
    "garbage_with_its_own_hash": _matching_garbage,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_entry_is_rebuilt(cache_root, damage):
    program, kernel, library = _fresh(damage)
    good = library.read_bytes()
    assert cache.is_intact(library)
    DAMAGE[damage](library)
    assert not cache.is_intact(library) or damage == "garbage_with_its_own_hash"
    _check_runs(program, kernel)
    assert library.read_bytes() == good and cache.is_intact(library)


def test_a_damaged_precompiled_header_is_rebuilt(cache_root):
    _fresh("pch_seed")  # builds the precompiled header
    (gch,) = (cache_root / "host").glob("pch-*/polymap_host.h.gch")
    gch.write_bytes(gch.read_bytes()[:1000])  # the compiler would fail every build with it
    program = polymap.parse(DIVIDE, name="cached_after_pch_damage")
    _check_runs(program, polymap.compile(program))
    assert cache.is_intact(gch) and gch.stat().st_size > 1000


def test_concurrent_processes_build_one_entry_safely(cache_root):
    script = (
        "import numpy as np, polymap, sys\n"
        f"p = polymap.parse({DIVIDE!r}, name='cached_concurrent')\n"
        "out = polymap.compile(p).run_host(a=np.arange(1, 9, dtype=np.int32), b=np.full(8, 2, np.int32))\n"
        "sys.stdout.write(' '.join(map(str, out['d'])))\n"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    want = polymap.reference(
        polymap.parse(DIVIDE), a=np.arange(1, 9, dtype=np.int32), b=np.full(8, 2, np.int32)
    )
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert out == " ".join(map(str, want["d"]))
    (library,) = (cache_root / "host").glob("run_cached_concurrent-*.so")
    assert cache.is_intact(library)


def test_an_unwritable_cache_folder_gives_a_writable_temporary_one(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("POLYMAP_CACHE_DIR", str(not_a_folder))
    with pytest.warns(cache.CacheWarning, match=r"is not writable .*caching in .* for this process only"):
        folder = cache.cache_dir()
    assert folder.is_dir() and not folder.is_relative_to(not_a_folder)
    built = tmp_path / "built"
    built.write_bytes(b"library bytes")
    cache.store(folder / "entry.so", built)
    assert cache.is_intact(folder / "entry.so")
    assert cache.cache_dir() == folder  # the same folder for the rest of the process, warned once


@pytest.mark.slow
def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("POLYMAP_CACHE_DIR", str(not_a_folder))
    program = polymap.parse(DIVIDE, name="cached_fallback")
    kernel = polymap.compile(program)
    with pytest.warns(cache.CacheWarning, match=r"is not writable .*caching in .* for this process only"):
        _check_runs(program, kernel)
    assert not_a_folder.read_text() == "a file where the cache folder should be"


# ------------------------------------------------------------------ float -> i32 stores


def test_a_float_stored_into_i32_saturates_and_nan_gives_zero_on_the_host_and_in_the_reference():
    """C leaves an out-of-range float -> int conversion undefined (x86 gives INT_MIN, a GPU
    saturates); polymap defines it as the GPU does, in the emitted code and the reference."""
    from polymap.reference import reference

    program = polymap.parse(
        "param N = 8\nin x: f32[N]\nout y: i32[N]\npar N i { y[i] = x[i] * 2 }", name="sat"
    )
    x = np.array([1e10, -1e10, np.nan, 1.35, -1.35, np.inf, -np.inf, 1073741824.0], np.float32)
    want = np.array([2**31 - 1, -(2**31), 0, 2, -2, 2**31 - 1, -(2**31), 2**31 - 1], np.int32)
    np.testing.assert_array_equal(reference(program, x=x)["y"], want)
    np.testing.assert_array_equal(polymap.compile(program, time_limit=20).run_host(x=x)["y"], want)
