"""The command-line entry points' console: output a terminal or log cannot encode is escaped, never a crash."""
from __future__ import annotations

import sys


def escape_unencodable() -> None:
    """An ASCII terminal or log (PYTHONIOENCODING=ascii, LANG=C on an older Python) cannot encode a summary's
    dashes or a path's accents: write them escaped, not fail the command after its work is done (exit 3)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None when the stream is closed
            stream.reconfigure(errors="backslashreplace")
