"""Judging the sessions of some partitions of the journal, in one process.

The journal is streamed; the lines of these partitions' sessions are held until each conversation
completes (oracle/history.py), then judged a batch at a time: decode the turns, read what the
store holds (or the snapshot's copy), snapshot it, run the checkers, tally, and write the
partition's findings, session rows and snapshot lines to its own files.

A partition is a fixed share of the Locust users (a hash of the user id, or of the session id
for a record without one), so a conversation stays in one partition and the audit's output does
not depend on how many processes judged it: ``audit_run`` runs ``judge_partitions`` over all
partitions in its own process (``jobs=1``) or splits them over a process pool, then concatenates
the partitions' files in order. Nothing is kept between batches: memory is set by the batch size,
the conversations still open and one tally per process (its windows: set by the run's duration).
"""
from __future__ import annotations

import bisect
import gc
import operator
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path

import numpy as np
import pandas as pd

from contracts import codec
from contracts.journal import Turn, decode_chunk, one_per_turn
from contracts.runfolder import RunFolder
from oracle.attribution import first_fault_after, overlapping
from oracle.checkers import AFTER_END, check_leaked_replies, check_session, expired_after_end, pending
from oracle.clean import prove_clean
from oracle.decode import Shape, decode_session
from oracle.history import Journal, Problems, SessionLines, decode_turns, join_pieces, repeats
from oracle.keys import SessionSet
from oracle.snapshot import SnapshotError, session_lines, snapshot_lines, snapshot_session
from oracle.redis_reader import digest
from oracle.rolling import Judged, RollingPrior, RollingWriter, journal_print
from oracle.store import StoreOptions, make_reader
from oracle.tables import SESSION_COLUMNS, STORE_COLUMNS
from oracle.tally import Tally
from oracle.verdict import BY_DESIGN

GONE_SAMPLE = 20
_SENT, _RECEIVED, _OUTCOME, _KIND, _VERDICT, _CROSSTALK, _STEP, _BOT_SESSION, _STATUS = map(
    operator.attrgetter, ("sent", "received", "outcome", "kind", "verdict", "crosstalk", "step", "bot_session", "status"))


@dataclass(frozen=True)
class Fault:
    """An effective fault's interval, as the tally needs it (an unrecovered one lasts forever)."""
    kind: int
    start: float
    end: float
    lasting: bool = False  # it can destroy writes made long before it (attribution.LASTING)


@dataclass
class Evidence:
    """What the store says about missing keys before any session is judged: its keys carry TTLs (so a
    gone key may have expired), and when it expired and evicted keys (its counters over the run)."""
    ttl_in_use: bool = False
    evictions: list = field(default_factory=list)  # [(time, evicted_keys counter)] ascending, the last at the audit
    expiries: list = field(default_factory=list)   # [(time, expired_keys counter)] likewise; none: not known
    ttl_floor: float | None = None  # the shortest TTL a key under the template was given (oracle.keys.ttl_floor)
    ttl_at: float = 0.0             # when it was measured
    evicts_untimed: bool = True     # its maxmemory policy may evict a key without a TTL (oracle.keys.evicts_untimed)

    def __post_init__(self):
        self._evicted, self._expired = _CounterOverTime(self.evictions), _CounterOverTime(self.expiries)

    @classmethod
    def of(cls, evidence: dict) -> "Evidence":
        """From ``keys.store_evidence``'s dict (or an older snapshot's, which has no expiries)."""
        return cls(evidence.get("ttl_in_use", False), [tuple(e) for e in evidence.get("evictions") or []],
                   [tuple(e) for e in evidence.get("expiries") or []], evidence.get("ttl_floor"),
                   evidence.get("ttl_at") or 0.0, evidence.get("evicts_untimed") is not False)

    def gone_class(self, last_ack: float, first_write: float | None = None, longest_pause: float | None = None) -> str:
        """``evicted`` when the store evicted keys after the session's last acknowledged turn (and its policy may evict
        such a key: ``evicts_untimed``, or keys under the template carry TTLs), else ``expired``
        when keys under the template carry TTLs, the store may have expired a key since the session's first
        write and the session is older than the shortest TTL they were given, else ``vanished``: a key the store
        never expired did not expire (a Redis that restarted without persistence, keys under a 1-hour TTL, lost
        sessions written a minute before), nor did one deleted seconds after its first write under a 1-hour TTL
        while other keys (rate limits) expired.
        ``AFTER_END`` in place of ``expired`` when the key could only have expired once its conversation was over:
        no pause in it (``longest_pause``, between a turn's answer and the next turn) was as long as the shortest
        TTL, and its last acknowledged turn is older than that TTL. A bot that keeps a history for N seconds after
        its last message (LangChain's ``ttl``) does so by design, and the user never came back: nobody was
        forgotten, the audit just read too late to judge what was stored."""
        if self._evicted.rose_after(last_ack) and (self.ttl_in_use or self.evicts_untimed):
            return "evicted"  # (a volatile-* policy evicts only keys with a TTL, and none was seen under the template)
        if not self.ttl_in_use:
            return "vanished"
        if self.expiries and not self._expired.rose_after(last_ack if first_write is None else first_write):
            return "vanished"
        if self.ttl_floor is not None and self.ttl_at - (last_ack if first_write is None else first_write) < \
                self.ttl_floor:  # younger than any TTL the store's keys were given: deleted, not expired
            return "vanished"
        if self.ttl_floor is not None and longest_pause is not None and longest_pause < self.ttl_floor <= \
                self.ttl_at - last_ack:
            return AFTER_END
        return "expired"


    def expired_before(self, first_write: float, last_ack: float, next_sent: float) -> str | None:
        """How the key may have expired before a session's next turn (sent at ``next_sent``), which made a new one,
        its oldest turns lost: keys under the template carry a TTL, the store evicted no key since the last lost
        turn's answer (``last_ack``) and expired keys since the session's first write (as ``gone_class`` asks of a
        gone key). ``pause``: the pause before that turn was at least the TTL (a history said lost by a race or a
        trim: LangChain hunt 16). ``unrenewed``: no pause was, but the key was older than the TTL when that turn came:
        a TTL set when the key is made and not renewed by each write (``EXPIRE ... NX``, ``SET ... EX`` on creation
        only) ends the history mid-conversation (bot hunt 17). None: neither."""
        if not self.ttl_in_use or self.ttl_floor is None or self._evicted.rose_after(last_ack):
            return None
        if self.expiries and not self._expired.rose_after(first_write):
            return None
        if next_sent - last_ack >= self.ttl_floor:
            return "pause"
        return "unrenewed" if next_sent - first_write >= self.ttl_floor else None


def mark_expired_in_pause(findings: list[dict], turns: list[Turn], evidence: Evidence) -> None:
    """Lost turns that are the session's oldest, before a turn its key may have expired before
    (``Evidence.expired_before``): each says so (evidence ``expired_in_pause``: the pause and the TTL, or
    ``expired_unrenewed``: the key's age and the TTL). The class stays: the bot forgot them."""
    lost = [f for f in findings if f["class"] == "lost" and f["evidence"].get("oldest")]
    numbers = {f["turn"] for f in lost}
    if not lost or not evidence.ttl_in_use:
        return
    ordered = sorted(turns, key=lambda t: t.sent)
    gone = [t for t in ordered if t.turn in numbers]
    last = max(gone, key=lambda t: t.received or t.sent)
    acked = last.received or last.sent
    after = [t for t in ordered if t.turn not in numbers and t.outcome == "ok" and t.sent > acked]
    if not after:
        return
    first = min(t.sent for t in gone)
    how = evidence.expired_before(first, acked, after[0].sent)
    if how == "unrenewed" and not all(f["evidence"].get("alone") for f in lost):
        how = None  # a lost turn in flight with another is a race's more likely than a TTL's
    ttl = int(evidence.ttl_floor * 10) / 10 if how else None  # a lower bound
    for f in lost:
        if how == "pause":
            f["evidence"]["expired_in_pause"] = {"pause_s": round(after[0].sent - acked, 1), "ttl_floor": ttl,
                                                 "before_turn": after[0].turn}
        elif how == "unrenewed":
            f["evidence"]["expired_unrenewed"] = {"age_s": round(after[0].sent - first, 1), "ttl_floor": ttl,
                                                  "before_turn": after[0].turn}


class _CounterOverTime:
    """A server counter sampled over time, [(time, value)] ascending: did it rise after a moment? A drop is a
    restart, counting from 0 again. A binary search per question (a day's telemetry is 17,280 samples, and a
    store that lost everything asks once per session)."""

    def __init__(self, samples: list):
        self.times, self.risen, before = [], [], 0
        for when, value in samples:
            self.risen.append((self.risen[-1] if self.risen else 0) + (value - before if value >= before else value))
            self.times.append(when)
            before = value

    def rose_after(self, when: float) -> bool:
        """No sample before ``when``: anything the counter counted since the server started."""
        at = bisect.bisect_right(self.times, when)
        return bool(self.risen) and self.risen[-1] > (self.risen[at - 1] if at else 0)


@dataclass
class Context:
    run_dir: Path
    store: StoreOptions          # how to read (live), or how the snapshot was read
    live: bool
    evidence: Evidence
    kinds: tuple                 # fault kinds, in tally order
    faults: list                 # [Fault]: effective faults
    window_s: float
    recovery_s: float
    rolling: bool = False        # the rolling audit's: write each session's judgement, not the tables


@dataclass
class PartitionResult:
    partition: int
    sessions: int = 0            # judged
    ok_sessions: int = 0         # with an acknowledged turn
    gone: list = field(default_factory=list)  # a sample of sessions whose key is gone (the store's ids)
    gone_as: dict = field(default_factory=dict)  # of them, journal session -> the id the bot issued (--session-from)
    gone_count: int = 0
    entries: int = 0             # stored entries read (a JSON blob counts as one)
    problems: Problems = field(default_factory=Problems)
    unreadable: int = 0          # journal lines that are not a turn
    run: str | None = None
    classes: Counter = field(default_factory=Counter)  # findings per class
    reused: int = 0              # sessions whose rolling-audit judgement stood (key and journal unchanged)
    keys_seen: int = 0           # sessions whose key the rolling audit read under the template (so it is right)
    order: Counter = field(default_factory=Counter)  # keys by how they hold their turns (checkers.layout)
    judged: SessionSet = field(default_factory=SessionSet)  # the sessions of its rows: whose keys are the run's


def judge_partitions(context: Context, partitions: list[int]) -> tuple[Tally, list[PartitionResult]]:
    """Judge every session of ``partitions``; their files are written, their counts returned with the
    tally of all of them (one per process: its size is set by the run's duration, not per partition)."""
    journal = Journal.open(context.run_dir)
    judging = Judging(context, partitions)
    try:
        with rare_full_collections():
            for p, entry in journal.completed(set(partitions)):
                judging.add(p, entry)
    finally:
        judging.close(journal.damaged)
    return judging.tally, judging.results(journal)


@contextmanager
def rare_full_collections():
    """Python's cycle collector tuned for judging, then put back. A batch's lines and the batches of
    the other partitions live long enough to reach the oldest generation, and with the default
    thresholds each quarter of growth of that generation sets off a full collection of the whole
    heap: about a quarter of the audit's time went there (benchmarks/bench_audit.py). Judging makes
    few reference cycles, so collecting the young generation every 100,000 allocations, not 700,
    keeps memory flat at a fraction of the cost."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class Judging:
    """The open partitions of one process: add completed sessions, judged a batch at a time."""

    def __init__(self, context: Context, partitions: list[int]):
        shape = Shape(context.store)
        reader = make_reader(context.store) if context.live else None
        self.tally = Tally(context.window_s, context.kinds)
        self.parts = {p: _Partition(p, context, shape, reader, self.tally) for p in partitions}

    def add(self, p: int, entry: SessionLines) -> None:
        self.parts[p].add(entry)

    def flush(self) -> None:
        for part in self.parts.values():
            part.flush()

    def close(self, journal_damaged: bool = False) -> None:
        try:
            self.flush()
            for part in self.parts.values():  # the rest of a re-audit's snapshot must be readable too
                if part.stored is not None:
                    part.stored.finish(part.result.problems if journal_damaged else None)
        finally:
            for part in self.parts.values():
                part.close()

    def results(self, journal: Journal) -> list[PartitionResult]:
        for part in self.parts.values():  # unreadable lines first, as they come in the journal
            r = part.result
            if r.partition == 0:  # the journal's own problems (lines that name no session) come first
                first = Problems()
                first.merge(journal.problems)
                first.merge(r.problems)
                r.problems = first
                r.unreadable += journal.unreadable
            r.run = journal.run
        return [part.result for part in self.parts.values()]


class _Partition:
    """One partition's pending batch and its open output files."""

    def __init__(self, p: int, ctx: Context, shape: Shape, reader, tally: Tally):
        self.ctx, self.shape, self.reader, self.tally = ctx, shape, reader, tally
        self.result = PartitionResult(p)
        folder = RunFolder(ctx.run_dir)
        self.pending: list[SessionLines] = []
        self.issued: dict[str, str] = {}  # the batch's sessions the bot named otherwise (--session-from)
        self.rolling = RollingWriter(folder, p) if ctx.rolling else None  # judgements, pass after pass
        self.prior = RollingPrior(folder, p) if ctx.live and not ctx.rolling and RollingPrior.exists(folder, p) \
            else None
        self.findings = None if ctx.rolling else open(folder.audit_part(p, "anomalies.raw"), "wb")
        self.rows = None if ctx.rolling else open(folder.audit_part(p, "sessions.csv"), "wb")
        self.snapshot = open(folder.snapshot_part(p, reading=True), "wb") if ctx.live and not ctx.rolling else None
        self.stored = None if ctx.live else _Lockstep(folder.path, folder.snapshot_part(p))

    def add(self, entry: SessionLines) -> None:
        self.pending.append(entry)
        if len(self.pending) >= self.ctx.store.batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        entries, self.pending = self.pending, []
        turns_by = self._turns(entries)
        self.issued = {} if self.ctx.store.own_ids else issued_ids(turns_by)  # keys by goldfish's ids: as journaled
        self.journaled = {e.session: (e.shard, journal_print(e)) for e in entries} \
            if self.rolling is not None or self.prior is not None else {}
        reused = self._reusable([e for e in entries if e.session in turns_by], turns_by) if self.prior is not None \
            else {}
        if self.ctx.live:
            wanted = [s for s in turns_by if s not in reused]
            raws = list(chain.from_iterable(self.reader.read(self._stored_ids(wanted))))
            if self.issued:  # read under the bot's ids, judged as the journal's sessions
                for raw, session in zip(raws, wanted):
                    raw.session = session
        else:
            raws = [snapshot_session(line) for line in self.stored.lines([e.session for e in entries])]
            raws = [r for r in raws if r.session in turns_by]
        proof = prove_clean(raws, turns_by, self.shape)
        if self.snapshot is not None:
            self.snapshot.write(session_lines(raws, proof.decoded)
                                + b"".join(bytes(j.stored) + b"\n" for j in reused.values()))
        self._judge(raws, proof, turns_by, reused)
        if self.ctx.store.on_batch is not None:  # a test's hook
            self.ctx.store.on_batch(self.result.partition, self.result.sessions)

    def _turns(self, entries: list[SessionLines]) -> dict[str, list[Turn]]:
        """Each session's turns: the batch's lines decoded in one pass when they are all well formed."""
        turns_by: dict[str, list[Turn]] = {}
        decoded = decode_chunk([raw for e in entries for _, raw in e.lines])
        at = 0
        for e in entries:
            if decoded is not None:
                turns = decoded[at:at + len(e.lines)]
                at += len(e.lines)
                conflicts: list = []  # two records of one turn that disagree: damage, counted as unreadable
                turns, repeated = one_per_turn(turns, conflicts)  # turn order; an outcome supersedes its in-flight
                problems = repeats(e.shard, e.session, repeated, conflicts)
                self.result.unreadable += len(conflicts)
            else:
                turns, problems, unreadable = decode_turns(e)
                self.result.unreadable += unreadable
            if turns and e.session in turns_by:  # its lines came in pieces (its user went on, then back to it)
                turns, more, unreadable = join_pieces(e, turns_by[e.session], turns)
                problems += more
                self.result.unreadable += unreadable
            self.result.problems.extend(problems)
            if turns:
                turns_by[e.session] = turns
        return turns_by

    def _stored_ids(self, sessions: list[str]) -> list[str]:
        """The ids the store keeps these sessions under: the bot's own where it issued one (--session-from)."""
        return [self.issued.get(s, s) for s in sessions] if self.issued else sessions

    def _reusable(self, entries: list[SessionLines], turns_by: dict[str, list[Turn]]) -> dict[str, Judged]:
        """The rolling audit's clean judgements of these sessions whose journal lines are the same and whose
        key still has the digest it had then: nothing was added, lost or changed since, so the judgement
        stands and the whole history is not read again; or whose key is gone since, only because it expired
        after the conversation (AFTER_END: what was judged whole expired whole, by design). A session with
        findings is always judged again, with the evidence of the end of the run (evictions, TTLs)."""
        taken = self.prior.take(entries)
        self.result.keys_seen += sum(j.exists for j in taken.values())
        prior = {s: j for s, j in taken.items() if not j.findings and j.journal == self.journaled[s][1]}
        digests = self.reader.digests(self._stored_ids(list(prior))) if prior else {}
        now = {s: digests.get(self.issued.get(s, s)) for s in prior}
        gone = {s for s, d in now.items() if isinstance(d, list) and d[:1] == ["none"]}  # redis_reader.digests
        reused = {s: j for s, j in prior.items() if now.get(s) == j.digest or j.exists and s in gone
                  and expired_after_end(turns_by[s], False, self.ctx.evidence.gone_class)}
        self.result.reused += len(reused)
        return reused

    def _judge(self, raws, proof, turns_by: dict[str, list[Turn]], reused: dict[str, Judged]) -> None:
        ctx, r = self.ctx, self.result
        judged, dirty = [], {}
        decoded = proof.decoded
        for i, (raw, clean, elements) in enumerate(zip(raws, proof.clean, proof.elements)):
            turns = turns_by[raw.session]
            record = Judged(raw.session, self.journaled.get(raw.session, ("", 0))[1],
                            digest(raw) if self.rolling is not None else [], len(raw.entries), raw.exists,
                            [], None, [], [])
            if clean:
                r.order["ordered" if raw.type == "list" and len(raw.entries) >= 4 else "held" if raw.entries else None] += 1
            else:
                found = check_session(raw.session, turns, raw, decode_session(raw, self.shape, elements), turns_by,
                                      ctx.evidence.gone_class)
                mark_expired_in_pause(found.findings, turns, ctx.evidence)
                r.order[found.order] += 1
                lost = set(found.lost_turns)
                record.findings, record.stats, record.lost = found.findings, found.stats, sorted(lost)
                record.anomalous = sorted(lost | {f["turn"] for f in found.findings if f["turn"] is not None})
            record.findings = record.findings + check_leaked_replies(raw.session, turns, raw.key)  # clean ones too
            if record.findings:  # a quoted entry's lone surrogate (a "\ud800" escape: a bot cutting an emoji in two)
                record.findings = codec.mend_surrogates(record.findings)[0]  # is no UTF-8: it stopped the whole audit
            if self.rolling is not None:
                self.rolling.write(self.journaled[raw.session][0], record,
                                   session_lines([raw], [decoded[i]] if decoded else None))
            judged.append(self._count(record, turns, dirty))
        for session, record in reused.items():
            judged.append(self._count(record, turns_by[session], dirty))
        missing = set(turns_by) - {raw.session for raw in raws} - set(reused)
        if missing and not ctx.live:  # judging the rest would pass a run whose failing sessions are not there
            raise SnapshotError(
                f"{RunFolder(ctx.run_dir).snapshot_part(r.partition)} lacks {len(missing)} session(s) the journal has "
                f"(for example {min(missing)}): the snapshot is damaged or from another run. Read the store again: "
                "pass --store-url (or --http-url / --reader)")
        r.problems.extend([f"session {s} is journaled but not in the stored reads; not judged" for s in sorted(missing)])
        if judged and self.rows is not None:
            r.judged.update(self._stored_ids([s for s, _, _, _ in judged]))  # whose keys are the run's
            self._tally(judged, dirty)

    def _count(self, record: Judged, turns: list[Turn], dirty: dict) -> tuple:
        """Count one session's judgement, and write its findings (the final audit's)."""
        r = self.result
        if self.rolling is not None:
            r.sessions += 1
        for f in record.findings:
            r.classes[f["class"]] += not pending(f)  # counted once rootcause confirms it
            if self.findings is not None:
                self.findings.write(codec.dumps_line(f))
        r.entries += record.entries
        if record.stats is not None:
            dirty[record.session] = record.stats
            if not record.exists and record.findings:
                r.gone_count += 1
                if len(r.gone) < GONE_SAMPLE:
                    r.gone.append(self.issued.get(record.session, record.session))
                    if record.session in self.issued:
                        r.gone_as[record.session] = self.issued[record.session]
        return record.session, turns, set(record.lost), set(record.anomalous)

    def _tally(self, judged: list, dirty: dict) -> None:
        """Per-turn columns of the batch, once: the tally, and the journal's columns of the sessions' rows."""
        ctx, r = self.ctx, self.result
        turns = [t for _, ts, _, _ in judged for t in ts]
        index = np.repeat(np.arange(len(judged)), [len(ts) for _, ts, _, _ in judged])
        starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])  # each session's first turn
        n = len(turns)
        sent, received = np.fromiter(map(_SENT, turns), float, n), np.array(list(map(_RECEIVED, turns)), float)
        outcome, kind = list(map(_OUTCOME, turns)), np.array(list(map(_KIND, turns)), dtype=object)
        ok, fail = _equal(outcome, "ok"), _equal(outcome, "fail")
        probe = _equal(kind, "probe")
        verdict = list(map(_VERDICT, turns))
        failed = ok & _equal(verdict, "amnesia")
        answered = ok & (_equal(verdict, "pass") | failed)
        interrupted = np.zeros(n, bool)
        for i in np.flatnonzero(~ok).tolist():  # a turn the stop cut short is no failed request
            interrupted[i] = turns[i].interrupted
        lost, anomalous = np.zeros(n, bool), np.zeros(n, bool)
        at = 0
        for _, ts, ls, an in judged:  # only judged sessions that were not proven clean have any
            if ls or an:
                numbers = [t.turn for t in ts]
                lost[at:at + len(ts)] = [number in ls for number in numbers]
                anomalous[at:at + len(ts)] = [number in an for number in numbers]
            at += len(ts)
        done = np.where(np.isnan(received), sent, received)
        error = ~ok & ~interrupted
        refused = np.zeros(n, bool)  # a burst's turn the bot answered 4xx (a thread API refusing a second message)
        for i in np.flatnonzero(error & _equal(kind, "burst")).tolist():
            refused[i] = 400 <= (turns[i].status or 0) < 500
        arrays = {"sent": sent, "done": done, "ok": ok, "error": error, "answered": answered, "failed": failed,
                  "online": np.fromiter(map(bool, map(_CROSSTALK, turns)), bool, n), "lost": lost,
                  "anomalous": anomalous, "step": _numbers(list(map(_STEP, turns))), "kind": kind,
                  "latency": received - sent, "refused_burst": refused}
        margins = [(f.start, f.end + ctx.recovery_s) for f in ctx.faults]
        during = np.zeros((n, len(ctx.kinds)), bool)
        for f, (start, end) in zip(ctx.faults, margins):
            during[:, f.kind] |= (sent >= start) & (sent < end)
        quiet = ~overlapping(sent, done, margins)
        self.tally.add_turns(arrays, during, first_fault_after(ok, done, ctx.faults, len(ctx.kinds), ctx.recovery_s),
                            quiet)
        self.tally.add_failures(turns[i].error for i in np.flatnonzero(error & quiet).tolist())
        if ctx.faults:
            self.tally.add_spans(np.minimum.reduceat(np.where(ok, done, np.inf), starts),
                                 np.maximum.reduceat(np.where(answered, sent, -np.inf), starts), ctx.faults)
        rows = _rows(judged, index, starts, arrays, fail, probe)
        for i, session in enumerate(rows["session"]):
            if session in dirty:
                for column in (*STORE_COLUMNS, "exists", "anomalous"):
                    rows.at[i, column] = dirty[session][column]
        r.sessions += len(judged)
        r.ok_sessions += int((rows["ok"] > 0).sum())
        self.tally.totals.update({
            "turns": len(turns), "ok": int(ok.sum()), "fail": int(fail.sum()), "info": int((~ok & ~fail).sum()),
            "errors": int(error.sum()), "interrupted": int(interrupted.sum()), "answered": int(answered.sum()),
            "failed_probes": int(failed.sum()), "sessions": len(judged), "probes": int(probe.sum()),
            "probes_interrupted": int((probe & interrupted).sum()),
            "anomalous_sessions": int(rows["anomalous"].sum()), "info_stored": int(rows["info_stored"].sum()),
            "crosstalk_sessions": int(((rows["crosstalk"] + rows["crosstalk_online"]) > 0).sum()),
            "leaked_sessions": int((rows["crosstalk_online"] > 0).sum()),
            "lost_turns": int(rows["lost_turns"].sum()),
            "expired_after_end": int(rows["expired_after_end"].sum()),  # not judged: their turns are no stored loss
            "expired_after_end_ok": int(rows["ok"][rows["expired_after_end"] > 0].sum()),
            **{f"{gone}_lost_turns": int(rows["lost_turns"][rows[gone] > 0].sum()) for gone in BY_DESIGN}})
        rows.to_csv(self.rows, header=False, index=False)

    def close(self) -> None:
        for fh in (self.findings, self.rows, self.snapshot, self.rolling, self.prior):
            if fh is not None:
                fh.close()


def issued_ids(turns_by: dict[str, list[Turn]]) -> dict[str, str]:
    """Session -> the id the bot issued for it (``bot_session``: --session-from), for the sessions it named."""
    out = {}
    for session, turns in turns_by.items():
        issued = next(filter(None, map(_BOT_SESSION, turns)), None)
        if issued is not None:
            out[session] = issued
    return out


def _equal(values, value: str) -> np.ndarray:
    """values == value, element by element, as a bool array (None equals nothing)."""
    return np.fromiter(map(operator.eq, values, repeat(value)), bool, len(values))


def _numbers(values: list) -> np.ndarray:
    """Floats, NaN for None and for anything that is not a number (a step is a label)."""
    try:
        return np.array(values, float)
    except (TypeError, ValueError):
        return np.array([v if type(v) in (int, float) else None for v in values], float)


def _rows(judged: list, index: np.ndarray, starts: np.ndarray, a: dict, fail: np.ndarray,
          probe: np.ndarray) -> pd.DataFrame:
    """sessions.csv rows of a batch: journal columns summed per session; store columns 0 (proven clean)."""
    n = len(judged)

    def total(mask) -> np.ndarray:
        return np.bincount(index, weights=mask, minlength=n).astype(np.int64)

    rows = pd.DataFrame({
        "session": [s for s, _, _, _ in judged], "turns": np.bincount(index, minlength=n),
        "ok": total(a["ok"]), "fail": total(fail), "info": total(~a["ok"] & ~fail), "info_stored": 0,
        "probes": total(probe), "probes_answered": total(a["answered"]), "probes_failed": total(a["failed"]),
        "first_sent": np.minimum.reduceat(a["sent"], starts),
        "last_received": np.fmax.reduceat(a["sent"] + a["latency"], starts),
        "crosstalk_online": total(a["online"]), "exists": True,
    })
    for column in STORE_COLUMNS:
        rows[column] = 0
    rows["anomalous"] = ((rows["probes_failed"] > 0) | (rows["crosstalk_online"] > 0)).astype(np.int64)
    return rows[SESSION_COLUMNS]


class _Lockstep:
    """Snapshot lines of one partition, read in the order they were written (so the lines read ahead
    stay few; a session missing from them costs reading the rest)."""

    def __init__(self, run_dir: Path, path: Path):
        self.path = path
        self.lines_of = snapshot_lines(run_dir, path)
        self.ahead: dict[str, bytes] = {}

    def lines(self, sessions: list[str]) -> list[bytes]:
        need = {s for s in sessions if s not in self.ahead}
        for session, raw in self.lines_of if need else ():
            if session in self.ahead:  # which copy is the store's? Neither can be trusted
                raise SnapshotError(f"{self.path} holds session {session} twice: the snapshot is damaged. Read the "
                                    "store again: pass --store-url (or --http-url / --reader)")
            self.ahead[session] = raw
            need.discard(session)
            if not need:
                break
        return [self.ahead.pop(s) for s in sessions if s in self.ahead]

    def finish(self, damaged_journal: Problems | None = None) -> None:
        """Read the lines no journaled session asked for: a damaged line is an error wherever it is, and a
        session the journal does not have means the journal lost lines since the snapshot was read, unless
        the journal has unreadable lines (``damaged_journal``: their problems, which then say so): the
        sessions were theirs, the unreadable gate fails the run, and the rest is judged as the live audit did."""
        unasked = list(self.ahead) + [session for session, _ in self.lines_of]
        if unasked and damaged_journal is not None:
            damaged_journal.extend([f"{self.path}: {len(unasked)} stored session(s) have no readable journal line "
                                    f"(for example {unasked[0]}): not judged; the journal's unreadable lines were "
                                    "probably theirs"])
        elif unasked:
            raise SnapshotError(f"{self.path} holds {len(unasked)} line(s) no journaled session asked for (for "
                                f"example session {unasked[0]}): a session twice, the journal lost lines since the "
                                "store was read, or the snapshot is another run's. Read the store again: pass "
                                "--store-url (or --http-url / --reader)")
