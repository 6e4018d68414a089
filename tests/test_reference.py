"""The NumPy reference executor against NumPy formulas, a naive scalar oracle and isl.

Expected values come from NumPy expressions written here (``@``, ``np.cumsum``, explicit
loops) or from ``tests/oracle.py``, never from the code under test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from oracle import run_oracle

from polymap.errors import ArgumentError
from polymap.ir.parse import parse
from polymap.ir.walk import loops
from polymap.poly.model import analyze
from polymap.reference import execute, reference
from polymap.runtime.arguments import random_inputs

RNG = np.random.default_rng(20240601)


def normal(*shape, dtype=np.float64) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------- programs


@dataclass(frozen=True)
class Case:
    """A program, its sizes, inputs, and the expected outputs from a NumPy formula."""

    id: str
    text: str
    sizes: dict
    inputs: Callable[[], dict]
    expected: Callable[[dict], dict]
    rtol: float = 0.0  # 0: bit-exact

    def program(self):
        return parse(self.text, name=self.id).bind(**self.sizes)


MATMUL = """
param M, N, K
in A: f32[M, K]
in B: f32[K, N]
out C: f32[M, N]
par M i { par N j {
  C[i, j] = 0
  seq K k { C[i, j] += A[i, k] * B[k, j] }
} }
"""

CASES = [
    Case(
        "matmul",
        MATMUL,
        {},
        lambda: {"A": normal(5, 7, dtype=np.float32), "B": normal(7, 6, dtype=np.float32)},
        lambda a: {"C": a["A"] @ a["B"]},
        rtol=1e-5,
    ),
    Case(
        "matmul_epilogue",
        """
        param M, N, K
        in A: f64[M, K]
        in B: f64[K, N]
        in D: f64[M, N]
        out C: f64[M, N]
        par M i { par N j {
          C[i, j] = 0
          seq K k { C[i, j] += A[i, k] * B[k, j] }
          C[i, j] = max(C[i, j] + D[i, j], 0)
        } }
        """,
        {},
        lambda: {"A": normal(4, 3), "B": normal(3, 5), "D": normal(4, 5)},
        lambda a: {"C": np.maximum(a["A"] @ a["B"] + a["D"], 0)},
        rtol=1e-12,
    ),
    Case(
        "lower_triangular_matvec",
        """
        param N
        in L: f64[N, N]
        in x: f64[N]
        out y: f64[N]
        par N i { y[i] = 0; seq i + 1 k { y[i] += L[i, k] * x[k] } }
        """,
        {},
        lambda: {"L": normal(6, 6), "x": normal(6)},
        lambda a: {"y": np.tril(a["L"]) @ a["x"]},
        rtol=1e-12,
    ),
    Case(
        "prefix_sum",
        """
        param N
        in x: f64[N]
        out y: f64[N]
        par N i { seq i + 1 k { y[i] += x[k] } }
        """,
        {},
        lambda: {"x": RNG.integers(-9, 9, 7).astype(np.float64)},  # integers: exact sums
        lambda a: {"y": np.cumsum(a["x"])},
    ),
    Case(
        "triangular_par",  # masked-off lanes compute out-of-bounds indices: j > N - i - 1
        """
        param N
        in X: f64[N, N]
        out Y: f64[N, N]
        par N i {
          par i + 1 j { Y[i, j] = X[i, j] }
          par N - i - 1 j { Y[i, i + j + 1] = -X[i, i + j + 1] }
        }
        """,
        {},
        lambda: {"X": normal(5, 5)},
        lambda a: {"Y": np.tril(a["X"]) - np.triu(a["X"], 1)},
    ),
    Case(
        "imperfect_nest",  # row means, then centering, in one outer par loop
        """
        param M, N
        in A: f64[M, N]
        out s: f64[M]
        out B: f64[M, N]
        par M i {
          s[i] = 0
          seq N j { s[i] += A[i, j] }
          s[i] = s[i] / N
          par N j { B[i, j] = A[i, j] - s[i] }
        }
        """,
        {},
        lambda: {"A": normal(4, 6)},
        lambda a: {"s": a["A"].mean(1), "B": a["A"] - a["A"].mean(1, keepdims=True)},
        rtol=1e-12,
    ),
    Case(
        "flat_transpose",  # quasi-affine: floor division and modulo
        """
        param M, N
        in X: f32[M * N]
        out Y: f32[M * N]
        par M * N p { Y[(p % N) * M + p / N] = X[p] }
        """,
        {"M": 3, "N": 5},
        lambda: {"X": normal(15, dtype=np.float32)},
        lambda a: {"Y": a["X"].reshape(3, 5).T.ravel()},
    ),
    Case(
        "jacobi",  # seq time loop around par loops, through a program-wide temporary
        """
        param T, N
        inout A: f32[N + 1]
        new B: f32[N]
        seq T t {
          par N i { B[i] = (A[i] + A[i + 1]) / 2 }
          par N i { A[i] = B[i] }
        }
        """,
        {"T": 3, "N": 6},
        lambda: {"A": normal(7, dtype=np.float32)},
        lambda a: {"A": _jacobi(a["A"], 3)},
    ),
    Case(
        "softmax_locals",  # block-local 0-d temporaries, one private copy per row
        """
        param M, N
        in X: f64[M, N]
        out Y: f64[M, N]
        par M i {
          new mx: f64
          new s: f64
          mx = X[i, 0]
          seq N j { mx max= X[i, j] }
          s = 0
          seq N j { Y[i, j] = exp(X[i, j] - mx); s += Y[i, j] }
          par N j { Y[i, j] = Y[i, j] / s }
        }
        """,
        {},
        lambda: {"X": normal(4, 5) * 3},
        lambda a: {"Y": np.exp(a["X"]) / np.exp(a["X"]).sum(1, keepdims=True)},
        rtol=1e-12,
    ),
    Case(
        "local_array",  # a block-local vector written and read by inner par loops
        """
        param M, N
        in X: f64[M, N]
        out Y: f64[M, N]
        par M i {
          new t: f64[N]
          par N j { t[j] = X[i, j] * 2 }
          par N j { Y[i, j] = t[N - 1 - j] + i }
        }
        """,
        {},
        lambda: {"X": normal(3, 4)},
        lambda a: {"Y": a["X"][:, ::-1] * 2 + np.arange(3)[:, None]},
    ),
    Case(
        "assign_ops",
        """
        param N
        in X: f32[N]
        inout Y: f32[6, N]
        par N i {
          Y[0, i] = X[i]
          Y[1, i] += X[i]
          Y[2, i] -= X[i]
          Y[3, i] *= X[i]
          Y[4, i] max= X[i]
          Y[5, i] min= X[i]
        }
        """,
        {},
        lambda: {"X": normal(5, dtype=np.float32), "Y": normal(6, 5, dtype=np.float32)},
        lambda a: {
            "Y": np.stack(
                [
                    a["X"],
                    a["Y"][1] + a["X"],
                    a["Y"][2] - a["X"],
                    a["Y"][3] * a["X"],
                    np.maximum(a["Y"][4], a["X"]),
                    np.minimum(a["Y"][5], a["X"]),
                ]
            )
        },
    ),
    Case(
        "functions",
        """
        param N
        in X: f32[N]
        in P: f32[N]
        out Y: f32[8, N]
        par N i {
          Y[0, i] = exp(X[i])
          Y[1, i] = log(P[i])
          Y[2, i] = sqrt(P[i])
          Y[3, i] = tanh(X[i])
          Y[4, i] = abs(X[i])
          Y[5, i] = max(X[i], P[i] - 1)
          Y[6, i] = min(X[i], P[i] - 1)
          Y[7, i] = -X[i] / P[i]
        }
        """,
        {},
        lambda: {"X": normal(6, dtype=np.float32), "P": np.abs(normal(6, dtype=np.float32)) + 0.5},
        lambda a: {
            "Y": np.stack(
                [
                    np.exp(a["X"]),
                    np.log(a["P"]),
                    np.sqrt(a["P"]),
                    np.tanh(a["X"]),
                    np.abs(a["X"]),
                    np.maximum(a["X"], a["P"] - np.float32(1)),
                    np.minimum(a["X"], a["P"] - np.float32(1)),
                    -a["X"] / a["P"],
                ]
            )
        },
        rtol=1e-6,
    ),
    Case(
        "i32_semantics",
        """
        param N
        in A: i32[N]
        in B: i32[N]
        in F: f32[N]
        inout Z: i32[N]
        out Q: i32[N]
        out H: i32[N]
        out G: f64[N]
        out E: f64[N]
        out T: i32[N]
        par N i {
          Q[i] = A[i] / B[i]
          H[i] = A[i] / 2
          G[i] = A[i] + F[i]
          E[i] = exp(B[i])
          T[i] = F[i] * 3
          Z[i] += F[i]
        }
        """,
        {},
        lambda: {
            "A": np.array([-7, 7, -8, 16777217, 5, -1], np.int32),
            "B": np.array([2, -2, 3, 1, 7, -3], np.int32),
            "F": np.array([0.0, -2.6, 2.6, 0.0, -0.4, 1.5], np.float32),
            "Z": np.array([10, -10, 3, 100, 0, 1], np.int32),
        },
        lambda a: {
            # C division truncates toward zero: -7 / 2 == -3, 7 / -2 == -3.
            "Q": np.array([-3, -3, -2, 16777217, 0, 0], np.int32),
            "H": np.array([-3, 3, -4, 8388608, 2, 0], np.int32),
            # i32 + f32 computes in f32 (2**24 + 1 rounds to 2**24), then widens to f64.
            "G": (a["A"].astype(np.float32) + a["F"]).astype(np.float64),
            # exp of an i32 computes in f32.
            "E": np.exp(a["B"].astype(np.float32)).astype(np.float64),
            # f32 stored into i32 truncates toward zero: -7.8 -> -7, 7.8 -> 7.
            "T": np.trunc(a["F"] * np.float32(3)).astype(np.int32),
            "Z": np.trunc(a["Z"].astype(np.float32) + a["F"]).astype(np.int32),
        },
    ),
    Case(
        "i32_division_masked_lanes",  # lanes j >= i (masked off) would divide by zero
        """
        param N
        in X: i32[N, N]
        out Y: i32[N, N]
        par N i { par i j { Y[i, j] = X[i, j] / (i - j) } }
        """,
        {},
        lambda: {"X": RNG.integers(-50, 50, (5, 5)).astype(np.int32)},
        lambda a: {"Y": _below_diagonal_quotients(a["X"])},
    ),
    Case(
        "index_values",
        """
        param M, N
        in W: f64[N]
        out X: f32[N]
        out Z: i32[M, N]
        out V: f64[N]
        par N i { X[i] = i * 2; V[i] = W[i] * i }
        par M i { par N j { Z[i, j] = i - j * 3 } }
        """,
        {"M": 3},
        lambda: {"W": normal(4)},
        lambda a: {
            "X": np.arange(4, dtype=np.float32) * 2,
            "Z": (np.arange(3)[:, None] - 3 * np.arange(4)[None, :]).astype(np.int32),
            "V": a["W"] * np.arange(4),
        },
    ),
    Case(
        "anchor",  # anchors evaluate and discard: the outputs are those of Y = X + 1
        """
        param N
        in X: f32[N]
        out Y: f32[N]
        par N i { anchor X[i] * 2; Y[i] = X[i] + 1; anchor Y[i] }
        anchor 3
        """,
        {},
        lambda: {"X": normal(5, dtype=np.float32)},
        lambda a: {"Y": a["X"] + np.float32(1)},
    ),
    Case(
        "scalars",  # 0-d buffers: a scalar input and a reduction into a scalar output
        """
        param N
        in s: f64
        in X: f64[N]
        out r: f64
        out Y: f64[N]
        seq N i { r += X[i] }
        par N i { Y[i] = X[i] * s }
        """,
        {},
        lambda: {"s": np.float64(2.5), "X": RNG.integers(-9, 9, 6).astype(np.float64)},
        lambda a: {"r": np.array(a["X"].sum()), "Y": a["X"] * 2.5},
    ),
]


def _jacobi(a: np.ndarray, steps: int) -> np.ndarray:
    a = a.copy()
    for _ in range(steps):
        a[:-1] = (a[:-1] + a[1:]) / np.float32(2)
    return a


def _below_diagonal_quotients(x: np.ndarray) -> np.ndarray:
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(i):
            q = abs(int(x[i, j])) // (i - j)  # i - j > 0: truncation toward zero
            y[i, j] = q if x[i, j] >= 0 else -q
    return y


def _equal(got: dict, want: dict, rtol: float = 0.0) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        if rtol:
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=rtol, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def _fully_bound(program, sizes: dict):
    """The program with its remaining sizes bound to the values an execution used."""
    return program.bind(**{name: sizes[name] for name in program.param_names})


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_against_numpy(case: Case) -> None:
    inputs = case.inputs()
    copies = {k: np.copy(v) for k, v in inputs.items()}
    got = reference(case.program(), **inputs)
    _equal(got, case.expected(copies), case.rtol)
    for name, value in inputs.items():  # the caller's arrays are untouched
        np.testing.assert_array_equal(value, copies[name])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_against_oracle(case: Case) -> None:
    inputs = case.inputs()
    run = execute(case.program(), inputs)
    outputs, instances = run_oracle(_fully_bound(case.program(), run.sizes), inputs)
    _equal(run.outputs, outputs)
    assert {s: n for s, n in run.instances.items() if n} == instances


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_instances_match_isl(case: Case) -> None:
    run = execute(case.program(), case.inputs())
    model = analyze(_fully_bound(case.program(), run.sizes))
    assert run.instances == isl_counts(model)


def isl_counts(model) -> dict[str, int]:
    """Statement instances as isl counts them (a scan of each bound domain)."""
    return {s.name: int(s.domain.count_val().to_python()) for s in model.statements}


def test_instance_counts_by_hand() -> None:
    run = execute(parse(CASES[3].text), {"x": np.zeros(5)})  # prefix sums, N = 5
    assert run.instances == {"S0": 1 + 2 + 3 + 4 + 5}
    run = execute(parse(CASES[4].text), {"X": np.zeros((4, 4))})  # triangular par loops
    assert run.instances == {"S0": 1 + 2 + 3 + 4, "S1": 3 + 2 + 1 + 0}


def test_matmul_128() -> None:
    a, b = normal(128, 128, dtype=np.float32), normal(128, 128, dtype=np.float32)
    c = reference(parse(MATMUL), A=a, B=b)["C"]
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_sizes_and_defaults() -> None:
    prog = parse("param N = 4, M\nin X: f64[M]\nout Y: f64[N, M]\npar N i { par M j { Y[i, j] = X[j] + i } }")
    run = execute(prog, {"X": np.arange(3.0)})
    assert run.sizes == {"N": 4, "M": 3}
    np.testing.assert_array_equal(run.outputs["Y"], np.arange(3.0)[None, :] + np.arange(4.0)[:, None])
    bound = execute(prog.bind(N=2), {"X": np.arange(3.0)})  # a bound size beats the default
    assert bound.outputs["Y"].shape == (2, 3)


def test_temporaries_are_fresh_and_undefined() -> None:
    prog = parse(
        """
        out Y: f32[3]
        out Z: f32[3, 2]
        out K: i32[2]
        seq 3 t { new a: f32[2]; Y[t] = a[0]; a[0] = 1 }
        par 3 i { new b: f32; seq 2 t { Z[i, t] = b; b = i } }
        seq 2 t { new c: i32; K[t] = c; c = 5 }
        """
    )
    out = execute(prog, {}).outputs
    assert np.isnan(out["Y"]).all()  # each seq iteration gets a fresh, undefined copy
    np.testing.assert_array_equal(out["Z"], [[np.nan, 0], [np.nan, 1], [np.nan, 2]])  # one per lane
    np.testing.assert_array_equal(out["K"], [np.iinfo(np.int32).min] * 2)


def test_empty_loops() -> None:
    prog = parse("param N\nin X: f64[N]\nout Y: f64[N]\npar N i { par i j { Y[i] += X[j] } }")
    run = execute(prog, {"X": np.zeros(0)})
    assert run.outputs["Y"].shape == (0,) and run.instances == {"S0": 0}
    run = execute(prog, {"X": np.ones(1)})  # one lane, no inner iterations
    np.testing.assert_array_equal(run.outputs["Y"], [0.0])


# ------------------------------------------------------------------- errors


def _mm_inputs(m=2, k=3, n=4):
    return {"A": np.ones((m, k), np.float32), "B": np.ones((k, n), np.float32)}


JACOBI = CASES[7].text


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"A": np.ones((2, 3), np.float32)}, r"missing input 'B' \(in B: f32\[K, N\]\)"),
        ({**_mm_inputs(), "Q": np.ones(3)}, r"unknown buffer 'Q'; the inputs of program 'mm' are A, B"),
        ({**_mm_inputs(), "C": np.ones((2, 4))}, r"'C' is an out buffer: it needs no input"),
        ({**_mm_inputs(), "A": np.ones((2, 3))}, r"input 'A' .*wrong dtype: expected float32, got float64"),
        ({**_mm_inputs(), "B": np.ones((3, 4), np.int32)}, r"input 'B' .*expected float32, got int32"),
        (
            {**_mm_inputs(), "A": np.ones(6, np.float32)},
            r"input 'A' .*expected 2 dimension\(s\) \[M, K\], got shape \(6,\)",
        ),
        ({**_mm_inputs(), "A": "abc"}, r"input 'A' is not a numeric array: got str"),
        ({**_mm_inputs(), "A": None}, r"input 'A' is not a numeric array: got NoneType"),
        ({**_mm_inputs(), "A": [[1.0, 2.0], [3.0]]}, r"input 'A' cannot be made an array"),
        (
            {"A": np.ones((2, 3), np.float32), "B": np.ones((5, 4), np.float32)},
            r"conflicting values for size K: 3 from dimension 1 of 'A', 5 from dimension 0 of 'B'",
        ),
    ],
)
def test_argument_errors(arrays, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        reference(parse(MATMUL, name="mm"), **arrays)
    with pytest.raises(ArgumentError, match=message):
        execute(parse(MATMUL, name="mm"), arrays)


def test_wrong_shape_after_binding() -> None:
    prog = parse(JACOBI).bind(T=1, N=6)
    with pytest.raises(ArgumentError, match=r"input 'A' \(inout A: f32\[7\]\) .*expected \(7,\), got \(6,\)"):
        reference(prog, A=np.ones(6, np.float32))
    with pytest.raises(ArgumentError, match=r"'B' is a temporary \(new\) buffer"):
        reference(prog, A=np.ones(7, np.float32), B=np.ones(6, np.float32))


def test_unbound_size() -> None:
    with pytest.raises(
        ArgumentError, match=r"size T .* is unbound.*bind it first with program\.bind\(T=\.\.\.\)"
    ):
        reference(parse(JACOBI), A=np.ones(7, np.float32))
    prog = parse("param N\nout Y: f32[N]\npar N i { Y[i] = i }")
    with pytest.raises(ArgumentError, match=r"size N .* no input has a dimension declared as exactly N"):
        execute(prog, {})


def test_i32_division_by_zero() -> None:
    prog = parse(
        "param N\nin X: i32[N]\nin D: i32[N]\nout Y: i32[N]\nY[0] = 1\npar N i { Y[i] = X[i] / D[i] }"
    )
    with pytest.raises(
        ArgumentError, match=r"statement S1 \(Y\[i\] = X\[i\] / D\[i\]\): i32 division by zero"
    ):
        reference(prog, X=np.ones(3, np.int32), D=np.array([1, 0, 2], np.int32))


def test_race_is_rejected_before_running() -> None:
    from polymap.errors import RaceError

    prog = parse("param N\nin X: f32[N]\nout s: f32\npar N i { s += X[i] }")
    with pytest.raises(RaceError):
        reference(prog, X=np.ones(3, np.float32))


# ------------------------------------------------------------------- random programs

EXTENT = 4  # every loop extent is at most 4, so every index lies in [0, 4)
INPUTS = ("in X: f64[4, 4, 4]", "in I: i32[4, 4]", "in F: f32[4]")


class _Generator:
    """Random race-free, in-bounds loop nests, as TE text.

    Race freedom by construction: every statement writes its own fresh ``out`` buffer at
    indices that contain each enclosing par index through a bijection of [0, 4) (``v`` or
    ``3 - v``), so two iterations of a par loop never write one element; reads touch inputs,
    the buffers written by *earlier* top-level nests (complete by then), the statement's own
    target (update ops) and block-local temporaries, which are written only by statements with
    no par loop between them and the declaration (so a par loop only reads them).
    """

    def __init__(self, draw) -> None:
        self.draw = draw
        self.decls = list(INPUTS)
        self.readable = [("X", 3), ("I", 2), ("F", 1)]
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def program(self) -> str:
        lines: list[str] = []
        for _ in range(self.draw(st.integers(1, 2))):
            self.pending: list[tuple[str, int]] = []
            lines += self.block([], [], 0)
            self.readable += self.pending  # complete once the nest is done
        return "\n".join(self.decls + lines)

    def block(self, loops: list, temps: list, depth: int) -> list[str]:
        draw, lines, temps = self.draw, [], list(temps)
        if loops and draw(st.booleans()):
            name, k = self.fresh("T"), self.fresh("i")
            lines.append(f"new {name}: {draw(st.sampled_from(['f64', 'i32']))}[4]")
            lines.append(f"seq 4 {k} {{ {name}[{k}] = {self.value(loops + [('seq', k, [k])], temps, 1)} }}")
            temps.append((name, True))
        for _ in range(draw(st.integers(1, 3))):
            if depth < 3 and draw(st.booleans()):
                lines += self.loop(loops, temps, depth)
            else:
                lines.append(self.statement(loops, temps))
        return lines

    def loop(self, loops: list, temps: list, depth: int) -> list[str]:
        kind = self.draw(st.sampled_from(["par", "seq"]))
        j = self.fresh("i")
        # (extent, index forms in [0, 4) for j < extent): the shifted forms leave the
        # buffers at the masked-off lanes of a triangular loop, which must stay harmless.
        extents = [
            (str(c), [f"{c - 1} - {j}", f"{j} + {EXTENT - c}"] if c else []) for c in range(EXTENT + 1)
        ]
        for _, v, _ in loops:
            extents += [
                (f"{v} + 1", [f"{v} - {j}"]),
                (f"{EXTENT} - {v}", [f"{v} + {j}"]),
                (v, [f"{v} - 1 - {j}"]),
            ]
        extent, shifted = self.draw(st.sampled_from(extents))
        inner = [(t, writable and kind == "seq") for t, writable in temps]  # par: read only
        body = self.block(loops + [(kind, j, [j, f"3 - {j}", *shifted])], inner, depth + 1)
        return [f"{kind} {extent} {j} {{", *("  " + line for line in body), "}"]

    def statement(self, loops: list, temps: list) -> str:
        draw = self.draw
        value = self.value(loops, temps, 2)
        if draw(st.integers(0, 9)) == 0:
            return f"anchor {value}"
        writable = [t for t, w in temps if w]
        if writable and draw(st.booleans()):
            target = f"{draw(st.sampled_from(writable))}[{self.index(loops)}]"
        else:
            # Each form of an index j is injective in j (given the outer indices), so a
            # tuple holding a form of every par index is injective over the par iterations.
            pars = [forms for k, _, forms in loops if k == "par"]
            chosen = pars + [forms for k, _, forms in loops if k == "seq" and draw(st.booleans())]
            indices = [draw(st.sampled_from(forms)) for forms in draw(st.permutations(chosen))]
            name = self.fresh("W")
            dtype = draw(st.sampled_from(["f64", "f32", "i32"]))
            shape = f"[{', '.join(['4'] * len(indices))}]" if indices else ""
            self.decls.append(f"out {name}: {dtype}{shape}")
            self.pending.append((name, len(indices)))
            target = f"{name}[{', '.join(indices)}]" if indices else name
        op = draw(st.sampled_from(["=", "+=", "-=", "*=", "max=", "min="]))
        return f"{target} {op} {value}"

    def index(self, loops: list) -> str:
        if loops and self.draw(st.booleans()):  # often a form of one loop's index
            return self.draw(st.sampled_from(self.draw(st.sampled_from(loops))[2]))
        names = [v for _, v, _ in loops]
        forms = [str(c) for c in range(EXTENT)] + [f for _, _, fs in loops for f in fs]
        for v in names:
            forms += [f"{v} / 2", f"(2 * {v} + 1) % 4"] + [f"({v} + {w}) % 4" for w in names]
        return self.draw(st.sampled_from(forms))

    def value(self, loops: list, temps: list, depth: int) -> str:
        draw = self.draw
        kinds = ["const", "index", "read", "read"] + ["unary", "binary", "binary", "call"] * (depth > 0)
        kind = draw(st.sampled_from(kinds))
        if kind == "const" or (kind == "index" and not loops):
            return draw(st.sampled_from(["0", "1", "2", "3", "0.5", "2.5"]))
        if kind == "index":
            return draw(st.sampled_from([v for _, v, _ in loops]))
        if kind == "read":
            sources = self.readable[:3] * 2 + self.readable + [(t, 1) for t, _ in temps] * 3
            name, ndim = draw(st.sampled_from(sources))
            return f"{name}[{', '.join(self.index(loops) for _ in range(ndim))}]" if ndim else name

        def sub():
            return self.value(loops, temps, depth - 1)

        if kind == "unary":
            return f"-({sub()})"
        if kind == "binary":
            return f"({sub()}) {draw(st.sampled_from(['+', '-', '*', '/']))} ({sub()})"
        fn = draw(st.sampled_from(["exp", "log", "sqrt", "tanh", "abs", "max", "min"]))
        return f"{fn}({sub()}, {sub()})" if fn in ("max", "min") else f"{fn}({sub()})"


@st.composite
def random_programs(draw) -> str:
    return _Generator(draw).program()


@st.composite
def random_statements(draw) -> str:
    """One deep random expression: exercises the typing rules more than the nests do."""
    value = _Generator(draw).value([("par", "i", ["i", "3 - i"])], [], 3)
    dtype = draw(st.sampled_from(["f64", "f32", "i32"]))
    op = draw(st.sampled_from(["=", "+=", "-=", "*=", "max=", "min="]))
    return "\n".join([*INPUTS, f"inout Y: {dtype}[4]", f"par 4 i {{ Y[i] {op} {value} }}"])


def _random_inputs(program, seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def array(decl):
        shape = tuple(e.value for e in decl.shape)
        if decl.dtype.is_float:
            return (rng.standard_normal(shape) * 2).astype(decl.dtype.numpy)
        return rng.integers(-5, 6, shape).astype(np.int32)  # zeros: division by zero happens

    return {decl.name: array(decl) for decl in program.inputs}


def _run_both(text: str, seed: int):
    program = parse(text)
    inputs = _random_inputs(program, seed)
    try:
        run = execute(program, inputs)
    except ArgumentError as err:  # only a division by zero may stop a random program
        assert "division by zero" in str(err)
        with pytest.raises(ArgumentError, match="division by zero"):
            run_oracle(program, inputs)
        return program, None
    outputs, instances = run_oracle(program, inputs)
    _equal(run.outputs, outputs)
    assert {s: n for s, n in run.instances.items() if n} == instances
    return program, run


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.integers(0, 2**16))
def test_random_programs_match_oracle(text: str, seed: int) -> None:
    note(text)
    _run_both(text, seed)


@settings(max_examples=300, deadline=None)
@given(random_statements(), st.integers(0, 2**16))
def test_random_expressions_match_oracle(text: str, seed: int) -> None:
    note(text)
    _run_both(text, seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(), st.integers(0, 2**16))
def test_random_programs_match_isl_counts(text: str, seed: int) -> None:
    note(text)
    program, run = _run_both(text, seed)
    if run is not None:
        model = analyze(program)  # also proves the generator's programs race free and in bounds
        assert run.instances == isl_counts(model)


SCALARS = """
in alpha: f32
in n: i32
in x: f32[4]
out y: f32[4]
par 4 i { y[i] = alpha * x[i] + n }
"""


def test_a_python_number_for_a_scalar_input_is_taken_in_the_declared_type() -> None:
    program = parse(SCALARS, name="scalars")
    x = np.array([1.0, 2.0, 3.0, 0.1], np.float32)
    given = reference(program, alpha=2.5, n=3, x=x)["y"]
    typed = reference(program, alpha=np.float32(2.5), n=np.int32(3), x=x)["y"]
    assert given.dtype == np.float32 and np.array_equal(given, typed)
    assert np.array_equal(given, np.array([5.5, 8.0, 10.5, 3.25], np.float32))
    # 0.1 is not a float32: it is rounded as np.float32(0.1) would be, not kept in double
    assert reference(program, alpha=0.1, n=0, x=np.ones(4, np.float32))["y"][0] == np.float32(0.1)


@pytest.mark.parametrize(
    "alpha, n, message",
    [
        (1e300, 0, r"input 'alpha' .*the Python number 1e\+300 overflows float32"),
        (1.0, 2.5, r"input 'n' .*the Python number 2.5 is a float; the input is i32 and takes a Python int"),
        (1.0, 2.0, r"input 'n' .*the Python number 2.0 is a float"),
        (np.float64(2.5), 0, r"input 'alpha' .*wrong dtype: expected float32, got float64"),
        (1.0, 2**31, r"input 'n' .*the Python number 2147483648 does not fit int32"),
        (True, 0, r"input 'alpha' is not a numeric array|wrong dtype"),
    ],
)
def test_a_python_number_that_the_declared_type_cannot_hold_is_refused(alpha, n, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        reference(parse(SCALARS, name="scalars"), alpha=alpha, n=n, x=np.ones(4, np.float32))


def test_a_python_number_is_taken_by_the_host_run_too() -> None:
    import polymap

    program = parse(SCALARS, name="scalars")
    x = np.array([1.0, 2.0, 3.0, 0.1], np.float32)
    got = polymap.compile(program).run_host(alpha=2.5, n=3, x=x)["y"]
    assert np.array_equal(got, reference(program, alpha=2.5, n=3, x=x)["y"])


# ------------------------------------------------------------------ accumulation loops

ACCUMULATIONS = {
    "f32 sum": """
        param M = 7, N = 5, K = 300
        in A: f32[M, K]
        in B: f32[K, N]
        out C: f32[M, N]
        par M i { par N j { seq K k { C[i, j] += A[i, k] * B[k, j] } } }
    """,
    # the store truncates to i32 after every step: not the truncation of the f32 sum
    "i32 target, f32 value": """
        param M = 6, K = 40
        in A: f32[M, K]
        out N: i32[M]
        par M i { seq K k { N[i] += A[i, k] * 3.7 } }
    """,
    # a triangular par loop around: the lanes past the diagonal are masked off
    "max under a mask": """
        param M = 9, K = 13
        in A: f32[M, K]
        out T: f32[M, M]
        par M i { par i + 1 j { seq K k { T[i, j] max= A[j, k] - A[i, k] } } }
    """,
    "product and difference": """
        param M = 8, K = 11
        in A: f32[M, K]
        out P: f32[M]
        out D: i32[M]
        par M i { P[i] = 1; seq K k { P[i] *= A[i, k] }; seq K k { D[i] -= k * i } }
    """,
    # a block-local accumulator (one copy per lane of the par loops around it)
    "block-local": """
        param M = 5, K = 17
        in A: f32[M, K]
        out S: f32[M]
        par M i { new acc: f32[1]; acc[0] = 0; seq K k { acc[0] += A[i, k] }; S[i] = acc[0] }
    """,
}


@pytest.mark.parametrize("name", sorted(ACCUMULATIONS))
def test_accumulation_loops_equal_a_store_per_iteration(name, monkeypatch):
    """The reference updates a seq loop's one accumulated element in a local array and stores
    it once; that must give bit for bit what a store per iteration gives, and count the
    same instances."""
    import sys

    module = sys.modules["polymap.reference"]  # polymap.reference is also the function's name
    program = parse(ACCUMULATIONS[name]).bind_defaults()
    assert any(module._accumulation(loop) is not None for loop, _ in loops(program) if not loop.is_par), (
        "the case must take the accumulation path"
    )
    arrays = random_inputs(program, program.sizes, seed=7)
    fast = module.execute(program, dict(arrays))
    monkeypatch.setattr(module, "_accumulation", lambda loop: None)
    slow = module.execute(program, dict(arrays))
    assert fast.instances == slow.instances
    for out in fast.outputs:
        np.testing.assert_array_equal(fast.outputs[out], slow.outputs[out], err_msg=f"{name}: {out}")


def test_an_accumulation_adds_in_loop_order_with_the_targets_rounding():
    """The reference's accumulations (updated in place where the target's type is the
    computation's) add one iteration after another: in f32, 1e8 + 1 rounds back to 1e8, so
    [1e8, 1, -1e8, 1] sums to 1 (exactly, it is 2); in i32 the sum wraps as C's does."""
    import numpy as np

    import polymap

    program = polymap.parse(
        "in x: f32[2, 4]\nin n: i32[4]\nout s: f32[2]\nout t: i32\n"
        "par 2 i { seq 4 k { s[i] += x[i, k] } }\nseq 4 k { t += n[k] }"
    )
    x = np.array([[1e8, 1, -1e8, 1], [1, 1e8, 1, -1e8]], dtype=np.float32)
    n = np.array([2**31 - 1, 1, 5, -3], dtype=np.int32)
    out = polymap.reference(program, x=x, n=n)
    # row 1: 1 + 1e8 = 1e8 (rounded), + 1 = 1e8, - 1e8 = 0
    assert out["s"].tolist() == [1.0, 0.0]
    assert int(out["t"]) == -(2**31) + 2  # 2^31 - 1 + 1 wraps to -2^31; then + 5 - 3
