"""C identifiers for the emitted code: the program's own names where C allows them.

A TE name may be a C or CUDA word (``int``, ``float``, ``threadIdx``), or spell one of the
helpers' names; such a name gets a suffix. Every name handed out is distinct, so the
identifiers polymap adds (``bx``, ``s_i``, loop counters) can never shadow a program name.
"""

from __future__ import annotations

import re

RESERVED = frozenset(
    ["alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "restrict", "main", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "uint3", "cudaStream_t", "cudaError_t", "exp", "expf", "log", "logf", "sqrt", "sqrtf", "tanh", "tanhf", "fabs", "fabsf", "abs", "max", "min", "std", "INFINITY", "NAN", "stream"]
)


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
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in RESERVED or base.startswith(("pm_", "polymap", "__")):
            base += "_"
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        return name
