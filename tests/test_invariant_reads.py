"""Loop-invariant reads loaded once before their loop (polymap.transform.invariant_reads).

Expected programs are written out by hand; expected values come from NumPy formulas or from
the reference executor run on the program as written, never from the pass.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import polymap
from polymap.ir.nodes import Program
from polymap.ir.parse import load, parse
from polymap.ir.printer import format_program
from polymap.mapping.cost_model import REGISTERS_PER_BUFFER, REGISTERS_PER_STAGED, REGISTERS_THREAD
from polymap.mapping.solve import held_values
from polymap.mapping.space import kernels
from polymap.poly.model import analyze
from polymap.reference import reference
from polymap.transform.invariant_reads import hold_invariant_reads

ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(20261129)


def te(text: str, name: str = "t") -> Program:
    return parse(textwrap.dedent(text), name=name)


def body(program: Program) -> str:
    """The printed program's statements: from its first loop on."""
    lines = format_program(program).splitlines()
    first = next(k for k, line in enumerate(lines) if line.startswith(("par ", "seq ")))
    return "\n".join(lines[first:]) + "\n"


DEQUANT = """
param M = 8
param K = 40
param N = 24
in  X:     f32[M, K]
in  W:     u8[K, N]
in  zero:  u8[N]
in  scale: f32[N]
out Y:     f32[M, N]
par M m {
  par N n {
    seq K k {
      Y[m, n] += X[m, k] * ((W[k, n] - zero[n]) * scale[n])
    }
  }
}
"""


def test_dequant_scale_and_zero_are_loaded_once_before_the_k_loop():
    held = hold_invariant_reads(te(DEQUANT))
    assert body(held) == textwrap.dedent(
        """\
        par M m {
          par N n {
            new zero_held: u8
            zero_held = zero[n]
            new scale_held: f32
            scale_held = scale[n]
            seq K k {
              Y[m, n] += X[m, k] * ((W[k, n] - zero_held) * scale_held)
            }
          }
        }
        """
    )


def test_dequant_kernel_on_the_host_equals_the_reference_and_numpy():
    program = te(DEQUANT)
    inputs = {
        "X": RNG.standard_normal((8, 40)).astype(np.float32),
        "W": RNG.integers(0, 256, (40, 24)).astype(np.uint8),
        "zero": RNG.integers(0, 256, 24).astype(np.uint8),
        "scale": RNG.random(24).astype(np.float32),
    }
    kernel = polymap.compile(program)
    assert "zero_held = zero[n]" in format_program(kernel.mapping.program)
    got = kernel.run_host(**inputs)["Y"]
    expected = reference(program, **inputs)["Y"]
    dequant = (inputs["W"].astype(np.float64) - inputs["zero"]) * inputs["scale"]
    np.testing.assert_allclose(expected, inputs["X"].astype(np.float64) @ dequant, rtol=1e-4, atol=1e-4)
    # f32 sums of up to K = 40 terms in two orders: within their rounding, scaled by the terms
    scale = (np.abs(inputs["X"]).astype(np.float64) @ np.abs(dequant)).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * scale)


def test_the_model_charges_the_held_reads_once_per_output_not_per_k():
    """At K = 4096: ``scale[n]`` and ``zero[n]`` held, at most one warp request per output
    element (8 x 24 of them); as written (``registers=False``), every one of the 8 x 24 x 4096
    reads is charged, at best 32 to a request. (The loop is kept whole: in parts across
    blocks, each part would load the elements once.)"""
    program = te(DEQUANT.replace("param K = 40", "param K = 4096"))

    def requests(mapping, buffer: str) -> int:
        cost = mapping.costs[0]
        return sum(a.requests for a in cost.accesses if a.access.split("[")[0] == buffer and not a.is_write)

    whole = {"k": {"split": 1}}  # the loop in one piece (not split across blocks)
    held = polymap.optimize(program, pins=whole)
    written = polymap.optimize(program, registers=False, pins=whole)
    assert "scale_held" in format_program(held.program)
    assert "scale_held" not in format_program(written.program)
    for buffer in ("scale", "zero"):
        assert 0 < requests(held, buffer) <= 8 * 24
        assert requests(written, buffer) >= 8 * 24 * 4096 // 32


def test_a_held_value_takes_a_register_per_point_of_the_loops_it_mentions():
    """Where a thread's points interleave, ``zero_held`` and ``scale_held`` differ only along
    n: the register estimate counts one per n point of the thread (a fragment's count), where
    the accumulator takes one per point (ptxas held matmul_u8_dequant in 109 registers; a
    copy per point estimated 138: docs/benchmarks/2026-11-29-register-estimate.md)."""
    program = te(DEQUANT.replace("param N = 24", "param N = 256"))
    pins = {"m": {"seq": 4, "interleave": True}, "n": {"seq": 2, "threads": 32}, "k": {"split": 1}}
    mapping = polymap.optimize(program, pins=pins)
    km = mapping.kernels[0]
    assert km.interleaved and km.points == 8 and km.staging.buffers == ("X", "W")
    assert held_values(kernels(mapping.program)[0]) == (("n",), ("n",))
    thread = REGISTERS_THREAD + 5 * REGISTERS_PER_BUFFER + 2 * REGISTERS_PER_STAGED  # X W zero scale Y
    locals_ = 3 + 7  # Y_acc, zero_held, scale_held; Y_acc again for each of 7 more points
    held = 2 * (2 - 1)  # zero_held and scale_held again for the second n point only
    fragments = (4 - 1) + (2 - 1)  # X[m, k] per m point, W[k, n] per n point
    assert mapping.costs[0].registers == thread + locals_ + held + fragments


def test_held_values_are_the_locals_set_once_from_global_data():
    """``a`` is set once from ``s``; ``acc`` is set twice; ``b`` is computed from ``acc``,
    which each point holds its own of: only ``a`` is a held value, per point of i."""
    program = te(
        """
        param M = 64
        param K = 64
        in  A: f32[M, K]
        in  s: f32[M]
        out Y: f32[M]
        par M i {
          new a: f32
          a = s[i] * 2
          new acc: f32
          acc = 0
          seq K k { acc += A[i, k] * a }
          new b: f32
          b = acc * a
          Y[i] = b
        }
        """
    )
    assert held_values(kernels(program)[0]) == (("i",),)


def test_a_read_that_moves_with_the_loop_or_a_buffer_the_kernel_writes_stays():
    text = """
    param N = 16
    in  A: f32[N, N]
    inout b: f32[N]
    out y: f32[N]
    par N i {
      seq N k {
        y[i] += A[i, k] * b[i]
      }
      b[i] = 0
    }
    """
    assert hold_invariant_reads(te(text)) == te(text)


def test_a_buffer_another_kernel_writes_is_held():
    """``b`` is written by the first kernel and only read by the second: held there."""
    program = te(
        """
        param N = 16
        in  A: f32[N, N]
        in  c: f32[N]
        new b: f32[N]
        out y: f32[N]
        par N i {
          b[i] = c[i] * 2
        }
        par N i {
          seq N k {
            y[i] += A[i, k] * b[i]
          }
        }
        """
    )
    held = hold_invariant_reads(program)
    assert "b_held = b[i]" in body(held)
    inputs = {
        "A": RNG.standard_normal((16, 16)).astype(np.float32),
        "c": RNG.standard_normal(16).astype(np.float32),
    }
    np.testing.assert_allclose(
        reference(held, **inputs)["y"], inputs["A"].sum(axis=1) * inputs["c"] * 2, rtol=1e-5, atol=1e-5
    )


def test_a_load_out_of_bounds_where_the_loop_is_empty_is_dropped_and_the_others_kept():
    """At i = 0 the k loop runs no iteration: ``A[i - 1]`` before it would read A[-1], so it
    stays in the loop (isl refuses the rewrite), while ``c[i]`` is held."""
    program = te(
        """
        param N = 12
        in  A: f32[N]
        in  B: f32[N]
        in  c: f32[N]
        out y: f32[N]
        par N i {
          seq i k {
            y[i] += A[i - 1] * B[k] * c[i]
          }
        }
        """
    )
    held = hold_invariant_reads(program)
    assert body(held) == textwrap.dedent(
        """\
        par N i {
          new c_held: f32
          c_held = c[i]
          seq i k {
            y[i] += A[i - 1] * B[k] * c_held
          }
        }
        """
    )
    analyze(held)  # proved in bounds
    inputs = {b: RNG.standard_normal(12).astype(np.float32) for b in ("A", "B", "c")}
    kernel = polymap.compile(program)
    np.testing.assert_allclose(
        kernel.run_host(**inputs)["y"], reference(program, **inputs)["y"], rtol=1e-5, atol=1e-5
    )


def test_nested_loops_hold_at_the_outermost_loop_the_element_is_fixed_for():
    program = te(
        """
        param N = 8
        in  A: f32[N, N, N]
        in  d: f32[N]
        in  e: f32[N, N]
        out y: f32[N]
        par N i {
          seq N a {
            seq N b {
              y[i] += A[i, a, b] * d[i] * e[i, a]
            }
          }
        }
        """
    )
    assert body(hold_invariant_reads(program)) == textwrap.dedent(
        """\
        par N i {
          new d_held: f32
          d_held = d[i]
          seq N a {
            new e_held: f32
            e_held = e[i, a]
            seq N b {
              y[i] += A[i, a, b] * d_held * e_held
            }
          }
        }
        """
    )


@pytest.mark.parametrize(
    "loop",
    [
        "y[i] += A[i, I[i]] * x[k]",  # a gathered index: its source is no value
        "anchor A[i, 0]",  # an anchor names its data for staging
        "y[i] += A[i, k] * s",  # an `in` scalar is a kernel argument already
    ],
)
def test_reads_left_in_the_loop(loop):
    text = f"""
    param N = 8
    in  A: f32[N, N]
    in  I: i32[N]
    in  x: f32[N]
    in  s: f32
    out y: f32[N]
    par N i {{
      seq N k {{
        {loop}
      }}
    }}
    """
    assert hold_invariant_reads(te(text)) == te(text)


def test_models_map_the_same_where_nothing_is_invariant():
    """Of the models, only the dequantizing matmul reads invariant elements in a loop."""
    for path in sorted((ROOT / "models").glob("*.te")):
        program = load(path)
        if path.stem == "matmul_u8_dequant":
            assert hold_invariant_reads(program) != program
        else:
            assert hold_invariant_reads(program) == program, path.stem
