"""Headline rates with 95% Wilson intervals, and the turn table the windows are cut from.

Wilson rather than the normal approximation because amnesia rates sit near 0 and windows
are small; scipy computes it (``binomtest(k, n).proportion_ci(method="wilson")``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def wilson(count: int, total: int) -> dict:
    """``{"count", "total", "rate", "low", "high"}``; rate and bounds are null when total is 0."""
    count, total = int(count), int(total)
    if total <= 0:
        return {"count": count, "total": total, "rate": None, "low": None, "high": None}
    from scipy.stats import binomtest  # lazy: scipy.stats takes seconds to import

    ci = binomtest(count, total).proportion_ci(confidence_level=0.95, method="wilson")
    return {"count": count, "total": total, "rate": count / total, "low": float(ci.low), "high": float(ci.high)}


def quantiles(values) -> dict:
    values = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.quantile(values, [0.5, 0.95, 0.99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def turn_table(journal, lost: set, anomalous: set) -> pd.DataFrame:
    """One row per journaled turn, sessions in journal order, with the audit's per-turn verdicts.

    ``sidx`` numbers each row's session in journal order (for the per-session sums). Text
    columns are plain object arrays: pandas' string dtype would check every one of a
    million values on the way in and gains nothing here.
    """
    turns = [t for ts in journal.sessions.values() for t in ts]
    received = [t.received for t in turns]
    df = pd.DataFrame({
        "session": _objects([t.session for t in turns]), "turn": np.array([t.turn for t in turns], dtype=np.int64),
        "kind": _objects([t.kind for t in turns]), "outcome": _objects([t.outcome for t in turns]),
        "sent": np.array([t.sent for t in turns], dtype=float),
        "received": np.array([np.nan if r is None else r for r in received] if None in received else received,
                             dtype=float),
        "verdict": _objects([t.verdict for t in turns]),
        "step": pd.to_numeric(_objects([t.step for t in turns]), errors="coerce"),
        "online_crosstalk": np.array([bool(t.crosstalk) for t in turns], dtype=bool),
        "lost": _member(turns, lost), "anomalous": _member(turns, anomalous),
        "sidx": np.repeat(np.arange(len(journal.sessions)), [len(ts) for ts in journal.sessions.values()]),
    })
    df["latency"] = df["received"] - df["sent"]
    df["done"] = df["received"].fillna(df["sent"])
    probe_ok = (df["kind"].to_numpy() == "probe") & (df["outcome"].to_numpy() == "ok")
    df["answered_probe"] = probe_ok & df["verdict"].isin(["pass", "amnesia"]).to_numpy()
    df["failed_probe"] = df["answered_probe"].to_numpy() & (df["verdict"].to_numpy() == "amnesia")
    return df


def _objects(values: list) -> pd.Series:
    """Python objects as they are (a bare object array would be re-typed as pandas' string dtype)."""
    return pd.Series(np.fromiter(values, dtype=object, count=len(values)), dtype=object)


def _member(turns: list, pairs: set) -> np.ndarray:
    if not pairs:
        return np.zeros(len(turns), bool)
    return np.fromiter(((t.session, t.turn) in pairs for t in turns), bool, len(turns))
