"""Running emitted CUDA C on the host: the same source text compiled by the host C++
compiler after ``cuda_templates/polymap_host.h`` (blocks spread over the host's cores, the
threads of a block that meets at barriers as fibers that stop at each barrier, see the
header), loaded with ctypes, and called
through its ``extern "C"`` launcher, exactly as a C++ project would call it on a GPU.

Built libraries are cached by a hash of the source, the header and the command line
(``$POLYMAP_CACHE_DIR``, else ``~/.cache/polymap``; see ``cache.py``: every entry is checked
against the hash of its bytes before it is loaded and rebuilt when damaged), so a test
suite compiles each kernel once. The compiler is ``$CXX``, else ``c++``; it must support
C++20 (and POSIX ``<ucontext.h>`` where the host is not x86-64).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from polymap.codegen.cuda import ERROR_CONTEXT, ERROR_GRID, TEMPLATES, CudaProgram
from polymap.errors import ArgumentError, CudaCompileError, InternalError
from polymap.ir.nodes import BufferKind
from polymap.runtime import cache
from polymap.runtime.arguments import bind_arguments, is_device_array, scalar_value
from polymap.runtime.faults import ERROR_FAULT, FAULT_WORD, fault_error

# -fwrapv: i32 overflow wraps, as in NumPy (and in practice on the GPU)
FLAGS = ("-std=c++20", "-O2", "-fwrapv", "-frounding-math", "-fPIC", "-shared", "-pthread", "-w")
HEADER = TEMPLATES / "polymap_host.h"


def compiler() -> str:
    found = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if found is None:
        raise CudaCompileError(
            "no host C++ compiler found (set $CXX, or install g++) to run kernels on the host"
        )
    return found


def build_library(source: str, name: str = "kernel") -> Path:
    """Compile ``source`` for the host into a shared library (cached) and return its path."""
    cxx = compiler()
    key = hashlib.sha256("\0".join([source, HEADER.read_text(), cxx, *FLAGS]).encode()).hexdigest()[:24]
    # the key identifies the entry; the name is for people, cut so that the file name stays
    # within NAME_MAX (255 bytes) with the ".sha256" and temporary-file affixes around it
    library = cache.cache_dir() / f"{name[:64]}-{key}.so"
    if cache.is_intact(library):
        return library
    with tempfile.TemporaryDirectory(prefix="polymap-") as tmp:
        # relative names in a fresh folder: the same source gives the same bytes in every
        # process, so concurrent builds of one entry agree with each other's hash
        Path(tmp, "kernel.cu").write_text(source)
        header = precompiled_header(cxx)
        command = [cxx, *FLAGS, "-x", "c++", "-include", str(header), "kernel.cu", "-o", "kernel.so"]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = done.stderr.strip()
            first = next((line for line in log.splitlines() if "error" in line), log[:200])
            raise CudaCompileError(
                f"the host C++ compiler could not compile the emitted code of {name}: {first}", log=log
            )
        cache.store(library, Path(tmp, "kernel.so"))
    return library


def load_library(source: str, name: str = "kernel") -> ctypes.CDLL:
    """The built library of ``source``, loaded; an entry the loader rejects although its
    hash matches (written by something else than polymap) is built once more."""
    library = build_library(source, name)
    try:
        return ctypes.CDLL(str(library))
    except OSError:
        cache.discard(library)
    library = build_library(source, name)
    try:
        return ctypes.CDLL(str(library))
    except OSError as exc:
        raise CudaCompileError(f"the host library of {name} was built but does not load: {exc}") from None


def precompiled_header(cxx: str) -> Path:
    """The host header, next to its precompiled form when the compiler can make one: the
    standard headers it pulls in (<thread>, <barrier>) are most of a kernel's build time.
    The compiler uses ``polymap_host.h.gch`` in place of the header when its flags match,
    and silently reads the header itself otherwise, so a failure to build it only costs
    time. A damaged one would fail every build, so it is a checked cache entry too."""
    text = HEADER.read_text()
    key = hashlib.sha256("\0".join([text, cxx, *FLAGS]).encode()).hexdigest()[:16]
    folder = cache.cache_dir() / f"pch-{key}"
    folder.mkdir(exist_ok=True)
    header = folder / HEADER.name
    cache.write_text(header, text)
    gch = folder / (HEADER.name + ".gch")
    if cache.is_intact(gch):
        return header
    pch_flags = [f for f in FLAGS if f != "-shared"]
    with tempfile.TemporaryDirectory(prefix="polymap-pch-", dir=folder) as tmp:
        partial = Path(tmp) / gch.name
        done = subprocess.run(
            [cxx, *pch_flags, "-x", "c++-header", str(header), "-o", str(partial)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            cache.store(gch, partial)
        else:
            gch.unlink(missing_ok=True)  # a damaged one must not stay where the compiler looks
    return header


HOST_OUT_OF_MEMORY = 2  # cudaErrorMemoryAllocation: POLYMAP_SCRATCH found no memory (polymap_host.h)


def run_host(cuda: CudaProgram, arrays: dict) -> dict[str, np.ndarray]:
    """Run the program on the host and return its ``out`` and ``inout`` buffers."""
    program = cuda.program
    for name, value in arrays.items():
        if is_device_array(value):
            raise ArgumentError(
                f"run_host takes host arrays (NumPy, or DLPack on the CPU); '{name}' is a device array "
                "(call the kernel instead)"
            )
    bound = bind_arguments(cuda, arrays)
    storage: dict[str, np.ndarray] = {}
    for decl in bound.buffers:
        shape, dtype = bound.shapes[decl.name], decl.dtype.numpy
        if decl.kind in (BufferKind.IN, BufferKind.INOUT):
            storage[decl.name] = np.array(bound.inputs[decl.name], dtype=dtype, order="C", copy=True)
        elif decl.kind is BufferKind.OUT:
            storage[decl.name] = np.zeros(shape, dtype)
        else:
            storage[decl.name] = np.empty(shape, dtype)
    library = load_library(cuda.source, cuda.launcher)
    launcher = getattr(library, cuda.launcher)
    launcher.restype = ctypes.c_int
    values = []
    for a in cuda.arguments:
        if a.kind == "buffer":
            values.append(ctypes.c_void_p(storage[a.name].ctypes.data))
        elif a.kind == "scalar":  # by value, as its C type
            value = scalar_value(storage[a.name], program.buffer(a.name).dtype)
            values.append(np.ctypeslib.as_ctypes_type(value.dtype)(value))
        else:
            values.append(ctypes.c_int(bound.sizes[a.name]))
    values.append(ctypes.c_void_p(None))  # the stream
    status = launcher(*values)
    if status == ERROR_CONTEXT:
        raise ArgumentError(
            f"sizes {bound.sizes} are outside the context the kernel of '{program.name}' was proved for "
            f"({cuda.program.sizes_in_words(cuda.mapping.context)})",
            **program.error_context(),
        )
    if status == ERROR_GRID:
        raise ArgumentError(f"sizes {bound.sizes} need more blocks than a grid dimension allows")
    if status == ERROR_FAULT:
        raise fault_error(cuda, ctypes.c_int.in_dll(library, FAULT_WORD).value, bound.sizes)
    if status == HOST_OUT_OF_MEMORY and cuda.scratch:
        temporaries = ", ".join(str(d) for d in cuda.scratch)
        raise ArgumentError(
            f"sizes {bound.sizes}: the host has no memory for the program's temporaries ({temporaries})"
        )
    if status != 0:
        raise InternalError(f"the host launcher of '{program.name}' returned {status}")
    return {d.name: storage[d.name] for d in program.outputs}
