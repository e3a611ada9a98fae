"""The client-side history: journal shards of a run folder, grouped by session.

Jepsen's outcomes: ``ok`` (acknowledged), ``fail`` (definitely not applied), ``info``
(indeterminate). A crash loses at most the line being written, so a torn last line is
skipped silently; every other malformed line is reported as ``file:line`` and skipped, and
the rest of the journal is still audited.
"""
from __future__ import annotations

import operator
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import msgspec

from oracle import fastjson
from oracle.parallel import run_parts

OUTCOMES = ("ok", "fail", "info")
_OUTCOMES = frozenset(OUTCOMES)
REQUIRED = ("session", "turn", "outcome", "sent")


class JournalError(Exception):
    """The run folder has no usable journal (nothing to audit)."""


class Turn(msgspec.Struct, gc=False):
    """One journaled turn, only the fields the oracle judges by.

    A msgspec struct so a well-formed journal line decodes straight into it in one C call
    (other fields are skipped); ``_turn`` builds the same struct from any line that does not
    fit the types below and says what is wrong with it.
    """
    session: str
    turn: int
    outcome: Literal[OUTCOMES]  # checked in C; the three shared strings, not a copy per line
    sent: float
    kind: Optional[str] = "chatter"
    token: Optional[str] = None
    received: Optional[float] = None
    verdict: Any = None
    reply: Any = None
    crosstalk: Optional[tuple] = ()
    step: Any = None
    status: Any = None
    error: Any = None

    @property
    def latency(self) -> float | None:
        return None if self.received is None else self.received - self.sent


class _Run(msgspec.Struct):
    run: Any = None


_decode_turn = msgspec.json.Decoder(Turn).decode
_decode_run = msgspec.json.Decoder(_Run).decode


@dataclass
class Journal:
    run: str | None
    sessions: dict[str, list[Turn]]
    problems: list[str] = field(default_factory=list)
    shards: list[Path] = field(default_factory=list)
    lines: int = 0


def _turn(record: dict) -> Turn:
    """A Turn from a parsed journal record; ValueError naming what is wrong (the exact path)."""
    get = record.get
    session, turn, outcome, sent = get("session"), get("turn"), get("outcome"), get("sent")
    if session is None or turn is None or outcome is None or sent is None:
        missing = next(n for n in REQUIRED if get(n) is None)
        raise ValueError(f"missing field {missing!r}")
    if outcome not in _OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of ok/fail/info")
    if type(session) is not str:
        session = str(session)
    turn = int(turn)
    received = get("received")
    crosstalk = get("crosstalk")
    return Turn(session, turn, outcome, float(sent), kind=get("kind") or "chatter",
                token=get("token") or f"{session}t{turn}", received=None if received is None else float(received),
                verdict=get("verdict"), reply=get("reply"), crosstalk=tuple(crosstalk) if crosstalk else (),
                step=get("step"), status=get("status"), error=get("error"))


def _normalise(t: Turn) -> Turn:
    """Give a typed-decoded turn the defaults ``_turn`` gives (rare: kind/token/crosstalk null or empty)."""
    if not t.kind:
        t.kind = "chatter"
    if not t.token:
        t.token = f"{t.session}t{t.turn}"
    if not t.crosstalk:
        t.crosstalk = ()
    return t


CHUNK_BYTES = 8 << 20  # journal read in chunks of ~8 MB of whole lines: bounded memory, few C calls


def _typed_chunk(lines: list[bytes]):
    """Fast path for a chunk of lines that are all well formed: (turns, run), else None.

    One msgspec call per line decodes it straight into a Turn (no dict, no Python
    constructor). Any blank, torn or malformed line, a missing required field or an unknown
    outcome (a ``Literal``, so msgspec refuses it) returns None, and the exact line-by-line
    loop handles the chunk (and names each bad line).
    """
    try:
        turns = list(map(_decode_turn, lines))
    except msgspec.DecodeError:
        return None
    for t in turns:
        if not (t.kind and t.token and t.crosstalk is not None):
            _normalise(t)
    return turns, _first_run(lines)


def _first_run(lines: list[bytes]):
    """The run id of the first line that names one (every line normally does)."""
    for raw in lines:
        try:
            run = _decode_run(raw).run
        except msgspec.DecodeError:
            continue
        if run:
            return run
    return None


def _typed_turn(raw: bytes):
    """Fast path for one line: (Turn, run) when it fits the types, else None and ``_turn`` decides."""
    try:
        t = _decode_turn(raw)
    except msgspec.DecodeError:
        return None
    return _normalise(t), _first_run([raw])


@dataclass
class _Segment:
    """What reading one byte range of a shard found; line numbers count from the range's start."""
    turns: list = field(default_factory=list)
    packed: int | None = None  # crossing from a forked process: the turns' msgpack length in its file
    lines: int = 0
    run: Any = None
    bad: list = field(default_factory=list)  # [(line number, problem, looks torn)]
    last: int = 0  # number of the last non-blank line


def _read_segment(path: Path, start: int, end: int) -> _Segment:
    """The turns of the whole lines in bytes [start, end) of a shard (both at line starts).

    Chunks of well-formed lines decode in one pass (``_typed_chunk``); a chunk holding any bad
    line goes line by line, and each bad line is kept with its number: whether it is the torn
    last line of the shard (skipped silently) or garbage (reported) is only known once every
    range of the shard has been read.
    """
    seg = _Segment()
    number = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while (left := end - fh.tell()) > 0 and (lines := fh.readlines(min(CHUNK_BYTES, left))):
            over = fh.tell() - end  # readlines may pass the hint by a line: those belong to the next range
            while over > 0:
                over -= len(lines.pop())
            fast = _typed_chunk(lines)
            if fast is not None:
                seg.turns += fast[0]
                seg.run = seg.run or fast[1]
                number += len(lines)
                seg.last = number
                continue
            for number, raw in enumerate(lines, number + 1):
                if not raw.strip():
                    continue
                seg.last = number
                typed = _typed_turn(raw)
                if typed is not None:
                    turn, line_run = typed
                else:
                    try:
                        record = fastjson.loads(raw)
                        if not isinstance(record, dict):
                            raise ValueError("not a JSON object")
                        turn = _turn(record)
                    except (ValueError, TypeError) as exc:
                        seg.bad.append((number, f"skipped malformed journal line ({exc}): {_excerpt(raw)}",
                                        not raw.endswith(b"\n") or _looks_torn(raw)))
                        continue
                    line_run = record.get("run")
                seg.run = seg.run or line_run
                seg.turns.append(turn)
    seg.lines = number
    return seg


def _looks_torn(raw: bytes) -> bool:
    """A torn line is a JSON object cut short: it starts like one and does not parse."""
    try:
        fastjson.loads(raw)
    except ValueError:
        return raw.lstrip().startswith(b"{")
    return False


def _excerpt(raw: bytes, limit: int = 80) -> str:
    text = raw.decode("utf-8", "replace")
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def load_journal(run_dir: str | Path, jobs: int = 1) -> Journal:
    """Every shard under ``run_dir/journal``; turns sorted by index within each session.

    A journal of PARALLEL_MIN_BYTES or more is decoded by ``jobs`` processes at once (this one
    and jobs - 1 forked ones, each a byte range cut at line ends); the result is the same.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise JournalError(f"{run_dir} is not a run folder (no such directory)")
    shards = sorted((run_dir / "journal").glob("*.jsonl"))
    if not shards:
        raise JournalError(f"{run_dir} has no journal: expected {run_dir / 'journal'}/*.jsonl "
                           "(is this a run folder?)")
    sessions: dict[str, list[Turn]] = defaultdict(list)  # a plain dict again before it is handed out
    problems: list[str] = []
    lines, run = 0, None
    by_shard: dict[int, list[_Segment]] = defaultdict(list)
    for index, seg in _read_segments(shards, jobs):
        by_shard[index].append(seg)
    for index, shard in enumerate(shards):
        n, shard_run = _merge_shard(shard, by_shard[index], sessions, problems)
        lines += n
        run = run or shard_run
    if not sessions:
        detail = f"; first problem: {problems[0]}" if problems else ""
        raise JournalError(f"{run_dir / 'journal'} holds no valid journal records ({lines} lines in "
                           f"{len(shards)} shard(s)){detail}")
    for session, turns in sessions.items():
        numbers = [t.turn for t in turns]
        if all(map(operator.lt, numbers, numbers[1:])):
            continue  # already in order, no turn twice (the usual case): nothing to do
        turns.sort(key=lambda t: t.turn)
        seen: set[int] = set()
        unique = []
        for t in turns:
            if t.turn in seen:
                problems.append(f"journal: session {session} turn {t.turn} journaled twice; kept the first")
                continue
            seen.add(t.turn)
            unique.append(t)
        sessions[session] = unique
    return Journal(run=run or run_dir.name, sessions=dict(sessions), problems=problems, shards=shards, lines=lines)


def _merge_shard(path: Path, segments: list[_Segment], sessions: defaultdict, problems: list[str]):
    """Add one shard's segments (in file order) to ``sessions``; returns (lines, run id seen).

    A bad line is reported as ``file:line``, except a torn last line: a crash loses at most
    the line being written, so that one is skipped silently.
    """
    offset, run, last, bad = 0, None, 0, []
    for seg in segments:
        for turn in seg.turns:
            sessions[turn.session].append(turn)
        bad += [(offset + number, problem, torn) for number, problem, torn in seg.bad]
        if seg.last:
            last = offset + seg.last
        offset += seg.lines
        run = run or seg.run
    problems += [f"{path}:{number}: {problem}" for number, problem, torn in bad if not (torn and number == last)]
    return offset, run


PARALLEL_MIN_BYTES = 64 << 20  # below this a journal decodes faster than processes start
_pack = msgspec.msgpack.Encoder().encode  # a Turn crosses to the parent as msgpack: ~3x cheaper than JSON to decode
_unpack = msgspec.msgpack.Decoder(list[Turn]).decode


def _read_segments(shards: list[Path], jobs: int) -> list[tuple[int, _Segment]]:
    """(shard index, segment) for every byte range of the journal, in file order."""
    sizes = [shard.stat().st_size for shard in shards]
    if jobs <= 1 or sum(sizes) < PARALLEL_MIN_BYTES:
        return [(i, _read_segment(shard, 0, size)) for i, (shard, size) in enumerate(zip(shards, sizes))]

    def work(k: int, part: list) -> list:
        segments = [(i, _read_segment(shards[i], start, end)) for i, start, end in part]
        if k > 0:  # to the parent through a file: a pipe moves a hundred megabytes several times slower
            for _, seg in segments:
                try:
                    data = _pack(seg.turns)
                except (OverflowError, msgspec.EncodeError):  # an integer beyond 64 bits: the pipe pickles these
                    continue
                spills[k].write(data)
                seg.turns, seg.packed = [], len(data)
            spills[k].flush()
        return segments

    parts = _plan(shards, sizes, jobs)
    spills = [tempfile.TemporaryFile() for _ in parts]
    out = []
    try:
        for spill, segments in zip(spills, run_parts(work, parts, here=True)):
            spill.seek(0)
            for i, seg in segments:
                if seg.packed is not None:
                    seg.turns = _unpack(spill.read(seg.packed))
                out.append((i, seg))
    finally:
        for spill in spills:
            spill.close()
    return out


def _plan(shards: list[Path], sizes: list[int], jobs: int) -> list[list[tuple[int, int, int]]]:
    """``jobs`` parts of about equal bytes, each a list of (shard index, start, end) cut at line starts."""
    cuts = [sum(sizes) * k // jobs for k in range(1, jobs)]  # where, over all shards, a part should end
    parts: list[list] = [[]]
    base = 0
    for i, (shard, size) in enumerate(zip(shards, sizes)):
        start = 0
        while cuts and cuts[0] < base + size:
            cut = max(start, _line_start(shard, cuts.pop(0) - base))
            if cut > start:
                parts[-1].append((i, start, cut))
                start = cut
            parts.append([])
        if size > start:
            parts[-1].append((i, start, size))
        base += size
    return [part for part in parts if part]


def _line_start(path: Path, offset: int) -> int:
    """The first line start at or after ``offset``."""
    if offset <= 0:
        return 0
    with open(path, "rb") as fh:
        fh.seek(offset - 1)
        fh.readline()
        return fh.tell()
