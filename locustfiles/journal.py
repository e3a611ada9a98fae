"""The journal: the client-side history, one JSON line per turn (docs/CONTRACTS.md "Journal").

Each record is written with one unbuffered ``write`` on an ``O_APPEND`` file, so it reaches
the kernel before the next turn starts: a crashed or SIGKILLed process loses at most the line
being written (readers skip a torn last line). The same bytes can be forwarded to a worker's
batch for the master (locustfiles/distributed.py), so the two copies are identical line by line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterator

try:  # orjson is ~4x faster; it comes with the LangChain stack but is optional
    import orjson

    def dumps_line(record: dict) -> bytes:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)

    dumps = orjson.dumps

    _loads = orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson

    def dumps_line(record: dict) -> bytes:
        return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    def dumps(value) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

    _loads = json.loads

FIELDS = ("run", "session", "turn", "kind", "token", "message", "fact", "nonce", "sent", "received",
          "outcome", "status", "reply", "error", "verdict", "crosstalk", "step", "user")


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

    def record(self, record: dict) -> None:
        line = dumps_line(record)
        self.file.write(line)
        if self.forward is not None:
            self.forward(line)
        self.count += 1

    def close(self) -> None:
        self.file.close()


def read_records(path: str | Path) -> Iterator[dict]:
    """The records of one shard; a torn (unparseable) last line is skipped silently."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield _loads(line)
        except ValueError:
            if i == last:
                return
            raise ValueError(f"{path}:{i + 1}: malformed journal line") from None


def shards(run_dir: str | Path) -> list[Path]:
    return sorted((Path(run_dir) / "journal").glob("*.jsonl"))


def complete_lines(data: bytes) -> list[bytes]:
    """The newline-terminated lines of ``data`` (a torn tail is dropped), each with its newline."""
    return [line + b"\n" for line in data.split(b"\n")[:-1]]
