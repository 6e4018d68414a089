"""Sizes a host run can take: the host emulation runs the CUDA source on a few CPU cores, at
about 10^9 arithmetic operations a second, so a model at its default sizes (the Orojenesis
feed-forward pair: 8.8 * 10^12) would take hours. ``host_run_sizes`` keeps the sizes a run
was asked for when the program is within ``HOST_FLOPS`` at them, and otherwise halves the
largest of the sizes that were defaults, one at a time, until it is within ``HOST_FIT_FLOPS``
(sizes given by the user are kept). The kernels were proved for every size in their context, so the same compiled
source runs at the smaller sizes; the caller says which sizes ran. The program's buffers are
held to ``HOST_BYTES`` the same way: a copy has no operations, and at a few billion elements its
inputs alone would exhaust the host's memory."""

from __future__ import annotations

from dataclasses import dataclass

from polymap.ir.flops import statement_flops
from polymap.poly.isl_text import const_value
from polymap.poly.model import PolyModel

HOST_FLOPS = 10**11
# a program over HOST_FLOPS is reduced to this many operations or fewer: on a 2-core machine
# the host kernels and the NumPy reference together then take well under a minute (the
# Orojenesis pair and the f16 GEMM; docs/benchmarks/2026-11-25-host-runs.md)
HOST_FIT_FLOPS = 2 * 10**10
HOST_BYTES = 2**31  # every buffer of the program together, at the sizes run


SIZES_GIVEN = "the sizes given with --size or the context"  # what fixes sizes by default


@dataclass(frozen=True, slots=True)
class HostSizes:
    """The sizes to run at, and the program's operations at the sizes asked and at those."""

    sizes: dict[str, int]
    asked: dict[str, int]
    flops_asked: int
    flops: int
    bytes_asked: int = 0  # of every buffer of the program
    bytes: int = 0
    kept_by: str = SIZES_GIVEN  # what keeps the sizes from shrinking

    @property
    def reduced(self) -> bool:
        return self.sizes != self.asked

    @property
    def over(self) -> bool:
        """Whether the sizes run are still over a limit (given sizes or the context)."""
        return self.flops > HOST_FLOPS or self.bytes > HOST_BYTES

    def note(self) -> str | None:
        """What a user reads when the sizes were reduced, or could not be reduced enough;
        None when the program is within the limit as asked."""

        def shown(sizes):
            return ", ".join(f"{k} = {v}" for k, v in sizes.items()) or "its bound sizes"

        if not self.reduced and not self.over:
            return None
        asked = f"note: at {shown(self.asked)} the program does {self.flops_asked:.3g} operations"
        limit = f"more than a host run does in reasonable time ({HOST_FLOPS:.0e})"
        if self.bytes_asked > HOST_BYTES:
            asked += f" on {self.bytes_asked:.3g} bytes of buffers"
            limit = f"more than a host run does in reasonable time and memory ({HOST_FLOPS:.0e}, {HOST_BYTES:.3g} bytes)"
        if not self.reduced:
            return f"{asked}, {limit}, and {self.kept_by} keep it there: the run may take long"
        still = f", still over the limit: {self.kept_by} allow no smaller" if self.over else ""
        return (
            f"{asked}, {limit}: running on the host at {shown(self.sizes)} ({self.flops:.3g} operations"
            + (f", {self.bytes:.3g} bytes" if self.bytes_asked > HOST_BYTES else "")
            + f"{still}); --size sets sizes, and a GPU runs the sizes asked"
        )


def program_bytes(model: PolyModel, sizes: dict[str, int]) -> int:
    """Bytes of every buffer of the program (inputs, outputs and temporaries) at ``sizes``."""
    program = model.program
    bound = program.bind(**{k: v for k, v in sizes.items() if k in program.param_names})
    total = 0
    for decl in bound.all_buffers():
        elements = 1
        for extent in decl.shape:
            elements *= max(const_value(extent) or 0, 0)
        total += elements * decl.dtype.numpy.itemsize
    return total


def program_flops(model: PolyModel, sizes: dict[str, int]) -> int:
    """Arithmetic operations of the whole program at ``sizes`` (one value per symbolic size)."""
    return sum(statement_flops(s.stmt) * model.instance_count(s.name, sizes) for s in model.statements)


def host_run_sizes(
    model: PolyModel, sizes: dict[str, int], given: set[str], kept_by: str | None = None
) -> HostSizes:
    """``sizes`` when the program is within ``HOST_FLOPS`` at them, else smaller ones, within
    ``HOST_FIT_FLOPS`` where the sizes given allow (see the module doc); the sizes named in
    ``given`` are never changed. ``kept_by`` says what fixed the sizes, for the note (by
    default the sizes given and the context; a fused program's are the plan's numbers)."""
    asked = dict(sizes)
    flops = first = program_flops(model, sizes)
    nbytes = first_bytes = program_bytes(model, sizes)
    current = dict(sizes)
    kept = set(given)
    budget = HOST_FIT_FLOPS if flops > HOST_FLOPS else HOST_FLOPS
    while flops > budget or nbytes > HOST_BYTES:
        shrinkable = [name for name in current if name not in kept and current[name] > 1]
        if not shrinkable:
            break  # every remaining size was given or is at the context's edge: run these
        largest = max(shrinkable, key=lambda name: current[name])
        smaller = {**current, largest: (current[largest] + 1) // 2}
        if not model.in_context(smaller):
            # sizes the context ties together (N = K) halve together or not at all
            together = {**current, **{name: (current[name] + 1) // 2 for name in shrinkable}}
            if not model.in_context(together):
                kept.add(largest)  # the kernels were proved for sizes in the context only
                continue
            smaller = together
        current = smaller
        flops, nbytes = program_flops(model, current), program_bytes(model, current)
    return HostSizes(current, asked, first, flops, first_bytes, nbytes, kept_by or SIZES_GIVEN)
