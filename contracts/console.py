"""The command-line entry points' console: output a terminal or log cannot encode is escaped, never a crash;
output whose reader went away (`| head -1`) goes nowhere, never a crash; SIGTERM ends a command as Ctrl-C does, with
its clean-up and message (never lost in a finalizer, never a traceback); an empty option value is refused; a name
printed back holds no control character (refused, or shown escaped)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
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


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _Stop:
    """The process's stop requests while ``sigterm_as_interrupt`` runs. A handler's exception that lands in a
    finalizer (redis-py's ``ConnectionPool.__del__`` as the reader's pool is collected) or a weakref callback is
    swallowed by Python ("Exception ignored in ... Terminated", a traceback) and the command went on to its verdict
    and exit 0 (hunt 11 D2): such a swallowed stop is sent again to the main thread by a helper thread until it is
    taken outside a finalizer, and one never taken is raised as the block ends: never lost."""

    lock = threading.RLock()  # re-entrant: a finalizer may run (and swallow a signal) while the main thread holds it
    active = False  # inside sigterm_as_interrupt
    pid = 0  # the process that installed it (a forked judging process inherits this state, not the handlers' aim)
    swallowed: int | None = None  # a signal whose exception a finalizer swallowed, not taken since
    in_hook = False  # inside the unraisable hook: a signal sent again is noted there, not raised (it would be lost)
    resender: threading.Thread | None = None
    deferring: list | None = None  # inside deferred_interrupts: the signals taken, in order


def _take(signum: int, _frame=None) -> None:
    """The handler of SIGINT and SIGTERM inside ``sigterm_as_interrupt``: raise Ctrl-C's KeyboardInterrupt or
    ``Terminated``, or, inside ``deferred_interrupts``, note the signal for later (a second one raises)."""
    if _Stop.in_hook:  # raised here it would be swallowed again: the helper thread sends it once more
        _Stop.swallowed = signum
        return
    _Stop.swallowed = None  # taken now
    if _Stop.deferring is not None and not _Stop.deferring:
        _Stop.deferring.append(signum)
        return
    raise _interrupt(signum)


def _send_again() -> None:
    """The helper thread: send the swallowed signal to the main thread until its handler takes it (outside a
    finalizer), or the block ends (then it is raised there)."""
    main = threading.main_thread().ident
    while True:
        time.sleep(0.002)  # the finalizer that swallowed it ends first
        with _Stop.lock:  # never after the block has ended (its handlers restored: SIG_DFL would kill unsaid)
            signum = _Stop.swallowed
            if not _Stop.active or signum is None:
                _Stop.resender = None
                return
            signal.pthread_kill(main, signum)
            # held until the handler has run (or 0.1 s: the main thread in a long C call), so the block cannot
            # end with this signal still on its way: it would reach the restored handler after the block raised it
            deadline = time.monotonic() + 0.1
            while _Stop.swallowed == signum and _Stop.active and time.monotonic() < deadline:
                time.sleep(0.0005)


def _unraisable(hook, previous):
    """``sys.unraisablehook``: a KeyboardInterrupt (or ``Terminated``) swallowed in the main thread is a stop
    request that landed in a finalizer: no traceback; it is sent again (``_Stop``). Anything else: as before."""
    exc = getattr(hook, "exc_value", None)
    if not (isinstance(exc, KeyboardInterrupt) and _Stop.active and os.getpid() == _Stop.pid
            and threading.current_thread() is threading.main_thread()):
        return previous(hook)
    _Stop.in_hook = True
    try:
        _Stop.swallowed = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        with _Stop.lock:
            if _Stop.resender is None:
                _Stop.resender = threading.Thread(target=_send_again, name="stop-again", daemon=True)
                _Stop.resender.start()
    finally:
        _Stop.in_hook = False
    return None


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises ``Terminated`` in the main thread while the block runs, and Ctrl-C its KeyboardInterrupt as
    before; one that a finalizer swallowed is taken again after it, never lost and never a traceback (``_Stop``).
    The earlier handlers come back after (in-process callers, tests, keep theirs). Outside the main thread, where
    Python allows no handler, it does nothing."""
    if threading.current_thread() is not threading.main_thread() or _Stop.active:
        yield
        return
    before = signal.signal(signal.SIGTERM, _take)
    before_int = signal.getsignal(signal.SIGINT)
    if before_int is signal.default_int_handler:  # not an ignored SIGINT (`cmd &` in a script) nor a caller's own
        signal.signal(signal.SIGINT, _take)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda hook: _unraisable(hook, previous_hook)
    _Stop.active, _Stop.pid, _Stop.swallowed = True, os.getpid(), None
    try:
        yield
    except BaseException:
        _end(before, before_int, previous_hook)
        raise
    left = _end(before, before_int, previous_hook)
    if left is not None:  # swallowed, and the block ended before it could be taken again: taken here
        raise _interrupt(left)


def _end(before, before_int, previous_hook) -> int | None:
    """Restore the handlers and hook ``sigterm_as_interrupt`` replaced; return a swallowed signal never taken."""
    try:
        with _Stop.lock:
            _Stop.active = False
            left, _Stop.swallowed = _Stop.swallowed, None
    finally:
        signal.signal(signal.SIGTERM, before)
        if signal.getsignal(signal.SIGINT) is _take:
            signal.signal(signal.SIGINT, before_int)
        sys.unraisablehook = previous_hook
    return left


@contextmanager
def deferred_interrupts():
    """Short final steps that must not be cut (the verdict printed and report.html drawn again once an audit has
    replaced its tables): the first SIGINT or SIGTERM meanwhile is noted, not raised; a second one raises (the user
    insists). Yields the list of signals noted ([] or [signum]): the caller says it was interrupted after, and
    exits with its code (``interrupted_exit_code(interrupt(signum))``). Only inside ``sigterm_as_interrupt``
    (the command-line entry points); elsewhere the signals are as they were (nothing is noted)."""
    taken: list[int] = []
    if not _Stop.active or os.getpid() != _Stop.pid or threading.current_thread() is not threading.main_thread():
        yield taken
        return
    outer, _Stop.deferring = _Stop.deferring, taken
    try:
        if _Stop.swallowed is not None:  # a stop a finalizer swallowed just before: noted too
            taken.append(_Stop.swallowed)
            _Stop.swallowed = None
        yield taken
    finally:
        _Stop.deferring = outer


def interrupt(signum: int) -> KeyboardInterrupt:
    """The exception ``sigterm_as_interrupt`` raises for ``signum`` (its ``exit_code`` for the command's)."""
    return _interrupt(signum)


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
