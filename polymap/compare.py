"""An output against the reference executor's: the tolerance every command applies (``polymap
run``, ``polymap bench --kernels``). Floats match within ``rtol=1e-4`` and ``atol=1e-5`` times
the largest finite reference value (for f16 and bf16, which both sides round from the same f32
computation, two units in the last place of the type: ``rtol`` 2**-9 and 2**-6, ``atol`` one
unit times that value); where the reference is infinite or NaN the output must be the same
value; integers and bool match exactly."""

from __future__ import annotations

import math

import numpy as np

# (rtol, atol per unit of the largest reference value) of the 16-bit floats: a one-unit
# difference of the f32 value they round from (another order of the same sum, an FMA) may
# land one unit apart in the type (2**-10 relative for f16, 2**-7 for bf16)
_TOLERANCE = {"f16": (2.0**-9, 2.0**-10), "bf16": (2.0**-6, 2.0**-7)}


def compare_output(name: str, dtype, got, want) -> dict:
    """How ``got`` compares with the reference ``want``: ``ok``, the largest error and the
    largest reference value, and ``text``, the line that says so."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return {
            "output": name,
            "ok": False,
            "checked": True,
            "text": f"{name}: shape {got.shape}, reference shape {want.shape}, MISMATCH",
        }
    if dtype.is_float:
        g, w = got.astype(np.float64), want.astype(np.float64)
        # where the reference is infinite or NaN the run must give the same value; the
        # tolerance is scaled by the finite values only (an infinite one would allow anything)
        finite = np.isfinite(w)
        scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
        exact = np.where(finite, True, (g == w) | (np.isnan(g) & np.isnan(w)))
        with np.errstate(invalid="ignore"):
            rtol, atol = _TOLERANCE.get(dtype.value, (1e-4, 1e-5))
            close = np.isclose(g, w, rtol=rtol, atol=atol * max(1.0, scale))
            diff = np.where(finite, np.abs(g - w), np.where(exact, 0.0, np.inf))
        error = float(np.max(diff)) if w.size else 0.0
        ok = bool(np.all(np.where(finite, close, exact)))
        text = f"max abs error {error:.1e} (max |reference| {scale:.3g})"
    else:
        g, w = got.astype(np.int64), want.astype(np.int64)
        scale = int(np.max(np.abs(w))) if w.size else 0
        error = int(np.max(np.abs(g - w))) if w.size else 0
        ok = bool(np.array_equal(g, w))
        text = f"max abs error {error} (max |reference| {scale}, exact match required)"
    return {
        "output": name,
        "ok": ok,
        "max_abs_error": error if math.isfinite(error) else None,
        "max_abs_reference": scale if math.isfinite(scale) else None,
        "exact": not dtype.is_float,
        "checked": True,
        "text": f"{name}: {text}, {'OK' if ok else 'MISMATCH'}",
    }
