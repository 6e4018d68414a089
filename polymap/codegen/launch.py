"""How a kernel is launched: its arguments, grid and block, the parts a grid too large for
the hardware launches in, and the function of its blocks at an edge with the conditions
under which each function runs. The emitter (``codegen.cuda``) makes these; the C launcher
prints them, and runtimes that launch from Python (CuPy, ``runtime.launches``) read them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import islpy as isl

from polymap.poly.model import params_hold
from polymap.schedule.program import KernelMapping

GRID_X_MAX, GRID_YZ_MAX = 2**31 - 1, 65535
GRID_LIMITS = (GRID_X_MAX, GRID_YZ_MAX, GRID_YZ_MAX)  # blocks per grid axis x, y, z
PARTED_MAX = 2**31 - 1  # a parted axis' blocks at most: its kernel reads the index as an int


@dataclass(frozen=True, slots=True)
class Argument:
    """A parameter of a kernel or of the launcher: a buffer (device pointer), an input
    scalar (by value: ``BufferDecl.by_value``), a size, or a host-loop index, with its C type and name."""

    kind: str  # "buffer", "scalar", "size", "host" or "first" (``KernelLaunch.parted``)
    name: str  # the program's name for it; for "first", the grid axis ("y" or "z")
    c_type: str
    c_name: str

    def __str__(self) -> str:
        return f"{self.c_type} {self.c_name}"


def launcher_parameters(arguments: tuple[Argument, ...]) -> list[str]:
    """The launcher's C parameters, as its definition and the header (``header.py``) print
    them: the arguments, then the stream."""
    return [str(a) for a in arguments] + ["cudaStream_t stream"]


@dataclass(frozen=True, slots=True, eq=False)
class EdgeFunction:
    """A kernel's function for its blocks at an edge, and the conditions, on the sizes and
    host indices (the launch's isl names, as in ``KernelLaunch.grid``), under which some
    block is full and some block is at an edge (``schedule.kernel.FullBlockSplit``)."""

    function: str
    some_full: isl.Set
    some_edge: isl.Set


@dataclass(frozen=True, slots=True, eq=False)
class KernelLaunch:
    """How to launch one kernel (for runtimes that launch from Python)."""

    mapping: KernelMapping
    function: str
    arguments: tuple[Argument, ...]
    block: tuple[int, int, int]
    grid: tuple[isl.PwAff | int, ...]  # blocks per axis, functions of sizes and host indices
    host_params: tuple[str, ...]  # isl names of the host indices in ``grid``
    # meets at __syncthreads or shuffles between lanes (the host emulation runs its threads as fibers)
    sync: bool
    # the axes (1: y, 2: z) whose blocks may outnumber the hardware's grid (GRID_YZ_MAX): they
    # launch in parts of at most that many blocks, the kernel taking each part's first block
    # as an argument (kind "first") and adding it to blockIdx
    parted: tuple[int, ...] = ()
    # a kernel whose full blocks run code without the points' guards runs its blocks at an
    # edge in a function of its own, launched after ``function`` on the same grid (each
    # skips the other's blocks): one function's registers are the most any of its code
    # needs, and the guarded code's would limit the full blocks' occupancy
    edge: EdgeFunction | None = None

    def functions(self, values: dict[str, int]) -> tuple[str, ...]:
        """The functions launched at ``values`` (the sizes and host indices by their isl
        names, as in ``grid``): a split kernel's where some block is full, and its edge
        function where some block is at an edge."""
        if self.edge is None:
            return (self.function,)
        chosen = [(self.function, self.edge.some_full), (self.edge.function, self.edge.some_edge)]
        return tuple(function for function, where in chosen if params_hold(where, values))

    @property
    def most_blocks(self) -> tuple[int, int, int]:
        """The most blocks per axis this launch can run: the hardware's grid, and on a parted
        axis the int its kernel reads a block's index as."""
        return tuple(PARTED_MAX if axis in self.parted else GRID_LIMITS[axis] for axis in range(3))

    def parts(self, blocks: tuple[int, int, int]) -> Iterator[tuple[dict[str, int], tuple[int, int, int]]]:
        """The launches that run ``blocks`` (per axis), in the C launcher's order (z's parts
        outside y's): each one's first block per parted axis (by the axis' letter), and its grid."""
        starts = [range(0, blocks[a], GRID_LIMITS[a]) if a in self.parted else (0,) for a in range(3)]
        for z0 in starts[2]:
            for y0 in starts[1]:
                first = (0, y0, z0)
                grid = tuple(
                    min(b - f, GRID_LIMITS[a]) if a in self.parted else b
                    for a, (b, f) in enumerate(zip(blocks, first))
                )
                yield {"xyz"[a]: first[a] for a in self.parted}, grid


__all__ = [
    "GRID_LIMITS",
    "GRID_X_MAX",
    "GRID_YZ_MAX",
    "PARTED_MAX",
    "Argument",
    "EdgeFunction",
    "KernelLaunch",
    "launcher_parameters",
]
