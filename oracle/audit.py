"""``audit_run``: journal + stored histories -> audit/ tables (the seam Locust's end-of-run hook calls).

Streams the store (or its snapshot) one batch of sessions at a time: read, snapshot, prove
clean (oracle/clean.py), decode and check the rest, write findings; only the rows of sessions
with something to report and compact per-turn verdicts stay in memory. A large live read is
split over processes (oracle/parallel.py). A store that dies mid-read leaves the partial
snapshot marked incomplete and raises ``StoreError`` saying how far it got; the previous
audit tables are left untouched.
"""
from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from collections import Counter
from pathlib import Path

import redis
import requests

from oracle.checkers import check_session
from oracle.clean import prove_clean
from oracle.decode import Shape, decode_session
from oracle.history import load_journal
from oracle.parallel import run_parts, split
from oracle.prefetch import prefetched
from oracle.snapshot import (SnapshotError, SnapshotWriter, options_from_meta, read_foreign, read_meta,
                             read_sessions)
from oracle.store import StoreError, StoreOptions, make_reader
from oracle.tables import tables
from contracts import codec
from contracts.runfolder import RunFolder
from oracle import rootcause, verdict
from oracle.keys import ForeignKeys, TemplateMismatch, diagnose_missing_keys
STORE_ERRORS = (StoreError, redis.RedisError, OSError, requests.RequestException)


class FindingsWriter:
    """Numbers and streams raw findings (no explanation yet: oracle/rootcause.py links and explains
    them once every session is judged)."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "wb")
        self.ids: Counter = Counter()

    def write(self, f: dict) -> None:
        self.ids[f["class"]] += 1
        self.file.write(codec.dumps_line({"id": f"{f['class']}-{self.ids[f['class']]}", **f}))

    def close(self) -> None:
        self.file.close()


class Judge:
    """Judges batches of stored sessions against the journal; keeps only what the tables need.

    A proven-clean session leaves nothing but its name in ``judged`` (a dict: judging order and
    a set at once); the others keep their
    full row in ``dirty`` and hand their findings to ``emit`` (vanished ones wait in ``gone``
    until every TTL has been seen, to tell expired from vanished).
    """

    def __init__(self, journal, shape: Shape, emit):
        self.journal, self.shape, self.emit = journal, shape, emit
        self.dirty: dict[str, dict] = {}
        self.judged: dict[str, None] = {}
        self.gone: list[dict] = []
        self.lost: set = set()
        self.anomalous: set = set()
        self.ttl_in_use = False
        self.entries = 0  # stored entries read (a JSON blob counts as one)
        self.problems: list[str] = []

    def batch(self, batch, proof) -> None:
        sessions = self.journal.sessions
        for raw, clean, elements in zip(batch, proof.clean, proof.elements):
            if raw.session not in sessions:
                self.problems.append(f"snapshot session {raw.session} is not in the journal; not judged")
                continue
            if raw.session in self.judged:
                self.problems.append(f"session {raw.session} was read twice; judged once")
                continue
            self.judged[raw.session] = None
            self.entries += len(raw.entries)
            self.ttl_in_use = self.ttl_in_use or (raw.exists and raw.ttl is not None and raw.ttl >= 0)
            if not clean:
                self._check(raw, elements)

    def _check(self, raw, elements) -> None:
        result = check_session(raw.session, self.journal.sessions[raw.session], raw,
                               decode_session(raw, self.shape, elements), self.journal.sessions)
        self.dirty[raw.session] = result.stats
        for f in result.findings:
            if f["class"] == "vanished":
                self.gone.append(f)
            else:
                self.emit(f)
            if f["turn"] is not None:
                self.anomalous.add((raw.session, f["turn"]))
        for turn in result.lost_turns:
            self.lost.add((raw.session, turn))
            self.anomalous.add((raw.session, turn))

    def state(self) -> dict:
        return {k: getattr(self, k) for k in ("dirty", "judged", "gone", "lost", "anomalous", "ttl_in_use", "problems",
                                              "entries")}

    def merge(self, state: dict) -> None:
        """Add the state of a judge that judged the next part of the sessions."""
        self.dirty.update(state["dirty"])
        self.judged.update(state["judged"])
        self.gone += state["gone"]
        self.lost |= state["lost"]
        self.anomalous |= state["anomalous"]
        self.ttl_in_use = self.ttl_in_use or state["ttl_in_use"]
        self.problems += state["problems"]
        self.entries += state["entries"]


def read_and_judge(reader, sessions: list[str], out, judge: Judge, on_batch=None):
    """Read the sessions batch by batch, snapshot each batch to ``out`` and judge it.

    Returns (sessions done, batches done, the store error or None).
    """
    done = batches_done = 0
    iterator = prefetched(reader.read(sessions))
    while True:
        try:
            batch = next(iterator, None)
        except STORE_ERRORS as exc:
            return done, batches_done, exc
        if batch is None:
            return done, batches_done, None
        proof = prove_clean(batch, judge.journal.sessions, judge.shape)
        out.write_batch(batch, proof.decoded)
        judge.batch(batch, proof)
        done += len(batch)
        batches_done += 1
        if on_batch:
            on_batch(batches_done, done)


PARALLEL_MIN_SESSIONS = 20_000  # below this, starting processes costs more than it saves


def _jobs(jobs: int | None, store: StoreOptions, sessions: int) -> int:
    """Processes for the live read: ``jobs`` as asked, else one per core (at most 8) for a large run.

    One process when a test hooks every batch (``on_batch`` runs in the parent only) and for
    the HTTP and function readers (a bot's API or a user's function may not like parallel
    callers); parallelism never exceeds one part per batch.
    """
    if store.on_batch is not None or store.name() != "redis":
        return 1
    if jobs is None:
        jobs = _cores() if sessions >= PARALLEL_MIN_SESSIONS else 1
    return max(1, min(jobs, -(-sessions // store.batch)))


def _cores() -> int:
    return min(os.cpu_count() or 1, 8)


def _parallel(run_dir: Path, store: StoreOptions, shape: Shape, journal, sessions: list[str],
              writer: SnapshotWriter, judge: Judge, findings: FindingsWriter, jobs: int):
    """read_and_judge over ``jobs`` contiguous parts (the first here, the others in forked processes),
    merged in order.

    Each part writes its own snapshot file and its findings (without ids) to a part file; the
    parent numbers and explains them in part order, so the result is the serial audit's.
    """
    audit_dir = RunFolder(run_dir).audit

    def work(k: int, part: list[str]) -> dict:
        reader = make_reader(store)
        out = writer.part(k)
        with open(audit_dir / f"anomalies.part{k}.tmp", "wb") as found:
            part_judge = Judge(journal, shape, lambda f: found.write(codec.dumps_line(f)))
            done, batches, exc = read_and_judge(reader, part, out, part_judge)
        out.close()
        if exc is not None:  # the store's own exception may not pickle: its text does
            exc = StoreError(f"{type(exc).__name__}: {exc}")
        return {"judge": part_judge.state(), "done": done, "batches": batches, "error": exc}

    done = batches_done = 0
    error = None
    for k, result in enumerate(run_parts(work, split(sessions, jobs), here=True)):
        judge.merge(result["judge"])
        path = audit_dir / f"anomalies.part{k}.tmp"
        with open(path, "rb") as fh:
            for line in fh:
                findings.write(codec.loads(line))
        path.unlink()
        writer.meta["sessions_read"] += result["done"]
        if error is None:  # count up to the first part that failed, as a serial read would
            done, batches_done, error = done + result["done"], batches_done + result["batches"], result["error"]
    return done, batches_done, error


@contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector: the audit allocates millions of small objects and
    makes almost no cycles, and every collection would re-scan all live turns (quadratic)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def audit_run(run_dir, store: StoreOptions | None = None, window_s: float = 5.0, recovery_s: float = 5.0,
              gates: verdict.Gates | None = None, jobs: int | None = None) -> dict:
    """Audit one run folder; returns the summary (also written to audit/summary.json), verdict included.

    Reads the store live when ``store`` is given (and snapshots it), else re-audits from
    ``store/``. ``jobs`` processes decode a large journal (see history.load_journal) and read
    and judge the live store in parallel (None: one per core for a large run, see ``_jobs``).
    ``gates``: the verdict's limits (default: strict). Raises JournalError, SnapshotError or
    StoreError (TemplateMismatch among them) on input it cannot use.
    """
    with _gc_paused():
        return _audit_run(run_dir, store, window_s, recovery_s, gates or verdict.parse_gates(None), jobs)


def _audit_run(run_dir, store, window_s, recovery_s, gates, jobs) -> dict:
    run_dir = Path(run_dir)
    clock = time.perf_counter()
    journal = load_journal(run_dir)
    timings = {"journal": time.perf_counter() - clock}
    problems = list(journal.problems)
    if store is not None:
        reader = make_reader(store)
        reader.check()
        shape, source = Shape(store), "live"
        reader_name, where, template = store.name(), store.where(), store.key_template
    else:
        meta = read_meta(run_dir)
        if not meta.get("complete"):
            raise SnapshotError(
                f"the snapshot in {run_dir / 'store'} is incomplete: reading {meta.get('url') or 'the store'} "
                f"stopped after {meta.get('sessions_read')} of {meta.get('sessions_expected')} sessions "
                f"({meta.get('error')}). Read the store again: pass --store-url (or --http-url / --reader)")
        options = options_from_meta(meta)
        shape, source = Shape(options), "snapshot"
        reader_name, where, template = meta.get("reader", "redis"), meta.get("url"), options.key_template

    audit_dir = RunFolder(run_dir).audit
    audit_dir.mkdir(exist_ok=True)
    findings = FindingsWriter(audit_dir / "anomalies.raw.tmp")
    sessions = list(journal.sessions)
    jobs = _jobs(jobs, store, len(sessions)) if source == "live" else 1
    judge = Judge(journal, shape, findings.write)
    foreign = ForeignKeys(template)
    started = time.time()
    writer = None
    try:
        if source == "live":
            writer = SnapshotWriter(run_dir, store, len(sessions), parts=jobs)
            if jobs == 1:
                done, batches_done, exc = read_and_judge(reader, sessions, writer, judge, store.on_batch)
            else:
                done, batches_done, exc = _parallel(run_dir, store, shape, journal, sessions, writer, judge,
                                                    findings, jobs)
            if exc is not None:
                writer.close(False, f"{type(exc).__name__}: {exc}")
                raise StoreError(
                    f"the store at {where} ({reader_name}) failed after {done} of {len(sessions)} sessions "
                    f"({batches_done} batches): {exc}. The partial snapshot is kept in {run_dir / 'store'} "
                    "(marked incomplete); run the audit again once the store is back") from exc
            foreign_iter = reader.foreign({store.key(s) for s in sessions}) if store.scan_foreign else ()
            try:
                for record in foreign_iter:
                    writer.write_foreign(record)
                    foreign.add(record)
                if judge.gone and hasattr(reader, "client"):
                    writer.meta["missing_keys"] = _diagnose(reader.client, store, journal, judge)
            except STORE_ERRORS as exc:
                if isinstance(exc, TemplateMismatch):
                    raise
                writer.close(False, f"{type(exc).__name__} during SCAN: {exc}")
                raise StoreError(f"the store at {where} failed while scanning its keys after reading "
                                 f"all {len(sessions)} sessions: {exc}. Run the audit again") from exc
            missing_keys = writer.meta.get("missing_keys")
            writer.close(True)
        else:
            for batch in prefetched(read_sessions(run_dir)):
                judge.batch(batch, prove_clean(batch, journal.sessions, shape))
            for record in read_foreign(run_dir):
                foreign.add(record)
            missing_keys = meta.get("missing_keys")
    except BaseException as exc:
        if writer is not None and not writer.closed:  # an audit bug or Ctrl-C: keep what was read, marked so
            writer.close(False, f"audit stopped: {type(exc).__name__}: {exc}")
        findings.close()
        findings.path.unlink(missing_ok=True)
        raise

    for f in judge.gone:
        if judge.ttl_in_use:
            f["class"] = "expired"
            f["evidence"]["ttl_in_use"] = True
            judge.dirty[f["session"]]["expired"] += 1
        _with_key_evidence(f, missing_keys)
        findings.write(f)
    findings.close()
    compact, causes, misrouted = rootcause.link(findings.path, audit_dir / "anomalies.jsonl.tmp")
    findings.path.unlink()
    (audit_dir / "anomalies.jsonl.tmp").replace(RunFolder(run_dir).anomalies)
    for session, turn in misrouted:  # written under another session's key: cross-talk, not a store loss
        if (session, turn) in judge.lost:
            judge.lost.discard((session, turn))
            judge.dirty[session]["lost_turns"] -= 1
            judge.dirty[session]["misrouted"] = judge.dirty[session].get("misrouted", 0) + 1
    problems += judge.problems
    missing = [s for s in sessions if s not in judge.judged]
    for s in missing[:20]:
        problems.append(f"session {s} is journaled but not in the stored reads; not judged")
    if len(missing) > 20:
        problems.append(f"... and {len(missing) - 20} more journaled sessions not in the stored reads")
    timings["read_check"] = time.perf_counter() - clock - timings["journal"]

    summary = tables(run_dir, journal, list(judge.judged), judge.dirty, compact, judge.lost, judge.anomalous,
                     window_s, recovery_s, problems, judge.entries)
    summary["causes"] = dict(sorted(causes.items()))
    summary["information"] = {"foreign_keys": foreign.information()}
    if missing_keys:
        summary["information"]["missing_keys"] = missing_keys
    summary["jobs"] = jobs
    summary["store"] = {"complete": True, "reader": reader_name, "url": where, "source": source,
                        "audit_seconds": time.time() - started}
    timings["tables"] = time.perf_counter() - clock - timings["journal"] - timings["read_check"]
    summary["timings"] = timings
    summary["verdict"] = verdict.evaluate(summary["observed"], gates)
    summary["verdict"]["root_causes"] = verdict.root_causes(causes, len(misrouted),
                                                            summary["metrics"]["probe_amnesia"]["count"])
    summary["thresholds"] = {name: str(limit) for name, limit in gates.limits.items()}
    summary["breaches"] = summary["verdict"]["failed"]
    RunFolder(run_dir).summary.write_text(codec.dumps_document(summary))
    return summary


def _diagnose(client, store: StoreOptions, journal, judge: Judge) -> dict:
    """Why acknowledged sessions have no key: raises TemplateMismatch when we look in the wrong place."""
    ok_sessions, first_ack, failed, answered = 0, None, 0, 0
    for turns in journal.sessions.values():
        acked = [t.received or t.sent for t in turns if t.outcome == "ok"]
        if acked:
            ok_sessions += 1
            first_ack = min(acked) if first_ack is None else min(first_ack, min(acked))
        for t in turns:
            if t.outcome == "ok" and t.verdict in ("pass", "amnesia"):
                answered += 1
                failed += t.verdict == "amnesia"
    gone = [f["session"] for f in judge.gone]
    return diagnose_missing_keys(client, store, gone, len(gone) >= ok_sessions, first_ack, (failed, answered))


def _with_key_evidence(f: dict, missing_keys: dict | None) -> None:
    if not missing_keys:
        return
    elsewhere = (missing_keys.get("found_elsewhere") or {}).get(f["session"])
    if elsewhere:
        f["evidence"]["found_under"] = elsewhere
    if missing_keys.get("restarted_at"):  # when exactly is in summary.information (a reading of the live server)
        f["evidence"]["store_restarted"] = True
    elif missing_keys.get("bot_forgot") and not elsewhere:
        f["evidence"]["bot_forgot"] = True


def journal_verdict(run_dir, gates: verdict.Gates | None = None, recovery_s: float = 5.0) -> dict:
    """The verdict from the journal alone, when the store is not audited: what the clients saw online
    (failed probes, cross-talk in replies, failed requests while no fault was in force); the gates
    that need the store are "not measured". Returns ``{"turns", "observed", "verdict"}``."""
    from oracle.attribution import intervals, overlapping
    from oracle.metrics import turn_table
    from oracle.timeline import load_faults

    run_dir = Path(run_dir)
    journal = load_journal(run_dir)
    turns = turn_table(journal, set(), set())
    run_end = float(turns["done"].max()) if len(turns) else 0.0
    quiet = ~overlapping(turns["sent"].to_numpy(dtype=float), turns["done"].to_numpy(dtype=float),
                         intervals(load_faults(run_dir), run_end, recovery_s))
    leaked = turns.loc[turns["online_crosstalk"], "sidx"].nunique()
    observed = {
        "probe_amnesia": {"count": int(turns["failed_probe"].sum()), "total": int(turns["answered_probe"].sum())},
        "crosstalk": {"count": int(leaked), "total": len(journal.sessions)},
        "errors": {"count": int((turns["error"].to_numpy() & quiet).sum()), "total": int(quiet.sum())},
    }
    judged = verdict.evaluate(observed, gates or verdict.parse_gates(None))
    judged["root_causes"] = verdict.root_causes({}, 0, observed["probe_amnesia"]["count"])
    counts = {"total": len(turns), "ok": int(turns["ok"].sum()), "fail": int(turns["fail"].sum()),
              "info": int(turns["info"].sum()), "errors": int(turns["error"].sum()),
              "probes_answered": observed["probe_amnesia"]["total"], "probes_failed": observed["probe_amnesia"]["count"],
              "crosstalk_replies": int(turns["online_crosstalk"].sum())}
    return {"turns": counts, "observed": observed, "verdict": judged}
