"""The isl proof of a concrete mapping: correct mappings pass, broken ones are rejected.

Every mapping is written by hand (``mapped`` below) and every expected witness is derived
by hand in the comment next to it from the hardware model of ``polymap.prove``:
loop j reads ``g = blockIdx[block_axis]``, ``t = threadIdx[thread_axis]`` and computes
``i = g*T*S + s*T + t`` (cyclic) or ``i = g*T*S + t*S + s`` (blocked); a witness is the
lexicographically smallest failing point, sizes first, then the hardware coordinates
(blockIdx x, y, z, threadIdx x, y, z, s per loop, ...).
"""

from __future__ import annotations

import dataclasses
import re

import islpy as isl
import pytest

import polymap
import polymap.prove as verify_module
from polymap.errors import MappingError, VerificationError
from polymap.ir.nodes import Program
from polymap.ir.parse import parse
from polymap.mapping.result import Mapping
from polymap.mapping.space import Axis, Distribution, Kernel, KernelMapping, LoopMapping, kernels
from polymap.poly.deps import Dependence, Dependences, DepKind
from polymap.poly.model import analyze
from polymap.prove import VerificationReport, verify
from polymap.targets import get_target

MATMUL_INIT = """
param M, N, K
in  A: f32[M, K]
in  B: f32[K, N]
out C: f32[M, N]
par M i {
  par N j {
    C[i, j] = 0
    seq K k {
      C[i, j] += A[i, k] * B[k, j]
    }
  }
}
"""

TRIANGULAR = """
param N, M
in    A: f32[N, M]
inout C: f32[N, N]
par N i {
  par i + 1 j {
    C[i, j] *= 2
    seq M k {
      C[i, j] += A[i, k] * A[j, k]
    }
  }
}
"""

COPY = """
param N
in  A: f32[N]
out B: f32[N]
par N i { B[i] = A[i] }
"""

JACOBI = """
param T, N
inout A: f32[N]
inout B: f32[N]
seq T t {
  par N - 2 i {
    B[i + 1] = 0.33333 * (A[i] + A[i + 1] + A[i + 2])
  }
  par N - 2 i {
    A[i + 1] = 0.33333 * (B[i] + B[i + 1] + B[i + 2])
  }
}
"""

SOFTMAX = """
param M, N
in  X: f32[M, N]
out Y: f32[M, N]
par M i {
  new mx: f32
  new sum: f32
  mx = X[i, 0]
  seq N j {
    mx max= X[i, j]
  }
  sum = 0
  seq N j {
    Y[i, j] = exp(X[i, j] - mx)
    sum += Y[i, j]
  }
  par N j {
    Y[i, j] = Y[i, j] / sum
  }
}
"""

SERIAL = """
param N
in  A: f32[N]
out B: f32[N]
out total: f32
total = 0
par N i { B[i] = 2 * A[i] }
seq N i { total += B[i] }
"""

# X[8i + j] with j < 8 is a bijection onto X[0..31]; X has 40 elements so that the extra
# points an unguarded j runs (j < 16) stay in bounds and meet other threads' elements.
OVERLAP = """
out X: f32[40]
par 4 i { par 8 j { X[8 * i + j] = 1 } }
"""


def mapped(kernel: Kernel, spec: dict[str, dict]) -> KernelMapping:
    """A KernelMapping from ``{index: {"t": "x", "b": "x", "T": 32, "S": 1, "dist":
    "cyclic", "max": 48, "guard": True}}`` (t, b, S, dist, guard optional)."""
    loops = []
    for loop in kernel.band:
        d = spec[loop.index]
        loops.append(
            LoopMapping(
                loop.index,
                Axis(d.get("t", "x")),
                Axis(d.get("b", d.get("t", "x"))),
                d["T"],
                d.get("S", 1),
                Distribution(d.get("dist", "cyclic")),
                loop.extent,
                d["max"],
                d.get("guard", True),
            )
        )
    return KernelMapping(kernel, tuple(loops))


def mapping(program: Program, spec: dict[str, dict]) -> tuple[KernelMapping, ...]:
    """The same spec (by loop index) for every kernel of the program."""
    return tuple(mapped(k, spec) for k in kernels(program))


def rejects(program: Program, kms, pattern: str, **kwargs) -> str:
    with pytest.raises(VerificationError) as info:
        verify(program, kms, **kwargs)
    message = str(info.value)
    assert re.search(pattern, message), message
    return message


# ----------------------------------------------------------------- correct mappings


MATMUL_SPEC = {
    # i: 64 rows on y, 4 threads x 2 points blocked -> 64 / 8 = 8 blocks
    "i": {"t": "y", "T": 4, "S": 2, "dist": "blocked", "max": 64},
    # j: 48 columns on x, 32 threads -> ceil(48 / 32) = 2 blocks, guarded
    "j": {"t": "x", "T": 32, "max": 48},
}


def test_matmul_with_init_verifies_and_lists_its_obligations():
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    report = verify(program, mapping(program, MATMUL_SPEC))
    assert isinstance(report, VerificationReport) and not report.parametric
    lines = report.lines()
    assert lines[0].startswith("kernel0: grid (2, 8, 1) x block (32x4x1);")
    for line in (
        "kernel0: every access of S0 in bounds",
        "kernel0: every access of S1 in bounds",
        "kernel0: no race between threads on C",
        "kernel0: every instance of S0 executed exactly once",
        "kernel0: every instance of S1 executed exactly once",
        # C[i, j] = 0 before C[i, j] += ...: same (i, j), so same thread, body order.
        "kernel0: flow dependence S0 -> S1 on C kept in one thread, source first",
        "kernel0: output dependence S1 -> S1 on C kept in one thread, source first",
    ):
        assert line in lines
    assert report.launch_order == ()  # one kernel, no host loop
    assert str(report) == "\n".join(lines)


def test_a_mapping_object_is_accepted():
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    kms = mapping(program, MATMUL_SPEC)
    result = Mapping(program, get_target("h100"), kms, (), (), ())
    assert verify(program, result).lines() == verify(program, kms).lines()


@pytest.mark.parametrize(
    "j",
    [
        {"T": 32, "max": 40},  # 2 blocks of 32 cover j < 64 >= 40, guarded
        {"T": 8, "S": 2, "dist": "blocked", "max": 40},  # ceil(40 / 16) = 3 blocks
        {"T": 4, "S": 4, "dist": "cyclic", "max": 40},
    ],
)
def test_triangular_nest_verifies(j):
    program = parse(TRIANGULAR).bind(N=40, M=4)
    verify(program, mapping(program, {"i": {"t": "y", "T": 8, "max": 40}, "j": j}))


@pytest.mark.parametrize("dist", ["cyclic", "blocked"])
def test_cyclic_and_blocked_with_four_points_per_thread(dist):
    # N = 100, T = 8, S = 4: ceil(100 / 32) = 4 blocks cover i < 128, guarded.
    program = parse(COPY).bind(N=100)
    report = verify(program, mapping(program, {"i": {"T": 8, "S": 4, "dist": dist, "max": 100}}))
    assert report.lines()[0].startswith("kernel0: grid (4, 1, 1) x block (8x1x1)")


def test_non_divisible_size_with_guard_verifies():
    program = parse(COPY).bind(N=37)
    report = verify(program, mapping(program, {"i": {"T": 32, "max": 37}}))
    assert report.lines()[0].startswith("kernel0: grid (2, 1, 1)")  # ceil(37 / 32)
    assert "kernel0: every instance of S0 executed exactly once" in report.lines()


def test_time_loop_with_two_kernels_verifies_launch_order():
    program = parse(JACOBI).bind(T=3, N=40)
    report = verify(program, mapping(program, {"i": {"T": 32, "max": 38}}))
    # Within one t, kernel0 writes B and kernel1 reads it; kernel1 writes A, read by kernel0
    # of the next t: both go forward in (t, kernel) order.
    assert (
        "launch order: flow dependence S0 -> S1 on B from kernel0 to kernel1 keeps the source's launch first"
        in report.lines()
    )
    assert (
        "launch order: flow dependence S1 -> S0 on A from kernel1 to kernel0 keeps the source's launch first"
        in report.lines()
    )
    assert [k.kernel for k in report.kernels] == ["kernel0", "kernel1"]


def test_softmax_with_block_local_buffers_and_inner_loops_verifies():
    program = parse(SOFTMAX).bind(M=8, N=16)
    report = verify(program, mapping(program, {"i": {"T": 4, "S": 2, "dist": "blocked", "max": 8}}))
    lines = report.lines()
    # mx and sum are private per row (expanded by i), so threads never share them.
    assert "kernel0: no race between threads on mx" in lines
    assert "kernel0: no race between threads on sum" in lines
    # mx = X[i, 0], then the seq j loop updates it, in the same thread.
    assert "kernel0: flow dependence S0 -> S1 on mx kept in one thread, source first" in lines
    # The inner par j loop (S5) runs inside the thread, after the sum (S4).
    assert "kernel0: flow dependence S4 -> S5 on sum kept in one thread, source first" in lines
    assert "kernel0: every instance of S5 executed exactly once" in lines


def test_serial_kernels_run_as_one_thread():
    program = parse(SERIAL).bind(N=37)
    kms = mapping(program, {"i": {"T": 32, "max": 37}})
    assert [k.kernel.indices for k in kms] == [(), ("i",), ()]
    lines = verify(program, kms).lines()
    assert "kernel0: serial kernel, one thread" in lines
    assert "kernel0: every instance of S0 executed exactly once" in lines
    assert "kernel2: flow dependence S2 -> S2 on total kept in one thread, source first" in lines
    assert (
        "launch order: flow dependence S1 -> S2 on B from kernel1 to kernel2 keeps the source's launch first"
        in lines
    )
    # kernel0 (total = 0) and kernel1 (B = 2A) share no buffer: either order is correct.
    verify(program, (kms[1], kms[0], kms[2]))


def test_symbolic_sizes_use_a_parametric_grid():
    program = parse(COPY)
    report = verify(program, mapping(program, {"i": {"T": 32, "max": 1}}))  # max ignored
    assert report.parametric
    assert report.lines()[0].startswith("kernel0: grid (ceil(max(N) / 32), 1, 1)")
    # Without a guard it is correct exactly when 32 divides N.
    unguarded = mapping(program, {"i": {"T": 32, "max": 1, "guard": False}})
    verify(program, unguarded, context="N mod 32 = 0")


@pytest.mark.parametrize(
    "text, spec",
    [
        (TRIANGULAR, {"i": {"t": "y", "T": 8, "max": 1}, "j": {"T": 32, "max": 1}}),
        (JACOBI, {"i": {"T": 32, "max": 1}}),
        (SOFTMAX, {"i": {"T": 4, "S": 2, "dist": "blocked", "max": 1}}),
        (MATMUL_INIT, MATMUL_SPEC),
    ],
)
def test_symbolic_programs_verify(text, spec):
    program = parse(text)
    assert verify(program, mapping(program, spec)).parametric


# ------------------------------------------------------------------ broken mappings


def test_missing_iterations_are_rejected():
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    # j: max_extent 32 -> 1 block of 32 threads covers j < 32; (0, 32) is the first miss.
    spec = {**MATMUL_SPEC, "j": {"T": 32, "max": 32}}
    message = rejects(
        program,
        mapping(program, spec),
        r"kernel0: S0 `C\[i, j\] = 0`: instance S0\[i = 0, j = 32\] is never run",
    )
    assert "loop 'j' (extent 48) on gridDim.x = 1 x blockDim.x = 32 x seq 1, max_extent 32" in message


def test_blocked_grid_too_small_is_rejected():
    # T = 8, S = 4, max_extent 90 -> ceil(90 / 32) = 3 blocks cover i < 96 of 100.
    program = parse(COPY).bind(N=100)
    kms = mapping(program, {"i": {"T": 8, "S": 4, "dist": "blocked", "max": 90}})
    rejects(program, kms, r"instance S0\[i = 96\] is never run")


def test_softmax_rows_missing_are_rejected():
    # T = 2, S = 2, max_extent 4 -> 1 block covers rows i < 4 of 8: S0 (mx = X[i, 0]) at i = 4.
    program = parse(SOFTMAX).bind(M=8, N=16)
    kms = mapping(program, {"i": {"T": 2, "S": 2, "max": 4}})
    rejects(program, kms, r"instance S0\[i = 4\] is never run")


def test_two_loops_on_one_thread_axis_are_rejected():
    # i = 32 by + tx and j = 32 bx + tx share tx, so only i = j (mod 32) runs: refused by
    # shape, before isl (which took minutes to find a missed instance with symbolic sizes and
    # a grouped loop: the review's reproduction, below)
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    spec = {"i": {"t": "x", "b": "y", "T": 32, "max": 64}, "j": {"t": "x", "b": "x", "T": 32, "max": 48}}
    rejects(program, mapping(program, spec), r"loops 'i' and 'j' are both on threadIdx\.x")
    spec = {"i": {"t": "x", "b": "y", "T": 32, "max": 64}, "j": {"t": "y", "b": "y", "T": 2, "max": 48}}
    rejects(program, mapping(program, spec), r"loops 'i' and 'j' are both on blockIdx\.y")
    symbolic = parse(
        "param N\nparam M\nin x: f32[N, M]\nout y: f32[N, M]\npar N i { par M j { y[i, j] = x[i, j] + 1 } }"
    )
    found = polymap.optimize(symbolic)
    km = found.kernels[0]
    li, lj = km.loops
    loops = (
        LoopMapping("i", Axis.X, Axis.X, 32, 4, Distribution.GROUPED, li.extent, li.max_extent, group=2),
        LoopMapping("j", Axis.X, Axis.Y, 32, 4, Distribution.GROUPED, lj.extent, lj.max_extent, group=2),
    )
    with pytest.raises(VerificationError, match=r"both on threadIdx\.x"):
        polymap.compile(symbolic, dataclasses.replace(found, kernels=(dataclasses.replace(km, loops=loops),)))


def test_missing_guard_out_of_bounds_is_rejected():
    # N = 37, 2 blocks of 32: the first overshoot is blockIdx.x = 1, threadIdx.x = 5 (i = 37).
    program = parse(COPY).bind(N=37)
    kms = mapping(program, {"i": {"T": 32, "max": 37, "guard": False}})
    rejects(
        program,
        kms,
        r"kernel0: S0 `B\[i\] = A\[i\]` writes B\[i\] outside the shape of `out B: f32\[37\]`; "
        r"e\.g\. blockIdx\.x = 1, threadIdx\.x = 5 runs S0\[i = 37\], which writes B\[37\], outside "
        r"B's shape \[37\] \(loop 'i' without a guard\)",
    )


@pytest.mark.parametrize(
    "dist, witness",
    [
        # cyclic i = 32 g + 8 s + t: block 3 starts at 96; with t = 0, s = 1 gives 104 >= 100.
        ("cyclic", r"blockIdx\.x = 3, threadIdx\.x = 0, s_i = 1 runs S0\[i = 104\]"),
        # blocked i = 32 g + 4 t + s: with t = 0 block 3 reaches 99; t = 1, s = 0 gives 100.
        ("blocked", r"blockIdx\.x = 3, threadIdx\.x = 1, s_i = 0 runs S0\[i = 100\]"),
    ],
)
def test_missing_guard_witness_follows_the_distribution(dist, witness):
    program = parse(COPY).bind(N=100)
    kms = mapping(program, {"i": {"T": 8, "S": 4, "dist": dist, "max": 100, "guard": False}})
    rejects(program, kms, witness)


def test_missing_guard_with_symbolic_size_is_rejected():
    # Smallest size first: N = 1, and already threadIdx.x = 1 (i = 1) is outside.
    program = parse(COPY)
    kms = mapping(program, {"i": {"T": 32, "max": 1, "guard": False}})
    rejects(
        program, kms, r"with N = 1: blockIdx\.x = 0, threadIdx\.x = 1 runs S0\[i = 1\], which writes B\[1\]"
    )


def test_missing_guard_on_triangle_out_of_bounds():
    # j on 2 blocks of 32 without guard: first j >= 40 is blockIdx.x = 1, threadIdx.x = 8, i = 0.
    program = parse(TRIANGULAR).bind(N=40, M=4)
    kms = mapping(program, {"i": {"t": "y", "T": 8, "max": 40}, "j": {"T": 32, "max": 40, "guard": False}})
    rejects(program, kms, r"runs S0\[i = 0, j = 40\], which writes C\[0, 40\], outside C's shape \[40, 40\]")


def test_missing_guard_on_triangle_extra_instances():
    # j on 5 blocks of 8 = 40 exactly: in bounds, but j runs past i + 1; the first such
    # point is threadIdx.x = 1 with i = 0 (j = 1 > i).
    program = parse(TRIANGULAR).bind(N=40, M=4)
    kms = mapping(program, {"i": {"t": "y", "T": 8, "max": 40}, "j": {"T": 8, "max": 40, "guard": False}})
    rejects(
        program,
        kms,
        r"kernel0: S0 `C\[i, j\] \*= 2` is run outside its domain; e\.g\. blockIdx\.x = 0, blockIdx\.y = 0, "
        r"threadIdx\.x = 1, threadIdx\.y = 0 runs S0\[i = 0, j = 1\], which is not an instance of S0",
    )


def test_race_between_threads_is_rejected():
    # j runs 16 points without a guard: thread (tx 8, ty 0) runs (i 0, j 8) -> X[8], which
    # thread (tx 0, ty 1) writes as (i 1, j 0). Smallest first thread: tx 0, ty 1.
    program = parse(OVERLAP)
    kms = mapping(
        program, {"i": {"t": "y", "T": 4, "max": 4}, "j": {"t": "x", "T": 16, "max": 8, "guard": False}}
    )
    rejects(
        program,
        kms,
        r"kernel0: race between threads: S0 `X\[8 \* i \+ j\] = 1` writes X\[8 \* i \+ j\] in two threads at "
        r"once; e\.g\. thread \(blockIdx\.x = 0, blockIdx\.y = 0, threadIdx\.x = 0, threadIdx\.y = 1\) runs "
        r"S0\[i = 1, j = 0\] and writes X\[8\], thread \(blockIdx\.x = 0, blockIdx\.y = 0, threadIdx\.x = 8, "
        r"threadIdx\.y = 0\) runs S0\[i = 0, j = 8\] and writes X\[8\] \(S0\[i = 0, j = 8\] is outside S0's "
        r"domain: j >= 8\)",
    )


# Within one launch, a dependence of the program can never cross threads or run backwards in
# a thread: analyze proves every band loop race free, so two instances in different band
# iterations never touch one element, and one band iteration runs in one thread in the
# body's own order. Nothing in the decision space (axes, T, S, distribution, guard) changes
# that, so the launch-order check is tested with swapped kernels, and the in-launch checks
# with dependences injected into the model (ones the program does not have).


def test_swapped_kernels_break_the_launch_order():
    program = parse(JACOBI).bind(T=3, N=40)
    kms = mapping(program, {"i": {"T": 32, "max": 38}})
    # S0[t = 0, i = 0] writes B[1]; S1[t = 0, i = 0] reads B[1] but now launches first.
    rejects(
        program,
        kms[::-1],
        r"launch order breaks flow dependence S0 -> S1 on B: the sink runs in an earlier launch than the "
        r"source; e\.g\. S0\[t = 0, i = 0\] runs in kernel0 at t = 0 and S1\[t = 0, i = 0\] in kernel1 at t = 0",
    )


def test_swapped_serial_kernel_breaks_the_launch_order():
    program = parse(SERIAL).bind(N=37)
    kms = mapping(program, {"i": {"T": 32, "max": 37}})
    rejects(
        program,
        (kms[0], kms[2], kms[1]),
        r"launch order breaks flow dependence S1 -> S2 on B: .*S1\[i = 0\] runs in kernel1",
    )


def _with_dependence(monkeypatch, program: Program, source: str, sink: str, relation: str) -> None:
    """Make verify see one more (fake) flow dependence on C in the model of ``program``."""
    model = analyze(program)
    dep = Dependence(DepKind.FLOW, source, sink, "C", isl.Map(relation))
    deps = Dependences(model.dependences.flow, model.dependences.anti, model.dependences.output, (dep,))
    fake = dataclasses.replace(model, dependences=deps)
    monkeypatch.setattr(verify_module, "analyze", lambda program, context=None: fake)


def test_thread_order_check_catches_a_sink_before_its_source(monkeypatch):
    # S1 (the += at k = 0) runs after S0 (C = 0) of the same (i, j): S1 -> S0 goes back.
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    rel = "{ S1[i, j, k] -> S0[i, j] : 0 <= i < 64 and 0 <= j < 48 and k = 0 }"
    _with_dependence(monkeypatch, program, "S1", "S0", rel)
    rejects(
        program,
        mapping(program, MATMUL_SPEC),
        r"kernel0: flow dependence S1 -> S0 on C is broken: the mapping runs the sink no later than the source "
        r"in its thread; e\.g\. S1\[i = 0, j = 0, k = 0\] on .* and S0\[i = 0, j = 0\]",
    )


def test_thread_order_check_catches_a_dependence_across_threads(monkeypatch):
    # S0[i, j] -> S0[i, j + 1]: neighbouring columns sit on neighbouring threadIdx.x; i = 0
    # is thread y 0, point s_i 0 (blocked, S = 2).
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    rel = "{ S0[i, j] -> S0[i, j + 1] : 0 <= i < 64 and 0 <= j < 47 }"
    _with_dependence(monkeypatch, program, "S0", "S0", rel)
    rejects(
        program,
        mapping(program, MATMUL_SPEC),
        r"flow dependence S0 -> S0 on C is broken: the mapping runs them in different threads of one launch; "
        r"e\.g\. S0\[i = 0, j = 0\] on \(blockIdx\.x = 0, blockIdx\.y = 0, threadIdx\.x = 0, threadIdx\.y = 0, "
        r"s_i = 0\) and S0\[i = 0, j = 1\] on \(blockIdx\.x = 0, blockIdx\.y = 0, threadIdx\.x = 1, threadIdx\.y = 0, "
        r"s_i = 0\)",
    )


# ------------------------------------------------------------------ malformed mappings


def test_an_unmapped_kernel_is_rejected():
    program = parse(SERIAL).bind(N=37)
    kms = mapping(program, {"i": {"T": 32, "max": 37}})
    rejects(program, kms[:2], r"kernel2 of program '.*' is not mapped")


def test_interleaving_host_loop_kernels_is_rejected():
    text = JACOBI.replace("seq T t {", "par N i { B[i] = A[i] }\nseq T t {")
    program = parse(text).bind(T=2, N=40)
    kms = mapping(program, {"i": {"T": 32, "max": 40}})
    rejects(program, (kms[1], kms[0], kms[2]), r"kernels inside host loop 't' must be listed together")


def test_loop_mappings_must_follow_the_band():
    program = parse(MATMUL_INIT).bind(M=64, N=48, K=8)
    (km,) = mapping(program, MATMUL_SPEC)
    rejects(
        program,
        (dataclasses.replace(km, loops=km.loops[::-1]),),
        r"gives loops \(j, i\) but the band is \(i, j\)",
    )
    bad = dataclasses.replace(km.loops[0], seq=0)
    rejects(
        program, (dataclasses.replace(km, loops=(bad, km.loops[1])),), r"loop 'i': seq must be >= 1, got 0"
    )


def test_verification_error_is_a_mapping_error():
    assert issubclass(VerificationError, MappingError)
