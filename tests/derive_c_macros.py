"""Derive every macro the emitted CUDA C can meet, and write ``polymap/codegen/cmacros.py``.

A program name spelled like a macro would be expanded by the preprocessor (``SIZE_MAX`` as
a buffer name becomes ``(18446744073709551615UL)``), so :mod:`polymap.codegen.cnames`
renames every such name. The list is derived, not hand-picked, from the two compilers the
emitted file meets:

* the host C++ compiler, with the flags of :mod:`polymap.runtime.host`, on the host
  emulation header and the helpers (``-dM -E`` lists every macro defined after them);
* NVRTC, which has no ``-dM``: the candidates are every ``#define`` in its builtin headers
  (``libnvrtc-builtins``) and every host macro, and NVRTC itself says which of them are
  defined, by compiling one ``#ifdef NAME`` probe per candidate that leaves a symbol in
  the PTX.

Names the C++ standard reserves for the implementation (``__x``, ``_X``) are left out:
``cnames`` renames them by pattern. Run ``python tests/derive_c_macros.py`` to regenerate;
``tests/test_robust_frontend.py`` checks that the checked-in list covers what the
compilers of the machine it runs on define.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "cuda_templates"
OUTPUT = ROOT / "polymap" / "codegen" / "cmacros.py"
_DEFINE = re.compile(r"^#define ([A-Za-z_]\w*)", re.MULTILINE)
_BUILTIN_DEFINE = re.compile(rb"#[ \t]*define[ \t]+([A-Za-z_]\w*)")
_RESERVED_BY_STANDARD = re.compile(r"__|_[A-Z]")


def _plain(names) -> frozenset[str]:
    return frozenset(n for n in names if not _RESERVED_BY_STANDARD.match(n))


def host_macros() -> tuple[frozenset[str], str]:
    """Every macro defined after the host header and the helpers, and the compiler's name:
    in the host emulation's ISO mode (``-std=c++20``) and in the GNU mode (``-std=gnu++20``)
    that nvcc's host pass and most C++ projects compile in, which also defines ``linux`` and
    ``unix`` (a buffer named ``linux`` would become ``1`` in the launcher)."""
    from polymap.runtime.host import FLAGS, compiler

    cxx = compiler()
    flags = [f for f in FLAGS if f != "-shared"]
    found: set[str] = set()
    for mode in ("-std=c++20", "-std=gnu++20"):
        command = [
            cxx,
            *[mode if f.startswith("-std=") else f for f in flags],
            "-dM",
            "-E",
            "-x",
            "c++",
            "-include",
            str(TEMPLATES / "polymap_host.h"),
            str(TEMPLATES / "polymap_helpers.cuh"),
        ]
        listing = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        found |= set(_DEFINE.findall(listing))
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    return frozenset(found), version.splitlines()[0] + " (ISO and GNU modes)"


def nvrtc_macros(candidates: frozenset[str]) -> tuple[frozenset[str], str]:
    """The candidates and NVRTC's builtin ``#define``s that NVRTC defines for sm_90."""
    import nvidia

    from polymap.runtime.nvrtc import compile_ptx, nvrtc_version

    builtins: set[str] = set()
    for folder in map(Path, nvidia.__path__):
        for lib in folder.glob("*/lib/libnvrtc-builtins.so*"):
            builtins |= {m.decode() for m in _BUILTIN_DEFINE.findall(lib.read_bytes())}
    if not builtins:
        raise RuntimeError("libnvrtc-builtins not found under the nvidia package")
    probes = sorted(candidates | builtins)
    helpers = (TEMPLATES / "polymap_helpers.cuh").read_text()
    source = helpers + "\n" + "".join(f"#ifdef {n}\n__device__ int pm_probe_{n};\n#endif\n" for n in probes)
    ptx = compile_ptx(source, name="macro_probe.cu")
    major, minor = nvrtc_version()
    return frozenset(re.findall(r"pm_probe_(\w+)", ptx)), f"NVRTC {major}.{minor}"


def derive() -> tuple[frozenset[str], frozenset[str], str]:
    """(host macros, NVRTC macros, where they came from), reserved-by-standard names left out."""
    host, cxx = host_macros()
    nvrtc, nvrtc_name = nvrtc_macros(host)
    return _plain(host), _plain(nvrtc), f"{cxx}; {nvrtc_name}"


def _frozenset_literal(name: str, names: frozenset[str]) -> str:
    lines, line = [], "   "
    for n in sorted(names):
        item = f' "{n}",'
        if len(line) + len(item) > 108:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    return f"{name} = frozenset(\n    {{\n" + "\n".join(" " * 4 + ln for ln in lines) + "\n    }\n)\n"


def render(host: frozenset[str], nvrtc: frozenset[str], origin: str) -> str:
    return (
        '"""Every macro the emitted CUDA C can meet, derived by ``tests/derive_c_macros.py``\n'
        "(generated: do not edit; run that script to regenerate it).\n\n"
        f"Derived with:\n    {origin}\n"
        "Names the C++ standard reserves (``__x``, ``_X``) are not listed:\n"
        ':mod:`polymap.codegen.cnames` renames them by pattern.\n"""\n\n'
        + _frozenset_literal("HOST", host)
        + "\n"
        + _frozenset_literal("NVRTC", nvrtc)
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    OUTPUT.write_text(render(*derive()))
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
