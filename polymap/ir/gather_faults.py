"""The error for a gathered index outside its dimension, found at run time.

No proof can bound a value read from a buffer, so both executors check every gathered index
where it is used (``A[I[i], j]``: ``I[i]`` against A's first dimension): the reference on
its arrays, the emitted code through ``pm_gather`` (``cuda_templates/polymap_helpers.cuh``),
which reads element 0 instead and records the fault (``runtime/faults.py``). Both raise this
error, which names the statement, the read, the position and the dimension's extent; the
reference also knows the element of the index buffer and its value.
"""

from __future__ import annotations

from polymap.errors import BoundsError
from polymap.ir.nodes import Anchor, Assign, Gather, Read, gathers_of

# The fault word (``runtime/faults.py``) holds a gather's ordinal in the statement in 7 bits,
# between the line (22 bits) and the flag (bit 29): the last ordinal stands for every gather of
# the statement from it on (PM_FAULT_GATHER(k) in ``cuda_templates/polymap_helpers.cuh``)
GATHER_SHIFT, GATHER_FLAG = 22, 1 << 29
MAX_GATHER_ORDINAL = (GATHER_FLAG >> GATHER_SHIFT) - 1


def gather_error(
    stmt: Assign | Anchor,
    read: Read,
    position: int,
    gather: Gather,
    extent: int | str,
    *,
    element: tuple[int, ...] | None = None,
    value: int | None = None,
    **context,
) -> BoundsError:
    """``BoundsError`` for ``gather`` (position ``position`` of ``read`` in ``stmt``)."""
    source = gather.source
    if element is not None:
        at = f"{source.buffer}[{', '.join(map(str, element))}]" if element else source.buffer
        what = f"{at} = {value}"
    else:
        what = f"a value of {source}"
    return BoundsError(
        f"statement {stmt.name} ({stmt}): {what}, read as index {position} of {read.buffer} in {read}, is "
        f"outside [0, {extent}) at run time; a gathered index is checked where it is used, as no "
        "proof can bound a value read from a buffer",
        loc=source.loc or read.loc or stmt.loc,
        **context,
    )


def statement_gathers(stmt: Assign | Anchor) -> tuple[tuple[Read, int, Gather], ...]:
    """The gathered indices of a statement, in the order of its reads (a read written twice
    counts once): the k-th is the one the emitted code records as ``PM_FAULT_GATHER(k)``."""
    seen = {}
    for read in stmt.reads():
        for k, g in gathers_of(read):
            seen.setdefault((read.buffer, read.indices, k), (read, k, g))
    return tuple(seen.values())
