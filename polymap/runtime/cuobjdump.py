"""Read a cubin with NVIDIA's ``cuobjdump``: resource usage and SASS text, no GPU needed.

The tools come from the ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels
(``pip install polymap[inspect]``; the ``test`` extra installs them too) or from a CUDA
toolkit on ``PATH``: ``cuobjdump -sass`` hands the disassembly to ``nvdisasm``, which it looks
for on ``PATH`` or ``NVDISASM_PATH``, so the child is given the folder where polymap found it.
It runs with a time limit on a temporary file polymap wrote; nothing the user typed reaches
its command line. Every failure is a :class:`~polymap.errors.MachineCodeError`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from polymap.errors import MachineCodeError

INSTALL_HINT = (
    "polymap reads machine code with NVIDIA's cuobjdump and nvdisasm. Install them with "
    "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` (or `pip install polymap[inspect]`; "
    "the `test` extra installs them too), or put a CUDA toolkit's bin/ on PATH."
)
TIME_LIMIT_S = 120.0  # a cubin of a few kernels disassembles in well under a second


def tool_path(name: str) -> Path:
    """The executable ``name`` (``cuobjdump`` or ``nvdisasm``): the wheel's first, else ``PATH``'s."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}"), reverse=True):
            if candidate.is_file():
                return candidate
    found = shutil.which(name)
    if found is None:
        raise MachineCodeError(f"{name} is not available: {INSTALL_HINT}")
    return Path(found)


def cuobjdump_path() -> Path:
    """The ``cuobjdump`` executable: the wheel's first, else the one on ``PATH``."""
    return tool_path("cuobjdump")


def cuobjdump_available() -> bool:
    """Whether both tools are found (SASS needs nvdisasm), for tests and the CLI to query."""
    try:
        tool_path("cuobjdump")
        tool_path("nvdisasm")
    except MachineCodeError:
        return False
    return True


def resource_usage(cubin: bytes) -> str:
    """``cuobjdump -res-usage``: registers, stack, shared and local bytes per function."""
    return _run(cubin, "-res-usage")


def sass(cubin: bytes) -> str:
    """``cuobjdump -sass``: the machine code of every function, one instruction per line."""
    return _run(cubin, "-sass")


def line_info(cubin: bytes) -> str:
    """``nvdisasm -g -c``: the SASS annotated with the source line of each instruction (a
    cubin compiled with ``-lineinfo``; the addresses are those of :func:`sass`)."""
    return _run(cubin, "-g", tool_name="nvdisasm", extra=("-c",))


def _run(cubin: bytes, flag: str, *, tool_name: str = "cuobjdump", extra: tuple[str, ...] = ()) -> str:
    tool = tool_path(tool_name)
    # cuobjdump runs nvdisasm for -sass and finds it only on PATH or NVDISASM_PATH, which a
    # virtual environment's wheels are not on.
    environment = dict(os.environ, NVDISASM_PATH=str(tool_path("nvdisasm").parent))
    with tempfile.TemporaryDirectory(prefix="polymap-cubin-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            done = subprocess.run(
                [str(tool), flag, *extra, str(path)],
                capture_output=True,
                text=True,
                timeout=TIME_LIMIT_S,
                env=environment,
            )
        except subprocess.TimeoutExpired:
            raise MachineCodeError(f"{tool_name} {flag} ran past its {TIME_LIMIT_S:g} s limit") from None
        except OSError as exc:
            raise MachineCodeError(f"cannot run {tool}: {exc.strerror or exc}. {INSTALL_HINT}") from None
    if done.returncode != 0:
        words = (done.stderr or done.stdout).strip().splitlines()
        raise MachineCodeError(
            f"{tool_name} {flag} failed (exit status {done.returncode}): {words[-1] if words else 'no output'}"
        )
    return done.stdout
