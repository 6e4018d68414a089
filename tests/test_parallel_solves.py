"""The kernels' integer programs are solved side by side (``solve._KernelSolves``): the same
decisions as one after another, errors in launch order, a kernel solved once per key."""

import pytest

import polymap.mapping.solve as solve_module
from polymap import optimize, parse
from polymap.errors import InfeasibleMappingError

THREE_KERNELS = """
in A: f32[256, 128]
out B: f32[256, 128]
out C: f32[256]
out D: f32[128, 256]
par 256 i { par 128 j { B[i, j] = A[i, j] * 2 } }
par 256 i { new s: f32
  s = 0
  seq 128 j { s += A[i, j] }
  C[i] = s }
par 128 j { par 256 i { D[j, i] = A[i, j] } }
"""

TWINS = """
in A: f32[256, 128]
out B: f32[256, 128]
par 256 i { par 128 j { B[i, j] = A[i, j] * 2 } }
par 256 i { par 128 j { B[i, j] = A[i, j] * 2 } }
"""


def _decisions(mapping):
    return [(km.loops, km.staging, km.interleaved, km.lanes) for km in mapping.kernels]


def test_side_by_side_gives_the_decisions_of_one_after_another(monkeypatch):
    program = parse(THREE_KERNELS)
    monkeypatch.setattr(solve_module, "_cores", lambda: 1)
    alone = optimize(program)
    monkeypatch.setattr(solve_module, "_cores", lambda: 3)
    together = optimize(program)
    assert _decisions(together) == _decisions(alone)
    assert [c.time_s for c in together.costs] == [c.time_s for c in alone.costs]
    assert [r.objective for r in together.solver] == pytest.approx([r.objective for r in alone.solver])


def test_errors_come_in_launch_order_whichever_thread_fails_first(monkeypatch):
    # both kernels' pins conflict; the second kernel's model is the smaller one and may well
    # fail first, but the error is the first kernel's
    program = parse(THREE_KERNELS)
    monkeypatch.setattr(solve_module, "_cores", lambda: 3)
    pins = {"kernel1.i": {"threads": 64, "seq": 64}, "kernel0.i": "threadIdx.x", "kernel0.j": "threadIdx.x"}
    with pytest.raises(InfeasibleMappingError, match=r"^kernel0 "):
        optimize(program, pins=pins)


def test_a_later_kernels_pin_error_waits_for_an_earlier_kernels_solve(monkeypatch):
    # kernel2's lanes pin is refused while its model is built, before kernel0's solve (in
    # another thread) has proved kernel0's pins contradictory: kernel0's error comes first
    program = parse(THREE_KERNELS)
    monkeypatch.setattr(solve_module, "_cores", lambda: 3)
    pins = {"kernel2.j": {"lanes": 32}, "kernel0.i": "threadIdx.x", "kernel0.j": "threadIdx.x"}
    with pytest.raises(InfeasibleMappingError, match=r"^kernel0 "):
        optimize(program, pins=pins)


def test_a_kernel_equal_to_an_earlier_one_is_not_solved_again(monkeypatch):
    solved = []
    real = solve_module.KernelProblem.solve_or_explain

    def counting(problem):
        solved.append(problem.kernel.name)
        return real(problem)

    monkeypatch.setattr(solve_module.KernelProblem, "solve_or_explain", counting)
    mapping = optimize(parse(TWINS))
    assert solved == ["kernel0"]
    first, second = mapping.kernels
    assert second.kernel.name == "kernel1"
    assert second.loops == first.loops
