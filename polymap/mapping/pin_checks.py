"""Pins checked before SCIP runs: each names a loop the model decides and a decision that
loop can take (a seq loop's tile and staging, a par loop's threads, lanes and distribution),
so that a pin which would be ignored, or which SCIP could only call infeasible, is refused
by name with what it may be instead."""

from __future__ import annotations

from typing import TYPE_CHECKING

from polymap.errors import ArgumentError
from polymap.ir.nodes import Program
from polymap.mapping.cost_model import MAX_LOG_SEQ, interleavable, log2_floor
from polymap.mapping.space import WARP_LANES, Distribution, Kernel, LoopPin, Pins
from polymap.mapping.staging import ASYNC_ELEMENT_BYTES, scope_loops, stage_candidates

if TYPE_CHECKING:
    from polymap.mapping.solve import KernelProblem


def check_pin_keys(pins: Pins, all_kernels: tuple[Kernel, ...], program: Program | None) -> None:
    """Every pin names a loop the model decides; a ``stage`` pin names buffers that can be
    staged over that loop (``program``: the bound program, None when staging is off)."""
    band = {i for k in all_kernels for i in k.indices} | {
        f"{k.name}.{i}" for k in all_kernels for i in k.indices
    }
    tiled = {loop.index for k in all_kernels for loop in scope_loops(k)}
    tiled |= {f"{k.name}.{loop.index}" for k in all_kernels for loop in scope_loops(k)}
    for key, pin in pins.by_key:
        fields = {name for name, _ in pin.items()}
        seq_fields = {"tile", "stage", "transpose", "copy", "slots"}
        if key in tiled and key not in band:
            if fields - seq_fields:
                raise ArgumentError(
                    f"pin '{key}': '{key}' is a seq loop of a thread's body; only its 'tile', 'stage', "
                    f"'transpose', 'copy' and 'slots' can be pinned, not {', '.join(sorted(fields - seq_fields))}"
                )
            continue
        if key not in band:
            loops = ", ".join(sorted(band)) or "none"
            seqs = ", ".join(sorted(tiled)) or "none"
            raise ArgumentError(
                f"pin '{key}' names no par loop mapped to the GPU (band loops: {loops}) and no seq loop "
                f"that can be tiled (tileable loops: {seqs})"
            )
        if fields & seq_fields:
            raise ArgumentError(
                f"pin '{key}': 'tile', 'stage', 'transpose', 'copy' and 'slots' apply to a seq loop, '{key}' is a "
                "par loop"
            )
    check_stage_pins(pins, all_kernels, program)
    check_group_pins(pins)
    check_interleave_pins(pins, all_kernels)


def check_lane_pins(pins: Pins, problem: KernelProblem) -> None:
    """A ``lanes`` pin is 1, the warp or a power of two of warps that a block holds, and more
    than 1 only where the kernel has a loop its lanes may run together (``lanes.py``)."""
    t, kernel = problem.target, problem.kernel
    warp, most = t.warp_size, 2 ** log2_floor(t.max_threads_per_block)
    for key, pin in pins.by_key:
        if pin.lanes is None or not any(key in (i, f"{kernel.name}.{i}") for i in kernel.indices):
            continue
        if pin.lanes > 1 and warp != WARP_LANES:
            raise ArgumentError(
                f"pin '{key}': lanes={pin.lanes}, but the lanes' code is written for warps of {WARP_LANES} lanes "
                f"and {t.name} has warps of {warp}"
            )
        if pin.lanes != 1 and not warp <= pin.lanes <= most:
            raise ArgumentError(
                f"pin '{key}': lanes is 1 (a thread per point), {warp} (a warp per point) or a power of two up "
                f"to {most} (several warps per point, a block each, {t.name}), got {pin.lanes}"
            )
        if pin.lanes > 1 and not problem.spread:
            why = (
                "its band has more than two loops (threadIdx.x would hold the lanes)"
                if len(kernel.band) > 2
                else "no loop of its body qualifies: a loop whose iterations depend on each other only "
                "through accumulators updated by one of += *= max= min=, or through an online sum's "
                "maximum and sums (docs/mapping.md, 'Online sums'); a float += or *= and an online sum "
                "only with reassociation allowed"
            )
            what = "a warp" if pin.lanes == warp else f"{pin.lanes} lanes"
            raise ArgumentError(
                f"pin '{key}': lanes={pin.lanes} asks for {what} per point of {kernel.name}, but {why}"
            )


def check_interleave_pins(pins: Pins, all_kernels: tuple[Kernel, ...]) -> None:
    for key, pin in pins.by_key:
        if not pin.interleave:
            continue
        for kernel in all_kernels:
            if not interleavable(kernel) and any(key in (i, f"{kernel.name}.{i}") for i in kernel.indices):
                raise ArgumentError(
                    f"pin '{key}': interleave=True interleaves a thread's points in the steps of a loop of "
                    f"the body, and {kernel.name}'s body has no loop (its points' statements are unrolled "
                    "and independent in either order)"
                )


def check_stage_pins(pins: Pins, all_kernels: tuple[Kernel, ...], program: Program | None) -> None:
    """A staged (or transposed) buffer that is not a candidate of any loop the pin names
    would be ignored; so would a transposed one that is not staged or whose tile cannot be
    transposed (``StageCandidate.transposable``)."""
    for key, pin in pins.by_key:
        for decision, named in (("stage", pin.stage), ("transpose", pin.transpose)):
            if not named:
                continue
            if program is None:
                raise ArgumentError(
                    f"pin '{key}': {decision}={list(named)} asks for shared memory, but staging is off "
                    "(staging=False)"
                )
            candidates = []
            for kernel in all_kernels:
                loops = {loop.index for loop in scope_loops(kernel)}
                here = {i for i in loops if key in (i, f"{kernel.name}.{i}")}
                candidates += [c for c in stage_candidates(kernel, program) if c.loop in here]
            allowed = {c.buffer for c in candidates if decision == "stage" or c.transposable}
            unknown = [b for b in named if b not in allowed]
            if unknown:
                names = {b.name for b in program.buffers}
                what = ", ".join(f"'{b}'" + ("" if b in names else " (no such buffer)") for b in unknown)
                verb = "staged" if decision == "stage" else "staged with a tile that can be transposed"
                raise ArgumentError(
                    f"pin '{key}': {decision} names {what}, which cannot be {verb} over loop '{key}'; the "
                    f"buffers that can: {', '.join(sorted(allowed)) or 'none'}"
                )
        if pin.slots == 2:
            check_double_buffer_pin(key, pin, all_kernels, program)
        if pin.transpose and pin.stage is not None:
            unstaged = [b for b in pin.transpose if b not in pin.stage]
            if unstaged:
                raise ArgumentError(
                    f"pin '{key}': transpose names {', '.join(map(repr, unstaged))}, which the same pin "
                    f"does not stage (stage={list(pin.stage)})"
                )


def check_double_buffer_pin(key: str, pin, all_kernels: tuple[Kernel, ...], program: Program | None) -> None:
    """``slots=2`` double-buffers the tiles of a tiled loop: the loop must have buffers that
    can be staged, of 4- or 8-byte elements (``staging.ASYNC_ELEMENT_BYTES``) where the pin
    names them; else the pin would be ignored, or SCIP would find nothing that fits it."""
    if program is None:
        raise ArgumentError(
            f"pin '{key}': slots=2 asks for double-buffered tiles, but staging is off (staging=False)"
        )
    candidates = []
    for kernel in all_kernels:
        here = {
            loop.index for loop in scope_loops(kernel) if key in (loop.index, f"{kernel.name}.{loop.index}")
        }
        candidates += [c for c in stage_candidates(kernel, program) if c.loop in here]
    asynchronous = [c.buffer for c in candidates if c.element_bytes in ASYNC_ELEMENT_BYTES]
    if pin.stage is not None:
        small = [b for b in pin.stage if b not in asynchronous]
        if small or not pin.stage:
            raise ArgumentError(
                f"pin '{key}': slots=2 double-buffers the staged tiles, copied with cp.async, which moves 4- or "
                f"8-byte elements; stage={list(pin.stage)} "
                + (f"names {', '.join(map(repr, small))}" if small else "stages nothing")
            )
    if not asynchronous:
        raise ArgumentError(
            f"pin '{key}': slots=2 asks for double-buffered tiles over loop '{key}', but no buffer of 4- or "
            f"8-byte elements can be staged there (stageable: {', '.join(sorted({c.buffer for c in candidates})) or 'none'})"
        )


def check_group_pins(pins: Pins) -> None:
    """A pin whose group, distribution and seq contradict each other is refused by name."""
    for key, pin in pins.by_key:
        why = group_contradiction(pin)
        if why is not None:
            raise ArgumentError(f"pin '{key}': {why}")


def group_contradiction(pin: LoopPin) -> str | None:
    """What makes a pin's ``group``, ``distribution`` and ``seq`` contradict each other
    (``space.py``: the group is 1 for cyclic, S for blocked, strictly between for grouped),
    or None; said before SCIP runs rather than as an infeasible model."""
    group, seq, dist = pin.group, pin.seq, pin.distribution
    most = 2**MAX_LOG_SEQ
    if group is not None and group > most:
        return f"group={group} is more than a thread's {most} points at most"
    if seq is not None and group is not None and group > seq:
        return f"group={group} is more than the loop's seq={seq} points"
    if dist is Distribution.GROUPED:
        if seq is not None and seq < 4:
            return f"distribution=grouped needs seq >= 4 (a group strictly between 1 and S), got seq={seq}"
        if group is not None and (group == 1 or group == seq):
            word = "cyclic" if group == 1 else "blocked"
            return f"distribution=grouped with group={group} is {word}: a group lies strictly between 1 and S"
    if dist is Distribution.CYCLIC and group is not None and group > 1:
        return f"distribution=cyclic has group 1 (neighbouring threads' points), got group={group}"
    if dist is Distribution.BLOCKED and group is not None and seq is not None and group != seq:
        return f"distribution=blocked has group = seq = {seq}, got group={group}"
    return None
