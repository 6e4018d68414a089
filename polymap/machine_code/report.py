"""``polymap inspect``: the machine code of every kernel of a compiled program, read without a GPU.

NVRTC compiles the emitted source to a cubin for the target's architecture (the same
compiler and flags CuPy uses on a GPU), ``cuobjdump`` prints its resources and SASS, and
this module reports per kernel: registers (ptxas's and the cost model's estimate), stack and
local memory, shared memory, occupancy on the target, and the instruction mix of the whole
kernel and of its hot loop. These are measurements of the code, not timings.
"""

from __future__ import annotations

from dataclasses import dataclass

from polymap.codegen.cuda import EDGE_BLOCK_NOTE, FULL_BLOCK_NOTE
from polymap.errors import ArgumentError, MachineCodeError
from polymap.machine_code.occupancy import Occupancy, occupancy, reserve_in_ptxas_figure
from polymap.machine_code.sass import (
    InstructionMix,
    Loop,
    Resources,
    body,
    hot_loop,
    innermost_loops,
    mostly_within,
    parse_line_info,
    parse_resources,
    parse_sass,
)
from polymap.runtime import cuobjdump
from polymap.runtime.nvrtc import compile_cubin, nvrtc_version
from polymap.targets import GpuTarget


@dataclass(frozen=True, slots=True)
class KernelMachineCode:
    """The machine code of one ``__global__`` function of a compiled program."""

    function: str
    threads_per_block: int
    resources: Resources
    model_registers: int  # the cost model's estimate (0: the model made none)
    model_shared: int  # the cost model's shared bytes per block (the source's declarations)
    reserve_in_shared: bool  # ptxas's shared figure holds the system's per-block reserve
    occupancy: Occupancy
    whole: InstructionMix
    hot_loop: Loop | None
    hot: InstructionMix | None  # the hot loop's mix; None when the kernel has no loop
    rivals: int = 0  # other innermost loops as deep as the hot one (it has the most FMAs)
    # the hot loop was taken from the code for full blocks of a function that holds both
    # codes (one wave with blocks at an edge at the cost sizes: ``codegen.cuda``,
    # ``full_block_lines``)
    full_blocks: bool = False
    model_issue_s: float = 0.0  # the cost model's issue time of one launch (0: none)
    model_time_s: float = 0.0  # the cost model's predicted time of one launch (0: none)
    hot_issue_s: float | None = None  # ``hot_loop_issue_time``; None without FMAs in the hot loop
    grid_blocks: int = 0  # the blocks of one launch at the cost sizes (0: no cost)
    one_wave: bool = False  # at most one block per SM there (``GpuTarget.one_wave``)
    grid_per_sm: int = 0  # the most blocks the grid gives one SM at the cost sizes (0: no cost)
    # the function that runs the kernel's blocks at an edge, where its full blocks run code
    # without the points' guards (``codegen.cuda.EdgeFunction``), and its resources
    edge_function: str | None = None
    edge_resources: Resources | None = None
    edge_occupancy: Occupancy | None = None

    @property
    def register_ratio(self) -> float | None:
        """ptxas's registers over the model's estimate; None without an estimate."""
        return self.resources.registers / self.model_registers if self.model_registers else None


@dataclass(frozen=True, slots=True, repr=False)
class MachineCodeReport:
    """Every kernel of a program as the target's machine code, and what made it. ``str()`` is
    the report :command:`polymap inspect` prints; ``kernel(name)`` finds one kernel."""

    program: str
    arch: str
    target: str
    compiler: str
    kernels: tuple[KernelMachineCode, ...]

    def kernel(self, function: str) -> KernelMachineCode:
        """The kernel named ``function`` (``<program>_kernel0``, ...)."""
        for k in self.kernels:
            if k.function == function:
                return k
        for k in self.kernels:
            if k.edge_function == function:
                raise ArgumentError(
                    f"{function} runs the blocks at an edge of kernel {k.function!r}: its figures are "
                    f"that kernel's edge_function and edge_resources"
                )
        names = ", ".join(k.function for k in self.kernels) or "none"
        raise ArgumentError(
            f"no kernel {function!r} in the machine code of {self.program} (kernels: {names})"
        )

    def __str__(self) -> str:
        return format_report(self)

    def __repr__(self) -> str:
        names = ", ".join(k.function for k in self.kernels)
        return f"<MachineCodeReport of {self.program} for {self.arch}: {names or 'no kernels'}>"


def hot_loop_issue_time(target: GpuTarget, flops: int, hot: InstructionMix | None) -> float | None:
    """A lower bound on a launch's instruction issue from its own hot loop: the kernel's
    ``flops`` are FMAs of a warp's 32 lanes, which the hot loop does ``hot.fma`` at a time
    (so it runs ``flops / 64 / hot.fma`` times in all), each time issuing its
    ``hot.instructions``; one instruction per clock and scheduler. Everything outside the
    hot loop is left out. None where the hot loop does no FMA (the count says nothing)."""
    if hot is None or not hot.fma or not flops:
        return None
    iterations = flops / (2 * target.warp_size) / hot.fma
    return iterations * hot.instructions / target.warp_instructions_per_second


def inspect_kernel(kernel, target: GpuTarget | None = None) -> MachineCodeReport:
    """The machine code of ``kernel`` (a :class:`polymap.Kernel`) for its mapping's target
    (or ``target``): NVRTC to a cubin, then ``cuobjdump``. Raises CudaCompileError when NVRTC
    fails and MachineCodeError when cuobjdump is missing or its output is not understood."""
    target = target or kernel.mapping.target
    arch = target.sm_arch
    # line information does not change the code (the same SASS with and without it), and
    # tells which instructions come from the code for full blocks of a function that also
    # holds the code for blocks at an edge
    cubin = compile_cubin(kernel.source, name=f"{kernel.launcher}.cu", arch=arch, options=("-lineinfo",))
    resources = parse_resources(cuobjdump.resource_usage(cubin))
    functions = parse_sass(cuobjdump.sass(cubin))
    lines = parse_line_info(cuobjdump.line_info(cubin))

    def found(name: str) -> None:
        if name not in resources or name not in functions:
            raise MachineCodeError(
                f"kernel {name}: cuobjdump printed no {'resources' if name not in resources else 'SASS'} "
                f"for it (functions seen: {', '.join(sorted(functions)) or 'none'})"
            )

    costs = dict(zip(kernel.mapping.kernels, kernel.mapping.costs))
    kernels = []
    for launch in kernel.cuda.launches:
        name = launch.function
        found(name)
        edge = launch.edge.function if launch.edge is not None else None
        if edge is not None:
            found(edge)
        used = resources[name]
        threads = launch.block[0] * launch.block[1] * launch.block[2]

        code = functions[name]
        full = full_block_lines(kernel.source, name)
        within = None
        if full is not None:  # both codes in one function: the hot loop is the full blocks'
            within = frozenset(address for address, line in lines.get(name, {}).items() if line in full)
        loop = hot_loop(code, within)
        rivals = sum(
            1 for o in innermost_loops(code) if loop is not None and o != loop and o.depth == loop.depth
        )
        cost = costs.get(launch.mapping)
        reserved = reserve_in_ptxas_figure(target, used.shared)
        hot = InstructionMix.of(body(code, loop)) if loop is not None else None
        kernels.append(
            KernelMachineCode(
                function=name,
                threads_per_block=threads,
                resources=used,
                model_registers=cost.registers if cost is not None else 0,
                model_shared=cost.shared_bytes if cost is not None else 0,
                reserve_in_shared=reserved,
                occupancy=_occupancy(target, threads, used),
                whole=InstructionMix.of(code),
                hot_loop=loop,
                hot=hot,
                rivals=rivals,
                model_issue_s=cost.issue_s if cost is not None else 0.0,
                model_time_s=cost.time_s if cost is not None else 0.0,
                hot_issue_s=hot_loop_issue_time(target, cost.flops, hot) if cost is not None else None,
                grid_blocks=cost.blocks if cost is not None else 0,
                one_wave=cost is not None and target.one_wave(cost.blocks),
                grid_per_sm=-(-cost.blocks // target.sm_count) if cost is not None else 0,
                full_blocks=within is not None and loop is not None and mostly_within(code, loop, within),
                edge_function=edge,
                edge_resources=resources[edge] if edge is not None else None,
                edge_occupancy=_occupancy(target, threads, resources[edge]) if edge is not None else None,
            )
        )
    major, minor = nvrtc_version()
    return MachineCodeReport(
        program=kernel.program.name,
        arch=arch,
        target=target.name,
        compiler=f"NVRTC {major}.{minor} (read with cuobjdump)",
        kernels=tuple(kernels),
    )


def _occupancy(target: GpuTarget, threads: int, used: Resources) -> Occupancy:
    """The occupancy of a function of ``threads`` per block that uses ``used``."""
    return occupancy(
        target,
        threads_per_block=threads,
        registers=used.registers,
        shared_bytes=used.shared,
        reserve_included=reserve_in_ptxas_figure(target, used.shared),
    )


def full_block_lines(source: str, function: str) -> range | None:
    """The source lines (1-based) of ``function``'s code for full blocks where the function
    also holds the code for blocks at an edge (one wave with blocks at an edge at the cost
    sizes keeps both in one function),
    None otherwise: between the line that ends with ``FULL_BLOCK_NOTE`` and its ``else``."""
    text = source.splitlines()
    start = next((k for k, line in enumerate(text) if "__global__" in line and f" {function}(" in line), None)
    if start is None:
        return None
    for k in range(start + 1, len(text)):
        if "__global__" in text[k]:
            return None
        if text[k].endswith(FULL_BLOCK_NOTE):
            edge = f"}} else {{  {EDGE_BLOCK_NOTE}"
            end = next((e for e in range(k + 1, len(text)) if text[e].strip() == edge), None)
            return None if end is None else range(k + 2, end + 1)
    return None


def format_report(report: MachineCodeReport) -> str:
    """The report as text: one block per kernel, every figure labelled."""
    lines = [
        f"machine code of {report.program} for {report.arch} ({report.target}), compiled by "
        f"{report.compiler}: counts of the code, not timings"
    ]
    if not report.kernels:
        lines.append("no kernels: the program has no statement to run")
    for k in report.kernels:
        r, occ = k.resources, k.occupancy
        model = (
            f" (cost model: {k.model_registers}, ptxas/model {k.register_ratio:.2f})"
            if k.model_registers
            else ""
        )
        lines.append(f"kernel {k.function}: {_count(k.threads_per_block, 'thread')} per block")
        lines.append(f"  registers per thread: {r.registers}{model}")
        if k.edge_resources is not None and k.edge_occupancy is not None:
            e = k.edge_resources
            lines.append(
                f"  blocks at an edge: a function of their own, {k.edge_function}, launched after "
                f"{k.function} at sizes where some block is at an edge: {e.registers} registers per thread, "
                f"{e.stack} bytes of stack, {k.edge_occupancy.warps_per_sm} warps per SM (every figure below "
                f"is {k.function}'s)"
            )
        lines.append(
            f"  stack: {r.stack} bytes, local memory: {r.local} bytes, "
            f"local loads and stores: {k.whole.local_accesses}"
            + ("" if not (r.stack or r.local or k.whole.local_accesses) else "  <- not all in registers")
        )
        reserve = " with the system's per-block reserve" if k.reserve_in_shared else ""
        lines.append(
            f"  shared memory per block: {r.shared} bytes{reserve} (cost model: {k.model_shared} bytes)"
        )
        fits = (
            f"{_count(occ.blocks_per_sm, 'block')}, {_count(occ.warps_per_sm, 'warp')} per SM "
            f"({occ.fraction:.0%} of the warp slots), limited by {occ.limiter}"
            if occ.blocks_per_sm
            else f"a block does not fit on an SM ({occ.limiter})"
        )
        if k.one_wave:
            fits += (
                f"; the grid's {_count(k.grid_blocks, 'block')} at the cost sizes are one wave, "
                "at most one per SM, so it does not limit them"
            )
        elif 0 < k.grid_per_sm < occ.blocks_per_sm:
            fits += (
                f"; the grid's {_count(k.grid_blocks, 'block')} at the cost sizes give an SM at most "
                f"{k.grid_per_sm}"
            )
        lines.append(f"  occupancy: {fits}")
        lines.append(f"  whole kernel: {_mix(k.whole)}")
        if k.hot is None or k.hot_loop is None:
            lines.append("  hot loop: none (no backward branch)")
        else:
            span = f"{k.hot_loop.start:#06x}-{k.hot_loop.end:#06x}, depth {k.hot_loop.depth}"
            if k.full_blocks:
                span += "; in the code for full blocks, which every block but the edges runs"
            elif k.rivals:
                span += f"; the one with the most FMAs of {k.rivals + 1} innermost loops this deep"
            lines.append(f"  hot loop ({span}): {_mix(k.hot)}")
            per_load = k.hot.fma_per_shared_load
            lines.append(
                f"    FMA share {k.hot.fma_share:.1%}, "
                + (f"{per_load:.2f} FMA per shared load" if per_load is not None else "no shared loads")
                + f", widest load {k.hot.widest_load_bits} bits"
            )
            if k.hot_issue_s is not None:
                lines.append(
                    f"    issue: the hot loop alone takes at least {k.hot_issue_s * 1e6:.4g} us per launch at the "
                    f"cost sizes (its instructions, one per clock and scheduler); the model charges "
                    f"{k.model_issue_s * 1e6:.4g} us of issue and predicts {k.model_time_s * 1e6:.4g} us"
                )
    return "\n".join(lines)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _mix(mix: InstructionMix) -> str:
    widths = ", ".join(f"{bits}-bit x{n}" for bits, n in mix.load_widths) or "none"
    global_widths = ", ".join(f"{bits}-bit x{n}" for bits, n in mix.global_load_widths) or "none"
    return (
        f"{mix.instructions} instructions: {mix.fma} FMA ({mix.fp32_fma} FP32), "
        f"{mix.shared_loads} LDS, {mix.shared_stores} STS, {mix.global_loads} LDG, "
        f"{mix.global_stores} STG, {mix.async_copies} cp.async, {mix.local_accesses} local, "
        f"{_count(mix.barriers, 'barrier')}{f', {mix.atomics} atomics' if mix.atomics else ''}; loads by width: {widths} (global: {global_widths})"
    )
