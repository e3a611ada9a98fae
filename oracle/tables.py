"""The audit's tables: sessions.csv, windows.csv and the summary dict (pandas from here on).

The streaming judge (oracle/audit.py) keeps full per-session rows only for sessions with
something to report. Everything a session row says about the journal (turns, outcomes,
probes, times) is summed here for all sessions at once from the turn table, so a clean
session costs no Python work of its own.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from contracts import codec
from contracts.runfolder import RunFolder
from oracle.attribution import by_fault, by_step, intervals, overlapping
from oracle.csvfile import write_csv
from oracle.metrics import quantiles, turn_table, wilson
from oracle.timeline import load_faults, load_steps
from oracle.windows import window_table

SESSION_COLUMNS = ["session", "turns", "ok", "fail", "info", "info_stored", "probes", "probes_answered",
                   "probes_failed", "lost", "crosstalk", "reordered", "duplicated", "corrupt", "vanished",
                   "unanswered", "anomalous", "first_sent", "last_received",
                   # additions after the pinned columns (backward compatible)
                   "expired", "aborted", "lost_turns", "crosstalk_online", "exists", "misrouted"]
# what only the store can say; a proven-clean session has 0 of each and exists
STORE_COLUMNS = ["info_stored", "lost", "crosstalk", "reordered", "duplicated", "corrupt", "vanished",
                 "unanswered", "expired", "aborted", "lost_turns", "misrouted"]


def session_table(turns: pd.DataFrame, sessions: int, judged: list[str], positions: list[int],
                  dirty: dict[str, dict]) -> pd.DataFrame:
    """One row per judged session, in judging order: journal sums for all, store columns from ``dirty``.

    ``positions``: each judged session's place in the journal (its ``sidx``)."""
    n = sessions
    sidx = turns["sidx"].to_numpy()

    def total(mask) -> np.ndarray:
        return np.bincount(sidx, weights=mask, minlength=n).astype(np.int64)

    starts = np.flatnonzero(np.r_[True, sidx[1:] != sidx[:-1]]) if len(sidx) else np.array([], int)
    per_session = pd.DataFrame({
        "turns": np.bincount(sidx, minlength=n),
        "ok": total(turns["ok"].to_numpy()), "fail": total(turns["fail"].to_numpy()),
        "info": total(turns["info"].to_numpy()),
        "probes": total(turns["probe"].to_numpy()),
        "probes_answered": total(turns["answered_probe"].to_numpy()),
        "probes_failed": total(turns["failed_probe"].to_numpy()),
        "crosstalk_online": total(turns["online_crosstalk"].to_numpy()),
        "first_sent": np.minimum.reduceat(turns["sent"].to_numpy(), starts) if n else [],
        "last_received": np.fmax.reduceat(turns["received"].to_numpy(), starts) if n else [],
    })
    table = per_session.iloc[positions].reset_index(drop=True)
    table.insert(0, "session", pd.Series(np.fromiter(judged, dtype=object, count=len(judged)), dtype=object))
    for column in STORE_COLUMNS:
        table[column] = 0
    table["exists"] = True
    table["anomalous"] = ((table["probes_failed"] > 0) | (table["crosstalk_online"] > 0)).astype(np.int64)
    if dirty:
        rows = [i for i, s in enumerate(judged) if s in dirty]
        stats = pd.DataFrame([dirty[judged[i]] for i in rows], index=rows).reindex(
            columns=[*STORE_COLUMNS, "exists", "anomalous"], fill_value=0)
        stats["misrouted"] = stats["misrouted"].fillna(0).astype(np.int64)  # only misrouted sessions have it
        for column in [*STORE_COLUMNS, "exists", "anomalous"]:
            table.loc[rows, column] = stats[column].to_numpy()
    return table[SESSION_COLUMNS]


def tables(run_dir: Path, journal, judged: list[str], dirty: dict, compact: list, lost: set, anomalous: set,
           window_s: float, recovery_s: float, problems: list[str], entries: int = 0) -> dict:
    """sessions.csv, windows.csv and the summary dict."""
    turns = turn_table(journal, lost, anomalous)
    index = {s: i for i, s in enumerate(journal.sessions)}
    positions = [index[s] for s in judged]
    sessions = session_table(turns, len(journal.sessions), judged, positions, dirty)
    write_csv(sessions, RunFolder(run_dir).sessions_csv)
    found = pd.DataFrame(compact, columns=["class", "cause", "session", "turn", "time"])
    faults = load_faults(run_dir, problems)
    effective = [f for f in faults if f.effective]
    steps = load_steps(run_dir, problems)
    windows = window_table(turns, found, effective, steps, window_s)
    write_csv(windows, RunFolder(run_dir).windows_csv)

    if len(judged) != len(journal.sessions):
        turns = turns[np.isin(turns["sidx"].to_numpy(), positions)]
    ok = turns["ok"]
    run_end = float(windows["end"].iloc[-1]) if not windows.empty else 0.0
    span = (turns["done"].max() - turns["sent"].min()) if not turns.empty else 0.0
    fault_rows, baseline = by_fault(turns, windows, faults, run_end, recovery_s)
    counts = Counter(c for c, *_ in compact)
    metrics = {
        "probe_amnesia": wilson(turns["failed_probe"].sum(), turns["answered_probe"].sum()),
        "stored_loss": wilson(sessions["lost_turns"].sum() if len(sessions) else 0, ok.sum()),
        "session_amnesia": wilson(sessions["anomalous"].sum() if len(sessions) else 0, len(sessions)),
        "crosstalk": wilson(((sessions["crosstalk"] + sessions["crosstalk_online"]) > 0).sum()
                            if len(sessions) else 0, len(sessions)),
    }
    return {
        "run": journal.run, "label": _label(run_dir), "window_s": window_s, "recovery_s": recovery_s,
        "sessions": int(len(sessions)),
        "turns": {"total": int(len(turns)), "ok": int(ok.sum()), "fail": int(turns["fail"].sum()),
                  "info": int(turns["info"].sum()), "errors": int(turns["error"].sum()),
                  "interrupted": int((~ok & ~turns["error"]).sum()),
                  "info_stored": int(sessions["info_stored"].sum()) if len(sessions) else 0},
        "metrics": metrics,
        "observed": observed(turns, metrics, Counter(cause for _, cause, *_ in compact), len(sessions),
                             intervals(faults, run_end, recovery_s), entries),
        "throughput": float(ok.sum() / span) if span and span > 0 else 0.0,
        "latency": quantiles(turns.loc[ok, "latency"].to_numpy()),
        "anomalies": dict(sorted(counts.items())),
        "by_fault": fault_rows, "baseline": baseline, "steps": by_step(turns, steps),
        "faults": [{**f.__dict__, "effective": f.effective} for f in faults],
        "problems": problems,
    }


def observed(turns: pd.DataFrame, metrics: dict, causes: Counter, sessions: int,
             fault_intervals: list[tuple[float, float]], entries: int) -> dict:
    """What each gate of the verdict counts, and over what (oracle/verdict.py GATES): one root
    cause counts once (a misrouted turn is cross-talk, not a store loss; a corrupt entry is not
    also lost; a reply stored before its turn is part of the reorder, not unanswered)."""
    ok = int(turns["ok"].sum())

    def of(count, total) -> dict:
        return {"count": int(count), "total": int(total)}

    quiet = ~overlapping(turns["sent"].to_numpy(dtype=float), turns["done"].to_numpy(dtype=float), fault_intervals)
    return {
        "probe_amnesia": of(metrics["probe_amnesia"]["count"], metrics["probe_amnesia"]["total"]),
        "stored_loss": of(metrics["stored_loss"]["count"], ok),
        "crosstalk": of(metrics["crosstalk"]["count"], sessions),
        "duplicated": of(causes["duplicated"], len(turns)),
        "reordered": of(causes["reordered"], sessions),
        "corrupt": of(causes["corrupt"], entries),
        "vanished": of(causes["vanished"], sessions),
        "expired": of(causes["expired"], sessions),
        "unanswered": of(causes["unanswered"], ok),
        "aborted": of(causes["aborted"], len(turns)),
        "errors": of((turns["error"].to_numpy() & quiet).sum(), quiet.sum()),
    }


def _label(run_dir: Path) -> str | None:
    try:
        return codec.load_document(RunFolder(run_dir).run_json).get("label")
    except (OSError, ValueError, AttributeError):
        return None
