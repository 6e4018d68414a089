"""Splitting a reduction into parts: a long ``seq`` loop that only accumulates becomes a
kernel of partial results, one per part, and a kernel that combines them.

A reduction that runs inside one thread (a full sum is a one-thread kernel; a split-K
GEMM's 64x64 output is 4096 threads for a GPU that holds 270000) leaves the GPU nearly
empty. Where the loop qualifies, the nest

::

    par M i { seq K k { C[i] += A[i, k] } }

is rewritten, for ``P`` parts (cyclic: part ``p`` runs iterations ``p, p + P, ...``), as

::

    par P k_part { par M i {
        C_parts[k_part, i] = 0                                      # the operator's identity
        seq (K - k_part + P - 1) / P k { C_parts[k_part, i] += A[i, k_part + P * k] }
    } }
    par M i { seq P k_part { C[i] += C_parts[k_part, i] } }         # the combine

or, blocked in chunks of ``c`` (part ``p`` runs ``c p .. c p + c - 1``: a GEMM's parts keep
their tiles of ``k`` whole), ``par (K + c - 1) / c k_part { ... seq min(c, K - c * k_part) k
{ ... A[i, c * k_part + k] ... } }``. A band with no loop (a full sum, a serial kernel)
gets a combine band of one point, ``par 1 k_join``, so that its combine can run on the
lanes of a warp. ``max=`` and ``min=`` start each part at the target's own value instead of
an identity (``max`` is idempotent), so no infinity is needed.

**Which loops.** A ``seq`` loop ``L`` that is the first loop of the body of a top-level
band of at most two par loops (or a top-level ``seq`` loop with no par loop in it: a serial
kernel), such that:

* every statement in ``L`` is an update ``T[idx] op= e`` of one global buffer element
  ``T[idx]`` (``idx`` free of ``L``'s indices) by one operator, and ``T[idx]`` is an
  accumulator there (``ir.accumulators``: no statement reads it, its type combines
  exactly, a float ``+=``/``*=`` only with ``reassociate``);
* isl finds no dependence between two iterations of ``L`` at one band point other than on
  ``T`` (``Dependences.carried_only_on``);
* ``L``'s extent mentions no band index (the parts buffer has one shape for every point).

Every other loop is left as it is: a prefix sum, a loop that also writes another buffer,
a triangle's row. A loop whose body is an online sum (``ir.online_sums``: a running
maximum and sums kept relative to it, the one-pass softmax) splits too, each part with its
own pair and a combine that rescales them (``transform.split_online``).

**Statements around the loop.** The band's body may hold statements before ``L`` (its
*prologue*, no loop) and after it (its *epilogue*): ``C[i, j] = 0`` (or ``= bias[j]``)
before a GEMM's ``k`` loop, ``y[i] = relu(y[i])`` after it. The prologue writes ``T[idx]``,
may declare ``T`` (``new acc: f32``: a block-local accumulator, which the epilogue
stores), and may declare and set 0-d locals of its own from anything but ``T`` (a *setup*,
``setup_statements``: the parts nest runs those the loop reads before its partials start,
under names of its own). An epilogue of statements may do anything a statement does. Both
move into the combine nest, around its loop over the parts, in their order:

::

    par M i { C[i] = 0; seq K k { C[i] += A[i, k] }; D[i] = relu(C[i]) }
    ->  par P k_part { par M i { C_parts[k_part, i] = 0; seq .. k { C_parts[k_part, i] += .. } } }
        par M i { C[i] = 0; seq P k_part { C[i] += C_parts[k_part, i] }; D[i] = relu(C[i]) }

That is the loop's computation because the parts nest, now run before the prologue, writes
only the new partials, which nothing else reads, and reads only what ``L`` reads, which the
prologue does not write (it writes ``T[idx]``, which ``L`` never reads, being its
accumulator); the epilogue runs after the whole loop at its band point as before. A
``max=``/``min=`` part starts at the value the loop starts from, so its prologue must be one
assignment ``T[idx] = e`` that reads no ``T`` and runs at every band point (no ``if``),
and each part starts at ``e``. Such a split never adds atomically (the prologue would have
to run before every part, the epilogue after).

**An epilogue that holds a loop** (a softmax's write pass, a second reduction) becomes a
nest of its own after the combine's: the combine stores, per band point, each 0-d local of
the prologue that the epilogue uses and that the prologue or ``L`` set
(``mx_final[i] = mx``), and the new nest declares it again and starts from it. The band is
par, so no band point reads what another writes, and running every point's epilogue after
every point's combine keeps each point's order (``prove_split`` proves the new nest reads
only what the combine stored, at the band point that stored it). Where the epilogue is 0-d
locals' statements and one par loop that writes none of them, they run at the start of each
of the loop's iterations, so that the loop joins the nest's band (``_starting``).

**By the inner loop's iterations** (``Split.inner``). Where ``L``'s one statement is a
seq loop ``L2`` (``Reduction.inner``: its extent free of the band and of ``L``, no
dependence between its iterations but on ``T``, and room for one more par loop), ``L2`` may
run as a par loop of the parts, with a partial per part and iteration of it; the combine
runs ``L2`` outermost, so that its own split reads neighbouring partials from neighbouring
parts:

::

    seq M i { seq N j { s += X[i, j] } }
    ->  par P i_part { par N j { s_parts[i_part, j] = 0; seq .. i { s_parts[i_part, j] += X[i_part + P * i, j] } } }
        par 1 i_join { seq N j { seq P i_part { s += s_parts[i_part, j] } } }

**Exactness.** Each iteration of ``L`` runs in exactly one part (``prove_split`` proves it
with isl on the rewrite) and each part is combined once, in order of parts. ``max=``,
``min=`` and integer ``+=``/``*=`` give the same result as the loop; a float ``+=``/``*=``
is summed in another order (``docs/mapping.md`` derives the tolerance).

**Atomically.** Where the update is a ``+=`` of a type with atomics (an integer; a float
only with ``deterministic=False``), each part may instead keep its partial in a block-local
``new C_parts: f32`` (a register of its thread) and end with ``atomic C[i] += C_parts``
inside the parts nest: no combine kernel, and the parts' updates of one element commute
(the order of a float sum varies from run to run).

Whether to split, into how many parts and in which form is the pipeline's choice
(``split_choice.choose_splits``): each candidate is mapped by SCIP and the cheapest program
kept; a ``split`` pin fixes the parts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from polymap.errors import ArgumentError, InternalError
from polymap.ir.accumulators import COMBINABLE, accumulated, reorders
from polymap.ir.nodes import (
    ATOMIC_TYPES,
    Anchor,
    Assign,
    AssignOp,
    BufferDecl,
    BufferKind,
    CmpOp,
    Compare,
    Const,
    DType,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    IndexValue,
    IVar,
    Loop,
    LoopKind,
    New,
    Program,
    Read,
    Stmt,
    ValueExpr,
    fold_index,
    guarded,
    index_vars,
    operand_reads,
    substitute_stmt,
    valued_indices,
)
from polymap.ir.rename import rename_buffers
from polymap.ir.walk import fresh_name, names_in_use, walk_block
from polymap.transform.registers import renumber_statements
from polymap.transform.split_online import (
    OnlineLoop,
    online_combine,
    online_loop,
    online_parts_body,
    read_buffers,
    setup_statements,
)

if TYPE_CHECKING:
    from polymap.poly.model import PolyModel

MAX_BAND = 2  # the parts' loop joins the band, which stays within three hardware axes


class Form(enum.Enum):
    CYCLIC = "cyclic"  # part p runs iterations p, p + P, p + 2P, ...
    BLOCKED = "blocked"  # part p runs a chunk of consecutive iterations


@dataclass(frozen=True, slots=True)
class Reduction:
    """A loop that may be split (see the module docstring): the top-level statement at
    ``position`` of the program's body, its band's par loops (outermost first, empty for a
    serial kernel), the loop and the accumulator ``target[indices]`` updated by ``op``;
    ``reorders``: a float ``+=``/``*=``, whose sum a split reorders."""

    position: int
    band: tuple[Loop, ...]
    loop: Loop
    target: str
    indices: tuple[IndexExpr, ...]
    op: AssignOp
    reorders: bool
    decl: BufferDecl  # the target's declaration: a global buffer, or a ``new`` of the prologue
    # the statements of the band's body before the loop and after it (the module docstring)
    prologue: tuple[Stmt, ...] = ()
    epilogue: tuple[Stmt, ...] = ()
    # the loop's one statement where it is a loop that may give the partials a dimension
    # (``Split.inner``: its extent free of the band and of the loop, isl finding no
    # dependence between its iterations but on the target, and room for one more par loop)
    inner: Loop | None = None
    # the loop's online sum (``transform.split_online``): ``target`` is its running maximum
    online: OnlineLoop | None = None

    @property
    def index(self) -> str:
        return self.loop.index

    @property
    def fissions(self) -> bool:
        """Whether the epilogue holds a loop, so that it becomes a nest of its own after the
        combine's (the module docstring, "Statements around the loop")."""
        return any(isinstance(s, Loop) for s in self.epilogue)

    @property
    def start(self) -> ValueExpr | None:
        """The value a ``max=``/``min=`` loop starts from where its prologue assigns it
        (each part starts there too); None where there is no prologue (the target's own
        value) or for another operator."""
        sets = [s for s in self.prologue if isinstance(s, Assign) and s.buffer == self.target]
        if self.op not in (AssignOp.MAX, AssignOp.MIN) or not sets:
            return None
        return sets[-1].value


@dataclass(frozen=True, slots=True)
class Split:
    """How a reduction is split: into ``parts`` parts (at the sizes the choice was made for;
    a blocked split keeps its chunk ``ceil(extent / parts)`` at every size) of one form."""

    parts: int
    form: Form
    # each part adds its block-local partial into the target with an atomic update (``atomic
    # T[idx] += partial`` at the end of the parts nest) instead of a combine kernel: a ``+=`` only, of
    # a type with atomics; a float's only with ``deterministic=False`` (its order varies)
    atomic: bool = False
    # the loop inside the reduction loop (``Reduction.inner``) runs as a par loop of the
    # parts, with a partial per part and iteration of it: a whole matrix's sum ``seq M i {
    # seq N j { s += X[i, j] } }`` in P parts of i reads its rows along j, P x N threads
    inner: bool = False

    def chunk(self, extent: int) -> int:
        """A blocked part's iterations, fixed from the loop's ``extent`` at the sizes chosen
        for (a cyclic split has a fixed number of parts instead)."""
        return max(1, -(-extent // self.parts))

    def iteration(self, part: IndexExpr, index: IndexExpr, extent: int) -> IndexExpr:
        """The loop's iteration that part ``part`` runs as its ``index``-th (``extent``: the
        loop's extent at the sizes chosen for, which sets a blocked chunk): the rewrite's
        substitution, and the map ``prove_split`` proves one to one."""
        if self.form is Form.CYCLIC:
            return _add(part, _mul(self.parts, index))
        return _add(_mul(self.chunk(extent), part), index)

    def describe(self, extent: int | None = None) -> str:
        """``64 cyclic parts``, or ``64 blocked parts of 256`` (with ``extent``: the parts
        of a blocked split follow the sizes, its chunk does not)."""
        text = f"{self.parts} {self.form.value} parts"
        if self.form is Form.BLOCKED and extent is not None:
            text += f" of {self.chunk(extent)}"
        if self.inner:
            text += " by the inner loop's iterations"
        return text + (" added atomically" if self.atomic else "")


def reduction_at(program: Program, model: PolyModel, position: int, *, reassociate: bool) -> Reduction | str:
    """The reduction loop of the top-level statement at ``position``, or why it has none
    (a sentence for a report or a pin's error). ``model``: the analysis of ``program``."""
    top = program.body[position]
    if not isinstance(top, Loop):
        return "it is not a loop"
    band: list[Loop] = []
    node = top
    prologue: tuple[Stmt, ...] = ()
    epilogue: tuple[Stmt, ...] = ()
    while node.is_par:
        band.append(node)
        if len(node.body) == 1 and isinstance(node.body[0], Loop) and node.body[0].is_par:
            node = node.body[0]
            continue
        # the first loop of the body is the reduction's; those after it are the epilogue's
        loops = [k for k, stmt in enumerate(node.body) if isinstance(stmt, Loop)]
        if not loops or node.body[loops[0]].is_par:
            return "its band's body does not start with a seq loop after its statements"
        k = loops[0]
        prologue, node, epilogue = node.body[:k], node.body[k], node.body[k + 1 :]
    if len(band) > MAX_BAND:
        return f"its band has {len(band)} par loops (a split adds one; at most {MAX_BAND + 1} map to the GPU)"
    loop = node
    online = online_loop(program, prologue, loop)
    if isinstance(online, str):
        return online
    if online is not None:
        return _online_reduction(model, position, tuple(band), loop, prologue, epilogue, online, reassociate)
    inner = list(walk_block(loop.body))
    if any(isinstance(s, Loop) and s.is_par for s in inner):
        return f"loop '{loop.index}' holds a par loop"
    updates = [s for s in inner if not isinstance(s, (Loop, New))]
    if not updates or not all(isinstance(s, Assign) for s in updates):
        return f"loop '{loop.index}' holds a statement that is not an update of a buffer"
    inside = {loop.index} | {s.index for s in inner if isinstance(s, Loop)}
    # the accumulator: the one element the loop updates by an operator that combines, the
    # same at every iteration; the loop's other statements (``Y[i, j] = exp(..)`` beside
    # ``sum += Y[i, j]``) must then be free of dependences between iterations (isl, below)
    targets = {(s.buffer, s.indices) for s in updates}
    if len(targets) > 1:
        targets = {
            (s.buffer, s.indices)
            for s in updates
            if s.op in COMBINABLE and not any(index_vars(i) & inside for i in s.indices)
        }
    if len(targets) != 1:
        written = sorted({s.buffer for s in updates})
        return (
            f"loop '{loop.index}' writes more than one element ({', '.join(written)}), and not one "
            "element updated by an operator that combines beside elements of each iteration's own"
        )
    ((target, indices),) = targets
    if any(index_vars(i) & inside for i in indices):
        return f"the element of '{target}' it updates changes with loop '{loop.index}' or a loop inside it"
    declared = [stmt.decl for stmt in prologue if isinstance(stmt, New) and stmt.decl.name == target]
    decl = declared[0] if declared else next((d for d in program.buffers if d.name == target), None)
    if decl is None:
        return (
            f"loop '{loop.index}' accumulates into '{target}', a block-local buffer declared outside its band"
        )
    around = (
        _before(loop.index, target, indices, prologue)
        or _after(loop.index, prologue, epilogue, loop)
        or _beside(loop, target, prologue, program)
    )
    if around is not None:
        return around
    if any(s.guard is not None and not (valued_indices(s.guard) & inside) for s in updates):
        # an if around the loop (``if j < 4 { seq K k { .. } }``): the parts' start and the
        # combine would run where the loop does not
        return f"an if around loop '{loop.index}' restricts where it runs"
    op = accumulated(target, updates, decl, lambda name: program.buffer(name).dtype)
    if op is None:
        return (
            f"'{target}' is no accumulator of loop '{loop.index}' (read there, updated by other operators, "
            f"or of a type whose updates depend on their order)"
        )
    if reorders(op, decl.dtype) and not reassociate:
        return f"splitting reorders the float sum into '{target}' (reassociation is off)"
    names = {s.name for s in updates}
    why = _independent(model, band, loop, names, {target})
    if why is not None:
        return why
    setup = set(map(id, setup_statements(prologue, {target})))
    if op in (AssignOp.MAX, AssignOp.MIN) and any(id(stmt) not in setup for stmt in prologue):
        sets = [stmt for stmt in prologue if isinstance(stmt, Assign) and stmt.buffer == target]
        first = sets[0] if len(sets) == 1 else None
        if (
            first is None
            or first.op is not AssignOp.SET
            or first.guard is not None
            or first.predicate is not None
            or any(r.buffer == target for r in operand_reads(first))
        ):
            return (
                f"the statements before loop '{loop.index}' do not give its {op.value} one start "
                f"(one '{target}[..] = e' at every band point, e not reading '{target}')"
            )
    nested = _inner_loop(loop, band, names, model, target)
    return Reduction(
        position,
        tuple(band),
        loop,
        target,
        indices,
        op,
        reorders(op, decl.dtype),
        decl,
        prologue,
        epilogue,
        nested,
    )


def _inner_loop(loop: Loop, band: list[Loop], names: set[str], model: PolyModel, target: str) -> Loop | None:
    """``loop``'s one statement if it is a seq loop whose iterations may become a par loop of
    the parts (``Split.inner``): its extent mentions neither the band nor ``loop`` (the
    partials are a box), isl finds no dependence between two of its iterations but on
    ``target``, and the parts' band has room for it."""
    if len(band) + 1 > MAX_BAND or len(loop.body) != 1 or not isinstance(loop.body[0], Loop):
        return None
    nested = loop.body[0]
    if index_vars(nested.extent) & ({b.index for b in band} | {loop.index}):
        return None
    if not model.dependences.carried_only_on(names, len(band) + 1, {target}):
        return None
    return nested


def _online_reduction(
    model: PolyModel,
    position: int,
    band: tuple[Loop, ...],
    loop: Loop,
    prologue: tuple[Stmt, ...],
    epilogue: tuple[Stmt, ...],
    online: OnlineLoop,
    reassociate: bool,
) -> Reduction | str:
    """The reduction of a loop holding an online sum (``transform.split_online``), or why it
    cannot be split: the checks of a plain one for its epilogue, its shape and its
    dependences (on the group's maximum and sums only)."""
    why = _after(loop.index, prologue, epilogue, loop)
    if why is not None:
        return why
    if not reassociate:
        return f"splitting reorders the online sum of loop '{loop.index}' (reassociation is off)"
    names = {s.name for s in walk_block(loop.body) if isinstance(s, Assign)}
    why = _independent(model, list(band), loop, names, set(online.names))
    if why is not None:
        return why
    maximum = online.group.maximum
    return Reduction(
        position,
        band,
        loop,
        maximum,
        (),
        AssignOp.MAX,
        True,
        online.decls[0],
        prologue,
        epilogue,
        online=online,
    )


def _beside(loop: Loop, target: str, prologue: tuple[Stmt, ...], program: Program) -> str | None:
    """Why the loop's statements beside its accumulator's updates keep it from being split,
    or None. The parts run them before the combine runs the prologue again, so they must not
    write what the prologue reads (``S[i] = Y[i, 0]`` before ``Y[i, j] = ..``); and each part
    has copies of its own of the band's locals, so they may write only global buffers and the
    loop's own locals."""
    own = {s.decl.name for s in walk_block(loop.body) if isinstance(s, New)}
    globals_ = {d.name for d in program.buffers}
    before = read_buffers(prologue)
    for stmt in walk_block(loop.body):
        if not isinstance(stmt, Assign) or stmt.buffer == target:
            continue
        if stmt.buffer in before:
            return (
                f"loop '{loop.index}' writes '{stmt.buffer}', which the statements before it read (its parts "
                f"run before them)"
            )
        if stmt.buffer not in own and stmt.buffer not in globals_:
            return (
                f"loop '{loop.index}' writes '{stmt.buffer}', declared in its band before it (each part "
                f"would write a copy of its own)"
            )
    return None


def _independent(
    model: PolyModel, band: list[Loop], loop: Loop, names: set[str], targets: set[str]
) -> str | None:
    """Why the iterations of ``loop`` (statements ``names``) at one point of ``band`` may not
    run in parts, or None: the partials are a box (no extent mentions the band), and isl
    finds no dependence between two iterations but on ``targets``."""
    if index_vars(loop.extent) & {b.index for b in band}:
        return f"loop '{loop.index}''s extent depends on the band"
    if any(index_vars(b.extent) & {c.index for c in band} for b in band):
        return "its band is not rectangular (the partials are a box over the band)"
    if not model.dependences.carried_only_on(names, len(band), targets):
        return (
            f"an iteration of loop '{loop.index}' depends on another through a buffer other than "
            f"{', '.join(repr(t) for t in sorted(targets))}"
        )
    return None


def _before(
    index: str, target: str, indices: tuple[IndexExpr, ...], prologue: tuple[Stmt, ...]
) -> str | None:
    """Why the prologue keeps loop ``index`` from being split, or None: it declares the
    accumulator and writes its element, not atomically, and its other statements are a
    setup (``setup``) the parts run too (the module docstring)."""
    setup = set(map(id, setup_statements(prologue, {target})))
    for stmt in prologue:
        if id(stmt) in setup or (isinstance(stmt, New) and stmt.decl.name == target):
            continue
        if not isinstance(stmt, Assign) or stmt.buffer != target or stmt.indices != indices or stmt.atomic:
            return (
                f"a statement before loop '{index}' does something else than set or update the element "
                f"of '{target}' it accumulates, or a 0-d value of its own"
            )
    return None


def _after(index: str, prologue: tuple[Stmt, ...], epilogue: tuple[Stmt, ...], loop: Loop) -> str | None:
    """Why the epilogue keeps loop ``index`` from being split, or None. Statements alone move
    into the combine nest; an epilogue that holds a loop becomes a nest of its own, which
    starts each 0-d local of the prologue it uses from the combine's value (stored per band
    point): a declaration there is its own, but an array of the prologue cannot follow."""
    if not any(isinstance(s, Loop) for s in epilogue):
        if any(not isinstance(s, (Assign, Anchor)) for s in epilogue):
            return f"a declaration follows loop '{index}' in its band"
        return None
    used = _locals_used(prologue, epilogue)
    arrays = sorted(decl.name for decl in used if decl.shape)
    if arrays:
        return (
            f"the statements after loop '{index}' use the array '{arrays[0]}' declared before it (a split "
            f"moves them to a nest of their own, which takes 0-d values only)"
        )
    # a value they take from the combine must be set at every band point: where the prologue
    # sets it only under an if, the combine would store what was never written
    for decl in _locals_used(prologue, epilogue, loop=loop, set_before=True):
        if not any(
            isinstance(s, Assign)
            and s.buffer == decl.name
            and s.op is AssignOp.SET
            and s.guard is None
            and s.predicate is None
            for s in prologue
        ):
            return (
                f"the statements after loop '{index}' use '{decl.name}', which the statements before it set "
                f"only under an if or not at all (a split moves them to a nest of their own, which takes "
                f"its value at every band point)"
            )
    return None


def _locals_used(
    prologue: tuple[Stmt, ...],
    epilogue: tuple[Stmt, ...],
    *,
    loop: Loop | None = None,
    set_before: bool | None = None,
) -> list[BufferDecl]:
    """The block-local buffers the prologue declares that the epilogue reads or writes: with
    ``set_before`` True, those the prologue or ``loop`` sets (their values move to the
    epilogue's nest), False the others (only declared there), None all."""
    touched: set[str] = set()
    for stmt in walk_block(epilogue):
        if isinstance(stmt, (Assign, Anchor)):
            touched |= {r.buffer for r in stmt.reads()}
            if isinstance(stmt, Assign):
                touched.add(stmt.buffer)
    before = (*prologue, *(walk_block(loop.body) if loop is not None else ()))
    written = {s.buffer for s in before if isinstance(s, Assign)}
    return [
        s.decl
        for s in prologue
        if isinstance(s, New)
        and s.decl.name in touched
        and (set_before is None or (s.decl.name in written) == set_before)
    ]


def reductions(program: Program, model: PolyModel, *, reassociate: bool) -> tuple[Reduction, ...]:
    """Every reduction loop of ``program`` that may be split, in program order."""
    found = (reduction_at(program, model, k, reassociate=reassociate) for k in range(len(program.body)))
    return tuple(r for r in found if isinstance(r, Reduction))


def split_reduction(program: Program, reduction: Reduction, split: Split, *, extent: int) -> Program:
    """``program`` with ``reduction`` split as ``split`` says (the module docstring shows the
    rewrite); ``extent``: the loop's extent at the sizes the split was chosen for, which
    sets a blocked split's chunk."""
    if split.parts < 2:
        raise ArgumentError(f"a split has at least two parts, got {split.parts}")
    original = names_in_use(program)
    taken = set(original)  # the program's names and every name the rewrite makes

    def fresh(hint: str) -> str:
        name = fresh_name(hint, taken)
        taken.add(name)
        return name

    part = fresh(f"{reduction.index}_part")
    loop = reduction.loop
    length = loop.extent
    p = IVar(part)
    # Each part's loop has one extent for every part, and a guard keeps its iterations below
    # the loop's: a loop whose extent varies with the band would not be tiled for staging.
    if split.form is Form.CYCLIC:
        count: IndexExpr = IConst(split.parts)
        chunk_extent = _div(_add(length, IConst(split.parts - 1)), split.parts)
    else:
        chunk = split.chunk(extent)
        # no part where the loop runs no iteration (a negative extent): a shape is not negative
        count = fold_index(IBin(IndexOp.MAX, IConst(0), _div(_add(length, IConst(chunk - 1)), chunk)))
        chunk_extent = IConst(chunk)
    iteration = split.iteration(p, IVar(loop.index), extent)
    below = Compare(CmpOp.LT, IndexValue(iteration), IndexValue(length))
    target = reduction.decl
    nested = reduction.inner if split.inner else None
    if split.inner and (nested is None or split.atomic):
        raise InternalError(f"loop '{loop.index}' has no inner loop to give its partials a dimension")
    if reduction.online is not None and (split.inner or split.atomic):
        raise InternalError(f"loop '{loop.index}''s online sum splits into a combine only")
    # a partial per part and band point (not per element of the target, which may be large),
    # and per iteration of the inner loop where it runs as a par loop of the parts; where the
    # parts add atomically, a block-local one (a register of the part's thread)
    by_inner = (IVar(nested.index),) if nested is not None else ()
    element = () if split.atomic else (p, *(IVar(b.index) for b in reduction.band), *by_inner)
    first = next(s for s in walk_block(loop.body) if isinstance(s, Assign))
    if reduction.online is not None:
        online = reduction.online
        partials = {name: fresh(f"{name}_parts") for name in online.names}
        # each part declares the group and starts it where the prologue does: the maximum
        # at its start, the sums at 0 (the pair then stands for 0)
        starts = {
            id(stmt): (
                replace(
                    stmt, value=stmt.value if stmt.buffer == online.group.maximum else Const(0, stmt.loc)
                ),
            )
            for stmt in reduction.prologue
            if isinstance(stmt, Assign) and stmt.buffer in online.names
        }
        declared = [s for s in reduction.prologue if isinstance(s, New) and s.decl.name in online.names]
        uses = read_buffers((loop,), online.starts)
        setup = setup_statements(reduction.prologue, set(online.names), uses) + tuple(declared)
        partial_body = (
            *_in_order(reduction.prologue, setup, starts),
            *online_parts_body(online, loop, partials, element, iteration, below, chunk_extent),
        )
        step = fresh(f"{online.group.step}_join")
        combine_loop = Loop(
            LoopKind.SEQ, part, count, online_combine(online, partials, element, step, loop.loc), loop.loc
        )
        decls = tuple(zip(partials.values(), online.decls))
    else:
        parts_buffer = fresh(f"{reduction.target}_parts")
        updates = tuple(
            _retarget(
                guarded(substitute_stmt(s, {loop.index: iteration}), below),
                reduction.target,
                parts_buffer,
                element,
            )
            for s in (nested.body if nested is not None else loop.body)
        )
        if reduction.start is not None:
            start = reduction.start  # the prologue's start, evaluated again by the parts
        elif reduction.op in (AssignOp.MAX, AssignOp.MIN):
            start = Read(reduction.target, reduction.indices, first.loc)  # idempotent: the target's own value
        else:
            start = Const(0 if reduction.op is AssignOp.ADD else 1, first.loc)
        setup = setup_statements(reduction.prologue, {reduction.target}, read_buffers((loop,), (start,)))
        at: dict[int, tuple[Stmt, ...]] = {}
        if _changed_after_start(reduction, setup):
            # the start read where the prologue sets it, into a value of the part's own: the
            # setup after it changes what it reads (the partial's start stays next to the
            # loop, where register promotion finds it)
            value = fresh(f"{reduction.target}_start")
            (where,) = [s for s in reduction.prologue if _starts(s, reduction)]
            decl = BufferDecl(value, BufferKind.NEW, target.dtype, (), target.loc)
            at[id(where)] = (New(decl), Assign(first.name, value, (), AssignOp.SET, start, first.loc))
            start = Read(value, (), first.loc)
        init = Assign(first.name, parts_buffer, element, AssignOp.SET, start, first.loc)
        prefix = (*_in_order(reduction.prologue, setup, at), init)
        partial_body = (*prefix, replace(loop, extent=chunk_extent, body=updates))
        if nested is not None:  # the inner loop's iterations in parallel, each with its partials
            partial_body = (replace(nested, kind=LoopKind.PAR, body=partial_body),)
        combine = Assign(
            first.name,
            reduction.target,
            reduction.indices,
            reduction.op,
            Read(parts_buffer, element, first.loc),
            first.loc,
            atomic=split.atomic,
        )
        combine_loop = Loop(LoopKind.SEQ, part, count, (combine,), loop.loc)
        decls = ((parts_buffer, target),)
        if split.atomic:
            if not atomic_split_allowed(reduction, target.dtype, deterministic=False):
                raise InternalError(
                    f"loop '{loop.index}': its {reduction.op.value} into '{target.name}' has no atomic split"
                )
            local = New(BufferDecl(parts_buffer, BufferKind.NEW, target.dtype, (), target.loc))
            partial_body = (local, *partial_body, combine)  # each part adds its partial: no combine kernel
    # the parts nest's block-local buffers (the setup's, the group's, the loop's own) get
    # names of their own: the combine nest declares those of the prologue again
    partial_body = _own_locals(partial_body, original, taken, "_part")
    top = program.body[reduction.position]
    inner = _with_body(top, partial_body, len(reduction.band)) if reduction.band else None
    partials_nest = Loop(LoopKind.PAR, part, count, (inner,) if inner else partial_body, loop.loc)
    body = list(program.body)
    if split.atomic:  # the partial is block-local: no program-wide buffer, no combine
        body[reduction.position : reduction.position + 1] = [partials_nest]
        return renumber_statements(replace(program, body=tuple(body)))
    if nested is not None:
        # the inner loop outermost: a split of this combine then takes parts of it, whose
        # neighbours read neighbouring partials
        combine_loop = replace(nested, body=(combine_loop,))
    band_shape = tuple(_positive(b.extent) for b in reduction.band)
    finals: tuple[BufferDecl, ...] = ()
    if reduction.band and reduction.fissions:
        # the epilogue as a nest of its own: the combine stores each 0-d local of the
        # prologue it uses, per band point, and the epilogue's nest starts from it
        band_point = tuple(IVar(b.index) for b in reduction.band)
        used = _locals_used(reduction.prologue, reduction.epilogue, loop=loop, set_before=True)
        finals = tuple(replace(decl, name=fresh(f"{decl.name}_final"), shape=band_shape) for decl in used)
        stores = tuple(
            Assign(first.name, f.name, band_point, AssignOp.SET, Read(d.name, (), first.loc), first.loc)
            for f, d in zip(finals, used)
        )
        restores = tuple(
            stmt
            for f, d in zip(finals, used)
            for stmt in (
                New(d),
                Assign(first.name, d.name, (), AssignOp.SET, Read(f.name, band_point, first.loc), first.loc),
            )
        )
        # those the epilogue uses that nothing set before it: declared again, not stored
        fresh = tuple(
            New(d) for d in _locals_used(reduction.prologue, reduction.epilogue, loop=loop, set_before=False)
        )
        # the epilogue's nest declares the prologue's names again, so the combine's take names
        # of their own (the program's statements keep the names they were written with)
        combined_body = _own_locals((*reduction.prologue, combine_loop, *stores), original, taken, "_join")
        combined = _with_body(top, combined_body, len(reduction.band))
        after = _starting(reduction.epilogue, (*restores, *fresh))
        nests = [partials_nest, combined, _with_body(top, after, len(reduction.band))]
    elif reduction.band:
        around = (*reduction.prologue, combine_loop, *reduction.epilogue)
        nests = [partials_nest, _with_body(top, around, len(reduction.band))]
    else:
        one = fresh(f"{reduction.index}_join")
        nests = [partials_nest, Loop(LoopKind.PAR, one, IConst(1), (combine_loop,), loop.loc)]
    body[reduction.position : reduction.position + 1] = nests
    shape = (count, *band_shape)
    if nested is not None:
        shape += (_positive(nested.extent),)
    added = tuple(BufferDecl(name, BufferKind.NEW, decl.dtype, shape, decl.loc) for name, decl in decls)
    added += tuple(BufferDecl(f.name, BufferKind.NEW, f.dtype, f.shape, f.loc) for f in finals)
    rewritten = replace(program, buffers=(*program.buffers, *added), body=tuple(body))
    return renumber_statements(rewritten)


def _own_locals(
    block: tuple[Stmt, ...], original: set[str], taken: set[str], suffix: str
) -> tuple[Stmt, ...]:
    """``block`` with each block-local buffer it declares (at its top level or deeper) under
    a name of ``original`` (the program's: not one the rewrite made) renamed to a name not in
    ``taken`` (``name + suffix``, numbered where taken), which then holds the new names too."""
    names = {}
    for stmt in walk_block(block):
        if isinstance(stmt, New) and stmt.decl.name in original:
            names[stmt.decl.name] = fresh_name(f"{stmt.decl.name}{suffix}", taken)
            taken.add(names[stmt.decl.name])
    return rename_buffers(block, names)


def _in_order(
    prologue: tuple[Stmt, ...], kept: tuple[Stmt, ...], replaced: dict[int, tuple[Stmt, ...]]
) -> tuple[Stmt, ...]:
    """The prologue's statements of ``kept``, and in place of those ``replaced`` names (by
    ``id``) the statements it gives, in the prologue's order: a start evaluated where the
    prologue evaluates it."""
    ids = set(map(id, kept))
    return tuple(t for s in prologue if id(s) in ids or id(s) in replaced for t in replaced.get(id(s), (s,)))


def _starts(stmt: Stmt, reduction: Reduction) -> bool:
    """Whether ``stmt`` is the prologue's assignment that starts a ``max=``/``min=`` loop."""
    return (
        reduction.start is not None
        and isinstance(stmt, Assign)
        and stmt.buffer == reduction.target
        and stmt.op is AssignOp.SET
    )


def _changed_after_start(reduction: Reduction, setup: tuple[Stmt, ...]) -> bool:
    """Whether a setup statement after the prologue's start of a ``max=``/``min=`` loop
    writes what the start reads (``b = 1; acc = b; b = 100``)."""
    if reduction.start is None:
        return False
    reads = read_buffers((), (reduction.start,))
    ids = set(map(id, setup))
    after = False
    for stmt in reduction.prologue:
        after = after or _starts(stmt, reduction)
        if after and id(stmt) in ids and isinstance(stmt, Assign) and stmt.buffer in reads:
            return True
    return False


def _starting(epilogue: tuple[Stmt, ...], start: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """The body of the epilogue's nest: ``start`` (the locals it takes from the combine)
    before ``epilogue``; or, where the epilogue is 0-d locals' statements and then one par
    loop that writes none of those locals nor anything they read, all of them at the start
    of each of the loop's iterations (each computes the same values), so that the loop joins
    the nest's band: a row's softmax or layer-norm writes then run on a thread per element,
    not on a block per row."""
    if not epilogue or not isinstance(epilogue[-1], Loop) or not epilogue[-1].is_par:
        return (*start, *epilogue)
    *before, loop = epilogue
    names = {s.decl.name for s in start if isinstance(s, New)}
    for stmt in before:
        if isinstance(stmt, New) and not stmt.decl.shape:
            names.add(stmt.decl.name)
        elif not (isinstance(stmt, Assign) and stmt.buffer in names and not stmt.indices and not stmt.atomic):
            return (*start, *epilogue)
    written = {s.buffer for s in walk_block(loop.body) if isinstance(s, Assign)}
    if written & (names | read_buffers((*start, *before))):
        return (*start, *epilogue)
    return (replace(loop, body=(*start, *before, *loop.body)),)


def atomic_split_allowed(reduction: Reduction, dtype: DType, *, deterministic: bool) -> bool:
    """Whether ``reduction``'s parts may add their partials into the target atomically: a
    ``+=`` into a type with atomics (``ATOMIC_TYPES``), whose float sums (an order that
    varies from run to run) only where ``deterministic`` is off."""
    if reduction.op is not AssignOp.ADD or dtype not in ATOMIC_TYPES:
        return False
    if reduction.prologue or reduction.epilogue:  # they would need kernels of their own
        return False
    return dtype.is_integer or not deterministic


def _positive(extent: IndexExpr) -> IndexExpr:
    """A loop's extent as a shape: ``max(0, extent)``, unless it is a number or a size (a
    size is at least 1)."""
    if isinstance(extent, IConst):
        return IConst(max(0, extent.value))
    if isinstance(extent, IVar):
        return extent
    return IBin(IndexOp.MAX, IConst(0), extent)


def _with_body(top: Loop, body: tuple[Stmt, ...], depth: int) -> Loop:
    """The band of ``depth`` (>= 1) par loops starting at ``top`` around ``body``."""
    if depth == 1:
        return replace(top, body=body)
    return replace(top, body=(_with_body(top.body[0], body, depth - 1),))


def reduction_loop(top: Stmt, reduction: Reduction) -> Loop:
    """The loop of ``reduction`` in ``top``, the top-level statement at its position (in the
    program it was found in, or that program with its sizes bound)."""
    node = top
    for depth in range(len(reduction.band)):
        assert isinstance(node, Loop)
        innermost = depth == len(reduction.band) - 1
        node = node.body[len(reduction.prologue) if innermost else 0]
    assert isinstance(node, Loop)
    return node


def _retarget(stmt: Stmt, target: str, parts: str, element: tuple[IndexExpr, ...]) -> Stmt:
    """``stmt`` with its updates of ``target[idx]`` made updates of ``parts[element]`` (the
    loop's other statements as they are)."""
    if isinstance(stmt, Loop):
        return replace(stmt, body=tuple(_retarget(s, target, parts, element) for s in stmt.body))
    if not isinstance(stmt, Assign) or stmt.buffer != target:
        return stmt
    return replace(stmt, buffer=parts, indices=element)


# Built with constants folded: in a program with its sizes bound, a shape must be a number.
def _add(a: IndexExpr, b: IndexExpr) -> IndexExpr:
    return fold_index(IBin(IndexOp.ADD, a, b))


def _mul(k: int, e: IndexExpr) -> IndexExpr:
    return fold_index(IBin(IndexOp.MUL, IConst(k), e))


def _div(e: IndexExpr, k: int) -> IndexExpr:
    return fold_index(IBin(IndexOp.FLOORDIV, e, IConst(k)))
