"""Farkas linearization: SCIP's min d against hand-derived maxima and brute force.

Every expected bound below is derived by hand in the comment next to it; the property test
compares with a brute-force maximum over the points isl enumerates (the oracle only).
"""

from __future__ import annotations

from fractions import Fraction

import islpy as isl
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from pyscipopt import Model

from polymap.errors import ArgumentError, MappingError, SolverError
from polymap.mapping.farkas import (
    ParamMode,
    Polyhedron,
    farkas,
    minimize_upper_bound,
    rationalize,
)

i, j, x, e, t, d, N, M = sympy.symbols("i j x e t d N M")
TOL = 1e-6


def solved(problem):
    report = problem.solve()
    return report, problem.solution()


def assert_optimal(report, value):
    assert report.status == "optimal"
    assert report.gap == 0
    assert report.objective == pytest.approx(value, abs=TOL)
    assert report.dual_bound == pytest.approx(value, abs=TOL)


# --------------------------------------------------------------------------- fixed domains


@pytest.mark.parametrize("n, m", [(1, 1), (5, 7), (32, 3)])
def test_box(n, m):
    # max of 3i + 2j over 0 <= i < n, 0 <= j < m is at the corner (n-1, m-1).
    P = Polyhedron.from_isl(isl.BasicSet(f"{{ [i, j] : 0 <= i < {n} and 0 <= j < {m} }}"))
    problem = minimize_upper_bound(P, 3 * i + 2 * j)
    report, sol = solved(problem)
    assert_optimal(report, 3 * (n - 1) + 2 * (m - 1))
    assert sol[d] == 3 * (n - 1) + 2 * (m - 1)
    assert problem.system.certificate_holds(sol)


@pytest.mark.parametrize("n", [1, 4, 10])
def test_triangle(n):
    # 0 <= j <= i < n: i - j is largest at (n-1, 0).
    P = Polyhedron.from_isl(isl.BasicSet(f"{{ [i, j] : 0 <= j <= i < {n} }}"))
    report, sol = solved(minimize_upper_bound(P, i - j))
    assert_optimal(report, n - 1)


def test_box_from_relations_and_matrix_agree():
    rel = Polyhedron.from_relations([i, j], [i >= 0, i <= 4, j >= 0, j <= 6])
    mat = Polyhedron.from_matrix([i, j], [[1, 0], [-1, 0], [0, 1], [0, -1]], [0, 4, 0, 6])
    assert rel.rows == mat.rows == (i, 4 - i, j, 6 - j)
    report, _ = solved(minimize_upper_bound(rel, 3 * i + 2 * j))
    assert_optimal(report, 3 * 4 + 2 * 6)


def test_symbolic_sizes_bound_later_or_fixed_in_scip():
    bset = isl.BasicSet("[N, M] -> { [i, j] : 0 <= i < N and 0 <= j < M }")
    with pytest.raises(ArgumentError, match="quantify.*symbolic"):
        Polyhedron.from_isl(bset)
    P = Polyhedron.from_isl(bset, params=ParamMode.SYMBOLIC)
    assert P.variables == (i, j) and P.parameters == (M, N)
    assert set(farkas(P, d - 3 * i - 2 * j).decisions) == {d, M, N}
    # Without SCIP variables for N and M the model cannot be built...
    with pytest.raises(ArgumentError, match="M, N"):
        minimize_upper_bound(P, 3 * i + 2 * j)
    # ...bind them: 3*4 + 2*6 = 24.
    report, _ = solved(minimize_upper_bound(P.substitute({N: 5, M: 7}), 3 * i + 2 * j))
    assert_optimal(report, 24)
    # ...or make them SCIP variables fixed to 5 and 7 (lambda * N is bilinear): again 24.
    model = Model()
    model.hideOutput()
    sizes = {N: model.addVar("N", vtype="I", lb=5, ub=5), M: model.addVar("M", vtype="I", lb=7, ub=7)}
    problem = minimize_upper_bound(P, 3 * i + 2 * j, model=model, variables=sizes)
    report, sol = solved(problem)
    assert_optimal(report, 24)
    assert problem.system.certificate_holds(sol)


def test_quantified_parameter():
    # Over all (N, i) with 0 <= i < N <= 10: i <= N - 1 <= 9, attained at N = 10, i = 9.
    P = Polyhedron.from_isl(isl.BasicSet("[N] -> { [i] : 0 <= i < N and N <= 10 }"), params="quantify")
    assert P.variables == (i, N)
    report, _ = solved(minimize_upper_bound(P, i))
    assert_optimal(report, 9)


def test_theta_in_phi():
    # phi = t*i on 0 <= i < 6, t integer in [1, 4] with t >= 2: d = t*5 is least at t = 2: 10.
    model = Model()
    model.hideOutput()
    tv = model.addVar("t", vtype="I", lb=1, ub=4)
    model.addCons(tv >= 2)
    P = Polyhedron.from_relations([i], [i >= 0, i <= 5])
    problem = minimize_upper_bound(P, t * i, model=model, variables={t: tv})
    report, sol = solved(problem)
    assert_optimal(report, 10)
    assert sol[t] == 2 and sol[d] == 10
    assert problem.system.certificate_holds(sol)


def a_theta_problem():
    # P_t = { x : x >= 0, t*x <= 12 }: t threads share 12 steps, x counts one thread's steps.
    # Farkas on d - x: coefficient of x: -1 = lam_1 - t*lam_2; constant: d = lam_0 + 12*lam_2,
    # so d >= 12/t (lam_1 = lam_0 = 0, lam_2 = 1/t). With cost d + 3t over t in {1..4}:
    # 15, 12, 13, 15: the optimum is t = 2, d = 6, objective 12, lam_2 = 1/2.
    model = Model()
    model.hideOutput()
    tv = model.addVar("t", vtype="I", lb=1, ub=4)
    P = Polyhedron.from_relations([x], [x >= 0, 12 - t * x >= 0])
    problem = minimize_upper_bound(P, x, model=model, variables={t: tv})
    model.setObjective(problem.bound + 3 * tv, "minimize")
    return problem


def test_a_theta_bilinear():
    problem = a_theta_problem()
    lam0, lam1, lam2 = problem.system.multipliers
    assert problem.system.equations == (-lam1 + lam2 * t - 1, d - lam0 - 12 * lam2)
    report, sol = solved(problem)
    assert_optimal(report, 12)
    assert (sol[t], sol[d], sol[lam2]) == (2, 6, Fraction(1, 2))


def test_certificate_rejects_perturbations():
    problem = a_theta_problem()
    _, sol = solved(problem)
    system = problem.system
    lam0, lam1, lam2 = system.multipliers
    assert system.certificate_holds(sol)
    assert not system.certificate_holds({**sol, lam2: sol[lam2] + Fraction(1, 7)})
    assert not system.certificate_holds({**sol, t: 3})  # 12/3 = 4 != 6: wrong theta for lam
    assert not system.certificate_holds({**sol, d: sol[d] - 1})
    assert system.violations({**sol, t: 3}) == ["coefficient of x: -lam_1 + lam_2*t - 1 = 1/2 != 0"]


def test_negative_multiplier_is_not_a_certificate():
    # 0 <= i <= 4, psi = d - i: equations -1 - lam_1 + lam_2 = 0 and d - lam_0 - 4 lam_2 = 0.
    # lam_1 = -1, lam_2 = lam_0 = d = 0 solves them but "proves" i <= 0: refused by lam_1 < 0.
    system = farkas(Polyhedron.from_relations([i], [i >= 0, i <= 4]), d - i)
    lam0, lam1, lam2 = system.multipliers
    bogus = {lam0: 0, lam1: -1, lam2: 0, d: 0}
    assert not system.certificate_holds(bogus)
    assert system.violations(bogus) == ["lam_1 = -1 < 0"]
    assert system.certificate_holds({lam0: 0, lam1: 0, lam2: 1, d: 4})


def test_certificate_needs_exact_complete_values():
    system = farkas(Polyhedron.from_relations([i], [i >= 0, i <= 4]), d - i)
    lam0, lam1, lam2 = system.multipliers
    with pytest.raises(ArgumentError, match="exact"):
        system.certificate_holds({lam0: 0, lam1: 0, lam2: 1.0, d: 4})
    with pytest.raises(ArgumentError, match="needs values for d"):
        system.certificate_holds({lam0: 0, lam1: 0, lam2: 1})


def test_rationalize():
    assert rationalize(0.33333333) == Fraction(1, 3)
    assert rationalize(11.999999994) == 12
    assert rationalize(-1e-12) == 0
    assert rationalize(0.4285714) == Fraction(3, 7)
    assert abs(rationalize(0.123456789) - Fraction(123456789, 10**9)) <= Fraction(1, 10**6)


# --------------------------------------------------------------------------- integers


def test_conservative_on_a_non_integral_polyhedron():
    # {(i, e) : i = 2e, 0 <= i <= 9}: the largest even i is 8, but the rational relaxation
    # reaches i = 9 (e = 4.5), and Farkas sees only the rational polyhedron: d = 9.
    P = Polyhedron.from_relations([i, e], [sympy.Eq(i, 2 * e), i >= 0, i <= 9])
    report, _ = solved(minimize_upper_bound(P, i))
    assert_optimal(report, 9)


def test_isl_divs_are_lifted_and_the_bound_is_sound():
    P = Polyhedron.from_isl(isl.BasicSet("{ [i] : 0 <= i < 10 and i mod 2 = 0 }"))
    assert len(P.existentials) == 1 and P.variables[0] == i
    report, sol = solved(minimize_upper_bound(P, i))
    assert report.status == "optimal"
    assert 8 - TOL <= report.objective <= 9 + TOL  # >= the true max 8, <= the relaxation's 9


# --------------------------------------------------------------------------- failures


def test_unbounded_phi_is_reported_infeasible():
    # i >= 0 only: i has no upper bound, so no d exists (equation -1 - lam_1 = 0).
    problem = minimize_upper_bound(Polyhedron.from_relations([i], [i >= 0]), i)
    report = problem.solve()
    assert report.status == "infeasible"
    assert report.objective is None and report.gap is None and report.n_solutions == 0
    assert report.dual_bound == float("inf")
    with pytest.raises(SolverError, match="no solution.*infeasible"):
        problem.solution()


def test_unconstrained_variable_gives_a_constant_equation():
    # j appears in no row: its coefficient equation is -1 == 0.
    P = Polyhedron.from_relations([i, j], [i >= 0, i <= 3])
    system = farkas(P, d - j)
    assert -1 in system.equations
    assert minimize_upper_bound(P, j).solve().status == "infeasible"


def test_degree_three_is_refused():
    P = Polyhedron.from_relations([x], [x >= 0, 12 - t**2 * x >= 0])
    model = Model()
    model.hideOutput()
    with pytest.raises(MappingError, match=r"coefficient of x.*degree 3"):
        minimize_upper_bound(P, x, model=model, variables={t: model.addVar("t", vtype="I", lb=1, ub=4)})


@pytest.mark.parametrize(
    "build, error, pattern",
    [
        (lambda: farkas(Polyhedron.from_relations([i, j], [i >= 0]), i * j), MappingError, "not affine"),
        (lambda: Polyhedron.from_relations([i], [i * i >= 0]), MappingError, "not affine"),
        (lambda: Polyhedron.from_relations([i], [i < 3]), ArgumentError, "strict"),
        (lambda: Polyhedron.from_relations([i], [i >= 0.5]), ArgumentError, "exact"),
        (lambda: Polyhedron.from_isl(isl.Set("{ [i] : 0 <= i < 2 or 5 <= i < 7 }")), ArgumentError, "union"),
        (
            lambda: Polyhedron.from_isl(isl.BasicSet("[N] -> { [i] : i < N }"), params="all"),
            ArgumentError,
            "quantify",
        ),
        (
            lambda: farkas(Polyhedron.from_relations([i], [i >= 0]), sympy.Symbol("lam_1") - i),
            ArgumentError,
            "clash",
        ),
        (lambda: minimize_upper_bound(Polyhedron.from_relations([d], [d >= 0]), -d), ArgumentError, "bound"),
    ],
)
def test_bad_inputs(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build()


# --------------------------------------------------------------------------- property


@st.composite
def domains(draw):
    """A small integral polyhedron as isl text with its dimension names."""
    if draw(st.booleans()):
        n = draw(st.integers(1, 3))
        names = ["i", "j", "k"][:n]
        parts = []
        for name in names:
            lo = draw(st.integers(-3, 3))
            parts.append(f"{lo} <= {name} < {lo + draw(st.integers(1, 4))}")
        return names, f"{{ [{', '.join(names)}] : {' and '.join(parts)} }}"
    # { j >= a, i <= b, j <= i + c }: vertices (a - c, a), (b, a), (b, b + c), all integer.
    a, c = draw(st.integers(-3, 3)), draw(st.integers(-2, 2))
    b = draw(st.integers(a - c, a - c + 5))
    return ["i", "j"], f"{{ [i, j] : j >= {a} and i <= {b} and j <= i + {c} }}"


@settings(max_examples=40, deadline=None)
@given(domains(), st.lists(st.integers(-4, 4), min_size=3, max_size=3), st.integers(-5, 5))
def test_min_bound_equals_brute_force_max(domain, coeffs, const):
    names, text = domain
    symbols = sympy.symbols(names)
    phi = sum((c * s for c, s in zip(coeffs, symbols)), sympy.Integer(const))
    bset = isl.BasicSet(text)
    values = []

    def visit(point):
        coords = [point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(len(names))]
        values.append(const + sum(c * v for c, v in zip(coeffs, coords)))

    isl.Set(text).foreach_point(visit)  # the oracle: every integer point
    problem = minimize_upper_bound(Polyhedron.from_isl(bset), phi)
    report, sol = solved(problem)
    assert_optimal(report, max(values))
    assert sol[d] == max(values)
    assert problem.system.certificate_holds(sol)
