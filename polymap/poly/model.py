"""The polyhedral model of a program: isl domains, accesses, schedule and dependences.

``analyze(program)`` turns the frozen IR into isl objects, proves the program in bounds
and race free (``checks.py``), and computes its dependences (``deps.py``):

* a statement ``S`` inside loops ``i_0 .. i_n`` has the domain
  ``{ S[i_0, .., i_n] : 0 <= i_k < extent_k }``, where an extent may mention the sizes and
  the outer indices (triangular domains);
* an access ``B[e_0, .., e_m]`` is the map ``{ S[i] -> B[e_0(i), .., e_m(i)] }`` restricted
  to the domain; a block-local ``new`` buffer declared inside loops ``j_0 .. j_k`` lives in
  the expanded space ``B[j_0, .., j_k, e_0, .., e_m]``, one private copy per iteration of
  the loops around its declaration;
* the schedule is the 2d+1 textual order ``S[i] -> [p_0, i_0, p_1, .., i_n, p_{n+1}]``
  (``StatementContext.position``), padded with zeros to a common length.

Sizes that are not bound stay isl parameters, constrained by the context (every size >= 1,
and whatever the user adds), so every proof holds for all sizes in the context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import islpy as isl

from polymap.errors import ArgumentError, InternalError, NotAffineError, ProgramError, SourceLoc
from polymap.ir import walk
from polymap.ir.nodes import (
    ATOMIC_OPS,
    Anchor,
    Assign,
    AssignOp,
    BufferDecl,
    Gather,
    IndexExpr,
    Loop,
    New,
    Program,
    Read,
    Stmt,
    index_vars,
)
from polymap.ir.validate import check_program_argument
from polymap.poly.checks import ParLoop, check_bounds, check_initialized, check_races
from polymap.poly.deps import Dependences, dependences
from polymap.poly.isl_text import (
    ISL_KEYWORDS,
    IslNames,
    NonAffine,
    access_tuple,
    condition_isl,
    evaluate_index,
    isl_expr,
)

# --------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True, eq=False)
class BufferModel:
    """A buffer in isl: ``isl_name`` is its tuple name, ``owner`` the indices of the loops
    around a block-local declaration (its leading expanded dimensions), and ``in_bounds``
    the set of its elements inside the declared shape (owner dimensions unconstrained)."""

    name: str
    decl: BufferDecl
    isl_name: str
    owner: tuple[str, ...]
    in_bounds: isl.Set
    is_local: bool = False  # a block-local ``new``, expanded by its owner loops


@dataclass(frozen=True, slots=True, eq=False)
class Access:
    """One buffer access of a statement instance: ``relation`` maps the statement's domain
    to the buffer's (possibly expanded) space; ``text`` is the access as written."""

    statement: str
    buffer: str
    indices: tuple[IndexExpr, ...]
    relation: isl.Map
    is_write: bool
    loc: SourceLoc | None
    text: str
    # the positions (of the declared dimensions) whose index is read from a buffer (a
    # gather): ``relation`` reaches every element along them (a may-read, so dependences
    # stay sound) and ``address`` is the function that reads 0 there, for the code, whose
    # printer puts the checked value read at run time in its place
    gathered: tuple[int, ...] = ()
    address: isl.Map | None = None
    # a write under a data condition (``Assign.predicate``): an instance writes only where
    # the condition holds, so ``relation`` is what it may write (dependences and races take
    # it whole: sound)
    may: bool = False
    # the access is an atomic update's (``Assign.is_atomic``: a scatter's or one written
    # ``atomic``; its write and its read of the target), with this operator: two such accesses
    # with one operator commute, so they neither race nor depend on each other (``prove``,
    # ``poly.deps``)
    atomic: AssignOp | None = None

    def commutes_with(self, other: Access) -> bool:
        """Whether this access and ``other`` are atomic updates of one buffer with operators
        that commute (one operator, or ``+=`` and ``-=``: ``AssignOp.commutes_atomically_with``),
        which the GPU applies in any order with one result (up to a float's rounding:
        ``deterministic=False``)."""
        return (
            self.atomic is not None
            and other.atomic is not None
            and self.atomic.commutes_atomically_with(other.atomic)
            and self.buffer == other.buffer
        )

    @property
    def addressing(self) -> isl.Map:
        """The access as a function of the instance (gathered positions at 0)."""
        return self.relation if self.address is None else self.address

    @property
    def verb(self) -> str:
        return ("may write" if self.may else "writes") if self.is_write else "reads"

    @property
    def verb_plural(self) -> str:
        return ("may write" if self.may else "write") if self.is_write else "read"

    def __str__(self) -> str:
        return f"{'write' if self.is_write else 'read'} {self.text}"


@dataclass(frozen=True, slots=True, eq=False)
class StatementModel:
    """A statement (Assign or Anchor) with its isl domain and accesses. ``dims`` are the
    isl names of the domain dimensions (the enclosing loop indices, outermost first)."""

    name: str
    ctx: walk.StatementContext
    domain: isl.Set
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    dims: tuple[str, ...]
    # the iterations of its loops, without the guard of an if around it: what the loops
    # (and the grid that runs a band) span; ``domain`` where it has no guard
    loop_domain: isl.Set | None = None

    @property
    def loops_domain(self) -> isl.Set:
        return self.domain if self.loop_domain is None else self.loop_domain

    @property
    def stmt(self):
        return self.ctx.stmt

    @property
    def loops(self) -> tuple[Loop, ...]:
        return self.ctx.loops

    @property
    def accesses(self) -> tuple[Access, ...]:
        """Writes first, then reads: the order in which they appear in ``B[..] op= value``."""
        return self.writes + self.reads

    @property
    def label(self) -> str:
        """``S0 `C[i, j] += A[i, k] * B[k, j]``` for messages."""
        return f"{self.name} `{self.stmt}`"


@dataclass(frozen=True, slots=True, eq=False)
class PolyModel:
    """The polyhedral model of a program, proved in bounds and race free.

    ``names`` maps user names (sizes, loop indices) to isl names and ``tuples`` statement
    and buffer names to isl tuple names; later stages use ``names.fresh`` for their own
    isl variables so that none can clash with the program's."""

    program: Program
    params: tuple[str, ...]
    context: isl.Set
    statements: tuple[StatementModel, ...]
    buffers: tuple[BufferModel, ...]
    schedule: isl.UnionMap
    dependences: Dependences
    race_free: tuple[ParLoop, ...]
    names: IslNames
    tuples: IslNames

    def statement(self, name: str) -> StatementModel:
        """The statement called ``name`` (S0, S1, ...)."""
        for s in self.statements:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.statements) or "none"
        raise ArgumentError(
            f"program '{self.program.name}' has no statement '{name}'; its statements are {known}"
        )

    def instance_count(self, name: str, sizes: dict[str, int] | None = None) -> int:
        """How many times statement ``name`` runs (the number of points of its domain):
        at ``sizes`` for the sizes left symbolic, which must then all have a value.

        Counted from the loop extents, which define the domain exactly; isl's
        ``count_val`` gives the same number (the tests check it) but takes minutes on
        real sizes because it scans the domain row by row."""
        stmt = self.statement(name)
        missing = [p for p in self.params if p not in (sizes or {})]
        if missing:
            raise ArgumentError(
                f"cannot count the instances of {name} in program '{self.program.name}': sizes "
                f"{', '.join(missing)} are symbolic; bind them (Program.bind(...) or --size)"
            )
        return _Counter(stmt.loops).count(0, {p: sizes[p] for p in self.params})

    def in_context(self, sizes: dict[str, int]) -> bool:
        """Whether ``sizes`` (a value per symbolic size, by the program's names) lie in the
        context: the sizes every check, and a mapping's proof, holds for."""
        params = self.context.get_var_names(isl.dim_type.param)
        return params_hold(self.context, {name: sizes[self.names.user(name)] for name in params})

    def total_instances(self) -> int:
        """How many statement instances the program runs in all."""
        return sum(self.instance_count(s.name) for s in self.statements)

    def describe(self) -> str:
        """A readable summary: domains, accesses, schedule, dependences, race-free loops."""
        return _wrap_isl(lambda: _describe(self), self.program)

    def __str__(self) -> str:
        return self.describe()


# ------------------------------------------------------------------------ analysis


def params_hold(condition: isl.Set, values: dict[str, int]) -> bool:
    """Whether a set of parameters holds the point ``values`` (its isl names -> values)."""
    for k in range(condition.dim(isl.dim_type.param)):
        value = isl.Val.int_from_si(
            condition.get_ctx(), values[condition.get_dim_name(isl.dim_type.param, k)]
        )
        condition = condition.fix_val(isl.dim_type.param, k, value)
    return not condition.is_empty()


def without_params(s: isl.Set, names) -> isl.Set:
    """``s`` with the parameters ``names`` (isl names) projected out, where it has them."""
    for name in names:
        at = s.find_dim_by_name(isl.dim_type.param, name)
        if at >= 0:
            s = s.project_out(isl.dim_type.param, at, 1)
    return s


def analyze(program: Program, *, context: str | None = None) -> PolyModel:
    """Build the polyhedral model of ``program`` and prove it in bounds and race free.

    ``context`` adds isl constraints over the size names (``"N >= 256 and N mod 32 = 0"``)
    to the default context, every size >= 1; every check holds for all sizes in it.

    Raises NotAffineError (an index, extent or shape is not quasi-affine), BoundsError,
    RaceError, or ArgumentError (a malformed or empty context)."""
    check_program_argument(program, "analyze")
    if context is not None and not isinstance(context, str):
        raise ArgumentError(
            f"analyze() takes the context as a str of isl constraints (e.g. 'N >= 256'), got "
            f"{type(context).__name__}"
        )
    return _wrap_isl(lambda: _analyze(program, context), program)


def _analyze(program: Program, user_context: str | None) -> PolyModel:
    names, tuples = IslNames(), IslNames()
    for name in program.param_names:
        names[name]
    for loop, _ in walk.loops(program):
        names[loop.index]  # claim every user name before any internal name is invented
    contexts = tuple(walk.statements(program))
    for ctx in contexts:
        tuples[ctx.name]
    context = _context(program, names, user_context)
    buffers, scopes = _buffers(program, names, tuples, context)
    statements = tuple(_statement(program, names, tuples, context, c, scopes[c.position]) for c in contexts)
    schedule = _schedule(statements)
    by_isl_name = {b.isl_name: b for b in buffers}
    check_bounds(program, statements, by_isl_name, names)
    race_free = check_races(program, statements, names)
    check_initialized(program, statements, by_isl_name, schedule, names)
    deps = dependences(statements, schedule, tuples)
    return PolyModel(
        program, program.param_names, context, statements, buffers, schedule, deps, race_free, names, tuples
    )


def _wrap_isl(fn, program: Program):
    """Run ``fn``, turning a raw isl failure into an InternalError (a polymap bug)."""
    try:
        return fn()
    except isl.Error as exc:
        raise InternalError(
            f"isl failed while analyzing program '{program.name}': {exc}", **program.error_context()
        ) from exc


def _prefix(program: Program, names: IslNames) -> str:
    return "[" + ", ".join(names[p] for p in program.param_names) + "] -> "


def _context(program: Program, names: IslNames, text: str | None) -> isl.Set:
    """Every size >= 1, intersected with the user's constraints. Bound sizes may appear in
    the user's text: they are checked against their values and projected out."""
    base = isl.Set(
        _prefix(program, names)
        + "{ : "
        + " and ".join(f"{names[p]} >= 1" for p in program.param_names)
        + " }"
    )
    base = _assumed(program, names, base)
    if text is None or not text.strip():
        return base
    sizes = ", ".join(program.param_names) or "none"
    if re.search(r"[{}\[\];]|->", text):
        raise ArgumentError(f"context {text!r} must be constraints only, e.g. 'N >= 256 and N mod 32 = 0'")
    bound = program.sizes
    words = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if w.lower() not in ISL_KEYWORDS}
    # Variables bound by ``exists (e0, e1 : ...)`` are the user's own, not sizes.
    local = {w for group in re.findall(r"exists\s*\(([^:]*):", text) for w in re.findall(r"\w+", group)}
    unknown = sorted(words - set(program.param_names) - set(bound) - local)
    if unknown:
        raise ArgumentError(
            f"context {text!r} mentions {', '.join(map(repr, unknown))}, which "
            f"{'is not a size' if len(unknown) == 1 else 'are not sizes'} of program '{program.name}' "
            f"(its sizes are {sizes})"
        )
    declared = [names[p] for p in program.param_names] + list(bound)
    try:
        user = isl.Set(f"[{', '.join(declared)}] -> {{ : {text} }}")
    except isl.Error:
        raise ArgumentError(
            f"cannot read context {text!r}: expected isl constraints over the sizes {sizes}, "
            "e.g. 'N >= 256 and N mod 32 = 0'"
        ) from None
    for name, value in bound.items():
        user = without_params(user.intersect_params(isl.Set(f"[{name}] -> {{ : {name} = {value} }}")), [name])
    context = base.intersect(user)
    if context.is_empty():
        fixed = ", ".join(f"{n} = {v}" for n, v in bound.items())
        raise ArgumentError(
            f"context {text!r} admits no sizes for program '{program.name}' (sizes are >= 1"
            f"{'; bound: ' + fixed if fixed else ''})"
        )
    return context


def _assumed(program: Program, names: IslNames, base: isl.Set) -> isl.Set:
    """``base`` under the program's ``assume`` lines (ProgramError where they admit no size)."""
    env = {p: names[p] for p in program.param_names}
    for assumption in program.assumptions:
        try:
            text = condition_isl(assumption.cond, env, program.param_names)
        except NonAffine as problem:
            raise _not_affine(program, problem, f"'{assumption}'", assumption.loc) from None
        base = base.intersect(isl.Set(f"{_prefix(program, names)}{{ : {text} }}"))
        if base.is_empty():
            raise ProgramError(
                f"'{assumption}' admits no sizes together with the assumptions before it (every size >= 1)",
                loc=assumption.loc,
                **program.error_context(),
            )
    return base


def _not_affine(program: Program, problem: NonAffine, what: str, loc: SourceLoc | None) -> NotAffineError:
    if problem.params:
        hint = "; ".join(
            f"bind {p} to a number (Program.bind({p}=...) or --size {p}=...) to make it affine"
            for p in problem.params
        )
    else:
        hint = "indices allow +, -, multiplication by a constant, and // and % by a positive constant"
    return NotAffineError(
        f"{what} is not quasi-affine: {problem.expr} is {problem.reason}; {hint}",
        params=problem.params,
        loc=loc,
        **program.error_context(),
    )


def _buffers(program: Program, names: IslNames, tuples: IslNames, context: isl.Set):
    """Every buffer in isl, and for each statement position the buffers in its scope (a
    block-local ``new`` is visible from its declaration to the end of its block)."""
    prefix = _prefix(program, names)
    params = program.param_names
    built: list[BufferModel] = []

    def model(decl: BufferDecl, loops: tuple[Loop, ...], local: bool) -> BufferModel:
        isl_name = tuples[decl.name] if decl.name not in {b.name for b in built} else tuples.fresh(decl.name)
        env = {p: names[p] for p in params}
        owner_dims = []
        for loop in loops:
            dim = names[loop.index] if names[loop.index] not in owner_dims else names.fresh(loop.index)
            env[loop.index] = dim
            owner_dims.append(dim)
        shape_dims = [names.fresh(f"{decl.name}_{k}") for k in range(len(decl.shape))]
        constraints = []
        for k, (dim, extent) in enumerate(zip(shape_dims, decl.shape)):
            try:
                constraints.append(f"0 <= {dim} and {dim} < {isl_expr(extent, env, params)}")
            except NonAffine as problem:
                raise _not_affine(program, problem, f"dimension {k} of buffer `{decl}`", decl.loc) from None
        where = " : " + " and ".join(constraints) if constraints else ""
        in_bounds = isl.Set(f"{prefix}{{ {isl_name}[{', '.join(owner_dims + shape_dims)}]{where} }}")
        bm = BufferModel(
            decl.name,
            decl,
            isl_name,
            tuple(loop.index for loop in loops),
            in_bounds.intersect_params(context),
            local,
        )
        built.append(bm)
        return bm

    top = {decl.name: model(decl, (), False) for decl in program.buffers}
    scopes: dict[tuple[int, ...], dict[str, BufferModel]] = {}

    def visit(
        block: tuple[Stmt, ...], loops: tuple[Loop, ...], prefix_pos: tuple[int, ...], scope: dict
    ) -> None:
        scope = dict(scope)
        for pos, stmt in enumerate(block):
            if isinstance(stmt, New):
                scope[stmt.decl.name] = model(stmt.decl, loops, True)
            elif isinstance(stmt, (Assign, Anchor)):
                scopes[prefix_pos + (pos,)] = dict(scope)
            elif isinstance(stmt, Loop):
                visit(stmt.body, loops + (stmt,), prefix_pos + (pos,), scope)

    visit(program.body, (), (), top)
    return tuple(built), scopes


def _statement(
    program: Program,
    names: IslNames,
    tuples: IslNames,
    context: isl.Set,
    ctx: walk.StatementContext,
    scope: dict[str, BufferModel],
) -> StatementModel:
    params = program.param_names
    stmt = ctx.stmt
    env = {p: names[p] for p in params}
    dims: list[str] = []
    constraints: list[str] = []
    for loop in ctx.loops:
        try:
            extent = isl_expr(loop.extent, env, params)
        except NonAffine as problem:
            what = f"the extent of loop '{loop.index}' (around {ctx.name} `{stmt}`)"
            raise _not_affine(program, problem, what, loop.loc) from None
        # A loop index that shadows an outer index or a size gets its own isl name.
        dim = names[loop.index]
        if dim in dims or dim in {names[p] for p in params}:
            dim = names.fresh(loop.index)
        env[loop.index] = dim
        dims.append(dim)
        constraints.append(f"0 <= {dim} and {dim} < {extent}")
    prefix = _prefix(program, names)
    tuple_name = tuples[ctx.name]
    space = f"{tuple_name}[{', '.join(dims)}]"
    where = " : " + " and ".join(constraints) if constraints else ""
    domain = isl.Set(f"{prefix}{{ {space}{where} }}").intersect_params(context)
    loop_domain = None
    if stmt.guard is not None:  # an if around the statement restricts its domain
        try:
            guard = condition_isl(stmt.guard, env, params)
        except NonAffine as problem:
            raise _not_affine(
                program, problem, f"the condition of the if around {ctx.name} `{stmt}`", stmt.loc
            ) from None
        loop_domain = domain
        domain = domain.intersect(isl.Set(f"{prefix}{{ {space} : {guard} }}"))

    def access(
        buffer: str,
        indices: tuple[IndexExpr, ...],
        loc: SourceLoc | None,
        is_write: bool,
        atomic: AssignOp | None = None,
    ) -> Access:
        text = str(Read(buffer, indices))
        bm = scope.get(buffer)
        if bm is None:
            raise InternalError(
                f"{ctx.name} `{stmt}` accesses '{buffer}', which is not declared in its scope"
            )
        gathered = tuple(k for k, e in enumerate(indices) if isinstance(e, Gather))
        try:
            fresh = {k: names.fresh(f"g{k}") for k in gathered}
            exprs, ranges = access_tuple(indices, bm.decl.shape, env, params, fresh.__getitem__)
        except NonAffine as problem:
            raise _not_affine(
                program, problem, f"{ctx.name} `{stmt}`: index {text}", loc or stmt.loc
            ) from None
        owner = dims[: len(bm.owner)]

        def relation_of(out: list[str], where: list[str]) -> isl.Map:
            condition = f" : {' and '.join(where)}" if where else ""
            text = f"{prefix}{{ {space} -> {bm.isl_name}[{', '.join(owner + out)}]{condition} }}"
            return isl.Map(text).intersect_domain(domain)

        relation = relation_of(exprs, ranges)
        address = None
        if gathered:
            address = relation_of(["0" if k in gathered else e for k, e in enumerate(exprs)], [])
        return Access(
            ctx.name,
            buffer,
            indices,
            relation,
            is_write,
            loc or stmt.loc,
            text,
            gathered,
            address,
            atomic=atomic,
        )

    writes = ()
    atomic = stmt.op if isinstance(stmt, Assign) and stmt.is_atomic else None
    if atomic is not None and atomic not in ATOMIC_OPS:  # validate refuses these
        raise InternalError(
            f"{ctx.name} `{stmt}`: an atomic statement whose {atomic.value} is no atomic update"
        )
    if isinstance(stmt, Assign):
        # a scatter may write any element along its gathered dimensions: a may-write
        may = stmt.predicate is not None or atomic is not None
        writes = (replace(access(stmt.buffer, stmt.indices, stmt.loc, True, atomic), may=may),)
    # an atomic update's read of its target is part of the atomic
    target = stmt.target if atomic is not None else None
    reads = tuple(
        access(r.buffer, r.indices, r.loc, False, atomic if r == target else None) for r in stmt.reads()
    )
    return StatementModel(ctx.name, ctx, domain, reads, writes, tuple(dims), loop_domain)


def _schedule(statements: tuple[StatementModel, ...]) -> isl.UnionMap:
    """The 2d+1 textual schedule, padded with zeros to a common length and restricted to
    the statements' domains (so ``schedule.domain()`` is every instance)."""
    depth = max((len(s.dims) for s in statements), default=0)
    schedule = None
    for s in statements:
        pos = s.ctx.position
        out = [str(pos[0])]
        for k, dim in enumerate(s.dims):
            out += [dim, str(pos[k + 1])]
        out += ["0"] * (2 * depth + 1 - len(out))
        piece = isl.Map(f"{{ {s.domain.get_tuple_name()}[{', '.join(s.dims)}] -> [{', '.join(out)}] }}")
        piece = isl.UnionMap.from_map(piece.intersect_domain(s.domain))
        schedule = piece if schedule is None else schedule.union(piece)
    return schedule if schedule is not None else isl.UnionMap("{ }")


def loop_nest(model: PolyModel, loops: tuple[Loop, ...], env: dict[str, str], params: list[str]) -> isl.Set:
    """The iterations ``{ [x_0, ..] : 0 <= x_k < extent_k(x_0 .. x_{k-1}) }`` of ``loops``
    (outermost first, each index a fresh isl name), intersected with nothing: ``env`` gives
    the isl name of every size and outer index their extents mention, ``params`` the set's
    parameters, in order."""
    env = dict(env)
    xs, constraints = [], []
    for loop in loops:
        x = model.names.fresh(f"x_{loop.index}")
        constraints.append(f"0 <= {x} < {isl_expr(loop.extent, env, model.params)}")
        env[loop.index] = x
        xs.append(x)
    return isl.Set(
        f"[{', '.join(params)}] -> {{ [{', '.join(xs)}] : {' and '.join(constraints) or 'true'} }}"
    )


def nest_points(loops: tuple[Loop, ...], sizes: dict[str, int]) -> int:
    """The points of the loop nest ``loops`` (outermost first), every extent at ``sizes``
    (a value per size it mentions), counted level by level (``_Counter``)."""
    return _Counter(loops).count(0, dict(sizes))


class _Counter:
    """The points of a loop nest, counted from its extents level by level: at level k a
    product where no inner extent mentions index k; where the count of the levels inside
    depends on index k alone (a triangular chain, ``par i + 1 j``), a prefix sum of it over
    the values of k, kept per level and grown as needed; else a sum over the values. The
    count of each level is kept per value of the outer indices it depends on. A chain of
    triangular loops of extent n then takes O(n) steps per level, where enumerating it took
    n^depth (a four-deep chain at n = 8195 did not finish)."""

    def __init__(self, loops: tuple[Loop, ...]) -> None:
        self.loops = loops
        names = {loop.index for loop in loops}
        # per level: the loop indices outside it that its count depends on
        self.deps: list[tuple[str, ...]] = [()] * (len(loops) + 1)
        inner: set[str] = set()
        for k in range(len(loops) - 1, -1, -1):
            inner = (inner | (index_vars(loops[k].extent) & names)) - {loops[k].index}
            self.deps[k] = tuple(sorted(inner))
        self.known: dict[tuple, int] = {}
        self.prefix: dict[int, list[int]] = {}  # level -> sums of the inner count over 0..m-1

    def count(self, k: int, env: dict[str, int]) -> int:
        if k == len(self.loops):
            return 1
        key = (k, *(env[v] for v in self.deps[k]))
        if key in self.known:
            return self.known[key]
        loop = self.loops[k]
        extent = max(0, int(evaluate_index(loop.extent, env)))
        inner = self.deps[k + 1]
        if loop.index not in inner:
            total = extent * self.count(k + 1, env) if extent else 0
        elif inner == (loop.index,):
            sums = self.prefix.setdefault(k, [0])
            while len(sums) <= extent:
                sums.append(sums[-1] + self.count(k + 1, {**env, loop.index: len(sums) - 1}))
            total = sums[extent]
        else:
            total = sum(self.count(k + 1, {**env, loop.index: v}) for v in range(extent))
        self.known[key] = total
        return total


# ------------------------------------------------------------------------ printing


_PARAMS = re.compile(r"^\[[^\]]*\] -> ")


def _strip(obj, context: isl.Set) -> str:
    """isl's text without the parameter prefix (printed once at the top) and with the
    context's constraints left out."""
    return _PARAMS.sub("", str(obj.gist_params(context)))


def _describe(model: PolyModel) -> str:
    program = model.program
    lines = [f"program {program.name}"]
    sizes = ", ".join(model.params) or "none"
    bound = ", ".join(f"{n} = {v}" for n, v in program.bindings)
    lines.append(f"  sizes: {sizes}" + (f" (bound: {bound})" if bound else ""))
    if model.params:
        lines.append(f"  context: {_PARAMS.sub('', str(model.context))}")
    lines.append("statements:")
    for s in model.statements:
        at = f" at {s.stmt.loc}" if s.stmt.loc else ""
        lines.append(f"  {s.label}{at}")
        lines.append(f"    domain: {_strip(s.domain, model.context)}")
        for a in s.accesses:
            rel = a.relation.gist_domain(s.domain)
            lines.append(f"    {'write' if a.is_write else 'read '} {a.text}: {_strip(rel, model.context)}")
    lines.append("schedule:")
    for s in model.statements:
        sched = model.schedule.intersect_domain(isl.UnionSet.from_set(s.domain))
        lines.append(f"  {_strip(isl.Map.from_union_map(sched).gist_domain(s.domain), model.context)}")
    lines.append("dependences:")
    if not model.dependences.items:
        lines.append("  none")
    for dep in model.dependences.items:
        src, dst = model.statement(dep.source).domain, model.statement(dep.sink).domain
        rel = dep.relation.gist_domain(src).gist_range(dst)
        lines.append(
            f"  {dep.kind.value} {dep.source} -> {dep.sink} on {dep.buffer}: {_strip(rel, model.context)}"
        )
    lines.append("race-free par loops:")
    if not model.race_free:
        lines.append("  none")
    for loop in model.race_free:
        lines.append(f"  {loop} ({', '.join(loop.statements)})")
    return "\n".join(lines)
