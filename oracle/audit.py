"""``audit_run``: journal + stored histories -> audit/ tables and the verdict, in flat memory.

One path, in stages that each run once:
1. judge: the journal is streamed and each conversation judged once it completes, a batch at a
   time, with every piece of evidence it needs (oracle/judge.py): its stored history read (or the
   snapshot's copy), snapshotted, checked, tallied. The work is split into fixed partitions of the
   users, judged in this process (``jobs=1``) or by a pool of processes; each partition writes its
   own files, which are put together in partition order, so the output never depends on ``jobs``;
2. link: findings of different sessions that are one fault become one cause (oracle/rootcause.py);
3. tables and summary from the added-up tallies (oracle/tables.py), then the verdict (oracle/verdict.py).
Memory is set by the batch size, the open conversations and the run's duration (one row per
window), not by how many turns the run had.

A store that dies mid-read leaves the partial snapshot marked incomplete and raises ``StoreError``;
the previous audit tables are left untouched (all are written to temporary files and renamed).
"""
from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import os
import re
import shutil
import signal
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import redis
import requests

from contracts import codec
from contracts.runfolder import RunFolder, cannot_write
from oracle import judge, rootcause, verdict
from oracle.attribution import LASTING
from oracle.history import MAX_PROBLEMS, PARTITIONS, Journal, JournalError, NoRecords, Problems
from oracle.judge import Context, Evidence, Fault
from oracle.keys import (FORGETFUL, ForeignKeys, SessionSet, TemplateMismatch, check_layout, diagnose_missing_keys,
                         issued_ids, lost_since_the_read, store_evidence)
from oracle.options import OptionError, check_roles
from oracle.snapshot import SnapshotError, SnapshotWriter, options_from_meta, read_foreign, read_meta
from oracle.store import StoreError, StoreOptions, make_reader
from oracle.tables import SESSION_COLUMNS, add_confirmed_crosstalk, summary as build_summary
from oracle.tally import WINDOW_COUNTS, Tally
from oracle.telemetry import unanswered_outside_faults
from oracle.timeline import check_faults, idle_plan, load_faults, load_steps, unapplied

STORE_ERRORS = (StoreError, redis.RedisError, OSError, requests.RequestException)
PARALLEL_MIN_BYTES = 4 << 20  # a smaller journal is judged faster than processes start
PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal a process gets when its parent dies


def _said(exc: BaseException):
    """A store error as a message says it: a Sentinel client's without its clients' object dumps."""
    from redis.sentinel import MasterNotFoundError, SlaveNotFoundError

    from oracle.redis_reader import no_master
    return no_master(exc) if isinstance(exc, (MasterNotFoundError, SlaveNotFoundError)) else exc


class WorkerError(Exception):
    """A judging process died or raised something that is not a store error."""


def audit_run(run_dir, store: StoreOptions | None = None, window_s: float = 5.0, recovery_s: float = 5.0,
              gates: verdict.Gates | None = None, jobs: int | None = None, shape: dict | None = None) -> dict:
    """Audit one run folder; returns the summary (also written to audit/summary.json), verdict included.

    Reads the store live when ``store`` is given (and snapshots it), else re-audits from ``store/``.
    ``jobs``: processes judging partitions in parallel (None: one per core, at most 8, for a Redis or
    snapshot audit of a journal big enough; 1 in a gevent-patched process such as Locust's).
    ``gates``: the verdict's limits (default: strict). ``shape``: element-shape fields (role and text fields,
    roles, messages field) that replace the snapshot's in a re-audit (oracle.options.shape_options).
    Raises JournalError, SnapshotError or StoreError (TemplateMismatch among them) on input it cannot use, and
    AuditBusy while another audit of the same folder runs.
    """
    with RunFolder(run_dir).audit_lock():
        return _audit_run(run_dir, store, window_s, recovery_s, gates, jobs, shape)


def _audit_run(run_dir, store, window_s, recovery_s, gates, jobs, shape) -> dict:
    folder = RunFolder(run_dir)
    clock = time.perf_counter()
    journal = Journal.open(folder.path)
    journal_bytes = folder.journal_bytes()  # before reading it: a journal still growing is not all judged
    journal.require_records()  # before the store or its snapshot: without a journal there is nothing to judge
    problems: list[str] = require_whole_journal(folder, journal_bytes)  # before anything is read or replaced
    _own_outputs(folder)
    faults, steps = load_faults(folder.path, problems), load_steps(folder.path, problems)
    live = store is not None
    # before the store is read, or the snapshot replaced; offline too: another run's run.json (its trust fields,
    # plan, label, journal size) would judge this journal as that run's, a cut-short run's NOT TRUSTED a PASS
    journal.require_own_run()
    if live:
        reader = make_reader(store)
        reader.check()
        try:
            evidence = store_evidence(reader, folder, store)
        except (redis.RedisError, requests.RequestException) as exc:  # a store that died before anything was read
            raise StoreError(f"the store at {store.where()} ({store.name()}) failed while its evidence was read "
                             f"(keys still there since the run's own read, TTLs, counters), before any session was "
                             f"read: {_said(exc)}. Nothing was judged or replaced; run the audit again once the store "
                             f"is back") from exc
        options, source = store, "live"
    else:
        meta = read_meta(folder.path)
        if not meta.get("complete"):
            read, error = meta.get("sessions_read"), meta.get("error")
            raise SnapshotError(
                f"the snapshot in {folder.store} is incomplete: reading {meta.get('url') or 'the store'} stopped "
                + (f"after {read} sessions" if isinstance(read, int) else "part way")
                + (f" ({error[:300]})" if isinstance(error, str) and error else "") + ". Read the store again: pass "
                "--store-url (or --http-url / --reader)")
        if meta.get("partitions") != PARTITIONS:
            raise SnapshotError(f"the snapshot in {folder.store} was written by an older goldfish; read the store "
                                "again: pass --store-url (or --http-url / --reader)")
        options, source = dataclasses.replace(options_from_meta(meta), **(shape or {})), "snapshot"
        try:
            check_roles(options)
        except OptionError as exc:
            if shape:  # the roles given with the snapshot's
                raise StoreError(f"{exc} (the snapshot's roles with the ones given)") from None
            raise SnapshotError(f"{folder.store / 'meta.json'}: its roles are damaged ({exc}; no option was given): "
                                "read the store again: pass --store-url (or --http-url / --reader)") from None
        evidence = meta.get("evidence") or {}
    kinds = tuple(sorted({f.kind for f in faults}))
    context = Context(folder.path, options, live,
                      Evidence.of(evidence),
                      kinds, [Fault(kinds.index(f.kind), f.start, f.end if f.end is not None else float("inf"),
                                    f.kind in LASTING) for f in faults if f.effective], window_s, recovery_s)
    shutil.rmtree(folder.audit / "parts", ignore_errors=True)
    writer = SnapshotWriter(folder.path, store, evidence, PARTITIONS) if live else None
    jobs = _jobs(jobs, journal, store)
    try:
        tally, results = _judge(context, jobs)
        sessions, ok_sessions = sum(r.sessions for r in results), sum(r.ok_sessions for r in results)
        if not sessions:
            first = next((p for r in results for p in r.problems.texts), None)
            raise NoRecords(f"{folder.journal} holds no valid journal records"
                               + (f"; first problem: {first}" if first else ""))
        check_layout(sum((r.order for r in results), Counter()), options, live,
                     tally.totals["failed_probes"] > tally.totals["answered"] * FORGETFUL, issued_ids(folder, options))
        owned = SessionSet()
        for r in results:
            owned.merge(r.judged)
        foreign = ForeignKeys(options.key_template, scanned=not live or store.scan_foreign)
        missing_keys = evidence.get("missing_keys")
        gone = [s for r in results for s in r.gone][:judge.GONE_SAMPLE]
        if live:
            for record in (reader.foreign(owned.keys(store)) if store.scan_foreign else ()):
                if "type" in record:  # described: listed in the snapshot; the rest only counted
                    writer.write_foreign(record)
                foreign.add(record, owned)
            writer.meta["foreign"] = foreign.information()
            if gone and hasattr(reader, "client") or store.http_url and not sum(r.entries for r in results):
                missing_keys = writer.meta["evidence"]["missing_keys"] = diagnose_missing_keys(
                    getattr(reader, "client", None), store, gone, sum(r.gone_count for r in results) >= ok_sessions,
                    tally.first_ack, (tally.totals["failed_probes"], tally.totals["answered"]),
                    sum(r.gone_count for r in results), evidence.get("counters_at_start"),
                    sum(r.keys_seen for r in results), folder.run_json, sessions, bool(evidence.get("ttl_in_use")),
                    lambda: in_process_evidence(folder.path, faults, tally),  # a journal pass: only if it is asked
                    {s: issued for r in results for s, issued in r.gone_as.items()})
            changed = lost_since_the_read(reader.client, folder.run_json, store) \
                if folder.store.exists() and hasattr(reader, "client") else None
            if changed:  # flushed, restarted or expired while this audit read it: the run's evidence is kept
                raise TemplateMismatch(f"{changed} (found as this audit's read ended: the store lost them while it was "
                                       "read; the earlier snapshot and tables are kept)")
            writer.close(True, sessions)
        else:
            for record in read_foreign(folder.path):
                foreign.add(record)
            if isinstance(meta.get("foreign"), dict):  # the counts of every foreign key, listed or not
                foreign = ForeignKeys.counted(options.key_template, meta["foreign"])
    except BaseException as exc:
        # the run folder's device refused a write (full, read-only): not the store's failure; nothing of this
        # audit is kept (its read included), the earlier snapshot and tables stand
        full = cannot_write(exc, f"the audit's partition files in {folder.audit / 'parts'}"
                                 + (f" and the snapshot in {folder.store_reading}" if live else ""))
        if writer is not None and not writer.closed:  # a store error, an audit bug or Ctrl-C: keep what was read
            if full is None:
                try:
                    writer.close(False, error=f"{type(exc).__name__}: {exc}")
                except OSError as also:  # the device filled up as well: the read went (SnapshotWriter.close)
                    full = cannot_write(also, folder.store_reading)
                    if full is None:
                        raise
            else:
                writer.discard()
        shutil.rmtree(folder.audit / "parts", ignore_errors=True)
        if full is not None:
            raise full from None
        if isinstance(exc, OSError) and exc.filename is not None:  # a file of the run folder, not the store
            raise
        if isinstance(exc, STORE_ERRORS) and not isinstance(exc, (StoreError, SnapshotError)):
            kept = f"the earlier complete snapshot in {folder.store} is kept" if writer and writer.kept_earlier else \
                f"the partial snapshot is kept in {folder.store} (marked incomplete)"
            again = refused_command(exc) or "run the audit again once the store is back"
            raise StoreError(f"the store at {options.where()} ({options.name()}) failed after "
                             f"{writer.meta['sessions_read'] if writer else 0} sessions: {_said(exc)}. {kept[0].upper()}"
                             f"{kept[1:]}; {again}") from exc
        raise
    check_faults(folder.path, faults, tally.first_sent, tally.last_done, problems)
    problems += filter(None, [idle_plan(folder.path, faults, tally.last_done),
                              unanswered_outside_faults(folder.path, faults, recovery_s)])
    read_s = time.perf_counter() - clock
    with _tables_or_nothing(folder):
        raw = _concatenate(folder, "anomalies.raw", folder.audit / "anomalies.raw.tmp")
        _concatenate(folder, "sessions.csv", folder.audit / "sessions.csv.tmp", header=",".join(SESSION_COLUMNS) + "\n")
        read_at = writer.meta["read_start"] if live else meta.get("read_start")
        outages = [(kinds[f.kind], f.start, f.end) for f in context.faults if kinds[f.kind] in rootcause.STORE_DOWN]
        linked = rootcause.link(raw, folder.audit / "anomalies.jsonl.tmp", journal, window_s, missing_keys, read_at,
                                outages)
        if linked.confirmed:
            add_confirmed_crosstalk(folder.audit / "sessions.csv.tmp", linked.confirmed, tally.totals)
        raw.unlink()
        shutil.rmtree(folder.audit / "parts", ignore_errors=True)
        run = next((r.run for r in results if r.run), None) or folder.name
        found = Problems()
        for r in results:
            found.merge(r.problems)
        found.extend(problems)
        if linked.window:
            found.extend([window_warning(linked.window)])
        found.extend(list(filter(None, [rootcause.shared_key_warning(linked.shared_keys)])))
        found.extend(unspanned(tally, context.faults) if tally.totals["answered"] else [])
        found.extend(short_ttl(evidence, linked.classes.get("expired", 0) + tally.totals["expired_after_end"]))
        found.extend(after_end_note(tally.totals, evidence, (folder.audit / "rolling").is_dir()))
        found.extend(stored_yet_forgotten(tally.totals, linked.classes))
        recorded = _run_json(folder)  # read once: the trust record below and the workers' note
        found.extend(tally.far_turns(folder.audit / "sessions.csv.tmp"))  # turns days off the rest: a wrong clock
        found.extend(sibling_keys(linked.classes, foreign, owned, options.key_template))
        found.extend(renamed_keys(foreign))
        result = build_summary(folder.path, run, tally, faults, steps, linked.causes, (linked.anomalies, linked.crosstalk),
                               window_s, recovery_s, sum(r.entries for r in results), linked.misrouted, found,
                               sum(r.unreadable for r in results))
        result["anomalies"] = dict(sorted(linked.classes.items()))
        result["causes"] = dict(sorted(linked.causes.items()))
        result["information"] = {"foreign_keys": foreign.information()}
        if journal.copies:  # a killed master's journal completed from its workers' own copies (oracle/history.py)
            result["information"]["journal_copies"] = journal.copies
        if missing_keys:
            result["information"]["missing_keys"] = missing_keys
        result["jobs"] = jobs
        result["journal"] = {"bytes": journal_bytes}
        result["run_record"] = verdict.trust_record(recorded)  # run.json removed since: still told
        reused = sum(r.reused for r in results)
        if reused:  # the rolling audit's judgements that stood: key and journal unchanged since (oracle/rolling.py)
            result["rolling"] = {"reused": reused}
        result["store"] = {"complete": True, "reader": options.name(), "url": options.where(), "source": source}
        result["timings"] = {"read_judge": read_s, "total": time.perf_counter() - clock, **_peak_rss()}
        gates = gates or verdict.parse_gates(None)
        t = tally.totals
        result["verdict"] = verdict.require_applied(verdict.require_healed(verdict.require_quiet(
            verdict.require_measured(verdict.evaluate(result["observed"], gates), result["turns"]["ok"], t["probes"],
                                     t["answered"], gates, scripted_probes(folder), t["probes_interrupted"]),
            t["errors"], t["errors_quiet"], t["turns_quiet"], t["turns"], gates), faults), unapplied(folder.path))
        if linked.unfinished:  # a FAIL of it is NOT TRUSTED (verdict.unfinished_replies)
            result["verdict"]["unfinished_replies"] = {"count": linked.unfinished, **linked.unfinished_first}
        elif one_reply_read(linked, result["turns"]["ok"]):  # likewise
            (reply, count), = linked.unanswered_replies.items()
            result["verdict"]["unfinished_replies"] = {"count": count, "reply": reply, "same": True,
                                                       "stored": sorted(linked.stored_instead)[0]}
        result["verdict"]["root_causes"] = verdict.root_causes(linked.causes, linked.misrouted + linked.misfiled_replies,
                                                               result["metrics"]["probe_amnesia"]["count"],
                                                               tally.totals["leaked_sessions"])
        said = errors_said(result["verdict"], tally)
        result["problems"] = (said + result["problems"])[:MAX_PROBLEMS]
        result["problems_total"] += len(said)
        result["thresholds"] = {name: str(limit) for name, limit in gates.limits.items()}
        result["breaches"] = result["verdict"]["failed"]
        (folder.audit / "summary.json.tmp").write_text(codec.dumps_document(result))
        for name, target in (("anomalies.jsonl", folder.anomalies), ("sessions.csv", folder.sessions_csv),
                             ("windows.csv", folder.windows_csv), ("summary.json", folder.summary)):
            (folder.audit / f"{name}.tmp").replace(target)  # the tables as a set: never new ones beside an old verdict
    return result


def _run_json(folder: RunFolder) -> dict:
    """run.json as it is ({} when it cannot be read: the verdict says why, oracle.verdict); when it is gone, the
    trust record the earlier audit kept of it (a NOT TRUSTED run re-audited once its run.json was removed PASSed,
    exit 0: input hunt 15)."""
    if not folder.run_json.exists() and not folder.run_json.is_symlink():
        try:
            earlier = codec.load_document(folder.summary).get("run_record") if folder.summary.is_file() else None
        except (OSError, codec.DecodeError, AttributeError):
            earlier = None
        return earlier if isinstance(earlier, dict) else {}
    try:
        return codec.load_document(folder.run_json)
    except (OSError, codec.DecodeError):
        return {}


def scripted_probes(folder: RunFolder) -> int | None:
    """The recall probes a conversation of the run's script holds (run.json's ``script_probes``), None when not known
    (an older run.json, or none): a run that sent none of them measured nothing of memory."""
    try:
        value = codec.load_document(folder.run_json).get("script_probes")
    except (OSError, codec.DecodeError, AttributeError):
        return None
    return value if type(value) is int and value >= 0 else None


def require_whole_journal(folder: RunFolder, now: int) -> list[str]:
    """JournalError when the journal holds fewer bytes (``now``: ``RunFolder.journal_bytes``, the shards and the
    workers' copies) than the run recorded in run.json as it ended (``journal.bytes``: locustfiles/endofrun.py),
    or than the earlier audit of this folder judged (audit/summary.json's ``journal.bytes``): lines were lost
    since (a partial copy, a cut or edited shard), and judging what is left is a verdict of part of the run,
    which replaced the earlier summary with a PASS. Nothing is read or replaced then. A journal that grew is
    fine (a worker's own copy brought in after a killed master: the audit reads it). Returns warnings: a
    recorded size that is not a whole number of bytes (an edited file) is not used, and said so.
    A run.json or summary that does not record the size (an older goldfish), or cannot be read, checks nothing."""
    warnings, recorded = [], []
    for path, where in ((folder.run_json, "run.json recorded as the run ended"),
                        (folder.summary, "the earlier audit of this folder judged (audit/summary.json)")):
        try:
            document = codec.load_document(path) if path.is_file() else {}
        except (OSError, codec.DecodeError):  # judged elsewhere (a damaged run.json is NO VERDICT at its end)
            continue
        journal = document.get("journal")
        size = journal.get("bytes") if isinstance(journal, dict) else None
        if size is None:
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            warnings.append(f"{path}: journal.bytes {codec.short(size)} is not a whole number of bytes; whether the "
                            "journal lost lines since cannot be told from it")
            continue
        recorded.append((size, path, where))
    if not recorded:
        return warnings
    size, path, where = max(recorded, key=lambda r: r[0])
    if now < size:
        raise JournalError(
            f"{folder.journal}: the journal holds {now:,} bytes (its shards and the workers' copies), fewer than the "
            f"{size:,} bytes {where} ({path}): it lost lines since (a partial copy, a cut or edited shard), and a "
            "verdict of what is left would be a verdict of part of the run. Nothing was judged or replaced: the "
            "earlier audit tables and snapshot are as they were. Put the whole journal back (from a backup, or the "
            f"workers' own copies in {folder.workers}) and audit again")
    return warnings


def refused_command(exc: BaseException) -> str | None:
    """What to change when the store refused a command (an ACL, a renamed command, a Sentinel's port given
    as the store, a Redis Cluster's node): waiting for the store to come back changes nothing. None for any other
    failure."""
    if isinstance(exc, (redis.exceptions.AskError, redis.exceptions.ClusterError)):  # MovedError is an AskError
        said = "whose cluster is down (CLUSTERDOWN)" if isinstance(exc, redis.exceptions.ClusterDownError) else \
            "which sent a key to another node"  # a node of a cluster that is down moves nothing (input hunt 17)
        return (f"it is a node of a Redis Cluster, {said}: the audit reads one Redis "
                "server; read the cluster with --reader (a function from session ids to histories, using "
                "redis.cluster.RedisCluster: docs/oracle.md \"Readers\")")
    if not isinstance(exc, redis.ResponseError) or not any(
            why in str(exc) for why in ("unknown command", "no permissions", "NOPERM")):
        return None
    scan = "SCAN (or pass --no-scan), " if "scan" in str(exc).lower() else ""
    return (f"it refuses a command the audit needs: it reads each session with TTL and LRANGE or GET (and TYPE "
            f"with the command of its type), {scan}and INFO; grant them to the URL's user (ACL: +@read on the "
            "keys, +ping, +info, and +select for a database other than 0), or point --store-url at the Redis that holds the keys (a Sentinel's port is not one: "
            "redis+sentinel://host:port/service/db)")


def unspanned(tally: Tally, faults: list[Fault]) -> list[str]:
    """A warning per fault kind no conversation spanned: memory across it was not measured, so a PASS says
    nothing of it (a bot keeping memory in its process PASSed a restart plan at --think 0)."""
    kinds = sorted({f.kind for f in faults})
    return [f"chaos: no conversation had a turn acknowledged before a {tally.kinds[k]} fault began and a recall "
            f"probe answered after it: memory across {tally.kinds[k]} was not measured (give --think, e.g. 0.5-2, "
            "or longer conversations, so that conversations outlive the faults)"
            for k in kinds if not tally.spanned[k]]


SHORT_TTL_S = 3600.0  # a history that expires sooner forgets a user who comes back within the hour


def short_ttl(evidence: dict, expired: int = 0) -> list[str]:
    """A warning when the bot's history keys expire within the hour: a user who pauses longer than the TTL is
    forgotten, and an audit that reads the keys before they expire PASSes without having measured that (a bot
    whose 30-second TTL forgot every user who took a minute to answer PASSed silently). Not when keys of the
    run did expire (``expired`` sessions): then it is said by the findings, or by ``after_end_note``."""
    floor = evidence.get("ttl_floor")
    if expired or isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor < SHORT_TTL_S:
        return []
    return [f"store: the keys under the key template expire: the shortest TTL a key was given is about "
            f"{max(1, round(floor)):,} s. A user who pauses longer than that between two messages is forgotten (by "
            "design or not); this run's keys were read before they expired, so the verdict says nothing of it. To "
            "measure it, give the conversations pauses longer than the TTL (--think): the sessions whose keys expire "
            "then count against the expired gate"]


def stored_yet_forgotten(totals, classes) -> list[str]:
    """A warning when recall probes failed though the audit found every acknowledged turn stored, once and in order:
    the facts were kept, but not read back when the probe came. A bot that replies before its write lands (a
    write-behind thread), or reads a replica or a cache that lags, FAILed on probes alone, its report saying "No
    anomalies" with nothing pointing at the stale read (LangChain hunt 16)."""
    failed = totals["failed_probes"]
    if not failed or classes or totals["expired_after_end"]:  # histories not judged: whether they were kept is unknown
        return []
    return [f"store: {failed:,} recall probe(s) failed, yet every acknowledged turn is stored, once and in order: the "
            "facts were kept but not read back when the probe came. The bot answers before its write is readable "
            "(it writes after it replies), reads a copy that lags (a replica, a cache), or does not use what it "
            "read (a model that ignores its context)"]


def after_end_note(totals, evidence: dict, rolling: bool = False) -> list[str]:
    """Sessions whose keys expired only once their conversations were over (judge.Evidence.gone_class): by
    design, and not judged from the store. Said, with how to judge them: a soak longer than the bot's TTL
    FAILed a correct bot, every such session "expired", its turns stored loss. ``rolling``: the run had a
    rolling audit (--audit-every), which then read too late as well: a shorter period is the advice."""
    n = totals["expired_after_end"]
    if not n:
        return []
    floor = evidence.get("ttl_floor")
    ttl = f", at least about {max(1, round(floor)):,} s" if isinstance(floor, (int, float)) and not isinstance(floor, bool) \
        else ""
    return [f"store: the keys of {n:,} session(s) expired after their conversations ended, before the audit read "
            f"them (no pause in those conversations was as long as the keys' TTL{ttl}): the bot keeps a history "
            f"that long after its last message, by design. Their histories were not judged (their recall probes "
            f"were), and their {totals['expired_after_end_ok']:,} acknowledged turns are left out of stored loss. "
            "To judge them, read the store before the TTL runs out: "
            + ("a shorter --audit-every than this run's (its rolling audit read them after they expired too)"
               if rolling else "a shorter --settle, or the rolling audit during the run (--audit-every)")]


ONE_REPLY_MIN = 10  # turns found unanswered, all with the one reply, before it says more of the options than the bot


def one_reply_read(linked, ok_turns: int) -> bool:
    """Nearly every acknowledged turn (9 in 10, at least ``ONE_REPLY_MIN``) was found unanswered with the same reply
    read ('' or 'ok'), while the store holds other answers in their place: the options read the reply where the bot
    does not put it (a constant field, an empty body beside a reply in a header), and every probe failed on it too.
    A correct bot FAILed '100% unanswered, 100% probe amnesia', its storage blamed (API hunt 18)."""
    count = sum(linked.unanswered_replies.values())
    return len(linked.unanswered_replies) == 1 and count >= max(ONE_REPLY_MIN, 0.9 * ok_turns) and \
        len(linked.stored_instead) >= 2


def errors_said(v: dict, tally: Tally) -> list[str]:
    """Why requests failed (``failure_reasons``, ``refused_burst_note``), when the verdict failed the errors gate or
    says nothing was acknowledged: first, so that a CI log shows them beside the line they explain."""
    failed = verdict.NOTHING_ACKNOWLEDGED in v["failed"] or any(
        r.get("gate") == "errors" and r.get("result") == verdict.FAIL for r in v["rules"])
    return failure_reasons(tally) + refused_burst_note(tally.totals) if failed else []


def failure_reasons(tally: Tally, shown: int = 3) -> list[str]:
    """A warning naming why the requests no fault explains failed, the commonest reasons first, as the journal
    recorded them: a CI log then says why the errors gate failed, or why nothing was acknowledged, without
    Locust's failure table (a bot whose JSON was encoded twice said only "refused, unreachable or always
    failing", every turn a 200)."""
    if not tally.failures:
        return []
    reasons = ", ".join(f"{codec.short(text, 200)} ({count:,})" for text, count in tally.failures.most_common(shown))
    more = len(tally.failures) - shown
    return [f"errors: the {tally.totals['errors_quiet']:,} failed request(s) no fault explains failed with: {reasons}"
            + (f", and {more:,} other reason(s)" if more > 0 else "")]


def refused_burst_note(totals) -> list[str]:
    """A warning when most failed requests no fault explains are turns of a burst (a double-send) the bot answered
    with a 4xx: a thread API that refuses a message while the conversation's previous one is in flight (OpenAI
    Assistants' "thread has an active run", LangGraph's ``multitask_strategy=reject``) FAILed the errors gate with
    no word that every failure was such a refusal (bot hunt 9, h_conflict409)."""
    refused, errors = totals["errors_quiet_refused_burst"], totals["errors_quiet"]
    if not refused or 2 * refused < errors:
        return []
    return [f"errors: {refused:,} of the {errors:,} failed requests no fault explains are turns of a burst (the "
            "script's `burst` steps: messages sent while the conversation's previous one was in flight) that the bot "
            "answered with a 4xx status: it refuses a second message while it answers the first, as thread APIs do "
            "(OpenAI Assistants, LangGraph's multitask_strategy=reject). If that is by design, run a script without "
            "burst steps (--script), or judge memory alone with --gate errors=off"]


SIBLING_RE = re.compile(r"(gf[0-9a-f]{16})(.+)", re.S)  # a goldfish session id, then more: a key beside its key


def sibling_keys(classes: dict, foreign: ForeignKeys, owned: SessionSet, template: str) -> list[str]:
    """A warning when turns are unanswered or lost and keys under the template are named after this run's
    sessions with more after the id: the bot may keep part of each history in a key of its own beside the one
    the template names (its replies in ``message_store:<id>:ai``), which the audit does not read. A bot whose
    memory worked FAILed "unanswered: 100%", explained as an answer never kept (bot hunt 9)."""
    findings = classes.get("unanswered", 0) + classes.get("lost", 0)
    prefix, _, suffix = template.partition("{session}")
    siblings = []
    for key in foreign.examples if findings else ():
        if key.startswith(prefix) and key.endswith(suffix):
            match = SIBLING_RE.fullmatch(key[len(prefix):len(key) - len(suffix)])
            if match and owned.contains([match[1]])[0]:
                siblings.append(key)
    if not siblings:
        return []
    return [f"store: keys named after this run's sessions with more after the id hold entries the audit does not "
            f"read ({', '.join(siblings[:3])}; store/foreign.jsonl lists them): if the bot keeps part of each "
            f"history there (its replies in a key of their own), its {findings:,} unanswered and lost findings may "
            "be kept there rather than lost. Read all of a session's keys with --reader (a function from session ids "
            "to histories: docs/oracle.md \"Readers\")"]


def renamed_keys(foreign: ForeignKeys) -> list[str]:
    """A warning when keys under the template name this run's sessions in another place than the template does: the
    bot files (some) histories under another key name, such as a prefix a release renamed mid-run. They were counted
    as keys that are not this run's (bot hunt 15)."""
    if not foreign.named_after_run:
        return []
    return [f"store: {foreign.named_after_run:,} key(s) under the key template name this run's sessions in another "
            f"place than the template does (for example {', '.join(foreign.named_examples[:3])}): the bot files "
            "histories under another key name (a key a release renamed, mid-run if some sessions are also where the "
            "template says). They are this run's, and not judged: turns kept there are lost where the template "
            "points"]


def window_warning(window: dict) -> str:
    n = window["user_entries"]
    return (f"in each of the {window['sessions']:,} sessions with lost turns, the lost turns are its oldest and its "
            f"key holds exactly {n} user entries: the bot seems to keep only its last {n} exchanges (a window memory, "
            f"LTRIM, or the older ones replaced by a summary). That forgets by design: if it is meant to, judge recall "
            f"by probes inside the window and gate stored_loss off (--gate stored_loss=off); if not, the trimming is "
            f"the bug")


def _judge(context: Context, jobs: int) -> tuple[Tally, list]:
    """Every partition judged: here, or split over a pool of ``jobs`` processes; their tallies added up."""
    if jobs == 1:
        return judge.judge_partitions(context, list(range(PARTITIONS)))
    shares = [list(range(k, PARTITIONS, jobs)) for k in range(jobs)]
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"), initializer=_quiet_judge,
                               initargs=(os.getpid(),))
    try:
        done = list(pool.map(judge.judge_partitions, [context] * jobs, shares))
    except BaseException as exc:
        # a judge's store error, SIGTERM or Ctrl-C to this process: the other judges stop now, not judge on to
        # nothing. Killed, not joined: one killed while holding the pool's queue lock left the rest waiting on it,
        # and the audit hung (a Redis at maxclients)
        for process in multiprocessing.active_children():
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(exc, BrokenProcessPool):
            raise WorkerError(f"a judging process died ({exc}); run the audit again with --jobs 1 to see why") from None
        raise
    pool.shutdown()
    tally = done[0][0]
    for other, _ in done[1:]:
        tally.merge(other)
    return tally, sorted((r for _, share in done for r in share), key=lambda r: r.partition)


AUDIT_OUTPUTS = ("summary.json", "anomalies.jsonl", "sessions.csv", "windows.csv")


def _own_outputs(folder: RunFolder) -> None:
    """The audit writes only this run's own files: an ``audit/`` (or one of its tables) that is a symbolic link
    into another run had that run's tables replaced by this one's, before anything is read, exit 2."""
    for path in (folder.audit, *(folder.audit / name for name in AUDIT_OUTPUTS)):
        if path.is_symlink():
            raise SnapshotError(f"{path} is a symbolic link (to {os.readlink(path)}): the audit would write through "
                                "it and replace what it points to; replace it by this run's own, or remove it")
    # a table that cannot be replaced (a folder in its place) failed the audit half way, after the store was read
    # again: some tables new beside an old verdict. Refused before anything is read
    parts = folder.audit / "parts"
    if folder.audit.exists() and not folder.audit.is_dir() or parts.exists() and not parts.is_dir():
        raise SnapshotError(f"{parts if folder.audit.is_dir() else folder.audit} is not a folder: the audit writes "
                            "its files there; move it away and audit again")
    blocked = next((path for name in AUDIT_OUTPUTS for path in (folder.audit / name, folder.audit / f"{name}.tmp")
                    if path.is_dir()), None)
    if blocked is not None:
        raise SnapshotError(f"{blocked} is a folder: the audit writes a table there; move it away and audit again")


def _quiet_judge(audit_pid: int) -> None:
    """A judging process leaves signals to the audit's own process, which stops it: Ctrl-C (and a closed terminal's
    SIGHUP) reaches the whole process group, and the SIGTERM handler it inherits made each judge print a traceback as it was stopped.
    It dies with the audit (Linux's parent-death signal): an audit SIGKILLed (out of memory, a CI timeout) left
    its judges blocked on a store forever, holding the run's audit lock, so every later audit was refused."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: the audit goes on (oracle/audit_cli.py)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the judges then outlive a killed audit, as before
        return
    if os.getppid() != audit_pid:  # the audit died before the signal was set
        os._exit(1)


def in_process_evidence(run_dir: Path, faults: list, tally) -> dict | None:
    """What says a bot keeps its memory in its process, for a store that holds nothing of the run and a bot that
    mostly remembered: recall probes failing only when another replica than the plant's answered (the journal's
    --replica-header; uvicorn --workers 2 behind keep-alive, LangChain hunt 17), or only after chaos first
    restarted something (``first_restart``). None when neither."""
    from oracle import breakdown

    match = next((t for t in breakdown.compute(run_dir)["tables"] if t["key"] == "replica_match"), None)
    rows = {r["group"]: r for r in (match or {}).get("rows", ())}
    same, other = rows.get("the replica that took the plant"), rows.get("another replica")
    if same and other and same["total"] and not same["count"] and other["count"]:
        return {"replicas": {"failed": other["count"], "other": other["total"], "same": same["total"]}}
    return first_restart(faults, tally)


def first_restart(faults: list, tally) -> dict | None:
    """The first kill or restart chaos applied, with the recall probes that failed before its window: a bot that
    keeps its memory in its own process remembers until its first restart, and the store holds nothing of it."""
    f = min((f for f in faults if f.effective and f.kind in ("kill", "restart")), key=lambda f: f.start, default=None)
    if f is None:
        return None
    windows, column = tally.windows, WINDOW_COUNTS.index("probes_failed")
    earlier = 0 if windows.start is None else max(0, int(f.start // tally.window_s) - windows.start)
    before = int(windows.counts[:earlier, column].sum())
    return {"kind": f.kind, "target": f.target or f.instance or "a target", "at": f.start, "failed_before": before}


def _jobs(jobs: int | None, journal: Journal, store: StoreOptions | None) -> int:
    """Processes judging partitions: as asked, else one per core (at most 8) for a journal big enough to
    repay starting them; one for a test's per-batch hook, the HTTP and function readers (a bot's API or a
    user's function may not like parallel callers), and a gevent-patched process."""
    if jobs is None:
        small = sum(shard.stat().st_size for shard in journal.shards) < PARALLEL_MIN_BYTES
        simple = store is not None and (store.on_batch is not None or store.name() != "redis")
        jobs = 1 if small or simple or _gevent_patched() else min(os.cpu_count() or 1, 8)
    return max(1, min(jobs, PARTITIONS))


def _gevent_patched() -> bool:
    """Forking a gevent-patched process (Locust's) is unsafe: its audit judges in-process."""
    try:
        from gevent import monkey
    except ImportError:
        return False
    return monkey.is_module_patched("socket")


def _concatenate(folder: RunFolder, name: str, target, header: str = ""):
    """The partitions' files of ``name`` put together, in partition order."""
    with open(target, "wb") as out:
        out.write(header.encode())
        for p in range(PARTITIONS):
            part = folder.audit_part(p, name)
            if part.exists():
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, out)
    return target


@contextmanager
def _tables_or_nothing(folder: RunFolder):
    """The tables are written as a set or not at all: when the run folder's device refuses a write (full,
    read-only), this audit's temporaries go (``audit/*.tmp``, ``audit/parts/``) and CannotWrite says so; the
    earlier tables stand."""
    try:
        yield
    except OSError as exc:
        full = cannot_write(exc, f"the audit's tables in {folder.audit}")
        if full is None:
            raise
        for tmp in folder.audit.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        shutil.rmtree(folder.audit / "parts", ignore_errors=True)
        raise full from None


def _peak_rss() -> dict:
    """Peak memory of this process and of the largest judging process so far (MB)."""
    import resource

    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def journal_verdict(run_dir, gates: verdict.Gates | None = None, recovery_s: float = 5.0) -> dict:
    """The verdict from the journal alone, when the store is not audited: what the clients saw online
    (failed probes, cross-talk in replies, failed requests no fault explains); the gates that need the
    store are "not measured". Returns ``{"turns", "observed", "verdict", "problems", "problems_total"}`` (the
    journal's warnings: the first 100 texts and their count). Streams: flat memory.
    Raises JournalError without a turn, TimelineError (one of them) on a damaged chaos timeline."""
    import numpy as np

    from oracle.attribution import intervals, overlapping
    from oracle.history import decode_turns, join_pieces

    folder = RunFolder(run_dir)
    journal = Journal.open(folder.path)
    problems: list[str] = []
    faults = load_faults(folder.path, problems)
    margins = intervals(faults, float("inf"), recovery_s)
    counts = Counter()
    span = [float("inf"), float("-inf")]  # the first send and the last answer: where this run's faults lie
    leaked: set = set()

    def count(turns: list) -> None:
        if not turns:
            return
        sent = np.array([t.sent for t in turns])
        done = np.array([t.received if t.received is not None else t.sent for t in turns])
        quiet = ~overlapping(sent, done, margins)
        span[:] = min(span[0], float(sent.min())), max(span[1], float(done.max()))
        for t, calm in zip(turns, quiet.tolist()):
            ok = t.outcome == "ok"
            error = not ok and not t.interrupted
            answered = ok and t.kind == "probe" and t.verdict in ("pass", "amnesia")
            counts.update({"total": 1, "ok": ok, "fail": t.outcome == "fail", "info": t.outcome == "info",
                           "probes": t.kind == "probe", "probes_interrupted": t.kind == "probe" and t.interrupted,
                           "errors": error, "probes_answered": answered,
                           "probes_failed": answered and t.verdict == "amnesia",
                           "crosstalk_replies": bool(t.crosstalk), "errors_quiet": error and calm, "quiet": calm,
                           "sessions": t.turn == 0, "leaked": bool(t.crosstalk) and t.session not in leaked})
            if t.crosstalk:
                leaked.add(t.session)

    # session by session, as the audit reads it (flat memory: only the conversations still open and a batch are
    # held), so a turn is counted once: an outcome supersedes its in-flight record, a session whose lines come in
    # pieces (its user went on, then a line of it came) is put together within a batch as the audit's judge does,
    # and a turn journaled twice with records that disagree is a journal line that is not a turn, as in the audit
    # (oracle.history.decode_turns; before, both records were counted and the verdict depended on which came)
    found, batch = Problems(), []

    def flush() -> None:
        by: dict[str, list] = {}
        for entry in batch:
            turns, texts, unreadable = decode_turns(entry)
            if turns and entry.session in by:
                turns, more, joined = join_pieces(entry, by[entry.session], turns)
                texts, unreadable = texts + more, unreadable + joined
            counts["unreadable"] += unreadable
            found.extend(texts)
            if turns:
                by[entry.session] = turns
        count([t for turns in by.values() for t in turns])
        batch.clear()

    for _, entry in journal.completed():
        batch.append(entry)
        if len(batch) >= 1000:  # sessions, as the audit's --batch: one array pass per batch, not per session
            flush()
    flush()
    counts["unreadable"] += journal.unreadable  # lines that name no session
    found.merge(journal.problems)
    if not counts["total"]:
        raise NoRecords(f"{folder.journal} holds no valid journal records")
    check_faults(folder.path, faults, *span, problems)  # as the audit does: a damaged timeline excuses nothing
    observed = {"probe_amnesia": {"count": counts["probes_failed"], "total": counts["probes_answered"]},
                "crosstalk": {"count": counts["leaked"], "total": max(counts["sessions"], counts["leaked"])},
                "errors": {"count": counts["errors_quiet"], "total": counts["quiet"]},
                "unreadable": {"count": counts["unreadable"], "total": counts["total"] + counts["unreadable"]}}
    gates = gates or verdict.parse_gates(None)
    judged = verdict.require_applied(verdict.require_healed(verdict.require_quiet(verdict.require_measured(
        verdict.evaluate(observed, gates), counts["ok"], counts["probes"], counts["probes_answered"], gates,
        scripted_probes(folder), counts["probes_interrupted"]),
        counts["errors"], counts["errors_quiet"], counts["quiet"], counts["total"], gates), faults),
        unapplied(folder.path))
    judged["root_causes"] = verdict.root_causes({}, 0, observed["probe_amnesia"]["count"], counts["leaked"])
    turns = {k: int(counts[k]) for k in ("total", "ok", "fail", "info", "errors", "probes_answered", "probes_failed",
                                         "crosstalk_replies")}
    return {"turns": turns, "observed": observed, "verdict": judged,
            "problems": found.texts, "problems_total": found.total}
