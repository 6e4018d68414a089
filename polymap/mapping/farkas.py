"""Farkas' lemma (affine form): linearize "psi(x) >= 0 for every x in P" for SCIP.

The algebra
-----------
Let ``P = { x : A x + b >= 0 }`` with ``m`` rows ``r_k(x) = a_k^T x + b_k`` (an equality
is two opposite rows) and let ``psi(x) = c^T x + c_0`` be affine in ``x``. The entries of
``A``, ``b``, ``c`` and ``c_0`` may be polynomials in decision parameters ``theta`` (sympy
symbols that are not among the variables ``x``).

Affine Farkas lemma (rational form, ``P`` nonempty): ``psi(x) >= 0`` for all ``x`` in ``P``
iff there are multipliers ``lambda_0 >= 0`` and ``lambda_1..m >= 0`` with::

    psi(x) == lambda_0 + sum_k lambda_k * r_k(x)      identically in x.

Matching the coefficient of each variable ``x_i`` and the constant term gives ``n + 1``
equations, written here as expressions equal to zero::

    c_i(theta)  - sum_k lambda_k * a_ki(theta)            == 0     (one per x_i)
    c_0(theta)  - lambda_0 - sum_k lambda_k * b_k(theta)  == 0     (the constant)

They are linear in ``lambda`` when ``A`` and ``b`` do not depend on ``theta``, bilinear in
``(lambda, theta)`` when they do (seed 003: ``sigma_theta`` with coefficients in ``theta``).
The universally quantified constraint becomes existential: ``theta`` is feasible iff some
``lambda >= 0`` solves the equations, which is what SCIP searches for.

Integers: conservative, exact on integral polyhedra
---------------------------------------------------
Our ``x`` are integer points, and over the integers the lemma is *sufficient but not
necessary*. A certificate always proves ``psi >= 0`` on the integer points of ``P`` (they
are points of the rational polyhedron). The converse can fail: the multipliers describe the
rational polyhedron, so ``min d : forall x in P, phi(x) <= d`` returns the maximum of
``phi`` over the *rational* relaxation, which may exceed the integer maximum (e.g. ``P =
{(i, e) : i = 2e, 0 <= i <= 9}`` gives 9 although the largest even ``i`` is 8). The bound
is exact when ``P`` is integral (every vertex integer), e.g. boxes and the triangles of our
loop domains once outer indices are fixed. ``P`` empty over the rationals breaks only the
"iff" direction; a certificate found is still a (vacuous) proof.

Exactness of certificates
-------------------------
SCIP works in floating point. :func:`rationalize` turns each value into a fraction with a
small denominator within ``tol`` (default ``1e-6``, SCIP's default feasibility tolerance), and
:meth:`FarkasSystem.certificate_holds` checks the rationalized ``(lambda, theta)`` by exact
substitution: nonnegative multipliers and every equation exactly zero. A ``False`` means
SCIP's point is not within ``tol`` of a certificate with small denominators. Whether
``theta`` lies in its own domain (integrality, bounds) is the caller's model, not checked here.

Use
---
``Polyhedron.from_isl(bset, params=...)`` / ``from_relations`` / ``from_matrix`` build
``P``; ``farkas(P, psi)`` gives the :class:`FarkasSystem`; ``add_to_scip(system, model,
{theta: var})`` adds it to a pyscipopt model; ``minimize_upper_bound(P, phi)`` builds the
seed-003 pattern ``min d : forall x in P, phi(x) <= d`` in one call, and its ``solve()``
returns a :class:`SolveReport`. Symbols are matched by name: write ``phi`` with plain
``sympy.Symbol("i")`` (no assumptions) for the isl dimension ``i``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational as _RationalNumber
from typing import Any

import islpy as isl
import sympy
from pyscipopt import Model, quicksum

from polymap.errors import ArgumentError, InternalError, MappingError, PolymapError, SolverError
from polymap.mapping.outcome import SolveReport  # re-exported: the report of solve()

# --------------------------------------------------------------------------- polyhedra


class ParamMode(enum.Enum):
    """What happens to the parameters of an isl set (``[N] -> { ... }``)."""

    QUANTIFY = "quantify"
    """Parameters become further variables ``x``: the property holds for every value of
    them allowed by the set's constraints (a parametric proof, as in Feautrier's scheduler)."""
    SYMBOLIC = "symbolic"
    """Parameters stay symbols in the coefficients, like decisions ``theta``: bind them later
    with :meth:`FarkasSystem.substitute`, or give them SCIP variables."""


@dataclass(frozen=True, slots=True)
class Polyhedron:
    """``P = { x : rows[k](x) >= 0 for every k }``; each row is affine in ``variables``.

    Row coefficients may be sympy expressions in other symbols (decisions ``theta`` or
    symbolic sizes). ``existentials`` lists the variables that stand for existentially
    quantified (isl div) dimensions; quantifying over them universally is equivalent because
    ``psi`` does not mention them. Rows are stored expanded.
    """

    variables: tuple[sympy.Symbol, ...]
    rows: tuple[sympy.Expr, ...]
    existentials: tuple[sympy.Symbol, ...] = ()

    def __post_init__(self) -> None:
        variables = tuple(self.variables)
        if not all(isinstance(v, sympy.Symbol) for v in variables):
            raise ArgumentError(f"Polyhedron variables must be sympy Symbols, got {variables!r}")
        if len(set(variables)) != len(variables):
            raise ArgumentError(f"Polyhedron variables repeat: {variables!r}")
        if not set(self.existentials) <= set(variables):
            raise ArgumentError("Polyhedron existentials must be among its variables")
        rows = tuple(sympy.expand(_sympify(r, "a Polyhedron row")) for r in self.rows)
        for row in rows:
            affine_parts(row, variables, what=f"row {row} >= 0")
        object.__setattr__(self, "variables", variables)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "existentials", tuple(self.existentials))

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_matrix(
        cls, variables: Sequence[sympy.Symbol], A: Sequence[Sequence[Any]], b: Sequence[Any]
    ) -> Polyhedron:
        """``{ x : A x + b >= 0 }``; entries of ``A`` and ``b`` may be sympy expressions."""
        if len(A) != len(b) or any(len(row) != len(variables) for row in A):
            raise ArgumentError(
                f"Polyhedron.from_matrix: A must be {len(b)} x {len(variables)} to match b and the variables"
            )
        rows = [
            sum((_sympify(a, "an entry of A") * x for a, x in zip(row, variables)), sympy.S.Zero)
            + _sympify(bk, "an entry of b")
            for row, bk in zip(A, b)
        ]
        return cls(tuple(variables), tuple(rows))

    @classmethod
    def from_relations(
        cls, variables: Sequence[sympy.Symbol], relations: Iterable[sympy.Basic]
    ) -> Polyhedron:
        """From sympy relations such as ``i >= 0``, ``i <= N - 1``, ``Eq(i, 2*e)``.

        An equality becomes two rows. Strict relations are refused: ``i < N`` means
        ``i <= N - 1`` only when both sides are integers, which is for the caller to say."""
        rows: list[sympy.Expr] = []
        for rel in relations:
            if isinstance(rel, (sympy.GreaterThan, sympy.LessThan)):
                big, small = (rel.lhs, rel.rhs) if isinstance(rel, sympy.GreaterThan) else (rel.rhs, rel.lhs)
                rows.append(big - small)
            elif isinstance(rel, sympy.Equality):
                rows += [rel.lhs - rel.rhs, rel.rhs - rel.lhs]
            elif rel is sympy.true:
                continue  # a relation sympy already decided, e.g. Ge(3, 2)
            elif rel is sympy.false:
                rows.append(sympy.S.NegativeOne)  # P is empty
            elif isinstance(rel, (sympy.StrictGreaterThan, sympy.StrictLessThan)):
                raise ArgumentError(
                    f"strict relation {rel} in a polyhedron: write it as a non-strict one "
                    f"(over the integers, a < b is a <= b - 1)"
                )
            else:
                raise ArgumentError(f"not a relation (>=, <= or Eq): {rel!r}")
        return cls(tuple(variables), tuple(rows))

    @classmethod
    def from_isl(cls, bset: isl.BasicSet | isl.Set, *, params: ParamMode | str | None = None) -> Polyhedron:
        """The constraints of one isl basic set as rows.

        Set dimensions become ``Symbol(name)`` (``x0``, ``x1``, ... when unnamed); isl divs
        (from ``mod``, ``floor`` or ``exists``) are lifted to extra variables ``_e0, _e1, ...``
        with their defining constraints. A set with parameters needs ``params`` (see
        :class:`ParamMode`); parameter ``N`` becomes ``Symbol("N")``. An ``isl.Set`` must
        consist of a single basic set: over a union, "for all x" is the conjunction of one
        system per piece, which is for the caller to build."""
        if isinstance(bset, isl.Set):
            pieces = bset.get_basic_sets()
            if len(pieces) != 1:
                raise ArgumentError(
                    f"Polyhedron.from_isl needs one basic set, got a union of {len(pieces)}: "
                    f"build one Farkas system per piece ({bset})"
                )
            bset = pieces[0]
        if not isinstance(bset, isl.BasicSet):
            raise ArgumentError(f"Polyhedron.from_isl expects an isl BasicSet, got {type(bset).__name__}")
        mode = _param_mode(params)
        try:
            n_set = bset.dim(isl.dim_type.set)
            n_param = bset.dim(isl.dim_type.param)
            n_div = bset.dim(isl.dim_type.div)
            set_names = [bset.get_dim_name(isl.dim_type.set, i) or f"x{i}" for i in range(n_set)]
            param_names = [bset.get_dim_name(isl.dim_type.param, i) for i in range(n_param)]
            if n_param and mode is None:
                raise ArgumentError(
                    f"the set {bset} has parameters {', '.join(param_names)}: say whether to "
                    f"quantify over them (params='quantify') or keep them symbolic "
                    f"(params='symbolic')"
                )
            # Lifting turns each div into a set dimension constrained by its definition.
            lifted = bset.lift() if n_div else bset
            constraints = lifted.get_constraints()
            rows: list[sympy.Expr] = []
            taken = set(set_names) | set(param_names)
            div_names = [_fresh(f"_e{k}", taken) for k in range(n_div)]
            xs = [sympy.Symbol(name) for name in set_names + div_names]
            ps = [sympy.Symbol(name) for name in param_names]
            for con in constraints:
                row = con.get_constant_val().to_python()
                row += sum(
                    con.get_coefficient_val(isl.dim_type.set, i).to_python() * x for i, x in enumerate(xs)
                )
                row += sum(
                    con.get_coefficient_val(isl.dim_type.param, i).to_python() * p for i, p in enumerate(ps)
                )
                rows.append(sympy.sympify(row))
                if con.is_equality():
                    rows.append(-sympy.sympify(row))
        except isl.Error as err:
            raise ArgumentError(f"isl could not read the constraints of {bset}: {err}") from err
        variables = xs + (ps if mode is ParamMode.QUANTIFY else [])
        return cls(tuple(variables), tuple(rows), existentials=tuple(xs[n_set:]))

    # ------------------------------------------------------------------ views

    def matrix(self) -> tuple[tuple[tuple[sympy.Expr, ...], ...], tuple[sympy.Expr, ...]]:
        """``(A, b)`` with ``rows[k] == A[k] . variables + b[k]``."""
        parts = [affine_parts(r, self.variables, what=f"row {r}") for r in self.rows]
        return tuple(c for c, _ in parts), tuple(c0 for _, c0 in parts)

    @property
    def parameters(self) -> tuple[sympy.Symbol, ...]:
        """Symbols of the rows that are not variables (decisions, symbolic sizes), by name."""
        free = set().union(*(r.free_symbols for r in self.rows)) - set(self.variables)
        return tuple(sorted(free, key=lambda s: s.name))

    def substitute(self, values: Mapping[sympy.Symbol, Any]) -> Polyhedron:
        """The polyhedron with some parameters bound (``{N: 64}``); variables cannot be."""
        bad = [s for s in values if s in self.variables]
        if bad:
            raise ArgumentError(f"cannot substitute the quantified variables {bad} of a polyhedron")
        subs = {s: _sympify(v, f"the value of {s}") for s, v in values.items()}
        return Polyhedron(self.variables, tuple(r.xreplace(subs) for r in self.rows), self.existentials)


def affine_parts(
    expr: sympy.Expr, variables: Sequence[sympy.Symbol], *, what: str = "expression"
) -> tuple[tuple[sympy.Expr, ...], sympy.Expr]:
    """``(c, c0)`` with ``expr == c . variables + c0``; MappingError if not affine in them."""
    expr = sympy.expand(expr)
    if not variables:
        return (), expr
    # term by term: each term of an affine form is a coefficient times at most one variable
    # (a tenth of the time of a sympy.Poly, which is only built to explain a refusal)
    slot = {v: k for k, v in enumerate(variables)}
    coefficients: list[list[sympy.Expr]] = [[] for _ in variables]
    constant: list[sympy.Expr] = []
    for term in sympy.Add.make_args(expr):
        coefficient, factor = term.as_independent(*variables, as_Add=False)
        if factor == 1:
            constant.append(term)
        elif factor in slot:
            coefficients[slot[factor]].append(coefficient)
        else:
            break
    else:
        return tuple(sympy.Add(*c) for c in coefficients), sympy.Add(*constant)
    try:
        poly = sympy.Poly(expr, *variables)
    except sympy.PolynomialError as err:
        raise MappingError(f"{what} is not affine in {', '.join(map(str, variables))}: {err}") from err
    if poly.total_degree() > 1:
        raise MappingError(
            f"{what} is not affine in {', '.join(map(str, variables))} (degree {poly.total_degree()})"
        )
    n = len(variables)
    unit = [tuple(int(i == k) for i in range(n)) for k in range(n)]
    coeffs = tuple(sympy.expand(poly.coeff_monomial(u)) for u in unit)
    return coeffs, sympy.expand(poly.coeff_monomial((0,) * n))


# --------------------------------------------------------------------------- the system


@dataclass(frozen=True, slots=True)
class FarkasSystem:
    """The existential form of ``forall x in polyhedron: psi(x) >= 0``.

    ``equations[e] == 0`` matches the coefficient named ``matched[e]`` (a variable name, or
    ``"1"`` for the constant term); identically zero equations are dropped, a nonzero
    constant one (``psi`` depends on a variable no row bounds) makes the system infeasible.
    Every multiplier is nonnegative. ``decisions`` are the other symbols, by name.
    """

    polyhedron: Polyhedron
    psi: sympy.Expr
    lambda0: sympy.Symbol
    lambdas: tuple[sympy.Symbol, ...]
    """One multiplier per row of the polyhedron, in row order."""
    equations: tuple[sympy.Expr, ...]
    matched: tuple[str, ...]
    decisions: tuple[sympy.Symbol, ...]
    prefix: str = "lam"

    @property
    def multipliers(self) -> tuple[sympy.Symbol, ...]:
        """``(lambda_0, lambda_1, ..., lambda_m)``."""
        return (self.lambda0, *self.lambdas)

    @property
    def nonnegativity(self) -> tuple[sympy.Basic, ...]:
        """``lambda >= 0`` for every multiplier, as sympy relations."""
        return tuple(lam >= 0 for lam in self.multipliers)

    def violations(self, assignment: Mapping[sympy.Symbol, Any]) -> list[str]:
        """Why ``assignment`` (exact numbers for every multiplier and decision) is not a
        certificate; empty when it is. Floats are refused: see :func:`rationalize`."""
        values = _exact_values(assignment)
        missing = [s.name for s in (*self.multipliers, *self.decisions) if s not in values]
        if missing:
            raise ArgumentError(f"the certificate check needs values for {', '.join(missing)}")
        out = [f"{lam} = {values[lam]} < 0" for lam in self.multipliers if values[lam] < 0]
        for label, eq in zip(self.matched, self.equations):
            residual = eq.xreplace(values)
            if not residual.is_Number:
                raise InternalError(f"equation {eq} did not evaluate to a number: {residual}")
            if residual != 0:
                out.append(f"coefficient of {label}: {eq} = {residual} != 0")
        return out

    def certificate_holds(self, assignment: Mapping[sympy.Symbol, Any]) -> bool:
        """Exact check that ``assignment`` is a Farkas certificate: every multiplier is
        ``>= 0`` and every equation is exactly ``0`` after substitution. Values must be
        exact (int, Fraction, sympy Rational); rationalize SCIP's floats first."""
        return not self.violations(assignment)

    def substitute(self, values: Mapping[sympy.Symbol, Any]) -> FarkasSystem:
        """The system with some decisions or symbolic sizes bound to values."""
        bad = [s for s in values if s in self.multipliers]
        if bad:
            raise ArgumentError(f"cannot substitute the multipliers {bad}")
        subs = {s: _sympify(v, f"the value of {s}") for s, v in values.items()}
        return farkas(self.polyhedron.substitute(subs), self.psi.xreplace(subs), prefix=self.prefix)


def farkas(polyhedron: Polyhedron, psi: Any, *, prefix: str = "lam") -> FarkasSystem:
    """The Farkas system of ``forall x in polyhedron: psi(x) >= 0`` (see the module doc).

    ``psi`` must be affine in ``polyhedron.variables``; its coefficients may be any sympy
    expressions in other symbols. Multipliers are ``Symbol(f"{prefix}_{k}")``, ``k = 0..m``;
    a name clash with a symbol of ``psi`` or the rows raises ArgumentError."""
    psi = sympy.expand(_sympify(psi, "psi"))
    variables = polyhedron.variables
    c, c0 = affine_parts(psi, variables, what=f"psi = {psi}")
    A, b = polyhedron.matrix()
    m = len(polyhedron.rows)
    lam0 = sympy.Symbol(f"{prefix}_0")
    lams = tuple(sympy.Symbol(f"{prefix}_{k + 1}") for k in range(m))
    used = set(psi.free_symbols).union(*(r.free_symbols for r in polyhedron.rows), variables)
    clash = sorted(s.name for s in used if s in (lam0, *lams))
    if clash:
        raise ArgumentError(f"multiplier names clash with symbols {clash}: pass another prefix")
    equations: list[sympy.Expr] = []
    matched: list[str] = []
    # One equation per coefficient of x, then the constant term (lambda_0 lives only there).
    for i, x in enumerate(variables):
        equations.append(sympy.expand(c[i] - sum((lams[k] * A[k][i] for k in range(m)), sympy.S.Zero)))
        matched.append(x.name)
    equations.append(sympy.expand(c0 - lam0 - sum((lams[k] * b[k] for k in range(m)), sympy.S.Zero)))
    matched.append("1")
    kept = [(lab, eq) for lab, eq in zip(matched, equations) if eq != 0]
    decisions = (set(psi.free_symbols) | set(polyhedron.parameters)) - set(variables)
    return FarkasSystem(
        polyhedron=polyhedron,
        psi=psi,
        lambda0=lam0,
        lambdas=lams,
        equations=tuple(eq for _, eq in kept),
        matched=tuple(lab for lab, _ in kept),
        decisions=tuple(sorted(decisions, key=lambda s: s.name)),
        prefix=prefix,
    )


# --------------------------------------------------------------------------- SCIP


def to_scip(expr: Any, variables: Mapping[sympy.Symbol, Any], *, what: str = "expression"):
    """A pyscipopt expression for a sympy polynomial of total degree <= 2 in ``variables``.

    Every free symbol must have a SCIP variable; coefficients are converted to floats.
    A term of degree 3 or more raises MappingError (SCIP models here are quadratic)."""
    expr = sympy.expand(_sympify(expr, what))
    gens = sorted(expr.free_symbols, key=lambda s: s.name)
    missing = [s.name for s in gens if s not in variables]
    if missing:
        raise ArgumentError(f"{what}: no SCIP variable for {', '.join(missing)}")
    if not gens:
        return quicksum([]) + float(expr)
    try:
        poly = sympy.Poly(expr, *gens)
    except sympy.PolynomialError as err:
        raise MappingError(f"{what} is not a polynomial in {', '.join(map(str, gens))}: {err}") from err
    terms = []
    for monom, coeff in poly.terms():
        if sum(monom) > 2:
            term = sympy.Mul(*(g**e for g, e in zip(gens, monom)))
            raise MappingError(
                f"{what}: the term {coeff * term} has degree {sum(monom)}; the SCIP model is at "
                f"most quadratic (pin a decision to a value, or introduce a variable for a product)"
            )
        value: Any = float(coeff)
        for g, e in zip(gens, monom):
            for _ in range(e):
                value = value * variables[g]
        terms.append(value)
    return quicksum(terms)


def add_to_scip(
    system: FarkasSystem,
    model: Model,
    variables: Mapping[sympy.Symbol, Any],
    *,
    name: str = "farkas",
) -> dict[sympy.Symbol, Any]:
    """Add ``system`` to ``model``: a continuous variable ``>= 0`` per multiplier and one
    constraint per equation. ``variables`` maps every decision of the system to its SCIP
    variable. Returns the multipliers' SCIP variables."""
    missing = [s.name for s in system.decisions if s not in variables]
    if missing:
        raise ArgumentError(f"{name}: no SCIP variable for the decision(s) {', '.join(missing)}")
    try:
        lam_vars = {
            lam: model.addVar(name=f"{name}.{lam.name}", vtype="C", lb=0.0, ub=None)
            for lam in system.multipliers
        }
        scope = {**variables, **lam_vars}
        for label, eq in zip(system.matched, system.equations):
            what = f"{name}: coefficient of {label}"
            model.addCons(to_scip(eq, scope, what=what) == 0, name=f"{name}.match[{label}]")
    except PolymapError:
        raise
    except Exception as err:  # pyscipopt raises plain Exceptions and Warnings
        raise SolverError(f"{name}: SCIP rejected the Farkas constraints: {err}") from err
    return lam_vars


# SCIP components switched off because they corrupt the process's heap on models polymap
# builds (SCIP 10.0.0 as shipped in PySCIPOpt 6.3.0; tests/test_solver_robust.py):
# - shiftandpropagate overruns a buffer it reallocates when RINS runs it in a sub-SCIP: glibc
#   aborts the process with "realloc(): invalid next size" (the generated program of fuzz
#   seed 2977). It is a primal heuristic: without it SCIP finds the same optimum, proved the
#   same way.
# - RINS: on a kernel of a fuzz program (2026-11-27), glibc aborted the process inside a RINS
#   sub-SCIP ("munmap_chunk(): invalid pointer", "malloc(): unaligned tcache chunk
#   detected"), where Ipopt registered or freed its options between SCIP's nodes 1000 and
#   1500; shiftandpropagate's overrun above was in a RINS sub-SCIP too. Ipopt is only where
#   glibc noticed: switching the NLP off instead also ended the aborts, but a heap corrupted
#   unnoticed is worse than an abort, and every crash seen was inside RINS. Over the models
#   of models/, SCIP takes the same nodes to the same optima without RINS
#   (docs/benchmarks/2026-11-27-scip-without-rins.md).
# - the NLP relaxation: polymap solves the kernels' models side by side, one thread each
#   (solve.map_kernels), and SCIP's NLP evaluates expressions with CppAD, which the SCIP in
#   this wheel does not set up for threads. With RINS off, a process that mapped 50 programs
#   in a row (docs/benchmarks/2026-11-29-fuse-as-written.py) died of a segmentation fault in
#   SCIPexprintEval (CppAD), under Ipopt, under the nlpdiving heuristic of a completesol
#   sub-SCIP, while another thread solved too; twice at the same point. The NLP only feeds
#   primal heuristics: without it every model of models/ reaches the same optimum, SCIP's
#   time over them 10.5 s against 12.3 s (docs/benchmarks/2026-11-29-scip-nlp-off.md).
UNSAFE_SCIP_PARAMS: Mapping[str, Any] = {
    "heuristics/shiftandpropagate/freq": -1,
    "heuristics/rins/freq": -1,
    "nlp/disable": True,
}


def solve(model: Model, *, time_limit_s: float | None = None) -> SolveReport:
    """Optimize ``model`` with SCIP and report its status and bounds honestly."""
    try:
        for param, value in UNSAFE_SCIP_PARAMS.items():
            model.setParam(param, value)
        if time_limit_s is not None:
            model.setParam("limits/time", float(time_limit_s))
        # without the GIL: kernels' models are solved side by side (solve.map_kernels)
        model.optimizeNogil()
        n_solutions = model.getNSols()
        inf = model.infinity()
        dual = model.getDualbound()
        dual = math.copysign(math.inf, dual) if abs(dual) >= inf else dual
        return SolveReport(
            status=model.getStatus(),
            solve_time_s=model.getSolvingTime(),
            objective=model.getObjVal() if n_solutions else None,
            dual_bound=dual,
            # SCIP's gap is its infinity (1e20) while the dual bound is still -infinity
            gap=(math.inf if model.getGap() >= inf else model.getGap()) if n_solutions else None,
            n_solutions=n_solutions,
        )
    except Exception as err:
        raise SolverError(f"SCIP failed: {err}") from err


# --------------------------------------------------------------------------- upper bounds


@dataclass(frozen=True, slots=True, eq=False)
class UpperBoundProblem:
    """``min d : forall x in P, phi(x) <= d`` as a SCIP model (seed 003), via Farkas on
    ``psi = d - phi``. ``variables`` maps every decision symbol and ``bound_symbol`` to its
    SCIP variable; ``multipliers`` maps the Farkas multipliers to theirs. The model is the
    caller's to extend (more constraints, another objective) before :meth:`solve`."""

    model: Model
    system: FarkasSystem
    bound_symbol: sympy.Symbol
    bound: Any
    variables: Mapping[sympy.Symbol, Any]
    multipliers: Mapping[sympy.Symbol, Any]

    def solve(self, *, time_limit_s: float | None = None) -> SolveReport:
        """Optimize the model (:func:`solve`)."""
        return solve(self.model, time_limit_s=time_limit_s)

    def solution(self, *, tol: float = 1e-6) -> dict[sympy.Symbol, Fraction]:
        """SCIP's best solution for every decision, ``d`` and multiplier, rationalized
        (:func:`rationalize`). SolverError when SCIP has no solution."""
        try:
            if not self.model.getNSols():
                raise SolverError(f"SCIP has no solution (status {self.model.getStatus()})")
            sol = self.model.getBestSol()
            scope = {**self.variables, **self.multipliers}
            return {s: rationalize(self.model.getSolVal(sol, v), tol=tol) for s, v in scope.items()}
        except PolymapError:
            raise
        except Exception as err:
            raise SolverError(f"could not read SCIP's solution: {err}") from err

    def certificate_holds(self, *, tol: float = 1e-6) -> bool:
        """Exact check of SCIP's (rationalized) solution as a Farkas certificate."""
        return self.system.certificate_holds(self.solution(tol=tol))


def minimize_upper_bound(
    polyhedron: Polyhedron,
    phi: Any,
    *,
    model: Model | None = None,
    variables: Mapping[sympy.Symbol, Any] | None = None,
    bound: str = "d",
    integer_bound: bool = False,
    prefix: str = "lam",
    minimize: bool = True,
) -> UpperBoundProblem:
    """Build ``min d : forall x in polyhedron, phi(x) <= d`` (psi = d - phi >= 0).

    ``variables`` maps the decisions in ``phi`` and the rows to SCIP variables of ``model``
    (a fresh, quiet Model when None). ``d`` is a new free variable named ``bound``
    (integer if ``integer_bound``, which rounds the bound up for integer-valued ``phi``).
    With ``minimize`` the objective is set to ``d``; set another one on ``.model`` to trade
    ``d`` against other costs. Over the integers the bound is conservative (module doc).

    Several bounds in one model need distinct ``bound`` and ``prefix`` names. To bound
    several forms by one shared SCIP variable, call :func:`farkas` and :func:`add_to_scip`
    directly with that variable in ``variables``."""
    d = sympy.Symbol(bound)
    phi = _sympify(phi, "phi")
    if d in phi.free_symbols or any(d in r.free_symbols for r in polyhedron.rows):
        raise ArgumentError(f"the bound's name {bound!r} is already a symbol of phi or the polyhedron")
    if d in polyhedron.variables:
        raise ArgumentError(f"the bound's name {bound!r} is a variable of the polyhedron")
    system = farkas(polyhedron, d - phi, prefix=prefix)
    if model is None:
        model = Model()
        model.hideOutput()
    try:
        d_var = model.addVar(name=bound, vtype="I" if integer_bound else "C", lb=None, ub=None)
    except Exception as err:
        raise SolverError(f"SCIP could not add the bound variable {bound!r}: {err}") from err
    scope = {**(variables or {}), d: d_var}
    lam_vars = add_to_scip(system, model, scope, name=f"{prefix}")
    if minimize:
        try:
            model.setObjective(d_var, "minimize")
        except Exception as err:
            raise SolverError(f"SCIP could not set the objective: {err}") from err
    return UpperBoundProblem(
        model=model,
        system=system,
        bound_symbol=d,
        bound=d_var,
        variables={s: v for s, v in scope.items() if s in system.decisions or s == d},
        multipliers=lam_vars,
    )


# --------------------------------------------------------------------------- numbers


def rationalize(value: float, *, tol: float = 1e-6, max_denominator: int = 10**6) -> Fraction:
    """A fraction with a small denominator within ``tol`` (absolute) of ``value``.

    Tries the best approximation with denominator <= 1, 2, 4, ... and returns the first
    within ``tol``; if none is, the closest one with denominator <= ``max_denominator``.
    Why small denominators: SCIP's values are rationals with small denominators blurred by
    floating point (feasibility tolerance 1e-6), e.g. 0.33333333 stands for 1/3. The guess
    is never trusted: the exact certificate check decides whether it is right."""
    if not math.isfinite(value):
        raise ArgumentError(f"cannot rationalize {value!r}")
    exact = Fraction(value)
    limit = 1
    while limit < max_denominator:
        guess = exact.limit_denominator(limit)
        if abs(guess - exact) <= tol:
            return guess
        limit *= 2
    return exact.limit_denominator(max_denominator)


def _exact_values(assignment: Mapping[sympy.Symbol, Any]) -> dict[sympy.Symbol, sympy.Rational]:
    out = {}
    for sym, value in assignment.items():
        if isinstance(value, bool) or not isinstance(value, (_RationalNumber, sympy.Rational)):
            raise ArgumentError(
                f"the value of {sym} must be exact (int, Fraction, sympy Rational), got {value!r}; "
                f"rationalize floats first (polymap.mapping.farkas.rationalize)"
            )
        if isinstance(value, sympy.Rational):
            out[sym] = value
        else:
            frac = Fraction(value)
            out[sym] = sympy.Rational(frac.numerator, frac.denominator)
    return out


def _sympify(value: Any, what: str) -> sympy.Expr:
    if isinstance(value, float):
        raise ArgumentError(f"{what} must be exact (int, Fraction or sympy), got the float {value!r}")
    if isinstance(value, Fraction):
        return sympy.Rational(value.numerator, value.denominator)
    try:
        expr = sympy.sympify(value, strict=True)
    except (sympy.SympifyError, TypeError) as err:
        raise ArgumentError(f"{what} is not a sympy expression: {value!r}") from err
    if not isinstance(expr, sympy.Expr):
        raise ArgumentError(f"{what} must be an expression, got {expr!r}")
    if expr.has(sympy.Float):
        # Exactness is the point of the certificate check: floats would make it approximate.
        raise ArgumentError(f"{what} must have exact coefficients, got {expr}")
    return expr


def _param_mode(params: ParamMode | str | None) -> ParamMode | None:
    if params is None or isinstance(params, ParamMode):
        return params
    try:
        return ParamMode(str(params).lower())
    except ValueError:
        raise ArgumentError(f"params must be 'quantify' or 'symbolic', got {params!r}") from None


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name = "_" + name
    return name


def exact_certificate(
    system: FarkasSystem, decisions: Mapping[sympy.Symbol, Any], multipliers: Mapping[sympy.Symbol, float]
) -> dict[sympy.Symbol, sympy.Rational] | None:
    """An exact certificate near SCIP's floating-point one, or ``None``.

    With the decisions ``theta`` fixed (integers, exact), the equations are linear in the
    multipliers. SCIP's multipliers rationalized one by one are tried first; but rounding
    each on its own can break an equation whose coefficients are large (a domain bound of
    2^26 times a multiplier of 1e-8), so when they fail the exact check the
    multipliers SCIP left at zero stay zero and the others are solved for exactly with
    sympy; remaining freedom is fixed at SCIP's (rationalized) values. A multiplier that
    matters may be tiny (1/N for a domain bound N of 10^9, below any fixed threshold), so the
    supports tried are SCIP's multipliers above 1e-9, then every nonzero one, then all of
    them. The result is checked by :meth:`FarkasSystem.certificate_holds` before it is
    returned."""
    theta = {s: sympy.Rational(rationalize(float(v))) for s, v in decisions.items()}
    # usually a certificate already, and checking it is one substitution per equation, where
    # the exact solve below expands every equation first
    rounded = {
        lam: sympy.Rational(rationalize(max(0.0, float(multipliers.get(lam, 0.0)))))
        for lam in system.multipliers
    }
    if system.certificate_holds({**theta, **rounded}):
        return rounded
    equations = [sympy.expand(eq.subs(theta)) for eq in system.equations]
    for support in _supports(system, multipliers):
        values = _solve_on_support(system, theta, equations, support, multipliers)
        if values is not None:
            return values
    return None


def _supports(system: FarkasSystem, multipliers: Mapping[sympy.Symbol, float]):
    """The multiplier sets to solve for, from SCIP's support to every multiplier."""
    seen = []
    for threshold in (1e-9, 0.0):
        support = [lam for lam in system.multipliers if multipliers.get(lam, 0.0) > threshold]
        if support not in seen:
            seen.append(support)
            yield support
    everything = list(system.multipliers)
    if everything not in seen:
        yield everything


def _solve_on_support(
    system: FarkasSystem,
    theta: dict,
    equations: list,
    support: list,
    multipliers: Mapping[sympy.Symbol, float],
) -> dict[sympy.Symbol, sympy.Rational] | None:
    """Exact multipliers that are zero off ``support`` and solve ``equations``, the free ones
    fixed at SCIP's rationalized values; ``None`` when that is no certificate."""
    zero = {lam: sympy.S.Zero for lam in system.multipliers if lam not in support}
    reduced = [sympy.expand(eq.subs(zero)) for eq in equations]
    candidates = []
    if support:
        for solution in sympy.linsolve(reduced, support):
            free = set().union(*(sympy.sympify(v).free_symbols for v in solution))
            guess = {f: sympy.Rational(rationalize(max(0.0, float(multipliers.get(f, 0.0))))) for f in free}
            candidates.append(
                {**zero, **{lam: sympy.sympify(v).subs(guess) for lam, v in zip(support, solution)}}
            )
    elif all(eq == 0 for eq in reduced):
        candidates.append(zero)
    for values in candidates:
        if system.certificate_holds({**theta, **values}):
            return values
    return None
