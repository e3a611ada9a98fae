"""The command-line entry points' console: output a terminal or log cannot encode is escaped, never a crash;
SIGTERM ends a command as Ctrl-C does, with its clean-up and message; an empty option value is refused."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager


def escape_unencodable() -> None:
    """An ASCII terminal or log (PYTHONIOENCODING=ascii, LANG=C on an older Python) cannot encode a summary's
    dashes or a path's accents: write them escaped, not fail the command after its work is done (exit 3)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None when the stream is closed
            stream.reconfigure(errors="backslashreplace")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job's time-out, ``kill``), handled as Ctrl-C is: the command's clean-up runs and says what was
    kept; the exit code is 143, as a shell reports a process SIGTERM ended, not Ctrl-C's 130."""

    exit_code = 143


def interrupted_exit_code(exc: KeyboardInterrupt) -> int:
    return getattr(exc, "exit_code", 130)


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises ``Terminated`` in the main thread while the block runs; the earlier handler comes back after
    (in-process callers, tests, keep theirs). Outside the main thread, where Python allows no handler, it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(*_):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def not_empty(left_out: str):
    """argparse type of an option whose empty value can only be an unset variable (``--state-dir "$DIR"``): refused,
    where it silently meant the default (``--state-dir ''`` acted on the stack in ./.stack, not the one meant).
    ``left_out``: what leaving the option out gives."""
    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"the value is empty (an unset variable?): give one, or leave the option "
                                             f"out (then {left_out})")
        return text
    return check
