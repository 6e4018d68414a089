"""Compile emitted CUDA C to PTX with NVRTC, the check that needs no GPU.

Every kernel polymap emits must compile for sm_90. NVRTC (NVIDIA's runtime compilation
library, reached through ``cuda-bindings``) compiles CUDA C to PTX on any machine, with or
without a GPU or driver, so CI runs this check on every emitted kernel. CuPy compiles its
``RawKernel``s with the same NVRTC at run time, so a kernel that passes here is one CuPy
will accept on the GPU: the two agree because they are the same compiler.

Failures reach the user as :class:`~polymap.errors.CudaCompileError`: a compile error
names the file, the line and quotes the emitted source line the NVRTC log points at (the
full log rides along in ``err.log``); a missing ``cuda-bindings`` or NVRTC library says
what to ``pip install`` instead of raising a raw ImportError or RuntimeError.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from polymap.errors import ArgumentError, CudaCompileError

INSTALL_HINT = (
    "NVRTC is not available: polymap checks emitted CUDA C with NVRTC through cuda-bindings. "
    "Install both with `pip install cuda-bindings nvidia-cuda-nvrtc` "
    "(or `pip install polymap[nvrtc]`; the `test` extra installs them too)."
)

# The imported ``cuda.bindings.nvrtc`` module, once it has loaded libnvrtc. This is the only
# global state: programs, logs and results are per call. A failed load is not remembered,
# so installing the packages into a running session (a notebook) works without a restart.
_nvrtc_module: ModuleType | None = None

# ``sm_90`` / ``sm_90a`` -> ``90`` / ``90a``: NVRTC is given the virtual arch ``compute_90``
# for PTX and the real arch ``sm_90`` for machine code (CUBIN).
_ARCH = re.compile(r"sm_(\d+[a-z]?)")

# NVRTC diagnostics look like ``kernel.cu(12): error: identifier "x" is undefined``.
_LOCATED_ERROR = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error\b")
# Any diagnostic that is an error, located or not (``nvrtc: error: unrecognized option``),
# but not a warning that merely mentions the word or the "1 error detected" summary.
# "x.cu(3): error: ...", "catastrophic error", and the assembler's "ptxas error   : ..."
_ANY_ERROR = re.compile(r"(?:^|: |ptxas )(?:catastrophic )?error\b")


def nvrtc_available() -> bool:
    """Whether cuda-bindings imports and libnvrtc loads, for tests and the CLI to query."""
    try:
        _load()
    except CudaCompileError:
        return False
    return True


def nvrtc_version() -> tuple[int, int]:
    """The (major, minor) version of the loaded NVRTC library."""
    nvrtc = _load()
    result, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, result, "nvrtcVersion")
    return major, minor


def compile_ptx(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str = "sm_90",
    options: tuple[str, ...] = (),
) -> str:
    """Compile CUDA C ``source`` to PTX for ``arch`` and return the PTX text.

    ``name`` is the file name NVRTC reports errors against; ``options`` are extra NVRTC
    flags (e.g. ``("-lineinfo",)``) appended after the arch and ``-std=c++17``.
    Raises :class:`CudaCompileError` when the source does not compile, an option is
    rejected, or NVRTC is not installed.
    """
    ptx = _compile(source, name, arch, f"compute_{_arch_number(arch)}", options, _ptx)
    # NVRTC counts the C string's terminating NUL in the size.
    return ptx.rstrip(b"\0").decode()


def compile_cubin(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str = "sm_90",
    options: tuple[str, ...] = (),
) -> bytes:
    """Compile CUDA C ``source`` to machine code (a cubin, the ELF file the driver loads) for
    the real architecture ``arch``: what ptxas makes of the PTX of :func:`compile_ptx`, with
    the same flags, so registers, stack and instructions can be read without a GPU."""
    return _compile(source, name, arch, f"sm_{_arch_number(arch)}", options, _cubin)


def _compile(source: str, name: str, arch: str, gpu_arch: str, options: tuple[str, ...], output) -> bytes:
    flags = (f"--gpu-architecture={gpu_arch}", "-std=c++17", *options)
    nvrtc = _load()
    program = _create_program(nvrtc, source, name)
    try:
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _compile_failure(nvrtc, result, _program_log(nvrtc, program), source, name, arch)
        return output(nvrtc, program)
    finally:
        # The program owns the NVRTC-side copies of the source, log and output; free it on
        # every path, errors included, so a long check run does not leak.
        nvrtc.nvrtcDestroyProgram(program)


def _load() -> ModuleType:
    global _nvrtc_module
    if _nvrtc_module is None:
        _nvrtc_module = _import_nvrtc()
    return _nvrtc_module


def _import_nvrtc() -> ModuleType:
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as exc:
        raise CudaCompileError(f"{INSTALL_HINT} ({exc})") from exc
    # Importing cuda.bindings does not load libnvrtc; the first call does, and raises a
    # RuntimeError (cuda.pathfinder's DynamicLibNotFoundError) when the library is missing.
    # Calling it here turns that into the install hint instead of a failure mid-compile.
    try:
        nvrtc.nvrtcVersion()
    except (RuntimeError, OSError) as exc:
        raise CudaCompileError(f"{INSTALL_HINT} ({exc})") from exc
    return nvrtc


def _arch_number(arch: str) -> str:
    match = _ARCH.fullmatch(arch)
    if match is None:
        raise ArgumentError(f"arch must look like 'sm_90' or 'sm_90a', got {arch!r}")
    return match.group(1)


def _create_program(nvrtc: ModuleType, source: str, name: str):
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, result, f"nvrtcCreateProgram for {name}")
    return program


def _ptx(nvrtc: ModuleType, program) -> bytes:
    return _output(nvrtc, program, "PTX")


def _cubin(nvrtc: ModuleType, program) -> bytes:
    return _output(nvrtc, program, "CUBIN")


def _output(nvrtc: ModuleType, program, kind: str) -> bytes:
    """NVRTC's ``nvrtcGet<kind>Size`` then ``nvrtcGet<kind>``: the compiled program's bytes."""
    result, size = getattr(nvrtc, f"nvrtcGet{kind}Size")(program)
    _check(nvrtc, result, f"nvrtcGet{kind}Size")
    buffer = b" " * size
    (result,) = getattr(nvrtc, f"nvrtcGet{kind}")(program, buffer)
    _check(nvrtc, result, f"nvrtcGet{kind}")
    return buffer


def _program_log(nvrtc: ModuleType, program) -> str:
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    _check(nvrtc, result, "nvrtcGetProgramLogSize")
    buffer = b" " * size
    (result,) = nvrtc.nvrtcGetProgramLog(program, buffer)
    _check(nvrtc, result, "nvrtcGetProgramLog")
    return buffer.rstrip(b"\0").decode(errors="replace")


def _check(nvrtc: ModuleType, result, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaCompileError(f"{what} failed: {_error_string(nvrtc, result)}")


def _error_string(nvrtc: ModuleType, result) -> str:
    _, text = nvrtc.nvrtcGetErrorString(result)
    return text.decode() if isinstance(text, bytes) else str(text)


def _compile_failure(
    nvrtc: ModuleType, result, log: str, source: str, name: str, arch: str
) -> CudaCompileError:
    message = f"NVRTC could not compile {name} for {arch}"
    first_error = _first_error_line(log)
    if result != nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
        # Not a fault in the source (e.g. an invalid option): lead with NVRTC's own word.
        message += f": {_error_string(nvrtc, result)}"
        supported = _supported_archs(nvrtc)
        if supported and _arch_number(arch).rstrip("a") not in {str(n) for n in supported}:
            message += (
                f" (this NVRTC compiles for {', '.join(f'sm_{n}' for n in supported)}: a target's "
                f"compute_capability must be one of these)"
            )
    if first_error:
        message += f": {first_error}"
    line_number = _error_line_number(log, name)
    source_line = _source_line(source, line_number) if line_number is not None else None
    if source_line is not None:
        message += f"\n    at {name}:{line_number}: {source_line.strip()}"
    return CudaCompileError(message, log=log, line=source_line)


def _supported_archs(nvrtc: ModuleType) -> list[int]:
    """The architectures this NVRTC compiles for (``nvrtcGetSupportedArchs``); none if it
    cannot say."""
    try:
        error, archs = nvrtc.nvrtcGetSupportedArchs()
    except (AttributeError, RuntimeError):
        return []
    return list(archs) if error == nvrtc.nvrtcResult.NVRTC_SUCCESS else []


def _first_error_line(log: str) -> str | None:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if _ANY_ERROR.search(line):
            return line
    # A log with no line saying "error" still explains the failure better than nothing.
    return lines[0] if lines else None


def _error_line_number(log: str, name: str) -> int | None:
    for line in log.splitlines():
        match = _LOCATED_ERROR.match(line.strip())
        # Only quote our own source: an error inside a header points at the header's lines.
        if match is not None and match.group("file") == name:
            return int(match.group("line"))
    return None


def _source_line(source: str, line_number: int) -> str | None:
    lines = source.splitlines()
    if 1 <= line_number <= len(lines):
        return lines[line_number - 1].rstrip()
    return None
