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
    """One row per journaled turn, with the audit's per-turn verdicts joined in (column by column)."""
    turns = list(journal.turns())
    df = pd.DataFrame({
        "session": [t.session for t in turns], "turn": [t.turn for t in turns],
        "kind": [t.kind for t in turns], "outcome": [t.outcome for t in turns],
        "sent": np.fromiter((t.sent for t in turns), float, len(turns)),
        "received": np.fromiter((np.nan if t.received is None else t.received for t in turns), float, len(turns)),
        "verdict": [t.verdict for t in turns],
        "step": pd.to_numeric(pd.Series([t.step for t in turns], dtype=object), errors="coerce"),
        "online_crosstalk": np.fromiter((bool(t.crosstalk) for t in turns), bool, len(turns)),
        "lost": np.fromiter(((t.session, t.turn) in lost for t in turns), bool, len(turns)) if lost
        else np.zeros(len(turns), bool),
        "anomalous": np.fromiter(((t.session, t.turn) in anomalous for t in turns), bool, len(turns)) if anomalous
        else np.zeros(len(turns), bool),
    })
    df["latency"] = df["received"] - df["sent"]
    df["done"] = df["received"].fillna(df["sent"])
    df["answered_probe"] = (df["kind"] == "probe") & (df["outcome"] == "ok") & df["verdict"].isin(["pass", "amnesia"])
    df["failed_probe"] = df["answered_probe"] & (df["verdict"] == "amnesia")
    return df
