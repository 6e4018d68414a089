"""``assume`` (issue 13): the sizes a program is valid for, stated in the program. They are
the context of every proof and of the mapping, every run checks them (the reference, the
host run, ``bind``), and the reports say the proofs hold under them."""

from __future__ import annotations

import numpy as np
import pytest

import polymap
from polymap.errors import (
    ArgumentError,
    BoundsError,
    NotAffineError,
    ParseError,
    ProgramError,
    UndeclaredError,
)
from polymap.ir.parse import parse
from polymap.reference import reference

# A[i, K - M + i] is in bounds only where K >= M: the proof needs the assumption
DIAGONAL = """param M, K
assume K >= M and K % 4 == 0
in A: f32[M, K]
out y: f32[M]
par M i {
  y[i] = A[i, K - M + i]
}
"""


def test_the_bounds_proof_holds_under_the_assumption_and_fails_without_it():
    with pytest.raises(BoundsError):
        polymap.analyze(parse(DIAGONAL.replace("assume K >= M and K % 4 == 0\n", "")))
    program = parse(DIAGONAL, name="diag")
    model = polymap.analyze(program)
    assert model.context.is_equal(model.context.intersect(model.context))  # a set, and:
    assert str(model.context).count("mod 4") == 1 and "K >= M" in str(model.context)
    assert parse(str(program), name="diag") == program  # the printed text reads back


def test_a_run_at_assumed_sizes_equals_the_reference_and_the_report_names_the_assumption():
    program = parse(DIAGONAL, name="diag")
    kernel = polymap.compile(program)
    a = np.arange(3 * 8, dtype=np.float32).reshape(3, 8)
    np.testing.assert_array_equal(kernel.run_host(A=a)["y"], [5, 14, 23])
    np.testing.assert_array_equal(reference(program, A=a)["y"], [5, 14, 23])
    report = str(kernel.mapping)
    assert "proved by isl for every size >= 1 with K >= M and K % 4 == 0" in report
    assert "proved for every size >= 1 with K >= M and K % 4 == 0" in kernel.source


@pytest.mark.parametrize("shape", [(3, 6), (5, 4)])  # K % 4 != 0; K < M
def test_sizes_that_violate_an_assumption_are_an_error_of_every_run_naming_its_line(shape):
    program = parse(DIAGONAL, name="diag", source="diag.te")
    a = np.zeros(shape, np.float32)
    for run in (lambda: reference(program, A=a), lambda: polymap.compile(program).run_host(A=a)):
        with pytest.raises(
            ArgumentError, match=r"diag.te:2:1: the sizes M = \d, K = \d violate 'assume K >= M"
        ):
            run()
    with pytest.raises(ArgumentError, match=r"violate 'assume K >= M and K % 4 == 0'"):
        program.bind(M=shape[0], K=shape[1])


def test_binding_some_sizes_keeps_what_the_others_must_satisfy():
    program = parse(DIAGONAL, name="diag").bind(K=8)
    assert [str(a) for a in program.assumptions] == ["assume 8 >= M"]  # 8 % 4 == 0 is settled
    with pytest.raises(ArgumentError, match=r"M = 9 violate 'assume 8 >= M'"):
        program.bind(M=9)


@pytest.mark.parametrize(
    "text, cls, message",
    [
        (
            "param N\nout y: f32[N]\npar N i { assume N > 2 }",
            ParseError,
            r"3:11: 'assume' .* belongs at top level",
        ),
        ("param N\nassume i > 2\nout y: f32[N]", UndeclaredError, r"2:8: unknown name 'i' in an assumption"),
        ("param N\nassume N\nout y: f32[N]", ProgramError, r"2:8: 'assume' takes a condition on the sizes"),
        ("param N\nassume N + 1.5 > 2\nout y: f32[N]", NotAffineError, r"must be an integer expression"),
        ("param N, M\nassume N * M > 2\nout y: f32[N]", NotAffineError, r"is not quasi-affine"),
        ("param N\nassume N < 1\nout y: f32[N]", ProgramError, r"2:1: 'assume N < 1' admits no sizes"),
    ],
)
def test_a_bad_assumption_is_an_error_at_its_position(text, cls, message):
    with pytest.raises(cls, match=message):
        polymap.analyze(parse(text, source="t.te"))


def test_defaults_that_violate_an_assumption_are_an_error_at_the_default():
    with pytest.raises(
        polymap.errors.DeclarationError, match=r"t.te:1:7: the defaults N = 8 violate 'assume N < 4'"
    ):
        parse("param N = 8\nassume N < 4\nout y: f32[N]", source="t.te")
    program = parse(DIAGONAL.replace("param M, K", "param M, K = 256"), name="diag")
    with pytest.raises(ArgumentError, match=r"the sizes M = 300, K = 256 violate 'assume K >= 300"):
        program.bind(M=300).bind(K=256)  # the message names every size bound, not the last only
