"""The journal writer: the client-side history, one record per turn (the record and its line
format are contracts.journal's).

Each record is written with one unbuffered ``write`` on an ``O_APPEND`` file, so it reaches
the kernel before the next turn starts: a crashed or SIGKILLed process loses at most the line
being written (readers skip a torn last line: contracts.jsonl). The same bytes can be forwarded
to a worker's batch for the master (locustfiles/distributed.py), so the two copies are identical
line by line.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from contracts.journal import Turn, encode_line


class JournalFile:
    """An append-only JSONL file, one ``write`` syscall per record (a raw fd: no Python file layers)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def write(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        while written < len(data):  # short writes are rare (full disk, signals); finish the line
            data = data[written:]
            written = os.write(self._fd, data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Journal:
    """Writes turn records to a local shard and hands each line to ``forward`` (if any)."""

    def __init__(self, path: str | Path, forward: Callable[[bytes], None] | None = None):
        self.file = JournalFile(path)
        self.forward = forward
        self.count = 0

    @property
    def path(self) -> Path:
        return self.file.path

    def record(self, turn: Turn) -> None:
        line = encode_line(turn)
        self.file.write(line)
        if self.forward is not None:
            self.forward(line)
        self.count += 1

    def close(self) -> None:
        self.file.close()
