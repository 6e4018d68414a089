"""Read a cubin with NVIDIA's ``cuobjdump``: resource usage and SASS text, no GPU needed.

The tool comes from the ``nvidia-cuda-cuobjdump`` wheel (``pip install polymap[inspect]``;
the ``test`` extra installs it too) or from a CUDA toolkit on ``PATH``. It runs as a child
process with a time limit on a temporary file polymap wrote; nothing the user typed reaches
its command line. Every failure is a :class:`~polymap.errors.MachineCodeError`.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path

from polymap.errors import MachineCodeError

INSTALL_HINT = (
    "cuobjdump is not available: polymap reads machine code with NVIDIA's cuobjdump. "
    "Install it with `pip install nvidia-cuda-cuobjdump` (or `pip install polymap[inspect]`; "
    "the `test` extra installs it too), or put a CUDA toolkit's bin/ on PATH."
)
TIME_LIMIT_S = 120.0  # a cubin of a few kernels disassembles in well under a second


def cuobjdump_path() -> Path:
    """The ``cuobjdump`` executable: the wheel's first, else the one on ``PATH``."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True):
            if candidate.is_file():
                return candidate
    found = shutil.which("cuobjdump")
    if found is None:
        raise MachineCodeError(INSTALL_HINT)
    return Path(found)


def cuobjdump_available() -> bool:
    """Whether :func:`cuobjdump_path` finds the tool, for tests and the CLI to query."""
    try:
        cuobjdump_path()
    except MachineCodeError:
        return False
    return True


def resource_usage(cubin: bytes) -> str:
    """``cuobjdump -res-usage``: registers, stack, shared and local bytes per function."""
    return _run(cubin, "-res-usage")


def sass(cubin: bytes) -> str:
    """``cuobjdump -sass``: the machine code of every function, one instruction per line."""
    return _run(cubin, "-sass")


def _run(cubin: bytes, flag: str) -> str:
    tool = cuobjdump_path()
    with tempfile.TemporaryDirectory(prefix="polymap-cubin-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            done = subprocess.run(
                [str(tool), flag, str(path)], capture_output=True, text=True, timeout=TIME_LIMIT_S
            )
        except subprocess.TimeoutExpired:
            raise MachineCodeError(f"cuobjdump {flag} ran past its {TIME_LIMIT_S:g} s limit") from None
        except OSError as exc:
            raise MachineCodeError(f"cannot run {tool}: {exc.strerror or exc}. {INSTALL_HINT}") from None
    if done.returncode != 0:
        words = (done.stderr or done.stdout).strip().splitlines()
        raise MachineCodeError(
            f"cuobjdump {flag} failed (exit status {done.returncode}): {words[-1] if words else 'no output'}"
        )
    return done.stdout
