"""Comments in emitted code carry user text (program, file and buffer names, statements, the
size context): that text must never end the comment early. A ``//`` comment ends at a
newline (or any other line terminator a compiler accepts), and a backslash at its end (or
the trigraph ``??/``, under compilers that still read trigraphs) splices the next line into
it. So every character outside printable ASCII becomes ``?``, a backslash becomes ``/``,
and ``??`` is broken up: what follows ``//`` is then one inert line whatever the user wrote.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^\x20-\x7e]")


def comment_text(text: str) -> str:
    """``text`` made safe to stand after ``//`` on one line."""
    safe = _UNSAFE.sub("?", text).replace("\\", "/")
    while "??" in safe:
        safe = safe.replace("??", "? ?")
    return safe.rstrip()


def comment(text: str) -> str:
    """A one-line ``//`` comment of ``text``."""
    return f"// {comment_text(text)}".rstrip()


__all__ = ["comment", "comment_text"]
