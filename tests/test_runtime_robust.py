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
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.codegen.cuda import ERROR_CONTEXT, ERROR_GRID
from polymap.errors import ArgumentError
from polymap.runtime.faults import ERROR_FAULT, fault_error, records_faults

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
