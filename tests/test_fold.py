"""Folding bands deeper than three par loops into a linearized loop (``transform/fold.py``)."""

from __future__ import annotations

import numpy as np

from polymap import compile, optimize, parse, reference
from polymap.mapping.space import kernels
from polymap.runtime.arguments import random_inputs
from polymap.transform.fold import fold_deep_bands

DEEP = """
param B = 3, H = 5, M = 40, N = 36
in X: f32[B, H, M, N]
out Y: f32[B, H, N, M]
par B b { par H h { par M i { par N j { Y[b, h, j, i] = X[b, h, i, j] * 2 } } } }
"""

DEEPER = """
param A = 2, B = 3, C = 4, D = 5, E = 6
in X: f32[A, B, C, D, E]
out Y: f32[E, D, C, B, A]
par A a { par B b { par C c { par D d { par E e { Y[e, d, c, b, a] = X[a, b, c, d, e] + 1 } } } } }
"""


def test_a_four_deep_band_folds_its_two_outer_loops():
    program = parse(DEEP, name="deep").bind_defaults()
    folded = fold_deep_bands(program)
    (kernel,) = kernels(folded)
    assert kernel.indices == ("b_h", "i", "j")
    assert str(kernel.band[0].extent) == "3 * 5"
    mapping = optimize(program)
    assert tuple(lm.index for lm in mapping.kernels[0].loops) == ("b_h", "i", "j")


def test_folding_keeps_the_reference_result():
    for text in (DEEP, DEEPER):
        program = parse(text).bind_defaults()
        folded = fold_deep_bands(program)
        assert len(kernels(folded)[0].band) == 3
        arrays = random_inputs(program, program.sizes, seed=2)
        want = reference(program, **arrays)
        got = reference(folded, **arrays)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_folded_kernel_runs_on_the_host_equal_to_the_reference():
    program = parse(DEEPER, name="deeper").bind_defaults()
    kernel = compile(program)
    assert len(kernel.mapping.kernels[0].loops) == 3
    arrays = random_inputs(program, program.sizes, seed=4)
    got = kernel.run_host(**arrays)
    np.testing.assert_array_equal(got["Y"], reference(program, **arrays)["Y"])


def test_a_symbolic_inner_extent_is_not_folded():
    program = parse(DEEP.replace("param B = 3, H = 5, M = 40, N = 36", "param B, H, M, N"))
    assert fold_deep_bands(program) is program
    assert kernels(program)[0].indices == ("b", "h", "i")  # j runs inside each thread
