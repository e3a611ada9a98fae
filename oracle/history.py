"""The client-side history: journal shards of a run folder, grouped by session.

Jepsen's outcomes: ``ok`` (acknowledged), ``fail`` (definitely not applied), ``info``
(indeterminate). A crash loses at most the line being written, so a torn last line is
skipped silently; every other malformed line is reported as ``file:line`` and skipped, and
the rest of the journal is still audited.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import msgspec

from oracle import fastjson

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
    outcome: str
    sent: float
    kind: Optional[str] = "chatter"
    token: Optional[str] = None
    received: Optional[float] = None
    verdict: Any = None
    reply: Any = None
    crosstalk: Optional[tuple] = ()
    step: Any = None
    status: Any = None

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
                step=get("step"), status=get("status"))


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
    outcome returns None, and the exact line-by-line loop handles the chunk (and names each
    bad line).
    """
    try:
        turns = list(map(_decode_turn, lines))
    except msgspec.DecodeError:
        return None
    if not {t.outcome for t in turns} <= _OUTCOMES:
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
    if t.outcome not in _OUTCOMES:
        return None
    return _normalise(t), _first_run([raw])


def read_shard(path: Path, sessions: dict[str, list[Turn]], problems: list[str]) -> tuple[int, str | None]:
    """Stream a shard's turns into ``sessions``; return (lines read, run id seen).

    A bad line is held back until the next line arrives: only then do we know whether it
    was the torn last line (skipped silently) or garbage in the middle (reported).
    """
    run = None
    pending: str | None = None  # problem text of the previous bad line, if any
    pending_torn = False
    number = 0
    with open(path, "rb") as fh:
        while lines := fh.readlines(CHUNK_BYTES):
            fast = _typed_chunk(lines)
            if fast is not None:
                if pending is not None:  # a bad line followed by more lines was not the torn last one
                    problems.append(pending)
                    pending = None
                turns, chunk_run = fast
                for turn in turns:
                    sessions.setdefault(turn.session, []).append(turn)
                run = run or chunk_run
                number += len(lines)
                continue
            for number, raw in enumerate(lines, number + 1):
                if not raw.strip():
                    continue
                if pending is not None:
                    problems.append(pending)
                    pending = None
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
                        pending = f"{path}:{number}: skipped malformed journal line ({exc}): {_excerpt(raw)}"
                        pending_torn = not raw.endswith(b"\n") or _looks_torn(raw)
                        continue
                    line_run = record.get("run")
                run = run or line_run
                sessions.setdefault(turn.session, []).append(turn)
    if pending is not None and not pending_torn:
        problems.append(pending)
    return number, run


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


def load_journal(run_dir: str | Path) -> Journal:
    """Every shard under ``run_dir/journal``; turns sorted by index within each session."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise JournalError(f"{run_dir} is not a run folder (no such directory)")
    shards = sorted((run_dir / "journal").glob("*.jsonl"))
    if not shards:
        raise JournalError(f"{run_dir} has no journal: expected {run_dir / 'journal'}/*.jsonl "
                           "(is this a run folder?)")
    sessions: dict[str, list[Turn]] = {}
    problems: list[str] = []
    lines, run = 0, None
    for shard in shards:
        n, shard_run = read_shard(shard, sessions, problems)
        lines += n
        run = run or shard_run
    if not sessions:
        detail = f"; first problem: {problems[0]}" if problems else ""
        raise JournalError(f"{run_dir / 'journal'} holds no valid journal records ({lines} lines in "
                           f"{len(shards)} shard(s)){detail}")
    for session, turns in sessions.items():
        numbers = [t.turn for t in turns]
        if numbers == sorted(set(numbers)):
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
    return Journal(run=run or run_dir.name, sessions=sessions, problems=problems, shards=shards, lines=lines)
