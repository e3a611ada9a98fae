"""Amnesia broken down where the breakdown explains the bug: ``audit/breakdown.json`` for the report.

Failed probes (of the probes with a verdict) by
- fact;
- distance from the plant the probe expects to the probe, in turns and in seconds: a context window of
  k turns shows as a cliff at k (recalled up to k turns after the plant, forgotten beyond);
- the replica that answered the probe, and whether it is the one that took the plant (journal ``replica``,
  with ``--replica-header``): memory kept per process fails exactly when they differ;
- what came between plant and probe: a double-send (burst) in between, or not;
and acknowledged turns the store lost by turn kind (counted by the audit as it judges:
``summary.turns.lost_by_kind``): a read-modify-write race loses the turns of a double-send.

Computed from the journal alone (plus the audit's summary when the run was audited), streaming each
shard once: a session's plants are kept only while its user holds it (a user holds one conversation at a
time), so memory grows with the number of users, not of sessions or of lost turns.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional, Union

import msgspec

from contracts import codec
from contracts.journal import Turn
from contracts.runfolder import RunFolder, open_regular, write_text
from oracle.history import Journal, JournalError, decode_turns
from oracle.metrics import wilson
from oracle.report_data import Rate

FILE = "breakdown.json"
SECOND_BINS = (0, 1, 2, 5, 10, 30, 60, 300)
CLIFF_MIN_SHARE = 0.95  # a cliff explains at least this share of the probes on both sides of it


class _Row(Rate, kw_only=True):
    group: Union[int, float, str]


class _Table(msgspec.Struct):
    key: str
    title: str
    by: str
    counts: str
    over: str
    rows: list[_Row]


class _Cliff(msgspec.Struct):
    k: int
    recalled: tuple[int, int]
    forgotten: tuple[int, int]


class Breakdown(msgspec.Struct):
    """breakdown.json's shape: what the report's template reads of it."""
    probes: int
    failed: int
    replicas: bool
    cliff: Optional[_Cliff]
    tables: list[_Table]


class _KindCounts(msgspec.Struct):
    lost: int
    acknowledged: int


def _lost_by_kind(run_dir: Path) -> dict[str, list[int]] | None:
    """turn kind -> [lost, acknowledged] as the audit counted them; None when the run was not audited (or
    by a goldfish that did not count them, or the summary is damaged: the report says so itself)."""
    try:
        with open_regular(RunFolder(run_dir).summary) as fh:
            counts = codec.loads_object(fh.read()).get("turns", {}).get("lost_by_kind")
        counts = msgspec.convert(counts, dict[str, _KindCounts])
    except (OSError, ValueError, AttributeError, msgspec.ValidationError):
        return None
    return {kind: [c.lost, c.acknowledged] for kind, c in counts.items()
            if 0 <= c.lost <= c.acknowledged and c.acknowledged > 0}


def _seconds_bin(seconds: float) -> str:
    for low, high in zip(SECOND_BINS, SECOND_BINS[1:]):
        if seconds < high:
            return f"{low}-{high} s"
    return f">= {SECOND_BINS[-1]} s"


def compute(run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    lost = _lost_by_kind(run_dir)
    groups: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # table -> group -> [failed, probes]
    replicas_seen = False
    for _, entry in Journal.open(run_dir).completed():  # one session at a time, as the audit reads them
        turns, _, _ = decode_turns(entry)
        plants: dict[str, Turn] = {}  # fact -> the latest plant that may be stored (ok or info)
        bursts: list[int] = []        # turn indices of double-sent turns
        for r in turns:
            if r.interrupted:
                continue
            replicas_seen = replicas_seen or r.replica is not None
            if r.kind == "burst":
                bursts.append(r.turn)
            elif r.kind == "plant" and r.outcome != "fail" and r.fact:
                plants[r.fact] = r
            elif r.kind == "probe" and r.verdict in ("pass", "amnesia"):
                failed = r.verdict == "amnesia"

                def count(table: str, group) -> None:
                    cell = groups[table][group]
                    cell[0] += failed
                    cell[1] += 1

                count("fact", r.fact or "?")
                plant = plants.get(r.fact)
                if plant is not None:
                    count("distance_turns", r.turn - plant.turn)
                    planted = plant.received if plant.received is not None else plant.sent
                    count("distance_seconds", _seconds_bin(max(0.0, r.sent - planted)))
                    between = any(plant.turn < b < r.turn for b in bursts)
                    count("between", "a double-send between plant and probe" if between else "no double-send between")
                    if r.replica is not None and plant.replica is not None:
                        count("replica_match", "the replica that took the plant" if r.replica == plant.replica
                              else "another replica")
                if r.replica is not None:
                    count("replica", r.replica)
    tables = [_table("fact", "Failed probes by fact", "fact", groups["fact"]),
              _table("distance_turns", "Failed probes by turns from plant to probe", "turns after the plant",
                     groups["distance_turns"]),
              _table("distance_seconds", "Failed probes by seconds from plant to probe", "seconds after the plant",
                     groups["distance_seconds"]),
              _table("between", "Failed probes by what came between plant and probe", "in between", groups["between"])]
    if replicas_seen:
        tables += [_table("replica", "Failed probes by the replica that answered the probe", "replica",
                          groups["replica"]),
                   _table("replica_match", "Failed probes by where the probe landed", "probe answered by",
                          groups["replica_match"])]
    if lost is not None:
        tables.append(_table("lost_by_kind", "Acknowledged turns the store lost, by turn kind", "turn kind",
                             lost, counts="lost turns", over="acknowledged turns"))
    probes = sum(v[1] for v in groups["fact"].values())
    failed = sum(v[0] for v in groups["fact"].values())
    return {"probes": probes, "failed": failed, "replicas": replicas_seen,
            "cliff": cliff(groups["distance_turns"]), "tables": [t for t in tables if t["rows"]]}


def _sort_key(group):
    if isinstance(group, (int, float)):
        return (0, group, "")
    text = str(group)
    number = text.split("-")[0].lstrip(">= ").strip()
    try:
        return (0, float(number), text)
    except ValueError:
        return (1, 0, text)


def _table(key: str, title: str, by: str, cells: dict, counts: str = "failed probes", over: str = "probes") -> dict:
    rows = [{"group": group, **wilson(failed, total)} for group, (failed, total) in
            sorted(cells.items(), key=lambda item: _sort_key(item[0]))]
    return {"key": key, "title": title, "by": by, "counts": counts, "over": over, "rows": rows}


def cliff(by_distance: dict) -> dict | None:
    """The distance k that best splits recalled (<= k turns) from forgotten (> k), when it explains at
    least CLIFF_MIN_SHARE of the probes on each side and both sides exist: the signature of a context
    window of k turns."""
    distances = sorted(d for d in by_distance if isinstance(d, int))
    best = None
    for k in distances[:-1]:
        near = [by_distance[d] for d in distances if d <= k]
        far = [by_distance[d] for d in distances if d > k]
        near_failed, near_total = sum(c[0] for c in near), sum(c[1] for c in near)
        far_failed, far_total = sum(c[0] for c in far), sum(c[1] for c in far)
        if not near_total or not far_total:
            continue
        recalled, forgotten = 1 - near_failed / near_total, far_failed / far_total
        if recalled >= CLIFF_MIN_SHARE and forgotten >= CLIFF_MIN_SHARE:
            score = recalled + forgotten
            if best is None or score > best[0]:
                best = (score, {"k": k, "recalled": [near_total - near_failed, near_total],
                                "forgotten": [far_failed, far_total]})
    return None if best is None else best[1]


def write(run_dir: str | Path) -> Path:
    """Compute and write ``audit/breakdown.json`` (whole or not at all); return its path."""
    run_dir = Path(run_dir)
    out = run_dir / "audit" / FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, codec.dumps_document(compute(run_dir)))
    return out


def load(run_dir: str | Path, warnings: list[str] | None = None) -> dict | None:
    """``audit/breakdown.json``, the audit's companion: written afresh from the journal when it is missing, damaged
    or older than the audit (``audit/summary.json``; the journal's, when the run has no audit). A journal newer than
    the audit is not what the audit judged (emptied, damaged, replaced since): a breakdown already written is kept,
    never replaced by one computed from it (that was every probe's breakdown lost to an emptied journal), and the
    warning says to audit the run again, after which the audit is newer and the breakdown follows it. What went
    wrong goes to ``warnings`` (the report's), else to stderr."""
    def warn(text: str) -> None:
        warnings.append(text) if warnings is not None else print(f"warning: {text}", file=sys.stderr)

    def mtime(files: list[Path]) -> float | None:
        return max((p.stat().st_mtime for p in files if p.is_file()), default=None)

    run_dir = Path(run_dir)
    path = run_dir / "audit" / FILE
    folder = RunFolder(run_dir)
    try:
        journal, audit = mtime(folder.shards() + list(folder.workers.glob("*.jsonl"))), mtime([folder.summary])
        changed = journal is not None and audit is not None and journal > audit
        if changed:
            warn(f"{folder.journal} changed since the audit ({folder.summary} is older): "
                 + ("the breakdown written before is kept" if path.is_file() else
                    "the breakdown shown is of the journal as it is now (not saved)")
                 + f"; audit the run again (python -m oracle audit {run_dir}) to bring them together")
            if not path.is_file():
                return _valid(compute(run_dir))
        newest = audit if audit is not None else journal
        if not path.is_file() or (not changed and newest is not None and path.stat().st_mtime < newest):
            write(run_dir)
        if not path.is_file():
            return None
        try:
            return _checked(path)
        except ValueError as exc:  # a damaged copy: it is derived, so it is made again from the (audited) journal
            if changed:
                raise
            warn(f"{path}: {exc}; computed again from the journal")
            write(run_dir)
            return _checked(path)
    except (OSError, ValueError, JournalError) as exc:
        warn(f"{path}: {exc}; the breakdown is left out")
        return None


def _checked(path: Path) -> dict:
    """The file as the template reads it; msgspec.ValidationError naming the field (``$.tables[0].rows``)."""
    with open_regular(path) as fh:
        return _valid(codec.loads_object(fh.read()))


def _valid(data: dict) -> dict:
    return msgspec.to_builtins(msgspec.convert(data, Breakdown))
