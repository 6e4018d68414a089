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
of the loop's iterations, so that the loop joins the nest's band (``split_rewrite._starting``).

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polymap.ir.accumulators import COMBINABLE, accumulated, reorders
from polymap.ir.nodes import (
    ATOMIC_TYPES,
    Anchor,
    Assign,
    AssignOp,
    BufferDecl,
    DType,
    IBin,
    IConst,
    IndexExpr,
    IndexOp,
    Loop,
    New,
    Program,
    Stmt,
    ValueExpr,
    fold_index,
    index_vars,
    operand_reads,
    valued_indices,
)
from polymap.ir.walk import walk_block
from polymap.transform.split_online import (
    OnlineLoop,
    online_loop,
    read_buffers,
    setup_statements,
    touched_buffers,
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
            return add_index(part, mul_index(self.parts, index))
        return add_index(mul_index(self.chunk(extent), part), index)

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
    accumulating = [s for s in updates if s.buffer == target]
    if any(s.guard is not None and not (valued_indices(s.guard) & inside) for s in accumulating):
        # an if around the loop (``if j < 4 { seq K k { .. } }``): the parts' start and the
        # combine would run where the loop does not (a statement beside the sum under such
        # an if runs in the parts under it, as in the loop)
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
    used = locals_used(prologue, epilogue)
    arrays = sorted(decl.name for decl in used if decl.shape)
    if arrays:
        return (
            f"the statements after loop '{index}' use the array '{arrays[0]}' declared before it (a split "
            f"moves them to a nest of their own, which takes 0-d values only)"
        )
    # a value they take from the combine must be set at every band point: where the prologue
    # sets it only under an if, the combine would store what was never written
    for decl in locals_used(prologue, epilogue, loop=loop, set_before=True):
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


def locals_used(
    prologue: tuple[Stmt, ...],
    epilogue: tuple[Stmt, ...],
    *,
    loop: Loop | None = None,
    set_before: bool | None = None,
) -> list[BufferDecl]:
    """The block-local buffers the prologue declares that the epilogue reads or writes: with
    ``set_before`` True, those the prologue or ``loop`` sets (their values move to the
    epilogue's nest), False the others (only declared there), None all."""
    touched = touched_buffers(epilogue)
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


def atomic_split_allowed(reduction: Reduction, dtype: DType, *, deterministic: bool) -> bool:
    """Whether ``reduction``'s parts may add their partials into the target atomically: a
    ``+=`` into a type with atomics (``ATOMIC_TYPES``), whose float sums (an order that
    varies from run to run) only where ``deterministic`` is off."""
    if reduction.op is not AssignOp.ADD or dtype not in ATOMIC_TYPES:
        return False
    if reduction.prologue or reduction.epilogue:  # they would need kernels of their own
        return False
    return dtype.is_integer or not deterministic


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


# Built with constants folded: in a program with its sizes bound, a shape must be a number.
def add_index(a: IndexExpr, b: IndexExpr) -> IndexExpr:
    return fold_index(IBin(IndexOp.ADD, a, b))


def mul_index(k: int, e: IndexExpr) -> IndexExpr:
    return fold_index(IBin(IndexOp.MUL, IConst(k), e))


def div_index(e: IndexExpr, k: int) -> IndexExpr:
    return fold_index(IBin(IndexOp.FLOORDIV, e, IConst(k)))
