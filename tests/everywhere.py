"""One program run every way a test compares: the reference executor, the test oracle (an
interpreter of its own, ``oracle.py``) and the host emulation of the compiled kernel, whose
source must also compile to PTX with NVRTC. The tests that use it keep their own
comparisons (exact or with a tolerance, against NumPy or the reference)."""

from __future__ import annotations

from oracle import run_oracle

import polymap
from polymap.reference import reference


def run_everywhere(program, inputs: dict):
    """``({"reference": .., "oracle": .., "host": ..}, kernel)``: each run's outputs by
    buffer name, and the compiled kernel (its PTX checked here)."""
    kernel = polymap.compile(program)
    runs = {
        "reference": reference(program, **inputs),
        "oracle": run_oracle(program, inputs)[0],
        "host": kernel.run_host(**inputs),
    }
    assert ".entry" in kernel.ptx()
    return runs, kernel
