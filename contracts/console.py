"""The command-line entry points' console: output a terminal or log cannot encode is escaped, never a crash;
output whose reader went away (`| head -1`) goes nowhere, never a crash; SIGTERM ends a command as Ctrl-C does, with its clean-up and message; an empty option value is refused; a name
printed back holds no control character (refused, or shown escaped)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import unicodedata
from contextlib import contextmanager


def escape_unencodable() -> None:
    """An ASCII terminal or log (PYTHONIOENCODING=ascii, LANG=C on an older Python) cannot encode a summary's
    dashes or a path's accents: write them escaped, not fail the command after its work is done (exit 3)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None when the stream is closed
            stream.reconfigure(errors="backslashreplace")


def tolerate_closed_output() -> None:
    """`python -m oracle audit RUN | head -1` (or a CI log reader gone): the pipe closed, and the next print raised
    BrokenPipeError after the audit's work was done: a traceback and exit 3, "no verdict", for a run that PASSed.
    What is printed after the reader went away goes to /dev/null; the exit code is still the command's."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _ReaderGoneIsFine):
            setattr(sys, name, _ReaderGoneIsFine(stream))


class _ReaderGoneIsFine:
    """A text stream whose writes, once its reader has gone (EPIPE), go to /dev/null instead of raising."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)  # the buffered text then flushes there, at exit too
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name):
        return getattr(self._stream, name)


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


def control_character(value: str) -> str | None:
    """Why ``value`` is not one line of printable text (its first control character: a line break, ESC, a
    bidirectional override...), or None. A name that is printed back (a run folder, a label) with one could forge a
    verdict line (``goldfish: PASS, exit code 0`` under a failed run) or recolour or clear the terminal."""
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is None:
        return None
    what = ", a line break" if bad in "\n\r\u2028\u2029" else ""
    return f"holds a control character (U+{ord(bad):04X}{what}): give one line of printable text"


def printable(text) -> str:
    """Text as a terminal shows it, on one line: a control character (a line break, a carriage return, ESC, DEL...)
    or another invisible one is written escaped (``\\n``, ``\\x1b``, ``\\u202e``), never sent raw, so a label or a
    file name cannot forge a line or clear the screen."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
