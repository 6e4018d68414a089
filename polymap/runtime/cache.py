"""The build cache on disk (``$POLYMAP_CACHE_DIR``, else ``~/.cache/polymap``).

Each entry is a file and, next to it, ``<file>.sha256``: the SHA-256 of the file's bytes,
written after the file. An entry is used only while its bytes still have that hash. A
truncated, corrupted or zero-length entry, or one whose hash file is missing, is built
again instead of being handed to the loader (a truncated shared library kills the process
with SIGBUS when its pages are touched, and would stay broken until deleted by hand).

Both files are written under a temporary name in the entry's own folder and renamed
(``os.replace``), so a concurrent process never sees a half-written file. Two processes
that build one entry at once write the same bytes (the host build is reproducible); should
a pair still disagree, the next run only builds it again.

When the cache folder cannot be created or written, polymap warns once and caches in a
private temporary folder for the rest of the process (removed at exit): runs still work,
they only compile again in every process.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path

_FALLBACK: dict[str, Path] = {}  # unwritable cache root -> this process's temporary folder


class CacheWarning(UserWarning):
    """The kernel cache folder is not usable; a temporary one is used instead."""


def cache_dir(kind: str = "host") -> Path:
    """The writable folder for entries of ``kind`` (created if needed)."""
    root = None
    try:
        root = Path(os.environ.get("POLYMAP_CACHE_DIR") or Path.home() / ".cache" / "polymap")
        path = root / kind
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass  # creating a file is the only reliable test of writability (root ignores modes)
        return path
    except (OSError, RuntimeError) as exc:  # RuntimeError: Path.home() without a home directory
        path = _fallback(str(root or "~/.cache/polymap"), exc) / kind
        path.mkdir(parents=True, exist_ok=True)
        return path


def _fallback(root: str, why: Exception) -> Path:
    if root not in _FALLBACK:
        folder = Path(tempfile.mkdtemp(prefix="polymap-cache-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _FALLBACK[root] = folder
        warnings.warn(
            f"the polymap cache folder {root} is not writable ({why}); caching in {folder} for this "
            "process only (set $POLYMAP_CACHE_DIR to a writable folder to keep builds across runs)",
            CacheWarning,
            stacklevel=4,
        )
    return _FALLBACK[root]


def hash_path(entry: Path) -> Path:
    return entry.with_name(entry.name + ".sha256")


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def is_intact(entry: Path) -> bool:
    """Whether ``entry`` exists with the bytes its hash file records."""
    try:
        recorded = hash_path(entry).read_text().strip()
        return len(recorded) == 64 and digest(entry) == recorded
    except (OSError, UnicodeDecodeError):
        return False


def store(entry: Path, built: Path) -> None:
    """Put the file ``built`` (anywhere) in the cache as ``entry``, then its hash."""
    value = digest(built)
    _replace_atomically(entry, lambda tmp: shutil.copyfile(built, tmp))
    _replace_atomically(hash_path(entry), lambda tmp: tmp.write_text(value + "\n"))


def discard(entry: Path) -> None:
    """Mark ``entry`` for rebuilding (its hash goes; a process using the file keeps it)."""
    hash_path(entry).unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """``path`` holds ``text`` (written atomically unless it already does)."""
    try:
        if path.read_text() == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    _replace_atomically(path, lambda tmp: tmp.write_text(text))


def _replace_atomically(path: Path, write) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
