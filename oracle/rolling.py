"""What the rolling audit keeps of each session it judged, and how the final audit takes it back.

One file per partition and journal shard, ``audit/rolling/judged.<shard>.NN.jsonl``: a line per
session with its judgement, the fingerprint of its journal lines, the digest of its key
(``redis_reader.digest``) and its stored history as the snapshot line it would have. Per shard,
the rolling audit judges sessions in the order they complete, which is the order the final audit
meets them in, so reading the file back needs a short look-ahead only, never the whole file.
"""
from __future__ import annotations

import sys
import zlib
from collections import OrderedDict
from pathlib import Path

import msgspec

from contracts.runfolder import RunFolder, open_append, open_regular
from oracle.history import SessionLines

LOOKAHEAD = 4096  # records read past the one wanted before giving up on it (it is then read from the store)
LINE_LIMIT = 64 << 20  # bytes of one record: a longer line ends the reading of its file (memory stays bounded)


class Judged(msgspec.Struct):
    """One session's judgement by the rolling audit."""
    session: str
    journal: int                  # crc32 of its journal lines: a line added since means judging it again
    digest: list                  # its key's digest then
    entries: int
    exists: bool
    findings: list
    stats: dict | None
    lost: list
    anomalous: list
    stored: msgspec.Raw = msgspec.Raw(b"null")  # its snapshot line, as the JSON it is


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Judged).decode


def journal_print(entry: SessionLines) -> int:
    """The fingerprint of a session's journal lines."""
    return zlib.crc32(b"".join(raw for _, raw in entry.lines))


def _name(shard: str) -> str:
    return f"judged.{Path(shard).stem}"


class RollingWriter:
    """The rolling audit's judgements of one partition, appended pass after pass."""

    def __init__(self, folder: RunFolder, p: int):
        self.folder, self.p, self.files = folder, p, {}

    def write(self, shard: str, judged: Judged, snapshot_line: bytes) -> None:
        if shard not in self.files:
            path = self.folder.rolling_part(self.p, _name(shard))
            try:
                self.files[shard] = open_append(path)
            except OSError as exc:  # passed over, as RollingPrior passes it over: these sessions cost reads at the
                self.files[shard] = None  # end (the final audit reads them from the store), never results
                print(f"oracle follow: {path}: {exc.strerror or exc}; this shard's judgements are not kept (the final "
                      "audit reads its sessions from the store)", file=sys.stderr)
        fh = self.files[shard]
        if fh is None:
            return
        judged.stored = msgspec.Raw(snapshot_line.rstrip(b"\n"))
        fh.write(_encode(judged) + b"\n")

    def close(self) -> None:
        for fh in self.files.values():
            if fh is not None:
                fh.close()


class RollingPrior:
    """The rolling audit's judgements of one partition, read back in step with the final audit."""

    def __init__(self, folder: RunFolder, p: int):
        self.folder, self.p = folder, p
        self.shards: dict[str, _ShardPrior] = {}

    @staticmethod
    def exists(folder: RunFolder, p: int) -> bool:
        return any((folder.audit / "rolling").glob(f"judged.*.{p:02d}.jsonl"))

    def take(self, entries: list[SessionLines]) -> dict[str, Judged]:
        """The judgements of those of ``entries`` the rolling audit judged."""
        found = {}
        for e in entries:
            shard = self.shards.get(e.shard)
            if shard is None:
                shard = self.shards[e.shard] = _ShardPrior(self.folder.rolling_part(self.p, _name(e.shard)))
            judged = shard.take(e.session)
            if judged is not None:
                found[e.session] = judged
        return found

    def close(self) -> None:
        for shard in self.shards.values():
            shard.close()


class _ShardPrior:
    def __init__(self, path: Path):
        try:  # a FIFO, a device or a directory in its place is passed over: its sessions are read from the store
            self.fh = open_regular(path)
        except OSError:
            self.fh = None
        self.ahead: OrderedDict[str, Judged] = OrderedDict()

    def take(self, session: str) -> Judged | None:
        while session not in self.ahead and self.fh is not None and len(self.ahead) < LOOKAHEAD:
            line = self.fh.readline(LINE_LIMIT)
            if not line.endswith(b"\n"):  # the end, the line a killed rolling audit was writing, or one too long
                self.close()
                break
            try:
                judged = _decode(line)
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue  # not a judgement: that session is simply read from the store
            self.ahead[judged.session] = judged
        if session not in self.ahead:
            return None
        while True:  # the records before it belong to sessions already met: never wanted again
            got_session, judged = self.ahead.popitem(last=False)
            if got_session == session:
                return judged

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
