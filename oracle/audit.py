"""``audit_run``: journal + stored histories -> audit/ tables (the seam Locust's end-of-run hook calls).

Streams the store (or its snapshot) one batch of sessions at a time: read, snapshot,
decode, check, write findings; only per-session rows and compact per-turn verdicts stay in
memory. A store that dies mid-read leaves the partial snapshot marked incomplete and raises
``StoreError`` saying how far it got; the previous audit tables are left untouched.
"""
from __future__ import annotations

import gc
import json
import time
from contextlib import contextmanager
from collections import Counter
from pathlib import Path

import pandas as pd
import redis
import requests

from oracle import fastjson
from oracle.attribution import by_fault, by_step
from oracle.checkers import check_session, finding
from oracle.decode import Shape, decode_session
from oracle.explain import explain
from oracle.history import load_journal
from oracle.prefetch import prefetched
from oracle.metrics import quantiles, turn_table, wilson
from oracle.snapshot import (SnapshotError, SnapshotWriter, options_from_meta, read_foreign, read_meta,
                             read_sessions)
from oracle.store import StoreError, StoreOptions, make_reader
from oracle.thresholds import breaches
from oracle.timeline import load_faults, load_steps
from oracle.windows import window_table

SESSION_COLUMNS = ["session", "turns", "ok", "fail", "info", "info_stored", "probes", "probes_answered",
                   "probes_failed", "lost", "crosstalk", "reordered", "duplicated", "corrupt", "vanished",
                   "unanswered", "anomalous", "first_sent", "last_received",
                   # additions after the pinned columns (backward compatible)
                   "expired", "aborted", "lost_turns", "crosstalk_online", "exists"]
STORE_ERRORS = (StoreError, redis.RedisError, OSError, requests.RequestException)


class FindingsWriter:
    """Numbers, explains and streams findings to anomalies.jsonl; keeps what the tables need."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "wb")
        self.ids: Counter = Counter()
        self.compact: list[tuple] = []  # (class, session, turn, time)

    def write(self, f: dict) -> None:
        self.ids[f["class"]] += 1
        record = {"id": f"{f['class']}-{self.ids[f['class']]}", **f, "explanation": explain(f)}
        self.file.write(fastjson.dumps_line(record))
        self.compact.append((f["class"], f["session"], f["turn"], f["time"]))

    def close(self) -> None:
        self.file.close()


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
              thresholds: dict | None = None) -> dict:
    """Audit one run folder; returns the summary (also written to audit/summary.json).

    Reads the store live when ``store`` is given (and snapshots it), else re-audits from
    ``store/``. Raises JournalError, SnapshotError or StoreError on input it cannot use.
    """
    with _gc_paused():
        return _audit_run(run_dir, store, window_s, recovery_s, thresholds)


def _audit_run(run_dir, store, window_s, recovery_s, thresholds) -> dict:
    run_dir = Path(run_dir)
    clock = time.perf_counter()
    journal = load_journal(run_dir)
    timings = {"journal": time.perf_counter() - clock}
    problems = list(journal.problems)
    if store is not None:
        reader = make_reader(store)
        reader.check()
        shape, source = Shape(store), "live"
        reader_name, where = store.name(), store.where()
    else:
        meta = read_meta(run_dir)
        if not meta.get("complete"):
            raise SnapshotError(
                f"the snapshot in {run_dir / 'store'} is incomplete: reading {meta.get('url') or 'the store'} "
                f"stopped after {meta.get('sessions_read')} of {meta.get('sessions_expected')} sessions "
                f"({meta.get('error')}). Read the store again: pass --store-url (or --http-url / --reader)")
        shape, source = Shape(options_from_meta(meta)), "snapshot"
        reader_name, where = meta.get("reader", "redis"), meta.get("url")

    audit_dir = run_dir / "audit"
    audit_dir.mkdir(exist_ok=True)
    findings = FindingsWriter(audit_dir / "anomalies.jsonl.tmp")
    rows: dict[str, dict] = {}
    gone: list[dict] = []          # vanished findings: expired or vanished is decided once all TTLs are seen
    lost: set = set()
    anomalous: set = set()
    ttl_in_use = False
    sessions = list(journal.sessions)
    seen: set[str] = set()

    def judge(batch) -> None:
        nonlocal ttl_in_use
        for raw in batch:
            turns = journal.sessions.get(raw.session)
            if turns is None:
                problems.append(f"snapshot session {raw.session} is not in the journal; not judged")
                continue
            seen.add(raw.session)
            ttl_in_use = ttl_in_use or (raw.exists and raw.ttl is not None and raw.ttl >= 0)
            result = check_session(raw.session, turns, raw, decode_session(raw, shape), journal.sessions)
            rows[raw.session] = {"session": raw.session, **result.stats}
            for f in result.findings:
                if f["class"] == "vanished":
                    gone.append(f)
                else:
                    findings.write(f)
                if f["turn"] is not None:
                    anomalous.add((raw.session, f["turn"]))
            for turn in result.lost_turns:
                lost.add((raw.session, turn))
                anomalous.add((raw.session, turn))

    started = time.time()
    writer = None
    try:
        if source == "live":
            writer = SnapshotWriter(run_dir, store, len(sessions))
            done, batches_done = 0, 0
            iterator = prefetched(reader.read(sessions))
            while True:
                try:
                    batch = next(iterator, None)
                    if batch is None:
                        break
                    writer.write_batch(batch)
                except STORE_ERRORS as exc:
                    writer.close(False, f"{type(exc).__name__}: {exc}")
                    raise StoreError(
                        f"the store at {where} ({reader_name}) failed after {done} of {len(sessions)} sessions "
                        f"({batches_done} batches): {exc}. The partial snapshot is kept in {run_dir / 'store'} "
                        "(marked incomplete); run the audit again once the store is back") from exc
                judge(batch)
                done += len(batch)
                batches_done += 1
                if store.on_batch:
                    store.on_batch(batches_done, done)
            foreign_iter = reader.foreign({store.key(s) for s in sessions}) if store.scan_foreign else ()
            try:
                for record in foreign_iter:
                    writer.write_foreign(record)
                    findings.write(finding("foreign", None, None, None, **record))
            except STORE_ERRORS as exc:
                writer.close(False, f"{type(exc).__name__} during SCAN: {exc}")
                raise StoreError(f"the store at {where} failed while scanning for foreign keys after reading "
                                 f"all {len(sessions)} sessions: {exc}. Run the audit again") from exc
            writer.close(True)
        else:
            for batch in prefetched(read_sessions(run_dir)):
                judge(batch)
            for record in read_foreign(run_dir):
                findings.write(finding("foreign", None, None, None, **record))
    except BaseException as exc:
        if writer is not None and not writer.closed:  # an audit bug or Ctrl-C: keep what was read, marked so
            writer.close(False, f"audit stopped: {type(exc).__name__}: {exc}")
        findings.close()
        findings.path.unlink(missing_ok=True)
        raise

    for f in gone:
        if ttl_in_use:
            f["class"] = "expired"
            f["evidence"]["ttl_in_use"] = True
            rows[f["session"]]["expired"] += 1
        findings.write(f)
    findings.close()
    missing = [s for s in sessions if s not in seen]
    for s in missing[:20]:
        problems.append(f"session {s} is journaled but not in the stored reads; not judged")
    if len(missing) > 20:
        problems.append(f"... and {len(missing) - 20} more journaled sessions not in the stored reads")
    findings.path.replace(audit_dir / "anomalies.jsonl")
    timings["read_check"] = time.perf_counter() - clock - timings["journal"]

    summary = tables(run_dir, journal, rows, findings, lost, anomalous, window_s, recovery_s, problems)
    summary["store"] = {"complete": True, "reader": reader_name, "url": where, "source": source,
                        "audit_seconds": time.time() - started}
    timings["tables"] = time.perf_counter() - clock - timings["journal"] - timings["read_check"]
    summary["timings"] = timings
    thresholds = dict(thresholds or {})
    summary["thresholds"] = thresholds
    summary["breaches"] = breaches(summary, **thresholds)
    (audit_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=_jsonable) + "\n")
    return summary


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def tables(run_dir: Path, journal, rows: dict, findings: FindingsWriter, lost: set, anomalous: set,
           window_s: float, recovery_s: float, problems: list[str]) -> dict:
    """sessions.csv, windows.csv and the summary dict (pandas from here on)."""
    audit_dir = run_dir / "audit"
    sessions = pd.DataFrame(list(rows.values()), columns=SESSION_COLUMNS)
    sessions.to_csv(audit_dir / "sessions.csv", index=False)
    turns = turn_table(journal, lost, anomalous)
    found = pd.DataFrame(findings.compact, columns=["class", "session", "turn", "time"])
    faults = load_faults(run_dir, problems)
    steps = load_steps(run_dir, problems)
    windows = window_table(turns, found, faults, steps, window_s)
    windows.to_csv(audit_dir / "windows.csv", index=False)

    judged = turns[turns["session"].isin(rows)] if len(rows) != len(journal.sessions) else turns
    ok = judged["outcome"] == "ok"
    run_end = float(windows["end"].iloc[-1]) if not windows.empty else 0.0
    span = (judged["done"].max() - judged["sent"].min()) if not judged.empty else 0.0
    fault_rows, baseline = by_fault(judged, windows, faults, run_end, recovery_s)
    label = _label(run_dir)
    counts = Counter(c for c, *_ in findings.compact)
    return {
        "run": journal.run, "label": label, "window_s": window_s, "recovery_s": recovery_s,
        "sessions": int(len(sessions)),
        "turns": {"total": int(len(judged)), "ok": int(ok.sum()), "fail": int((judged["outcome"] == "fail").sum()),
                  "info": int((judged["outcome"] == "info").sum()),
                  "info_stored": int(sessions["info_stored"].sum()) if len(sessions) else 0},
        "metrics": {
            "probe_amnesia": wilson(judged["failed_probe"].sum(), judged["answered_probe"].sum()),
            "stored_loss": wilson(sessions["lost_turns"].sum() if len(sessions) else 0, ok.sum()),
            "session_amnesia": wilson(sessions["anomalous"].sum() if len(sessions) else 0, len(sessions)),
            "crosstalk": wilson(((sessions["crosstalk"] + sessions["crosstalk_online"]) > 0).sum()
                                if len(sessions) else 0, len(sessions)),
        },
        "throughput": float(ok.sum() / span) if span and span > 0 else 0.0,
        "latency": quantiles(judged.loc[ok, "latency"].tolist()),
        "anomalies": dict(sorted(counts.items())),
        "by_fault": fault_rows, "baseline": baseline, "steps": by_step(judged, steps),
        "faults": [f.__dict__ for f in faults],
        "problems": problems,
    }


def _label(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("label")
    except (OSError, ValueError, AttributeError):
        return None
