"""Read SASS (the GPU's machine code, as ``cuobjdump`` prints it): instructions, loops and the
instruction mix of the hot loop. Pure text processing, no GPU and no tool needed.

A line of ``cuobjdump -sass`` looks like::

    /*1f90*/                   FFMA R23, R20, R23, R17 ;    /* 0x000000171417 */
    /*1cf0*/              @!P0 BRA 0x1da0 ;                 /* 0x000000000028 */

an address, an optional guard predicate, the opcode with its modifiers (``LDG.E.128``) and
the operands. A loop is a backward branch: a ``BRA`` at address ``a`` whose target ``t`` is
before it spans ``[t, a]``. The *hot loop* is the innermost loop nested deepest (the
k loop of a GEMM, under its tile loops); among loops at the same depth, the one with the
most floating-point FMAs, then the longest. What runs there is what bounds a kernel's
speed, so its mix is the figure that says whether a code generator change helped.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(?P<name>\S+)\s*$")
_INSTRUCTION = re.compile(
    r"^\s*/\*(?P<address>[0-9a-fA-F]+)\*/\s+(?P<guard>@!?U?P[0-9T]\s+)?(?P<opcode>[A-Z][A-Z0-9_.]*)"
    r"(?P<operands>[^;]*);"
)
_RESOURCE_FUNCTION = re.compile(r"^\s*Function\s+(?P<name>\S+):\s*$")
_RESOURCE_FIELD = re.compile(r"(?P<key>[A-Z_]+(?:\[\d+\])?):(?P<value>\d+)")
_HEX = re.compile(r"0x([0-9a-fA-F]+)")
_LINE_SECTION = re.compile(r"^\s*\.section\s+\.text\.(?P<name>[^,\s]+)\s*,")
_LINE_COMMENT = re.compile(r'^\s*//## File ".*", line (?P<line>\d+)')

# What the figures count, by the opcode without modifiers (the CUDA Binary Utilities'
# "Instruction Set Reference", Hopper). Half-precision HFMA2 is left out: polymap computes in
# f32/f64, and ptxas uses ``HFMA2.MMA R, -RZ, RZ, c`` to move constants into registers.
FP32_FMA = frozenset({"FFMA"})
FMA = frozenset({"FFMA", "DFMA"})
SHARED_LOADS = frozenset({"LDS", "LDSM"})
SHARED_STORES = frozenset({"STS"})
GLOBAL_LOADS = frozenset({"LDG"})
GLOBAL_STORES = frozenset({"STG"})
ASYNC_COPIES = frozenset({"LDGSTS"})  # cp.async: global to shared without a register
LOCAL = frozenset({"LDL", "STL"})  # the thread's stack: spills and arrays not in registers
BARRIERS = frozenset({"BAR"})
# atomic updates of memory: reductions without a result (RED, REDG on sm_90), atomics that
# return the old value (ATOM, ATOMG; a compare-and-swap loop's ATOMG.CAS) and shared ATOMS
ATOMICS = frozenset({"RED", "REDG", "ATOM", "ATOMG", "ATOMS"})
_WIDTHS = {"128": 128, "64": 64, "U16": 16, "S16": 16, "U8": 8, "S8": 8}


@dataclass(frozen=True, slots=True)
class Instruction:
    """One SASS instruction: ``opcode`` with its modifiers (``LDG.E.128``)."""

    address: int
    opcode: str
    operands: str
    guard: str = ""

    @property
    def family(self) -> str:
        """The opcode without modifiers: ``LDG`` for ``LDG.E.128.CONSTANT``."""
        return self.opcode.split(".", 1)[0]

    @property
    def width_bits(self) -> int:
        """The access width of a load or store (32 unless a modifier says otherwise)."""
        for modifier in self.opcode.split(".")[1:]:
            if modifier in _WIDTHS:
                return _WIDTHS[modifier]
        return 32

    @property
    def branch_target(self) -> int | None:
        """Where a direct ``BRA`` goes (its last hexadecimal operand), else None."""
        if self.family != "BRA":
            return None
        targets = _HEX.findall(self.operands)
        return int(targets[-1], 16) if targets else None


@dataclass(frozen=True, slots=True)
class Resources:
    """``cuobjdump -res-usage`` of one function: registers per thread; stack, shared (static)
    and local bytes; the kernel's parameter bytes are in ``constant``."""

    registers: int
    stack: int
    shared: int
    local: int
    constant: int


@dataclass(frozen=True, slots=True)
class Loop:
    """A backward branch's span ``[start, end]`` (addresses) and how many loops enclose it."""

    start: int
    end: int
    depth: int

    def holds(self, address: int) -> bool:
        return self.start <= address <= self.end


@dataclass(frozen=True, slots=True)
class InstructionMix:
    """What a sequence of instructions does, counted by family. A predicated instruction
    counts like any other: it takes an issue slot whether its guard holds or not."""

    instructions: int
    fp32_fma: int
    fma: int
    shared_loads: int
    shared_stores: int
    global_loads: int
    global_stores: int
    async_copies: int
    local_accesses: int
    barriers: int
    load_widths: tuple[tuple[int, int], ...]  # (bits, global and shared loads of that width)
    # (bits, global loads of that width), a cp.async (LDGSTS) counted as the global load it is
    global_load_widths: tuple[tuple[int, int], ...] = ()
    atomics: int = 0  # ``ATOMICS``: a scatter's updates (language.md, "Scatters")

    @staticmethod
    def of(instructions: tuple[Instruction, ...]) -> InstructionMix:
        families = Counter(i.family for i in instructions if i.family != "NOP")

        def count(kinds: frozenset[str]) -> int:
            return sum(families[k] for k in kinds)

        widths = Counter(i.width_bits for i in instructions if i.family in GLOBAL_LOADS | SHARED_LOADS)
        return InstructionMix(
            instructions=sum(families.values()),
            fp32_fma=count(FP32_FMA),
            fma=count(FMA),
            shared_loads=count(SHARED_LOADS),
            shared_stores=count(SHARED_STORES),
            global_loads=count(GLOBAL_LOADS),
            global_stores=count(GLOBAL_STORES),
            async_copies=count(ASYNC_COPIES),
            local_accesses=count(LOCAL),
            barriers=count(BARRIERS),
            atomics=count(ATOMICS),
            load_widths=tuple(sorted(widths.items())),
            global_load_widths=tuple(
                sorted(
                    Counter(
                        i.width_bits for i in instructions if i.family in GLOBAL_LOADS | ASYNC_COPIES
                    ).items()
                )
            ),
        )

    @property
    def fma_share(self) -> float:
        """FMAs per issued instruction (0 for an empty sequence)."""
        return self.fma / self.instructions if self.instructions else 0.0

    @property
    def fma_per_shared_load(self) -> float | None:
        """FMAs per shared-memory load instruction; None when there is no shared load."""
        return self.fma / self.shared_loads if self.shared_loads else None

    @property
    def widest_load_bits(self) -> int:
        """The widest global or shared load (0 when there is none)."""
        return max((bits for bits, _ in self.load_widths), default=0)


def parse_sass(text: str) -> dict[str, tuple[Instruction, ...]]:
    """Every function of ``cuobjdump -sass`` output and its instructions, in address order."""
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for line in text.splitlines():
        if (header := _FUNCTION.match(line)) is not None:
            current = functions.setdefault(header.group("name"), [])
            continue
        if current is not None and (found := _INSTRUCTION.match(line)) is not None:
            current.append(
                Instruction(
                    address=int(found.group("address"), 16),
                    opcode=found.group("opcode"),
                    operands=found.group("operands").strip(),
                    guard=(found.group("guard") or "").strip(),
                )
            )
    return {name: tuple(body) for name, body in functions.items()}


def parse_line_info(text: str) -> dict[str, dict[int, int]]:
    """Every function of ``nvdisasm -g`` output: the source line of each instruction address
    (an instruction follows the last ``//## File "...", line N`` comment before it)."""
    functions: dict[str, dict[int, int]] = {}
    current: dict[int, int] | None = None
    line = 0
    for text_line in text.splitlines():
        if (section := _LINE_SECTION.match(text_line)) is not None:
            current = functions.setdefault(section.group("name"), {})
            line = 0
            continue
        if (where := _LINE_COMMENT.match(text_line)) is not None:
            line = int(where.group("line"))
            continue
        if current is not None and (found := _INSTRUCTION.match(text_line)) is not None:
            current[int(found.group("address"), 16)] = line
    return functions


def parse_resources(text: str) -> dict[str, Resources]:
    """Every function of ``cuobjdump -res-usage`` output and its resources."""
    resources: dict[str, Resources] = {}
    name: str | None = None
    for line in text.splitlines():
        if (header := _RESOURCE_FUNCTION.match(line)) is not None:
            name = header.group("name")
            continue
        if name is not None and "REG:" in line:
            fields = {m.group("key"): int(m.group("value")) for m in _RESOURCE_FIELD.finditer(line)}
            resources[name] = Resources(
                registers=fields.get("REG", 0),
                stack=fields.get("STACK", 0),
                shared=fields.get("SHARED", 0),
                local=fields.get("LOCAL", 0),
                constant=fields.get("CONSTANT[0]", 0),
            )
            name = None
    return resources


def loops(instructions: tuple[Instruction, ...]) -> tuple[Loop, ...]:
    """The loops of a function (backward branches), each with its nesting depth."""
    # A branch to itself is where a thread parks after EXIT (``BRA 0x...`` at the end of every
    # function), not a loop of the program. Several back edges to one head (a ``continue``) are
    # one loop, up to the last of them.
    ends: dict[int, int] = {}
    for i in instructions:
        if (target := i.branch_target) is not None and target < i.address:
            ends[target] = max(ends.get(target, i.address), i.address)
    spans = sorted(ends.items())
    return tuple(
        Loop(start, end, sum(1 for s, e in spans if (s, e) != (start, end) and s <= start and end <= e))
        for start, end in spans
    )


def innermost_loops(instructions: tuple[Instruction, ...]) -> tuple[Loop, ...]:
    """The loops that hold no other loop."""
    found = loops(instructions)
    return tuple(
        loop
        for loop in found
        if not any(o != loop and loop.start <= o.start and o.end <= loop.end for o in found)
    )


def hot_loop(instructions: tuple[Instruction, ...], within: frozenset[int] | None = None) -> Loop | None:
    """The innermost, deepest loop; ties go to the most FMAs, then the shortest span. Where a
    kernel's code comes in two copies (``schedule.kernel.splits_full_blocks``), ``within``
    holds the addresses of the copy for full blocks, which all blocks but the edges run: the
    hot loop is then one of the loops most of whose instructions are there (when any is;
    the edge copy's loop may do an FMA more, peeled differently by the compiler)."""
    innermost = innermost_loops(instructions)
    if within is not None:
        innermost = (
            tuple(loop for loop in innermost if mostly_within(instructions, loop, within)) or innermost
        )
    if not innermost:
        return None

    def rank(loop: Loop) -> tuple[int, int, int]:
        body = [i for i in instructions if loop.holds(i.address)]
        return loop.depth, sum(1 for i in body if i.family in FMA), loop.start - loop.end

    return max(innermost, key=rank)


def mostly_within(instructions: tuple[Instruction, ...], loop: Loop, within: frozenset[int]) -> bool:
    """Whether most of ``loop``'s instructions are at the addresses ``within``."""
    return 2 * sum(1 for a in within if loop.holds(a)) > len(body(instructions, loop))


def body(instructions: tuple[Instruction, ...], loop: Loop) -> tuple[Instruction, ...]:
    """The instructions inside ``loop``'s span."""
    return tuple(i for i in instructions if loop.holds(i.address))
