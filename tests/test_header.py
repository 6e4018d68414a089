"""The launcher's header (``polymap emit --header``, ``Kernel.header``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import polymap
from polymap.cli import main
from polymap.errors import CudaCompileError
from polymap.runtime.host import build_library

ROOT = Path(__file__).resolve().parents[1]
# every kind of launcher argument: in, an in scalar (by value), out, inout, sizes; and a
# program-wide temporary (the launcher's own)
PROGRAM = """
param M, N
in A: f32[M, N]
in s: f32
inout acc: f32[M]
new T: f32[M, N]
out B: i32[N]
par M i { par N j { T[i, j] = A[i, j] * s } }
par M i { seq N j { acc[i] += T[i, j] } }
par N j { B[j] = j }
"""


@pytest.fixture(scope="module")
def kernel():
    return polymap.compile(polymap.parse(PROGRAM, name="every_kind"))


def test_the_header_describes_every_argument(kernel):
    text = kernel.header("every_kind.cu")
    assert f"int {kernel.launcher}(" in text
    for line in (
        "in A: f32[M, N]: read",
        "    float s,  // in s: f32[]: read, passed by value",
        "inout acc: f32[M]: read and written",
        "out B: i32[N]: written; the caller zeroes it first",
        "size M (the kernels are proved for every size >= 1)",
        "the stream the kernels run on",
        "// The launcher allocates the program's temporaries on the stream and frees them there:\n//   new T: f32[M, N]",
    ):
        assert line in text, line
    assert text.count("cudaStream_t stream") == 1
    prototype = text[text.index(f"int {kernel.launcher}(") :]
    assert " T," not in prototype  # the temporary is the launcher's, not a parameter


def test_the_emitted_file_agrees_with_its_header(kernel):
    """A C++ compiler refuses a C function declared twice with other parameters: the file
    compiled with its header included is the check that the two agree."""
    header = kernel.header()
    build_library(header + "\n" + kernel.source, "header_check")
    wrong = header.replace("    int M,", "    long M,")
    assert wrong != header
    with pytest.raises(CudaCompileError, match="conflicting declaration|conflicting types"):
        build_library(wrong + "\n" + kernel.source, "header_check_wrong")


def test_emit_writes_the_header_next_to_the_source(tmp_path, capsys):
    source, header = tmp_path / "k.cu", tmp_path / "k.h"
    model = ROOT / "models" / "gemv.te"
    assert main(["emit", str(model), "-o", str(source), "--header", str(header), "-q"]) == 0
    assert f"header {header}" in capsys.readouterr().out
    kernel = polymap.compile(polymap.load(model))
    assert header.read_text() == kernel.header("k.cu")
    assert "the launcher of k.cu" in header.read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_cuda_program_calls_the_launcher_through_the_header(kernel, tmp_path):
    (tmp_path / "every_kind.cu").write_text(kernel.source)
    (tmp_path / "every_kind.h").write_text(kernel.header("every_kind.cu"))
    (tmp_path / "main.cu").write_text(
        '#include "every_kind.h"\n'
        "int main() {\n"
        "  float *A, *acc; int *B;\n"
        "  cudaMalloc(&A, 4); cudaMalloc(&acc, 4); cudaMalloc(&B, 4);\n"
        f"  return {kernel.launcher}(A, 2.0f, acc, B, 1, 1, 0) != 0;\n"
        "}\n"
    )
    for args in (["-c", "every_kind.cu", "-o", "k.o"], ["main.cu", "k.o", "-o", "main"]):
        done = subprocess.run(["nvcc", "-arch=sm_90", *args], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_emit_refuses_outputs_that_would_overwrite_the_program_or_each_other(tmp_path, capsys):
    program = tmp_path / "copy.te"
    program.write_text("param N = 8\nin A: f32[N]\nout B: f32[N]\npar N i { B[i] = A[i] }\n")
    text = program.read_text()
    source = tmp_path / "copy.cu"
    cases = [
        (["-o", str(source), "--header", str(source)], "--header"),
        (["-o", str(source), "--header", str(program)], "the program"),
        (["-o", str(program)], "the program"),
        (["-o", str(source), "--header", str(tmp_path / "missing" / "copy.h")], "no folder"),
        (["-o", str(source), "--header", str(tmp_path)], "is not a file name"),
    ]
    for options, message in cases:
        assert main(["emit", str(program), "-q", *options]) != 0
        assert message in capsys.readouterr().err, options
        assert program.read_text() == text and not source.exists(), options  # nothing written


def test_names_that_are_macros_in_gnu_mode_are_renamed(tmp_path):
    """g++'s GNU mode (nvcc's host pass, most C++ projects) defines ``linux`` and ``unix`` as
    1: buffers of those names are renamed, so the header and the file compile there too."""
    from polymap.runtime.host import HEADER, compiler

    program = polymap.parse(
        "param N = 8\nin linux: f32[N]\nout unix: f32[N]\npar N i { unix[i] = linux[i] }\n", name="gnu"
    )
    kernel = polymap.compile(program)
    (tmp_path / "gnu.h").write_text(kernel.header())
    (tmp_path / "gnu.cu").write_text('#include "gnu.h"\n' + kernel.source)
    for mode in ("-std=gnu++20", "-std=c++20"):
        done = subprocess.run(
            [compiler(), mode, "-fsyntax-only", "-x", "c++", "-include", str(HEADER), "gnu.cu"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (mode, done.stderr)


SCALARS = """
param N
in x: f32[N]
in h: f16
in b: bf16
in d: f64
in c: i8
in u: u8
in k: i32
in w: i64
in z: bool
out y: f64[N]
par N i { y[i] = x[i] * h + b + d + c + u + k + w + z }
"""


def test_input_scalars_of_every_type_come_by_value_and_run_as_the_reference():
    """Each scalar type is passed in its C storage type (16-bit floats as their bits, bool
    as a byte); a wrong width or a float passed for its bits would change the sums."""
    import numpy as np

    kernel = polymap.compile(polymap.parse(SCALARS, name="scalars"))
    parameters = kernel.header()
    for text in (
        "unsigned short h,",
        "unsigned short b,",
        "double d,",
        "signed char c,",
        "unsigned char u,",
        "int k,",
        "long long w,",
        "unsigned char z,",
    ):
        assert text in parameters, text
    x = np.arange(5, dtype=np.float32)
    scalars = {"h": 1.5, "b": -2.0, "d": 0.25, "c": -3, "u": 200, "k": 70000, "w": 2**40, "z": True}
    got = kernel.run_host(x=x, **scalars)["y"]
    want = polymap.reference(kernel.program, x=x, **scalars)["y"]
    np.testing.assert_array_equal(got, want)
    # by hand: x * 1.5 - 2 + 0.25 - 3 + 200 + 70000 + 2^40 + 1
    np.testing.assert_array_equal(got, x.astype(np.float64) * 1.5 + (70196.25 + 2.0**40))


NEGATIVE = """
param N
in A: f32[N]
new T: f32[N - 2]
out r: f32[N]
par N - 2 i { T[i] = A[i] + A[i + 1] }
par N - 2 i { r[i] = T[i] }
"""
SUM = "param N\nin s: f16\nin x: f32[N]\nout r: f32\nseq N k { r += x[k] * s }\n"


def test_two_emitted_files_link_into_one_host_program_and_a_negative_temporary_is_refused(tmp_path):
    """A C++ program calls two launchers (the host emulation's fault word is one inline
    variable, not one definition per file); ``new T: f32[N - 2]`` at N = 1 returns
    POLYMAP_ERROR_CONTEXT instead of allocating a negative count; at N = 6 it runs."""
    from polymap.runtime.host import HEADER, compiler

    for name, text in (("neg", NEGATIVE), ("dot", SUM)):
        kernel = polymap.compile(polymap.parse(text, name=name))
        (tmp_path / f"{name}.cu").write_text(kernel.source)
        (tmp_path / f"{name}.h").write_text(kernel.header(f"{name}.cu"))
    (tmp_path / "main.cu").write_text(
        '#include <cstdio>\n#include "neg.h"\n#include "dot.h"\n'
        "int main() {\n"
        "  float A[6] = {0, 1, 2, 3, 4, 5}, r[6] = {0}, x[2] = {1, 2}, d = 0;\n"
        "  if (run_neg(A, r, 1, 0) != POLYMAP_ERROR_CONTEXT) return 10;\n"
        "  if (run_neg(A, r, 6, 0) != 0) return 11;\n"
        "  if (run_dot(0x4000, x, &d, 2, 0) != 0) return 12;  // s = 2.0 as f16 bits\n"
        '  printf("%g %g %g %g %g\\n", r[0], r[1], r[2], r[3], d);\n'
        "  return 0;\n}\n"
    )
    build = [compiler(), "-std=c++20", "-pthread", "-x", "c++", "-include", str(HEADER)]
    done = subprocess.run(
        [*build, "main.cu", "neg.cu", "dot.cu", "-o", "main"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    ran = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, (ran.returncode, ran.stderr)
    assert ran.stdout.split() == ["1", "3", "5", "7", "6"]  # A[i] + A[i + 1]; 2 * (1 + 2)
