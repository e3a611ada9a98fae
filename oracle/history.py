"""The client-side history: a run's journal, streamed session by session as conversations complete.

Memory stays flat however long the run: a Locust user holds one conversation at a time, so a
session is complete as soon as the same user starts its next one (records carry ``user``), or
when its shard ends. Only conversations still open are held, as raw lines: the parent process
reads just ``session`` and ``user`` of each line, and the process that judges a batch decodes
the whole record (``decode_turns``). File reading and the torn-line rule are contracts.jsonl's;
the record is contracts.journal's. Jepsen's outcomes: ``ok`` (acknowledged), ``fail``
(definitely not applied), ``info`` (indeterminate).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import msgspec

from contracts import codec
from contracts.journal import RecordError, Turn, decode_chunk, decode_line, differences, one_per_turn
from contracts.jsonl import cr_only_note, line_chunks, problem, torn
from contracts.runfolder import RunFolder, open_regular


class JournalError(Exception):
    """The run folder has no usable journal (nothing to audit)."""


class NoRecords(JournalError):
    """The journal holds no valid record: no turn was journaled."""


class _Key(msgspec.Struct):
    """What the parent reads of a line: whose it is (the rest is decoded where it is judged)."""
    session: str = ""
    user: Optional[str] = None
    run: Optional[str] = None


_decode_key = msgspec.json.Decoder(_Key).decode


class _Source(msgspec.Struct):
    session: str = ""
    turn: int = -1
    sent: float = 0.0
    kind: Any = None   # any type: a line with an odd kind or nonce still gives its send time
    nonce: Any = None


_decode_source = msgspec.json.Decoder(_Source).decode


@dataclass(slots=True)
class SessionLines:
    """One completed session's journal lines, (line number, raw line), not decoded yet."""
    shard: str
    session: str
    lines: list = field(default_factory=list)


MAX_PROBLEMS = 100  # problem texts kept: the count is exact, the texts are examples


@dataclass
class Problems:
    """Warnings as the audit keeps them: the first MAX_PROBLEMS texts and how many there were (a journal
    of a million bad lines is not a million warnings held in memory and written to summary.json)."""
    texts: list = field(default_factory=list)
    total: int = 0

    def add(self, describe) -> None:
        """One more problem; ``describe()`` gives its text, called only while there is room (describing
        a bad line decodes it again)."""
        if len(self.texts) < MAX_PROBLEMS:
            self.texts.append(describe())
        self.total += 1

    def extend(self, texts: list[str]) -> None:
        self.texts += texts[:MAX_PROBLEMS - len(self.texts)]
        self.total += len(texts)

    def merge(self, other: "Problems") -> None:
        self.texts += other.texts[:MAX_PROBLEMS - len(self.texts)]
        self.total += other.total


PARTITIONS = 16  # the audit's fixed shares of the users (oracle/judge.py): its output never depends on jobs


def partition_of(key: str) -> int:
    """The partition of a user id (or of a session id, for a record without a user)."""
    return zlib.crc32(key.encode()) % PARTITIONS


@dataclass
class Journal:
    """A run's journal as a stream of completed sessions, and what reading it found."""
    folder: RunFolder
    problems: Problems = field(default_factory=Problems)  # lines that name no session, copies not merged
    unreadable: int = 0                           # lines that are not a turn (blank and torn last lines are not)
    damaged: bool = False                         # any such line, in any partition (``unreadable`` counts partition 0's)
    run: str | None = None
    shards: list = field(default_factory=list)    # the files read, in order (journal_files)
    copies: list = field(default_factory=list)    # the workers' copies read instead of the master's

    @classmethod
    def open(cls, run_dir: str | Path) -> "Journal":
        folder = RunFolder(run_dir)
        if not folder.path.is_dir():
            raise JournalError(f"{folder.path} is not a run folder ("
                               + ("no such directory" if not folder.path.exists() else "not a directory") + ")")
        shards, copies, problems = journal_files(folder)
        if not shards:
            raise JournalError(f"{folder.path} has no journal: expected {folder.journal}/*.jsonl "
                               "(is this a run folder?)")
        return cls(folder, Problems(problems, len(problems)), shards=shards, copies=copies)

    def require_records(self) -> None:
        """JournalError unless some line of the journal is a turn, and unless every file's first turn names one
        run: two runs' journals are never judged together (another run's shard copied into journal/ or workers/
        was judged with this one's, silently). Each file is read up to its first turn."""
        runs, first = {}, None
        for shard in self.shards:
            turn, bad = first_turn(shard)
            first = first or bad
            if turn is not None:
                runs.setdefault(turn.run, shard)
        if len(runs) > 1:
            named = "; ".join(f"{shard.relative_to(self.folder.path)} is run {run!r}" for run, shard in runs.items())
            raise JournalError(f"{self.folder.journal}: the journal holds more than one run ({named}): two runs' "
                               "journals are never judged together; move the other run's files out of this folder")
        if not runs:
            raise NoRecords(f"{self.folder.journal} holds no valid journal records"
                               + (f"; first problem: {first}" if first else "") + cr_only_note(self.shards))

    def require_own_run(self) -> None:
        """JournalError when the journal's run is not the one run.json records: another run's journal in this
        folder, read live, was judged against this run's store and chaos, PASSed, and replaced this run's snapshot;
        re-audited from the snapshot, it took the other run's trust fields (a cut-short run's NOT TRUSTED a PASS),
        plan and label. None recorded (no run.json, none readable, no "run": a folder built by hand) is no check.
        Each file is read up to its first turn (``require_records`` has made sure they name one run)."""
        recorded = self._recorded_run()
        for shard in self.shards if recorded is not None else ():
            turn, _ = first_turn(shard)
            if turn is not None and turn.run is not None and turn.run != recorded:
                raise JournalError(f"{shard} is run {turn.run!r}, but {self.folder.run_json} is run {recorded!r}: "
                                   "another run's journal in this folder would be judged against this run's store "
                                   "and chaos, and replace its snapshot; put this run's own journal back (or audit "
                                   "the other run's folder)")

    def _recorded_run(self) -> str | None:
        """The run id run.json records (None: no run.json, or none readable: a folder built by hand)."""
        try:
            value = codec.load_document(self.folder.run_json).get("run")
        except (OSError, codec.DecodeError, AttributeError):
            return None
        if value is not None and not isinstance(value, str):  # a number or a list switched the check off: PASS of
            # another run's journal (input hunt 15)
            raise JournalError(f"{self.folder.run_json}: run is {codec.short(value)}, not a run id (text): whether the "
                               "journal is this run's cannot be told; repair it (a copy of it)")
        return value

    def completed(self, partitions: set[int] | None = None) -> Iterator[tuple[int, SessionLines]]:
        """(partition, session) for every journaled session of ``partitions`` (all: None), once, as
        soon as it is complete, shard by shard. A line that names no session counts in partition 0."""
        for shard in self.shards:
            yield from self._shard(shard, partitions)

    def _shard(self, shard: Path, partitions: set[int] | None) -> Iterator[tuple[int, SessionLines]]:
        grouper = Grouper(self, str(shard), partitions)
        for before, lines, last_chunk in line_chunks(shard):
            yield from grouper.feed(before, lines, last_chunk)
        yield from grouper.finish()

    def look_up(self, sessions: set[str], values: set[str]) -> tuple[dict, dict]:
        """What rootcause needs of sessions judged in other batches, in one cheap pass over the journal:
        (session, turn) -> send time of every turn of ``sessions``; and value -> (session, turn, send time)
        of the plant turn that planted each of ``values`` (absent: no turn of the run planted it)."""
        sent, planted = {}, {}
        for shard in self.shards:
            for _, lines, _ in line_chunks(shard):
                for raw in lines:
                    try:
                        t = _decode_source(raw[3:] if raw.startswith(BOM) else raw)  # as _key
                    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                        continue
                    if t.session in sessions:
                        sent[(t.session, t.turn)] = t.sent
                    if t.kind == "plant" and isinstance(t.nonce, str) and t.nonce in values:
                        planted.setdefault(t.nonce, (t.session, t.turn, t.sent))
        return sent, planted


def first_turn(shard: Path) -> tuple[Turn | None, str | None]:
    """The first turn of a journal file, and the first line before it that is not one (``file:line: why``)."""
    first = None
    for before, lines, last in line_chunks(shard):
        for i, raw in enumerate(lines):
            if not raw.strip() or torn(raw, last and i == len(lines) - 1):
                continue
            try:
                return decode_line(raw), first
            except RecordError as exc:
                first = first or problem(str(shard), before + i + 1, exc, raw)
    return None, first


def journal_files(folder: RunFolder) -> tuple[list[Path], list[dict], list[str]]:
    """The journal's shards, each replaced by its worker's own copy (``workers/<id>.jsonl``) when that
    copy holds every line of the master's and more: the master was killed before the last batches
    came, or the copy was brought from the worker's machine. Returns (files, copies read, problems)."""
    files = {p.name: p for p in folder.shards()}
    copies, problems = [], []
    for copy in folder.worker_copies():
        master = files.get(copy.name)
        extra = _lines_beyond(master, copy)
        if extra is None:
            problems.append(f"{copy} is not a copy of {master} (their lines differ): not merged; the audit "
                            f"reads {master} only")
        elif extra:
            files[copy.name] = copy
            copies.append({"shard": copy.name, "read": str(copy.relative_to(folder.path)), "lines_added": extra,
                           "master": str(master.relative_to(folder.path)) if master else None})
    return [files[name] for name in sorted(files)], copies, problems


def _lines_beyond(master: Path | None, copy: Path) -> int | None:
    """Whole lines the worker's copy holds past the end of the master's complete lines; None when the
    master's lines are not the copy's first lines."""
    if master is not None and copy.stat().st_size <= master.stat().st_size:
        return 0  # nothing past the master's lines (a copy that is not one costs nothing: the master's is read)
    with open_regular(copy) as theirs:
        if master is not None:
            with open_regular(master) as ours:
                ours.seek(0, 2)
                size = ours.tell()
                at = size  # the master's complete lines end at its last newline
                while at > 0:
                    ours.seek(max(0, at - 65536))
                    block = ours.read(at - max(0, at - 65536))
                    newline = block.rfind(b"\n")
                    if newline >= 0:
                        at = at - len(block) + newline + 1
                        break
                    at -= len(block)
                ours.seek(0)
                left = at
                while left:
                    a, b = ours.read(min(left, 1 << 20)), theirs.read(min(left, 1 << 20))
                    if a != b:
                        return None
                    left -= len(a)
        return sum(block.count(b"\n") for block in iter(lambda: theirs.read(1 << 20), b""))


class Grouper:
    """One shard's lines grouped by session: a session is complete when its user starts another one."""

    def __init__(self, journal: Journal, path: str, partitions: set[int] | None):
        self.journal, self.path, self.partitions = journal, path, partitions
        self.open: dict[str, tuple[int, SessionLines]] = {}
        self.current: dict[str, str] = {}  # user -> the session it is holding
        self.mine: dict[str, int | None] = {}  # user or session -> its partition when it is one of ours, else None

    def feed(self, before: int, lines: list[bytes], last_chunk: bool) -> Iterator[tuple[int, SessionLines]]:
        """The sessions these lines complete (``before``: lines of the shard before them)."""
        j = self.journal
        for i, (raw, key) in enumerate(zip(lines, _keys(lines))):
            if key is None:
                if raw.strip() and not torn(raw, last_chunk and i == len(lines) - 1):
                    j.damaged = True
                    if self.partitions is None or 0 in self.partitions:  # counted once: by partition 0's judge
                        j.unreadable += 1
                        j.problems.add(lambda: problem(self.path, before + i + 1, _why(raw), raw))
                continue
            if key.run and key.run != j.run:  # every line, before the partitions are taken: each judge checks all
                self._one_run(key.run, before + i + 1)
            owner = key.user if key.user is not None else key.session
            p = self.mine.get(owner, -1)
            if p == -1:
                p = partition_of(owner)
                p = self.mine[owner] = p if self.partitions is None or p in self.partitions else None
            if p is None:
                continue
            if key.user is not None:
                previous = self.current.get(key.user)
                if previous is not None and previous != key.session and previous in self.open:
                    yield self.open.pop(previous)
                self.current[key.user] = key.session
            entry = self.open.get(key.session)
            if entry is None:
                entry = self.open[key.session] = (p, SessionLines(self.path, key.session))
            entry[1].lines.append((before + i + 1, raw))

    def _one_run(self, run: str, number: int) -> None:
        """The journal's run is the first run a line names; JournalError at a line that names another.
        ``require_records`` and ``require_own_run`` compare only each file's first turn, so lines of another run
        appended to a shard were judged as this run's (its sessions "gone" from this run's store: FAIL, and the
        earlier PASS replaced). Checked here, where each line's key is decoded anyway: no read of its own. A line
        with no ``run`` (an older or hand-written journal) is anyone's. The journal is marked damaged, so that a
        re-audit's snapshot, finished as the judging stops (oracle.judge), does not take the sessions left
        unjudged for a snapshot of another run and hide this error behind its own."""
        j = self.journal
        if j.run is None:
            j.run = run
            return
        j.damaged = True
        raise JournalError(f"{self.path}:{number}: the journal holds lines of another run: this line is run {run!r}, "
                           f"the run's own lines are run {j.run!r}. Two runs' journals are never judged together: "
                           "move the other run's lines out of this file")

    def finish(self) -> Iterator[tuple[int, SessionLines]]:
        """The sessions still open at the end of the shard: complete now."""
        yield from self.open.values()
        self.open = {}


class Tail:
    """A journal that is still being written, read as it grows (the rolling audit's): each ``poll``
    reads the whole lines appended since the last one and returns the sessions they complete."""

    def __init__(self, run_dir: str | Path, partitions: set[int] | None = None):
        self.journal = Journal.open(run_dir) if RunFolder(run_dir).shards() else Journal(RunFolder(run_dir))
        self.partitions = partitions
        self.shards: dict[str, tuple[int, int, Grouper]] = {}  # path -> (bytes read, lines read, grouper)

    def poll(self) -> list[tuple[int, SessionLines]]:
        done = []
        for shard in self.journal.folder.shards():
            path = str(shard)
            offset, count, grouper = self.shards.get(path) or (0, 0, Grouper(self.journal, path, self.partitions))
            with open_regular(shard) as fh:
                fh.seek(offset)
                data = fh.read()
            whole = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
            lines = whole.splitlines(keepends=True)
            done += grouper.feed(count, lines, False)
            self.shards[path] = (offset + len(whole), count + len(lines), grouper)
        return done


BOM = b"\xef\xbb\xbf"


def _key(raw: bytes):
    """A line's key (msgspec's error when it has none). A leading UTF-8 byte order mark (an editor's save) is
    skipped, as every reader of a run folder's .jsonl files skips it (contracts.jsonl, contracts.codec.loads),
    and as ``decode_line`` does where the line is judged."""
    return _decode_key(raw[3:] if raw.startswith(BOM) else raw)


def _keys(lines: list[bytes]) -> list:
    """Each line's key, None for a blank or unreadable line (one C call per line)."""
    out = []
    for raw in lines:
        try:
            key = _decode_key(raw)  # the hot path: no Python call between the line and the decoder
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            try:
                key = _key(raw) if raw.startswith(BOM) else None
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                key = None
        out.append(key if key is not None and key.session else None)
    return out


def _why(raw: bytes) -> RecordError:
    """Why ``_keys`` found no key in a line: ``decode_line``'s reason, or, for a line it reads, what the key
    reader refused (it was "no session id" for a line that has one)."""
    try:
        decode_line(raw)
    except RecordError as exc:
        return exc
    found = _lone_surrogate(codec.loads(raw))
    if found:
        return RecordError(f"{found[0]} holds a lone surrogate escape (\\u{ord(found[1]):04x}), which is not text: "
                           "no UTF-8 can carry it")
    try:
        _key(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        return RecordError(str(exc) if isinstance(exc, msgspec.ValidationError) else f"not JSON: {exc}")
    return RecordError("no session id")


def _lone_surrogate(value, where: str = "$") -> tuple[str, str] | None:
    """(the JSON path, the character) of the first lone surrogate in ``value``'s strings and keys, or None."""
    if isinstance(value, str):
        bad = next((c for c in value if "\ud800" <= c <= "\udfff"), None)
        return (where, bad) if bad else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _lone_surrogate(k, f"{where} (a key)") or _lone_surrogate(v, f"{where}.{k}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _lone_surrogate(v, f"{where}[{i}]")
            if found:
                return found
    return None


def decode_turns(entry: SessionLines) -> tuple[list[Turn], list[str], int]:
    """A completed session's turns, in turn order, each turn once; the problems found; and how many
    of its lines are not a turn (a turn journaled twice with records that disagree counts as one such line:
    ``repeats``)."""
    problems: list[str] = []
    unreadable = 0
    turns = decode_chunk([raw for _, raw in entry.lines])
    if turns is None:
        turns = []
        for number, raw in entry.lines:
            try:
                turns.append(decode_line(raw))
            except RecordError as exc:
                unreadable += 1
                problems.append(problem(entry.shard, number, exc, raw))
    conflicts: list = []
    turns, repeated = one_per_turn(turns, conflicts)  # turn order; an outcome supersedes its in-flight record
    problems += repeats(entry.shard, entry.session, repeated, conflicts)
    return turns, problems, unreadable + len(conflicts)


def repeats(shard: str, session: str, repeated: list[int], conflicts: list) -> list[str]:
    """The problems of a session's turns journaled twice (``contracts.journal.one_per_turn``): an exact copy of a
    record is harmless (a worker's copy merged twice), a warning; two outcome records of one turn that disagree
    are damage, the journal's own contradiction, each such turn counted as a journal line that is not a turn
    (the ``unreadable`` gate): which of them is the truth cannot be told, and keeping the first made the verdict
    depend on the order of the lines (a probe's ``pass`` then ``amnesia`` PASSed, the other way round FAILed)."""
    texts = [f"journal: session {session} turn {n} journaled twice; kept the first" for n in repeated]
    for n, kept, other in conflicts:
        fields = differences(kept, other)
        shown = ", ".join(f"{name} {codec.short(getattr(kept, name))} then {codec.short(getattr(other, name))}"
                          for name in fields[:4]) + (f" and {len(fields) - 4} more" if len(fields) > 4 else "")
        texts.append(f"{shard}: session {session} turn {n} is journaled twice with records that disagree ({shown}): "
                     "the journal contradicts itself, so this turn cannot be judged; counted as a journal line that "
                     "is not a turn (the unreadable gate), the first record judged in its place")
    return texts


def join_pieces(entry: SessionLines, earlier: list[Turn], turns: list[Turn]) -> tuple[list[Turn], list[str], int]:
    """A session whose lines came in pieces (its user went on, then back to it): ``earlier``'s turns and this
    piece's judged as one. Returns the turns, the problems and how many turns count as unreadable lines
    (``repeats``)."""
    conflicts: list = []
    turns, repeated = one_per_turn(sorted(earlier + turns, key=lambda t: t.turn), conflicts)
    problems = [f"journal: session {entry.session}'s lines are not together in {entry.shard} (its user started "
                "another session in between); judged as one"] + repeats(entry.shard, entry.session, repeated, conflicts)
    return turns, problems, len(conflicts)


def read_journal(run_dir: str | Path) -> tuple[dict[str, list[Turn]], list[str]]:
    """The whole journal decoded, session -> turns, and the problems found: for scripts and small
    runs (the audit streams instead, ``Journal.completed``)."""
    journal = Journal.open(run_dir)
    sessions, problems = {}, []
    for _, entry in journal.completed():
        turns, found, _ = decode_turns(entry)
        problems += found
        if turns:
            sessions[entry.session] = turns
    problems = journal.problems.texts + problems
    if not sessions:
        raise NoRecords(f"{journal.folder.journal} holds no valid journal records"
                           + (f"; first problem: {problems[0]}" if problems else "") + cr_only_note(journal.shards))
    return sessions, problems
