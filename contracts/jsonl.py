"""The one JSON Lines reader for every ``.jsonl`` file of a run folder.

One torn-line rule: a writer appends a record and its newline in one ``write``, so a crash can
leave at most the last line cut short, with no newline after it. That line is skipped silently.
Every other line that does not decode is reported as ``file:line: reason; skipped: <excerpt>``
(to ``problems`` when given, else as ``JsonlError``) and the rest of the file is still read.
Blank lines are skipped. Files are read in chunks of whole lines: memory stays flat however long
the file is, and however long a line is: a line longer than ``LINE_BYTES`` is not a record (a turn is a
few KB) and is never held whole: it is skipped to its newline and reported as ``file:line: longer than
N bytes; skipped: <its beginning>`` (the last one, with no newline after it, is the torn line still).
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Callable, Iterator

from contracts import codec
from contracts.runfolder import open_regular

CHUNK_BYTES = 8 << 20
LINE_BYTES = 64 << 20  # a longer line is not a record; as oracle/rolling.py's LINE_LIMIT (a snapshot line is a
                       # session's whole stored history, read by this reader too)


class JsonlError(ValueError):
    """A line that is not a record (``file:line: reason``), when no problems list collects it."""


record = codec.loads_object  # a line of every run-folder file is a JSON object


def read_jsonl(path: str | Path, decode: Callable = record, problems: list[str] | None = None) -> Iterator:
    """Each line's ``decode``d record, in file order (see the module docstring for bad lines)."""
    for _, chunk in read_chunks(path, None, decode, problems):
        yield from chunk


def line_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES,
                limit: int = LINE_BYTES) -> Iterator[tuple[int, list[bytes], bool]]:
    """(number of lines before the chunk, its whole lines with their newlines, whether it is the last).
    A line longer than ``limit`` bytes comes as a ``LongLine``."""
    number = 0
    chunk_bytes = min(chunk_bytes, limit)  # so only a chunk's last line can be too long
    with open_regular(path) as fh:
        lines = _whole_lines(fh, chunk_bytes, limit)
        while lines:
            following = _whole_lines(fh, chunk_bytes, limit)
            yield number, lines, not following
            number += len(lines)
            lines = following


def _whole_lines(fh, chunk_bytes: int, limit: int) -> list[bytes]:
    """The next ``chunk_bytes`` of ``fh`` as lines, the last one read on to its newline (at most ``limit``
    bytes: past that, skipped to its newline in blocks, and a LongLine in its place)."""
    lines = io.BytesIO(fh.read(chunk_bytes)).readlines()  # faster than fh.readlines(hint), which is unbounded
    if lines and not lines[-1].endswith(b"\n"):
        start, rest = lines[-1], fh.readline(limit + 1 - len(lines[-1]))
        if len(start) + len(rest) <= limit:
            lines[-1] = start + rest
        else:
            ended = rest.endswith(b"\n")
            while not ended:
                block = fh.readline(1 << 20)
                if not block:
                    break
                ended = block.endswith(b"\n")
            lines[-1] = LongLine.of((start + rest[:200])[:200], limit, ended)
    return lines


class LongLine(bytes):
    """In place of a line longer than the limit: a NUL (no record decodes from it) and the line's newline if
    it had one (the torn-line rule); ``head`` is its beginning, ``reason`` what ``problem`` says of it."""
    head: bytes
    reason: str

    @classmethod
    def of(cls, head: bytes, limit: int, ended: bool) -> "LongLine":
        stand_in = cls(b"\0\n" if ended else b"\0")
        stand_in.head, stand_in.reason = head, f"longer than {limit:,} bytes (not a record)"
        return stand_in


def torn(raw: bytes, last_line: bool) -> bool:
    """The line a crash was writing: the last one, with no newline after it, and no NUL in it. A writer writes no
    NUL; a file system that lost a file's last blocks in a crash fills them with NULs, and lines whose bytes were
    lost are damage, not a line in flight (a failed probe zeroed so PASSed, exit 0: input hunt 15)."""
    return last_line and not raw.endswith(b"\n") and b"\0" not in (raw.head if isinstance(raw, LongLine) else raw)


def read_chunks(path: str | Path, decode_chunk: Callable[[list[bytes]], list | None] | None, decode: Callable,
                problems: list[str] | None = None, chunk_bytes: int = CHUNK_BYTES,
                limit: int = LINE_BYTES) -> Iterator[tuple[int, list]]:
    """(number of lines before the chunk, its records) per chunk of whole lines.

    ``decode_chunk`` decodes a whole chunk at once (or returns None when a line in it is bad);
    ``decode`` decodes one line and raises ValueError saying what is wrong with it."""
    path = Path(path)
    for before, lines, last in line_chunks(path, chunk_bytes, limit):
        fast = decode_chunk(lines) if decode_chunk is not None else None
        if fast is not None:
            yield before, fast
            continue
        records = []
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                records.append(decode(raw))
            except ValueError as exc:
                if not torn(raw, last and i == len(lines) - 1):
                    report(problems, problem(path, before + i + 1, exc, raw))
        yield before, records


def problem(path, number: int, exc: BaseException, raw: bytes) -> str:
    """How a bad line is named: ``file:line: reason; skipped: <excerpt>``."""
    if isinstance(raw, LongLine):
        exc, raw = raw.reason, raw.head
    return f"{printable(path)}:{number}: {exc}; skipped: {excerpt(raw)}"


def printable(path) -> str:
    """A file name as text that can be written anywhere: a byte that is not UTF-8 (a name os.listdir decoded
    with surrogate escapes) is shown as \\xNN, never a lone surrogate no JSON or UTF-8 writer accepts."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def report(problems: list[str] | None, text: str) -> None:
    if problems is None:
        raise JsonlError(text)
    problems.append(text)


def excerpt(raw: bytes, limit: int = 80) -> str:
    """A short, printable view of a bad line for a message."""
    text = raw.rstrip(b"\n").decode("utf-8", "replace")
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def complete_lines(data: bytes) -> list[bytes]:
    """The newline-terminated lines of ``data`` (a torn tail is dropped), each with its newline."""
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def cr_only_note(paths) -> str:
    """``; line ends are CR only ...`` naming the files among ``paths`` whose line ends are carriage returns (an
    old Mac's: CRs and no newline in their first MB), else "": such a file reads as one torn line, skipped
    silently, so a "holds no records" message says why with it."""
    def cr_only(path) -> bool:
        try:
            with open_regular(path) as fh:
                block = fh.read(1 << 20)
        except OSError:
            return False
        return b"\r" in block and b"\n" not in block

    bad = [printable(path) for path in paths if cr_only(path)]
    return f"; line ends are CR only (carriage returns, no newline) in {', '.join(bad)}: lines must end in \\n " \
           "or \\r\\n (convert with: tr '\\r' '\\n')" if bad else ""
