"""C identifiers for the emitted code: the program's own names where C allows them.

A TE name may be a C or CUDA word (``int``, ``float``, ``threadIdx``), or spell one of the
helpers' names; such a name gets a suffix. Every name handed out is distinct, so the
identifiers polymap adds (``bx``, ``s_i``, loop counters) can never shadow a program name.
"""

from __future__ import annotations

import re

from polymap.codegen import cmacros

_WORDS = """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires return
    short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    xor xor_eq restrict main
    threadIdx blockIdx blockDim gridDim warpSize dim3 uint3
    exp expf log logf sqrt sqrtf tanh tanhf fabs fabsf abs max min std stream
    sin sinf cos cosf tan tanf erf erff pow powf floor floorf ceil ceilf fmod fmodf fmin fminf
    fmax fmaxf copysign copysignf trunc truncf round roundf rint rintf exp2 exp2f log2 log2f
    log10 log10f rsqrt rsqrtf isnan isinf isfinite signbit hypot hypotf atan atanf atan2 atan2f
    asin asinf acos acosf sinh sinhf cosh coshf expm1 expm1f log1p log1pf cbrt cbrtf fma fmaf
    labs llabs memcpy memset atomicAdd atomicSub atomicExch atomicMin atomicMax atomicInc
    atomicDec atomicCAS atomicAnd atomicOr atomicXor
    INFINITY NAN NULL EOF errno assert INT_MAX INT_MIN UINT_MAX LONG_MAX LONG_MIN LLONG_MAX HUGE_VAL
    HUGE_VALF M_PI M_E M_SQRT2 FLT_MAX FLT_MIN DBL_MAX DBL_MIN RAND_MAX EXIT_SUCCESS EXIT_FAILURE
    stdin stdout stderr printf malloc free size_t
"""
# C/C++ keywords, CUDA builtins and the math functions the emitted code calls, and every
# macro the host compiler (after polymap_host.h) and NVRTC define, derived by
# tests/derive_c_macros.py into cmacros.py: a macro cannot be shadowed, so a program name
# spelled like one must be renamed.
RESERVED = frozenset(_WORDS.split()) | cmacros.HOST | cmacros.NVRTC
# prefixes of polymap's helpers and of CUDA's own names
RESERVED_PREFIXES = ("pm_", "PM_", "polymap", "POLYMAP", "cuda", "CUDA", "NVRTC")
# Names the C++ standard reserves for the implementation (any header may define them as
# macros, in any version): they get a prefix, since a suffix would leave them reserved.
_IMPLEMENTATION = re.compile(r"__|_[A-Z]")


class CNames:
    """An injective map from names (user names or polymap's own hints) to C identifiers."""

    def __init__(self) -> None:
        self._given: dict[str, str] = {}
        self._taken: set[str] = set()

    def __getitem__(self, name: str) -> str:
        """The identifier of ``name``, allocated on first use and stable after."""
        if name not in self._given:
            self._given[name] = self.fresh(name)
        return self._given[name]

    def fresh(self, hint: str) -> str:
        """A new identifier reading like ``hint``, distinct from every one handed out."""
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        if base[0].isdigit() or _IMPLEMENTATION.match(base):
            base = "v" + base
        if base in RESERVED or base.startswith(RESERVED_PREFIXES):
            base += "_"
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        return name
