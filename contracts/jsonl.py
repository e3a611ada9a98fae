"""The one JSON Lines reader for every ``.jsonl`` file of a run folder.

One torn-line rule: a writer appends a record and its newline in one ``write``, so a crash can
leave at most the last line cut short, with no newline after it. That line is skipped silently.
Every other line that does not decode is reported as ``file:line: reason; skipped: <excerpt>``
(to ``problems`` when given, else as ``JsonlError``) and the rest of the file is still read.
Blank lines are skipped. Files are read in chunks of whole lines: memory stays flat however long
the file is.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

from contracts import codec
from contracts.runfolder import open_regular

CHUNK_BYTES = 8 << 20


class JsonlError(ValueError):
    """A line that is not a record (``file:line: reason``), when no problems list collects it."""


record = codec.loads_object  # a line of every run-folder file is a JSON object


def read_jsonl(path: str | Path, decode: Callable = record, problems: list[str] | None = None) -> Iterator:
    """Each line's ``decode``d record, in file order (see the module docstring for bad lines)."""
    for _, chunk in read_chunks(path, None, decode, problems):
        yield from chunk


def line_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, list[bytes], bool]]:
    """(number of lines before the chunk, its whole lines with their newlines, whether it is the last)."""
    number = 0
    with open_regular(path) as fh:
        lines = fh.readlines(chunk_bytes)
        while lines:
            following = fh.readlines(chunk_bytes)
            yield number, lines, not following
            number += len(lines)
            lines = following


def torn(raw: bytes, last_line: bool) -> bool:
    """The line a crash was writing: the last one, with no newline after it."""
    return last_line and not raw.endswith(b"\n")


def read_chunks(path: str | Path, decode_chunk: Callable[[list[bytes]], list | None] | None, decode: Callable,
                problems: list[str] | None = None, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, list]]:
    """(number of lines before the chunk, its records) per chunk of whole lines.

    ``decode_chunk`` decodes a whole chunk at once (or returns None when a line in it is bad);
    ``decode`` decodes one line and raises ValueError saying what is wrong with it."""
    path = Path(path)
    for before, lines, last in line_chunks(path, chunk_bytes):
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
