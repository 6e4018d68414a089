"""The global-memory accesses of a kernel, as the cost model sees them.

For every access ``B[e_0, .., e_m]`` of a statement in a kernel, at the sizes the cost is
estimated for (all bound), this module gives:

* the flat element address ``addr(x) = sum_d e_d(x) * rowstride_d`` (row-major), as a
  sympy expression in the statement's loop indices ``x`` and in existential variables
  ``q`` for each floor division or modulo (``floor(e / c) = q`` with
  ``c q <= e <= c q + c - 1``; ``e mod c = e - c q``);
* the Farkas systems that bound the address distance between neighbouring lanes of a warp
  over the whole domain (seed 003): with ``delta_j`` the step of band loop ``j`` between
  lanes ``tid`` and ``tid + 1`` (a decision), ``D >= |addr(x + delta) - addr(x)|`` for
  every ``x`` in the domain, i.e. ``psi(x) = D -+ (addr(x + delta) - addr(x)) >= 0``.

For an affine access the difference does not depend on ``x``; the shifted point's domain
rows are then left out (a certificate over the larger set is still a proof), so the
system is linear in (lambda, D, delta). For a quasi-affine access the shifted point gets
its own existentials and the domain rows at ``x + delta``, whose constants contain
``delta``: those equations are bilinear in (lambda, delta), as in seed 003.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import islpy as isl
import sympy

from polymap.errors import InternalError
from polymap.ir.nodes import (
    Anchor,
    Assign,
    BufferDecl,
    DType,
    Gather,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    INeg,
    IVar,
    index_vars,
    substitute_index,
)
from polymap.ir.walk import walk_block
from polymap.mapping.farkas import FarkasSystem, Polyhedron, farkas
from polymap.mapping.space import Kernel
from polymap.poly.isl_text import isl_expr
from polymap.poly.model import PolyModel, StatementModel


@dataclass(frozen=True, slots=True)
class GlobalAccess:
    """One access to a buffer in global memory, with what the cost model needs."""

    statement: str
    text: str
    buffer: str
    is_write: bool
    element_bytes: int
    # a 16-bit float: each value read widens to f32, each one written rounds back, one
    # instruction each (``cvt``), which the issue time counts
    converts: bool
    instances: int  # executions of the statement in one launch of the kernel
    coefficients: tuple[tuple[str, int], ...]  # d addr / d i_j for band loops (affine part)
    quasi_affine: bool
    systems: tuple[FarkasSystem, ...]  # every system below, for checks of its coefficients
    # per band loop j, (j, D_j, systems): psi = D_j -+ (addr(x + delta_j e_j) - addr(x)) >= 0
    # per piece of the domain, the bound for a mapping with loop j on the lanes' axis
    per_loop: tuple[tuple[str, sympy.Symbol, tuple[FarkasSystem, ...]], ...]
    deltas: tuple[sympy.Symbol, ...]  # delta_j symbols used by the systems
    indices: tuple[IndexExpr, ...]
    row_strides: tuple[int, ...]
    domain: isl.Set
    isl_names: tuple[tuple[str, str], ...]  # user loop index -> isl name
    # (position, extent) of each gathered index (``A[I[i], j]``): any value in [0, extent)
    gathered: tuple[tuple[int, int], ...] = ()

    def exact_stride(self, delta: dict[str, int], within: tuple[str, int] | None = None) -> int:
        """max |addr(x + delta) - addr(x)| over the points x with x and x + delta in the
        domain, computed exactly by isl (the Farkas bound may exceed it for quasi-affine
        accesses: it bounds the rational relaxation). A gathered index is the same at both
        points where ``delta`` moves none of its source's indices (it cancels); where it does,
        the two values are any two of the dimension, ``(extent - 1) * row stride`` at most,
        which is what the Farkas bound charges too. ``within = (index, n)``: only the steps
        inside one group of n (x's ``index`` is not the last of its group: ``index mod n <
        n - 1``), the neighbouring lanes of one warp where iteration i of a loop runs on lane
        i mod n; a quasi-affine index such as ``p // 32`` then moves only between warps."""
        if self.gathered:
            worst, indices = gathered_stride(self.indices, self.gathered, self.row_strides, delta)
            return worst + replace(self, indices=indices, gathered=()).exact_stride(delta, within)
        coefficients = dict(self.coefficients)
        if not self.quasi_affine and all(i in coefficients for i, step in delta.items() if step):
            return abs(sum(c * delta.get(i, 0) for i, c in self.coefficients))
        return isl_stride(self.domain, self.indices, self.row_strides, dict(self.isl_names), delta, within)


def gathered_stride(
    indices: tuple[IndexExpr, ...],
    gathered: tuple[tuple[int, int], ...],
    row_strides: tuple[int, ...],
    delta: dict[str, int],
) -> tuple[int, tuple[IndexExpr, ...]]:
    """The part of a stride a gathered index makes (``(position, extent)`` each in
    ``gathered``): ``(extent - 1) * row stride`` where ``delta`` moves one of its source's
    indices, 0 where it moves none (the index cancels); and the indices with each gathered
    one replaced by 0, for the rest of the stride."""
    moved = {i for i, step in delta.items() if step}
    worst, rest = 0, list(indices)
    for k, extent in gathered:
        if index_vars(rest[k]) & moved:
            worst += (extent - 1) * row_strides[k]
        rest[k] = IConst(0)
    return worst, tuple(rest)


def isl_stride(
    domain: isl.Set,
    indices: tuple[IndexExpr, ...],
    row_strides: tuple[int, ...],
    names: dict[str, str],
    delta: dict[str, int],
    within: tuple[str, int] | None = None,
) -> int:
    """max |addr(x + delta) - addr(x)| over the points x of ``domain`` with x + delta in it,
    exact by isl: ``addr`` the row-major offset of ``indices`` (``row_strides`` per index),
    ``names`` each user loop index's isl name (the domain's dimensions); with ``within =
    (index, n)`` only over the x whose ``index`` is not the last of its group of n
    (``GlobalAccess.exact_stride``)."""
    return _isl_stride(
        domain, indices, row_strides, tuple(names.items()), tuple(sorted(delta.items())), within
    )


@functools.lru_cache(maxsize=4096)
def _isl_stride(
    domain: isl.Set,
    indices: tuple[IndexExpr, ...],
    row_strides: tuple[int, ...],
    names_in_order: tuple[tuple[str, str], ...],
    delta_items: tuple[tuple[str, int], ...],
    within: tuple[str, int] | None,
) -> int:
    """``isl_stride``, kept per access and step: the cost model asks for the same strides of
    every mapping with the same steps (an enumeration of 15k mappings asked 15k times for a
    few dozen, each an isl computation of a millisecond)."""
    names, delta = dict(names_in_order), dict(delta_items)
    shift = {u: IBin(IndexOp.ADD, IVar(u), IConst(delta.get(u, 0))) for u in names}

    def flat(exprs):
        return " + ".join(f"{s}*({isl_expr(e, names)})" for e, s in zip(exprs, row_strides)) or "0"

    shifted = tuple(substitute_index(e, shift) for e in indices)
    space = domain.get_space()
    dims = ", ".join(names[u] for u in names)
    tuple_name = domain.get_tuple_name()
    params = ", ".join(
        space.get_dim_name(isl.dim_type.param, k) for k in range(space.dim(isl.dim_type.param))
    )
    diff = isl.PwAff(f"[{params}] -> {{ {tuple_name}[{dims}] -> [({flat(shifted)}) - ({flat(indices)})] }}")
    moved = isl.Map(
        f"[{params}] -> {{ {tuple_name}[{dims}] -> {tuple_name}["
        + ", ".join(f"{names[u]} + {delta.get(u, 0)}" for u in names)
        + "] }"
    )
    pairs = domain.intersect(moved.intersect_range(domain).domain())
    if within is not None and within[0] in names:
        index, group = within
        pairs = pairs.intersect(
            isl.Set(f"[{params}] -> {{ {tuple_name}[{dims}] : {names[index]} mod {group} < {group - 1} }}")
        )
    if pairs.is_empty():
        return 0
    diff = diff.intersect_domain(pairs)
    return int(max(abs(diff.max_val().to_python()), abs(diff.min_val().to_python())))


def delta_symbol(index: str) -> sympy.Symbol:
    """The lane step of band loop ``index``: a decision, named so no isl name can clash."""
    return sympy.Symbol(f"delta__{index}")


def kernel_accesses(kernel: Kernel, model: PolyModel, *, launches: int = 1) -> tuple[GlobalAccess, ...]:
    """The global accesses of every statement in ``kernel`` (``model`` is of the bound program);
    instance counts are per launch (the kernel runs ``launches`` times, once per host-loop
    iteration)."""
    local = {b.name for b in model.buffers if b.is_local}
    found: list[GlobalAccess] = []
    names = {s.name for s in kernel_statements(kernel)}
    for stmt in model.statements:
        if stmt.name not in names:
            continue
        instances = model.instance_count(stmt.name) // max(1, launches)
        read = set()  # a statement's reads of one element: the compiler loads it once
        for k, access in enumerate(stmt.accesses):
            if not access.is_write:
                if access.text in read:
                    continue  # ``(X[i, j] - m) * (X[i, j] - m)``: one load, no store between
                read.add(access.text)
            if access.buffer in local:
                continue  # registers or per-thread memory, not global traffic
            decl = model.program.buffer(access.buffer)
            if decl.by_value:
                continue  # a kernel parameter (an in scalar): no memory access
            if access.atomic is not None and not access.is_write:
                continue  # a scatter's atomic update is one request, charged as its write
            found.append(_global_access(kernel, stmt, access, decl, instances, model, tag=f"{stmt.name}_{k}"))
    return tuple(found)


def kernel_statements(kernel: Kernel) -> tuple[Assign | Anchor, ...]:
    """The statements a thread of ``kernel`` runs, in textual order."""
    return tuple(s for s in walk_block(kernel.body) if isinstance(s, (Assign, Anchor)))


def _global_access(
    kernel: Kernel,
    stmt: StatementModel,
    access,
    decl: BufferDecl,
    instances: int,
    model: PolyModel,
    *,
    tag: str,
) -> GlobalAccess:
    strides = row_strides(decl)
    isl_of = {user: model.names[user] for user in stmt.ctx.indices}
    xs = {user: sympy.Symbol(isl_of[user]) for user in stmt.ctx.indices}
    band = [i for i in kernel.indices if i in xs]
    deltas = {i: delta_symbol(i) for i in band}
    # all loops stepped at once: whether the access is quasi-affine, and if not its exact
    # strides c_j (exact_stride); the solver's bounds are per loop (_lane_systems)
    extents = gathered_extents(access, decl)
    here = _Address(xs, tag=f"q_{tag}", extents=extents)
    there = _Address(
        {u: x + deltas.get(u, 0) for u, x in xs.items()},
        tag=f"r_{tag}",
        extents=extents,
        gathers_of=here,
        moved=set(deltas),
    )
    simplified = _simplified_indices(access, stmt)
    addr = _flat(here, access.indices, simplified, strides)
    shifted = _flat(there, access.indices, simplified, strides)
    diff = sympy.expand(shifted - addr)
    quasi = bool(here.rows)
    coefficients = tuple((i, int(diff.coeff(deltas[i]))) for i in band) if not quasi else ()
    per_loop = tuple(
        _lane_systems(
            stmt, access, simplified, strides, extents, xs, index, deltas[index], tag=f"{tag}_{index}"
        )
        for index in band
    )
    return GlobalAccess(
        statement=stmt.name,
        text=access.text,
        buffer=access.buffer,
        is_write=access.is_write,
        element_bytes=decl.dtype.itemsize,
        converts=decl.dtype in (DType.F16, DType.BF16),
        instances=instances,
        coefficients=coefficients,
        quasi_affine=quasi,
        systems=tuple(system for _, _, systems in per_loop for system in systems),
        per_loop=per_loop,
        deltas=tuple(deltas.values()),
        indices=access.indices,
        row_strides=strides,
        # the loops' iterations, an if's guard left out: the cost charges a guarded
        # statement for every instance of its loops (an upper bound), which keeps its lane
        # systems those of the loops (a guard's pieces made SCIP's model far harder)
        domain=stmt.loops_domain,
        isl_names=tuple(isl_of.items()),
        gathered=tuple((k, extents[k]) for k in access.gathered),
    )


def _lane_systems(
    stmt: StatementModel,
    access,
    simplified,
    strides,
    extents: dict[int, int],
    xs: dict,
    index: str,
    delta: sympy.Symbol,
    *,
    tag: str,
) -> tuple[str, sympy.Symbol, tuple[FarkasSystem, ...]]:
    """The Farkas systems of an access for lanes that step band loop ``index`` by
    ``delta``, the other loops fixed. One loop at a time: no other loop's delta can cancel
    this one's stride within SCIP's tolerances (a delta of -3e-8 times a row stride of
    3.4e7 once hid a stride of 1), and the floor divisions
    that do not involve ``index`` are then the same existential at ``x`` and at the shifted
    point (``a_b / 32`` with the lanes along ``d``): two existentials would differ by up to
    one over the rationals, and Farkas would charge a row stride that no lane pair has."""
    here = _Address(xs, tag=f"q_{tag}", extents=extents)
    there = _Address(
        {u: x + delta if u == index else x for u, x in xs.items()},
        tag=f"r_{tag}",
        shared=here,
        extents=extents,
        gathers_of=here,
        moved={index},
    )
    addr = _flat(here, access.indices, simplified, strides)
    shifted = _flat(there, access.indices, simplified, strides)
    diff = sympy.expand(shifted - addr)
    bound = sympy.Symbol(f"D__{tag}")
    systems: list[FarkasSystem] = []
    shift = {xs[index]: xs[index] + delta}
    if not here.rows:  # affine: diff = c_j delta_j with delta_j >= 0, whatever x is
        for piece in stmt.loops_domain.get_basic_sets():
            domain = Polyhedron.from_isl(piece)
            stride = abs(diff.coeff(delta))  # diff is c_j delta_j: no x, no constant
            systems.append(farkas(domain, bound - stride * delta, prefix=f"lam_{tag}_up{len(systems)}"))
        return index, bound, tuple(systems)
    for piece in stmt.loops_domain.get_basic_sets():
        domain = Polyhedron.from_isl(piece)
        fresh = {e: sympy.Symbol(f"{e.name}_{tag}_shift") for e in domain.existentials}
        rows = list(domain.rows) + here.rows + [r.subs(shift).subs(fresh) for r in domain.rows] + there.rows
        variables = list(domain.variables) + here.existentials + list(fresh.values()) + there.existentials
        polyhedron = Polyhedron(tuple(variables), tuple(rows))
        for sign, label in ((1, "up"), (-1, "down")):
            systems.append(farkas(polyhedron, bound - sign * diff, prefix=f"lam_{tag}_{label}{len(systems)}"))
    return index, bound, tuple(systems)


def _flat(address: _Address, indices, simplified, strides) -> sympy.Expr:
    """The flat element address of an access, ``sum_d e_d * rowstride_d``."""
    terms = (address.index(e, a, k) * s for k, (e, a, s) in enumerate(zip(indices, simplified, strides)))
    return sum(terms, sympy.S.Zero)


def gathered_extents(access, decl: BufferDecl) -> dict[int, int]:
    """The extent of each gathered position of ``access`` (a bound program's shape)."""
    extents = _row_extents(decl)
    return {k: extents[k] for k in access.gathered}


def _row_extents(decl: BufferDecl) -> tuple[int, ...]:
    extents = []
    for e in decl.shape:
        if not isinstance(e, IConst):
            raise InternalError(f"buffer '{decl.name}' has a symbolic shape {e} in a bound program")
        extents.append(e.value)
    return tuple(extents)


def row_strides(decl: BufferDecl) -> tuple[int, ...]:
    extents = _row_extents(decl)
    strides, running = [], 1
    for extent in reversed(extents):
        strides.append(running)
        running *= extent
    return tuple(reversed(strides))


def _simplified_indices(access, stmt: StatementModel) -> tuple[isl.Aff | None, ...]:
    """isl's own form of each index of ``access`` where it is one quasi-affine piece, else
    ``None``. isl normalizes what the user wrote: ``(i * 1048576) / 1048576`` is ``i`` and
    ``(65536 * i) % 6`` is ``2 * (-i mod 3)``, so the Farkas rows carry isl's small
    coefficients instead of the user's large ones (issue 14 item 6: SCIP's tolerances do
    not survive a coefficient of 2^20 on an existential)."""
    relation = access.addressing.intersect_domain(stmt.domain)
    try:
        function = isl.PwMultiAff.from_map(relation)
    except isl.Error:
        return (None,) * len(access.indices)
    out = []
    for d in range(len(access.indices)):
        pieces = function.get_pw_aff(d).get_pieces()
        out.append(pieces[0][1] if len(pieces) == 1 else None)
    return tuple(out)


class _Address:
    """Index expressions as sympy, with an existential per floor division or modulo."""

    def index(self, e: IndexExpr | Gather, aff: isl.Aff | None, position: int = 0) -> sympy.Expr:
        """The index ``e``, from isl's normalized ``aff`` of it when there is one."""
        if isinstance(e, Gather):
            return self.gathered(position, e)
        if aff is None or _is_affine(e):
            return self.expr(e)
        values = [self.values[_user_name(aff, k, self.values)] for k in range(aff.dim(isl.dim_type.in_))]
        return self._aff(aff, values)

    def _aff(self, aff: isl.Aff, values: list) -> sympy.Expr:
        """``aff`` over the input values, with an existential per integer division of its
        local space. Division ``k`` is an affine function of the inputs and of divisions
        ``0..k-1`` of the same local space."""
        divs: list[sympy.Expr] = []
        for k in range(aff.dim(isl.dim_type.div)):
            divs.append(self._floor(_linear(aff.get_div(k), values, divs)))
        return _linear(aff, values, divs)

    def _floor(self, value: sympy.Expr) -> sympy.Symbol:
        """A new existential ``q = floor(value)``: ``0 <= m (value - q) <= m - 1`` with ``m``
        the common denominator of ``value``."""
        value = sympy.expand(value)
        if value in self.floors:
            return self.floors[value]
        m = sympy.fraction(sympy.together(value))[1]
        q = self.floors[value] = sympy.Symbol(f"{self.tag}{len(self.existentials)}")
        self.existentials.append(q)
        scaled = sympy.expand(m * value)
        self.rows += [scaled - m * q, m * q + m - 1 - scaled]
        return q

    def __init__(
        self,
        values: dict[str, sympy.Expr],
        *,
        tag: str,
        shared: _Address | None = None,
        extents: dict[int, int] | None = None,
        gathers_of: _Address | None = None,
        moved: set[str] = frozenset(),
    ) -> None:
        self.values = values
        self.tag = tag
        self.rows: list[sympy.Expr] = []
        self.existentials: list[sympy.Symbol] = []
        # floor(value / divisor) -> its existential; with ``shared``, those of another
        # address, so that a division whose argument is the same at both points is one variable
        self.floors: dict[sympy.Expr, sympy.Symbol] = shared.floors if shared is not None else {}
        # a gathered index is an existential in [0, extent): per position, the extent; the
        # shifted point's address (``gathers_of`` the unshifted one, its loops ``moved``)
        # shares the unshifted one's where the shift moves none of the source's indices
        self.extents = extents or {}
        self.gathers: dict[int, sympy.Symbol] = {}
        self.gathers_of = gathers_of
        self.moved = moved

    def gathered(self, position: int, g: Gather) -> sympy.Expr:
        """The value of the gathered index at ``position``: any integer of its dimension."""
        if self.gathers_of is not None and not (index_vars(g) & self.moved):
            return self.gathers_of.gathered(position, g)
        if position not in self.gathers:
            v = self.gathers[position] = sympy.Symbol(f"{self.tag}g{len(self.existentials)}")
            self.existentials.append(v)
            self.rows += [v, self.extents[position] - 1 - v]
        return self.gathers[position]

    def expr(self, e: IndexExpr) -> sympy.Expr:
        if isinstance(e, IConst):
            return sympy.Integer(e.value)
        if isinstance(e, IVar):
            if e.name not in self.values:
                raise InternalError(f"index '{e.name}' is neither bound nor a loop index here")
            return self.values[e.name]
        if isinstance(e, INeg):
            return -self.expr(e.operand)
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        if e.op is IndexOp.ADD:
            return lhs + rhs
        if e.op is IndexOp.SUB:
            return lhs - rhs
        if e.op is IndexOp.MUL:
            return sympy.expand(lhs * rhs)  # one side is a number in a bound, affine program
        c = int(rhs)
        q = self._floor(lhs / c)  # c q <= lhs <= c q + c - 1
        return q if e.op is IndexOp.FLOORDIV else lhs - c * q


def _is_affine(e: IndexExpr) -> bool:
    if isinstance(e, (IConst, IVar)):
        return True
    if isinstance(e, INeg):
        return _is_affine(e.operand)
    return e.op not in (IndexOp.FLOORDIV, IndexOp.MOD) and _is_affine(e.lhs) and _is_affine(e.rhs)


def _rational(value: isl.Val) -> sympy.Rational:
    return sympy.Rational(str(value))  # "p/q": exact at any size, unlike get_num_si


def _user_name(aff: isl.Aff, k: int, values: dict[str, sympy.Expr]) -> str:
    """The user loop index of input dimension ``k`` of ``aff`` (its isl name is the name of
    the loop's symbol)."""
    name = aff.get_dim_name(isl.dim_type.in_, k)
    for user, value in values.items():
        if any(s.name == name for s in value.free_symbols):
            return user
    raise InternalError(f"isl dimension '{name}' is not a loop index of the access")


def _linear(aff: isl.Aff, values: list, divs: list) -> sympy.Expr:
    """``aff`` as sympy, its inputs and (already named) divisions substituted."""
    expr = _rational(aff.get_constant_val())
    for k, v in enumerate(values):
        expr += _rational(aff.get_coefficient_val(isl.dim_type.in_, k)) * v
    for k in range(aff.dim(isl.dim_type.div)):
        c = _rational(aff.get_coefficient_val(isl.dim_type.div, k))
        if c:
            if k >= len(divs):
                raise InternalError(f"isl division {k} of {aff} refers to a later division")
            expr += c * divs[k]
    return sympy.expand(expr)
