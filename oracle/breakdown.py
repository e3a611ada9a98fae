"""Amnesia broken down where the breakdown explains the bug: ``audit/breakdown.json`` for the report.

Failed probes (of the probes with a verdict) by
- fact;
- distance from the plant the probe expects to the probe, in turns and in seconds: a context window of
  k turns shows as a cliff at k (recalled up to k turns after the plant, forgotten beyond);
- the replica that answered the probe, and whether it is the one that took the plant (journal ``replica``,
  with ``--replica-header``): memory kept per process fails exactly when they differ;
- what came between plant and probe: a double-send (burst) in between, or not;
and acknowledged turns the store lost (the audit's ``lost`` findings) by turn kind: a read-modify-write
race loses the turns of a double-send.

Computed from the journal alone (plus ``audit/anomalies.jsonl`` when the run was audited), streaming each
shard once: a session's plants are kept only while its user holds it (a user holds one conversation at a
time), so memory grows with the number of users, not of sessions.
"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from oracle.metrics import INTERRUPTED, wilson

FILE = "breakdown.json"
SECOND_BINS = (0, 1, 2, 5, 10, 30, 60, 300)
CLIFF_MIN_SHARE = 0.95  # a cliff explains at least this share of the probes on both sides of it


def _records(shard: Path):
    """The records of one journal shard; a torn last line is skipped, other bad lines too (the audit reports them)."""
    with open(shard, "rb") as f:
        for line in f:
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


def _lost_turns(run_dir: Path) -> set[tuple[str, int]] | None:
    path = run_dir / "audit" / "anomalies.jsonl"
    if not path.is_file():
        return None
    lost = set()
    for rec in _records(path):
        if rec.get("class") == "lost" and rec.get("session") is not None and rec.get("turn") is not None:
            lost.add((rec["session"], int(rec["turn"])))
    return lost


def _seconds_bin(seconds: float) -> str:
    for low, high in zip(SECOND_BINS, SECOND_BINS[1:]):
        if seconds < high:
            return f"{low}-{high} s"
    return f">= {SECOND_BINS[-1]} s"


class _Session:
    __slots__ = ("plants", "bursts")

    def __init__(self):
        self.plants: dict[str, dict] = {}  # fact -> the latest plant that may be stored (ok or info)
        self.bursts: list[int] = []        # turn indices of double-sent turns


def compute(run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    lost = _lost_turns(run_dir)
    groups: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # table -> group -> [failed, probes]
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # kind -> [lost, acknowledged]
    replicas_seen = False
    for shard in sorted((run_dir / "journal").glob("*.jsonl")):
        sessions: dict[str, _Session] = {}
        holding: dict[str, str] = {}  # user -> the session it holds
        for r in _records(shard):
            session = r.get("session")
            if session is None or str(r.get("error") or "").startswith(INTERRUPTED):
                continue
            user = r.get("user")
            if user is not None and holding.get(user) != session:
                sessions.pop(holding.get(user), None)  # that user's previous conversation is over
                holding[user] = session
            state = sessions.setdefault(session, _Session())
            kind, outcome, turn = r.get("kind"), r.get("outcome"), int(r.get("turn") or 0)
            replicas_seen = replicas_seen or r.get("replica") is not None
            if outcome == "ok" and lost is not None:
                kinds[kind][1] += 1
                kinds[kind][0] += (session, turn) in lost
            if kind == "burst":
                state.bursts.append(turn)
            elif kind == "plant" and outcome != "fail" and r.get("fact"):
                state.plants[r["fact"]] = r
            elif kind == "probe" and r.get("verdict") in ("pass", "amnesia"):
                failed = r["verdict"] == "amnesia"

                def count(table: str, group) -> None:
                    cell = groups[table][group]
                    cell[0] += failed
                    cell[1] += 1

                count("fact", r.get("fact") or "?")
                plant = state.plants.get(r.get("fact"))
                if plant is not None:
                    count("distance_turns", turn - int(plant.get("turn") or 0))
                    planted = plant.get("received") or plant.get("sent")
                    if planted is not None and r.get("sent") is not None:
                        count("distance_seconds", _seconds_bin(max(0.0, float(r["sent"]) - float(planted))))
                    between = any(int(plant.get("turn") or 0) < b < turn for b in state.bursts)
                    count("between", "a double-send between plant and probe" if between else "no double-send between")
                    if r.get("replica") is not None and plant.get("replica") is not None:
                        count("replica_match", "the replica that took the plant" if r["replica"] == plant["replica"]
                              else "another replica")
                if r.get("replica") is not None:
                    count("replica", r["replica"])
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
                             {k: v for k, v in kinds.items() if v[1]}, counts="lost turns", over="acknowledged turns"))
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
    """Compute and write ``audit/breakdown.json``; return its path."""
    run_dir = Path(run_dir)
    out = run_dir / "audit" / FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    data = compute(run_dir)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_json_default), encoding="utf-8")
    tmp.replace(out)
    return out


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def load(run_dir: str | Path) -> dict | None:
    """``audit/breakdown.json``, written afresh when the journal or the audit is newer (or it is missing)."""
    run_dir = Path(run_dir)
    path = run_dir / "audit" / FILE
    sources = list((run_dir / "journal").glob("*.jsonl")) + [run_dir / "audit" / "anomalies.jsonl"]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=None)
    try:
        if newest is not None and (not path.is_file() or path.stat().st_mtime < newest):
            write(run_dir)
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError) as exc:
        print(f"warning: {path}: {exc}", file=sys.stderr)
        return None
